"""How close a generated trace's timing is to real torch.profiler traces (issue 13): the
distributions an expert pulls with one SQL query, for an instance beside the same ones
measured on real traces.

The instance is exported as torch.profiler writes it and read back through the importer
every upload goes through (app/trace/importer.py), so the figures are what a user's own
query on the downloaded file would find. The quantities:

- kernel_gap_us: on each stream, the idle between back-to-back kernels (under 20 µs: the
  next kernel was already queued);
- launch_delay_us: from a launch call's return to its kernel's start, where the kernel
  starts within 50 µs of it (an idle GPU); real traces show a few small negative values
  (the CPU and GPU clocks are correlated, not identical), kept here;
- launch_call_us: cudaLaunchKernel's (or cuLaunchKernel's) own time;
- between_ops_us: on the thread with the most cpu_ops, the host time between consecutive
  top-level ops (Python and the dispatcher), under 1 ms;
- ops_per_launch and input_dims_share: the op tree's density and record_shapes.

The real traces are Holistic Trace Analysis's test traces (MIT), in ../shared/fixtures/kineto
where this runs beside them. Their figures are kept in fidelity_reference.json so a server
without that folder still has its yardstick (`refresh_reference()` rewrites it; a test holds
it to the fixtures where they are present). BOUNDS says how far from the real traces a
generated figure may lie; the fidelity page marks each figure against them and
tests/test_realism.py holds every scenario to them.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from app.trace import importer, kineto

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "kineto"
REFERENCE_FILE = Path(__file__).with_name("fidelity_reference.json")
LAUNCHES = "('cudaLaunchKernel', 'cuLaunchKernel', 'cudaLaunchKernelExC', 'cuLaunchKernelEx')"

QUANTITIES = {
    "kernel_gap_us": ("gaps between back-to-back kernels on a stream", """
        WITH k AS (SELECT pid, stream, ts, dur FROM events WHERE cat = 'kernel' AND ph = 'X'),
        g AS (SELECT ts - lag(ts + dur) OVER (PARTITION BY pid, stream ORDER BY ts) AS v FROM k)
        SELECT v FROM g WHERE v >= 0 AND v < 20"""),
    "launch_delay_us": ("launch call's return to its kernel's start (idle GPU)", f"""
        SELECT k.ts - (l.ts + l.dur) AS v
        FROM events l JOIN events k ON k.correlation = l.correlation
        WHERE l.cat IN ('cuda_runtime', 'cuda_driver') AND l.name IN {LAUNCHES}
          AND k.cat = 'kernel' AND k.ts - (l.ts + l.dur) BETWEEN -5 AND 50"""),
    "launch_call_us": ("cudaLaunchKernel's own time", f"""
        SELECT dur AS v FROM events WHERE cat IN ('cuda_runtime', 'cuda_driver') AND name IN {LAUNCHES}"""),
    "between_ops_us": ("host time between consecutive top-level ops", """
        WITH t AS (SELECT pid, tid FROM events WHERE cat = 'cpu_op' GROUP BY pid, tid ORDER BY count(*) DESC LIMIT 1),
        o AS (SELECT e.ts, e.dur, max(e.ts + e.dur) OVER (ORDER BY e.ts ROWS BETWEEN UNBOUNDED PRECEDING
                                                          AND 1 PRECEDING) AS prev_end
              FROM events e JOIN t USING (pid, tid) WHERE e.cat = 'cpu_op' AND e.ph = 'X')
        SELECT ts - prev_end AS v FROM o WHERE ts >= prev_end AND ts - prev_end < 1000"""),
}
SCALARS = {
    "ops_per_launch": f"""
        SELECT (SELECT count(*) FROM events WHERE cat = 'cpu_op')
               / nullif((SELECT count(*) FROM events WHERE cat IN ('cuda_runtime', 'cuda_driver')
                         AND name IN {LAUNCHES}), 0)""",
    "input_dims_share": """
        SELECT avg(CASE WHEN args ->> 'Input Dims' IS NOT NULL THEN 1.0 ELSE 0.0 END)
        FROM events WHERE cat = 'cpu_op'""",
}
QUANTILES = (10, 50, 90)
MIN_VALUES = 50  # fewer than this and a distribution says nothing
HIST_EDGES_US = np.logspace(-1, 3, 41)  # 0.1 µs to 1 ms, ten bins a decade

# How far a generated figure may lie from the real traces' (for each quantity, each of
# QUANTILES): within [lowest real / FACTOR, highest real x FACTOR]. The real traces differ
# among themselves by about this much (µs-rounded clocks, other hosts, other CUDA versions).
# MAX_MODAL_SHARE: no single value may hold more of a quantity's draws (a constant is a
# generator's; a trace whose clock writes whole µs reaches 16-60% by rounding alone, so the
# limit applies to traces that write fractions, as every generated one does).
FACTOR = 2.0
MAX_MODAL_SHARE = 0.05
# The quantiles judged: a launch call's upper tail is, in a GPU-bound trace, calls blocked on a
# full launch queue (each as long as the kernel it waits for), which the real traces, not
# GPU-bound, do not show; its p10 and p50 are the call itself.
JUDGED_QUANTILES = {"kernel_gap_us": (10, 50, 90), "launch_delay_us": (10, 50, 90), "launch_call_us": (10, 50),
                    "between_ops_us": (10, 50, 90)}
# Where a scenario's pathology is the distribution itself, its quantiles are the case, not a
# tell (a constant still is): the page says so instead of marking them.
PATHOLOGY_SHAPED = {
    ("launch-bound", "kernel_gap_us"): "the GPU waits on each launch: gaps of several µs are the case",
    ("launch-bound", "between_ops_us"): ("a host-bound eager decode: tiny ops and the views between them (reshape, "
                                         "transpose, rotary's slices) a few µs apart, where the real traces' training "
                                         "steps spend 10-60 µs of Python between heavier ops"),
    ("launch-bound", "launch_delay_us"): ("a fifth of the kernels are launched while a weight GEMV still runs and "
                                          "wait behind it, up to its length; the others start within ~3 µs of "
                                          "their launch call's return, a few before it, as on the real traces"),
    ("skinny-gemm", "launch_delay_us"): ("the GPU is the bottleneck: only each micro-step's first layer is launched onto "
                                         "a GPU not far behind the host (it idles at the step boundary); a kernel "
                                         "launched while those first GEMMs run waits behind them, up to their length "
                                         "(20-50 µs), and every later launch runs milliseconds ahead, outside the "
                                         "window; the real traces, far from GPU-bound, launch most kernels onto an "
                                         "idle GPU"),
    ("prefill", "launch_delay_us"): ("the short prompts' prefills run eager and about as fast as the host launches "
                                     "them: a kernel launched while a layer's weight GEMM still runs waits behind "
                                     "it, up to its length (20-50 µs); the decode graph and the long prefill, far "
                                     "behind the host, give none"),
}


def _summary(v: np.ndarray) -> dict:
    if len(v) == 0:
        return {"n": 0}
    r = np.round(v, 3)
    _, counts = np.unique(r, return_counts=True)
    hist, _ = np.histogram(np.clip(v, HIST_EDGES_US[0], HIST_EDGES_US[-1]), HIST_EDGES_US)
    return {"n": int(len(v)), "distinct": int(len(counts)), "modal_share": round(float(counts.max() / len(v)), 4),
            "negative": int((v < 0).sum()), "max": round(float(v.max()), 3),
            **{f"p{q}": round(float(np.percentile(v, q)), 3) for q in (*QUANTILES, 99)},
            "hist": hist.tolist()}


def measure_trace(source: bytes | Path, name: str) -> dict:
    """Every quantity of one Kineto trace (bytes or a file)."""
    t = importer.load(source, name=name)
    try:
        out: dict = {"sub_us_clock": bool(t.float_ts)}
        for q, (_, sql) in QUANTITIES.items():
            out[q] = _summary(np.array([r[0] for r in t.con.execute(sql).fetchall()], dtype=float))
        for q, sql in SCALARS.items():
            v = t.con.execute(sql).fetchone()[0]
            out[q] = None if v is None else round(float(v), 4)
    finally:
        t.con.close()
    return out


def measure_instance(inst, rank: int = 0) -> dict:
    return measure_trace(kineto.dumps(inst.trace(rank), inst.trace_name(rank)).encode(), inst.scenario.id)


def refresh_reference() -> dict:
    """Measure the real traces in FIXTURES and write REFERENCE_FILE (a few KB of figures,
    not the traces)."""
    traces = {f.name.split(".")[0]: measure_trace(f, f.name) for f in sorted(FIXTURES.glob("*.json*"))}
    ref = {"source": "Holistic Trace Analysis test traces (MIT), ../shared/fixtures/kineto", "traces": traces}
    REFERENCE_FILE.write_text(json.dumps(ref, indent=1, sort_keys=True) + "\n")
    reference.cache_clear()
    return ref


@lru_cache(maxsize=1)
def reference() -> dict:
    return json.loads(REFERENCE_FILE.read_text())


def bounds(q: str) -> dict[str, tuple[float, float]]:
    """Per judged quantile of quantity q, the range a generated trace's figure must fall in."""
    real = [t[q] for t in reference()["traces"].values() if t[q].get("n", 0) >= MIN_VALUES]
    widen = lambda x, up: x * FACTOR if (x > 0) == up else x / FACTOR  # noqa: E731 (away from zero or towards it)
    return {f"p{p}": (round(widen(min(r[f"p{p}"] for r in real), False), 3),
                      round(widen(max(r[f"p{p}"] for r in real), True), 3)) for p in JUDGED_QUANTILES[q]} if real else {}


def judge(measured: dict, scenario: str = "") -> dict:
    """The instance's figures, the real traces' and the bounds, with each figure judged:
    {quantity: {"label", "instance", "real": {trace: summary}, "bounds", "out": [reasons],
    "pathology": why its quantiles are the case, or None}}."""
    out = {}
    for q, (label, _) in QUANTITIES.items():
        m = measured[q]
        b = bounds(q)
        shaped = PATHOLOGY_SHAPED.get((scenario, q))
        reasons = []
        if m.get("n", 0) >= MIN_VALUES:
            if m["modal_share"] > MAX_MODAL_SHARE:
                reasons.append(f"one value holds {m['modal_share']:.0%} of {m['n']} (at most {MAX_MODAL_SHARE:.0%})")
            for p, (lo, hi) in b.items():
                if not shaped and not lo <= m[p] <= hi:
                    reasons.append(f"{p} {m[p]:g} µs outside {lo:g}-{hi:g}")
        out[q] = {"label": label, "instance": m, "bounds": b, "out": reasons, "pathology": shaped,
                  "real": {name: t[q] for name, t in reference()["traces"].items() if t[q].get("n", 0) >= MIN_VALUES}}
    for q in SCALARS:
        out[q] = {"instance": measured[q], "real": {name: t[q] for name, t in reference()["traces"].items()}}
    return out


def report(inst, rank: int = 0) -> dict:
    """The fidelity page's content for one instance (its JSON twin returns it as is)."""
    judged = judge(measure_instance(inst, rank), inst.scenario.id)
    return {"scenario": inst.scenario.id, "version": inst.version, "seed": inst.seed, "rank": rank,
            "reference": reference()["source"], "factor": FACTOR, "max_modal_share": MAX_MODAL_SHARE,
            "hist_edges_us": [round(float(x), 4) for x in HIST_EDGES_US],
            "quantities": judged, "tells": {q: v["out"] for q, v in judged.items() if v.get("out")}}


def format_text(rep: dict) -> str:
    """`tracedojo fidelity`: one block per quantity, the instance's line above the real traces'."""
    cols = ("n", "distinct", "modal_share", "p10", "p50", "p90", "p99", "max")
    lines = [f"{rep['scenario']} v{rep['version']} seed {rep['seed']} rank {rep['rank']} against {rep['reference']}",
             f"bounds: each quantile within the real traces' range widened {rep['factor']:g}x; "
             f"no value holding over {rep['max_modal_share']:.0%}", ""]
    for q, v in rep["quantities"].items():
        if "label" not in v:  # a scalar
            real = ", ".join(f"{k} {x}" for k, x in v["real"].items())
            lines.append(f"{q}: {v['instance']}   (real: {real})")
            continue
        verdict = f"OUT: {'; '.join(v['out'])}" if v["out"] else "ok"
        lines.append(f"{q}: {v['label']}  -- {verdict}" + (f" (quantiles not judged: {v['pathology']})"
                                                            if v["pathology"] else ""))
        lines.append(f"  {'':<20}" + " ".join(f"{c:>11}" for c in cols))
        for name, s in [("this instance", v["instance"]), *v["real"].items()]:
            lines.append(f"  {name[:20]:<20}" + " ".join(f"{str(s.get(c, '')):>11}" for c in cols))
        if v["bounds"]:
            lines.append("  bounds " + ", ".join(f"{p} {lo:g}-{hi:g}" for p, (lo, hi) in v["bounds"].items()))
        lines.append("")
    return "\n".join(lines)
