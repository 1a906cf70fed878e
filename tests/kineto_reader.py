"""A small Kineto reader written for the tests, independent of the generator's code.

It knows only the file format (../shared/kineto-format.md): it finds ProfilerStep
windows on the CPU, picks the compute stream as the GPU stream with the most non-NCCL
kernel time, and measures what a person would read off the timeline. Every scenario's
`reader_checks` maps these metric names to the key's observation ids.
"""

from __future__ import annotations

import bisect
import gzip
import json
import statistics
from pathlib import Path

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def load(source) -> dict:
    if isinstance(source, (bytes, bytearray)):
        return json.loads(source)
    if isinstance(source, str) and source.lstrip().startswith("{"):
        return json.loads(source)
    path = Path(source)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def _union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _clip_busy(merged, lo, hi):
    return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in merged)


def _gaps(merged, lo, hi):
    gaps, cur = [], lo
    for s, e in merged:
        if e <= lo or s >= hi:
            continue
        if s > cur:
            gaps.append(s - cur)
        cur = max(cur, e)
    if hi > cur:
        gaps.append(hi - cur)
    return gaps


def steps(doc: dict) -> list[tuple[float, float]]:
    """CPU ProfilerStep# (start, end) in µs, GPU-side copies ignored."""
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#") \
                and e.get("cat") in ("user_annotation", "cpu_op", "Operator"):
            out.append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    return sorted(out)


def measure(doc: dict) -> dict:
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    per_stream: dict[tuple, float] = {}
    for e in gpu:
        if e["cat"] == "kernel" and not e["name"].startswith("nccl"):
            k = (e["pid"], e["tid"])
            per_stream[k] = per_stream.get(k, 0.0) + float(e["dur"])
    compute = max(per_stream, key=per_stream.get)
    comp = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e) for e in gpu
                  if (e["pid"], e["tid"]) == compute)
    merged = _union([(s, t) for s, t, _ in comp])
    nccl = [e for e in gpu if e["cat"] == "kernel" and e["name"].startswith("nccl")]
    h2d = [e for e in gpu if e["cat"] == "gpu_memcpy" and "HtoD" in e["name"]]
    st = steps(doc)
    starts = [s for s, _ in st]
    windows = list(zip(starts, starts[1:]))
    m: dict = {"steps": len(st), "compute_stream": compute[1]}
    periods = [(b - a) / 1e3 for a, b in windows]
    m["step_ms"] = statistics.median(periods)
    m["mean_step_ms"] = statistics.fmean(periods)
    m["max_step_ms"] = max(periods)
    m["min_step_ms"] = min(periods)
    busy, idle, maxgap, kcount, kdur, gapsum, npairs, ncount, nms, h2dms = ([] for _ in range(10))
    # Each window reads only the intervals and events that can touch it (sorted once, found by
    # bisection): a serving trace has ~150 windows and ~150k kernels.
    m_starts, m_ends = [s for s, _ in merged], [e for _, e in merged]
    c_starts = [s for s, _, _ in comp]
    nccl = sorted(nccl, key=lambda e: float(e["ts"]))
    n_starts = [float(e["ts"]) for e in nccl]
    h2d = sorted(h2d, key=lambda e: float(e["ts"]))
    h_starts = [float(e["ts"]) for e in h2d]
    for lo, hi in windows:
        # merged intervals are disjoint and sorted, so their ends are sorted too
        near = merged[bisect.bisect_right(m_ends, lo):bisect.bisect_left(m_starts, hi)]
        b = _clip_busy(near, lo, hi)
        busy.append(b / 1e3)
        idle.append((hi - lo - b) / 1e3)
        g = _gaps(near, lo, hi)
        maxgap.append(max(g) / 1e3 if g else 0.0)
        inside = comp[bisect.bisect_left(c_starts, lo):bisect.bisect_left(c_starts, hi)]
        ks = [(s, t) for s, t, e in inside if e["cat"] == "kernel"]
        kcount.append(len(ks))
        kdur.extend(t - s for s, t in ks)
        for (s0, t0), (s1, _) in zip(ks, ks[1:]):
            gapsum.append(max(0.0, s1 - t0))
        inw = nccl[bisect.bisect_left(n_starts, lo):bisect.bisect_left(n_starts, hi)]
        ncount.append(len(inw))
        nms.append(sum(float(e["dur"]) for e in inw) / 1e3)
        h2dms.append(sum(float(e["dur"]) for e in h2d[bisect.bisect_left(h_starts, lo):bisect.bisect_left(h_starts, hi)])
                     / 1e3)
    mean = statistics.fmean
    m.update(compute_busy_ms=mean(busy), compute_idle_ms=mean(idle), max_gap_ms=mean(maxgap),
             busy_pct=100 * sum(busy) / sum(b + i for b, i in zip(busy, idle)),
             kernels_per_step=mean(kcount), mean_kernel_us=mean(kdur) if kdur else 0.0,
             mean_gap_us=mean(gapsum) if gapsum else 0.0, nccl_kernels_per_step=mean(ncount),
             nccl_ms_per_step=mean(nms), h2d_ms_per_step=mean(h2dms),
             max_busy_ms=max(busy), max_nccl_ms=max(nms) if nms else 0.0)
    return m


def measure_ranks(docs: list[dict]) -> dict:
    """Per-rank compute per step and its spread, from one trace per rank."""
    per = [measure(d) for d in docs]
    compute = [p["compute_busy_ms"] for p in per]
    return {"ranks": per, "rank_compute_ms": compute, "max_rank_compute_ms": max(compute),
            "median_rank_compute_ms": statistics.median(compute),
            "straggler_rank": compute.index(max(compute)),
            "rank0_nccl_ms_per_step": per[0]["nccl_ms_per_step"]}
