"""The reference read of a trace, in the discipline's order: step boundary, gaps,
overlap, longest kernel, then launch statistics.

Works on any imported Kineto trace (app.trace.importer). Times are µs as the file
writes them; figures come out in ms or µs as named. The metric names of the flat
`metrics` dict match tests/kineto_reader.py, so a scenario's `reader_checks` map them
onto its key.
"""

from __future__ import annotations

import re
import statistics

import numpy as np

from app.trace import intervals
from app.trace.importer import ImportedTrace

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# A launch-bound GPU drains its queue: each kernel starts about as soon as its launch returns,
# so the launch delay is of the order of a kernel (generated launch-bound instances: 0.4-3.5x
# the mean kernel). A delay of many kernels means the queue is deep, i.e. the GPU is the
# bottleneck, however large the gaps look (a real trace: 18 ms delay, 0.2 ms kernels, 92x).
MAX_LAUNCH_DELAY_KERNELS = 5
NCCL = re.compile(r"^nccl")  # ncclKernel_* (NCCL <= 2.18) and ncclDevKernel_* (2.19+)


def steps(tr: ImportedTrace, g: dict | None = None) -> tuple[list[tuple[float, float]], str | None]:
    """Step spans (start, end) µs and how they were found, in the discipline's order of
    preference: CPU `ProfilerStep#` annotations (the GPU-side copies ignored), else the
    record_function annotation that repeats and covers the most of the timeline (a
    hand-written "train_step"), else the period of the compute stream's kernel sequence."""
    st = [tuple(r) for r in tr.con.execute(
        "SELECT ts, ts + dur FROM events WHERE ph = 'X' AND name LIKE 'ProfilerStep#%' "
        "AND cat IN ('user_annotation', 'cpu_op') ORDER BY ts").fetchall()]
    if st:
        return st, "ProfilerStep#"
    st, name = _repeating_annotation(tr)
    if st:
        return st, f"annotation {name!r}"
    st = _periodic(g if g is not None else _gpu(tr))
    return st, ("kernel-sequence period" if st else None)


def _repeating_annotation(tr: ImportedTrace) -> tuple[list[tuple[float, float]], str | None]:
    """The CPU annotation (numbers stripped from its name: "step 12" and "step 13" are one)
    that occurs at least twice without overlapping itself and covers the most time."""
    rows = tr.con.execute(
        r"""SELECT regexp_replace(name, '[#_ ]*\d+$', '') AS base, ts, ts + dur FROM events
            WHERE ph = 'X' AND cat = 'user_annotation' AND dur > 0 ORDER BY ts""").fetchall()
    spans: dict[str, list[tuple[float, float]]] = {}
    for base, a, b in rows:
        spans.setdefault(base, []).append((a, b))
    best, cover = None, 0.0
    for base, sp in spans.items():
        if len(sp) < 2 or any(sp[i + 1][0] < sp[i][1] for i in range(len(sp) - 1)):
            continue
        c = sum(b - a for a, b in sp)
        if c > cover:
            best, cover = base, c
    return (spans[best], best) if best else ([], None)


def _periodic(g: dict, min_match: float = 0.9) -> list[tuple[float, float]]:
    """Steps from the compute stream alone: a training or decode step launches the same
    kernel sequence every time, so the sequence repeats with a period of p kernels. The
    candidates for p are the spacings of the rarest repeating kernel name; the phase is
    the kernel after the longest recurring idle gap (a step starts when its input lands)."""
    comp = compute_stream(g)
    if comp is None:
        return []
    m = np.array([(p, s) == comp and c == "kernel" for p, s, c in zip(g["pid"], g["stream"].tolist(), g["cat"])])
    names = [n for n, k in zip(g["name"], m) if k]
    ts, te = g["ts"][m], g["te"][m]
    # ids in sorted-name order, as np.unique gives them, without making a fixed-width array
    # of names (a serving trace: 150k kernel names of ~1,000 characters each, 600 MB)
    rank = {name: i for i, name in enumerate(sorted(set(names)))}
    ids = np.fromiter((rank[name] for name in names), np.int64, len(names))
    counts = np.bincount(ids, minlength=len(rank))
    n = len(ids)
    # Only rare names mark a step: a kernel every layer launches repeats with the layer's period
    # (a 14-kernel decoder layer), which is no step; past twice the rarest repeating name's count
    # the candidates are such sub-step repeats.
    repeating = counts[counts >= 2]
    rare_max = 2 * int(repeating.min()) if len(repeating) else 0
    for name_id in np.argsort(counts, kind="stable"):
        if counts[name_id] < 2:
            continue
        if counts[name_id] > rare_max:
            break
        at = np.flatnonzero(ids == name_id)
        p = int(at[1] - at[0])
        if p < 1 or n < 2 * p or np.mean(ids[:-p] == ids[p:]) < min_match:
            continue
        gaps_before = np.r_[0.0, ts[1:] - te[:-1]]
        phase = int(np.argmax([gaps_before[i::p].mean() for i in range(p)]))
        bounds = ts[phase::p].tolist()
        return [(a, b) for a, b in zip(bounds, bounds[1:] + [float(te[-1])])]
    return []


def _gpu(tr: ImportedTrace) -> dict[str, np.ndarray | list]:
    rows = tr.con.execute(
        f"SELECT pid, stream, cat, name, ts, ts + dur, correlation FROM events "
        f"WHERE ph = 'X' AND cat IN {GPU_CATS} AND stream IS NOT NULL ORDER BY ts").fetchall()
    cols = list(zip(*rows)) if rows else [[]] * 7
    return {"pid": list(cols[0]), "stream": np.asarray(cols[1], np.int64), "cat": list(cols[2]),
            "name": list(cols[3]), "ts": np.asarray(cols[4], float), "te": np.asarray(cols[5], float),
            "corr": [c if c is not None else -1 for c in cols[6]]}


def compute_stream(g: dict) -> tuple[str, int] | None:
    """The (GPU, stream) with the most non-NCCL kernel time: the one the read is about."""
    totals: dict[tuple[str, int], float] = {}
    for pid, s, cat, name, a, b in zip(g["pid"], g["stream"].tolist(), g["cat"], g["name"], g["ts"], g["te"]):
        if cat == "kernel" and not NCCL.match(name):
            totals[(pid, s)] = totals.get((pid, s), 0.0) + (b - a)
    return max(totals, key=totals.get) if totals else None


def _busy_in(s: np.ndarray, e: np.ndarray, lo: float, hi: float) -> float:
    return intervals.busy_ns(s, e, lo, hi) if len(s) else 0.0


def read(tr: ImportedTrace) -> dict:
    """The read of one trace: steps, gaps, overlap, kernels and launches, plus `metrics`."""
    g = _gpu(tr)
    st, found_by = steps(tr, g)
    comp = compute_stream(g)
    out: dict = {"source": tr.source, "events": tr.events}
    starts = [a for a, _ in st]
    windows = list(zip(starts, starts[1:]))
    periods = [(b - a) / 1e3 for a, b in windows]
    out["steps"] = {"count": len(st), "complete": len(windows),
                    "period_ms": round(statistics.median(periods), 3) if periods else None,
                    "period_min_ms": round(min(periods), 3) if periods else None,
                    "period_max_ms": round(max(periods), 3) if periods else None,
                    "source": found_by}
    if comp is None:
        out["metrics"] = {"steps": len(st)}
        return out
    on_comp = np.array([(p, s) == comp for p, s in zip(g["pid"], g["stream"].tolist())], dtype=bool)
    is_kernel = np.array([c == "kernel" for c in g["cat"]], dtype=bool)
    is_nccl = np.array([bool(NCCL.match(n)) and c == "kernel" for n, c in zip(g["name"], g["cat"])], dtype=bool)
    is_h2d = np.array([c == "gpu_memcpy" and "HtoD" in n for n, c in zip(g["name"], g["cat"])], dtype=bool)
    cs, ce = g["ts"][on_comp], g["te"][on_comp]
    ks, ke = g["ts"][on_comp & is_kernel], g["te"][on_comp & is_kernel]
    ns, ne = g["ts"][is_nccl], g["te"][is_nccl]
    per_step = []
    cu_s, cu_e = intervals.union(cs, ce)  # the compute stream's busy time, merged once
    for lo, hi in windows or [(float(g["ts"].min()), float(g["te"].max()))]:
        clipped = intervals.clip(cu_s, cu_e, lo, hi)
        busy = float((clipped[1] - clipped[0]).sum())
        gaps = intervals.gaps_merged(cu_s, cu_e, lo, hi)
        biggest = max(gaps, key=lambda x: x[1] - x[0]) if gaps else (lo, lo)
        kin = (ks >= lo) & (ks < hi)
        k_s, k_e = ks[kin], ke[kin]
        nin = (ns >= lo) & (ns < hi)
        comm_u = intervals.union(ns[nin], ne[nin])
        comm_total = float((comm_u[1] - comm_u[0]).sum())
        overlapped = intervals.intersection_len(comm_u, intervals.clip(cu_s, cu_e, lo, max(hi, float(comm_u[1].max(initial=hi)))))
        per_step.append({
            "start_us": lo, "period_ms": (hi - lo) / 1e3, "busy_ms": busy / 1e3, "idle_ms": (hi - lo - busy) / 1e3,
            "largest_gap": {"start_us": biggest[0], "end_us": biggest[1], "ms": (biggest[1] - biggest[0]) / 1e3},
            "kernels": int(kin.sum()), "kernel_us": (k_e - k_s).tolist(),
            "gaps_between_kernels_us": np.maximum(k_s[1:] - k_e[:-1], 0).tolist(),
            "comm_kernels": int(nin.sum()), "comm_ms": float((ne[nin] - ns[nin]).sum()) / 1e3,
            "comm_exposed_ms": (comm_total - overlapped) / 1e3,
            "h2d_ms": float((g["te"][is_h2d] - g["ts"][is_h2d])[(g["ts"][is_h2d] >= lo) & (g["ts"][is_h2d] < hi)].sum()) / 1e3,
        })
    mean = statistics.fmean
    kern_us = [x for s in per_step for x in s["kernel_us"]]
    gap_us = [x for s in per_step for x in s["gaps_between_kernels_us"]]
    first = per_step[0]
    span_ms = sum(s["period_ms"] for s in per_step)  # 0 when every window is an instant (steps that start together)
    idle_pct = round(100 * sum(s["idle_ms"] for s in per_step) / span_ms, 2) if span_ms else None
    out["gaps"] = {
        "compute_stream": {"gpu": comp[0], "stream": comp[1]},
        "idle_ms_per_step": round(mean(s["idle_ms"] for s in per_step), 3),
        "idle_pct": idle_pct,
        "largest_gap_ms": round(mean(s["largest_gap"]["ms"] for s in per_step), 3),
        "largest_gap_first_step": first["largest_gap"],
        "busy_meanwhile": busy_meanwhile(tr, g, first["largest_gap"]["start_us"], first["largest_gap"]["end_us"]),
    }
    comm = sum(s["comm_ms"] for s in per_step)
    out["overlap"] = {
        "comm_kernels_per_step": round(mean(s["comm_kernels"] for s in per_step), 3),
        "comm_ms_per_step": round(mean(s["comm_ms"] for s in per_step), 3),
        "exposed_comm_ms_per_step": round(mean(s["comm_exposed_ms"] for s in per_step), 3),
        "overlapped_pct": round(100 * (1 - sum(s["comm_exposed_ms"] for s in per_step) / comm), 2) if comm else None,
    }
    out["kernels"] = kernel_summary(g)
    mean_kernel = mean(kern_us) if kern_us else 0.0
    mean_gap = mean(gap_us) if gap_us else 0.0
    delay_us = launch_delay_us(tr, g, on_comp & is_kernel)
    gappy = bool(mean_gap > mean_kernel and idle_pct is not None and idle_pct > 50)
    # Without launch/kernel correlation the delay is unknown and the gaps alone decide.
    queue_deep = delay_us is not None and delay_us > MAX_LAUNCH_DELAY_KERNELS * mean_kernel
    out["launch"] = {
        "kernels_per_step": round(mean(s["kernels"] for s in per_step), 2),
        "mean_kernel_us": round(mean_kernel, 3), "mean_gap_us": round(mean_gap, 3),
        "launch_delay_us": delay_us,
        "launch_bound": gappy and not queue_deep,
        "queue_deep": bool(queue_deep),
    }
    out["metrics"] = {
        "steps": len(st), "step_ms": out["steps"]["period_ms"] or 0.0,
        "mean_step_ms": mean(periods) if periods else 0.0, "max_step_ms": max(periods) if periods else 0.0,
        "compute_busy_ms": mean(s["busy_ms"] for s in per_step),
        "compute_idle_ms": mean(s["idle_ms"] for s in per_step),
        "max_gap_ms": mean(s["largest_gap"]["ms"] for s in per_step),
        "busy_pct": 100 - idle_pct if idle_pct is not None else None,
        "kernels_per_step": mean(s["kernels"] for s in per_step),
        "mean_kernel_us": mean_kernel, "mean_gap_us": mean_gap,
        "nccl_kernels_per_step": mean(s["comm_kernels"] for s in per_step),
        "nccl_ms_per_step": mean(s["comm_ms"] for s in per_step),
        "h2d_ms_per_step": mean(s["h2d_ms"] for s in per_step),
        "max_busy_ms": max(s["busy_ms"] for s in per_step),
    }
    return out


def kernel_summary(g: dict, top: int = 10) -> dict:
    """nsys cuda_gpu_kern_sum semantics: per kernel name, time share of all kernels."""
    by: dict[str, list[float]] = {}
    for cat, name, a, b in zip(g["cat"], g["name"], g["ts"], g["te"]):
        if cat == "kernel":
            by.setdefault(name, []).append(b - a)
    total = sum(sum(v) for v in by.values())
    rows = sorted(({"name": n, "total_us": sum(v), "instances": len(v), "avg_us": statistics.fmean(v),
                    "med_us": statistics.median(v), "min_us": min(v), "max_us": max(v),
                    "stddev_us": statistics.pstdev(v) if len(v) > 1 else 0.0,
                    "time_pct": 100 * sum(v) / total if total else 0.0} for n, v in by.items()),
                  key=lambda r: -r["total_us"])
    families: dict[str, float] = {}
    for r in rows:
        # a name that opens with its signature ("(anonymous namespace)::k", "<lambda>") is its own family
        fam = re.split(r"[(<]", r["name"].removeprefix("void "), maxsplit=1)[0].strip() or r["name"]
        families[fam] = families.get(fam, 0.0) + r["total_us"]
    top_family = max(families, key=families.get) if families else None
    pct = round(100 * families[top_family] / total, 2) if top_family is not None and total else None
    return {"total_us": total, "top": rows[:top], "top_family": top_family, "top_family_pct": pct}


def launch_delay_us(tr: ImportedTrace, g: dict, mask: np.ndarray) -> float | None:
    """Mean of kernel start - end of its launch call (HTA's launch delay)."""
    corr = [c for c, m in zip(g["corr"], mask.tolist()) if m and c >= 0]
    if not corr:
        return None
    launches = dict(tr.con.execute(
        "SELECT correlation, ts + dur FROM events WHERE cat IN ('cuda_runtime', 'cuda_driver') "
        "AND correlation IS NOT NULL").fetchall())
    starts = dict(zip([c for c, m in zip(g["corr"], mask.tolist()) if m], g["ts"][mask].tolist()))
    delays = [starts[c] - launches[c] for c in corr if c in launches]
    return round(statistics.fmean(delays), 3) if delays else None


def busy_meanwhile(tr: ImportedTrace, g: dict, lo: float, hi: float) -> dict:
    """What runs while the compute stream idles in [lo, hi): per CPU thread the longest
    slice covering the window, and the time other GPU streams are busy in it."""
    threads = tr.con.execute("""
        SELECT tid, name, cat, greatest(ts, ?) AS a, least(ts + dur, ?) AS b FROM events
        WHERE ph = 'X' AND cat IN ('cpu_op', 'user_annotation', 'python_function', 'cuda_runtime', 'cuda_driver')
          AND ts < ? AND ts + dur > ? AND name NOT LIKE 'ProfilerStep#%'
        QUALIFY row_number() OVER (PARTITION BY tid ORDER BY least(ts + dur, ?) - greatest(ts, ?) DESC, ts) = 1
    """, [lo, hi, hi, lo, hi, lo]).fetchall()
    names = dict(tr.con.execute("SELECT tid, any_value(args ->> 'name') FROM events WHERE ph = 'M' "
                                "AND name = 'thread_name' GROUP BY tid").fetchall())
    cpu = [{"thread": names.get(t, t), "slice": n, "cat": c, "ms": round((b - a) / 1e3, 3)}
           for t, n, c, a, b in sorted(threads, key=lambda r: -(r[4] - r[3]))]
    streams = {}
    for pid, s in {(p, s) for p, s in zip(g["pid"], g["stream"].tolist())}:
        m = np.array([(p, x) == (pid, s) for p, x in zip(g["pid"], g["stream"].tolist())], dtype=bool)
        busy = _busy_in(g["ts"][m], g["te"][m], lo, hi)
        if busy > 0:
            streams[f"{pid}:{s}"] = round(busy / 1e3, 3)
    return {"window_ms": round((hi - lo) / 1e3, 3), "cpu": cpu, "gpu_streams_ms": streams}


def read_ranks(traces: list[ImportedTrace], ids: list[int] | None = None) -> dict:
    """Several ranks: each read, per-rank compute per step, its spread, and who arrives
    last at each collective (the k-th NCCL kernel of every rank is one collective).
    `ids` names the ranks when the caller knows them (an upload's file names)."""
    reads = [read(t) for t in traces]
    compute = [r["metrics"].get("compute_busy_ms", 0.0) for r in reads]
    med = statistics.median(compute)
    arrivals = []
    for t in traces:
        g = _gpu(t)
        arrivals.append([a for a, n, c in zip(g["ts"].tolist(), g["name"], g["cat"]) if c == "kernel" and NCCL.match(n)])
    n_coll = min((len(a) for a in arrivals), default=0)
    late = []
    for k in range(n_coll):
        starts = [a[k] for a in arrivals]
        last = int(np.argmax(starts))
        late.append({"collective": k, "last_rank": last, "late_by_ms": round((max(starts) - min(starts)) / 1e3, 3)})
    # Name ranks as the files do (distributedInfo.rank), else by their order; the file is
    # the uploader's, so its rank is taken only where it is a number.
    info = [t.meta.get("distributedInfo") for t in traces]
    ids = list(ids) if ids is not None else [
        d["rank"] if isinstance(d, dict) and isinstance(d.get("rank"), int) else i for i, d in enumerate(info)]
    for x in late:
        x["last_rank"] = ids[x["last_rank"]]
    lasts = [x["last_rank"] for x in late]
    straggler = max(set(lasts), key=lasts.count) if lasts else ids[int(np.argmax(compute))]
    metrics = {**reads[0]["metrics"], "max_rank_compute_ms": max(compute), "median_rank_compute_ms": med,
               "straggler_rank": straggler, "rank0_nccl_ms_per_step": reads[0]["metrics"].get("nccl_ms_per_step", 0.0)}
    return {"ranks": reads, "rank_ids": ids, "rank_compute_ms": [round(c, 3) for c in compute],
            "max_over_median": round(max(compute) / med, 3) if med else None,
            "straggler_rank": straggler, "late_arrivals": late, "metrics": metrics}
