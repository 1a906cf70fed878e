"""Kernel-level measurements: `ncu` (Speed Of Light and the roofline point of one kernel)
and `gemm-microbench` (torch.matmul TFLOP/s at the top GEMM's M and at 4M).

Both start from the instance's kernel table (artifacts["kernels"]: per kernel name, the
FLOPs, bytes, shape and duration of its heaviest instance, the numbers the trace's
durations were drawn from) and the GPU's catalog figures. A scenario that models a
kernel's DRAM traffic beyond the ideal bytes (skinny-gemm's tile refetch) hands that
profile over in artifacts["ncu"]; the percentages are computed here either way.
"""

from __future__ import annotations

import re

import numpy as np
import re2

from app import physics, workload
from app.scenario import InstanceError
from app.tools.base import Tool, ToolNotApplicable, program
from app.trace.builder import Kind


def _gpu(inst) -> physics.Gpu:
    return physics.GPUS[inst.artifacts["gpu"]["key"]]


def _peak_tflops(gpu: physics.Gpu, dtype: str | None) -> float:
    """The tensor-core roof for the kernel's input type (FP8 GEMMs run against the FP8 peak)."""
    return gpu.fp8_tflops if (dtype or "").startswith("fp8") and gpu.fp8_tflops else gpu.bf16_tflops


MAX_PATTERN_CHARS = 200


def kernel_pattern(kernel: str):
    """ncu's `-k regex:` pattern, compiled by RE2: matching takes time linear in the name
    whatever the pattern (Python's re backtracks for minutes on `(\\w|\\w)*!`), in at
    most 8 MB. RE2 refuses back-references and look-arounds, which no kernel name needs."""
    if len(kernel) > MAX_PATTERN_CHARS:
        raise InstanceError(f"the kernel pattern is {len(kernel):,} characters; the limit is {MAX_PATTERN_CHARS}")
    options = re2.Options()
    options.log_errors = False  # the error comes back to the user; the server log need not repeat it
    options.max_mem = 8 << 20
    try:
        return re2.compile(kernel, options)
    except re2.error as e:
        reason = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise InstanceError(f"bad kernel regex {kernel[:80]!r}: {reason}") from None


def _choose(inst, kernel: str | None) -> dict:
    """The kernel ncu profiles: the one named by regex, else the scenario's profiled
    kernel (the top family it points `-k` at), else the top kernel by total time."""
    table = inst.artifacts.get("kernels") or []
    if kernel:
        rx = kernel_pattern(kernel)
        prof = inst.artifacts.get("ncu")
        if prof and rx.search(prof["kernel"]):
            return prof
        for e in table:
            if rx.search(e["kernel"]):
                return e
        names = ", ".join(sorted({e["kernel"][:60] for e in table}))
        raise InstanceError(f"no profiled kernel matches {kernel[:80]!r}; the heaviest kernels are: {names}")
    if inst.artifacts.get("ncu"):
        return inst.artifacts["ncu"]
    if not table:
        raise ToolNotApplicable("this instance records no kernels to profile")
    return table[0]


# Peak L2 bandwidth (TB/s), from published microbenchmarks of each part (H100: Chips and Cheese
# and Citadel's Hopper study, ~7-8 TB/s; A100: ~5 TB/s; L40S, Ada's large L2: ~4.5), the
# yardstick of ncu's "L2 Cache Throughput" here. L1/TEX (shared memory included) peaks at
# 128 bytes per clock per SM on each of these parts.
L2_TBPS = {"H100": 8.0, "H200": 8.0, "A100": 5.0, "L40S": 4.5}
L1_BYTES_PER_CLOCK_PER_SM = 128
# A tensor-core kernel's operands reach the SMs from L2 once per output tile: an Mt x Nt tile
# does 2 Mt Nt FLOPs per K step and reads Mt + Nt operand elements, so its L2 traffic is
# FLOPs x (Mt + Nt) / (2 Mt Nt) elements whatever the DRAM traffic (the tile from the kernel's
# name, 128x128 where it names none); within the SM each operand is read from shared memory
# by the warps of the tile, about twice that.
DEFAULT_TILE = (128, 128)
_TILE = re.compile(r"(?:tilesize)?(\d{2,3})x(\d{2,3})")


# Hopper's TMA multicasts each operand tile to the CTAs of a cluster (2 on cuBLAS's and
# CUTLASS 3's usual sm90 shapes), halving what L2 serves.
SM90_CLUSTER = 2


def _l2_bytes_per_flop(name: str, dtype: str | None, arch: str) -> float:
    m = _TILE.search(name)
    mt, nt = (int(m.group(1)), int(m.group(2))) if m else DEFAULT_TILE
    elem = 1 if (dtype or "").startswith("fp8") else 2
    return (mt + nt) / (2 * mt * nt) * elem / (SM90_CLUSTER if arch == "sm90" else 1)


def _launch(inst, name: str) -> tuple[int, tuple, tuple]:
    """The kernel's stream and launch configuration, as the trace records them."""
    t = inst.trace(0)
    try:
        nid = t.names.index(name)
    except ValueError:
        return 7, (1, 1, 1), (128, 1, 1)
    rows = np.flatnonzero((t.name == nid) & (t.kind == Kind.KERNEL))
    stream = int(t.tid[rows[0]]) if len(rows) else 7
    info = t.kernel_info.get(nid)
    if len(rows) and t.cfg is not None and t.cfg[rows[np.argmax(t.dur_ns[rows])]] >= 0:
        info = t.configs[t.cfg[rows[np.argmax(t.dur_ns[rows])]]]  # the heaviest launch's own
    return stream, tuple(info.grid) if info else (1, 1, 1), tuple(info.block) if info else (128, 1, 1)


def profile(inst, kernel: str | None = None) -> dict:
    """Speed Of Light figures and the roofline point for one kernel instance."""
    e = _choose(inst, kernel)
    gpu = _gpu(inst)
    g0 = inst.artifacts["gpus"][0]
    clock_ratio = g0["sm_clock_mhz"] / g0["max_sm_clock_mhz"]
    name = e["kernel"]
    dur_us = e["duration_us"] if "duration_us" in e else e["dur_us"]
    flops = float(e["flops"])
    # A scenario's own traffic model (min vs DRAM bytes) when it has one; else ideal traffic.
    min_bytes = float(e["min_bytes"] if "min_bytes" in e else e["bytes"])
    dram_bytes = float(e["dram_bytes"] if "dram_bytes" in e else e["bytes"])
    dtype = e.get("dtype")
    peak = _peak_tflops(gpu, dtype) * clock_ratio
    stream, grid, block = _launch(inst, name)
    tflops = flops / (dur_us * 1e-6) / 1e12
    dram_pct = dram_bytes / (dur_us * 1e-6) / (gpu.mem_tbps * 1e12) * 100
    sm_hz = g0["sm_clock_mhz"] * 1e6
    tiled = e.get("role") in ("gemm", "attn") or bool(e.get("shape"))
    l2_bytes = max(dram_bytes, flops * _l2_bytes_per_flop(name, dtype, gpu.arch)) if tiled else dram_bytes
    l1_bytes = 2 * l2_bytes if tiled else l2_bytes
    l2_pct = min(99.0, l2_bytes / (dur_us * 1e-6) / (L2_TBPS.get(gpu.key, 2.5 * gpu.mem_tbps) * 1e12) * 100)
    l1_pct = min(99.0, l1_bytes / (dur_us * 1e-6) / (gpu.num_sms * L1_BYTES_PER_CLOCK_PER_SM * sm_hz) * 100)
    # SM Active Cycles is the mean over SMs: a grid of fewer blocks than SMs, or a last wave
    # that fills only some, leaves SMs idle for part of the kernel (one block per SM assumed).
    ctas = int(np.prod(grid))
    waves = max(1, -(-ctas // gpu.num_sms))
    active_share = min(1.0, ctas / (waves * gpu.num_sms)) * 0.985
    compute_pct = tflops / peak * 100
    ai = flops / min_bytes if min_bytes else 0.0
    achieved_ai = flops / dram_bytes if dram_bytes else 0.0
    roof = min(peak, achieved_ai * gpu.mem_tbps) if achieved_ai else 0.0
    shape = e.get("shape")
    if isinstance(shape, list):
        shape = dict(zip("MNK", shape))
    return {
        "kernel": name, "dtype": dtype or "bf16", "shape": shape, "stream": stream, "grid": list(grid),
        "block": list(block), "gpu": gpu.key, "cc": f"{gpu.compute_major}.{gpu.compute_minor}",
        "duration_us": round(dur_us, 2), "flops": flops, "min_bytes": min_bytes, "dram_bytes": dram_bytes,
        "dram_frequency_ghz": round(gpu.mem_clock_mhz / 1e3, 2), "sm_frequency_ghz": round(g0["sm_clock_mhz"] / 1e3, 2),
        "elapsed_cycles": int(dur_us * g0["sm_clock_mhz"]),
        "sm_active_cycles": round(dur_us * g0["sm_clock_mhz"] * active_share, 2),
        "dram_throughput_pct": round(dram_pct, 2), "compute_throughput_pct": round(compute_pct, 2),
        "l1tex_throughput_pct": round(l1_pct, 2), "l2_throughput_pct": round(l2_pct, 2),
        "memory_throughput_pct": round(max(dram_pct, l1_pct, l2_pct), 2),
        "achieved_tflops": round(tflops, 1), "peak_tflops": round(peak, 1), "mem_tbps": gpu.mem_tbps,
        "arithmetic_intensity": round(ai, 1), "achieved_intensity": round(achieved_ai, 1),
        "ridge_point": round(peak / gpu.mem_tbps, 1), "roof_tflops": round(roof, 1),
        "headroom": round(roof / tflops, 2) if tflops else None,
        "bound": "memory" if achieved_ai and achieved_ai < peak / gpu.mem_tbps else "compute",
    }


def _rule(p: dict) -> str:
    """ncu's SOL bottleneck rule, in the words the real rule uses."""
    mem, comp = p["dram_throughput_pct"], p["compute_throughput_pct"]
    if max(mem, comp) >= 80:
        unit = "DRAM" if mem >= comp else "the compute pipelines"
        return ("OPT   The kernel is utilizing greater than 80.0% of the available compute or memory performance of "
                "the device. To further improve performance, work will likely need to be shifted from the most "
                f"utilized to another unit. Start by analyzing {unit} in the "
                f"{'Memory' if mem >= comp else 'Compute'} Workload Analysis section.")
    if max(mem, comp) < 60:
        return ("OPT   This kernel exhibits low compute throughput and memory bandwidth utilization relative to the "
                "peak performance of this device. Achieved compute throughput and/or memory bandwidth below 60.0% of "
                "peak typically indicate latency issues. Look at Scheduler Statistics and Warp State Statistics for "
                "potential reasons.")
    more, less = ("Memory", "Compute") if mem >= comp else ("Compute", "Memory")
    return (f"INF   {more} is more heavily utilized than {less}: Look at the {more} Workload Analysis section to "
            f"identify the bottleneck.")


def _section(title: str, rows: list[tuple[str, str, str]]) -> list[str]:
    w = [max(len(r[i]) for r in rows + [("Metric Name", "Metric Unit", "Metric Value")]) for i in range(3)]
    rule = f"    {'-' * w[0]} {'-' * w[1]} {'-' * w[2]}"
    out = [f"    Section: {title}", rule,
           f"    {'Metric Name':<{w[0]}} {'Metric Unit':>{w[1]}} {'Metric Value':>{w[2]}}", rule]
    out += [f"    {a:<{w[0]}} {b:>{w[1]}} {c:>{w[2]}}" for a, b, c in rows]
    out.append(rule)
    return out


def ncu(inst, kernel: str | None = None) -> str:
    """What `ncu --set full` prints for the kernel's Speed Of Light section, then, set apart
    and labelled as ours, the roofline arithmetic ncu draws as a chart but does not print.
    `--clock-control none`: ncu locks clocks to base by default, which would not be the
    clocks the trace ran at (a throttled GPU's story is in its clock)."""
    p = profile(inst, kernel)
    short = re.escape(p["kernel"].removeprefix("void ").split("(")[0].split("<")[0][:40])
    g, b = p["grid"], p["block"]
    out = [f"$ ncu --clock-control none --set full -k regex:{short} -c 1 {program(inst)}", "",
           f"  {p['kernel']} ({g[0]}, {g[1]}, {g[2]})x({b[0]}, {b[1]}, {b[2]}), Context 1, Stream {p['stream']}, "
           f"Device 0, CC {p['cc']}"]
    out += _section("GPU Speed Of Light Throughput", [
        ("DRAM Frequency", "Ghz", f"{p['dram_frequency_ghz']:.2f}"),
        ("SM Frequency", "Ghz", f"{p['sm_frequency_ghz']:.2f}"),
        ("Elapsed Cycles", "cycle", f"{p['elapsed_cycles']:,}"),
        ("Memory Throughput", "%", f"{p['memory_throughput_pct']:.2f}"),
        ("DRAM Throughput", "%", f"{p['dram_throughput_pct']:.2f}"),
        ("Duration", "us", f"{p['duration_us']:.2f}"),
        ("L1/TEX Cache Throughput", "%", f"{p['l1tex_throughput_pct']:.2f}"),
        ("L2 Cache Throughput", "%", f"{p['l2_throughput_pct']:.2f}"),
        ("SM Active Cycles", "cycle", f"{p['sm_active_cycles']:,.2f}"),
        ("Compute (SM) Throughput", "%", f"{p['compute_throughput_pct']:.2f}")])
    out.append(f"    {_rule(p)}")
    out.append("")
    shape = ", ".join(f"{k}={v}" for k, v in p["shape"].items()) if p["shape"] else "n/a"
    out += ["  Trace Dojo notes: the roofline arithmetic from the same figures (ncu draws the chart, it prints none of this)"]
    out += _section("Roofline arithmetic", [
        ("Problem Shape", "", shape),
        ("Work", "GFLOP", f"{p['flops'] / 1e9:,.2f}"),
        ("Minimum Bytes (each operand once)", "MB", f"{p['min_bytes'] / 1e6:,.1f}"),
        ("DRAM Bytes", "MB", f"{p['dram_bytes'] / 1e6:,.1f}"),
        ("Arithmetic Intensity (ideal)", "FLOP/byte", f"{p['arithmetic_intensity']:,.1f}"),
        ("Achieved Arithmetic Intensity", "FLOP/byte", f"{p['achieved_intensity']:,.1f}"),
        ("Ridge Point", "FLOP/byte", f"{p['ridge_point']:,.1f}"),
        ("Achieved Performance", "TFLOP/s", f"{p['achieved_tflops']:,.1f}"),
        ("Roof at Achieved Intensity", "TFLOP/s", f"{p['roof_tflops']:,.1f}"),
        (f"Peak ({p['dtype'].split('_')[0].upper()} tensor)", "TFLOP/s", f"{p['peak_tflops']:,.1f}")])
    side = "below" if p["bound"] == "memory" else "above"
    out.append(f"    The kernel sits {side} the ridge point: it is {p['bound']}-bound "
               f"({p['achieved_intensity']:.1f} vs {p['ridge_point']:.1f} FLOP/byte).")
    return "\n".join(out)


def ncu_chart(inst, kernel: str | None = None) -> dict:
    """A log-log roofline: the memory slope, the flat roof, and the kernel as a point."""
    p = profile(inst, kernel)
    points = [{"label": "achieved", "ai": p["achieved_intensity"], "tflops": p["achieved_tflops"]}]
    if p["arithmetic_intensity"] != p["achieved_intensity"]:
        points.append({"label": "ideal traffic", "ai": p["arithmetic_intensity"],
                       "tflops": min(p["peak_tflops"], p["arithmetic_intensity"] * p["mem_tbps"])})
    return {"kind": "roofline", "x_label": "arithmetic intensity", "x_unit": "FLOP/byte", "y_unit": "TFLOP/s",
            "peak_tflops": p["peak_tflops"], "mem_tbps": p["mem_tbps"], "ridge": p["ridge_point"],
            "kernel": p["kernel"], "points": points}


def _bench_gemm(inst) -> dict:
    """The GEMM to benchmark: the heaviest forward GEMM (its first dim is the tokens, the
    M that batching changes)."""
    gemms = [e for e in inst.artifacts.get("kernels", []) if e["role"] == "gemm" and e.get("shape")]
    if not gemms:
        raise ToolNotApplicable("no GEMM with a known shape in this trace's heavy kernels")
    fwd = [e for e in gemms if not e["op"].startswith("autograd::")]
    return (fwd or gemms)[0]


def microbench(inst) -> dict:
    """TFLOP/s at M and 4M on every GPU of the instance. A scenario with its own traffic
    model (skinny-gemm) hands its figures over; otherwise the roofline with the efficiencies
    the traces were drawn with, each GPU at its own SM clock (a throttled GPU shows)."""
    given = inst.artifacts.get("experiments", {}).get("gemm_microbench")
    if given and "m4" in given:
        gpus = [{"index": g["index"], "points": [
            {"m": given["m"], "us": given["us_at_m"], "tflops": given["tflops_at_m"], "ai": given["ai_at_m"]},
            {"m": given["m4"], "us": given["us_at_4m"], "tflops": given["tflops_at_4m"], "ai": given["ai_at_4m"]}]}
            for g in inst.artifacts["gpus"][:1]]
        return {"n": given["n"], "k": given["k"], "dtype": "bf16", "gpus": gpus, "ratio": given["ratio"]}
    e = _bench_gemm(inst)
    gpu = _gpu(inst)
    m, n, k = e["shape"]
    dtype = e.get("dtype") or "bf16"
    ce, me = workload.EFFICIENCY["gemm"]
    peak_scale = _peak_tflops(gpu, dtype) / gpu.bf16_tflops
    gpus = []
    for g in inst.artifacts["gpus"]:
        ratio = g["sm_clock_mhz"] / g["max_sm_clock_mhz"]
        pts = []
        for mm in (m, 4 * m):
            flops = e["flops"] * mm / m
            nbytes = e["bytes"] * physics.gemm_bytes(mm, n, k) / physics.gemm_bytes(m, n, k)
            us = physics.roofline_us(flops, nbytes, gpu, ce * peak_scale, me, ratio)
            pts.append({"m": mm, "us": round(us, 2), "tflops": round(flops / us / 1e6, 1),
                        "ai": round(flops / nbytes, 1)})
        gpus.append({"index": g["index"], "points": pts})
    r = gpus[0]["points"]
    return {"n": n, "k": k, "dtype": dtype, "gpus": gpus, "ratio": round(r[1]["tflops"] / r[0]["tflops"], 2)}


def gemm_microbench(inst) -> str:
    mb = microbench(inst)
    m, m4 = (p["m"] for p in mb["gpus"][0]["points"])
    out = [f"$ python gemm_bench.py --m {m},{m4} --n {mb['n']} --k {mb['k']} --dtype {mb['dtype']} --iters 100"
           f"   # torch.matmul, CUDA-event timed, {len(mb['gpus'])} GPU(s)", "",
           f" {'GPU':>3}  {'M':>6}  {'N':>6}  {'K':>6}  {'Time (us)':>10}  {'TFLOP/s':>8}  {'FLOP/B':>7}",
           f" {'---':>3}  {'-' * 6}  {'-' * 6}  {'-' * 6}  {'-' * 10}  {'-' * 8}  {'-' * 7}"]
    for g in mb["gpus"]:
        for p in g["points"]:
            out.append(f" {g['index']:>3}  {p['m']:>6}  {mb['n']:>6}  {mb['k']:>6}  {p['us']:>10,.2f}  "
                       f"{p['tflops']:>8,.1f}  {p['ai']:>7,.1f}")
    out += ["", f" TFLOP/s at M={m4} over M={m} (GPU {mb['gpus'][0]['index']}): {mb['ratio']:.2f}x"]
    at_m = [g["points"][0]["tflops"] for g in mb["gpus"]]
    if len(at_m) > 1 and min(at_m) < 0.95 * float(np.median(at_m)):
        slow = mb["gpus"][int(np.argmin(at_m))]["index"]
        out.append(f" GPU {slow} reaches {min(at_m) / float(np.median(at_m)):.2f}x the median TFLOP/s at M={m}")
    return "\n".join(out)


TOOLS = (
    Tool("ncu", "Nsight Compute: Speed Of Light and roofline of one kernel",
         "ncu --clock-control none --set full -k regex:NAME -c 1",
         ncu, ncu_chart, options=("kernel",)),
    Tool("gemm-microbench", "GEMM microbenchmark: TFLOP/s at M and 4M", "python gemm_bench.py", gemm_microbench),
)
