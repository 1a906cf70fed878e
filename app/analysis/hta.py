"""Holistic Trace Analysis' metrics with its exact definitions, so the numbers match HTA 0.5.

What HTA does before measuring (hta/common/trace_parser.py, hta/common/trace.py):
- keeps events that have both `dur` and `cat`, except cat "Trace";
- when the file writes ts as floats, rounds each event inward to whole µs: ts up,
  end = ts + dur down;
- a GPU kernel is an event with args.stream >= 0 and args.correlation >= 0 (memcpy,
  memset and cuda_sync rows included); everything else is a CPU event. The stream is
  Python's int() of the value, -1 where that fails (hta/utils/utils.py,
  normalize_gpu_stream_numbers): so a ROCm trace's hipLaunchKernel, whose args write the
  HIP stream as a pointer in text ("stream": "0x0"), is a CPU event, the launch of its
  kernel. (DuckDB's cast reads "0x0" as 0: the launches became GPU kernels, no kernel kept
  a launch before the last step, and the block read None of 0 µs.);
- with two or more ProfilerStep names, drops the last step: only GPU kernels whose
  correlation matches a CPU event that starts before the last ProfilerStep# start count.

Then (hta/analyzers/breakdown_analysis.py, communication_analysis.py):
- kernel time = end of the last merged kernel interval - start of the first;
- idle = kernel time - the union of all kernels; compute = the union of compute
  kernels (not ^nccl.*Kernel, no "Memcpy", not ^Memset, no "Sync"); non-compute = the rest;
- comm/compute overlap = |union(comm) ∩ union(compute)| / |union(comm)|, comm being ^nccl.*Kernel.
Percentages are rounded to 2 decimals, as HTA prints them.
"""

from __future__ import annotations

import numpy as np

from app.trace import intervals
from app.trace.importer import ImportedTrace

# HTA's regexes, applied with Python's re.match (anchored at the start):
# NCCL_KERNEL_RE = "^nccl.*Kernel"; a compute kernel does not match
# "(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)". Written here for DuckDB (RE2, unanchored).
COMM_RE = "^nccl.*Kernel"
NOT_COMPUTE_RE = "^(nccl.*Kernel|.*Memcpy|Memset|.*Sync)"


# args.stream as Python's int() reads it: a JSON number (truncated), or text of decimal
# digits with an optional sign and surrounding blanks; NULL (HTA's -1) for anything else,
# "0x0" and "7.0" included.
STREAM_SQL = """CASE json_type(args, '$.stream')
    WHEN 'BIGINT' THEN TRY_CAST(args ->> 'stream' AS BIGINT)
    WHEN 'UBIGINT' THEN TRY_CAST(args ->> 'stream' AS BIGINT)
    WHEN 'DOUBLE' THEN TRY_CAST(trunc(TRY_CAST(args ->> 'stream' AS DOUBLE)) AS BIGINT)
    WHEN 'BOOLEAN' THEN CASE WHEN args ->> 'stream' = 'true' THEN 1 ELSE 0 END
    WHEN 'VARCHAR' THEN TRY_CAST(regexp_extract(args ->> 'stream', '^\\s*([+-]?[0-9]+)\\s*$', 1) AS BIGINT)
END"""

KERNEL_CATS = ("kernel", "gpu_memset", "gpu_memcpy")  # the importer maps the 2021 names onto these
KERNEL_WAIT_US = 30  # HTA's consecutive_kernel_delay default: shorter gaps are launch overhead


def gpu_rows(tr: ImportedTrace) -> dict[str, np.ndarray]:
    """HTA's GPU kernel set after its step filter, in start order: stream, whether it is a
    kernel/memcpy/memset, communication, computation, start and end (µs, rounded as HTA
    rounds), and the start of the launching call (NaN when the launch is not in the trace).
    Computed once per trace (the three metrics share it)."""
    if "hta_rows" in tr.cache:
        return tr.cache["hta_rows"]
    res = tr.con.execute(f"""
        WITH ev AS (
            SELECT name, cat, ts, ts + dur AS te,
                   COALESCE({STREAM_SQL}, -1) AS stream,
                   COALESCE(TRY_CAST(args ->> 'correlation' AS BIGINT), -1) AS corr
            FROM events WHERE dur IS NOT NULL AND cat IS NOT NULL AND cat <> 'Trace' AND ts IS NOT NULL
        ), rounded AS (
            SELECT name, cat, stream, corr,
                   CASE WHEN ? THEN ceil(ts) ELSE ts END AS ts,
                   CASE WHEN ? THEN floor(te) ELSE te END AS te
            FROM ev
        ), gpu AS (SELECT * FROM rounded WHERE stream >= 0 AND corr >= 0),
        cpu AS (SELECT * FROM rounded WHERE NOT (stream >= 0 AND corr >= 0)),
        steps AS (SELECT count(DISTINCT name) AS names, max(ts) AS last_start FROM cpu
                  WHERE name LIKE '%ProfilerStep%'),
        launch AS (SELECT corr, min(cpu.ts) AS rts FROM cpu, steps
                   WHERE corr >= 0 AND (steps.names < 2 OR cpu.ts < steps.last_start) GROUP BY corr)
        SELECT g.stream, g.cat IN {KERNEL_CATS} AS is_kernel,
               regexp_matches(g.name, '{COMM_RE}') AS is_comm,
               NOT regexp_matches(g.name, '{NOT_COMPUTE_RE}') AS is_compute,
               g.ts, g.te, COALESCE(l.rts, 'NaN'::DOUBLE) AS launch_ts
        FROM gpu g LEFT JOIN launch l ON g.corr = l.corr, steps
        WHERE steps.names < 2 OR l.rts IS NOT NULL
        ORDER BY g.ts, g.stream
    """, [tr.float_ts, tr.float_ts]).fetchnumpy()
    rows = {k: np.asarray(v) for k, v in res.items()}
    tr.cache["hta_rows"] = rows
    return rows


def _union_len(s: np.ndarray, e: np.ndarray) -> float:
    us, ue = intervals.union(s, e)
    return float((ue - us).sum())


def temporal_breakdown(tr: ImportedTrace) -> dict:
    g = gpu_rows(tr)
    ts, te = g["ts"], g["te"]
    if len(ts) == 0:
        return {"kernel_time_us": 0, "idle_time_us": 0, "compute_time_us": 0, "non_compute_time_us": 0,
                "idle_time_pctg": None, "compute_time_pctg": None, "non_compute_time_pctg": None}
    us, ue = intervals.union(ts, te)
    kernel_time = float(ue[-1] - us[0])
    idle = kernel_time - float((ue - us).sum())
    comp = g["is_compute"]
    compute = _union_len(ts[comp], te[comp])
    non_compute = kernel_time - compute - idle
    pct = (lambda x: round(100 * x / kernel_time, 2)) if kernel_time else (lambda x: None)
    return {"kernel_time_us": kernel_time, "idle_time_us": idle, "compute_time_us": compute,
            "non_compute_time_us": non_compute, "idle_time_pctg": pct(idle),
            "compute_time_pctg": pct(compute), "non_compute_time_pctg": pct(non_compute)}


def comm_comp_overlap_pctg(tr: ImportedTrace) -> float | None:
    """None without communication kernels (HTA would divide by zero)."""
    g = gpu_rows(tr)
    comm, comp = g["is_comm"], g["is_compute"]
    if not comm.any():
        return None
    comm_u = intervals.union(g["ts"][comm], g["te"][comm])
    comp_u = intervals.union(g["ts"][comp], g["te"][comp])
    comm_len = float((comm_u[1] - comm_u[0]).sum())
    return round(100 * intervals.intersection_len(comm_u, comp_u) / comm_len, 2) if comm_len else None


def idle_breakdown(tr: ImportedTrace, kernel_wait_us: float = KERNEL_WAIT_US) -> dict[int, dict[str, float]]:
    """Per stream, the idle time between consecutive kernels by cause, µs.

    host_wait: the kernel's launch call started after the previous kernel ended (the CPU
    was late); kernel_wait: otherwise, a gap under `kernel_wait_us`; other: the rest.
    """
    g = gpu_rows(tr)
    out: dict[int, dict[str, float]] = {}
    for stream in np.unique(g["stream"][g["is_kernel"]]):
        m = g["is_kernel"] & (g["stream"] == stream)
        ts, te, launch = g["ts"][m], g["te"][m], g["launch_ts"][m]
        order = np.argsort(ts, kind="stable")
        ts, te, launch = ts[order], te[order], launch[order]
        gap = ts[1:] - te[:-1]
        host = launch[1:] > te[:-1]  # NaN compares False: no launch seen, not host wait
        kernel = ~host & (gap < kernel_wait_us)
        out[int(stream)] = {"host_wait": float(gap[host].sum()), "kernel_wait": float(gap[kernel].sum()),
                            "other": float(gap[~host & ~kernel].sum())}
    return out


def figures(tr: ImportedTrace) -> dict:
    """HTA's figures as `tracedojo analyze --hta` and the upload page report them."""
    tb = temporal_breakdown(tr)
    return {**{k: tb[k] for k in ("idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg", "kernel_time_us")},
            "comp_comm_overlap_pctg": comm_comp_overlap_pctg(tr),
            "idle_breakdown": {str(s): v for s, v in idle_breakdown(tr).items()}}
