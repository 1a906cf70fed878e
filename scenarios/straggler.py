"""Case 4: a straggler rank in an 8-GPU all-reduce.

The pathology: after a node reprovision one GPU (rank 3 in the seed) runs thermally
throttled: its SM clock sits far below the maximum ("SW Thermal Slowdown"), so every
compute-bound kernel it runs is slower by max_clock / throttled_clock. Data-parallel
training is as fast as its slowest rank: a collective starts only when the last rank
arrives, so every other rank's NCCL kernel launches on time and spins until the
straggler shows up. On rank 0's trace (the one everybody stares at) that looks like
"NCCL got slow": one all-reduce of ~215 ms where the wire needs ~20.

What a strong read notices: the step regressed by about the straggler's excess; the
compute stream idles while one long ncclDevKernel_AllReduce runs; a long collective is
a symptom (slow wire or late arrival) that one rank's trace cannot tell apart; the size
arithmetic rejects the wire (bucket x 2(N-1)/N at even a modest 150 GB/s is ~19 ms);
per-rank compute finds one rank ~1.5x slower with the same kernels and shapes, and its
excess equals the others' wait (590 - 395 = 195 ms); its GEMMs and attention kernels
are each slower by the clock ratio while its memory-bound kernels (elementwise, the
optimizer) are not, which says SM clock, not HBM (ECC/row-remap would slow exactly
those) and not data skew (same kernel count, same shapes); the straggler's own NCCL
kernel is short (it waits for nobody) and is the true comm time; DCGM / nvidia-smi
confirm the clock and the throttle reason. Fix the cooling: no code change.

Physics: forward = 2 x params x tokens / (peak x efficiency), backward twice that,
spread over the kernels of a Llama-style layer in proportion to their roofline times.
The throttled GPU's kernels take their roofline time at the reduced clock
(app.physics.roofline_us with clock_ratio): the compute roof scales with the SM clock,
HBM bandwidth does not. Each rank has its own small compute spread (normal, the
`rank_jitter_pct` sigma). Each rank's NCCL kernel starts when that rank has finished
backward and ends when the last rank has arrived plus the true comm time: the bucket's
bytes x 2(N-1)/N over the achieved bus bandwidth. After it, fused AdamW updates the
rank's 1/N shard of fp32 master weights and states (28 B per parameter: read param,
grad, exp_avg, exp_avg_sq, write param, exp_avg, exp_avg_sq, 4 B each) at 85% of HBM
bandwidth, unaffected by the SM clock, then `loss.item()` syncs the CPU. All ranks run
on one clock, so step boundaries line up across the per-rank traces. The key is
computed from the plan that the traces are emitted from (durations are exact integer
nanoseconds per phase), and the emission checks that every kernel lands where the plan
put it.

Seeds draw the world (4 or 8 GPUs), the GPU (H100, H200, A100), which rank straggles
(never 0), the throttle (55-80% of the max SM clock), the model size, tokens per GPU,
efficiency, the bucket and its bus bandwidth, and the healthy ranks' spread; the
pathology stays: one uniformly slow rank, everybody else's NCCL kernel long.

Modelling choice: like the seed, each step shows one exposed collective, the all-reduce
of the last gradient bucket after backward. The rest of the step's FSDP-style traffic
(overlapped gathers and earlier buckets) is not drawn: with a straggler those would
also wait on the slow rank, which spreads the same wait over more NCCL kernels without
changing the step time, which the straggler's excess compute sets. The straggler is
never rank 0, so rank 0's trace shows the long all-reduce the seed's team stares at.

Canonical deviations from the seed, where its arithmetic does not close (the model's
numbers stand, and the key states them):
- Clock. The seed's 1410 MHz (ratio 0.71) gives ~555 ms even if every kernel slowed by
  the full clock ratio; DESIGN.md's ~1325 MHz assumes exactly that. With the roofline,
  the memory-bound kernels (elementwise: ~18% of this model's fwd+bwd kernel time, and
  the optimizer) keep their speed, so 1410 MHz gives ~519 ms and 1325 MHz ~547 ms; the
  clock that makes rank 3 compute ~587 ms is 1219 MHz (ratio 0.616), and the canonical
  key says so. Rank 3's GEMMs are 1.63x slower, its elementwise kernels 1.00x.
- The optimizer (16 ms: a 13B model's 1/8 shard at 28 B per parameter) runs after the
  all-reduce, as it must (it needs the reduced gradients), so rank 0 shows fwd ~127 and
  bwd ~252 ms, the all-reduce, then the optimizer, where the seed draws the optimizer
  before the all-reduce. Compute per rank (fwd + bwd + optimizer busy time) is ~393 ms
  on the healthy ranks (the seed's 395) and ~587 on rank 3 (590); the straggler's
  excess is still exactly the wait (195 ms) because the optimizer is not clock-bound.
- The step (~612 ms; the seed's 610) also carries the host prologue (1.8 ms) and
  ~2,170 inter-kernel gaps (2.6 ms), and after the fix the last arrival is the slowest
  healthy rank, not rank 0; so the healthy step is ~418 ms (1.46x), where the seed
  rounds to 395 + 20 = 415 (1.47x). The pre-incident step is that same healthy step:
  the seed's "~430 ms before the reprovision" and "30% drop" do not match its own
  415 ms; the model says ~418 ms and a 32% throughput drop.

Version 2 (current): FSDP as it runs, and the host as real traces show it.
- Parallelism. Version 1 said "FSDP-style" but drew one 1.6 GB all-reduce per step against
  the 26 GB of gradients a 13B model has, with the NCCL stream idle through backward; and
  13B under DDP does not fit 80 GB (weights, grads and AdamW state alone pass 100 GB).
  Version 2 is FSDP FULL_SHARD (app/feasibility.py: ~48 GB per GPU canonical, within 90%
  of HBM; adjust_draw shrinks tokens_per_gpu, then the model, until a draw fits): the root unit (embedding
  and LM head, 2.6 GB) and each of the 40 layers (0.58 GB) are all-gathered before their
  forward (limit_all_gathers: the CPU issues layer u+1's after layer u-2 ends, a
  cudaEventSynchronize on the main thread) and again before their backward (BACKWARD_PRE
  prefetch), and each layer's gradients are reduce-scattered after its backward: 122
  collectives per step on the NCCL stream, ~230 ms of wire time at ~290 GB/s busbw
  (canonical comm_busbw_frac 0.78: NVLink 4 all-gathers of 0.6-2.6 GB; drawn 0.6-0.85 and
  raised until a layer's all-gather fits under its forward: comm-bound FSDP is another
  case). `bucket_gb` is not used.
- The straggler's lateness. A collective ends on every rank when its last rank has entered
  it plus its wire time, so the ranks run in lockstep at the straggler's pace: every other
  rank's all-gathers spin until rank 3 reaches that layer, and their layers wait on them.
  On rank 0 the compute stream idles ~215 ms per step on its collectives (`allreduce_ms`:
  its holes of 50 µs or more while the NCCL stream runs,
  the figure the team calls "NCCL got slow"), spread over every layer instead of one
  exposed kernel; its NCCL kernels add up to most of the step (`nccl_ms`). Rank 3's own
  collectives wait for nobody: their kernel time is the wire time (`wire_ms`), of which
  only ~20 ms (`comm_ms`, the seed's "true comm") is not hidden under its compute (the
  root's gather before the first layer, the last reduce-scatters). The others' extra
  wait is the straggler's excess compute (~195 ms). After the fix the lockstep runs at the
  slowest healthy rank's pace: the key expects 616 - (589 - 394) = ~421 ms (1.46x); the
  fixed build runs within 1% of that.
- Canonical: step ~616 ms (seed 610), compute 394 / 589 ms (seed 395 / 590), wait ~195,
  exposed comm ~20, after the fix ~421 (seed 415). The clock: version 2's own draws (rank
  spread, kernel gaps) put 1219 MHz's straggler at ~594 ms, so version 2's canonical clock
  is 1232 MHz (ratio 0.622) for the seed's ~590.
- Host timing from hosttime.MEASURED_2 (kernel gaps in two populations, cudaLaunchKernel's
  tail, launch latencies, Python between ops) and every host row this file draws (zero_grad,
  the DataLoader, each collective's c10d op > record_param_comms > nccl: rows, event
  record and waits, the gap between steps) varied step to step; all ranks on one clock,
  each rank's draws its own; every rank's trace is emitted together, one collective at a
  time, and the key is read back from what was emitted.
- The op tree around each launch (app/trace/optree.py, as ddp version 3 has it): aten::linear >
  aten::t's views and aten::matmul > aten::mm, `autograd::engine::evaluate_function: MmBackward0`
  in backward, record_shapes' Input Dims (also on the c10d ops), Record function ids, sequence
  numbers and fwdbwd flows; ~3.1 ops per launch (real eager traces 2.0-5.3). Around the
  collectives, FSDP's own rows (torch/distributed/fsdp/_runtime_utils.py): each layer's
  `FullyShardedDataParallel.forward` > `_pre_forward` > `_pre_forward_prefetch` (> `rate_limiter`
  on limit_all_gathers' cudaEventSynchronize), `_post_forward`; `_pre_backward_hook` >
  `_pre_backward_prefetch`; each reduce-scatter inside the flat parameter's AccumulateGrad
  evaluate_function > `_post_backward_hook`. All of it lies in CPU time the rows already had:
  no kernel, launch or key figure moves.
- The fixed build (`fixed=True`): the same instance with rank 3's clock restored.
- Where it lives: this file draws each rank's compute (the spread, the straggler's clock) and
  reads the key back; the FSDP engine that emits every rank's step (collectives, per-layer
  kernels and op trees, host rows, FSDP's hooks) is scenarios/_fsdp.py.

Versions: 1, one exposed all-reduce per step (built still, byte for byte, for what was
made with it). 2, above, with training.optimizer's four AdamW launches of grid 320 for a
1.6B-parameter shard (84M elements covered: a launch count no run records). 3 (current): the
same, with AdamW(fused=True) launched as multi_tensor_apply launches it over each rank's FSDP
flat-parameter shards (root first, then one per layer), in fp32 (the float functor): ~80
launches of up to 320 blocks of 65,536 elements for 13B on 8 ranks, the same 28 B per parameter
at 85% of HBM bandwidth. The host draws after the optimizer move with its launch count, so the
canonical's figures shift by a few tenths of a percent (step 614 ms, wait 193, after the fix 421).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import model_validator

from app import feasibility, physics, training, workload
from app.scenario import (Built, Hint, InstanceError, Scenario, ScenarioParams, building, fixed, gpu_clock_report,
                          make_key, new_builder, obs, param, trace_start_ns)
from app.trace.builder import Kind, Trace
from app.trace.emit import cpu_span, launch_phase, memcpy
from app.scoring.rubric import Rubric
from scenarios import _fsdp
from scenarios._fsdp import _layer_bytes, _spread_ns

GPU_GAP_NS = 1_200  # idle between back-to-back kernels on one stream (dispatch), as training.forward_backward
LAUNCH_LATENCY_NS = 3_000  # launch_phase's default: a kernel is ready 3 µs after its launch call returns
CPU_LEAD_MARGIN_NS = 25_000  # how far the first launch of a phase runs ahead of the GPU
# training.allreduce: the NCCL kernel starts 4 µs after the compute-stream event it waits on.
NCCL_AFTER_READY_NS = 4_000
# training.optimizer: the first AdamW kernel starts 5 µs after the all-reduce ends, 1.5 µs gaps.
OPT_AFTER_READY_NS, OPT_GAP_NS, OPT_LAUNCHES = 5_000, 1_500, 4
OPT_BYTES_PER_PARAM = 28.0  # fp32 master weights and AdamW states (see the docstring)
OPT_HBM_EFF = 0.85  # multi_tensor_apply reaches ~85% of HBM bandwidth (training.optimizer)
# training.sync_on_loss: the DtoH copy starts 2 µs after the GPU drains, the CPU returns
# 2.5 + 8 + 4 µs after the copy starts; the next ProfilerStep opens 15 µs later.
DTOH_AFTER_NS, DTOH_NS, SYNC_TAIL_NS, STEP_GAP_NS = 2_000, 1_600, 14_500, 15_000
MODEST_BUSBW_GBPS = 150.0  # the seed's "even at a modest 150 GB/s"
THROTTLE_TEMP_C = (87, 91)  # SW thermal slowdown engages in the high 80s on H100/A100 SXM
SW_THERMAL_BIT = 0x20  # DCGM_FI_DEV_CLOCKS_EVENT_REASONS: SW_THERMAL

class Params(ScenarioParams):
    gpu: Literal["H100", "H200", "A100"] = param("H100", unit="GPU model", choices=["H100", "H200", "A100"])
    world_size: int = param(8, unit="ranks (GPUs in one NVLink domain)", ge=4, le=8, choices=[4, 8])
    straggler_rank: int = param(3, unit="rank of the throttled GPU (never 0: rank 0 is the trace everyone reads)",
                                ge=1, le=7, draw=(1, 7))
    throttle_clock_frac: float = param(0.6156, unit="throttled SM clock as a fraction of the max SM clock",
                                       ge=0.3, le=0.9, draw=(0.55, 0.8))
    model_params_b: float = param(13.0, unit="billion parameters", ge=3.0, le=70.0, draw=(6.0, 15.0))
    tokens_per_gpu: int = param(2048, unit="tokens per GPU per step", ge=1024, le=32_768, draw=(1536, 4096))
    compute_eff: float = param(0.4281, unit="fraction of dense bf16 peak in forward/backward (healthy GPU)",
                               ge=0.15, le=0.75, draw=(0.36, 0.55))
    bucket_gb: float = param(1.6, unit="GB of bf16 gradients in the step's exposed all-reduce", ge=0.1, le=8.0,
                             draw=(0.8, 2.5))
    comm_busbw_frac: float = param(0.3796, unit="fraction of the ring's achievable busbw the all-reduce reaches",
                                   ge=0.1, le=1.0, draw=(0.35, 0.6))
    rank_jitter_pct: float = param(0.5, unit="% sigma of per-rank compute time among healthy ranks", ge=0.0,
                                   le=1.5, draw=(0.2, 0.6))
    host_prologue_ms: float = param(1.8, unit="ms from step start to the first forward kernel (zero_grad, "
                                    "DataLoader, H2D)", ge=1.5, le=50.0, draw=(1.5, 4.0))
    op_overhead_us: float = param(25.0, unit="µs of framework CPU time per op", ge=5.0, le=60.0, draw=(15.0, 35.0))
    steps: int = param(4, unit="training steps in the trace", ge=3, le=2000)

    @classmethod
    def adjust_draw(cls, values: dict) -> dict:
        # A seeded draw picks the rank among 1..7 independently of the world; fold it into
        # 1..world-1. An explicit override outside the world is an error (below).
        world, rank = int(values["world_size"]), int(values["straggler_rank"])
        if rank >= world:
            values["straggler_rank"] = 1 + (rank - 1) % (world - 1)
        if building() >= 2:
            values = _feasible_v2(values)
        return values

    @model_validator(mode="after")
    def _rank_in_world(self):
        if self.straggler_rank >= self.world_size:
            raise ValueError(f"straggler_rank {self.straggler_rank} must be below world_size {self.world_size}")
        return self

    def refusal(self) -> str | None:
        """Version 2: an override whose FSDP step does not fit 90% of HBM (draws: _feasible_v2)."""
        return _memory_v2(self).needs(physics.GPUS[self.gpu], f"{self.model_params_b:g}B under FSDP FULL_SHARD "
                                      f"on {self.world_size}x {self.gpu} with fp32 master weights at "
                                      f"{self.tokens_per_gpu:,} tokens per GPU") if building() >= 2 else None

    @classmethod
    def canonical(cls) -> "Params":
        """The seed's case 4: 8xH100, 13B model, rank 3 throttled; 610 ms steps (version 2: ~623), 215 ms
        on rank 0's collectives (version 2: ~228 ms of compute idle on them)."""
        if building() >= 2:  # FSDP's 0.6-2.6 GB gathers at ~78% of the ring's busbw; the clock: docstring
            return cls(comm_busbw_frac=0.78, throttle_clock_frac=0.622)
        return cls()


def _memory_v2(p: Params) -> feasibility.TrainingMemory:
    """Version 2's step per GPU: FSDP FULL_SHARD, fp32 master weights and AdamW state, no checkpointing."""
    shape = training.model_shape(p.model_params_b * 1e9)
    return feasibility.training_memory(p.model_params_b * 1e9, world=p.world_size, tokens_per_gpu=p.tokens_per_gpu,
                                       hidden=shape["hidden"], layers=shape["layers"], sharding="zero3",
                                       master_fp32=True)


def _feasible_v2(values: dict) -> dict:
    """Version 2's draw pulled into what a real FSDP job could run: the step fits 90% of HBM
    (app/feasibility.py: FULL_SHARD, fp32 master weights and AdamW state, no checkpointing),
    and a layer's all-gather fits under that layer's forward on a healthy GPU, as FSDP's
    prefetch needs (comm-bound FSDP is another case)."""
    gpu = physics.GPUS[values["gpu"]]
    world = int(values["world_size"])
    n = float(values["model_params_b"]) * 1e9
    shape = training.model_shape(n)
    while True:
        mem = feasibility.training_memory(n, world=world, tokens_per_gpu=int(values["tokens_per_gpu"]),
                                          hidden=shape["hidden"], layers=shape["layers"], sharding="zero3",
                                          master_fp32=True)
        if mem.fits(gpu):
            break
        if int(values["tokens_per_gpu"]) > 1024:
            values["tokens_per_gpu"] = max(1024, int(values["tokens_per_gpu"]) * 3 // 4)
        else:  # the fewest tokens still do not fit (a big model on four A100s): a smaller model
            n = max(3e9, n * 0.85)
            values["model_params_b"] = round(n / 1e9, 2)
            shape = training.model_shape(n)
    layer_fwd_ms = 2 * n * int(values["tokens_per_gpu"]) / (gpu.bf16_tflops * 1e12 * float(values["compute_eff"])) \
        * 1e3 / shape["layers"]
    ag_ms_at_full = _layer_bytes(n, shape) * (world - 1) / world / (gpu.busbw_gbps * 1e9) * 1e3
    frac = float(np.clip(0.6 + (float(values["comm_busbw_frac"]) - 0.35) / 0.25 * 0.25, 0.6, 0.85))
    values["comm_busbw_frac"] = round(max(frac, min(0.95, ag_ms_at_full / (0.8 * layer_fwd_ms))), 4)
    # the CPU launches a layer's forward well inside that layer's GPU time (else launch-bound, case 3)
    oh_max = (0.6 * layer_fwd_ms * 1e3 - COLLECTIVE_CPU_US) / LAYER_FWD_LAUNCHES / 1.125 - OP_FIXED_US / 1.125
    values["op_overhead_us"] = round(float(np.clip(float(values["op_overhead_us"]), 5.0, max(5.0, oh_max))), 3)
    return values


LAYER_FWD_LAUNCHES = 23  # training.llm_step_specs: a Llama layer's forward kernels
COLLECTIVE_CPU_US = 150.0  # a layer's all-gather rows and the stream wait
OP_FIXED_US = 30.0  # per op beside its framework time: the launch call (~8.5 µs mean) and Python between ops (~22)


def _layer_cpu_us(op_overhead_us: float) -> float:
    """The main thread's time to issue one layer's forward: its all-gather and its launches."""
    return LAYER_FWD_LAUNCHES * (1.125 * op_overhead_us + OP_FIXED_US) + COLLECTIVE_CPU_US


def _cpu_lead_ns(overhead: np.ndarray, launch: np.ndarray, dur: np.ndarray) -> int:
    """How early a thread must start launching a phase so that no kernel waits for its launch:
    max over kernels of (launch-ready time - GPU-bound start), both relative to the phase start."""
    cost = overhead + launch + np.maximum(overhead // 8, 500)  # launch_phase's op cost (epilogue included)
    op_start = np.zeros(len(cost), np.int64)
    np.cumsum(cost[:-1], out=op_start[1:])
    ready = op_start + overhead + launch + LAUNCH_LATENCY_NS
    gpu_start = np.zeros(len(dur), np.int64)
    np.cumsum(dur[:-1] + GPU_GAP_NS, out=gpu_start[1:])
    return int((ready - gpu_start).max())


@dataclass
class _Plan:
    """Every rank's step timeline, int64 ns relative to the trace base; arrays are [rank, step]."""

    world: int
    steps: int
    straggler: int
    emit_seed: int
    first_step: int
    nccl_stream: int
    bucket_bytes: float
    shard_params: float
    h2d_bytes: int
    h2d_ns: int
    opt_ns: int
    n_fwd: int
    n_bwd: int
    start: np.ndarray  # ProfilerStep start
    prologue: np.ndarray  # start -> first forward kernel
    fwd: np.ndarray  # forward kernel time (sum)
    bwd: np.ndarray
    healthy_fwd: np.ndarray  # what the straggler's row would be at full clock
    healthy_bwd: np.ndarray
    arrive: np.ndarray  # NCCL kernel start (the rank's compute is done)
    ar_end: np.ndarray  # NCCL kernel end (the last rank arrived + comm)
    comm: np.ndarray  # [step] true comm time
    opt_end: np.ndarray
    step_end: np.ndarray  # ProfilerStep end

    def fb_gaps(self) -> int:
        return (self.n_fwd + self.n_bwd - 2) * GPU_GAP_NS


def _plan(p: Params, gpu: physics.Gpu, rng: np.random.Generator, n_fwd: int, n_bwd: int,
          ratio_fwd: float, ratio_bwd: float) -> _Plan:
    world, steps, s = p.world_size, p.steps, p.straggler_rank
    emit_seed = int(rng.integers(0, 2**62))
    t0 = trace_start_ns(rng)  # one clock for all ranks
    first_step = int(rng.integers(3, 40))
    nccl_stream = int(rng.choice([40, 52, 84]))
    # Per-rank compute spread. Rank 0 is the typical healthy rank whose trace the team reads:
    # it shares its draw with the healthy rank at the middle of the ranking, so rank 0 is the
    # median over all ranks (straggler included), the per-rank view's reference.
    sigma = p.rank_jitter_pct / 100.0
    others = np.clip(rng.normal(0.0, sigma, world - 2), -2.5 * sigma, 2.5 * sigma)
    factor = np.ones(world)
    factor[[r for r in range(1, world) if r != s]] = 1.0 + others
    factor[0] = 1.0 + np.sort(others)[(world - 2) // 2]
    factor[s] = 1.0 + float(np.clip(rng.normal(0.0, sigma), -2.5 * sigma, 2.5 * sigma))
    step_f = 1.0 + rng.normal(0.0, 0.001, (world, steps))
    step_b = 1.0 + rng.normal(0.0, 0.001, (world, steps))
    n_params = p.model_params_b * 1e9
    fwd_ns = 2 * n_params * p.tokens_per_gpu / (gpu.bf16_tflops * 1e12 * p.compute_eff) * 1e9
    healthy_fwd = np.rint(fwd_ns * factor[:, None] * step_f).astype(np.int64)
    healthy_bwd = np.rint(2 * fwd_ns * factor[:, None] * step_b).astype(np.int64)
    fwd, bwd = healthy_fwd.copy(), healthy_bwd.copy()
    fwd[s] = np.rint(fwd_ns * ratio_fwd * factor[s] * step_f[s]).astype(np.int64)
    bwd[s] = np.rint(2 * fwd_ns * ratio_bwd * factor[s] * step_b[s]).astype(np.int64)
    prologue = np.rint(p.host_prologue_ms * 1e6 * (1.0 + np.clip(rng.normal(0.0, 0.01, (world, steps)), -0.03, 0.03))
                       ).astype(np.int64)
    bucket_bytes = p.bucket_gb * 1e9
    comm_ms = physics.allreduce_ms(bucket_bytes, world, gpu.busbw_gbps * p.comm_busbw_frac)
    comm = np.rint(comm_ms * 1e6 * rng.normal(1.0, 0.01, steps)).astype(np.int64)
    skew = rng.integers(0, 3_000, (world, steps))  # ranks leave the collective within a few µs
    # Exactly training.optimizer's arithmetic (its durations sum to this, to the ns).
    shard = n_params / world
    opt_total_ms = shard * OPT_BYTES_PER_PARAM / (gpu.mem_tbps * 1e12 * OPT_HBM_EFF) * 1e3
    opt_ns = int(round(opt_total_ms * 1e6))
    h2d_bytes = p.tokens_per_gpu * 8 * 2  # int64 input ids and labels
    h2d_ns = int(h2d_bytes / 20e9 * 1e9) + 2_000  # pinned PCIe Gen5, ~20 GB/s effective for small copies

    start = np.zeros((world, steps), np.int64)
    arrive, ar_end, opt_end, step_end = (np.zeros((world, steps), np.int64) for _ in range(4))
    start[:, 0] = t0 + rng.integers(0, 40_000, world)  # the processes do not enter step 0 in lockstep
    gaps = (n_fwd + n_bwd - 2) * GPU_GAP_NS
    for k in range(steps):
        arrive[:, k] = start[:, k] + prologue[:, k] + fwd[:, k] + bwd[:, k] + gaps + NCCL_AFTER_READY_NS
        last = int(arrive[:, k].max())
        ar_end[:, k] = last + comm[k] + skew[:, k]
        opt_end[:, k] = ar_end[:, k] + OPT_AFTER_READY_NS + opt_ns + (OPT_LAUNCHES - 1) * OPT_GAP_NS
        step_end[:, k] = opt_end[:, k] + DTOH_AFTER_NS + SYNC_TAIL_NS
        if k + 1 < steps:
            start[:, k + 1] = step_end[:, k] + STEP_GAP_NS
    return _Plan(world, steps, s, emit_seed, first_step, nccl_stream, bucket_bytes, shard, h2d_bytes, h2d_ns,
                 opt_ns, n_fwd, n_bwd, start, prologue, fwd, bwd, healthy_fwd, healthy_bwd, arrive, ar_end, comm,
                 opt_end, step_end)


def _durations(plan: _Plan, rank: int, w_fwd: np.ndarray, w_bwd: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each step's kernel durations on one rank, from that rank's own duration stream."""
    rng = np.random.default_rng([plan.emit_seed, rank, 0])
    return [(_spread_ns(w_fwd, int(plan.fwd[rank, k]), rng), _spread_ns(w_bwd, int(plan.bwd[rank, k]), rng))
            for k in range(plan.steps)]


def _emit_rank(plan: _Plan, p: Params, gpu: physics.Gpu, rank: int, fwd: list, bwd: list,
               weights: dict) -> Trace:
    """Rank `rank`'s trace, with every GPU time checked against the plan the key came from."""
    meta_rng = np.random.default_rng([plan.emit_seed, rank, 2])
    cpu_rng = np.random.default_rng([plan.emit_seed, rank, 1])
    b, pid, _ = new_builder(meta_rng, gpu, rank=rank, world=plan.world, visible_gpus=plan.world)
    topo = training.Topology(pid, pid, pid + 37, rank, 7, nccl_stream=plan.nccl_stream)
    topo.name_rows(b)
    w_f, w_b = weights["straggler" if rank == plan.straggler else "healthy"]
    durs = _durations(plan, rank, w_f, w_b)
    ops_f, kern_f = workload.intern(b, fwd)
    ops_b, kern_b = workload.intern(b, bwd)
    nelems = int(plan.bucket_bytes / physics.BF16_BYTES)

    def check(what: str, got: int, want: int, k: int) -> None:
        if got != want:
            raise InstanceError(f"straggler: on rank {rank}, step {k}, {what} lands at {got} ns where the plan "
                                f"says {want}: the CPU cannot launch ahead of the GPU with these params (raise "
                                f"host_prologue_ms or tokens_per_gpu, or lower op_overhead_us)")

    for k in range(plan.steps):
        s0 = int(plan.start[rank, k])
        g0 = s0 + int(plan.prologue[rank, k])
        f_ns, b_ns = durs[k]
        oh, ln = training.op_overheads_ns(cpu_rng, len(fwd), p.op_overhead_us)
        # The forward's launches start early enough that no kernel waits for its launch (the
        # CPU stays ahead of the GPU); the DataLoader hands over the batch a third of the way
        # into the prologue, or sooner when the launches need the room.
        cpu_t0 = g0 - _cpu_lead_ns(oh, ln, f_ns) - CPU_LEAD_MARGIN_NS
        dl_end = min(s0 + int(plan.prologue[rank, k]) * 7 // 20, cpu_t0 - 40_000)
        check("the forward's first launch", max(cpu_t0, s0 + 500_000 + 40_000), cpu_t0, k)
        cpu_span(b, "Optimizer.zero_grad#AdamW.zero_grad", pid, topo.main_tid, s0 + 20_000, s0 + 320_000)
        cpu_span(b, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", pid, topo.main_tid,
                 s0 + 400_000, dl_end)
        memcpy(b, host_pid=pid, cpu_tid=topo.main_tid, gpu_pid=rank, stream=7, kind="HtoD_pinned",
               nbytes=plan.h2d_bytes, cpu_start_ns=dl_end + 20_000, api_ns=10_000, gpu_start_ns=dl_end + 40_000,
               gpu_dur_ns=plan.h2d_ns, op_name="aten::copy_")
        f = launch_phase(b, host_pid=pid, cpu_tid=topo.main_tid, gpu_pid=rank, stream=7, op_names=ops_f,
                         kernel_names=kern_f, kernel_dur_ns=f_ns, cpu_t0=cpu_t0, gpu_t0=g0, op_overhead_ns=oh,
                         launch_ns=ln, gpu_gap_ns=GPU_GAP_NS)
        cpu_span(b, "FullyShardedDataParallel.forward", pid, topo.main_tid, cpu_t0 - 2_000, f.cpu_end + 3_000)
        check("the first forward kernel", int(f.kernel_start[0]), g0, k)
        oh, ln = training.op_overheads_ns(cpu_rng, len(bwd), p.op_overhead_us)
        bw = launch_phase(b, host_pid=pid, cpu_tid=topo.autograd_tid, gpu_pid=rank, stream=7, op_names=ops_b,
                          kernel_names=kern_b, kernel_dur_ns=b_ns, cpu_t0=f.cpu_end + 20_000, gpu_t0=f.gpu_end,
                          op_overhead_ns=oh, launch_ns=ln, gpu_gap_ns=GPU_GAP_NS,
                          pending_kernel_start=f.kernel_start)
        ready = int(plan.arrive[rank, k]) - NCCL_AFTER_READY_NS
        check("the end of backward", bw.gpu_end, ready, k)
        cpu_ar, a0, a1 = training.allreduce(b, topo, cpu_t0=bw.cpu_end + 30_000, gpu_ready=bw.gpu_end,
                                            dur_ns=int(plan.ar_end[rank, k] - plan.arrive[rank, k]),
                                            nelems=nelems, world=plan.world)
        check("the NCCL kernel", a0, int(plan.arrive[rank, k]), k)
        opt = training.optimizer(b, topo, cpu_rng, params=plan.shard_params, cpu_t0=cpu_ar + 20_000,
                                 gpu_ready=a1, gpu=gpu, bytes_per_param=OPT_BYTES_PER_PARAM)
        check("the optimizer's end", opt.gpu_end, int(plan.opt_end[rank, k]), k)
        t_end = training.sync_on_loss(b, topo, cpu_t0=opt.cpu_end + 10_000, gpu_done=opt.gpu_end)
        check("the step's end", t_end, int(plan.step_end[rank, k]), k)
        cpu_span(b, f"ProfilerStep#{plan.first_step + k}", pid, topo.main_tid, s0, t_end)
    return b.build()


def _kernel_means(durs) -> np.ndarray:
    """Per-kernel mean duration over the steps (ns), forward then backward."""
    return np.concatenate([np.mean([d[0] for d in durs], axis=0), np.mean([d[1] for d in durs], axis=0)])


def _clock_evidence(gpu: physics.Gpu, gpus: list[dict], top: list[dict], s: int, clock_ratio: float, temp_c: int,
                    compute: np.ndarray, wait_by_rank: np.ndarray) -> dict:
    """What both versions' artifacts say about the GPUs: the GPU's figures, and the experiments
    a candidate can run (per-rank compute, DCGM, nvidia-smi on the straggler, and the one-GEMM
    microbench on each GPU in isolation: the top GEMM's shape at its roofline efficiency, the
    throttled GPU's compute roof scaled by its clock)."""
    n = len(compute)
    clock_mhz = int(round(gpu.max_sm_clock_mhz * clock_ratio))
    max_clock = gpu.max_sm_clock_mhz
    straggler_ms = float(compute[s])
    peer_ms = float(statistics.median(compute.tolist()))
    gemm_top = next(r for r in top if r["role"] == "gemm")
    m_, n_, k_ = gemm_top["shape"]
    ce, me = workload.EFFICIENCY["gemm"]
    bench = {ratio: physics.gemm_flops(m_, n_, k_) / physics.roofline_us(
        physics.gemm_flops(m_, n_, k_), physics.gemm_bytes(m_, n_, k_), gpu, ce, me, ratio) / 1e6
        for ratio in (1.0, clock_ratio)}
    return {
        "gpu": {"key": gpu.key, "peak_tflops": gpu.bf16_tflops, "mem_tbps": gpu.mem_tbps,
                "ridge_flop_per_byte": round(physics.ridge_point(gpu), 1), "count": n},
        "experiments": {
            "per_rank": {"rank_compute_ms": [round(float(c), 2) for c in compute],
                         "max_compute_ms": round(straggler_ms, 2), "median_compute_ms": round(peer_ms, 2),
                         "spread_ratio": round(straggler_ms / peer_ms, 3), "straggler_rank": s,
                         "excess_ms": round(straggler_ms - peer_ms, 2),
                         "rank_wait_ms": [round(float(x), 2) for x in wait_by_rank]},
            "dcgm": {"fields": ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_GPU_TEMP",
                                "DCGM_FI_DEV_POWER_USAGE"],
                     "rows": [{"gpu": g["index"], "DCGM_FI_DEV_SM_CLOCK": g["sm_clock_mhz"],
                               "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": SW_THERMAL_BIT if g["throttle_reasons"] else 0,
                               "DCGM_FI_DEV_GPU_TEMP": g["temperature_c"], "DCGM_FI_DEV_POWER_USAGE": g["power_w"]}
                              for g in gpus]},
            "nvidia_smi": {"index": s, "performance_state": "P0", "sm_clock_mhz": clock_mhz,
                           "graphics_clock_mhz": clock_mhz, "mem_clock_mhz": gpu.mem_clock_mhz,
                           "max_sm_clock_mhz": max_clock, "clocks_event_reasons": {
                               "Idle": False, "Applications Clocks Setting": False, "SW Power Cap": False,
                               "HW Slowdown": False, "HW Thermal Slowdown": False, "HW Power Brake Slowdown": False,
                               "Sync Boost": False, "SW Thermal Slowdown": True, "Display Clock Setting": False},
                           "temperature_c": temp_c},
            "gemm_microbench": {"kernel": gemm_top["kernel"], "shape": gemm_top["shape"],
                                "tflops_by_rank": [round(bench[clock_ratio if r == s else 1.0], 1)
                                                   for r in range(n)]},
        },
    }


def build(p: Params, rng: np.random.Generator, seed) -> Built:
    if building() >= 2:
        return _build_v2(p, rng, seed)
    gpu = physics.GPUS[p.gpu]
    n, s = p.world_size, p.straggler_rank
    clock_ratio = p.throttle_clock_frac
    clock_mhz = int(round(gpu.max_sm_clock_mhz * clock_ratio))
    shape, fwd, bwd = training.llm_step_specs(gpu.arch, p.model_params_b * 1e9, p.tokens_per_gpu)
    w1_f, w1_b = workload.roofline_weights_us(fwd, gpu), workload.roofline_weights_us(bwd, gpu)
    wc_f = workload.roofline_weights_us(fwd, gpu, clock_ratio)
    wc_b = workload.roofline_weights_us(bwd, gpu, clock_ratio)
    weights = {"healthy": (w1_f, w1_b), "straggler": (wc_f, wc_b)}
    plan = _plan(p, gpu, rng, len(fwd), len(bwd), wc_f.sum() / w1_f.sum(), wc_b.sum() / w1_b.sum())
    # The plan assumes the CPU launches ahead of the GPU (the emission checks it kernel by
    # kernel). Refuse up front what cannot hold: the forward's launches, at their mean CPU
    # cost, must fall behind the fastest rank's kernels by less than half the prologue's room.
    op_ns = int(p.op_overhead_us * 1e3)
    healthy = np.floor(w1_f / w1_f.sum() * plan.fwd[:, 0].min()).astype(np.int64)
    lead_ns = _cpu_lead_ns(np.full(len(fwd), op_ns), np.full(len(fwd), 6_000), healthy)
    room_ns = p.host_prologue_ms * 1e6 * 0.97 - 565_000
    if lead_ns > 0.5 * room_ns:
        raise InstanceError(f"straggler: the CPU needs {lead_ns / 1e3:.0f} µs of head start to launch the forward "
                            f"ahead of the GPU, more than the {p.host_prologue_ms:g} ms prologue leaves: launch-bound, "
                            f"not this case (raise host_prologue_ms, tokens_per_gpu or model_params_b, or lower "
                            f"op_overhead_us)")

    # -- the key, from the plan the traces are emitted from ---------------------------
    win = slice(0, p.steps - 1)  # the reader's windows: ProfilerStep start to the next start
    busy = plan.h2d_ns + plan.fwd + plan.bwd + plan.opt_ns + DTOH_NS  # compute-stream busy per [rank, step]
    compute = busy[:, win].mean(axis=1) / 1e6
    periods = np.diff(plan.start, axis=1) / 1e6  # [rank, window]
    step_ms = float(periods[0].mean())
    last = plan.arrive.max(axis=0)
    wait_by_rank = (last[None, :] - plan.arrive)[:, win].mean(axis=1) / 1e6
    nccl_by_rank = (plan.ar_end - plan.arrive)[:, win].mean(axis=1) / 1e6
    wait_ms = float(wait_by_rank[0])
    comm_ms = float(plan.comm[win].mean() / 1e6)
    allreduce_ms = float(nccl_by_rank[0])
    straggler_ms = float(compute[s])
    peer_ms = float(statistics.median(compute.tolist()))
    spread = straggler_ms / peer_ms
    # After the fix the straggler arrives on a healthy GPU's schedule; the last arrival moves up.
    healthy_arrive = plan.arrive.copy()
    healthy_arrive[s] -= (plan.fwd[s] + plan.bwd[s]) - (plan.healthy_fwd[s] + plan.healthy_bwd[s])
    lift = (last - healthy_arrive.max(axis=0))[win] / 1e6
    after_ms = float((periods[0] - lift).mean())
    speedup = step_ms / after_ms
    drop_pct = (1.0 - after_ms / step_ms) * 100.0
    fb_gaps_ms = plan.fb_gaps() / 1e6
    fwd_span = (plan.fwd + (len(fwd) - 1) * GPU_GAP_NS)[:, win].mean(axis=1) / 1e6
    bwd_span = (plan.bwd + (len(bwd) - 1) * GPU_GAP_NS)[:, win].mean(axis=1) / 1e6
    opt_ms = (plan.opt_ns + (OPT_LAUNCHES - 1) * OPT_GAP_NS) / 1e6
    bucket_gb = p.bucket_gb
    ring_gb = physics.ring_allreduce_bytes(plan.bucket_bytes, n) / 1e9
    wire_floor_ms = physics.allreduce_ms(plan.bucket_bytes, n, MODEST_BUSBW_GBPS)
    comm_busbw = physics.busbw_gbps(plan.bucket_bytes, n, comm_ms)
    apparent_busbw = physics.busbw_gbps(plan.bucket_bytes, n, allreduce_ms)
    flops = physics.training_flops(p.model_params_b * 1e9, p.tokens_per_gpu)
    mfu = physics.mfu_pct(flops, step_ms, gpu)
    mfu_after = physics.mfu_pct(flops, after_ms, gpu)
    # Rank 0's and the straggler's kernels, as emitted (same duration streams as the traces).
    specs = fwd + bwd
    k0 = _kernel_means(_durations(plan, 0, w1_f, w1_b))
    ks = _kernel_means(_durations(plan, s, wc_f, wc_b))
    role = np.array([sp.role for sp in specs])
    gemm_slowdown = float(ks[role == "gemm"].sum() / k0[role == "gemm"].sum())
    ew_slowdown = float(ks[role == "ew"].sum() / k0[role == "ew"].sum())
    ew_share_pct = float(k0[role == "ew"].sum() / k0.sum() * 100)
    kernels_per_step = len(fwd) + len(bwd) + OPT_LAUNCHES
    max_clock = gpu.max_sm_clock_mhz
    temp_c = int(rng.integers(*THROTTLE_TEMP_C))
    gpus = gpu_clock_report(gpu, n, rng, overrides={s: {
        "sm_clock_mhz": clock_mhz, "throttle_reasons": ["SW Thermal Slowdown"], "temperature_c": temp_c,
        "power_w": round(float(gpu.tdp_w * rng.uniform(0.5, 0.62)), 1)}})
    gap0 = (int(plan.arrive[0, 0]) - NCCL_AFTER_READY_NS, int(plan.ar_end[0, 0]) + OPT_AFTER_READY_NS)

    observations = [
        obs("step_ms", "step period on rank 0", step_ms, "ms"),
        obs("expected_step_ms", "step with the straggler back at full clock", after_ms, "ms"),
        obs("speedup", "throughput gain", speedup, "x", 3),
        obs("straggler_rank", "the slow rank", s, "rank", 0),
        obs("straggler_compute_ms", "compute per step on the straggler (fwd + bwd + optimizer busy)", straggler_ms,
            "ms"),
        obs("peer_compute_ms", "compute per step, median over ranks", peer_ms, "ms"),
        obs("wait_ms", "rank 0's wait inside the all-reduce for the straggler", wait_ms, "ms"),
        obs("comm_ms", "true comm time (the last arriver's NCCL kernel)", comm_ms, "ms"),
        obs("allreduce_ms", "all-reduce kernel per step as rank 0 sees it", allreduce_ms, "ms"),
        obs("sm_clock_mhz", f"SM clock of rank {s}'s GPU", clock_mhz, "MHz", 0),
        obs("max_sm_clock_mhz", "SM clock of the healthy GPUs (max)", max_clock, "MHz", 0),
        obs("clock_ratio", "throttled / max SM clock", clock_mhz / max_clock, "", 3),
        obs("temperature_c", f"rank {s}'s GPU temperature", temp_c, "°C", 0),
        obs("bucket_gb", "gradient bucket in the exposed all-reduce", bucket_gb, "GB"),
        obs("ring_gb", "bytes each GPU moves in the ring, 2(N-1)/N x bucket", ring_gb, "GB"),
        obs("wire_floor_ms", f"that all-reduce at a modest {MODEST_BUSBW_GBPS:.0f} GB/s busbw", wire_floor_ms, "ms"),
        obs("comm_busbw_gbps", "bus bandwidth of the true comm", comm_busbw, "GB/s", 1),
        obs("apparent_busbw_gbps", "bus bandwidth rank 0's kernel time would imply", apparent_busbw, "GB/s", 1),
        obs("spread_ratio", "max / median per-rank compute", spread, "x", 3),
        obs("excess_ms", "straggler compute minus the median", straggler_ms - peer_ms, "ms"),
        obs("pre_incident_step_ms", "step before the reprovision (the healthy step)", after_ms, "ms"),
        obs("regression_ms", "step regression since the reprovision", step_ms - after_ms, "ms"),
        obs("throughput_drop_pct", "throughput lost since the reprovision", drop_pct, "%", 1),
        obs("fwd_ms", "forward on rank 0", float(fwd_span[0]), "ms"),
        obs("bwd_ms", "backward on rank 0", float(bwd_span[0]), "ms"),
        obs("opt_ms", "optimizer step (every rank)", opt_ms, "ms"),
        obs("straggler_fwd_ms", f"forward on rank {s}", float(fwd_span[s]), "ms"),
        obs("straggler_bwd_ms", f"backward on rank {s}", float(bwd_span[s]), "ms"),
        obs("gemm_slowdown", f"rank {s}'s GEMM time over rank 0's", gemm_slowdown, "x", 3),
        obs("ew_slowdown", f"rank {s}'s elementwise time over rank 0's", ew_slowdown, "x", 3),
        obs("ew_share_pct", "memory-bound elementwise share of rank 0's fwd+bwd kernel time", ew_share_pct, "%", 1),
        obs("kernels_per_step", "compute kernels per step, on every rank alike", kernels_per_step, "kernels", 0),
        obs("kernel_gaps_ms", "inter-kernel dispatch gaps in fwd + bwd", fb_gaps_ms, "ms"),
        obs("mfu_pct", "MFU", mfu, "%", 1),
        obs("expected_mfu_pct", "MFU after the fix", mfu_after, "%", 1),
    ]

    w, st, al, sc, pc, cm = (f"{x:.0f}" for x in (wait_ms, step_ms, allreduce_ms, straggler_ms, peer_ms, comm_ms))
    others = f"ranks {', '.join(str(r) for r in range(n) if r != s)}"
    nccl_name = workload.NCCL_ALLREDUCE.split("(")[0]
    brief = (f"{n}x {gpu.key} ({gpu.interconnect}), {p.model_params_b:.3g}B-parameter model, FSDP-style data-parallel "
             f"training in BF16. Throughput dropped {drop_pct:.0f}% after a node reprovision. Here is rank 0's "
             f"trace (every rank's trace is available); the team is convinced NCCL got slow. Walk me through it.")
    discipline = {
        "step_boundary": (f"ProfilerStep# gives a clean {st} ms period on rank 0, up from ~{after_ms:.0f} ms before "
                          f"the reprovision: a {step_ms - after_ms:.0f} ms regression to explain."),
        "gaps": (f"Rank 0's compute stream runs forward ({fwd_span[0]:.0f} ms) and backward ({bwd_span[0]:.0f} ms), "
                 f"then idles ~{al} ms while the NCCL stream runs one all-reduce; the optimizer ({opt_ms:.0f} ms) "
                 f"follows it. Not starvation: the GPU waits on the collective."),
        "overlap": (f"None on rank 0: the all-reduce is serialized after backward. Its {al} ms includes waiting: a "
                    f"long collective means a slow wire or a late rank, and one rank's trace cannot tell which. The "
                    f"size math says late rank: {bucket_gb:.1f} GB moves {ring_gb:.1f} GB per GPU, {wire_floor_ms:.0f} "
                    f"ms even at {MODEST_BUSBW_GBPS:.0f} GB/s."),
        "longest_kernel": (f"The {nccl_name} ({al} ms) is the longest kernel, but a symptom. Per rank: {others} "
                           f"compute ~{pc} ms, rank {s} {sc} ms with the same {kernels_per_step} kernels: its GEMMs "
                           f"{gemm_slowdown:.2f}x slower, its memory-bound elementwise kernels {ew_slowdown:.2f}x. "
                           f"Rank {s}'s own all-reduce takes {cm} ms: the true comm."),
    }
    traps = [{
        "id": "nccl_degraded",
        "claim": "NCCL or NVLink degraded after the reprovision; retune NCCL_ALGO, check the switch, run nccl-tests.",
        "why_wrong": (f"The bucket is {bucket_gb:.1f} GB; the ring moves 2x{n - 1}/{n}x{bucket_gb:.1f} = "
                      f"{ring_gb:.1f} GB per GPU; even at a modest {MODEST_BUSBW_GBPS:.0f} GB/s that is "
                      f"{wire_floor_ms:.0f} ms. A {al} ms kernel would mean {apparent_busbw:.0f} GB/s on "
                      f"{gpu.interconnect}, and rank {s}'s own all-reduce, which waits for nobody, takes {cm} ms "
                      f"({comm_busbw:.0f} GB/s). The other {w} ms is waiting: rank {s} arrives {w} ms late."),
    }, {
        "id": "data_skew",
        "claim": f"Rank {s} got an imbalanced shard (data skew, longer sequences), so it has more work.",
        "why_wrong": (f"Rank {s} launches the same {kernels_per_step} kernels per step with the same shapes as rank 0; "
                      f"each GEMM is {gemm_slowdown:.2f}x slower while its elementwise kernels take "
                      f"{ew_slowdown:.2f}x. More work means more or bigger kernels; the same kernels running "
                      f"slower at a fixed memory speed means a lower SM clock."),
    }, {
        "id": "bad_link",
        "claim": f"Rank {s}'s NIC or PCIe/NVLink link is bad.",
        "why_wrong": (f"A bad link slows communication, not compute: rank {s}'s compute stream is the slow part "
                      f"({sc} vs {pc} ms) and its own NCCL kernel runs the normal {cm} ms."),
    }]
    confirmation = (f"nvidia-smi -q -d PERFORMANCE,CLOCK -i {s} (or DCGM_FI_DEV_SM_CLOCK and "
                    f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS): rank {s}'s GPU runs its SM clock at {clock_mhz} MHz vs "
                    f"{max_clock} MHz on its peers, SW Thermal Slowdown active, {temp_c} °C. {clock_mhz}/{max_clock} "
                    f"= {clock_mhz / max_clock:.2f}: compute-bound kernels take {max_clock / clock_mhz:.2f}x as long "
                    f"(rank {s}'s GEMMs: {gemm_slowdown:.2f}x) and the memory-bound ~{ew_share_pct:.0f}% does not "
                    f"slow, which lands rank {s}'s compute at {sc} ms. Numbers agree.")
    model_answer = (
        f"Rank 0 shows a {al} ms all-reduce, but NCCL kernel time includes waiting for the slowest rank: a long "
        f"collective means a slow wire or a late arrival, and a {bucket_gb:.1f} GB bucket, {ring_gb:.1f} GB on the "
        f"ring, is {wire_floor_ms:.0f} ms even at {MODEST_BUSBW_GBPS:.0f} GB/s, so I go hunting for a straggler. "
        f"Per-rank compute: {n - 1} ranks at ~{pc} ms, rank {s} at {sc} ms, and {sc} minus {pc} is "
        f"{int(sc) - int(pc)} ms, the ~{w} ms the others wait; rank {s}'s own all-reduce is the true {cm} ms. Same "
        f"kernels, GEMMs {gemm_slowdown:.1f}x slower, memory-bound kernels not: clocks, not workload. DCGM shows "
        f"rank {s} at {clock_mhz} MHz against {max_clock}, thermal slowdown after the reprovision. Fix the airflow, "
        f"no code change: step goes {st} to ~{after_ms:.0f} ms, {speedup:.2f}x. And I'd add a per-rank step-time "
        f"spread alert, because one throttled GPU taxes all {n}.")
    key = make_key(
        scenario, p, seed, brief=brief, observations=observations, discipline=discipline,
        root_cause=(f"Rank {s}'s GPU is thermally throttled (SW Thermal Slowdown, SM clock {clock_mhz} of "
                    f"{max_clock} MHz) after the node reprovision, so its compute-bound kernels are "
                    f"{max_clock / clock_mhz:.2f}x slower and its step compute takes {sc} ms instead of ~{pc}; every "
                    f"collective waits for it, so every other rank's all-reduce absorbs a {w} ms wait."),
        traps=traps, decisive_measurement="per-rank", confirmation=confirmation,
        fix=(f"Fix the cooling on rank {s}'s GPU (fan profile / airflow on that tray after the reprovision), or swap "
             f"the GPU; no code change. Leave a monitor behind: per-rank step time max/median (now "
             f"{spread:.2f}) and DCGM clock / throttle-reason alerts."),
        expected={"before_ms": round(step_ms, 2), "after_ms": round(after_ms, 2), "speedup": round(speedup, 3),
                  "unit": "ms per step",
                  "arithmetic": (f"rank {s} rejoins at ~{pc} ms compute, so the collective starts when the "
                                 f"slowest healthy rank arrives, {float(lift.mean()):.0f} ms earlier: {st} - "
                                 f"{float(lift.mean()):.0f} = {after_ms:.0f} ms per step (~{pc} compute + {cm} comm + "
                                 f"{after_ms - peer_ms - comm_ms:.0f} of prologue, kernel gaps and the slowest healthy "
                                 f"rank's spread) -> {speedup:.2f}x; MFU {mfu:.0f}% -> {mfu_after:.0f}%")},
        model_answer=model_answer,
        marks={"step": {"start_us": plan.start[0, 0] / 1e3, "end_us": plan.start[0, 1] / 1e3},
               "gap": {"start_us": gap0[0] / 1e3, "end_us": gap0[1] / 1e3}},
    )

    per_rank = [{"rank": r, "compute_ms": round(float(compute[r]), 2), "wait_ms": round(float(wait_by_rank[r]), 2),
                 "comm_ms": round(float(nccl_by_rank[r] - wait_by_rank[r]), 2),
                 "nccl_kernel_ms": round(float(nccl_by_rank[r]), 2), "optimizer_ms": round(opt_ms, 2),
                 "fwd_ms": round(float(fwd_span[r]), 2), "bwd_ms": round(float(bwd_span[r]), 2),
                 "step_ms": round(float(periods[r].mean()), 2),
                 "sm_clock_mhz": clock_mhz if r == s else max_clock} for r in range(n)]
    top = workload.kernel_table(specs, k0)
    evidence = _clock_evidence(gpu, gpus, top, s, clock_ratio, temp_c, compute, wait_by_rank)
    artifacts = {
        "per_rank": per_rank,
        "gpus": gpus,
        "gpu": evidence["gpu"],
        "kernels": top,
        "straggler_kernels": workload.kernel_table(specs, ks),
        "steps": [{"start_us": plan.start[0, k] / 1e3, "end_us": plan.step_end[0, k] / 1e3} for k in range(p.steps)],
        "model": {**shape, "params": p.model_params_b * 1e9, "tokens_per_gpu": p.tokens_per_gpu},
        "experiments": evidence["experiments"],
    }
    cache: dict[int, Trace] = {}

    def trace_for_rank(rank: int) -> Trace:
        if rank not in cache:
            cache[rank] = _emit_rank(plan, p, gpu, rank, fwd, bwd, weights)
        return cache[rank]

    return Built(key=key, artifacts=artifacts, trace_for_rank=trace_for_rank, ranks=n)


# -- version 2: FSDP FULL_SHARD, every rank emitted on one clock -------------------------

def _run_v2(p: Params, gpu: physics.Gpu, rng: np.random.Generator, specs_f: list, specs_b: list, shape: dict,
            weights: dict, ratio_fwd: float, ratio_bwd: float, healthy_straggler: bool) -> dict:
    """Each rank's compute (the spread among ranks, the straggler's clock) and every rank's
    trace from the FSDP engine (scenarios/_fsdp.py); what the key says is read back from
    what was emitted."""
    world, steps, s = p.world_size, p.steps, p.straggler_rank
    emit_seed = int(rng.integers(0, 2**62))
    t0 = trace_start_ns(rng)
    first_step = int(rng.integers(3, 40))
    nccl_stream = int(rng.choice([40, 52, 84]))
    sigma = p.rank_jitter_pct / 100.0
    others = np.clip(rng.normal(0.0, sigma, world - 2), -2.5 * sigma, 2.5 * sigma)
    factor = np.ones(world)
    factor[[r for r in range(1, world) if r != s]] = 1.0 + others
    factor[0] = 1.0 + np.sort(others)[(world - 2) // 2]
    factor[s] = 1.0 + float(np.clip(rng.normal(0.0, sigma), -2.5 * sigma, 2.5 * sigma))
    step_f = 1.0 + rng.normal(0.0, 0.001, (world, steps))
    step_b = 1.0 + rng.normal(0.0, 0.001, (world, steps))
    n_params = p.model_params_b * 1e9
    fwd_ns = 2 * n_params * p.tokens_per_gpu / (gpu.bf16_tflops * 1e12 * p.compute_eff) * 1e9
    fwd_tot = np.rint(fwd_ns * factor[:, None] * step_f).astype(np.int64)
    bwd_tot = np.rint(2 * fwd_ns * factor[:, None] * step_b).astype(np.int64)
    healthy_f, healthy_b = fwd_tot.copy(), bwd_tot.copy()
    if not healthy_straggler:
        fwd_tot[s] = np.rint(fwd_ns * ratio_fwd * factor[s] * step_f[s]).astype(np.int64)
        bwd_tot[s] = np.rint(2 * fwd_ns * ratio_bwd * factor[s] * step_b[s]).astype(np.int64)
    start0 = t0 + rng.integers(0, 40_000, world)  # the processes do not enter step 0 in lockstep
    w = [weights["straggler" if (r == s and not healthy_straggler) else "healthy"] for r in range(world)]
    run = _fsdp.run_ranks(gpu=gpu, specs_f=specs_f, specs_b=specs_b, shape=shape, n_params=n_params,
                          tokens_per_gpu=p.tokens_per_gpu, weights=w, fwd_ns=fwd_tot, bwd_ns=bwd_tot,
                          busbw_gbps=gpu.busbw_gbps * p.comm_busbw_frac, op_overhead_us=p.op_overhead_us,
                          host_prologue_ms=p.host_prologue_ms, opt_bytes_per_param=OPT_BYTES_PER_PARAM,
                          emit_seed=emit_seed, start0=start0, first_step=first_step, nccl_stream=nccl_stream,
                          fused_optimizer=building() >= 3)
    return {**run, "healthy": (healthy_f, healthy_b)}


def _build_v2(p: Params, rng: np.random.Generator, seed) -> Built:
    gpu = physics.GPUS[p.gpu]
    n, s = p.world_size, p.straggler_rank
    fx = fixed()
    clock_ratio = p.throttle_clock_frac
    clock_mhz = int(round(gpu.max_sm_clock_mhz * clock_ratio))
    n_params = p.model_params_b * 1e9
    shape, fwd, bwd = training.llm_step_specs(gpu.arch, n_params, p.tokens_per_gpu)
    mem = feasibility.training_memory(n_params, world=n, tokens_per_gpu=p.tokens_per_gpu, hidden=shape["hidden"],
                                      layers=shape["layers"], sharding="zero3", master_fp32=True)
    if not mem.fits(gpu):
        raise InstanceError(f"straggler: this FSDP step needs {mem.describe(gpu)}, over the "
                            f"{feasibility.HBM_BUDGET:.0%} budget (lower tokens_per_gpu or model_params_b, or raise "
                            f"world_size)")
    layer_fwd_us = 2 * n_params * p.tokens_per_gpu / (gpu.bf16_tflops * 1e12 * p.compute_eff) * 1e6 \
        / shape["layers"]
    if _layer_cpu_us(p.op_overhead_us) > layer_fwd_us:
        raise InstanceError(f"straggler: the CPU needs ~{_layer_cpu_us(p.op_overhead_us):.0f} µs to issue a layer's "
                            f"forward that runs {layer_fwd_us:.0f} µs on the GPU: launch-bound, not this case (raise "
                            f"tokens_per_gpu or model_params_b, or lower op_overhead_us or compute_eff)")
    w1_f, w1_b = workload.roofline_weights_us(fwd, gpu), workload.roofline_weights_us(bwd, gpu)
    wc_f = workload.roofline_weights_us(fwd, gpu, clock_ratio)
    wc_b = workload.roofline_weights_us(bwd, gpu, clock_ratio)
    weights = {"healthy": (w1_f, w1_b), "straggler": (wc_f, wc_b)}
    run = _run_v2(p, gpu, rng, fwd, bwd, shape, weights, wc_f.sum() / w1_f.sum(), wc_b.sum() / w1_b.sum(), fx)
    rec, start, traces = run["rec"], run["start"], run["traces"]
    win = slice(0, p.steps - 1)
    periods = np.diff(start, axis=1) / 1e6
    step_ms = float(periods[0].mean())
    compute = rec["busy"][:, win].mean(axis=1) / 1e6
    exposed = rec["exposed"][:, win].mean(axis=1) / 1e6
    nccl_by_rank = rec["nccl"][:, win].mean(axis=1) / 1e6
    if fx:  # what the trace after the fix measures; the instance's key is the unfixed build's
        fixed_key = {"fixed": True, "observations": [
            obs("step_ms", "step period on rank 0 after the fix", step_ms, "ms"),
            obs("straggler_compute_ms", f"compute per step on rank {s}, its clock restored", float(compute[s]), "ms"),
            obs("peer_compute_ms", "compute per step, median over ranks", float(np.median(compute)), "ms"),
            obs("allreduce_ms", "rank 0's compute idle on collectives per step", float(exposed[0]), "ms")]}
        return Built(key=fixed_key, artifacts={"gpus": gpu_clock_report(gpu, n, rng)},
                     trace_for_rank=lambda rank: traces[rank], ranks=n)
    straggler_ms = float(compute[s])
    peer_ms = float(statistics.median(compute.tolist()))
    max_healthy_ms = float(max(compute[r] for r in range(n) if r != s))
    spread = straggler_ms / peer_ms
    comm_ms = float(exposed[s])  # the collective time no compute hides, as the rank nobody waits for sees it
    allreduce_ms = float(exposed[0])
    wait_by_rank = np.maximum(exposed - exposed[s], 0.0)
    wait_ms = float(wait_by_rank[0])
    wire_ms = float(rec["comm"][win].mean() / 1e6)
    nccl_ms = float(nccl_by_rank[0])
    # After the fix the lockstep runs at the slowest healthy rank's pace.
    lift_ms = straggler_ms - max_healthy_ms
    after_ms = step_ms - lift_ms
    speedup = step_ms / after_ms
    drop_pct = (1.0 - after_ms / step_ms) * 100.0
    layers, layer_gb = run["layers"], run["layer_bytes"] / 1e9
    n_coll = rec["n_coll"]
    layer_wire_ms = layer_gb * 1e9 * (n - 1) / n / (MODEST_BUSBW_GBPS * 1e9) * 1e3
    step_gb = (3 * run["layer_bytes"] * layers + 2 * run["root_bytes"]) / 1e9  # AG fwd + AG bwd + RS, root twice
    ring_gb = step_gb * (n - 1) / n
    wire_floor_ms = ring_gb / MODEST_BUSBW_GBPS * 1e3
    comm_busbw = ring_gb / (wire_ms / 1e3)
    fwd_span, bwd_span = rec["fwd"][:, win].mean(axis=1), rec["bwd"][:, win].mean(axis=1)
    opt_ms = float(rec["opt"][0, win].mean())
    flops = physics.training_flops(n_params, p.tokens_per_gpu)
    mfu = physics.mfu_pct(flops, step_ms, gpu)
    mfu_after = physics.mfu_pct(flops, after_ms, gpu)
    specs = fwd + bwd
    role = np.array([sp.role for sp in specs])
    # per kernel role, from the roofline weights the durations were spread by (both ranks' mean)
    k0 = np.concatenate([w1_f / w1_f.sum() * fwd_span[0], w1_b / w1_b.sum() * bwd_span[0]])
    ks = np.concatenate([wc_f / wc_f.sum() * fwd_span[s], wc_b / wc_b.sum() * bwd_span[s]])
    gemm_slowdown = float(ks[role == "gemm"].sum() / k0[role == "gemm"].sum())
    ew_slowdown = float(ks[role == "ew"].sum() / k0[role == "ew"].sum())
    ew_share_pct = float(k0[role == "ew"].sum() / k0.sum() * 100)
    kernels_per_step = len(fwd) + len(bwd) + OPT_LAUNCHES
    max_clock = gpu.max_sm_clock_mhz
    temp_c = int(rng.integers(*THROTTLE_TEMP_C))
    gpus = gpu_clock_report(gpu, n, rng, overrides={s: {
        "sm_clock_mhz": clock_mhz, "throttle_reasons": ["SW Thermal Slowdown"], "temperature_c": temp_c,
        "power_w": round(float(gpu.tdp_w * rng.uniform(0.5, 0.62)), 1)}})

    observations = [
        obs("step_ms", "step period on rank 0", step_ms, "ms"),
        obs("expected_step_ms", "step with the straggler back at full clock", after_ms, "ms"),
        obs("speedup", "throughput gain", speedup, "x", 3),
        obs("straggler_rank", "the slow rank", s, "rank", 0),
        obs("straggler_compute_ms", "compute per step on the straggler (kernel busy time)", straggler_ms, "ms"),
        obs("peer_compute_ms", "compute per step, median over ranks", peer_ms, "ms"),
        obs("wait_ms", "rank 0's wait for the straggler per step, inside its all-gathers and reduce-scatters",
            wait_ms, "ms"),
        obs("comm_ms", "collective time no compute hides, as the straggler (who waits for nobody) sees it",
            comm_ms, "ms"),
        obs("allreduce_ms", "rank 0's compute idle on its collectives per step (what 'NCCL got slow' points at)",
            allreduce_ms, "ms"),
        obs("nccl_ms", "NCCL kernel time per step on rank 0 (wire time plus waiting)", nccl_ms, "ms"),
        obs("wire_ms", "NCCL kernel time per step on the straggler: the collectives' own wire time", wire_ms, "ms"),
        obs("collectives_per_step", "FSDP collectives per step (all-gathers forward and backward, "
            "reduce-scatters)", n_coll, "kernels", 0),
        obs("sm_clock_mhz", f"SM clock of rank {s}'s GPU", clock_mhz, "MHz", 0),
        obs("max_sm_clock_mhz", "SM clock of the healthy GPUs (max)", max_clock, "MHz", 0),
        obs("clock_ratio", "throttled / max SM clock", clock_mhz / max_clock, "", 3),
        obs("temperature_c", f"rank {s}'s GPU temperature", temp_c, "°C", 0),
        obs("layer_gb", "bf16 weights one layer's all-gather assembles", layer_gb, "GB"),
        obs("layer_wire_floor_ms", f"that all-gather at a modest {MODEST_BUSBW_GBPS:.0f} GB/s busbw", layer_wire_ms,
            "ms"),
        obs("ring_gb", "bytes each GPU moves per step, (N-1)/N x (two gathers and one reduce-scatter of the "
            "weights)", ring_gb, "GB"),
        obs("wire_floor_ms", f"a step's collectives at a modest {MODEST_BUSBW_GBPS:.0f} GB/s busbw", wire_floor_ms,
            "ms"),
        obs("comm_busbw_gbps", "bus bandwidth of the collectives' wire time", comm_busbw, "GB/s", 1),
        obs("spread_ratio", "max / median per-rank compute", spread, "x", 3),
        obs("excess_ms", "straggler compute minus the median", straggler_ms - peer_ms, "ms"),
        obs("pre_incident_step_ms", "step before the reprovision (the healthy step)", after_ms, "ms"),
        obs("regression_ms", "step regression since the reprovision", step_ms - after_ms, "ms"),
        obs("throughput_drop_pct", "throughput lost since the reprovision", drop_pct, "%", 1),
        obs("fwd_ms", "forward on rank 0, first to last kernel", float(fwd_span[0]), "ms"),
        obs("bwd_ms", "backward on rank 0, first to last kernel", float(bwd_span[0]), "ms"),
        obs("opt_ms", "optimizer step (every rank)", opt_ms, "ms"),
        obs("straggler_fwd_ms", f"forward on rank {s}", float(fwd_span[s]), "ms"),
        obs("straggler_bwd_ms", f"backward on rank {s}", float(bwd_span[s]), "ms"),
        obs("gemm_slowdown", f"rank {s}'s GEMM time over rank 0's", gemm_slowdown, "x", 3),
        obs("ew_slowdown", f"rank {s}'s elementwise time over rank 0's", ew_slowdown, "x", 3),
        obs("ew_share_pct", "memory-bound elementwise share of rank 0's fwd+bwd kernel time", ew_share_pct, "%", 1),
        obs("kernels_per_step", "compute kernels per step, on every rank alike", kernels_per_step, "kernels", 0),
        obs("mfu_pct", "MFU", mfu, "%", 1),
        obs("expected_mfu_pct", "MFU after the fix", mfu_after, "%", 1),
        obs("memory_gb", "planned memory per GPU (FULL_SHARD, fp32 master weights and AdamW state)",
            mem.total / 1e9, "GB"),
    ]
    w, st, al, sc, pc, cm = (f"{x:.0f}" for x in (wait_ms, step_ms, allreduce_ms, straggler_ms, peer_ms, comm_ms))
    nm, wm = f"{nccl_ms:.0f}", f"{wire_ms:.0f}"
    others = f"ranks {', '.join(str(r) for r in range(n) if r != s)}"
    brief = (f"{n}x {gpu.key} ({gpu.interconnect}), {p.model_params_b:.3g}B-parameter model, FSDP (FULL_SHARD) "
             f"training in BF16. Throughput dropped {drop_pct:.0f}% after a node reprovision. Here is rank 0's "
             f"trace (every rank's trace is available); the team is convinced NCCL got slow. Walk me through it.")
    discipline = {
        "step_boundary": (f"ProfilerStep# gives a clean {st} ms period on rank 0, up from ~{after_ms:.0f} ms before "
                          f"the reprovision: a {step_ms - after_ms:.0f} ms regression to explain."),
        "gaps": (f"Rank 0's compute stream is busy {compute[0]:.0f} ms of the step and idles {al} ms while its NCCL "
                 f"stream runs: before every layer it waits on that layer's all-gather (forward and backward), and "
                 f"at the step's end on the last reduce-scatters; the optimizer ({opt_ms:.0f} ms) follows. Not "
                 f"starvation: the GPU waits on collectives."),
        "overlap": (f"FSDP means to hide its {n_coll} collectives under the layers, and on rank {s} it does (only "
                    f"{cm} ms exposed). On rank 0 the NCCL stream is busy {nm} ms per step where the wire needs "
                    f"{wm}: each all-gather is launched early and spins until the last rank joins. A long collective "
                    f"means a slow wire or a late rank, and one rank's trace cannot tell which."),
        "longest_kernel": (f"The NCCL all-gathers are rank 0's longest kernels, but a symptom. Per rank: {others} "
                           f"compute ~{pc} ms, rank {s} {sc} ms with the same {kernels_per_step} kernels: its GEMMs "
                           f"{gemm_slowdown:.2f}x slower, its memory-bound elementwise kernels {ew_slowdown:.2f}x. "
                           f"Rank {s}'s own collectives take {wm} ms per step: the true wire time."),
    }
    traps = [{
        "id": "nccl_degraded",
        "claim": "NCCL or NVLink degraded after the reprovision; retune NCCL_ALGO, check the switch, run nccl-tests.",
        "why_wrong": (f"A layer's all-gather assembles {layer_gb:.2f} GB: {layer_wire_ms:.1f} ms even at a modest "
                      f"{MODEST_BUSBW_GBPS:.0f} GB/s, and the step's {n_coll} collectives move {ring_gb:.0f} GB per GPU "
                      f"({wire_floor_ms:.0f} ms at that rate). Rank {s}'s collectives, which wait for nobody, take "
                      f"{wm} ms per step ({comm_busbw:.0f} GB/s); rank 0's take {nm} because they wait: rank {s} "
                      f"arrives late at every layer, {w} ms per step in all."),
    }, {
        "id": "data_skew",
        "claim": f"Rank {s} got an imbalanced shard (data skew, longer sequences), so it has more work.",
        "why_wrong": (f"Rank {s} launches the same {kernels_per_step} kernels per step with the same shapes as rank 0; "
                      f"each GEMM is {gemm_slowdown:.2f}x slower while its elementwise kernels take "
                      f"{ew_slowdown:.2f}x. More work means more or bigger kernels; the same kernels running "
                      f"slower at a fixed memory speed means a lower SM clock."),
    }, {
        "id": "bad_link",
        "claim": f"Rank {s}'s NIC or PCIe/NVLink link is bad.",
        "why_wrong": (f"A bad link slows communication, not compute: rank {s}'s compute stream is the slow part "
                      f"({sc} vs {pc} ms) and its own NCCL kernels run the normal {wm} ms per step."),
    }]
    confirmation = (f"nvidia-smi -q -d PERFORMANCE,CLOCK -i {s} (or DCGM_FI_DEV_SM_CLOCK and "
                    f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS): rank {s}'s GPU runs its SM clock at {clock_mhz} MHz vs "
                    f"{max_clock} MHz on its peers, SW Thermal Slowdown active, {temp_c} °C. {clock_mhz}/{max_clock} "
                    f"= {clock_mhz / max_clock:.2f}: compute-bound kernels take {max_clock / clock_mhz:.2f}x as long "
                    f"(rank {s}'s GEMMs: {gemm_slowdown:.2f}x) and the memory-bound ~{ew_share_pct:.0f}% does not "
                    f"slow, which lands rank {s}'s compute at {sc} ms. Numbers agree.")
    model_answer = (
        f"Rank 0's compute stream idles {al} ms of a {st} ms step on NCCL kernels, but a collective's time includes "
        f"waiting for the slowest rank: a long collective means a slow wire or a late arrival. A layer's "
        f"{layer_gb:.2f} GB all-gather is {layer_wire_ms:.0f} ms even at {MODEST_BUSBW_GBPS:.0f} GB/s, and the "
        f"wire can't explain the wait, so I go hunting for a straggler. Per-rank compute: {n - 1} ranks at "
        f"~{pc} ms, rank {s} at {sc} ms, and {sc} minus {pc} is {int(sc) - int(pc)} ms, the ~{w} ms the others wait "
        f"at every layer's collective; rank {s}'s own collectives only expose {cm} ms, the true comm. Same kernels, "
        f"GEMMs {gemm_slowdown:.1f}x slower, memory-bound kernels not: clocks, not workload. DCGM shows rank {s} at "
        f"{clock_mhz} MHz against {max_clock}, thermal slowdown after the reprovision. Fix the airflow, no code "
        f"change: step goes {st} to ~{after_ms:.0f} ms, {speedup:.2f}x. And I'd add a per-rank step-time spread "
        f"alert, because one throttled GPU taxes all {n}.")
    key = make_key(
        scenario, p, seed, brief=brief, observations=observations, discipline=discipline,
        root_cause=(f"Rank {s}'s GPU is thermally throttled (SW Thermal Slowdown, SM clock {clock_mhz} of "
                    f"{max_clock} MHz) after the node reprovision, so its compute-bound kernels are "
                    f"{max_clock / clock_mhz:.2f}x slower and its step compute takes {sc} ms instead of ~{pc}; FSDP's "
                    f"collectives run in lockstep, so every other rank waits for it at every layer, {w} ms per "
                    f"step."),
        traps=traps, decisive_measurement="per-rank", confirmation=confirmation,
        fix=(f"Fix the cooling on rank {s}'s GPU (fan profile / airflow on that tray after the reprovision), or swap "
             f"the GPU; no code change. Leave a monitor behind: per-rank step time max/median (now "
             f"{spread:.2f}) and DCGM clock / throttle-reason alerts."),
        expected={"before_ms": round(step_ms, 2), "after_ms": round(after_ms, 2), "speedup": round(speedup, 3),
                  "unit": "ms per step",
                  "arithmetic": (f"rank {s} rejoins at ~{pc} ms compute, so the lockstep runs at the slowest healthy "
                                 f"rank's pace ({max_healthy_ms:.0f} ms): {st} - ({sc} - {max_healthy_ms:.0f}) = "
                                 f"{after_ms:.0f} ms per step -> {speedup:.2f}x; MFU {mfu:.0f}% -> "
                                 f"{mfu_after:.0f}%")},
        model_answer=model_answer,
        marks={"step": {"start_us": start[0, 0] / 1e3, "end_us": start[0, 1] / 1e3},
               "gap": _longest_hole(traces[0], int(start[0, 0]), int(start[0, 1]))},
    )
    # wait + comm: the rank's compute idle on its collectives (late ranks, then the wire no compute hides)
    per_rank = [{"rank": r, "compute_ms": round(float(compute[r]), 2), "wait_ms": round(float(wait_by_rank[r]), 2),
                 "comm_ms": round(float(exposed[r] - wait_by_rank[r]), 2),
                 "nccl_kernel_ms": round(float(nccl_by_rank[r]), 2),
                 "optimizer_ms": round(opt_ms, 2), "fwd_ms": round(float(fwd_span[r]), 2),
                 "bwd_ms": round(float(bwd_span[r]), 2), "step_ms": round(float(periods[r].mean()), 2),
                 "sm_clock_mhz": clock_mhz if r == s else max_clock} for r in range(n)]
    top = workload.kernel_table(specs, k0 * 1e6)
    evidence = _clock_evidence(gpu, gpus, top, s, clock_ratio, temp_c, compute, wait_by_rank)
    artifacts = {
        "per_rank": per_rank,
        "gpus": gpus,
        "gpu": evidence["gpu"],
        "kernels": top,
        "straggler_kernels": workload.kernel_table(specs, ks * 1e6),
        "steps": [{"start_us": start[0, k] / 1e3, "end_us": rec["step_end"][0, k] / 1e3} for k in range(p.steps)],
        "model": {**shape, "params": n_params, "tokens_per_gpu": p.tokens_per_gpu},
        "memory": {"sharding": "FULL_SHARD", "per_gpu_gb": round(mem.total / 1e9, 1),
                   "describe": mem.describe(gpu)},
        "experiments": evidence["experiments"],
    }
    return Built(key=key, artifacts=artifacts, trace_for_rank=lambda rank: traces[rank], ranks=n)


def _longest_hole(tr: Trace, lo: int, hi: int) -> dict:
    """Rank 0's longest compute-stream hole in the first step, for the key's gap mark."""
    from app.trace import intervals
    m = (tr.kind == Kind.KERNEL) & (tr.tid == 7) & (tr.ts_ns >= lo) & (tr.ts_ns < hi)
    gaps = intervals.gaps(tr.ts_ns[m], tr.ts_ns[m] + tr.dur_ns[m], lo, hi)
    a, z = max(gaps, key=lambda g: g[1] - g[0])
    return {"start_us": a / 1e3, "end_us": z / 1e3}


def counters(inst, rank: int) -> list[dict]:
    """Rank `rank`'s GPU as DCGM samples it (the build's `gpus` report, the throttled rank's
    clock and power among them) over the span of its trace: SM clock (MHz) and power (W)."""
    g = next(x for x in inst.artifacts["gpus"] if x["index"] == rank)
    t = inst.trace(rank)
    span = [int(t.ts_ns.min()), int((t.ts_ns + t.dur_ns).max())] if len(t) else [0, 0]
    return [{"name": "SM clock", "unit": "MHz", "ts_ns": span, "values": [float(g["sm_clock_mhz"])] * 2},
            {"name": "power", "unit": "W", "ts_ns": span, "values": [float(g["power_w"])] * 2}]


scenario = Scenario(
    id="straggler", version=3, older=(1, 2), fixable=(2, 3), family="multi-gpu-balance", difficulty="medium",
    title="Straggler rank: every collective waits for one GPU",
    signature="Long NCCL collectives on every rank but one; that rank computes ~1.5x slower",
    Params=Params, build=build, counters=counters,
    observations=("straggler_rank", "straggler_compute_ms", "peer_compute_ms", "wait_ms", "comm_ms", "allreduce_ms",
                  "sm_clock_mhz"),
    seed_headlines={"step_ms": 610, "allreduce_ms": 215, "straggler_compute_ms": 590, "peer_compute_ms": 395,
                    "wait_ms": 195, "comm_ms": 20, "straggler_rank": 3, "expected_step_ms": 415, "speedup": 1.47},
    reader_checks={"step_ms": "step_ms", "max_rank_compute_ms": "straggler_compute_ms",
                   "median_rank_compute_ms": "peer_compute_ms", "rank0_nccl_ms_per_step": "nccl_ms",
                   "straggler_rank": "straggler_rank"},
    rubric=Rubric(
        trap_parts={
            "nccl_degraded": r"\b(nccl|the collective|collectives|interconnect|nvlink|the network|fabric|switch|busbw|bus bandwidth)\b",
            "data_skew": r"\b(data|shards?|samples?|sequences?|sampler|batch(es)?)\b",
            "bad_link": r"\b(nic|pcie|link|cable|lanes?)\b",
        },
        root_cause=(
            (r"\b(one|an?|a single|the) (slow\w*|straggl\w*|late|lagging|throttled) (rank|gpu|worker)", r"straggl\w*",
             r"(rank|gpu) \d+ (is|runs|computes|arrives|takes) (slow|late|longer|behind|last)", r"arrives? last",
             r"everyone (else )?waits?", r"\brank \d+ (at|takes|computes|is at|needs)\b", r"\bmax over median\b",
             r"\b(everyone|all( the)? (others|ranks)|other ranks)\b.{0,40}\bwait"),
            (r"throttl\w*", r"thermal", r"\bclocks?\b", r"\bmhz\b", r"overheat\w*", r"cooling", r"temperature"),
        ),
        fix=(r"(fix|repair|check|improve|restore) .{0,20}(cooling|airflow|fans?|thermal)", r"\bcooling\b", r"\bairflow\b",
             r"(swap|replace|drain|cordon|exclude|remove|rma) .{0,20}(the )?(gpu|node|rank|card)", r"\brma\b"),
        traps={"nccl_degraded": (r"nccl.{0,30}(slow|degraded|broken|misconfig\w*|tun\w*|bandwidth)", r"nccl_algo", r"nccl-tests",
                                 r"\b(fabric|network|nvlink|link) (problem|issue|fault)\b",
                                 r"slow (wire|network|interconnect|links?)", r"bandwidth alone", r"\bnvlink\b",
                                 r"(re)?tun\w* nccl",
                             r"\b(not|isn't|it's not|wasn't) (the )?(nccl|nvlink|network|wire)\b", r"\bnccl (isn't|is not|wasn't)\b",
                                 r"nvlink.{0,20}(degraded|slow|broken|bad)", r"\bswitch\b",
                                 r"\binterconnect\b.{0,20}\b(degraded|slow|broken|problem|bottleneck)\b",
                                 r"\breprovision\w*\b.{0,40}\b(nccl|nvlink|network|fabric|topology)\b",
                                 r"\bsomething('s| is) (off|wrong|broken) (in|with) (the )?(interconnect|nccl|network|"
                                 r"fabric|nvlink|links?)\b", r"\bnccl (config\w*|settings|setup)\b"),
               "data_skew": (r"\b(shuffle|re-?shard|re-?shuffle|sort)\w*\b.{0,20}\b(data|shards?|samples?|sequences?)\b", r"\b(data|shards?|samples?|sequences?|work)\b.{0,25}\b(uneven\w*|skew\w*|unbalanc\w*)\b",
                r"(data|shard|sequence|batch)[- ]?(skew|imbalanc\w*)", r"imbalanc\w*", r"longer sequences",
                             r"\bmore (data|work|tokens)\b", r"length-grouped|token-budget|rebalanc\w*",
                             r"uneven (data|work|shards?)"),
               "bad_link": (r"\b(replace|swap|reseat)\b.{0,20}\b(nic|cable|card|link)\b", r"\bp2pbandwidth\w*\b",
                r"\bnic\b", r"(bad|faulty|broken|degraded) (link|cable|pcie|nvlink|nic)", r"\bpcie\b",
                            r"\blspci\b", r"\breseat\w*\b", r"\bp2p ?bandwidth", r"\btrained at gen ?\d",
                            r"\b(nvlink|link) (error|counter)s?\b", r"\binterconnect on (gpu|rank) ?\d\b",
                            r"\b(its|gpu \d's|rank \d's) (link|nvlink|cable)\b")},
        also_confirms=("nvidia-smi", "dcgm", "gemm-microbench"),
        cues={"bucket_gb": (r"\bmessage\b", r"\bgradients?\b")},
    ),
    hints=(
        Hint("What a collective's time includes",
             "An NCCL kernel's duration on one rank includes the time it waits for every other rank to arrive. "
             "What two different things make a collective long, and can this rank's trace alone tell them "
             "apart?"),
        Hint("Size before you blame",
             "From the bytes a collective moves and a modest ring bandwidth, how long should it take on "
             "this interconnect? Compare it with the kernel time this rank shows, and with the same collective "
             "on the other ranks."),
        Hint("Look across ranks",
             "Open the per-rank step decomposition (per-rank) and compare each rank's compute time. If one "
             "rank stands out, ask what differs about its GPU."),
    ),
)
