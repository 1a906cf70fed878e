"""The measurements a candidate can run on an instance, printed as the real tools print them.

Each tool is computed from the instance (its trace and artifacts), never canned. This
first set covers the Nsight Systems summaries and the clock readers; the experiments
(synthetic data, CUDA graphs, DDP debug, GEMM microbenchmark), ncu, per-rank,
itl-scatter and request-log follow (issue 3).
"""

from __future__ import annotations

from app.tools import clocks, nsys
from app.tools.base import Tool, ToolNotApplicable

TOOLS: dict[str, Tool] = {t.id: t for t in (*nsys.TOOLS, *clocks.TOOLS)}

__all__ = ["TOOLS", "Tool", "ToolNotApplicable", "run"]


def run(tool_id: str, instance) -> str:
    """The tool's output for this instance; ToolNotApplicable says why it does not apply."""
    from app.scenario import InstanceError

    if tool_id not in TOOLS:
        raise InstanceError(f"unknown tool {tool_id!r}; valid tools: {', '.join(TOOLS)}")
    return TOOLS[tool_id].run(instance)
