"""Before and after: an instance's trace as it is beside the same instance with its key's fix
applied (Scenario.fixable, `fixed=True`), on one clock. What changed, in the key's own figures
(the step, or for a serving case ITL p99 and the mixed iteration) and per kernel or op name
(occurrences and total time in each trace, sorted by how much the fix moved them)."""

from __future__ import annotations

import re

import numpy as np

from app.scenario import Instance, observation
from app.trace.builder import Trace


def _label(key: dict) -> str:
    return next(o["label"] for o in key["observations"] if o["id"] == "step_ms")


def step_figures(before: Instance, after: Instance) -> dict:
    """The step before (the key's `step_ms`), after (the fixed build's), the difference, and what
    the key expected. A serving case (its fixed key has `mixed_iteration_ms`) is read by its own
    figures: the fix leaves the median iteration a decode batch and moves ITL p99."""
    key, fixed = before.key, after.fixed_key
    b, a = observation(key, "step_ms"), observation(fixed, "step_ms")
    out = {"before_ms": b, "after_ms": a, "delta_ms": round(a - b, 3),
           "expected_ms": observation(key, "expected_step_ms"), "speedup": observation(key, "speedup"),
           "label": _label(key), "serving": None}
    # A fix that changes what one step holds (skinny-gemm's micro-batch 4: each ProfilerStep
    # after it carries 4x the tokens) compares per unit of work, as its key's label says; where
    # the steps drawn differ from that figure the page says why, or the longer steps drawn
    # above read as a slowdown.
    steps = after.trace(0).profiler_steps_ns()
    if steps:
        drawn_ms = float(np.median([e - s for s, e in steps])) / 1e6
        if abs(drawn_ms - a) > 0.1 * a:
            out["after_label"] = _label(fixed)
            out["after_drawn_ms"] = round(drawn_ms, 3)
    if any(o["id"] == "mixed_iteration_ms" for o in fixed["observations"]):
        bp, ap = observation(key, "itl_p99_ms"), observation(fixed, "itl_p99_ms")
        out["serving"] = {"before_itl_p99_ms": bp, "itl_p99_ms": ap, "delta_itl_p99_ms": round(ap - bp, 3),
                          "expected_itl_p99_ms": observation(key, "expected_itl_p99_ms"),
                          "mixed_iteration_ms": observation(fixed, "mixed_iteration_ms"),
                          "expected_mixed_iteration_ms": observation(key, "expected_step_ms")}
    return out


# Names that number each occurrence (ProfilerStep#12664) are one name in the diff: otherwise
# every step is a row of its own, present on one side only, and buries the kernels.
NUMBERED = re.compile(r"^(ProfilerStep#)\d+$")


def name_totals(t: Trace) -> dict[str, tuple[int, float]]:
    """Every slice name in the trace: (occurrences, total duration in ns), as the timeline
    draws them (every row of the trace); a numbered name (NUMBERED) counted under its stem."""
    n = len(t.names)
    idx = np.asarray(t.name, np.int64)
    count = np.bincount(idx, minlength=n)
    total = np.bincount(idx, weights=np.asarray(t.dur_ns, np.float64), minlength=n)
    out: dict[str, tuple[int, float]] = {}
    for i in np.flatnonzero(count):
        name = NUMBERED.sub(r"\1*", t.names[i])
        c, s = out.get(name, (0, 0.0))  # several names under one stem sum
        out[name] = (c + int(count[i]), s + float(total[i]))
    return out


def name_diff(before: Trace, after: Trace) -> dict:
    """Per name: count and total time before and after and the change, sorted by |change| (then
    name); and the totals over all names (which equal the sums of the two traces' durations)."""
    b, a = name_totals(before), name_totals(after)
    rows = []
    for name in b.keys() | a.keys():
        (cb, sb), (ca, sa) = b.get(name, (0, 0.0)), a.get(name, (0, 0.0))
        rows.append({"name": name, "before_count": cb, "after_count": ca, "before_ms": sb / 1e6,
                     "after_ms": sa / 1e6, "delta_ms": (sa - sb) / 1e6, "delta_count": ca - cb})
    rows.sort(key=lambda r: (-abs(r["delta_ms"]), r["name"]))
    totals = {"before_count": int(len(before)), "after_count": int(len(after)),
              "before_ms": float(np.sum(before.dur_ns)) / 1e6, "after_ms": float(np.sum(after.dur_ns)) / 1e6}
    totals["delta_ms"] = totals["after_ms"] - totals["before_ms"]
    return {"rows": rows, "totals": totals}
