"""Case 1: unoverlapped all-reduce in DDP.

The pathology: DDP's reducer hooks never fire during backward (a wrapper or custom
autograd function bypasses them), so instead of bucketed all-reduces hidden under
backward, one flat all-reduce of every gradient runs after backward, serialized. The
compute stream sits idle for exactly the NCCL kernel's duration every step.

What a strong read notices: a clean step period; a hole on the compute stream at the
end of every step with the NCCL stream busy for exactly that hole; one NCCL kernel per
step where DDP would fire hundreds of bucket-sized ones; the bandwidth arithmetic
(gradient bytes x 2(N-1)/N over the kernel time) shows NCCL is not broken, so the
trap "NCCL is slow" is rejected; the win comes from overlap: backward is longer than
the all-reduce, so ~85% of it hides.

Physics: forward = 2 x params x tokens / (peak x efficiency), backward twice that;
the all-reduce moves 2(N-1)/N x the bf16 gradients at the achieved bus bandwidth;
fused AdamW streams 14 B per parameter at 85% of HBM bandwidth; each op costs the CPU
dispatcher time plus a cudaLaunchKernel, the CPU runs ahead until the launch queue
fills, and `loss.item()` syncs every step.

Canonical: the seed's 8xH100, 8B model. Where the seed does not close, the model's
number stands: the optimizer step streams 112 GB and takes ~39 ms (the seed's 10 ms
would need 3.6 B per parameter), so forward and backward are 134 and 267 ms rather
than 140 and 280 for the seed's 620 ms step; after the fix the step is ~471 ms
(1.32x, the seed rounds to 465 ms, 1.33x); DDP would build ~611 buckets at
bucket_cap_mb=25 (16 GB / 25 MiB), not the seed's "~26".

Versions: 1, first model. 2 (current): the host's side as real traces show it
(app/hosttime.MEASURED): kernels on a busy stream ~1-3 µs apart with a tail instead of
exactly 1.2 µs, cudaLaunchKernel with its long tail, launch-to-kernel latencies that vary,
Python time between consecutive ops, and host rows (zero_grad, the DataLoader, the
collective's bookkeeping, the gap between steps) that vary step to step. The physics and
the pathology are version 1's. Version 1 is still built for what was made with it.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from app import hosttime, physics, training, workload
from app.scenario import (Built, Hint, Scenario, ScenarioParams, building, gpu_clock_report, make_key, new_builder,
                          obs, param)
from app.trace import intervals
from app.trace.emit import cpu_span, memcpy
from app.scoring.rubric import Rubric

HIDE_FRACTION = 0.85  # share of bucketed comm that hides under backward (SM/HBM contention keeps the rest)


class Params(ScenarioParams):
    gpu: Literal["H100", "H200", "A100"] = param("H100", unit="GPU model", choices=["H100", "H200", "A100"])
    world_size: int = param(8, unit="ranks (GPUs in one NVLink domain)", ge=2, le=8, choices=[2, 4, 8])
    model_params_b: float = param(8.0, unit="billion parameters", ge=0.5, le=70.0, draw=(3.0, 14.0))
    tokens_per_gpu: int = param(3960, unit="tokens per GPU per step", ge=256, le=65_536, draw=(2048, 8192))
    compute_eff: float = param(0.4793, unit="fraction of dense bf16 peak in forward/backward", ge=0.1, le=0.8,
                               draw=(0.38, 0.55))
    allreduce_busbw_frac: float = param(0.4324, unit="fraction of the ring's achievable busbw", ge=0.1, le=1.0,
                                        draw=(0.35, 0.6))
    host_prologue_ms: float = param(5.0, unit="ms of CPU work before the first launch of a step", ge=0.5,
                                    le=50.0, draw=(3.0, 8.0))
    op_overhead_us: float = param(25.0, unit="µs of framework CPU time per op", ge=5.0, le=200.0,
                                  draw=(18.0, 35.0))
    steps: int = param(4, unit="training steps in the trace", ge=3, le=2000)

    @classmethod
    def canonical(cls) -> "Params":
        """The seed's case 1: 8xH100, 8B dense model, 620 ms steps, MFU 31%, 160 GB/s busbw."""
        return cls()


def build(p: Params, rng: np.random.Generator, seed) -> Built:
    gpu = physics.GPUS[p.gpu]
    n_params = p.model_params_b * 1e9
    peak = gpu.bf16_tflops * 1e12
    fwd_ms = 2 * n_params * p.tokens_per_gpu / (peak * p.compute_eff) * 1e3
    bwd_ms = 2 * fwd_ms  # backward computes two GEMMs (data and weight grads) per forward GEMM
    grad_bytes = n_params * physics.BF16_BYTES
    busbw = gpu.busbw_gbps * p.allreduce_busbw_frac
    ar_ms = physics.allreduce_ms(grad_bytes, p.world_size, busbw)
    shape, fwd, bwd = training.llm_step_specs(gpu.arch, p.model_params_b * 1e9, p.tokens_per_gpu)
    w_f = workload.roofline_weights_us(fwd, gpu)
    w_b = workload.roofline_weights_us(bwd, gpu)

    timing = hosttime.V1 if building() == 1 else hosttime.MEASURED
    h = lambda ns: timing.host_ns(rng, ns)  # noqa: E731 (a host row of nominal length ns)
    b, pid, t = new_builder(rng, gpu, rank=0, world=p.world_size, visible_gpus=p.world_size)
    topo = training.Topology(pid, pid, pid + 37, 0, 7, nccl_stream=int(rng.choice([40, 52, 84])))
    topo.name_rows(b)
    first_step = int(rng.integers(3, 40))
    steps = []  # per step: cpu start, cpu end, AR window, compute-stream intervals
    gpu_free = t
    sum_f = np.zeros(len(fwd), np.int64)
    sum_b = np.zeros(len(bwd), np.int64)
    for i in range(p.steps):
        s0 = t
        zg = t + h(20_000)
        zg_end = zg + h(300_000)
        cpu_span(b, "Optimizer.zero_grad#AdamW.zero_grad", pid, topo.main_tid, zg, zg_end)
        dl_start = zg_end + h(80_000)
        dl_end = max(t + h(int(p.host_prologue_ms * 0.6e6)), dl_start + 50_000)
        cpu_span(b, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", pid, topo.main_tid,
                 dl_start, dl_end)
        h2d_bytes = p.tokens_per_gpu * 8 * 2  # int64 input ids and labels
        h2d_start = max(dl_end + 40_000, gpu_free)
        h2d_ns = int(h2d_bytes / 20e9 * 1e9) + 2_000  # pinned PCIe Gen5 ~20 GB/s effective for small copies
        memcpy(b, host_pid=pid, cpu_tid=topo.main_tid, gpu_pid=0, stream=7, kind="HtoD_pinned", nbytes=h2d_bytes,
               cpu_start_ns=dl_end + 20_000, api_ns=10_000, gpu_start_ns=h2d_start, gpu_dur_ns=h2d_ns,
               op_name="aten::copy_")
        launch_t0 = t + int(p.host_prologue_ms * 1e6)
        f_ns = workload.scaled_durations_ns(w_f, fwd_ms * rng.normal(1, 0.004), rng)
        b_ns = workload.scaled_durations_ns(w_b, bwd_ms * rng.normal(1, 0.004), rng)
        sum_f += f_ns
        sum_b += b_ns
        f, bw = training.forward_backward(b, topo, rng, fwd=fwd, fwd_ns=f_ns, bwd=bwd, bwd_ns=b_ns,
                                          cpu_t0=launch_t0, gpu_t0=h2d_start + h2d_ns, op_mean_us=p.op_overhead_us,
                                          timing=timing)
        # The flat all-reduce: issued from the main thread once backward has been launched
        # (DDP's fallback path), and on the GPU it waits for the last gradient.
        ar_ns = int(ar_ms * rng.normal(1, 0.006) * 1e6)
        cpu_ar, ar0, ar1 = training.allreduce(b, topo, cpu_t0=bw.cpu_end + h(30_000), gpu_ready=bw.gpu_end,
                                              dur_ns=ar_ns, nelems=int(n_params), world=p.world_size, rng=rng,
                                              timing=timing)
        opt = training.optimizer(b, topo, rng, params=n_params, cpu_t0=cpu_ar + h(20_000), gpu_ready=ar1, gpu=gpu,
                                 pending_kernel_start=np.concatenate([f.kernel_start, bw.kernel_start]),
                                 timing=timing)
        t_end = training.sync_on_loss(b, topo, cpu_t0=opt.cpu_end + h(10_000), gpu_done=opt.gpu_end, rng=rng,
                                      timing=timing)
        cpu_span(b, f"ProfilerStep#{first_step + i}", pid, topo.main_tid, s0, t_end)
        k_s = np.concatenate([[h2d_start], f.kernel_start, bw.kernel_start, opt.kernel_start])
        k_e = np.concatenate([[h2d_start + h2d_ns], f.kernel_end, bw.kernel_end, opt.kernel_end])
        steps.append({"start": s0, "end": t_end, "ar": (ar0, ar1), "ks": k_s, "ke": k_e,
                      "fwd": (int(f.kernel_start[0]), f.gpu_end), "bwd": (int(bw.kernel_start[0]), bw.gpu_end),
                      "opt": (int(opt.kernel_start[0]), opt.gpu_end)})
        gpu_free = opt.gpu_end + 1_600
        t = t_end + h(15_000)
    trace = b.build()

    # -- the key, measured on the emitted timings -----------------------------------
    periods = np.diff([s["start"] for s in steps]) / 1e6
    step_ms = float(periods.mean())
    idle, biggest = [], []
    for s, nxt in zip(steps, steps[1:]):
        lo, hi = s["start"], nxt["start"]
        idle.append((hi - lo - intervals.busy_ns(s["ks"], s["ke"], lo, hi)) / 1e6)
        g = max(intervals.gaps(s["ks"], s["ke"], lo, hi), key=lambda x: x[1] - x[0])
        biggest.append((g[1] - g[0]) / 1e6)
    idle_ms = float(np.mean(idle))
    gap_ms = float(np.mean(biggest))
    allreduce_ms_obs = float(np.mean([(s["ar"][1] - s["ar"][0]) / 1e6 for s in steps]))
    fwd_obs = float(np.mean([(s["fwd"][1] - s["fwd"][0]) / 1e6 for s in steps]))
    bwd_obs = float(np.mean([(s["bwd"][1] - s["bwd"][0]) / 1e6 for s in steps]))
    opt_obs = float(np.mean([(s["opt"][1] - s["opt"][0]) / 1e6 for s in steps]))
    busbw_obs = physics.busbw_gbps(grad_bytes, p.world_size, allreduce_ms_obs)
    flops = physics.training_flops(n_params, p.tokens_per_gpu)
    mfu = physics.mfu_pct(flops, step_ms, gpu)
    exposed_ms = allreduce_ms_obs - HIDE_FRACTION * min(allreduce_ms_obs, bwd_obs)
    after_ms = step_ms - allreduce_ms_obs + exposed_ms
    speedup = step_ms / after_ms
    mfu_after = physics.mfu_pct(flops, after_ms, gpu)
    fast_ar_ms = physics.allreduce_ms(grad_bytes, p.world_size, gpu.busbw_gbps)
    fast_step_ms = step_ms - allreduce_ms_obs + fast_ar_ms
    mfu_fast_nccl = physics.mfu_pct(flops, fast_step_ms, gpu)
    buckets = physics.ddp_bucket_count(grad_bytes)
    grad_gb = grad_bytes / 1e9
    ring_gb = physics.ring_allreduce_bytes(grad_bytes, p.world_size) / 1e9
    idle_pct = gap_ms / step_ms * 100
    n = p.world_size

    observations = [
        obs("step_ms", "step period", step_ms, "ms"),
        obs("expected_step_ms", "step after restoring bucketed overlap", after_ms, "ms"),
        obs("speedup", "throughput gain", speedup, "x", 3),
        obs("gap_ms", "compute-stream hole at the end of each step", gap_ms, "ms"),
        obs("compute_idle_ms", "compute-stream idle per step", idle_ms, "ms"),
        obs("idle_pct", "the hole as a share of the step", idle_pct, "%", 1),
        obs("allreduce_ms", "NCCL all-reduce kernel per step", allreduce_ms_obs, "ms"),
        obs("nccl_kernels_per_step", "NCCL kernels per step", 1, "kernels", 0),
        obs("expected_buckets", "all-reduces DDP would fire at bucket_cap_mb=25", buckets, "kernels", 0),
        obs("grad_gb", "bf16 gradient bytes", grad_gb, "GB"),
        obs("ring_gb", "bytes each GPU moves in the ring", ring_gb, "GB"),
        obs("busbw_gbps", "achieved all-reduce bus bandwidth", busbw_obs, "GB/s", 1),
        obs("link_busbw_gbps", f"ring busbw {gpu.interconnect} reaches at large sizes", gpu.busbw_gbps, "GB/s", 0),
        obs("fast_allreduce_ms", "all-reduce at full ring busbw", fast_ar_ms, "ms"),
        obs("mfu_if_fast_nccl_pct", "MFU with a perfect but still serialized all-reduce", mfu_fast_nccl, "%", 1),
        obs("fwd_ms", "forward", fwd_obs, "ms"),
        obs("bwd_ms", "backward", bwd_obs, "ms"),
        obs("opt_ms", "optimizer step", opt_obs, "ms"),
        obs("exposed_comm_ms", "comm left exposed after the fix", exposed_ms, "ms"),
        obs("mfu_pct", "MFU", mfu, "%", 1),
        obs("expected_mfu_pct", "MFU after the fix", mfu_after, "%", 1),
    ]
    first, second = steps[0], steps[1]
    ar_fmt = f"{allreduce_ms_obs:.0f}"
    # What "this stack" should reach: the same step with communication fully hidden.
    mfu_reference = physics.mfu_pct(flops, step_ms - allreduce_ms_obs, gpu)
    brief = (f"{n}x {gpu.key} ({gpu.interconnect}), {p.model_params_b:.3g}B-parameter dense model, DDP fine-tune in "
             f"BF16. MFU is stuck at {mfu:.0f}%; comparable runs of this stack reach ~{mfu_reference:.0f}%. Here is "
             f"rank 0's trace. Walk me through it.")
    key = make_key(
        scenario, p, seed, brief=brief, observations=observations,
        discipline={
            "step_boundary": f"ProfilerStep# annotations give a clean {step_ms:.0f} ms period.",
            "gaps": (f"The compute stream is idle {gap_ms:.0f} ms at the end of every step ({idle_pct:.0f}% of it), "
                     f"while the NCCL stream runs one all-reduce for exactly that window: serialized communication, "
                     f"not starvation."),
            "overlap": (f"None: backward ends, then a single {ar_fmt} ms {workload.NCCL_ALLREDUCE.split('(')[0]} "
                        f"starts; DDP should fire ~{buckets} bucketed all-reduces during backward."),
            "longest_kernel": (f"The NCCL kernel ({ar_fmt} ms) dwarfs every compute kernel; inside the busy time "
                               f"the GEMM mix is normal."),
        },
        root_cause=("DDP's gradient bucketing/overlap is defeated: the reducer's autograd hooks do not fire during "
                    "backward (a wrapper or custom autograd function bypasses them), so one flat all-reduce of all "
                    "gradients runs after backward, serialized with compute."),
        traps=[{
            "id": "nccl_slow",
            "claim": "NCCL or NVLink is slow or misconfigured; run nccl-tests and retune NCCL.",
            "why_wrong": (f"{grad_gb:.0f} GB of bf16 gradients: the ring moves 2({n}-1)/{n} x {grad_gb:.0f} = "
                          f"{ring_gb:.0f} GB per GPU; {ring_gb:.0f} GB / {ar_fmt} ms = {busbw_obs:.0f} GB/s busbw, "
                          f"below the ~{gpu.busbw_gbps:.0f} GB/s the link reaches but not pathological. A perfect "
                          f"{fast_ar_ms:.0f} ms all-reduce, still serialized, only lifts MFU from {mfu:.0f}% to "
                          f"{mfu_fast_nccl:.0f}%. The serialization, not the bandwidth, is the bug."),
        }, {
            "id": "no_sync",
            "claim": "no_sync() left on, so gradients are never synchronized.",
            "why_wrong": "The trace shows exactly one all-reduce per step, so the gradients are synchronized; "
                         "what is missing is the bucketing, not the sync.",
        }],
        decisive_measurement="nsys-kern-sum",
        confirmation=(f"nsys stats --report cuda_gpu_kern_sum: one ncclDevKernel_AllReduce instance per step at "
                      f"~{ar_fmt} ms, not ~{buckets} bucket-sized ones; TORCH_DISTRIBUTED_DEBUG=DETAIL (ddp-debug) "
                      f"confirms the bucket count."),
        fix=("Restore bucketed overlap: remove the hook-defeating wrapper so DDP's reducer fires bucket all-reduces "
             "during backward (bucket_cap_mb=25)."),
        expected={"before_ms": round(step_ms, 2), "after_ms": round(after_ms, 2), "speedup": round(speedup, 3),
                  "unit": "ms per step",
                  "arithmetic": (f"backward {bwd_obs:.0f} ms > comm {ar_fmt} ms, so ~{HIDE_FRACTION:.0%} hides: "
                                 f"exposed {exposed_ms:.0f} ms; {step_ms:.0f} - {ar_fmt} + {exposed_ms:.0f} = "
                                 f"{after_ms:.0f} ms; MFU {mfu:.0f}% x {step_ms:.0f}/{after_ms:.0f} = {mfu_after:.0f}%")},
        model_answer=(
            f"Step is {step_ms:.0f} ms. The compute stream has a {gap_ms:.0f} ms hole at the end of every step, and "
            f"the NCCL stream is busy for exactly that hole: one monolithic all-reduce, fully serialized after "
            f"backward. That's {idle_pct:.0f}% of the step. {grad_gb:.0f} GB of BF16 gradients at ~{busbw_obs:.0f} "
            f"GB/s busbw checks out for the duration, so NCCL isn't broken; overlap is. DDP should be firing "
            f"~{buckets} bucket-sized all-reduces during backward; one big kernel means the reducer hooks aren't "
            f"triggering, probably a wrapper bypassing autograd. Backward is {bwd_obs:.0f} ms, comm is {ar_fmt} ms, "
            f"so it hides almost entirely: I expect ~{after_ms:.0f} ms steps, {speedup:.2f}x, MFU {mfu:.0f} to "
            f"{mfu_after:.0f}%. I'd confirm by counting NCCL kernel instances per step in nsys stats before "
            f"touching anything."),
        marks={"step": {"start_us": first["start"] / 1e3, "end_us": second["start"] / 1e3},
               "gap": {"start_us": first["ar"][0] / 1e3, "end_us": first["ar"][1] / 1e3}},
    )
    per_rank = [{"rank": r, "compute_ms": round((fwd_obs + bwd_obs) * (1.0 if r == 0 else float(rng.normal(1, 0.004))), 2),
                 "wait_ms": 0.0, "comm_ms": round(allreduce_ms_obs, 2), "optimizer_ms": round(opt_obs, 2),
                 "step_ms": round(step_ms, 2)} for r in range(n)]
    artifacts = {
        "per_rank": per_rank,
        "gpus": gpu_clock_report(gpu, n, rng),
        "kernels": workload.kernel_table(fwd + bwd, np.concatenate([sum_f, sum_b]) // p.steps),
        "gpu": {"key": gpu.key, "peak_tflops": gpu.bf16_tflops, "mem_tbps": gpu.mem_tbps,
                "ridge_flop_per_byte": round(physics.ridge_point(gpu), 1), "count": n},
        "model": {**shape, "params": n_params, "tokens_per_gpu": p.tokens_per_gpu},
        # What DDP's reducer was built with (the ddp-debug tool prints it as DDP's logger
        # does); the trace shows what actually ran: one all-reduce per step.
        "ddp": {"bucket_cap_mb": 25.0, "first_bucket_mb": 1.0, "grad_dtype": "bfloat16", "grad_bytes": grad_bytes,
                "bucket_bytes": physics.ddp_bucket_bytes(grad_bytes), "world_size": n},
        "steps": [{"start_us": s["start"] / 1e3, "end_us": s["end"] / 1e3} for s in steps],
    }
    return Built(key=key, artifacts=artifacts, trace_for_rank=lambda rank: trace, ranks=1)


scenario = Scenario(
    id="ddp", version=2, older=(1,), title="Unoverlapped DDP all-reduce",
    signature="One long NCCL kernel after backward; the compute stream idles for exactly its duration",
    Params=Params, build=build,
    observations=("compute_idle_ms", "allreduce_ms", "nccl_kernels_per_step", "busbw_gbps", "mfu_pct",
                  "expected_mfu_pct"),
    seed_headlines={"step_ms": 620, "gap_ms": 175, "idle_pct": 28, "allreduce_ms": 175, "busbw_gbps": 160,
                    "mfu_pct": 31, "expected_mfu_pct": 41, "speedup": 1.33, "nccl_kernels_per_step": 1},
    reader_checks={"step_ms": "step_ms", "compute_idle_ms": "compute_idle_ms", "max_gap_ms": "gap_ms",
                   "nccl_ms_per_step": "allreduce_ms", "nccl_kernels_per_step": "nccl_kernels_per_step"},
    rubric=Rubric(
        trap_parts={
            "nccl_slow": r"\b(nccl|the collective|collectives|interconnect|nvlink|the network|fabric|busbw|bus bandwidth)\b",
            "no_sync": r"\b(no[ _-]?sync|gradient accumulation)\b",
        },
        root_cause=(
            (r"serializ\w*", r"\b(no|not|without|zero|broken|defeated|missing|lost) overlap", r"overlap (is )?(broken|missing|gone|defeated|lost|not happening)",
             r"after (the )?backward", r"not overlapp\w*", r"(one|a) (big|monolithic|single|flat|giant|huge) (nccl |all-?reduce)",
             r"\b(running|runs|sits?|sitting) (all )?(alone|by itself|on its own)\b", r"\bnothing (else )?(overlaps|runs)\b"),
            (r"bucket\w*", r"\breducer\b", r"\bhooks?\b", r"\bwrapper\b"),
        ),
        fix=(r"bucket\w*.{0,40}(overlap|during (the )?backward|restor\w*|fir\w+)", r"restor\w* (the )?(bucket\w*|overlap)",
             r"(remove|fix|drop|unwrap)\w* (the |that )?(\w+ )?(wrapper|hooks?)", r"let ddp('s)? (reducer|hooks?)", r"bucket_cap_mb",
             r"overlap (the )?(all-?reduce|comm\w*|gradient sync\w*) with (the )?backward",
             r"overlap\w* (it|them|that) with (the )?backward"),
        traps={"nccl_slow": (r"\bnccl[ _](knobs|env\w*|channels|build|version|tuning|debug|algo\w*|proto\w*)\b", r"\b(fix|tune|retune|tweak|bump|upgrade|tuning)\b.{0,20}\b(nccl|the collective)\b",
                r"nccl.{0,30}(slow|broken|misconfig\w*|bandwidth|tun\w*|bottleneck|problem|culprit)",
                             r"\binterconnect\b", r"\b(fabric|network|nvlink|link) (problem|issue|fault)\b",
                             r"(slow|broken|bad|misconfigured) (nccl|nvlink|interconnect)", r"blam\w+ (nccl|nvlink|the network)",
                             r"nvlink", r"nccl-tests",
                             r"\b(not|isn't|it's not|wasn't) (the )?(nccl|nvlink|network|wire)\b", r"\bnccl (isn't|is not|wasn't)\b",
                             r"(slow|bad|degraded) (interconnect|network|links?)",
                             r"\b(interconnect|fabric|nvlink|nccl)\b.{0,25}\b(misconfigur\w*|degraded|underperform\w*|"
                             r"under-perform\w*|the (problem|bottleneck|culprit))",
                             r"\b(tune|retune|tweak) (the )?nccl\b", r"\bnccl_(algo|proto|min_nchannels|nthreads|buffsize)\b",
                             r"\bwrong (nccl )?protocol\b",
                             r"\bsomething('s| is) (off|wrong|broken) (in|with) (the )?(interconnect|nccl|network|fabric|"
                             r"nvlink|links?)\b", r"\bnccl (config\w*|settings|setup)\b"),
               "no_sync": (r"\bno[ _-]sync\b", r"\brequire_backward_grad_sync\b", r"\b(accumulation|grad-?accum\w*) (wrapper|loop|code|context)\b", r"\bcontext manager\b",
                r"no_sync", r"(never|not) (being )?(synchroni[sz]\w*|synced)", r"grad(ient)? accumulation")},
        also_confirms=("ddp-debug",),
    ),
    hints=(
        Hint("The communication stream",
             "Put the NCCL stream beside the compute stream for one step. When does the all-reduce start "
             "relative to the end of backward, and does it run alongside backward or on its own?"),
        Hint("Count, then do the arithmetic",
             "How many NCCL kernels run per step? Before judging the interconnect, work out the bus bandwidth "
             "the all-reduce actually achieved: the gradient bytes, what a ring all-reduce moves per GPU, and "
             "the kernel's duration."),
        Hint("The count that settles it",
             "Run the GPU kernel summary (nsys-kern-sum) and read how many instances of the NCCL kernel there "
             "are per step. How many would you expect DDP to launch?"),
    ),
)
