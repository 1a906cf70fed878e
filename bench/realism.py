"""python -m bench realism [--scenario ID ...] [--seed S]: the tells an expert finds in a
generated trace with one SQL query (issue 13), beside the same queries on real traces.

Each scenario's instance (canonical by default) is exported as torch.profiler writes it,
read back by the importer every upload goes through (app/trace/importer.py), and asked the
queries below in DuckDB; so are the real torch.profiler traces in
../shared/fixtures/kineto (Holistic Trace Analysis's, MIT; read in place, skipped where the
folder is absent). A figure far from every real trace's is a tell:

- kernel gaps: on each stream, the idle between back-to-back kernels (under 20 µs): how
  many distinct values, and the share of the commonest one (a constant is a generator's);
- launch delay: from a launch call's return to its kernel's start, where the kernel starts
  within 50 µs (an idle GPU): distinct values and the commonest one's share;
- launch call: cudaLaunchKernel's own time, median, 99th percentile, max and max over median
  (real ones: 6-8; in a GPU-bound trace the tail is also calls waiting for a slot in a full
  launch queue);
- step gaps: distinct values of the time between consecutive ProfilerStep# spans;
- repeated op times: of the cpu_op names seen at least three times, the share whose every
  occurrence has the same duration;
- touching ops: of consecutive non-nested cpu_ops on the busiest thread, the share with no
  time at all between them (real Python spends microseconds there);
- ops per launch: cpu_ops per kernel launch (a real op tree has several ops per launch);
- input dims: the share of cpu_ops that carry "Input Dims" (record_shapes);
- trace name: the traceName field, which must not name the generator, scenario or seed.

It measures; it asserts nothing. The figures for the real traces are the yardstick.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import scenarios
from app.trace import importer, kineto

FIXTURES = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "kineto"
LAUNCHES = "('cudaLaunchKernel', 'cuLaunchKernel', 'cudaLaunchKernelExC', 'cuLaunchKernelEx')"

QUERIES = {
    "kernel_gaps": """
        WITH k AS (SELECT pid, stream, ts, dur FROM events WHERE cat = 'kernel' AND ph = 'X'),
        g AS (SELECT round(ts - lag(ts + dur) OVER (PARTITION BY pid, stream ORDER BY ts), 3) AS gap_us FROM k)
        SELECT count(*) AS n, count(DISTINCT gap_us) AS distinct_values,
               coalesce(max(c) / nullif(count(*), 0), 0) AS modal_share
        FROM g, (SELECT max(c) AS c FROM (SELECT count(*) AS c FROM g WHERE gap_us >= 0 AND gap_us < 20
                                          GROUP BY gap_us)) WHERE gap_us >= 0 AND gap_us < 20""",
    "launch_delay": f"""
        WITH d AS (SELECT round(k.ts - (l.ts + l.dur), 3) AS delay_us
                   FROM events l JOIN events k ON k.correlation = l.correlation
                   WHERE l.cat IN ('cuda_runtime', 'cuda_driver') AND l.name IN {LAUNCHES}
                     AND k.cat = 'kernel' AND k.ts - (l.ts + l.dur) BETWEEN 0 AND 50)
        SELECT count(*) AS n, count(DISTINCT delay_us) AS distinct_values,
               coalesce((SELECT max(c) FROM (SELECT count(*) AS c FROM d GROUP BY delay_us)) / nullif(count(*), 0), 0)
                   AS modal_share
        FROM d""",
    "launch_call_us": f"""
        SELECT count(*) AS n, quantile_cont(dur, 0.5) AS p50, quantile_cont(dur, 0.99) AS p99, max(dur) AS max,
               max(dur) / nullif(quantile_cont(dur, 0.5), 0) AS max_over_p50
        FROM events WHERE cat IN ('cuda_runtime', 'cuda_driver') AND name IN {LAUNCHES}""",
    "step_gaps": """
        WITH s AS (SELECT ts, dur FROM events WHERE name LIKE 'ProfilerStep#%' AND ph = 'X'),
        g AS (SELECT round(ts - lag(ts + dur) OVER (ORDER BY ts), 3) AS gap_us FROM s)
        SELECT count(gap_us) AS n, count(DISTINCT gap_us) AS distinct_values FROM g""",
    "repeated_op_times": """
        WITH o AS (SELECT name, count(*) AS n, count(DISTINCT round(dur, 3)) AS d
                   FROM events WHERE cat = 'cpu_op' AND ph = 'X' GROUP BY name HAVING count(*) >= 3)
        SELECT count(*) AS names, coalesce(avg(CASE WHEN d = 1 THEN 1.0 ELSE 0.0 END), 0) AS identical_share FROM o""",
    "touching_ops": """
        WITH t AS (SELECT pid, tid FROM events WHERE cat = 'cpu_op' GROUP BY pid, tid ORDER BY count(*) DESC LIMIT 1),
        o AS (SELECT e.ts, e.dur, lag(e.ts + e.dur) OVER (ORDER BY e.ts) AS prev_end
              FROM events e JOIN t USING (pid, tid) WHERE e.cat = 'cpu_op' AND e.ph = 'X'),
        c AS (SELECT round(ts - prev_end, 3) AS gap_us FROM o WHERE ts >= prev_end)
        SELECT count(*) AS n, coalesce(avg(CASE WHEN gap_us = 0 THEN 1.0 ELSE 0.0 END), 0) AS zero_share FROM c""",
    "ops_per_launch": f"""
        SELECT (SELECT count(*) FROM events WHERE cat = 'cpu_op')
               / nullif((SELECT count(*) FROM events WHERE cat IN ('cuda_runtime', 'cuda_driver')
                         AND name IN {LAUNCHES}), 0) AS ratio""",
    "input_dims": """
        SELECT coalesce(avg(CASE WHEN args ->> 'Input Dims' IS NOT NULL THEN 1.0 ELSE 0.0 END), 0) AS share
        FROM events WHERE cat = 'cpu_op'""",
}


def measure(source: bytes | Path, name: str) -> dict:
    """Every query on one trace: {query: {column: value}}, and the trace's name."""
    t = importer.load(source, name=name)
    try:
        out = {"trace_name": t.meta.get("traceName"), "sub_us_clock": bool(t.float_ts)}
        for q, sql in QUERIES.items():
            cur = t.con.execute(sql)
            cols = [c[0] for c in cur.description]
            row = cur.fetchone()
            out[q] = {c: (round(v, 4) if isinstance(v, float) else v) for c, v in zip(cols, row)}
    finally:
        t.con.close()
    return out


# query -> (figure, what counts as enough events to judge it, which side is the tell): a
# generated figure past every real trace's on that side is marked (a constant shows as a
# share above them all; a flat op tree as a ratio below them all)
JUDGED = {"kernel_gaps": ("modal_share", "n", "above"), "launch_delay": ("modal_share", "n", "above"),
          "repeated_op_times": ("identical_share", "names", "above"), "touching_ops": ("zero_share", "n", "above"),
          "ops_per_launch": ("ratio", None, "below"), "launch_call_us": ("max_over_p50", "n", "below")}
MIN_EVENTS = 50  # fewer than this and a share says nothing
# Shares of one value that a trace written in whole microseconds has by its clock alone
# (HTA's sampled ranks: 16-60%): compared only with real traces that write fractions.
CLOCK_BOUND = {"kernel_gaps", "launch_delay"}


def tells(traces: dict[str, dict]) -> dict[str, list[str]]:
    """For each generated trace, the queries whose figure lies past every real trace's."""
    real = {k: v for k, v in traces.items() if k.startswith("real: ")}
    out = {}
    for name, m in traces.items():
        if name in real:
            continue
        out[name] = []
        for q, (fig, count, side) in JUDGED.items():
            seen = [r[q][fig] for r in real.values() if r[q][fig] is not None
                    and (count is None or (r[q][count] or 0) >= MIN_EVENTS)
                    and (q not in CLOCK_BOUND or r["sub_us_clock"])]
            v = m[q][fig]
            if seen and v is not None and (count is None or (m[q][count] or 0) >= MIN_EVENTS) and \
                    (v > max(seen) if side == "above" else v < min(seen)):
                out[name].append(f"{q}.{fig}={v} (real {min(seen)}-{max(seen)})")
    return out


def _cell(d: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in d.items()) if isinstance(d, dict) else str(d)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench realism")
    ap.add_argument("--scenario", action="append", choices=list(scenarios.REGISTRY),
                    help="one scenario (repeatable); all by default")
    ap.add_argument("--seed", default="canonical")
    args = ap.parse_args(argv)
    traces: dict[str, dict] = {}
    for sid in args.scenario or list(scenarios.REGISTRY):
        inst = scenarios.get(sid).instance(args.seed if args.seed == "canonical" else int(args.seed))
        body = kineto.dumps(inst.trace(0), inst.trace_name(0)).encode()
        traces[f"{sid} ({args.seed})"] = measure(body, sid)
    if FIXTURES.is_dir():
        for f in sorted(FIXTURES.glob("*.json*")):
            traces[f"real: {f.name.split('.')[0]}"] = measure(f, f.name)
    else:
        print(f"(no real traces to compare: {FIXTURES} is absent)")
    for q in ["trace_name", *QUERIES]:
        print(q)
        for name, m in traces.items():
            print(f"  {name:34s} {_cell(m[q])}")
    found = tells(traces) if any(k.startswith("real: ") for k in traces) else {}
    if found:
        print("past every real trace's figure (a tell)")
        for name, items in found.items():
            print(f"  {name:34s} {'; '.join(items) or 'nothing'}")
    print(json.dumps({"bench": "realism", "traces": traces, "tells": found}))
    return 0
