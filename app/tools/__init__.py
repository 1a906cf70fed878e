"""The measurements a candidate can run on an instance, printed as the real tools print them.

Each tool is computed from the instance (its trace, its artifacts, the GPU's physics),
never canned, and is offered on every scenario: where it makes no physical sense it
raises ToolNotApplicable with the reason, so choosing the decisive one stays the
candidate's job.
"""

from __future__ import annotations

from app.tools import clocks, experiments, kernels, nsys, processes, ranks, serving
from app.tools.base import Tool, ToolNotApplicable

TOOLS: dict[str, Tool] = {t.id: t for t in (*nsys.TOOLS, *ranks.TOOLS, *clocks.TOOLS, *kernels.TOOLS,
                                            *experiments.TOOLS, *serving.TOOLS, *processes.TOOLS)}

__all__ = ["TOOLS", "Tool", "ToolNotApplicable", "run", "chart"]


def _tool(tool_id: str, options: dict) -> Tool:
    from app.scenario import InstanceError

    if tool_id not in TOOLS:
        raise InstanceError(f"unknown tool {tool_id!r}; valid tools: {', '.join(TOOLS)}")
    tool = TOOLS[tool_id]
    extra = set(options) - set(tool.options)
    if extra:
        raise InstanceError(f"{tool_id} takes no option {sorted(extra)[0]!r}"
                            + (f"; it takes {', '.join(tool.options)}" if tool.options else ""))
    return tool


def run(tool_id: str, instance, **options) -> str:
    """The tool's output for this instance; ToolNotApplicable says why it does not apply."""
    return _tool(tool_id, options).run(instance, **options)


def chart(tool_id: str, instance, **options) -> dict | None:
    """The tool's figures as chart data, or None for a text-only tool."""
    tool = _tool(tool_id, options)
    return tool.chart(instance, **options) if tool.chart else None
