"""Case 6: the healthy trace, a skinny GEMM the timeline cannot see into.

The pathology: grad accumulation at micro-batch 1 (one packed 256-token sequence per
micro-step) collapses the M dimension of every GEMM to 256. The GPU is wall-to-wall busy,
the CPU runs ahead, the gradient reduce-scatter hides behind compute, and yet MFU is low:
the dominant GEMMs (M=256, N=K=hidden=4096) sit below the H100 ridge point (228 FLOP/B
against 295), stream their weight matrix at 82% of HBM bandwidth and keep the tensor pipe
24% busy. Nothing on the timeline is wrong; the loss is inside the kernels, where Nsight
Systems and torch.profiler cannot look.

What a strong read notices: the discipline passes (clean micro-step period; ~3% gaps, a
~1 ms hole at the step boundary plus sub-µs slivers between ~10,000 kernels; NCCL
overlapped with compute; launches tens of ms ahead of the GPU, cudaLaunchKernel blocking on
a full queue); the top kernel family is one cuBLAS config at ~31% of compute-kernel time;
the timeline has hit its resolution limit (the staff point), so the next instrument is
Nsight Compute; the shape arithmetic 2MNK / 2(MK+KN+MN) puts the GEMM below the ridge; no
kernel tuning fixes a shape (the kernel is bandwidth-saturated, and even with zero re-fetch
AI x bandwidth caps it under the peak); raising M (micro-batch 4, accumulation / 4, same
global batch) makes it compute-bound. Traps: "the profiler or the MFU math is wrong", "tune
the kernel", "NCCL is busy 76% of the time".

"Family" is the kernel configuration, the name without its layout suffix:
`ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4` runs the forward (tn), data-grad
(nn) and weight-grad (nt) GEMMs of the four square projections (q, k, v, o); nsys lists
three rows differing only in the suffix, ~10% each, and a reader sums them. The "kindred"
GEMMs are the other skinny ones (MLP gate/up/down, LM head) under three other cuBLAS
configs (128x128 stages 64x3 for wide outputs, 128x128 stages 32x5 for the ffn-deep
reductions, 128x256 for the MLP weight grads); each config is smaller than the family,
together ~52%. The single longest row in nsys is the overlapped NCCL reduce-scatter.

Physics (per micro-step of T = seq tokens, micro-batch 1, per GPU):
- Model: Llama-style decoder, MHA with separate q/k/v/o projections (HF eager), gated MLP
  with ffn = 8/3 x hidden rounded to 256 (11008 at 4096), vocab 32000, eager RMSNorm,
  RoPE, SiLU and adds (PyTorch's vectorized elementwise kernels), FlashAttention 2.
  Layers = (params - embeddings) / (4h^2 + 3h x ffn + 2h); hidden follows the size
  (4096 to 14B, 5120 to 22B, 6144 above) except canonical, which keeps the seed's 4096.
- Skinny GEMM DRAM traffic (all configs have 128-row tiles): the weight-sized operand
  crosses DRAM once per 128-row M-tile (for the weight grad the token dim is the
  reduction and the dW partials cross once per 128-token slice), the activation strip
  `act_refetch` times per 64 N-tiles (L2 misses as the CTA columns sweep it), the other
  activation once. Duration = traffic / (dram_frac x HBM bandwidth), so Nsight Compute's
  DRAM% is dram_frac and its tensor % is 2MNK / duration / dense peak. Canonical: 98.6 MB
  moved for the 37.7 MB minimum (2.61x), 35.9 µs, DRAM 82%, tensor 24%, 239 TFLOP/s.
- After the fix (T x 4, per T-token equivalent): a GEMM of that shape is compute-bound,
  time = max(2MNK / (peak x large_gemm_eff), 1.2 x minimum bytes / (dram_frac x bandwidth))
  (598 TFLOP/s at M=1024, 2.5x the M=256 microbench); an elementwise kernel costs a 1.8 µs
  ramp plus bytes / (0.8 x bandwidth), attention a 4 µs ramp plus FLOPs over 55% of peak
  scaled by occupancy (64 CTAs at seq 256, batch 1, on 132 SMs), so both gain by
  amortizing ramps; the per-kernel gaps and the step-boundary hole are paid once per
  micro-step and amortize 4x.
- Gradients: ZeRO-2 partitioning (DeepSpeed stage 2 with overlap_comm) reduce-scatters
  every micro-step, since each rank keeps only its partition (DeepSpeed issue #2252), in
  `bucket_melem`-element buckets launched from the autograd thread when a bucket fills,
  on its own stream; each rank moves (N-1)/N x 2 B/param at rs_busbw_frac of the ring's
  busbw. The compute stream never waits on it inside the accumulation window; the
  optimizer step and the parameter all-gather at the boundary are outside the profiled
  window (steps <= grad_accum).
- MFU = 6 x params x tokens / (step x peak); expected MFU = MFU x speedup.

Canonical deviations from the seed (the model wins; the key states the computed numbers):
- The seed's 13B does not fit its own 210 ms. The top family is 31% of 210 ms = 65 ms; at
  the seed's own ncu read (24% of 989 TFLOP/s) each 8.6 GFLOP M=256, N=K=4096 GEMM takes
  ~36 µs, so the micro-step runs ~1,800 of them: 12 per layer (q, k, v, o x three
  layouts) means ~150 layers of width 4096, a ~30B model (148 layers, 30.2B here). A 13B
  model of this shape runs the micro-step in ~90 ms.
- MFU is ~22%, not 33%: when 83% of GPU time is skinny GEMMs at 24% of peak, 33% is out of
  reach (and the seed's own 13B at 210 ms would be 9.6%).
- Kindred share ~52%, not ~30%: a Llama MLP has twice the q/k/v/o weights and streams them
  the same way; the non-GEMM remainder at 256 tokens is ~16%, not ~39%.
- After the fix ~102 ms per 256-token equivalent, 2.05x, MFU 22% -> 46% (the seed: 145 ms,
  1.45x, 33 -> 48%). The seed's own shares do not give 145 ms (61% of the step at 2.3x is
  137.6 ms); crediting only the GEMMs the model gives ~117 ms, and the ramps and gaps a 4x
  micro-step amortizes take it to ~102 ms.
- The seed shows a bucketed all-reduce; DDP with no_sync communicates only at the
  accumulation boundary, and an all-reduce of 30B bf16 gradients every micro-step
  (2 x 7/8 x 60 GB at ~330 GB/s = ~320 ms) cannot hide in a 210 ms micro-step, so the comm
  is ZeRO-2's per-micro-step reduce-scatter (half the bytes, ~160 ms, 97% overlapped).
- Only H100: on H200 (4.8 TB/s) the memory-bound micro-step shrinks 1.4x while NVLink does
  not, and on A100 NVLink 3 (230 GB/s) falls behind as well, so at micro-batch 1 the
  per-micro-step reduce-scatter would outrun the micro-step and stop hiding (a second
  pathology). A100's ridge (153 FLOP/B) also forces M <= 128, where the weight streams
  through a single 128-row tile and the kernel already reaches ~47% of peak.
- Memory is not modeled: 30B of bf16 weights plus ZeRO-2 state do not fit in 80 GB
  without offloading the optimizer state; the trace shows what the timeline shows.

Version 2 (what the numbers above become; version 1 keeps them, byte for byte):
- A real model. The canonical is the seed's own 13B as it exists, Llama-2-13B (hidden 5120,
  40 layers, ffn 13824, vocab 32000, full multi-head attention); seeds draw Llama-2-13B,
  Qwen1.5-14B (ffn 13696, vocab 152064) or Llama-2-7B, named by model_params_b and hidden
  (version 1's 30B of 148 layers at width 4096 matches no real model). The dominant GEMM is
  M=256, N=K=5120: 13.4 GFLOP, 57.7 MB, AI 233 against the ridge's 295 (the seed's 228 is its
  4096-wide GEMM, which a 13B does not have); ncu 82% DRAM, 24% tensor, as the seed reads.
  Departures from the seed: the micro-step is ~92 ms, not 210 (the seed's 13B cannot fill
  210 ms at its own ncu read; version 1 kept 210 ms by inventing a 30B), the top family 32%,
  MFU 22% -> ~47% (2.13x, ~43 ms per 256-token equivalent).
- It fits: DeepSpeed ZeRO-2 in bf16 keeps the bf16 weights whole and partitions the fp32
  master weights, gradients and Adam moments (app/feasibility.py, no checkpointing needed at
  these lengths): 57 GB per GPU on 8 H100s, 62 GB at the fix's micro-batch 4 (version 1's 30B
  needed ~113 GB). Draws are pulled into the budget (adjust_draw); an override that leaves it
  is refused. 13-14B need 8 GPUs; a 7B draw may run on 4.
- World sizes real jobs use: 8, sometimes 4 (version 1 drew 5-7 on 64% of seeds). Not 16: a
  second node puts the per-micro-step gradient reduce on InfiniBand (~45 GB/s per GPU), 26 GB
  in ~580 ms against a ~92 ms micro-step: comm-bound, another case.
- Hopper's kernel names: cuBLAS's sm90_xmma_gemm_bf16bf16_bf16f32_f32_{tn,nn,nt}_n_tilesize...
  kernels, same tiles as version 1's configs (version 1 showed `ampere_*` GEMMs on an H100).
  The family is the 128x64x64 tile in its three layouts.
- The collectives DeepSpeed issues. The story claims DeepSpeed 0.12.3 (stage_1_and_2.py,
  average_tensor with overlap_comm and reduce_scatter=True): per ipg bucket, the reduction
  stream waits on the compute stream, then one async dist.reduce per partition the bucket
  spans, to the rank that owns it: `c10d::reduce_` and ncclDevKernel_Reduce kernels, ~34 per
  micro-step on the canonical, each rank sending every slice once (26 GB at ~330 GB/s,
  ~79 ms, ~90% overlapped with compute). From 0.12.4 (#4695, use_multi_rank_bucket_allreduce
  on by default) DeepSpeed all-reduces each bucket instead, twice the bytes, which could not
  hide in this micro-step. Version 1 showed `_reduce_scatter_base`, which no DeepSpeed
  stage-2 release issues.
- GPU busy ~90% (88-94% across seeds), not the seed's ~97%. Of the ~10% idle: the step-boundary
  hole, 1-2.3% (the same ~1-1.6 ms the seed has, in a ~92 ms micro-step instead of 210 ms); the
  back-to-back gaps, ~2-3% (the seed's slivers); and ~3.4-5% from hosttime.MEASURED_2's waited-on
  tail (22% of gaps at 3-20 µs, mean ~7 µs). The real traces show that tail, but none of them is
  GPU-bound, and a stream whose every kernel is queued milliseconds ahead may not have it; they
  cannot settle it, and without it the kernel-gap p90 (~1.7 µs) would fall under their bound
  (3.55 µs), so the model keeps the measured shape. Without the tail the micro-step is ~95% busy.
- Host timing as real traces show it (app/hosttime.MEASURED_2 for the stream's gaps, launch
  calls and launch latencies; every host row the scenario draws varied step to step; 1-20 µs
  of Python between ops, BETWEEN_*): version 1's 0.3-0.5 µs kernel gaps sat under the real
  p10-p50, its ops touched, its launches onto an idle GPU started exactly 3 µs later. So the
  stream idles ~10% of the micro-step, not 3%: ~2,700 kernels each followed by the 1-20 µs
  gap real streams show (median ~1.2 µs, 22% waited on), plus the step-boundary hole. The
  read is unchanged: the gaps are spread, not a hole, and the CPU is ahead (~8-30 ms, median ~24).
  kernel_gap_us is version 1's only; op_overhead_us is the dispatcher's time before a launch
  (2-3.5 µs in version 2's draws, the Python between ops drawn on its own). Draws keep the
  forward's mean kernel 20% above the host's time per op (else the forward is launch-bound)
  and the reduce within 90% of the micro-step (else it cannot hide). Launch delays: the GPU
  idles at each step boundary, so each micro-step's first layer is launched onto a GPU not far
  behind, and a kernel launched while its first GEMMs run waits behind them (20-50 µs); every
  later launch runs milliseconds ahead, outside the fidelity window (50 µs). In a GPU-bound
  trace those ~20 step-start launches are the whole population, so its p90 sits at 35-45 µs
  where the real traces, far from GPU-bound, have <= 10 µs; fidelity.py states this as the
  case's shape (PATHOLOGY_SHAPED). It shows on the seeds with 50+ such launches: Llama-2-7B ones
  (its forward runs only ~25% ahead of the host, 35, 86, 121, 179 of 0-199) and would on a
  13B at 256 tokens profiled over more micro-steps.
- The op tree a real eager trace has (app/trace/optree.py; version 2 was first built flat, one
  cpu_op per launch): each launch inside its ops, `aten::linear` > `aten::t` (views, no kernel)
  and `aten::matmul` > `aten::view`, `aten::mm`, `aten::_unsafe_view`; backward's
  `autograd::engine::evaluate_function: MmBackward0` > `MmBackward0` > the views and the two
  `aten::mm`; record_shapes (the skinny GEMM's `aten::mm` reads [[seq, h], [h, h]]), Record
  function id, Ev Idx, each node's Sequence number taken back from its forward op with a fwdbwd
  flow (~3.9 ops per launch; real eager traces 2.0-5.3). DeepSpeed's own host ops on the autograd
  thread: after each weight's gradient node its `AccumulateGrad` (> `aten::detach` > `detach`, the
  gradient stolen: DeepSpeed set param.grad to None after the last reduce) holding DeepSpeed's
  hook, and in the hook where a bucket fills, the stream wait and per partition
  `grad_slice = tensor.narrow(...)` (`aten::narrow` > `aten::slice` > `aten::as_strided`) then
  `c10d::reduce_` > `record_param_comms` with the Input Dims torch writes. The autograd thread's
  time between nodes is the engine's (p50 15 µs, as on the real traces' autograd thread), the hook
  ~20 µs a weight. The tree only adds ops inside the CPU time each flat op had (OP_TREE off
  builds the same kernels). Left out, known: average_tensor's `tensor.div_` before the reduces
  and, with contiguous_gradients, each gradient's `copy_` into the bucket buffer (a DtoD copy
  kernel per weight, ~20 ms of HBM traffic per 13B micro-step the model does not carry); no
  optimizer step, as the profiled micro-steps lie inside the accumulation window (DeepSpeed's
  step() does nothing there).

The trace after the fix (version 2, `fixed()`): the same instance at micro-batch 4 (M = 4 x
seq, accumulation / 4, the same global batch): the same kernels, each at its 4 x seq time (the
recipe's after_ns, the numbers the key's expected step sums), its GEMMs under cuBLAS's
large-tile Hopper kernel; the same reduces per micro-step, now under a 4x longer one. Its step
per seq-token equivalent (the micro-step / 4) lands within ~0.1% of the key's expected step.

Versions: 1, first model. 2, the real models, memory, world sizes, Hopper names, DeepSpeed's
reduces and measured host timing above, the op tree and DeepSpeed's host ops, and the fixed build.

Where the parts live: the kernels of a micro-step (the model's shape, cuBLAS's configs and names,
the traffic model, the recipe) in scenarios/_skinny_kernels.py; DeepSpeed ZeRO-2's gradient path
(buckets, partition slices, the reduces, AccumulateGrad and the hook) in scenarios/_zero.py; the
params, the build, the key and the rubric here.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import model_validator

from app import feasibility, hosttime, physics, training, workload
from app.scenario import (Built, Hint, InstanceError, Scenario, ScenarioParams, building, fixed, gpu_clock_report,
                          make_key, new_builder, obs, param)
from app.trace import intervals, optree
from app.trace.builder import Kind, TraceBuilder
from app.trace.emit import Launched, cpu_span, launch_phase, memcpy
from app.scoring.rubric import Rubric
from scenarios import _zero
from scenarios._skinny_kernels import (ASSUMED_GEMM_EFF, CONFIG, EV, FAMILY, VOCAB, WGRAD, _ffn, _layers,  # noqa: F401
                                       _Recipe, config_of, family_label, gemm_name, layout_of)
from scenarios._zero import partition_slices  # noqa: F401 (the slicing the key's reduces follow)

MAX_AI_OF_RIDGE = 0.95  # the skinny shape must sit at least 5% below the ridge to be memory-bound
# Version 2's models: real configurations (their config.json), all with full multi-head
# attention, so q, k, v and o are all hidden x hidden (the family). Params name one by
# model_params_b (the count below) and hidden.
MODELS = {
    "Llama-2-13B": {"hidden": 5120, "layers": 40, "ffn": 13824, "vocab": 32_000},
    "Qwen1.5-14B": {"hidden": 5120, "layers": 40, "ffn": 13696, "vocab": 152_064},
    "Llama-2-7B": {"hidden": 4096, "layers": 32, "ffn": 11008, "vocab": 32_000},
}
CANONICAL_V2 = "Llama-2-13B"
SEQ_CHOICES = [128, 160, 192, 224, 256, 288, 320, 384, 448, 512]  # packed lengths; the validator keeps AI < ridge
SEQ_DRAW = [192, 224, 256, 288, 320]  # what seeds draw from (those below the ridge at the drawn width)
HIDDEN_BANDS = ((14.0, 4096), (22.0, 5120), (99.0, 6144))  # model size (B) -> hidden, Llama-like depth


def _param_count(layers: int, h: int) -> float:
    return layers * (4 * h * h + 3 * h * _ffn(h) + 2 * h) + 2 * VOCAB * h + h


def _count(cfg: dict) -> float:
    """Parameters of a real config (untied embeddings, two RMSNorm weights a layer)."""
    h, f = cfg["hidden"], cfg["ffn"]
    return cfg["layers"] * (4 * h * h + 3 * h * f + 2 * h) + 2 * cfg["vocab"] * h + h


def model_v2(params_b: float, hidden: int) -> tuple[str, dict]:
    """The real model version 2 builds for (model_params_b, hidden): the config of that width
    whose parameter count lies within 2% of params_b."""
    for name, cfg in MODELS.items():
        if cfg["hidden"] == hidden and abs(_count(cfg) / 1e9 - params_b) <= 0.02 * params_b:
            return name, cfg
    have = "; ".join(f"{n}: model_params_b {_count(c) / 1e9:.2f}, hidden {c['hidden']}" for n, c in MODELS.items())
    raise InstanceError(f"version 2 builds real model configurations, and {params_b:g}B at hidden {hidden} is none "
                        f"of them ({have})")


def memory_v2(cfg: dict, world: int, tokens: int) -> feasibility.TrainingMemory:
    """Per-GPU memory of a DeepSpeed ZeRO-2 bf16 step (fp32 master weights, gradients and Adam
    moments partitioned; bf16 weights whole), activations kept (no checkpointing) at `tokens`."""
    return feasibility.training_memory(_count(cfg), world=world, tokens_per_gpu=tokens, hidden=cfg["hidden"],
                                       layers=cfg["layers"], sharding="zero2", master_fp32=True)


def _ai(m: int, n: int, k: int) -> float:
    return physics.gemm_flops(m, n, k) / physics.gemm_bytes(m, n, k)


class Params(ScenarioParams):
    gpu: Literal["H100"] = param("H100", unit="GPU model (H100 only: see the module docstring)", choices=["H100"])
    world_size: int = param(8, unit="ranks (GPUs, one NVLink domain)", ge=2, le=8, draw=(4, 8))
    model_params_b: float = param(30.3, unit="billion parameters (layers follow from it and hidden)", ge=5.0,
                                  le=40.0, draw=(7.0, 30.0))
    hidden: int = param(4096, unit="model width h (N = K of the q/k/v/o GEMMs)", choices=[4096, 5120, 6144])
    seq: int = param(256, unit="tokens per micro-step (micro-batch 1 x packed sequence) = GEMM M", ge=64,
                     le=512, choices=SEQ_CHOICES)
    grad_accum: int = param(512, unit="micro-steps per optimizer step", ge=8, le=4096, draw=(256, 1024))
    dram_frac: float = param(0.82, unit="fraction of HBM bandwidth the skinny GEMMs reach (ncu DRAM%)", ge=0.5,
                             le=0.95, draw=(0.78, 0.86))
    act_refetch: float = param(14.0, unit="DRAM re-fetches of the activation operand per 64 N-tiles",
                               ge=1.0, le=40.0, draw=(11.0, 17.0))
    large_gemm_eff: float = param(0.605, unit="fraction of dense bf16 peak a compute-bound GEMM reaches at M x 4",
                                  ge=0.3, le=0.85, draw=(0.56, 0.68))
    bucket_melem: float = param(500.0, unit="million gradient elements per reduce-scatter bucket", ge=25.0,
                                le=2000.0, draw=(200.0, 500.0))
    rs_busbw_frac: float = param(0.9, unit="fraction of the ring's achievable busbw the reduce-scatter reaches",
                                 ge=0.3, le=1.0, draw=(0.8, 0.95))
    op_overhead_us: float = param(8.0, unit="µs of framework CPU time per op before its launch", ge=2.0, le=60.0,
                                  draw=(6.0, 11.0))
    kernel_gap_us: float = param(0.42, unit="µs the stream idles between back-to-back kernels", ge=0.2, le=5.0,
                                 draw=(0.35, 0.6))
    host_prologue_ms: float = param(2.0, unit="ms of CPU work at a micro-step's start before the first launch",
                                    ge=0.2, le=20.0, draw=(1.2, 2.6))
    steps: int = param(3, unit="micro-steps (ProfilerStep#) in the trace", ge=3, le=2000)

    @classmethod
    def canonical(cls) -> "Params":
        """The seed's case 6: 8xH100, M=256, N=K=4096, 210 ms micro-steps, 97% busy, top family 31%.
        Version 2: the seed's own 13B as it is, Llama-2-13B (hidden 5120; docstring)."""
        if building() >= 2:
            m = MODELS[CANONICAL_V2]
            return cls(model_params_b=round(_count(m) / 1e9, 2), hidden=m["hidden"], op_overhead_us=3.0)
        return cls()

    @classmethod
    def adjust_draw(cls, values: dict) -> dict:
        """Seeds: the width follows the model size, and a drawn sequence length that would not keep
        the GEMM clearly below the ridge is folded onto one that does."""
        if building() >= 2:
            return cls._adjust_v2(values)
        values["hidden"] = next(h for top, h in HIDDEN_BANDS if values["model_params_b"] <= top)
        ridge = physics.ridge_point(physics.GPUS[values["gpu"]])
        ok = [s for s in SEQ_DRAW if _ai(s, values["hidden"], values["hidden"]) <= MAX_AI_OF_RIDGE * ridge]
        if values["seq"] not in ok:
            values["seq"] = ok[SEQ_CHOICES.index(values["seq"]) % len(ok)]
        return values

    @classmethod
    def _adjust_v2(cls, values: dict) -> dict:
        """Version 2's draws, each a job that runs: a real model (the drawn size picks Llama-2-7B,
        Llama-2-13B or Qwen1.5-14B), a packed length that keeps its GEMMs below the ridge and its
        CPU ahead of the GPU, 8 GPUs (4 where ZeRO-2 fits on 4, for the fix's micro-batch too),
        and a gradient reduce that hides inside the micro-step."""
        size = values["model_params_b"]  # drawn uniform 7-30: ~13% 7B, ~61% 13B, ~26% 14B
        name = "Llama-2-7B" if size < 10 else "Llama-2-13B" if size < 24 else "Qwen1.5-14B"
        m = MODELS[name]
        values["hidden"], values["model_params_b"] = m["hidden"], round(_count(m) / 1e9, 2)
        values["op_overhead_us"] = round(2.0 + (values["op_overhead_us"] - 6.0) * 0.3, 4)  # 2-3.5 µs before a launch
        world = 4 if values["world_size"] <= (6 if name == "Llama-2-7B" else 4) else 8  # drawn 4-8 uniform
        if not memory_v2(m, world, 4 * max(SEQ_DRAW)).fits(physics.GPUS[values["gpu"]]):
            world = 8
        values["world_size"] = world
        gpu = physics.GPUS[values["gpu"]]
        below = [s for s in SEQ_DRAW if _ai(s, m["hidden"], m["hidden"]) <= MAX_AI_OF_RIDGE * gpu.ridge_flop_per_byte]
        # the longest packing is the most GPU time per launch and per reduced byte: the fallback
        ok = [s for s in below if cls._runs_v2(values, m, s, gpu)] or below[-1:]
        if values["seq"] not in ok:
            values["seq"] = ok[SEQ_CHOICES.index(values["seq"]) % len(ok)]
        return values

    @classmethod
    def _runs_v2(cls, values: dict, m: dict, seq: int, gpu: physics.Gpu) -> bool:
        """The case holds at this length: the mean forward kernel outlasts the host's time per op
        by CPU_MARGIN (else the forward is launch-bound, another case), and the gradient reduce
        takes at most COMM_SHARE of the micro-step (else it cannot hide)."""
        rec = _Recipe(cls.model_construct(**{**values, "seq": seq}), gpu, m)
        fwd = np.array([k.base_ns for k in rec.fwd])
        n = len(rec.fwd) + len(rec.bwd)  # each kernel followed by the stream's mean gap, plus the boundary hole
        gpu_ms = (fwd.sum() + sum(k.base_ns for k in rec.bwd)) / 1e6 + n * MEAN_GAP_US / 1e3 + 1.2
        host_us = values["op_overhead_us"] + LAUNCH_MEAN_US + BETWEEN_MEAN_US + 0.5
        comm_ms = _count(m) * physics.BF16_BYTES / (gpu.busbw_gbps * values["rs_busbw_frac"] * 1e9) * 1e3
        return fwd.mean() / 1e3 >= CPU_MARGIN * host_us and comm_ms <= COMM_SHARE * gpu_ms

    def refusal(self) -> str | None:
        """Version 2: an override that names no real model, or whose ZeRO-2 step does not fit 90%
        of HBM at the fix's micro-batch 4 (the build's own gate, asked before any build work)."""
        if building() < 2:
            return None
        try:
            name, model = model_v2(self.model_params_b, self.hidden)
        except InstanceError as e:
            return str(e)
        return memory_v2(model, self.world_size, 4 * self.seq).needs(
            physics.GPUS[self.gpu], f"{name} under ZeRO-2 on {self.world_size}x {self.gpu} with fp32 master "
            f"weights at micro-batch 4 x {self.seq} tokens (the fix's)")

    @model_validator(mode="after")
    def _memory_bound_and_sane(self) -> "Params":
        gpu = physics.GPUS[self.gpu]
        ai = _ai(self.seq, self.hidden, self.hidden)
        if ai > MAX_AI_OF_RIDGE * gpu.ridge_flop_per_byte:
            limit = max((s for s in range(64, 513, 32) if _ai(s, self.hidden, self.hidden)
                         <= MAX_AI_OF_RIDGE * gpu.ridge_flop_per_byte), default=64)
            raise ValueError(f"seq {self.seq} at hidden {self.hidden} gives arithmetic intensity {ai:.0f} FLOP/B, "
                             f"not clearly below {gpu.key}'s ridge ({MAX_AI_OF_RIDGE:.0%} of "
                             f"{gpu.ridge_flop_per_byte:.0f}): this case needs a memory-bound GEMM (seq <= {limit})")
        layers = _layers(self.model_params_b, self.hidden)
        if not 8 <= layers <= 200:
            raise ValueError(f"{self.model_params_b:g}B at hidden {self.hidden} gives {layers} layers; "
                             f"choose a size that gives 8 to 200")
        if self.steps > self.grad_accum:
            raise ValueError(f"steps {self.steps} exceeds grad_accum {self.grad_accum}: the profiled micro-steps "
                             f"lie inside one accumulation window")
        return self


# -- emitting --------------------------------------------------------------------

def _phase(b: TraceBuilder, *, pid: int, tid: int, stream: int, ops: np.ndarray, kernels: np.ndarray,
           dur_ns: np.ndarray, cpu_t0: int, gpu_t0: int, overhead: np.ndarray, launch: np.ndarray,
           gap: np.ndarray | int, free_after: np.ndarray | None = None,
           pending: np.ndarray | None = None, latency: np.ndarray | int = 3_000, **tree) -> Launched:
    """launch_phase with CPU time left free after chosen ops (`free_after`, ns: the thread
    launches ZeRO-2's reduce-scatters there; version 2 also the Python between ops). `tree`
    (version 2): each launch's op tree, its autograd numbering, the pass and the room its closes
    may take (launch_phase's tree, autograd, backward, tree_room_ns)."""
    done = launch_phase(b, host_pid=pid, cpu_tid=tid, gpu_pid=0, stream=stream, op_names=ops, kernel_names=kernels,
                        kernel_dur_ns=dur_ns, cpu_t0=cpu_t0, gpu_t0=gpu_t0, op_overhead_ns=overhead,
                        launch_ns=launch, gpu_gap_ns=gap, free_after_ns=free_after, pending_kernel_start=pending,
                        launch_latency_ns=latency, **tree)
    return done


def _overheads(rng: np.random.Generator, n: int, mean_us: float, timing: hosttime.HostTiming,
               v2: bool) -> tuple[np.ndarray, np.ndarray]:
    """Framework time before each launch, and the launch call: version 2's calls as measured,
    scaled to LAUNCH_MEAN_US (a GPU-bound host's cudaLaunchKernel: median ~5 µs)."""
    if not v2:
        return training.op_overheads_ns(rng, n, mean_us)
    overhead = (np.maximum(rng.gamma(4.0, mean_us / 4.0, n), 1.0) * 1e3).astype(np.int64)
    return overhead, timing.launch_calls_ns(rng, n, mean_us=LAUNCH_MEAN_US)


def _host_v2(rng: np.random.Generator, timing: hosttime.HostTiming, n: int, median_us: float | None = None) -> dict:
    """Version 2's per-launch host timing: the kernel's start after its launch returns (idle
    GPU), and the Python and dispatcher time between one op's end and the next op's start
    (never zero on a real thread; `median_us`: the autograd engine's, on the backward thread)."""
    return {"latency": timing.launch_latency_ns(rng, n),
            "between": hosttime._lognormal_ns(rng, n, BETWEEN_FLOOR_US, median_us or BETWEEN_MEDIAN_US, BETWEEN_SIGMA,
                                              1_000.0)}


def _last_copy_start(b: TraceBuilder) -> int:
    """The start of the copy the builder emitted last (loss.item()'s DtoH, placed by sync_on_loss)."""
    last = next(c for c in reversed(b._chunks) if int(c[0][0]) == int(Kind.MEMORY))
    return int(last[5][-1])


# Version 2's Python between two ops of a GPU-bound eager step (the module call, hooks, the
# next line): p10 ~9, p50 12, p90 ~17 µs, inside the real traces' bounds (fidelity.py) at their
# lower end, as a tight training loop with no per-op Python of its own sits.
BETWEEN_FLOOR_US, BETWEEN_MEDIAN_US, BETWEEN_SIGMA = 4.0, 12.0, 0.35
LAUNCH_MEAN_US = 6.0
BETWEEN_MEAN_US = BETWEEN_FLOOR_US + (BETWEEN_MEDIAN_US - BETWEEN_FLOOR_US) * math.exp(BETWEEN_SIGMA ** 2 / 2)
MEAN_GAP_US = 2.6  # hosttime.MEASURED_2's mean gap between back-to-back kernels
CPU_MARGIN = 1.2  # version 2 draws: the forward's mean kernel over the host's time per op
COMM_SHARE = 0.9  # version 2 draws: the gradient reduce over the GPU's micro-step
CLOSE_ROOM_NS = 4_500  # a backward node closes within a third of this after its launching op
OP_TREE = True  # version 2 emits the op tree; tests turn it off to see the flat build's kernels


def _merged(starts: list[np.ndarray], ends: list[np.ndarray]):
    s, e = intervals.union(np.concatenate(starts), np.concatenate(ends))
    cum = np.concatenate([[0], np.cumsum(e - s)])
    return s, e, cum


def _biggest_gap(merged, lo: int, hi: int) -> tuple[int, int]:
    """The longest idle stretch of [lo, hi) between the merged busy intervals."""
    s, e, _ = merged
    i, j = np.searchsorted(e, lo, side="right"), np.searchsorted(s, hi, side="left")
    edges_s = np.r_[lo, np.clip(e[i:j], lo, hi)]
    edges_e = np.r_[np.clip(s[i:j], lo, hi), hi]
    g = int(np.argmax(edges_e - edges_s))
    return int(edges_s[g]), int(edges_e[g])


def _covered(merged, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """ns of each [lo, hi) covered by the merged disjoint intervals (vectorized)."""
    s, e, cum = merged

    def upto(x):  # covered length in (-inf, x)
        i = np.searchsorted(s, x, side="right")  # intervals starting before x
        full = cum[np.maximum(i - 1, 0)]
        last = np.where(i > 0, np.minimum(x, e[np.maximum(i - 1, 0)]) - s[np.maximum(i - 1, 0)], 0)
        return np.where(i > 0, full + np.maximum(last, 0), 0)

    return upto(np.asarray(hi)) - upto(np.asarray(lo))


# -- the instance ----------------------------------------------------------------------

def build(p: Params, rng: np.random.Generator, seed) -> Built:
    gpu = physics.GPUS[p.gpu]
    v2 = building() >= 2
    model = None
    if v2:  # a real model that fits, before and after the fix (docstring)
        name, model = model_v2(p.model_params_b, p.hidden)
        mem = memory_v2(model, p.world_size, 4 * p.seq)
        if not mem.fits(gpu):
            raise InstanceError(f"{name} with ZeRO-2 on {p.world_size} GPUs at micro-batch 4 x {p.seq} tokens needs "
                                f"{mem.describe(gpu)}, over the {feasibility.HBM_BUDGET:.0%} budget: use more GPUs")
    rec = _Recipe(p, gpu, model)
    fx = fixed()
    n_ranks = p.world_size
    n_params = _count(model) if v2 else _param_count(rec.layers, p.hidden)
    base_f, after_f, cls_f = rec.arrays(rec.fwd)
    base_b, after_b, cls_b = rec.arrays(rec.bwd)

    busbw = gpu.busbw_gbps * p.rs_busbw_frac
    bk = _zero.buckets([k.param_elems for k in rec.bwd], p.bucket_melem, n_ranks, busbw, v2)
    grad_pos, closes, close_pos, bucket_elems = bk.grad_pos, bk.closes, bk.close_pos, bk.bucket_elems
    free_after, rs_ns, slices = bk.free_after, bk.rs_ns, bk.slices

    b, pid, t0 = new_builder(rng, gpu, rank=0, world=n_ranks, visible_gpus=n_ranks)
    autograd_tid = pid + int(rng.integers(20, 60))
    nccl_stream = int(rng.choice([20, 28, 36]))
    topo = training.Topology(pid, pid, autograd_tid, 0, 7, nccl_stream=nccl_stream)
    topo.name_rows(b)
    shown = rec
    tokens = p.seq
    if fx:  # the fix: micro-batch 4, each kernel at its 4 x seq time (the key's after_ns, per token x 4)
        tokens = 4 * p.seq
        shown = _Recipe(p, gpu, model, tokens=tokens, large=True)
        base_f, base_b = after_f * 4, after_b * 4
    ops_f, ker_f = workload.intern(b, [k.spec for k in shown.fwd])
    ops_b, ker_b = workload.intern(b, [k.spec for k in shown.bwd])
    tree_f, tree_b, autograd = {}, {}, None
    if v2:  # each launch with the grid its own shape needs (a name's first launch's for all is a tell)
        tree_f = {"kernel_cfg": workload.launch_configs(b, [k.spec for k in shown.fwd])}
        tree_b = {"kernel_cfg": workload.launch_configs(b, [k.spec for k in shown.bwd])}
    if v2:  # the op tree around each launch, record_shapes, the profiler's numbering (docstring)
        first_seq, first_ev = int(rng.integers(1_000, 60_000)), int(rng.integers(2_000, 40_000))
        if OP_TREE:
            b.number_ops(first_ev_idx=first_ev)
            autograd = optree.Autograd(b, first_seq)
            widths = (shown.h, shown.f, shown.vocab)
            tree_f |= {"tree": [optree.tree_for(k.spec, widths) for k in shown.fwd], "autograd": autograd}
            tree_b |= {"tree": [optree.tree_for(k.spec, widths) for k in shown.bwd], "autograd": autograd,
                       "backward": True}

    first_step = int(rng.integers(200, 5_000))
    gap_ns = int(p.kernel_gap_us * 1e3)
    # Version 2 draws every host row and stream gap as real traces show them (docstring);
    # version 1 keeps its constants, draw for draw.
    timing = hosttime.MEASURED_2 if v2 else hosttime.V1
    h = (lambda ns: timing.host_ns(rng, int(ns))) if v2 else int  # noqa: E731
    now = t0
    gpu_free = t0
    nccl_free = t0
    steps, comp_s, comp_e, nccl_s, nccl_e = [], [], [], [], []
    sum_f = np.zeros(len(base_f))
    sum_b = np.zeros(len(base_b))
    lead, blocked, kgaps = [], [], []
    for i in range(p.steps):
        s0 = now
        if autograd is not None:  # each micro-step's backward takes back its own forward's numbers
            autograd.made.clear()
        dl_end = now + h(p.host_prologue_ms * 0.45e6)
        cpu_span(b, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", pid, pid, now + h(40_000), dl_end)
        h2d_bytes = tokens * 8 * 2  # int64 input ids and labels
        h2d_start = max(dl_end + h(60_000), gpu_free + (int(timing.launch_latency_ns(rng, 1)[0]) if v2 else gap_ns))
        h2d_ns = int(h2d_bytes / 20e9 * 1e9) + (h(2_000) if v2 else 2_000)
        memcpy(b, host_pid=pid, cpu_tid=pid, gpu_pid=0, stream=7, kind="HtoD_pinned", nbytes=h2d_bytes,
               cpu_start_ns=dl_end + h(20_000), api_ns=h(10_000), gpu_start_ns=h2d_start, gpu_dur_ns=h2d_ns,
               op_name="aten::copy_")
        launch_t0 = now + h(p.host_prologue_ms * 1e6)
        f_ns = (base_f * rng.normal(1.0, 0.012, len(base_f)).clip(0.96, 1.04)).astype(np.int64)
        b_ns = (base_b * rng.normal(1.0, 0.012, len(base_b)).clip(0.96, 1.04)).astype(np.int64)
        sum_f += f_ns
        sum_b += b_ns
        oh, ln = _overheads(rng, len(f_ns), p.op_overhead_us, timing, v2)
        host_f = _host_v2(rng, timing, len(f_ns)) if v2 else {}
        gaps_f = (timing.kernel_gaps_ns(rng, len(f_ns)) if v2
                  else rng.integers(int(gap_ns * 0.8), int(gap_ns * 1.2) + 1, len(f_ns)))
        f = _phase(b, pid=pid, tid=pid, stream=7, ops=ops_f, kernels=ker_f, dur_ns=f_ns, cpu_t0=launch_t0,
                   gpu_t0=h2d_start + h2d_ns + (int(gaps_f[0]) if v2 else gap_ns), overhead=oh, launch=ln,
                   gap=gaps_f, free_after=host_f.get("between"), latency=host_f.get("latency", 3_000), **tree_f)
        cpu_span(b, "DeepSpeedEngine.forward", pid, pid, launch_t0 - h(2_000), f.cpu_end + h(3_000))
        oh, ln = _overheads(rng, len(b_ns), p.op_overhead_us, timing, v2)
        host_b = _host_v2(rng, timing, len(b_ns), _zero.ENGINE_MEDIAN_US) if v2 else {}
        gaps_b = (timing.kernel_gaps_ns(rng, len(b_ns)) if v2
                  else rng.integers(int(gap_ns * 0.8), int(gap_ns * 1.2) + 1, len(b_ns)))
        cpu_after = free_after
        if v2:  # after a weight's gradient node: the engine's gap, its AccumulateGrad with DeepSpeed's hook
            # inside (and a full bucket's reduces in that hook), then the engine's gap to the next node
            hook, after = np.zeros(len(b_ns), np.int64), np.zeros(len(b_ns), np.int64)
            hook[grad_pos] = hosttime._lognormal_ns(rng, len(grad_pos), _zero.HOOK_FLOOR_US, _zero.HOOK_MEDIAN_US,
                                                    _zero.HOOK_SIGMA, 1_000.0)
            after[grad_pos] = hosttime._lognormal_ns(rng, len(grad_pos), BETWEEN_FLOOR_US, _zero.ENGINE_MEDIAN_US,
                                                     BETWEEN_SIGMA, 1_000.0)
            cpu_after = free_after + host_b["between"] + hook + after
            if "tree" in tree_b:  # the nodes close in the engine's first µs after the launching op
                tree_b["tree_room_ns"] = np.minimum(host_b["between"], CLOSE_ROOM_NS)
        bw = _phase(b, pid=pid, tid=autograd_tid, stream=7, ops=ops_b, kernels=ker_b, dur_ns=b_ns,
                    cpu_t0=f.cpu_end + h(30_000), gpu_t0=f.gpu_end + (int(gaps_b[0]) if v2 else gap_ns), overhead=oh,
                    launch=ln, gap=gaps_b, free_after=cpu_after, pending=f.kernel_start,
                    latency=host_b.get("latency", 3_000), **tree_b)
        bw_span_end = int(bw.op_end.max()) + (int(free_after[-1]) if v2 else _zero.COMM_CPU_NS) + h(20_000)
        bw_span_start = f.cpu_end + h(10_000)
        if not v2:
            cpu_span(b, "DeepSpeedEngine.backward", pid, pid, bw_span_start, bw_span_end)
        rs_dur = (rs_ns * rng.normal(1.0, 0.01, len(rs_ns)).clip(0.97, 1.03)).astype(np.int64)
        if v2:
            acc_start = bw.op_end[grad_pos] + host_b["between"][grad_pos]
            acc_hook = hook[grad_pos]
            reduce_at = acc_start[closes] + (acc_hook[closes] * _zero.HOOK_REDUCE_AT).astype(np.int64)
            rs_start, rs_host_end = _zero.reduces(b, pid=pid, tid=autograd_tid, stream=nccl_stream, world=n_ranks,
                                                  cpu_at=reduce_at, gpu_ready=bw.kernel_end[close_pos], slices=slices,
                                                  dur_ns=rs_dur, nccl_free=nccl_free, rng=rng, timing=timing,
                                                  shapes=OP_TREE)
            acc_end = acc_start + acc_hook + free_after[grad_pos]
            last = np.zeros(len(closes), np.int64)
            np.maximum.at(last, slices[0], rs_host_end)
            acc_end[closes] = np.maximum(acc_end[closes], last + 500)  # a long launch call's tail stays inside
            if "tree" in tree_b:
                weights = [[k.param_elems // shown.h, shown.h] if k.spec.op.endswith("EmbeddingBackward0")
                           else _zero.weight_shape(k.spec.shape) for k in np.array(shown.bwd)[grad_pos]]
                _zero.accumulate_grad(b, pid=pid, tid=autograd_tid, start=acc_start, core=acc_hook, end=acc_end,
                                      shapes=weights)
            bw_span_end = max(bw_span_end, int(acc_end[-1]) + 2_000)
            cpu_span(b, "DeepSpeedEngine.backward", pid, pid, bw_span_start, bw_span_end)
        else:
            rs_start = _zero.reduce_scatter_v1(b, pid=pid, tid=autograd_tid, stream=nccl_stream, world=n_ranks,
                                               cpu_at=bw.op_end[close_pos], gpu_ready=bw.kernel_end[close_pos],
                                               elems=bucket_elems, dur_ns=rs_dur, nccl_free=nccl_free)
        nccl_free = int(rs_start[-1] + rs_dur[-1])
        item_t0 = bw_span_end + h(10_000)
        if v2:  # the copy lands where sync_on_loss puts it: read it back off the builder's last copy
            t_end = training.sync_on_loss(b, topo, cpu_t0=item_t0, gpu_done=bw.gpu_end, rng=rng, timing=timing)
            dtoh_start = _last_copy_start(b)
        else:
            t_end = training.sync_on_loss(b, topo, cpu_t0=item_t0, gpu_done=bw.gpu_end)
            dtoh_start = max(bw.gpu_end + 2_000, item_t0 + 20_000)
        cpu_span(b, f"ProfilerStep#{first_step + i}", pid, pid, s0, t_end)
        comp_s += [np.array([h2d_start]), f.kernel_start, bw.kernel_start, np.array([dtoh_start])]
        comp_e += [np.array([h2d_start + h2d_ns]), f.kernel_end, bw.kernel_end, np.array([dtoh_start + 1_600])]
        nccl_s.append(rs_start)
        nccl_e.append(rs_start + rs_dur)
        # how far the CPU's launches run ahead of the kernels they launch
        lead.append(float(np.median(np.r_[f.kernel_start - f.op_end, bw.kernel_start - bw.op_end])) / 1e6)
        if v2:  # the gaps between back-to-back kernels, as the key quotes them
            ks, ke = np.r_[f.kernel_start, bw.kernel_start], np.r_[f.kernel_end, bw.kernel_end]
            g = ks[1:] - ke[:-1]
            kgaps.append(g[(g >= 0) & (g < 20_000)])
        blocked.append((f.blocked_launches + bw.blocked_launches) / (len(f_ns) + len(b_ns)) * 100)
        steps.append({"start": s0, "end": t_end})
        gpu_free = dtoh_start + 1_600
        now = t_end + (h(15_000) if v2 else 15_000)
    trace = b.build()
    if fx:
        return _fixed_key(p, gpu, rng, trace, steps, comp_s, comp_e, nccl_s, nccl_e, len(base_f) + len(base_b))
    return _key_and_artifacts(p, gpu, rec, seed, trace, steps, comp_s, comp_e, nccl_s, nccl_e,
                              sum_f / p.steps, sum_b / p.steps, after_f, after_b, base_f, base_b, cls_f, cls_b,
                              bucket_elems if slices is None else slices[1], rs_ns, busbw, float(np.mean(lead)),
                              float(np.mean(blocked)), n_params,
                              np.percentile(np.concatenate(kgaps), [50, 90]) / 1e3 if v2 else None,
                              rng)


def _fixed_key(p, gpu, rng, trace, steps, comp_s, comp_e, nccl_s, nccl_e, kernels) -> Built:
    """What the trace after the fix measures: its micro-step of 4 x seq tokens, and the same per
    seq-token equivalent the key's expected step states. The instance's key is the unfixed build's."""
    starts = np.array([s["start"] for s in steps], np.int64)
    lo, hi = starts[:-1], starts[1:]
    micro_ms = float(np.median((hi - lo) / 1e6))
    comp = _merged(comp_s, comp_e)
    busy_pct = float(_covered(comp, lo, hi).sum() / (hi - lo).sum() * 100)
    n_s, n_e = np.concatenate(nccl_s[:-1]), np.concatenate(nccl_e[:-1])
    hidden_pct = float(_covered(comp, n_s, n_e).sum() / (n_e - n_s).sum() * 100)
    fixed_key = {"fixed": True, "observations": [
        obs("step_ms", f"per {p.seq}-token equivalent after the fix (the micro-step / 4)", micro_ms / 4, "ms"),
        obs("microstep_ms", f"micro-step of micro-batch 4 x {p.seq} tokens", micro_ms, "ms"),
        obs("gemm_m", "dominant GEMM M (micro-batch 4 x seq)", 4 * p.seq, "", 0),
        obs("gpu_busy_pct", "compute-stream busy share of the micro-step", busy_pct, "%", 1),
        obs("nccl_hidden_pct", "reduce time overlapped by compute kernels", hidden_pct, "%", 1),
        obs("kernels_per_step", "compute kernels per micro-step", kernels, "kernels", 0),
        obs("grad_accum", "micro-steps per optimizer step (the same global batch)", p.grad_accum // 4, "", 0)]}
    return Built(key=fixed_key, artifacts={"gpus": gpu_clock_report(gpu, p.world_size, rng)},
                 trace_for_rank=lambda rank: trace, ranks=1)


def _key_and_artifacts(p, gpu, rec, seed, trace, steps, comp_s, comp_e, nccl_s, nccl_e, mean_f, mean_b,
                       after_f, after_b, base_f, base_b, cls_f, cls_b, bucket_elems, rs_ns, busbw, lead_ms,
                       blocked_pct, n_params, gap_q, rng) -> Built:
    t, n_ranks = p.seq, p.world_size
    peak = gpu.bf16_tflops * 1e12
    bw = gpu.mem_tbps * 1e12
    ridge = physics.ridge_point(gpu)

    # -- the timeline, measured on the emitted arrays, per ProfilerStep window (start to start) --
    starts = np.array([s["start"] for s in steps], np.int64)
    lo, hi = starts[:-1], starts[1:]
    step_ms = float(np.median((hi - lo) / 1e6))
    comp = _merged(comp_s, comp_e)
    busy = _covered(comp, lo, hi)
    busy_pct = float(busy.sum() / (hi - lo).sum() * 100)
    gaps_ms = float(((hi - lo - busy) / 1e6).mean())
    biggest = [_biggest_gap(comp, a, z) for a, z in zip(lo.tolist(), hi.tolist())]
    max_gap_ms = float(np.mean([(z - a) / 1e6 for a, z in biggest]))
    # comm launched inside the measured windows; its tail runs under the next micro-step's forward
    n_s, n_e = np.concatenate(nccl_s[:-1]), np.concatenate(nccl_e[:-1])
    nccl_hidden_pct = float(_covered(comp, n_s, n_e).sum() / (n_e - n_s).sum() * 100)
    nccl_ms = float(np.mean([(e - s).sum() for s, e in zip(nccl_s, nccl_e)]) / 1e6)
    kernels_per_step = len(mean_f) + len(mean_b)

    # -- kernel time by class, per micro-step, and what the fix does to each --
    mean = np.r_[mean_f, mean_b]
    ratio = np.r_[after_f / base_f, after_b / base_b]  # per-token time after the fix over now
    cls = np.r_[cls_f, cls_b]
    kern_ms = mean.sum() / 1e6
    by = {c: float(mean[cls == c].sum() / 1e6) for c in ("family", "kindred", "other")}
    after_by = {c: float((mean * ratio)[cls == c].sum() / 1e6) for c in by}
    share = {c: by[c] / kern_ms * 100 for c in by}
    copies_ms = step_ms - gaps_ms - kern_ms  # the input H2D and the loss DtoH on the compute stream
    after_ms = sum(after_by.values()) + copies_ms + gaps_ms / 4
    gemm_only_ms = step_ms - (by["family"] - after_by["family"]) - (by["kindred"] - after_by["kindred"])
    speedup = step_ms / after_ms
    r_fam = by["family"] / after_by["family"]
    r_kin = by["kindred"] / after_by["kindred"]
    r_oth = by["other"] / after_by["other"]

    # -- the dominant GEMM: the family's forward instance, as Nsight Compute reads it --
    fam_tn = np.array([i for i, kk in enumerate(rec.fwd) if kk.cls == "family"])
    top = rec.fwd[int(fam_tn[0])]
    m, n, k = top.spec.shape
    dur_us = float(mean_f[fam_tn].mean() / 1e3)
    flops = physics.gemm_flops(m, n, k)
    min_bytes = physics.gemm_bytes(m, n, k)
    ai = physics.arithmetic_intensity(flops, min_bytes)
    dram_bytes = top.dram_bytes
    dram_pct = dram_bytes / (dur_us * 1e-6) / bw * 100
    tensor_pct = flops / (dur_us * 1e-6) / peak * 100
    tflops_m = flops / (dur_us * 1e-6) / 1e12
    m4 = 4 * m
    ai4 = _ai(m4, n, k)
    us_4m = rec._gemm_ns(m4, k, n, "tn", FAMILY, after=True)[0] / 1e3
    tflops_4m = physics.gemm_flops(m4, n, k) / (us_4m * 1e-6) / 1e12
    roof_m = physics.attainable_tflops(ai, gpu)  # what a zero-re-fetch kernel at 100% of HBM could reach

    flops_step = physics.training_flops(n_params, t)
    mfu = physics.mfu_pct(flops_step, step_ms, gpu)
    mfu_after = physics.mfu_pct(flops_step, after_ms, gpu)
    grad_gb = n_params * physics.BF16_BYTES / 1e9
    # a reduce-scatter moves (N-1)/N of the bytes per GPU; version 2's per-partition ring reduces, each
    # rank sending every slice once, all of them
    rs_gb = grad_gb if rec.v2 else (n_ranks - 1) / n_ranks * grad_gb
    coll = "reduce" if rec.v2 else "reduce-scatter"
    fam_label = family_label(rec.v2)
    rs_busbw = rs_gb / (nccl_ms / 1e3)
    ar_ms = physics.allreduce_ms(grad_gb * 1e9, n_ranks, busbw)

    observations = [
        obs("step_ms", "micro-step period (ProfilerStep to ProfilerStep)", step_ms, "ms"),
        obs("expected_step_ms", f"micro-step per {t}-token equivalent after micro-batch 1 -> 4", after_ms, "ms"),
        obs("speedup", "throughput gain", speedup, "x", 3),
        obs("expected_step_gemm_only_ms", "the same, crediting only the GEMMs (the seed's method)", gemm_only_ms,
            "ms"),
        obs("gpu_busy_pct", "compute-stream busy share of the micro-step", busy_pct, "%", 1),
        obs("gaps_ms", "compute-stream idle per micro-step", gaps_ms, "ms"),
        obs("gap_pct", "idle share of the micro-step", gaps_ms / step_ms * 100, "%", 1),
        obs("max_gap_ms", "largest single idle stretch per micro-step (the step boundary)", max_gap_ms, "ms", 3),
        obs("kernels_per_step", "compute kernels per micro-step", kernels_per_step, "kernels", 0),
        obs("launch_lead_ms", "how far launches run ahead of their kernels (median)", lead_ms, "ms"),
        obs("blocked_launch_pct", "cudaLaunchKernel calls that waited for a launch-queue slot", blocked_pct, "%", 1),
        obs("nccl_ms_per_step", f"{coll} kernel time per micro-step", nccl_ms, "ms"),
        obs("nccl_kernels_per_step", "reduce-scatter buckets per micro-step" if not rec.v2 else
            "reduce kernels per micro-step (one per partition each bucket spans)", len(bucket_elems), "kernels", 0),
        obs("nccl_hidden_pct", f"{coll} time overlapped by compute kernels", nccl_hidden_pct, "%", 1),
        obs("busbw_gbps", f"achieved {coll} bus bandwidth", rs_busbw, "GB/s", 1),
        obs("top_kernel_share_pct", f"{fam_label} (tn/nn/nt) share of compute kernel time",
            share["family"], "%", 1),
        obs("kindred_share_pct", "the other skinny GEMMs (MLP, LM head)", share["kindred"], "%", 1),
        obs("other_share_pct", "attention, norms, RoPE, SiLU, adds", share["other"], "%", 1),
        obs("gemm_m", "dominant GEMM M (micro-batch x seq)", m, "", 0),
        obs("gemm_n", "dominant GEMM N", n, "", 0),
        obs("gemm_k", "dominant GEMM K", k, "", 0),
        obs("gemm_gflop", "2MNK", flops / 1e9, "GFLOP", 2),
        obs("gemm_mb", "minimum bytes 2(MK+KN+MN)", min_bytes / 1e6, "MB", 1),
        obs("gemm_dram_mb", "DRAM bytes the kernel actually moves", dram_bytes / 1e6, "MB", 1),
        obs("overfetch", "DRAM bytes over the minimum", dram_bytes / min_bytes, "x", 2),
        obs("gemm_us", "dominant GEMM duration", dur_us, "µs", 2),
        obs("arithmetic_intensity", "2MNK / 2(MK+KN+MN)", ai, "FLOP/B", 1),
        obs("ridge_point", f"{gpu.key} ridge: peak / HBM bandwidth", ridge, "FLOP/B", 1),
        obs("dram_pct", "ncu DRAM throughput", dram_pct, "%", 1),
        obs("tensor_pct", "ncu tensor pipe (achieved FLOP/s over peak)", tensor_pct, "%", 1),
        obs("roofline_cap_tflops", "AI x bandwidth: the shape's own ceiling", roof_m, "TFLOP/s", 0),
        obs("expected_ai", f"arithmetic intensity at M={m4}", ai4, "FLOP/B", 1),
        obs("microbench_tflops_m", f"GEMM microbench at M={m}", tflops_m, "TFLOP/s", 0),
        obs("microbench_tflops_4m", f"GEMM microbench at M={m4}", tflops_4m, "TFLOP/s", 0),
        obs("microbench_ratio", "TFLOP/s ratio, M x 4 over M", tflops_4m / tflops_m, "x", 2),
        obs("family_speedup", "top family, per token, after the fix", r_fam, "x", 2),
        obs("kindred_speedup", "kindred GEMMs, per token, after the fix", r_kin, "x", 2),
        obs("other_speedup", "other kernels, per token, after the fix (launch ramps amortized)", r_oth, "x", 2),
        obs("model_params_b", "parameters", n_params / 1e9, "B", 2),
        obs("layers", "decoder layers", rec.layers, "", 0),
        obs("mfu_pct", "MFU: 6 x params x tokens / (step x peak)", mfu, "%", 1),
        obs("expected_mfu_pct", "MFU after the fix", mfu_after, "%", 1),
    ]
    if rec.v2:  # what the job needs per GPU, now and at the fix's micro-batch 4 (app/feasibility.py)
        mem, mem4 = memory_v2(rec.model, n_ranks, t), memory_v2(rec.model, n_ranks, 4 * t)
        observations += [
            obs("memory_gb_per_gpu", "ZeRO-2 memory per GPU: bf16 weights, fp32 partitions, activations", mem.total / 1e9,
                "GB", 1),
            obs("expected_memory_gb_per_gpu", "the same at micro-batch 4", mem4.total / 1e9, "GB", 1),
            obs("memory_share_pct", f"of {gpu.key}'s HBM at micro-batch 4", mem4.share_of(gpu) * 100, "%", 1)]
    v = dict(step_ms=step_ms, after_ms=after_ms, speedup=speedup, busy_pct=busy_pct, gaps_ms=gaps_ms,
             max_gap_ms=max_gap_ms, biggest=biggest, nccl_ms=nccl_ms, nccl_hidden_pct=nccl_hidden_pct,
             buckets=len(bucket_elems), rs_busbw=rs_busbw, rs_gb=rs_gb, grad_gb=grad_gb, ar_ms=ar_ms, share=share,
             by=by, after_by=after_by, r_fam=r_fam, r_kin=r_kin, r_oth=r_oth, m=m, n=n, k=k, m4=m4, flops=flops,
             min_bytes=min_bytes, dram_bytes=dram_bytes, dur_us=dur_us, ai=ai, ai4=ai4, ridge=ridge,
             dram_pct=dram_pct, tensor_pct=tensor_pct, tflops_m=tflops_m, tflops_4m=tflops_4m, us_4m=us_4m,
             roof_m=roof_m, mfu=mfu, mfu_after=mfu_after, flops_step=flops_step, n_params=n_params,
             lead_ms=lead_ms, blocked_pct=blocked_pct, kernels_per_step=kernels_per_step, gemm_only_ms=gemm_only_ms, copies_ms=copies_ms,
             top=top, mean=mean, kern_ms=kern_ms, bucket_elems=bucket_elems)
    if gap_q is not None:
        v["gap_p50_us"], v["gap_p90_us"] = float(gap_q[0]), float(gap_q[1])
    return _write_key(p, gpu, rec, seed, trace, steps, observations, v, rng, mean_f, mean_b)


def _write_key(p, gpu, rec, seed, trace, steps, observations, v, rng, mean_f, mean_b) -> Built:
    t, h, n_ranks = p.seq, p.hidden, p.world_size
    step, after = v["step_ms"], v["after_ms"]
    v2 = rec.v2
    fam = family_label(v2)
    nccl_name = _zero.NCCL_REDUCE if v2 else _zero.NCCL_RS
    coll = "reduce" if v2 else "reduce-scatter"
    sh, by, ab = v["share"], v["by"], v["after_by"]
    params_b = v["n_params"] / 1e9
    gbatch = n_ranks * t * p.grad_accum
    bw_tbps = gpu.mem_tbps
    tflop_step = v["flops_step"] / 1e12
    achieved = v["flops_step"] / (step / 1e3) / 1e12
    model = (f"{model_v2(p.model_params_b, h)[0]} ({rec.layers} layers, hidden {h})" if v2 else
             f"{params_b:.0f}B-parameter dense decoder ({rec.layers} layers, hidden {h})")
    zero = f"DeepSpeed {_zero.DEEPSPEED} ZeRO-2" if v2 else "ZeRO-2"
    brief = (f"{n_ranks}x {gpu.key} ({gpu.interconnect}), {model}, full fine-tune in BF16 with {zero} and "
             f"gradient accumulation: micro-batch 1 x "
             f"{t} tokens per micro-step (after a packing change), {p.grad_accum} micro-steps per optimizer step. "
             f"The trace looks clean, but MFU is {v['mfu']:.0f}% and the team wants to know where the rest went. "
             f"Here is rank 0's trace, one ProfilerStep per micro-step. Walk me through it.")
    queue = (f" and {v['blocked_pct']:.0f}% of cudaLaunchKernel calls wait for a full launch queue"
             if v["blocked_pct"] >= 1 else "")
    discipline = {
        "step_boundary": (f"ProfilerStep# annotations give clean {step:.0f} ms micro-steps; the CPU is ahead "
                          f"(launches run a median {v['lead_ms']:.1f} ms before their kernels{queue}), so the "
                          f"period is the GPU's."),
        "gaps": (f"{v['gaps_ms']:.1f} ms idle per micro-step ({v['gaps_ms'] / step * 100:.0f}%): a "
                 f"{v['max_gap_ms']:.1f} ms hole at the step boundary (loss.item() and the next batch) and "
                 f"~{p.kernel_gap_us:.1f} µs slivers between {v['kernels_per_step']:,} kernels; the compute "
                 f"stream is {v['busy_pct']:.0f}% busy. Nothing to collect.") if not v2 else (
                 f"{v['gaps_ms']:.1f} ms idle per micro-step ({v['gaps_ms'] / step * 100:.0f}%): a "
                 f"{v['max_gap_ms']:.1f} ms hole at the step boundary (loss.item() and the next batch), the rest "
                 f"spread over {v['kernels_per_step']:,} kernels as the gaps any stream shows between back-to-back "
                 f"kernels (median {v['gap_p50_us']:.1f} µs, p90 {v['gap_p90_us']:.1f} µs); the compute stream is "
                 f"{v['busy_pct']:.0f}% busy. No hole to collect: the CPU is ahead, so no launch is late, and the "
                 f"per-kernel gaps shrink per token when the kernels grow."),
        "overlap": (f"{v['buckets']} bucketed {nccl_name.split('(')[0]} kernels per micro-step "
                    f"({v['nccl_ms']:.0f} ms) run on their own stream under backward and the next forward: "
                    f"{v['nccl_hidden_pct']:.0f}% overlapped with compute, never waited on. Comm is hidden."),
        "longest_kernel": (f"Top family: {fam} in its tn/nn/nt layouts (forward, data grad, weight grad of q/k/v/o), "
                           f"{sh['family']:.0f}% of GPU time; the kindred skinny GEMMs (MLP, LM head) another "
                           f"{sh['kindred']:.0f}%. Shape M={v['m']}, N={v['n']}, K={v['k']}. The timeline is healthy: "
                           f"the loss is inside the kernels, which a timeline cannot see; hand off to Nsight Compute."),
    }
    root_cause = (f"Micro-batch 1 x {t} tokens makes every GEMM skinny (M={v['m']}): 2MNK / 2(MK+KN+MN) = "
                  f"{v['ai']:.0f} FLOP/B, below {gpu.key}'s ridge of {v['ridge']:.0f}, so the dominant GEMMs are "
                  f"memory-bound by shape: they stream the {v['n']}x{v['k']} weight at {v['dram_pct']:.0f}% of HBM "
                  f"bandwidth while the tensor pipe is {v['tensor_pct']:.0f}% busy. The GPU is busy; it is busy "
                  f"being slow.")
    traps = [{
        "id": "profiler_or_mfu_math",
        "claim": (f"{v['mfu']:.0f}% MFU with a {v['busy_pct']:.0f}%-busy timeline means the profiler's overhead is "
                  f"distorting things, or the MFU math is wrong."),
        "why_wrong": (f"MFU = 6 x {params_b:.1f}e9 params x {t} tokens = {tflop_step:.1f} TFLOP per micro-step over "
                      f"{step:.0f} ms = {achieved:.0f} TFLOP/s of {gpu.bf16_tflops:.0f} = {v['mfu']:.1f}%; FLOPs and "
                      f"wall time are both verified, and the profiler-off step time matches (the CPU runs "
                      f"{v['lead_ms']:.0f} ms ahead, so host-side profiler overhead never reaches the GPU). The GPU "
                      f"spends {v['busy_pct']:.0f}% of the time in kernels that deliver {v['mfu']:.0f}% of peak: the "
                      f"question moves from when to how fast."),
    }, {
        "id": "tune_the_kernel",
        "claim": "Tune the GEMM: autotune tiles, raise occupancy, try another cuBLAS algorithm or a custom kernel.",
        "why_wrong": (f"The kernel already moves {v['dram_pct']:.0f}% of HBM bandwidth, so occupancy cannot buy "
                      f"more bytes per second. A perfect tile with no re-fetch still moves {v['min_bytes'] / 1e6:.1f} MB "
                      f"for {v['flops'] / 1e9:.1f} GFLOP: AI {v['ai']:.0f} x {bw_tbps} TB/s = {v['roof_m']:.0f} "
                      f"TFLOP/s, below the {gpu.bf16_tflops:.0f} peak; the shape sets the roof. At M={v['m4']} the "
                      f"same library reaches {v['tflops_4m']:.0f} TFLOP/s (AI {v['ai4']:.0f}, past the ridge). No "
                      f"tuning fixes a shape."),
    }, {
        "id": "nccl_is_the_bottleneck",
        "claim": (f"The NCCL stream is busy {v['nccl_ms'] / step * 100:.0f}% of the time: communication is the "
                  f"bottleneck."),
        "why_wrong": (f"{v['nccl_hidden_pct']:.0f}% of the {coll} time overlaps compute kernels and the "
                      f"compute stream never waits for it: its idle is {v['gaps_ms']:.1f} ms per micro-step, "
                      f"{v['gaps_ms'] / step * 100:.0f}%. {v['rs_gb']:.1f} GB per micro-step at "
                      f"{v['rs_busbw']:.0f} GB/s busbw is healthy for {gpu.interconnect}. Removing comm would save "
                      f"about nothing."),
    }]
    confirmation = (f"ncu --set full -k regex:{'tilesize128x64x64' if v2 else 's16816gemm_bf16_128x64'} -c 3 on "
                    f"the top family: DRAM Throughput "
                    f"{v['dram_pct']:.0f}%, tensor pipe {v['tensor_pct']:.0f}%, {v['dur_us']:.1f} µs for "
                    f"{v['flops'] / 1e9:.1f} GFLOP; it moves {v['dram_bytes'] / 1e6:.1f} MB against a "
                    f"{v['min_bytes'] / 1e6:.1f} MB minimum. Memory-bound. One-line experiment: torch.matmul "
                    f"microbench at N=K={v['n']}: {v['tflops_m']:.0f} TFLOP/s at M={v['m']}, {v['tflops_4m']:.0f} at "
                    f"M={v['m4']}, {v['tflops_4m'] / v['tflops_m']:.1f}x.")
    fix = (f"Raise M: micro-batch 1 -> 4 (grad accumulation {p.grad_accum} -> {p.grad_accum // 4}, the same "
           f"{gbatch:,}-token global batch), or repack to seq {4 * t}. The dominant GEMMs run at M={v['m4']}: AI "
           f"{v['ai4']:.0f} FLOP/B, past the ridge, compute-bound. Memory permitting: activation memory grows 4x, "
           f"offset by fewer accumulation steps. Verify end to end; attention scales differently with sequence "
           f"length if you repack instead.")
    saved = {c: by[c] - ab[c] for c in by}
    expected = {
        "before_ms": round(step, 2), "after_ms": round(after, 2), "speedup": round(step / after, 3),
        "unit": f"ms per micro-step of {t} tokens (after: per {t}-token equivalent of the 4x micro-step)",
        "arithmetic": (f"top family {by['family']:.0f} ms at {v['r_fam']:.2f}x per token -> {ab['family']:.0f} ms; "
                       f"kindred GEMMs {by['kindred']:.0f} ms at {v['r_kin']:.2f}x -> {ab['kindred']:.0f} ms; other "
                       f"kernels {by['other']:.0f} ms -> {ab['other']:.0f} ms (launch ramps over 4x the data); gaps "
                       f"{v['gaps_ms']:.1f} -> {v['gaps_ms'] / 4:.1f} ms (paid once per micro-step): {step:.0f} - "
                       f"{sum(saved.values()) + 0.75 * v['gaps_ms']:.0f} = {after:.0f} ms, {step / after:.2f}x; "
                       f"crediting only the GEMMs, {v['gemm_only_ms']:.0f} ms. MFU {v['mfu']:.1f}% x "
                       f"{step / after:.2f} = {v['mfu_after']:.1f}%."),
    }
    model_answer = (
        f"I run the same read and the trace passes: {v['gaps_ms'] / step * 100:.0f}% gaps, comm hidden, launches "
        f"{v['lead_ms']:.0f} ms ahead of the GPU. That's a finding: at {v['mfu']:.0f}% MFU with a wall-to-wall "
        f"timeline, the loss is inside the kernels, and a timeline can't see inside a kernel, so I switch "
        f"instruments. Nsight Compute on the dominant GEMM, {sh['family']:.0f}% of GPU time: "
        f"{v['dram_pct']:.0f}% DRAM throughput, {v['tensor_pct']:.0f}% tensor pipe, memory-bound. The shape explains "
        f"it: M={v['m']} from micro-batch 1, arithmetic intensity ~{v['ai']:.0f} FLOP/byte against {gpu.key}'s "
        f"ridge of ~{v['ridge']:.0f}, below the ridge by construction. No amount of kernel tuning fixes a shape. "
        f"Raise the micro-batch to 4, M becomes {v['m4']}, intensity ~{v['ai4']:.0f}, the GEMMs go compute-bound; "
        f"with the kindred MLP GEMMs and the per-micro-step overheads amortized I'd expect ~{after:.0f} ms per "
        f"{t}-token equivalent, {step / after:.1f}x, MFU {v['mfu']:.0f} to ~{v['mfu_after']:.0f}%. The meta-point: "
        f"know when your profiler has run out of resolution and hand off to the next tool.")
    first, second = steps[0], steps[1]
    g0 = v["biggest"][0]
    key = make_key(scenario, p, seed, brief=brief, observations=observations, discipline=discipline,
                   root_cause=root_cause, traps=traps, decisive_measurement="ncu", confirmation=confirmation, fix=fix,
                   expected=expected, model_answer=model_answer,
                   marks={"step": {"start_us": first["start"] / 1e3, "end_us": second["start"] / 1e3},
                          "gap": {"start_us": g0[0] / 1e3, "end_us": g0[1] / 1e3}})

    top = v["top"]
    info = top.spec.info
    sm_ghz = gpu.max_sm_clock_mhz / 1e3
    ncu = {
        "kernel": top.spec.kernel, "grid": list(info.grid), "block": list(info.block),
        "header": (f"{top.spec.kernel} ({info.grid[0]}, {info.grid[1]}, {info.grid[2]})x({info.block[0]}, "
                   f"{info.block[1]}, {info.block[2]}), Context 1, Stream 7, Device 0, CC "
                   f"{gpu.compute_major}.{gpu.compute_minor}"),
        "shape": {"M": v["m"], "N": v["n"], "K": v["k"]}, "flops": v["flops"], "min_bytes": v["min_bytes"],
        "dram_bytes": round(v["dram_bytes"]), "traffic_model": {
            "weight_passes": math.ceil(v["m"] / CONFIG[FAMILY][0]), "tile": [CONFIG[FAMILY][0], CONFIG[FAMILY][1]],
            "activation_refetch": p.act_refetch, "overfetch": round(v["dram_bytes"] / v["min_bytes"], 3)},
        "duration_us": round(v["dur_us"], 2), "dram_frequency_ghz": round(gpu.mem_clock_mhz / 1e3, 2),
        "sm_frequency_ghz": sm_ghz, "elapsed_cycles": int(v["dur_us"] * 1e3 * sm_ghz),
        "memory_throughput_pct": round(v["dram_pct"], 2), "dram_throughput_pct": round(v["dram_pct"], 2),
        "compute_sm_throughput_pct": round(v["tensor_pct"], 2), "tensor_pipe_pct": round(v["tensor_pct"], 2),
        "arithmetic_intensity": round(v["ai"], 1), "achieved_intensity": round(v["flops"] / v["dram_bytes"], 1),
        "ridge_point": round(v["ridge"], 1), "achieved_tflops": round(v["tflops_m"], 1),
        "warps_per_sm": round(info.grid[0] * info.grid[1] * info.block[0] / 32 / gpu.num_sms, 2),
        "rule": (f"This kernel is memory-bound: DRAM throughput {v['dram_pct']:.0f}% against "
                 f"{v['tensor_pct']:.0f}% of the tensor pipe; its arithmetic intensity ({v['ai']:.0f} FLOP/B at "
                 f"minimum traffic) is below the ridge ({v['ridge']:.0f})."),
    }
    microbench = {"m": v["m"], "n": v["n"], "k": v["k"], "us_at_m": round(v["dur_us"], 2),
                  "tflops_at_m": round(v["tflops_m"], 1), "m4": v["m4"], "us_at_4m": round(v["us_4m"], 2),
                  "tflops_at_4m": round(v["tflops_4m"], 1), "ratio": round(v["tflops_4m"] / v["tflops_m"], 2),
                  "ai_at_m": round(v["ai"], 1), "ai_at_4m": round(v["ai4"], 1)}
    names = [k.spec.kernel for k in rec.fwd] + [k.spec.kernel for k in rec.bwd]
    totals: dict[str, list] = {}
    for name, d in zip(names, v["mean"].tolist()):
        row = totals.setdefault(name, [0.0, 0])
        row[0] += d
        row[1] += 1
    nccl_name = _zero.NCCL_REDUCE if rec.v2 else _zero.NCCL_RS
    totals[nccl_name] = [v["nccl_ms"] * 1e6, v["buckets"]]
    all_ns = sum(r[0] for r in totals.values())
    kern_sum = [{"time_pct": round(r[0] / all_ns * 100, 1), "total_ns": int(r[0] * p.steps),
                 "instances": r[1] * p.steps, "avg_ns": round(r[0] / r[1], 1), "name": name}
                for name, r in sorted(totals.items(), key=lambda kv: -kv[1][0])[:12]]
    by_cfg: dict[str, float] = {}
    layouts: dict[str, list] = {}
    for name, r in totals.items():
        if name != nccl_name:  # compute stream only: the reader's "GPU time"
            cfg = config_of(name)
            by_cfg[cfg] = by_cfg.get(cfg, 0.0) + r[0]
            layouts.setdefault(cfg, []).append(layout_of(name) if cfg != name else "")
    comp_ns = sum(by_cfg.values())
    kern_by_config = [{"config": c, "layouts": "/".join(x for x in layouts[c] if x),
                       "time_pct": round(ns / comp_ns * 100, 1), "ms_per_step": round(ns / 1e6, 2)}
                      for c, ns in sorted(by_cfg.items(), key=lambda kv: -kv[1])[:8]]
    specs = [k.spec for k in rec.fwd] + [k.spec for k in rec.bwd]
    artifacts = {
        "gpus": gpu_clock_report(gpu, n_ranks, rng),
        "gpu": {"key": gpu.key, "peak_tflops": gpu.bf16_tflops, "mem_tbps": gpu.mem_tbps,
                "ridge_flop_per_byte": round(v["ridge"], 1), "count": n_ranks},
        "kernels": workload.kernel_table(specs, np.r_[mean_f, mean_b].astype(np.int64), top=8),
        "steps": [{"start_us": s["start"] / 1e3, "end_us": s["end"] / 1e3} for s in steps],
        "ncu": ncu,
        "model": {"params": v["n_params"], "layers": rec.layers, "hidden": h, "ffn": rec.f, "vocab": rec.vocab,
                  "tokens_per_microstep": t, "grad_accum": p.grad_accum, "global_batch_tokens": gbatch},
        "comm": {"collective": "reduce" if rec.v2 else "reduce_scatter", "buckets_per_step": v["buckets"],
                 "bucket_elems": v["bucket_elems"].tolist(), "bytes_per_gpu_per_step": v["rs_gb"] * 1e9,
                 "busbw_gbps": round(v["rs_busbw"], 1), "hidden_pct": round(v["nccl_hidden_pct"], 1),
                 "allreduce_ms_if_ddp": round(v["ar_ms"], 1)},
        "time_by_class_ms": {c: round(by[c], 2) for c in by},
        "after_by_class_ms": {c: round(ab[c], 2) for c in ab},
        "experiments": {
            "ncu": ncu,
            "gemm_microbench": microbench,
            "nsys_kern_sum": kern_sum,
            "nsys_kern_sum_by_config": kern_by_config,
            "nsys_api_sum": {"cudaLaunchKernel_per_step": v["kernels_per_step"] + v["buckets"],
                             "launch_lead_ms": round(v["lead_ms"], 2),
                             "blocked_launch_pct": round(v["blocked_pct"], 1)},
            "nvidia_smi": {"utilization_pct": 100, "sm_clock_mhz": gpu.max_sm_clock_mhz,
                           "throttle_reasons": []},
        },
    }
    # Per-rank decomposition of the micro-step: every rank runs the same shapes at the same
    # clock, so the ranks agree to within noise (the straggler hypothesis has nothing to
    # stand on). Drawn after everything else so the trace and key do not move.
    busy_ms = v["step_ms"] * v["busy_pct"] / 100
    exposed_ms = v["nccl_ms"] * (1 - v["nccl_hidden_pct"] / 100)
    artifacts["per_rank"] = [
        {"rank": r, "step_ms": round(v["step_ms"], 2),
         "compute_ms": round(busy_ms * (1.0 if r == 0 else float(rng.normal(1, 0.003))), 2),
         "wait_ms": 0.0, "comm_ms": round(v["nccl_ms"], 2), "exposed_comm_ms": round(exposed_ms, 2),
         "optimizer_ms": 0.0} for r in range(n_ranks)]
    return Built(key=key, artifacts=artifacts, trace_for_rank=lambda rank: trace, ranks=1)


scenario = Scenario(
    id="skinny-gemm", version=2, older=(1,), fixable=(2,), family="kernels-memory", difficulty="hard",
    title="The healthy trace: a skinny GEMM the timeline cannot see into",
    signature="Wall-to-wall GPU, comm hidden, CPU ahead; the top GEMM family is memory-bound at M=256",
    Params=Params, build=build,
    observations=("gpu_busy_pct", "top_kernel_share_pct", "gemm_m", "arithmetic_intensity", "ridge_point",
                  "mfu_pct", "expected_mfu_pct"),
    # Version 2's canonical is the seed's 13B as the real Llama-2-13B: the seed's step, busy share,
    # family share and 4096-wide GEMM arithmetic do not hold for it (module docstring, "Version 2").
    seed_headlines={"gemm_m": 256, "ridge_point": 295, "dram_pct": 82, "tensor_pct": 24, "microbench_ratio": 2.5},
    reader_checks={"step_ms": "step_ms", "busy_pct": "gpu_busy_pct", "compute_idle_ms": "gaps_ms",
                   "max_gap_ms": "max_gap_ms"},
    rubric=Rubric(
        trap_parts={
            "profiler_or_mfu_math": r"\b(profiler|profiling|instrumentation|mfu (math|number|figure|calculation|formula)|flop (count|accounting)|the math)\b",
            "tune_the_kernel": r"\b(gemm kernel|the kernel|tiles?|tiling|cublas\w*|occupancy|algorithm|algo)\b",
            "nccl_is_the_bottleneck": r"\b(nccl|reduce-?scatters?|comms?|communication|collectives?)\b",
        },
        root_cause=(
            (r"memory[- ]bound", r"bandwidth[- ]bound", r"(below|under|left of|short of) (the )?ridge",
             r"(low|small) arithmetic intensity", r"(hbm|dram|memory) (bandwidth )?(is )?(saturated|the limit|bound)"),
            (r"\bskinny\b", r"\bm ?= ?\d+", r"(small|tiny|thin) (m|micro-?batch|gemms?)", r"micro-?batch (of |size )?(1|one)\b",
             r"\bshape\b", r"256 tokens"),
        ),
        fix=(r"(rais|increas|bigger|larger|grow)\w* .{0,25}(\bm\b|micro-?batch|batch)", r"micro-?batch .{0,12}(4|four)\b",
             r"\bm ?= ?1,?024", r"(re)?pack\w* .{0,20}(seq|sequence)", r"grad(ient)? accum\w* .{0,25}(128|fewer|down)"),
        traps={"profiler_or_mfu_math": (r"profiler (overhead|is (distorting|wrong|lying))", r"mfu (math|calculation|formula|accounting)",
                                        r"profiler.{0,20}distort\w*", r"profiler('s)? (own )?overhead",
                                        r"\bmfu (math|figure|number|calculation)s? (is |are )?(wrong|off|suspect|broken)\b",
                                        r"\bre-?(derive|compute|calculate) (the )?mfu\b",
                                        r"\bflops? (count|formula)\b.{0,20}\b(wrong|off)\b",
                                        r"\bprofiler\b.{0,30}\b(inflat\w*|mess\w*|distort\w*|skew\w*|overhead|off\b)",
                                        r"\b(without|with) the profiler (off|disabled)?\b", r"\bprofiler (off|disabled)\b",
                                        r"\bre-?(count|deriv\w*|comput\w*|do) (the )?(flops?|mfu)\b",
                                        r"\bmfu\b.{0,20}\b(wrong|off|underestimat\w*|mis\w+)\b",
                                        r"\b(flops?|flop count)\b.{0,20}\b(missing|wrong|undercount\w*)\b",
                                        r"\breal (mfu|utili[sz]ation)\b"),
               "tune_the_kernel": (r"\b(cublaslt|cutlass|triton)\b", r"\b(algo|algorithm|heuristic) (sweep|search|selection)\b", r"\bbetter (tile|algorithm|algo|kernel)s?\b",
                r"(autotun\w*|tune|tuning) .{0,20}(gemm|kernel|tiles?)", r"(custom|another|different) (kernel|cublas|algorithm)",
                                   r"kernel tuning", r"tun\w+ the (gemm|kernel)", r"\bautotun\w*", r"sweep cublas\w*",
                                   r"occupancy", r"\b(gemm|kernel) (is )?(slow|inefficient|badly tuned|mistuned)\b",
                                   r"\bcublaslt\b", r"\btriton kernel\b", r"\b(tiling|tile) (choice|config\w*|selection)\b"),
               "nccl_is_the_bottleneck": (r"nccl.{0,60}(bottleneck|slow|problem)", r"comm\w*.{0,20}(bottleneck|problem|culprit)",
                                          r"\b(comm\w*|nccl)\b.{0,30}\b(fight\w*|compet\w*|steal\w*|contend\w*)\b",
                                          r"\b(comm\w*|nccl|reduce-scatter\w*)\b.{0,40}\b(ceiling|critical path|gat\w+|limit\w*)\b",
                                          r"\bcut (the )?comm\w*", r"\bgated by\b", r"nccl_algo",
                                          r"\b(reduce|cut|shrink|trim) (the )?(comm\w*|nccl|reduce-?scatters?)\b",
                                          r"\b(nccl|reduce-?scatter\w*|comm\w*)\b.{0,40}\b(hammer\w*|starv\w*|slow\w*)\b",
                                          r"\b(comm\w*|nccl|reduce-?scatter\w*)\b.{0,20}\b(eat\w*|dominat\w*|kill\w*)\b",
                                          r"\b(reduce|cut|shrink) (the )?(zero-?\d )?(comm\w*|traffic)\b")},
        also_confirms=("gemm-microbench",),
    ),
    hints=(
        Hint("A clean timeline is a finding",
             "If the gaps and the overlap check out, say so: that is a finding. Then go inside the busy time: "
             "which kernel family takes the largest share, and what are its GEMM shapes (M, N, K)?"),
        Hint("Shape arithmetic",
             "From the dominant GEMM's M, N and K, work out its FLOPs, its minimum bytes and its arithmetic "
             "intensity, and place it against this GPU's ridge point."),
        Hint("Look inside the kernel",
             "A timeline ends at kernel boundaries: run Nsight Compute (ncu) on the top GEMM and read its "
             "memory and tensor-pipe throughput."),
    ),
)
