"""`per-rank`: the step decomposition of every data-parallel rank, side by side.

There is no vendor tool for this; engineers print it from per-rank timers or read it off
HTA's straggler view. The figures are the instance's per-rank artifacts (the same plan the
rank traces were emitted from), so the table agrees with `tracedojo analyze` over all
rank files (tests/test_tools.py checks that on `straggler`).
"""

from __future__ import annotations

import statistics

from app.tools.base import Tool, ToolNotApplicable, table

# (artifact field, column header); a column shows only when some scenario fills it.
COLUMNS = [("step_ms", "Step (ms)"), ("compute_ms", "Compute (ms)"), ("dataloader_wait_ms", "Input wait (ms)"),
           ("wait_ms", "NCCL wait (ms)"), ("comm_ms", "Comm (ms)"), ("exposed_comm_ms", "Exposed comm (ms)"),
           ("optimizer_ms", "Optimizer (ms)"), ("sm_clock_mhz", "SM clock (MHz)")]


def _rows(inst) -> list[dict]:
    rows = inst.artifacts.get("per_rank")
    if not rows or len(rows) < 2:
        why = ("a single GPU has no ranks to compare" if inst.artifacts.get("gpu", {}).get("count", 1) == 1 else
               "tensor-parallel ranks run each iteration in lockstep and have no step decomposition of their own; "
               "their timing is the serving iteration itself")
        raise ToolNotApplicable(why)
    return rows


def chart(inst) -> dict:
    """Per-rank stacked bars: one series per component, ranks on the x axis."""
    rows = _rows(inst)
    cols = [(k, h) for k, h in COLUMNS if any(k in r for r in rows) and k not in ("step_ms", "sm_clock_mhz")]
    compute = [r["compute_ms"] for r in rows]
    med = statistics.median(compute)
    slow = max(range(len(rows)), key=lambda i: compute[i])
    return {"kind": "bars", "x_label": "rank", "y_unit": "ms", "x": [r["rank"] for r in rows],
            "series": [{"id": k, "label": h, "values": [r.get(k, 0.0) for r in rows]} for k, h in cols],
            "step_ms": [r["step_ms"] for r in rows],
            "max_compute_ms": max(compute), "median_compute_ms": med,
            "spread": round(max(compute) / med, 3) if med else None, "slowest_rank": rows[slow]["rank"]}


def per_rank(inst) -> str:
    rows = _rows(inst)
    c = chart(inst)
    cols = [(k, h) for k, h in COLUMNS if any(k in r for r in rows)]
    body = [[str(r["rank"])] + [_fmt(r.get(k)) for k, _ in cols] for r in rows]
    steps = len(inst.artifacts.get("steps", []))
    out = [f"$ python per_rank_steps.py --world-size {len(rows)}   # mean over {steps} profiled steps, all ranks", "",
           table(["Rank"] + [h for _, h in cols], body), "",
           f" Compute max / median: {c['max_compute_ms']:.2f} / {c['median_compute_ms']:.2f} ms = {c['spread']:.2f}x"
           f" (slowest: rank {c['slowest_rank']})"]
    return "\n".join(out)


def _fmt(v) -> str:
    if v is None:
        return "-"
    return str(v) if isinstance(v, int) else f"{v:.2f}"


TOOLS = (Tool("per-rank", "Per-rank step decomposition", "python per_rank_steps.py", per_rank, chart),)
