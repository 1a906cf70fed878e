"""The read as a short text, in the discipline's order, for `tracedojo analyze`."""

from __future__ import annotations


def _ms(x) -> str:
    return "n/a" if x is None else f"{x:,.2f} ms"


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1f}%"


def render(r: dict, hta: dict | None = None) -> str:
    lines = [f"{r['source']}: {r['events']:,} events"]
    st = r["steps"]
    if st["period_ms"]:
        lines.append(f"1. Step boundary: {st['count']} steps by {st['source']}, period {_ms(st['period_ms'])} "
                     f"(min {_ms(st['period_min_ms'])}, max {_ms(st['period_max_ms'])}).")
    else:
        lines.append("1. Step boundary: no ProfilerStep#, no repeating annotation, no periodic kernel sequence; "
                     "figures cover the whole trace.")
    if "gaps" not in r:
        lines.append("No GPU kernels in this trace.")
        return "\n".join(lines)
    g = r["gaps"]
    cs = g["compute_stream"]
    lines.append(f"2. Gaps: compute stream {cs['stream']} on GPU {cs['gpu']} is idle {_ms(g['idle_ms_per_step'])} per "
                 f"step ({_pct(g['idle_pct'])}); the largest gap averages {_ms(g['largest_gap_ms'])}.")
    bm = g["busy_meanwhile"]
    if bm["cpu"]:
        top = bm["cpu"][0]
        lines.append(f"   While it idles ({bm['window_ms']:,.2f} ms): {top['thread']} is in {top['slice'][:80]} "
                     f"for {top['ms']:,.2f} ms.")
    others = {k: v for k, v in bm["gpu_streams_ms"].items() if not k.endswith(f":{cs['stream']}") and v >= 0.01}
    if others:
        lines.append("   Other GPU streams busy in that gap: " +
                     ", ".join(f"stream {k.split(':')[1]} {v:,.2f} ms" for k, v in others.items()) + ".")
    o = r["overlap"]
    if o["comm_kernels_per_step"]:
        lines.append(f"3. Overlap: {o['comm_kernels_per_step']:g} NCCL kernels per step, {_ms(o['comm_ms_per_step'])} "
                     f"of comm, {_ms(o['exposed_comm_ms_per_step'])} exposed ({_pct(o['overlapped_pct'])} overlapped).")
    else:
        lines.append("3. Overlap: no communication kernels.")
    k = r["kernels"]
    if k["top"]:
        t = k["top"][0]
        lines.append(f"4. Longest kernel: {t['name'][:100]} — {t['time_pct']:.1f}% of kernel time, "
                     f"{t['instances']:,} instances, avg {t['avg_us']:,.1f} µs; top family {k['top_family']} "
                     f"{_pct(k['top_family_pct'])}.")
    ln = r["launch"]
    if ln["launch_bound"]:
        verdict = "launch-bound: the gaps between kernels outweigh the kernels"
    elif ln.get("queue_deep"):
        verdict = (f"not launch-bound: kernels start {ln['launch_delay_us'] / ln['mean_kernel_us']:,.0f}x a kernel's time "
                   f"after their launch, so the GPU's queue is deep (GPU-bound)") if ln["mean_kernel_us"] else (
                   "not launch-bound: the GPU's queue is deep")
    else:
        verdict = "not launch-bound"
    lines.append(f"5. Launches: {ln['kernels_per_step']:,.0f} kernels per step, mean {ln['mean_kernel_us']:,.1f} µs, "
                 f"mean gap {ln['mean_gap_us']:,.1f} µs, launch delay {ln['launch_delay_us']} µs; {verdict}.")
    rk = r.get("ranks")
    if rk:  # several ranks uploaded: the figures above are the first rank's
        per = ", ".join(f"rank {i} {c:,.2f}" for i, c in zip(rk["ids"], rk["compute_ms"]))
        spread = f"max/median {rk['max_over_median']:.2f}" if rk["max_over_median"] else "no spread"
        lines.append(f"6. Ranks: {len(rk['ids'])} on one clock; the figures above are rank {rk['ids'][0]}'s. "
                     f"Compute per step (ms): {per}; {spread}; rank {rk['straggler_rank']} arrives last at most "
                     f"collectives.")
    if hta:
        lines.append(f"HTA: idle {hta['idle_time_pctg']}%, compute {hta['compute_time_pctg']}%, non-compute "
                     f"{hta['non_compute_time_pctg']}% of {hta['kernel_time_us']:,.0f} µs; comm/compute overlap "
                     f"{hta['comp_comm_overlap_pctg']}%.")
    return "\n".join(lines)
