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

Version 3's canonical departs further, for memory: 8B with torch's AdamW (bf16 weights,
grads and both moments: 64 GB) leaves ~9 GB of H100's 90% budget for activations, and
3,960 tokens of a 32-layer, 4608-wide model need ~20 GB without recompute. So it trains
3,200 tokens per GPU with 16 of 32 layers checkpointed (76.2 GB, 89.6% of HBM) and their
forward, 54 ms, recomputed inside backward (289 ms); at 45% of peak (GEMMs ~72%, inside
cuBLAS's best) the step stays ~626 ms, the all-reduce 173 ms (28%), busbw 161 GB/s, the fix
1.31x to ~479 ms. What moves is MFU: 25% (33% after the fix), not the seed's 31% -> 41%,
which needs the 3,960 tokens that do not fit (hardware FLOPs, recompute counted, ~29%).

Versions: 1, first model. 2: the host's side as real traces show it
(app/hosttime.MEASURED): kernels on a busy stream ~1-3 µs apart with a tail instead of
exactly 1.2 µs, cudaLaunchKernel with its long tail, launch-to-kernel latencies that vary,
Python time between consecutive ops, and host rows (zero_grad, the DataLoader, the
collective's bookkeeping, the gap between steps) that vary step to step. The physics and
the pathology are version 1's. 3 (current), every instance one a real job could run:
- kernel gaps from hosttime.MEASURED_2 (the real 3-20 µs tail version 2 lacked);
- memory (app/feasibility.py): a draw checkpoints the fewest layers that fit 90% of HBM,
  and backward shows their recompute (each checkpointed layer's forward kernels, on the
  autograd thread, before its backward); a model too big even fully checkpointed shrinks;
- kernels within their family's best: on Hopper attention is FlashAttention-3 (its
  cutlass::device_kernel<flash::FlashAttnFwdSm90<...>> names and persistent grid), and the
  phase efficiency is capped so no GEMM instance passes 80% of peak nor attention FA3's 75%
  (version 2 ran FlashAttention-2 at ~60% of H100's peak, where FA2 reaches ~35%);
- the all-reduce's bus bandwidth is NCCL's ring at the channels it runs: nccl-tests' busbw
  (370 GB/s on NVLink 4, 82% of the 450 GB/s link, with 32 channels; A100: 230 with 24) x
  channels / full, the channels the NCCL kernel's grid shows (the job caps them with
  NCCL_MAX_NCHANNELS); the key and the `nccl` artifact say so;
- draws keep the all-reduce >= ~13.5% of the step (fewer tokens, then fewer channels), so the
  measured hole is >= 12% and every fix gains >= ~1.12x (version 2: 30 of 100 under 1.10x);
- fused AdamW as torch runs it: the step counts' _foreach_add_, then aten::_fused_adamw_ whose
  multi_tensor_apply launches a kernel per 320 blocks of 65,536 elements (382 for 8B, each
  with its own grid), its functor in the params' dtype (bf16), not 4 float-functor launches;
- the op tree torch.profiler records around each launch (aten::linear > aten::matmul >
  aten::mm, evaluate_function > MmBackward0 > two mm, Input Dims, sequence numbers and
  fwdbwd flows), with per-launch grids (app/trace/optree.py). FA3's ops are its package's
  (FlashAttnFunc > flash_attn_3::_flash_attn_forward > flash_attn_3::fwd; one backward node's
  flash_attn_3::bwd launches all its kernels); the recomputed forward ops are numbered from the
  autograd thread's own counter as forward ops, without flows (optree.Autograd.recompute);
- an override that does not fit even fully checkpointed is refused before any build work,
  naming the figure (Params.refusal; app/scenario.py apply_overrides).
Versions 1 and 2 are still built for what was made with them.

The fixed build (version 3, `fixed=True`; `tracedojo generate ddp --fixed`): the same
instance with DDP's reducer hooks firing: after each weight-gradient GEMM's op the autograd
thread launches the all-reduces of the buckets it completes (the key's ~600 at
bucket_cap_mb=25), each NCCL kernel waiting for its gradients and the bucket before; slowed
by contention so that HIDE_FRACTION of the communication hides under backward, as the key
expects. Canonical: 612 NCCL kernels per step, step 478.7 ms against the key's 478.9.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Literal

import numpy as np

from app import feasibility, hosttime, physics, training, workload
from app.scenario import (Built, Hint, InstanceError, Scenario, ScenarioParams, building, fixed, gpu_clock_report, make_key,
                          new_builder, obs, param)
from app.trace import intervals, optree
from app.trace.builder import KernelInfo
from app.trace.emit import cpu_span, launch_phase, memcpy
from app.workload import KernelSpec
from app.scoring.rubric import Rubric

HIDE_FRACTION = 0.85  # share of bucketed comm that hides under backward (SM/HBM contention keeps the rest)

# -- version 3: what makes an instance feasible (docstring) ---------------------------
# The roofline weights (workload.EFFICIENCY) run GEMMs at 70% of peak and attention at 55%; a
# phase's time scales them all by one factor. At most 1.05x keeps the fastest GEMM instance
# (per-kernel jitter 2%) under feasibility's 80% cap on sm90 and attention under FA3's 75%.
MAX_ROOFLINE_SCALE = 1.05
KERNEL_JITTER = 0.02  # per-kernel spread of durations around the roofline share (version 3),
KERNEL_JITTER_CLIP = 0.05  # bounded: a normal's 5-sigma tail would be a GEMM past cuBLAS's best


def _jitter(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.normal(1.0, KERNEL_JITTER, n).clip(1 - KERNEL_JITTER_CLIP, 1 + KERNEL_JITTER_CLIP)

# Channels NCCL's ring uses on a full NVLink domain: nccl-tests' large-message busbw (physics.GPUS)
# is reached with all of them; a job that caps them (NCCL_MAX_NCHANNELS, often set to leave SMs
# to compute under overlap) gets that busbw x channels / full. The kernel's grid is its channels.
FULL_CHANNELS = {"H100": 32, "H200": 32, "A100": 24}
DRAW_MIN_HOLE = 0.135  # draws keep the all-reduce >= 13.5% of the step (measured hole >= 12%)
RESERVED_PER_BUCKET_NS = 200_000  # the fixed build: the autograd thread's time per bucket hook + launch

# FlashAttention-3 (Dao-AILab/flash-attention hopper/, flash_fwd_launch_template.h and
# flash_bwd_launch_template.h) as torch.profiler names its kernels on H100 for head dim 128,
# causal, bf16, GQA: forward tiles 128x128 (MmaPV_is_RS, IntraWGOverlap) with the dynamic
# persistent scheduler; backward tiles 64x128 with the GQA epilogue, preprocess and dQ/dK/dV
# post-processing.
_T = "cute::tuple<{}>".format
_C = lambda *xs: _T(", ".join(f"cute::C<{x}>" for x in xs))  # noqa: E731
_FA3_FWD_T = ("flash::enable_sm90<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, " + _C(1, 1, 1) + ", "
              + _C(128, 128, 128) + ", 128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false, false, false, "
              "false, false, false, true, true, false, false, false>, flash::CollectiveEpilogueFwd<" + _C(128, 128, 128)
              + ", " + _C(1, 1, 1) + ", cutlass::bfloat16_t, cutlass::arch::Sm90, 256, false, false, false, false>, "
              "flash::DynamicPersistentTileScheduler<256, 128, false, false, true> > >")
_FA3_BWD_T = ("flash::enable_sm90<flash::FlashAttnBwdSm90<flash::CollectiveMainloopBwdSm90<2, 2, 2, " + _C(1, 1, 1)
              + ", " + _C(64, 128, 128) + ", cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false, false, false, "
              "false, true, false, false, 2, 1, 2, 1, false>, flash::CollectiveEpilogueBwdGQA<" + _C(64, 128, 128)
              + ", float, cutlass::arch::Sm90, 256, false, false>, flash::SingleTileBwdLPTScheduler<false, 128, false> > >")
_MMA = ("cute::TiledMMA<cute::MMA_Atom<cute::SM90_64x128x16_F32BF16BF16_SS<(cute::GMMA::Major)0, (cute::GMMA::Major)0, "
        "(cute::GMMA::ScaleIn)1, (cute::GMMA::ScaleIn)1> >, cute::Layout<" + _C(2, 1, 1) + ", " + _C(1, 0, 0)
        + " >, cute::tuple<cute::Underscore, cute::Underscore, cute::Underscore> >")
_FA3_PRE_T = "flash::FlashAttnBwdPreprocess<" + _C(64, 128) + ", cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false>"
_FA3_POST_T = ("flash::FlashAttnBwdPostprocessConvertdQ<{}, cutlass::bfloat16_t, float, cutlass::arch::Sm90, 256, "
               + _MMA + ", false>").format
FA3 = {k: f"void cutlass::device_kernel<{t}>({t}::Params)" for k, t in {
    "fwd": _FA3_FWD_T, "bwd": _FA3_BWD_T, "bwd_dot": _FA3_PRE_T, "bwd_convert": _FA3_POST_T(_C(64, 128)),
    "bwd_convert_dkv": _FA3_POST_T(_C(128, 128))}.items()}


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
        """The seed's case 1: 8xH100, 8B dense model, 620 ms steps, MFU 31%, 160 GB/s busbw.
        Version 3: 3,200 tokens per GPU at 45% of peak and 14 of 32 NCCL channels, so the step
        stays ~620 ms with half the layers recomputed (docstring)."""
        if building() >= 3:
            return cls(tokens_per_gpu=3200, compute_eff=0.4485, allreduce_busbw_frac=0.4375)
        return cls()

    def refusal(self) -> str | None:
        """Version 3: an override whose step does not fit 90% of HBM even with every layer
        checkpointed (the least a step can keep), named with its figure before any build work."""
        if building() < 3:
            return None
        n = self.model_params_b * 1e9
        shape = training.model_shape(n)
        mem = _memory(n, self.world_size, self.tokens_per_gpu, shape, shape["layers"])
        return mem.needs(physics.GPUS[self.gpu], f"{self.model_params_b:g}B under DDP with AdamW on "
                         f"{self.world_size}x {self.gpu} at {self.tokens_per_gpu:,} tokens per GPU (every "
                         f"one of its {shape['layers']} layers checkpointed)")

    @classmethod
    def adjust_draw(cls, values: dict) -> dict:
        """Version 3: a draw that would not run is pulled back into what runs (docstring): the
        model shrinks until its weights, grads and AdamW state fit beside checkpointed
        activations; the phase efficiency drops until no kernel beats its family's cap; tokens,
        then NCCL channels, drop until the all-reduce is at least ~13.5% of the step."""
        if building() < 3:
            return values
        for _ in range(400):
            pl = _plan(values)
            if pl["checkpoint_layers"] is None:
                values["model_params_b"] = round(values["model_params_b"] - 0.5, 4)
                continue
            eff_max = math.floor(values["compute_eff"] * MAX_ROOFLINE_SCALE / pl["roofline_scale"] * 1e4) / 1e4
            if values["compute_eff"] > eff_max:
                values["compute_eff"] = eff_max
                continue
            if pl["hole_share"] < DRAW_MIN_HOLE:
                if values["tokens_per_gpu"] > 1024:
                    values["tokens_per_gpu"] = max(1024, int(values["tokens_per_gpu"] * 0.9) // 64 * 64)
                    continue
                if values["allreduce_busbw_frac"] > 0.15:
                    values["allreduce_busbw_frac"] = round(values["allreduce_busbw_frac"] - 0.02, 4)
                    continue
            break
        return values


@functools.lru_cache(maxsize=64)
def _step_specs(gpu_key: str, n_params: float, tokens: int) -> tuple:
    """(shape, forward specs, backward specs, their roofline weights in µs) of one step; on
    Hopper the attention kernels are FlashAttention-3's (version 3)."""
    gpu = physics.GPUS[gpu_key]
    shape, fwd, bwd = training.llm_step_specs(gpu.arch, n_params, tokens)
    if gpu.arch == "sm90":
        fwd, bwd = _fa3(fwd, gpu, tokens, shape), _fa3(bwd, gpu, tokens, shape)
    return shape, fwd, bwd, workload.roofline_weights_us(fwd, gpu), workload.roofline_weights_us(bwd, gpu)


def _fa3(specs: list[KernelSpec], gpu: physics.Gpu, tokens: int, shape: dict) -> list[KernelSpec]:
    """FlashAttention-2's kernels replaced by FlashAttention-3's, with FA3's launch shapes: the
    forward persistent (one CTA per SM, 3 warpgroups), the backward one CTA per 128 keys per
    head; GQA adds the dK and dV post-processing launches."""
    heads = max(1, shape["hidden"] // 128)
    seq = min(tokens, 8192)
    batch = max(1, tokens // seq)
    fwd_info = KernelInfo(grid=(gpu.num_sms, 1, 1), block=(384, 1, 1), registers_per_thread=168, shared_memory=197_632)
    bwd_info = KernelInfo(grid=(-(-seq // 128), heads, batch), block=(384, 1, 1), registers_per_thread=240,
                          shared_memory=221_184)
    small = KernelInfo(grid=(-(-seq // 64), heads, batch), block=(256, 1, 1), registers_per_thread=32, shared_memory=0)
    kv = KernelInfo(grid=(-(-seq // 128), max(1, shape["kv_hidden"] // 128), batch), block=(256, 1, 1),
                    registers_per_thread=32, shared_memory=0)
    by_name = {v: k for k, v in workload.FLASH.items()}
    out = []
    for s in specs:
        role = by_name.get(s.kernel)
        if role is None:
            out.append(s)
            continue
        info = {"fwd": fwd_info, "bwd": bwd_info}.get(role, small)
        out.append(dataclasses.replace(s, kernel=FA3[role], info=info))
        if role == "bwd_convert" and shape["kv_hidden"] < shape["hidden"]:  # GQA: dK and dV summed over groups
            for _ in range(2):
                out.append(KernelSpec(s.op, FA3["bwd_convert_dkv"], float(tokens * shape["kv_hidden"]),
                                      6.0 * tokens * shape["kv_hidden"], kv, "ew"))
    return out


def _memory(n_params: float, world: int, tokens: int, shape: dict, checkpointed: int) -> feasibility.TrainingMemory:
    """feasibility.training_memory with `checkpointed` of the layers keeping only their input
    (and one layer's full activations live while it is recomputed)."""
    base = feasibility.training_memory(n_params, world=world, tokens_per_gpu=tokens, hidden=shape["hidden"],
                                       layers=shape["layers"], sharding="ddp")
    per_tok = shape["hidden"] * tokens
    full = feasibility.ACT_BYTES_PER_TOKEN_HIDDEN * per_tok
    acts = (shape["layers"] - checkpointed) * full + checkpointed * feasibility.CHECKPOINT_BYTES_PER_TOKEN_HIDDEN * per_tok
    if checkpointed:
        acts += full
    return dataclasses.replace(base, activations=acts)


def _plan(v: dict) -> dict:
    """Version 3's physics of one step from params (a dict): what build emits and adjust_draw
    gates on."""
    gpu = physics.GPUS[v["gpu"]]
    n = v["model_params_b"] * 1e9
    tokens = v["tokens_per_gpu"]
    shape, fwd, bwd, w_f, w_b = _step_specs(v["gpu"], n, tokens)
    fwd_ms = 2 * n * tokens / (gpu.bf16_tflops * 1e12 * v["compute_eff"]) * 1e3
    layers = shape["layers"]
    ckpt = next((c for c in range(layers + 1)
                 if _memory(n, v["world_size"], tokens, shape, c).fits(gpu)), None)
    per_f = (len(fwd) - 3) // layers
    layer_ms = fwd_ms * float(w_f[1:1 + per_f].sum() / w_f.sum())  # one layer's forward
    recompute_ms = (ckpt or 0) * layer_ms
    full = FULL_CHANNELS[v["gpu"]]
    channels = int(min(full, max(2, round(v["allreduce_busbw_frac"] * full))))
    busbw = gpu.busbw_gbps * channels / full
    grad_bytes = n * physics.BF16_BYTES
    ar_ms = physics.allreduce_ms(grad_bytes, v["world_size"], busbw)
    opt_ms = n * 14.0 / (gpu.mem_tbps * 1e12 * 0.85) * 1e3
    step_ms = v["host_prologue_ms"] + 3 * fwd_ms + recompute_ms + ar_ms + opt_ms + 1.0
    scale = max(w_f.sum() / 1e3 / fwd_ms, w_b.sum() / 1e3 / (2 * fwd_ms))  # over the roofline weights
    return {"gpu": gpu, "n": n, "shape": shape, "fwd": fwd, "bwd": bwd, "w_f": w_f, "w_b": w_b, "fwd_ms": fwd_ms,
            "checkpoint_layers": ckpt, "layer_ms": layer_ms, "recompute_ms": recompute_ms, "channels": channels,
            "full_channels": full, "busbw": busbw, "ar_ms": ar_ms, "opt_ms": opt_ms, "step_ms": step_ms,
            "hole_share": ar_ms / step_ms, "roofline_scale": scale,
            "memory": _memory(n, v["world_size"], tokens, shape, ckpt) if ckpt is not None else None}


def _param_numels(shape: dict, vocab: int = training.LLAMA3_VOCAB) -> list[int]:
    """The model's parameters in registration order (Llama: embedding, per layer the two norms,
    q, k, v, o, gate, up, down; final norm, LM head)."""
    h, kv, ffn = shape["hidden"], shape["kv_hidden"], shape["ffn"]
    layer = [h, h * h, kv * h, kv * h, h * h, h, ffn * h, ffn * h, h * ffn]
    return [vocab * h] + layer * shape["layers"] + [h, vocab * h]


def _fused_adamw(b, topo: training.Topology, rng: np.random.Generator, timing: hosttime.HostTiming, *,
                 shape: dict, n_params: float, gpu: physics.Gpu, cpu_t0: int, gpu_ready: int,
                 pending_kernel_start: np.ndarray):
    """DDP's optimizer: fused AdamW over every parameter tensor of the replica, bf16 params and
    state (14 B per parameter; training.fused_adamw): ~380 launches for 8B."""
    numels = _param_numels(shape)
    scale = n_params / sum(numels)  # the tensors of a model of exactly n_params (model_shape's rounding aside)
    numels = tuple(max(1, int(x * scale)) for x in numels)
    return training.fused_adamw(b, topo, rng, timing, numels=numels, n_params=n_params, bytes_per_param=14.0,
                                kernel=training.ADAMW_BF16, gpu=gpu, cpu_t0=cpu_t0, gpu_ready=gpu_ready,
                                pending_kernel_start=pending_kernel_start)


def _backward_with_recompute(pl: dict) -> tuple[list[KernelSpec], np.ndarray]:
    """Backward's kernels in the order they run, with each checkpointed layer's forward
    recomputed just before its backward (torch.utils.checkpoint; the first layers are the
    checkpointed ones, so they come last), and each kernel's expected ms: backward proper
    2x the forward's time, a recomputed kernel its forward time."""
    fwd, bwd, w_f, w_b = pl["fwd"], pl["bwd"], pl["w_f"], pl["w_b"]
    layers, ckpt = pl["shape"]["layers"], pl["checkpoint_layers"]
    per_f, per_b = (len(fwd) - 3) // layers, (len(bwd) - 4) // layers
    k_f = pl["fwd_ms"] / w_f.sum()
    k_b = 2 * pl["fwd_ms"] / w_b.sum()
    layer_f, wl_f = fwd[1:1 + per_f], w_f[1:1 + per_f] * k_f
    specs, ms = list(bwd[:3]), [w_b[:3] * k_b]
    for j in range(layers):
        layer = layers - 1 - j
        if layer < ckpt:
            specs += layer_f
            ms.append(wl_f)
        lo = 3 + j * per_b
        specs += bwd[lo:lo + per_b]
        ms.append(w_b[lo:lo + per_b] * k_b)
    specs.append(bwd[-1])
    ms.append(w_b[-1:] * k_b)
    return specs, np.concatenate(ms)


def _bucketed_backward(b, topo: training.Topology, rng: np.random.Generator, timing: hosttime.HostTiming, p: Params,
                       bwd: list[KernelSpec], b_ns: np.ndarray, f, buckets: list[int], *, ar_ms: float,
                       bwd_ms: float, channels: int, tree: dict):
    """The fix (version 3's fixed build): backward on the autograd thread with DDP's reducer
    hooks firing as gradients are produced. Each weight-gradient GEMM's op is followed by the
    all-reduces of the buckets its gradients complete (c10d on the autograd thread, the NCCL
    kernel waiting on the gradient's event and on the bucket before it). Contention with the
    backward kernels for SMs and HBM slows the overlapped buckets so that HIDE_FRACTION of the
    communication hides, as the key expects. Returns (backward, [(kernel start, end)], cpu end)."""
    n = len(bwd)
    dw = [i for i, s in enumerate(bwd) if s.role == "gemm" and "_nt" in s.kernel] + [n - 1]
    sizes = np.asarray(buckets, np.float64)
    cum = np.cumsum(sizes) / sizes.sum()
    at = [dw[min(len(dw) - 1, max(0, math.ceil(c * len(dw)) - 1))] for c in cum]  # the op completing bucket j
    per_op = np.zeros(n, np.int64)
    np.add.at(per_op, at, 1)
    free_after = timing.between_ops_ns(rng, n) + per_op * RESERVED_PER_BUCKET_NS
    ops, kernels = workload.intern(b, bwd)
    oh, ln = training.op_overheads_ns(rng, n, p.op_overhead_us, timing)
    bw = launch_phase(b, host_pid=topo.host_pid, cpu_tid=topo.autograd_tid, gpu_pid=topo.gpu,
                      stream=topo.compute_stream, op_names=ops, kernel_names=kernels, kernel_dur_ns=b_ns,
                      cpu_t0=f.cpu_end + timing.host_ns(rng, 20_000), gpu_t0=f.gpu_end, op_overhead_ns=oh,
                      launch_ns=ln, pending_kernel_start=f.kernel_start, gpu_gap_ns=timing.kernel_gaps_ns(rng, n),
                      launch_latency_ns=timing.launch_latency_ns(rng, n), free_after_ns=free_after,
                      tree=[optree.tree_for(x, tree["tree_widths"]) for x in bwd], autograd=tree["autograd"],
                      backward=True, kernel_cfg=workload.launch_configs(b, bwd))
    exposed_ns = (ar_ms - HIDE_FRACTION * min(ar_ms, bwd_ms)) * 1e6
    first_ready = int(bw.kernel_end[at[0]])
    span_ns = bw.gpu_end + exposed_ns - first_ready - len(buckets) * 4_500  # less each kernel's start latency
    durs = np.maximum(sizes / sizes.sum() * span_ns, 20_000).astype(np.int64)
    hooks = dataclasses.replace(topo, main_tid=topo.autograd_tid)
    windows, prev_end, cpu, j = [], 0, 0, 0
    for i in np.flatnonzero(per_op):
        cpu = int(bw.op_end[i]) + 20_000 + timing.host_ns(rng, 4_000)  # after the op tree's ancestors close
        for _ in range(int(per_op[i])):
            cpu, k0, k1 = training.allreduce(b, hooks, cpu_t0=cpu, gpu_ready=max(int(bw.kernel_end[i]), prev_end),
                                             dur_ns=int(durs[j]), nelems=int(sizes[j]) // physics.BF16_BYTES,
                                             world=p.world_size, rng=rng, timing=timing,
                                             channels=channels)
            cpu += timing.host_ns(rng, 2_000)
            windows.append((k0, k1))
            prev_end = k1
            j += 1
    return bw, windows, max(bw.cpu_end, cpu)


def build(p: Params, rng: np.random.Generator, seed) -> Built:
    v3 = building() >= 3
    gpu = physics.GPUS[p.gpu]
    n_params = p.model_params_b * 1e9
    peak = gpu.bf16_tflops * 1e12
    grad_bytes = n_params * physics.BF16_BYTES
    if v3:
        pl = _plan(p.model_dump())
        if pl["checkpoint_layers"] is None:
            raise InstanceError(f"{p.model_params_b:.3g}B with AdamW does not fit {gpu.key}'s memory with every "
                                f"layer checkpointed: {_memory(n_params, p.world_size, p.tokens_per_gpu, pl['shape'], pl['shape']['layers']).describe(gpu)}")
        shape, fwd = pl["shape"], pl["fwd"]
        fwd_ms, busbw, ar_ms = pl["fwd_ms"], pl["busbw"], pl["ar_ms"]
        bwd, exp_b = _backward_with_recompute(pl)
        bwd_ms = float(exp_b.sum())
        w_f = pl["w_f"]
    else:
        fwd_ms = 2 * n_params * p.tokens_per_gpu / (peak * p.compute_eff) * 1e3
        bwd_ms = 2 * fwd_ms  # backward computes two GEMMs (data and weight grads) per forward GEMM
        busbw = gpu.busbw_gbps * p.allreduce_busbw_frac
        ar_ms = physics.allreduce_ms(grad_bytes, p.world_size, busbw)
        shape, fwd, bwd = training.llm_step_specs(gpu.arch, p.model_params_b * 1e9, p.tokens_per_gpu)
        w_f = workload.roofline_weights_us(fwd, gpu)
        w_b = workload.roofline_weights_us(bwd, gpu)

    timing = hosttime.V1 if building() == 1 else hosttime.MEASURED if building() == 2 else hosttime.MEASURED_2
    fx = v3 and fixed()
    h = lambda ns: timing.host_ns(rng, ns)  # noqa: E731 (a host row of nominal length ns)
    b, pid, t = new_builder(rng, gpu, rank=0, world=p.world_size, visible_gpus=p.world_size)
    topo = training.Topology(pid, pid, pid + 37, 0, 7, nccl_stream=int(rng.choice([40, 52, 84])))
    topo.name_rows(b)
    tree = {}
    if v3:  # the op tree around each launch, numbered, with sequence numbers forward to backward
        widths = (shape["hidden"], shape["hidden"] + 2 * shape["kv_hidden"], shape["ffn"], 2 * shape["ffn"],
                  training.LLAMA3_VOCAB)
        tree = {"autograd": optree.Autograd(b, int(rng.integers(1_000, 60_000))), "tree_widths": widths,
                "launch_configs": True}
        b.number_ops(first_ev_idx=int(rng.integers(2_000, 40_000)))
    first_step = int(rng.integers(3, 40))
    if v3:  # the autograd thread's counter has numbered every earlier step's recomputed ops (optree.Autograd.recompute)
        tree["autograd"].recompute_next = first_step * sum(
            1 for x in bwd if not x.op.startswith(optree.EV) and optree.numbered(optree.tree_for(x, widths)))
    steps = []  # per step: cpu start, cpu end, AR window, compute-stream intervals
    gpu_free = t
    sum_f = np.zeros(len(fwd), np.int64)
    sum_b = np.zeros(len(bwd), np.int64)
    if fx:
        buckets = physics.ddp_bucket_bytes(grad_bytes)
        nccl_total = 0
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
        if v3:
            f_ns = workload.scaled_durations_ns(w_f * _jitter(rng, len(w_f)), fwd_ms * rng.normal(1, 0.004), rng,
                                                jitter=0.0)
            b_ns = workload.scaled_durations_ns(exp_b * _jitter(rng, len(exp_b)), bwd_ms * rng.normal(1, 0.004), rng,
                                                jitter=0.0)
        else:
            f_ns = workload.scaled_durations_ns(w_f, fwd_ms * rng.normal(1, 0.004), rng)
            b_ns = workload.scaled_durations_ns(w_b, bwd_ms * rng.normal(1, 0.004), rng)
        sum_f += f_ns
        sum_b += b_ns
        if fx:  # backward with DDP's bucket hooks firing on the autograd thread (docstring)
            f, _ = training.forward_backward(b, topo, rng, fwd=fwd, fwd_ns=f_ns, bwd=[], bwd_ns=b_ns[:0],
                                             cpu_t0=launch_t0, gpu_t0=h2d_start + h2d_ns,
                                             op_mean_us=p.op_overhead_us, timing=timing, **tree)
            bw, ar_windows, cpu_after = _bucketed_backward(b, topo, rng, timing, p, bwd, b_ns, f, buckets,
                                                           ar_ms=ar_ms, bwd_ms=bwd_ms, channels=pl["channels"],
                                                           tree=tree)
            nccl_total += len(ar_windows)
            ar0, ar1 = ar_windows[0][0], ar_windows[-1][1]
            cpu_ar = cpu_after
        else:
            f, bw = training.forward_backward(b, topo, rng, fwd=fwd, fwd_ns=f_ns, bwd=bwd, bwd_ns=b_ns,
                                              cpu_t0=launch_t0, gpu_t0=h2d_start + h2d_ns,
                                              op_mean_us=p.op_overhead_us, timing=timing, **tree)
            # The flat all-reduce: issued from the main thread once backward has been launched
            # (DDP's fallback path), and on the GPU it waits for the last gradient.
            ar_ns = int(ar_ms * rng.normal(1, 0.006) * 1e6)
            cpu_ar, ar0, ar1 = training.allreduce(b, topo, cpu_t0=bw.cpu_end + h(30_000), gpu_ready=bw.gpu_end,
                                                  dur_ns=ar_ns, nelems=int(n_params), world=p.world_size, rng=rng,
                                                  timing=timing, **({"channels": pl["channels"]} if v3 else {}))
        if v3:
            opt = _fused_adamw(b, topo, rng, timing, shape=shape, n_params=n_params, gpu=gpu,
                               cpu_t0=cpu_ar + h(20_000), gpu_ready=ar1,
                               pending_kernel_start=np.concatenate([f.kernel_start, bw.kernel_start]))
        else:
            opt = training.optimizer(b, topo, rng, params=n_params, cpu_t0=cpu_ar + h(20_000), gpu_ready=ar1,
                                     gpu=gpu, pending_kernel_start=np.concatenate([f.kernel_start, bw.kernel_start]),
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
    if fx:  # what the trace after the fix measures; the instance's key is the unfixed build's
        exposed = float(np.mean([(s["ar"][1] - s["bwd"][1]) / 1e6 for s in steps]))
        fixed_key = {"fixed": True, "observations": [
            obs("step_ms", "step after the fix", step_ms, "ms"),
            obs("nccl_kernels_per_step", "NCCL all-reduces per step (one per bucket)", nccl_total / p.steps,
                "kernels", 0),
            obs("exposed_comm_ms", "communication still running after backward", exposed, "ms"),
            obs("bwd_ms", "backward", float(np.mean([(s["bwd"][1] - s["bwd"][0]) / 1e6 for s in steps])), "ms")]}
        return Built(key=fixed_key, artifacts={"gpus": gpu_clock_report(gpu, p.world_size, rng)},
                     trace_for_rank=lambda rank: trace, ranks=1)
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
    if v3:  # what makes the instance run: memory, recompute, the ring's channels (docstring)
        mem = pl["memory"]
        observations += [
            obs("checkpointed_layers", f"layers of {shape['layers']} with activation checkpointing",
                pl["checkpoint_layers"], "layers", 0),
            obs("recompute_ms", "their forward recomputed inside backward", pl["recompute_ms"], "ms"),
            obs("memory_gb", "planned memory per GPU", mem.total / 1e9, "GB", 1),
            obs("hbm_pct", f"of {gpu.key}'s HBM", mem.share_of(gpu) * 100, "%", 1),
            obs("nccl_channels", "NCCL channels (the all-reduce kernel's grid)", pl["channels"], "channels", 0),
            obs("full_channels", f"channels the ring uses to reach {gpu.busbw_gbps:.0f} GB/s", pl["full_channels"],
                "channels", 0),
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
                          f"below the ~{gpu.busbw_gbps:.0f} GB/s the link reaches but not pathological"
                          + (f" ({pl['channels']} of the {pl['full_channels']} channels the ring reaches that with: the "
                             f"NCCL kernel's grid is {pl['channels']} CTAs, a capped NCCL_MAX_NCHANNELS)" if v3 else "")
                          + f". A perfect "
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
    if v3:
        mem = pl["memory"]
        artifacts["memory"] = {"weights_gb": mem.weights / 1e9, "grads_gb": mem.grads / 1e9,
                               "optimizer_gb": mem.optimizer / 1e9, "activations_gb": mem.activations / 1e9,
                               "runtime_gb": mem.runtime / 1e9, "total_gb": mem.total / 1e9,
                               "hbm_gb": gpu.total_mem_bytes / 1e9, "budget_share": feasibility.HBM_BUDGET,
                               "checkpointed_layers": pl["checkpoint_layers"], "layers": shape["layers"],
                               "describe": mem.describe(gpu)}
        artifacts["nccl"] = {"algorithm": "Ring", "channels": pl["channels"], "full_channels": pl["full_channels"],
                             "ring_busbw_gbps": gpu.busbw_gbps, "link_gbps_per_direction": gpu.link_peak_gbps,
                             "busbw_gbps": round(pl["busbw"], 1),
                             "why": (f"nccl-tests' ring all-reduce reaches ~{gpu.busbw_gbps:.0f} GB/s busbw over "
                                     f"{gpu.interconnect} ({gpu.busbw_gbps / gpu.link_peak_gbps:.0%} of the "
                                     f"{gpu.link_peak_gbps:.0f} GB/s link) with {pl['full_channels']} channels; this job "
                                     f"runs {pl['channels']} (NCCL_MAX_NCHANNELS), so {pl['channels']}/"
                                     f"{pl['full_channels']} of it: {pl['busbw']:.0f} GB/s")}
    return Built(key=key, artifacts=artifacts, trace_for_rank=lambda rank: trace, ranks=1)


scenario = Scenario(
    id="ddp", version=3, older=(1, 2), fixable=(3,), family="communication", difficulty="easy",
    title="Unoverlapped DDP all-reduce",
    signature="One long NCCL kernel after backward; the compute stream idles for exactly its duration",
    Params=Params, build=build,
    observations=("compute_idle_ms", "allreduce_ms", "nccl_kernels_per_step", "busbw_gbps", "mfu_pct",
                  "expected_mfu_pct"),
    # version 3 leaves out the seed's MFU (31% -> 41%): 3,960 tokens of an 8B model with AdamW do not
    # fit 80 GB without recompute (docstring); the canonical keeps the step, the hole and the busbw
    seed_headlines={"step_ms": 620, "gap_ms": 175, "idle_pct": 28, "allreduce_ms": 175, "busbw_gbps": 160,
                    "speedup": 1.33, "nccl_kernels_per_step": 1},
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
