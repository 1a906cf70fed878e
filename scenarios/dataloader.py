"""Case 2: input starvation (the DataLoader cannot feed the GPU).

The pathology: too few DataLoader workers decode and augment JPEGs on the CPU more
slowly than the GPU consumes batches. The GPU finishes a step and then waits, at the
start of the next one, for Python to hand it a batch. nvidia-smi's utilization graph
still touches 100%: its reading is the share of each short sample period in which some
kernel ran, so every period that falls in the busy stretch reads ~100% (version 1 modelled
it as "any kernel in a 1 s window" and read 100% flat).

What a strong read notices: a clean step period well above the reference run; the
compute stream idle for the first ~37% of every step, while the main thread sits in
`enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__`, and the worker processes
(outside the profiler's process: nsys's per-process view) are pegged decoding and
augmenting; the busy part of the step is healthy (bucketed all-reduces hidden under
backward, normal kernel mix), so there is
nothing to win inside it; the supply/demand arithmetic (workers x per-worker rate vs
batch / busy time) explains the gap exactly: gap = busy x (demand / supply - 1). Traps
rejected out loud: "nvidia-smi says 100%, so the kernels are slow" and "it's the HtoD
copy" (12 ms, on its own copy stream, beside forward, vs a 190 ms gap). The decisive
experiment is a synthetic in-memory dataset: the step collapses to busy + a few ms.

Physics: W workers each produce whole batches (torch.utils.data gives each worker its
own batch), decoding + augmenting + collating at r images/s, so one worker needs B / r
per batch and the loader delivers a batch every B / (W r); each worker keeps
prefetch_factor=2 batches in flight. The training loop copies batch i+1 on a side stream
while batch i computes (a hand-rolled CUDA-stream prefetcher, timm PrefetchLoader style),
so at the start of step i the main thread blocks in DataLoader.__next__ until batch i+1
is ready, issues its copy on stream 13, and launches forward. Step = max(GPU busy,
B / (W r)) + small host overheads; the exposed gap = step - busy. Forward = 2 x params x
tokens / (peak x efficiency) with tokens = batch x (patches + 1), spread over the ViT's
kernels (patch-embedding conv, 24 x LayerNorm/QKV/FlashAttention/proj/GELU-MLP, head,
cross-entropy) by roofline weight; backward twice that; the optimizer is torch's default
foreach AdamW over fp32 master weights (AMP): eight multi_tensor_apply passes moving
84 B per parameter at 85% of HBM bandwidth. DDP buckets the fp32 gradients at
bucket_cap_mb=25 (first bucket 1 MiB) in reverse parameter order; each bucket's ring
all-reduce fires from the autograd thread's AccumulateGrad hook as soon as its last
gradient exists and runs on the NCCL stream under the rest of backward; only the last
(patch-embedding) bucket is exposed. The HtoD copy moves the float32 batch (ToTensor +
Normalize run in the workers) from pageable memory at the drawn PCIe rate.

Canonical: the seed's 4xA100-80GB, ViT-L/16 (~304M params), batch 256 images/GPU,
2 workers. Where the seed does not close, the model's number stands:
- Supply: 2 workers at the seed's ~190 img/s would supply 380 img/s, a batch every
  674 ms, not a 510 ms step. At 510 ms each worker supplies 256 / 0.51 / 2 ~ 251 img/s,
  so the canonical rate is 251 img/s, supply ~502 img/s; demand = 256 / 0.32 s = 800
  img/s; gap = 320 x (800 / 502 - 1) ~ 190 ms. The seed's "the loader needs ~670 ms to
  produce a batch ... ~190 ms exposed" does not close either (670 - 320 = 350): with 2
  workers each spends ~1,020 ms on its own batch and the pair delivers one every 510 ms.
- Resolution: a 105 ms forward of 256 images at 224 px (197 tokens, 2 x 304M x 50,432
  = 30.7 TFLOP) would need 94% of the A100's 312 TFLOP/s peak. The canonical instance
  pre-trains at 160 px (DeiT-III-style low-resolution pre-training: 100 patches + CLS =
  101 tokens), where forward is 2 x 304M x 25,856 = 15.7 TFLOP at ~50% of peak.
  Forward/backward come out ~102/204 ms (the seed's 105/200: backward is twice
  forward), optimizer ~15 ms, busy ~320 ms.
- The copy: 256 x 3 x 160 x 160 float32 = 78.6 MB in ~12 ms is ~6.5 GB/s, a pageable
  PCIe Gen4 copy. Its cudaMemcpyAsync is drawn short (~0.2 ms) so forward launches right
  behind it, as the seed's picture has it; a real pageable copy this size holds the
  calling thread for most of the copy (one more reason pin_memory=True is in the fix).
- After the fix (16 workers: ~4,000 img/s, ~5x demand; pinned memory; prefetch_factor=4)
  the step is busy + the host overhead that is not loader wait, ~325 ms, 1.57x; the
  synthetic-data run reads ~1 ms less (no __next__ at all). The reference run is taken
  to be that fed step, so "35% below reference" reads ~36%.
- nvidia-smi's 100%: version 1 modelled it as the seed describes it (a sample reads busy
  when any kernel was resident in its ~1 s window), so every GPU read 100% flat. NVML
  defines utilization.gpu as the share of each sample period (1/6 s to 1 s by product)
  in which one or more kernels ran: version 2 samples every 1/6 s, so a period inside the
  ~320 ms busy stretch reads ~100% and one inside the ~190 ms gap ~0%, and the mean is the
  busy share, ~63%. The brief's "nvidia-smi shows 100%" becomes "the utilization graph
  keeps touching 100% (mean ~63%)": the seed's story (a graph that reads busy while the
  step starves) without a reading NVML cannot produce.

Seeds draw A100 or H100, ViT-B/16, ViT-L/16 or ViT-H/14, 160-224 px, batch 128-384,
2-6 workers at 150-320 img/s each, conditioned on supply / demand in [0.35, 0.75] so
the starvation stays the story (a gap of a quarter to two thirds of the step).

Versions: 1, first model. 2 (current), from issue 13's expert review and the fidelity page:
- the host's side as real traces show it (app/hosttime.MEASURED_2): kernel gaps with the
  real 3-20 µs tail, launch calls and launch latencies drawn, Python between ops, and
  every row the case draws itself (the loader hand-over, the event record/wait, the DDP
  hooks' calls, zero_grad, the gap between steps) varied step to step instead of
  constant;
- the op tree around each launch (app/trace/optree.py: aten::linear > aten::t, matmul >
  mm; backward's evaluate_function > node > mm), with record_shapes' Input Dims,
  sequence numbers carried from forward to backward with fwdbwd flows, and each kernel
  with the grid its own shape needs; DDP's AccumulateGrad hooks start ~20 µs after their
  gradient's node closes (the autograd engine's time), so the trees and hooks nest;
- attention as timm's ViT runs it, through F.scaled_dot_product_attention's flash backend
  (PyTorch's vendored FlashAttention-2, pytorch_flash:: kernels), not the flash_attn package:
  forward aten::scaled_dot_product_attention > aten::_scaled_dot_product_flash_attention >
  aten::_flash_attention_forward; backward one ScaledDotProductFlashAttentionBackward0 node per
  layer, whose one aten::_flash_attention_backward launches the three backward kernels, with
  that layer's forward sequence number (it had been three FlashAttnFuncBackward nodes a layer,
  two of them taking earlier layers' numbers); the kernels' template arguments are the ViT's:
  bidirectional (Is_causal false), FA2's tile for head dim 64 (ViT-B, ViT-L) or 96 (ViT-H's 80),
  Is_even_MN false for 1 + (px/patch)^2 tokens;
- torch.profiler records only the process it runs in: the pt_data_worker rows of
  version 1 (each worker's __getitem__ and PIL decode on a thread of the main process)
  are gone from the export; the workers are processes of their own, shown with their
  CPU use and NVTX ranges by the `nsys-processes` tool (Nsight Systems' per-process
  view), where the decisive "workers pegged" reading now lives;
- nvidia-smi on NVML's definition (above), with per-sample readings (nvidia-smi -q's
  "GPU Utilization Samples" and a -lms log); the trap is rejected on it: utilization
  says nothing about SM occupancy or efficiency, and its samples read high while the
  step starves;
- seeds draw only steps that fit the GPU's memory (app/feasibility.py, AMP's fp32
  weights, gradients and AdamW state plus the ViT's activations): version 1 drew ViT-H
  at 224 px and large batches needing up to ~150 GB of an 80 GB GPU.
Canonical: step ~511 ms, idle ~191 ms (37%), busy ~320 ms, after the fix ~324 ms (1.57x),
as in version 1 to within 0.5%; nvidia-smi 100% flat -> samples 0-100% on each GPU, their
mean 63%.
Version 1 is still built for what was made with it.

The fixed build (version 2, `fixed=True`; `tracedojo generate dataloader --fixed`): the same
instance with the key's fix applied: 16 workers, prefetch_factor=4, pin_memory=True (the
batch copy from pinned memory at PCIe's ~22 GB/s on A100 hosts, ~45 on H100, its
cudaMemcpyAsync only enqueueing; __next__ takes a batch the pin-memory thread already
pinned). The loader is ahead of the GPU, so the step is busy + the host work that is not
loader wait: canonical 323.6 ms against the key's 324.5.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from app import feasibility, hosttime, physics, training, workload
from app.hosttime import HostTiming
from app.scenario import (Built, Hint, Scenario, ScenarioParams, building, fixed, gpu_clock_report, make_key,
                          new_builder, obs, param)
from app.trace import intervals, optree
from app.trace.builder import Kind, KernelInfo, TraceBuilder
from app.trace.emit import cpu_span, launch_phase, memcpy, runtime_call
from app.trace.schedule import in_order
from app.scoring.rubric import Rubric

# timm's ViT variants: hidden, depth, MLP width, patch size.
MODELS = {
    "ViT-B/16": {"hidden": 768, "layers": 12, "ffn": 3072, "patch": 16, "heads": 12},
    "ViT-L/16": {"hidden": 1024, "layers": 24, "ffn": 4096, "patch": 16, "heads": 16},
    "ViT-H/14": {"hidden": 1280, "layers": 32, "ffn": 5120, "patch": 14, "heads": 16},
}
CLASSES = 1000  # ImageNet-1k head
FP32 = physics.FP32_BYTES
# torch.optim.AdamW(foreach=True) on fp32 params: bytes per parameter of each
# multi_tensor_apply pass (reads + writes of 4-byte tensors).
ADAMW_PASSES = [  # (aten op, TensorListMetadata depth, functor, op, bytes/param)
    ("aten::_foreach_mul_", "TensorListMetadata<1>", "BinaryOpScalarFunctor<float, 1, 1, 0>", "std::multiplies<float>, float", 8),
    ("aten::_foreach_lerp_", "TensorListMetadata<2>", "TernaryOpScalarFunctor<float, 2, 2, 0>", "at::native::LerpFunctor<float>, float", 12),
    ("aten::_foreach_mul_", "TensorListMetadata<1>", "BinaryOpScalarFunctor<float, 1, 1, 0>", "std::multiplies<float>, float", 8),
    ("aten::_foreach_addcmul_", "TensorListMetadata<3>", "PointwiseOpScalarFunctor<float, 3, 3, 0>", "std::multiplies<float>, float", 16),
    ("aten::_foreach_sqrt", "TensorListMetadata<2>", "UnaryOpFunctor<float, 2, 1, 1>", "at::native::Sqrt<float>", 8),
    ("aten::_foreach_div_", "TensorListScalarListMetadata<float, 1>", "BinaryOpScalarListFunctor<float, 1, 1, 0>", "std::divides<float>", 8),
    ("aten::_foreach_add_", "TensorListMetadata<1>", "BinaryOpScalarFunctor<float, 1, 1, 0>", "std::plus<float>, float", 8),
    ("aten::_foreach_addcdiv_", "TensorListScalarListMetadata<float, 3>", "PointwiseOpScalarListFunctor<float, 3, 3, 0>", "std::divides<float>", 16),
]
ADAMW_BYTES_PER_PARAM = sum(x[4] for x in ADAMW_PASSES)  # 84
HBM_EFF = 0.85  # multi_tensor_apply streams at ~85% of HBM bandwidth on long lists
MTA_CHUNK = 65_536  # elements per multi_tensor_apply chunk (one block)
MTA_MAX_BLOCKS = 320  # chunks per launch
MTA_MAX_TENSORS = {1: 110, 2: 64, 3: 48, 4: 36}  # tensors per launch by list depth
BUCKET_CAP_MIB, FIRST_BUCKET_MIB = 25.0, 1.0  # DDP defaults
FIX_WORKERS = 16
# version 2: the autograd engine's time between a gradient's node closing (its op tree's last
# close: at most ~10 µs after its launch op) and the AccumulateGrad hook, plus ~8 µs drawn
ENGINE_NS = 12_000
FIX_PREFETCH = 4  # prefetch_factor after the fix: batches in flight per worker
# pinned-memory HtoD over the host link, as bandwidthTest measures it: PCIe Gen4 x16 on A100
# SXM hosts ~22-24 GB/s, Gen5 x16 on H100 SXM ~45-55 GB/s
PINNED_H2D_GBPS = {"A100": 22.0, "H100": 45.0}
# __next__ on a batch the pin-memory thread already pinned: a queue.get, no unpickling
PINNED_HANDOVER_NS = 150_000
SMI_SAMPLE_S = 1.0  # nvidia-smi's utilization sample window (1/6 s to 1 s by product)
# version 2: NVML's sample period on A100/H100 SXM boards, the short end of that range;
# long enough to hold part of a step, short enough for its readings to swing with it
NVML_SAMPLE_S = 1 / 6
SUPPLY_BAND = (0.35, 0.75)  # supply / demand the seeds are conditioned on
NCCL_F32 = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
CONV = {  # cuDNN implicit-GEMM kernels of the patch-embedding conv (NHWC, bf16)
    "sm80": ("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_stage3_warpsize2x2x1_g1_tensor16x8x16_kernel",
             "sm80_xmma_wgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_warpsize2x2x1_g1_tensor16x8x16_kernel"),
    "sm90": ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
             "sm90_xmma_wgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn"),
}
NCHW2NHWC = ("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true, "
             "(cudnnKernelDataType_t)2>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, __nv_bfloat16 const*, "
             "__nv_bfloat16*)")
LOADER_NEXT = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
# Per-image work in a worker, as shares of the image's time (PIL decode dominates).
IMAGE_STAGES = [("PIL.Image.open/decode", 0.58), ("RandomResizedCrop", 0.19), ("RandomHorizontalFlip", 0.02),
                ("ToTensor", 0.12), ("Normalize", 0.07)]
EV = "autograd::engine::evaluate_function: "


class Params(ScenarioParams):
    gpu: Literal["A100", "H100"] = param("A100", unit="GPU model", choices=["A100", "H100"])
    world_size: int = param(4, unit="ranks (GPUs in one node, DDP)", ge=2, le=8, choices=[2, 4, 8])
    model: Literal["ViT-B/16", "ViT-L/16", "ViT-H/14"] = param(
        "ViT-L/16", unit="ViT variant (timm)", choices=["ViT-B/16", "ViT-L/16", "ViT-H/14"])
    image_px: int = param(160, unit="px, side of the square training crop", ge=64, le=512, draw=(160, 224),
                          description="drawn in steps of 32 px")
    batch_per_gpu: int = param(256, unit="images per GPU per step", ge=16, le=1024, draw=(128, 384),
                               description="drawn in steps of 32 images")
    compute_eff: float = param(0.4955, unit="fraction of dense bf16 peak in forward/backward", ge=0.1, le=0.8,
                               draw=(0.40, 0.55))
    workers: int = param(2, unit="DataLoader worker processes per rank (num_workers)", ge=1, le=64, draw=(2, 6))
    per_worker_img_s: float = param(251.0, unit="images/s one worker decodes, augments and collates", ge=20.0,
                                    le=2000.0, draw=(150.0, 320.0))
    h2d_gbps: float = param(6.55, unit="GB/s of the pageable HtoD batch copy", ge=1.0, le=50.0, draw=(5.0, 10.0))
    nccl_busbw_frac: float = param(0.7, unit="fraction of the ring's busbw the 25 MiB buckets reach", ge=0.1,
                                   le=1.0, draw=(0.5, 0.85))
    host_overhead_ms: float = param(1.5, unit="ms of CPU between the batch arriving and the first forward launch",
                                    ge=0.2, le=20.0, draw=(1.0, 2.5))
    op_overhead_us: float = param(25.0, unit="µs of framework CPU time per op", ge=5.0, le=200.0, draw=(18.0, 35.0))
    steps: int = param(5, unit="training steps in the trace", ge=3, le=2000)

    @classmethod
    def canonical(cls) -> "Params":
        """The seed's case 2: 4xA100, ViT-L/16, 256 images/GPU, 2 workers, 510 ms steps."""
        return cls()

    def refusal(self) -> str | None:
        """Version 2: an override whose step does not fit 90% of HBM (its draws never do: `draw`)."""
        if building() < 2:
            return None
        return _memory(self).needs(physics.GPUS[self.gpu], f"{self.model} under DDP with AMP and AdamW at "
                                   f"{self.batch_per_gpu} images of {self.image_px} px per GPU (no recompute)")

    @classmethod
    def draw(cls, rng: np.random.Generator) -> "Params":
        """Uniform over the declared ranges (crop and batch in steps of 32), conditioned
        on supply / demand inside SUPPLY_BAND: rejection sampling on the same stream. Version 2
        also rejects a draw whose step would not fit in the GPU's memory (app/feasibility.py)."""
        for _ in range(1000):
            p = super().draw(rng)
            p = p.model_copy(update={"image_px": 32 * round(p.image_px / 32),
                                     "batch_per_gpu": 32 * round(p.batch_per_gpu / 32)})
            if building() >= 2 and not _memory(p).fits(physics.GPUS[p.gpu]):
                continue
            ph = _phases(p)
            if SUPPLY_BAND[0] <= ph["supply_img_s"] / ph["demand_img_s"] <= SUPPLY_BAND[1]:
                return p
        raise RuntimeError("no starved configuration drawn")  # pragma: no cover


# -- the model ----------------------------------------------------------------------

def _vit(p: Params) -> dict:
    """ViT dimensions, token count and the parameter tensors in registration order."""
    m = MODELS[p.model]
    h, ffn, patch = m["hidden"], m["ffn"], m["patch"]
    side = p.image_px // patch
    seq = side * side + 1  # patches + CLS
    tensors = [("cls_token", h), ("pos_embed", seq * h), ("patch_embed.proj.weight", 3 * patch * patch * h),
               ("patch_embed.proj.bias", h)]
    for i in range(m["layers"]):
        pre = f"blocks.{i}."
        tensors += [(pre + "norm1.weight", h), (pre + "norm1.bias", h), (pre + "attn.qkv.weight", 3 * h * h),
                    (pre + "attn.qkv.bias", 3 * h), (pre + "attn.proj.weight", h * h), (pre + "attn.proj.bias", h),
                    (pre + "norm2.weight", h), (pre + "norm2.bias", h), (pre + "mlp.fc1.weight", ffn * h),
                    (pre + "mlp.fc1.bias", ffn), (pre + "mlp.fc2.weight", h * ffn), (pre + "mlp.fc2.bias", h)]
    tensors += [("norm.weight", h), ("norm.bias", h), ("head.weight", CLASSES * h), ("head.bias", CLASSES)]
    return {**m, "side": side, "patches": side * side, "seq": seq, "tokens": p.batch_per_gpu * seq,
            "tensors": tensors, "params": float(sum(n for _, n in tensors))}


def _memory(p: Params) -> feasibility.TrainingMemory:
    """Per-GPU memory of the step: AMP keeps fp32 weights, gradients and AdamW state
    (feasibility's master_fp32), and the ViT's activations at batch x tokens, no recompute."""
    v = _vit(p)
    return feasibility.training_memory(v["params"], world=p.world_size, tokens_per_gpu=v["tokens"],
                                       hidden=v["hidden"], layers=v["layers"], master_fp32=True)


def _phases(p: Params) -> dict:
    """Physics of one step: phase times (ms) and the loader's supply against the GPU's demand."""
    gpu = physics.GPUS[p.gpu]
    v = _vit(p)
    fwd = 2 * v["params"] * v["tokens"] / (gpu.bf16_tflops * 1e12 * p.compute_eff) * 1e3
    bwd = 2 * fwd  # data and weight gradients: two GEMMs per forward GEMM
    opt = v["params"] * ADAMW_BYTES_PER_PARAM / (gpu.mem_tbps * 1e12 * HBM_EFF) * 1e3
    busy = fwd + bwd + opt
    return {"fwd_ms": fwd, "bwd_ms": bwd, "opt_ms": opt, "busy_ms": busy,
            "demand_img_s": p.batch_per_gpu / (busy / 1e3), "supply_img_s": p.workers * p.per_worker_img_s}


def _conv_spec(arch: str, name: str, op: str, m: int, n: int, k: int) -> workload.KernelSpec:
    info = KernelInfo(grid=(max(1, -(-m // 128)), max(1, -(-n // 128)), 1), block=(128, 1, 1),
                      registers_per_thread=232, shared_memory=98_304 if arch == "sm80" else 197_632)
    return workload.KernelSpec(op, name, physics.gemm_flops(m, n, k), physics.gemm_bytes(m, n, k), info, "gemm",
                               (m, n, k))


def _specs(p: Params, gpu: physics.Gpu, v: dict):
    """Forward and backward kernels of one ViT step, and where each parameter's grad appears."""
    arch = "sm90" if gpu.arch == "sm90" else "sm80"
    B, T, h, seq = p.batch_per_gpu, v["tokens"], v["hidden"], v["seq"]
    pix = B * 3 * p.image_px * p.image_px
    conv_m, conv_k = B * v["patches"], 3 * v["patch"] ** 2
    layer_f = workload.transformer_layer(gpu.arch, T, seq, h, v["ffn"], h, norm="ln", act="gelu", causal=False)
    layer_b = workload.transformer_layer(gpu.arch, T, seq, h, v["ffn"], h, norm="ln", act="gelu", causal=False,
                                         backward=True)
    if building() >= 2:  # timm's Attention calls F.scaled_dot_product_attention (fused_attn): its flash backend
        # bidirectional attention, head dim 64 (ViT-B, ViT-L) or 80 (ViT-H), 1 + (px/patch)^2 tokens
        call = {"head_dim": h // v["heads"], "causal": False, "seq": seq}
        layer_f, layer_b = workload.sdpa_flash(layer_f, **call), workload.sdpa_flash(layer_b, **call)
    fwd = [workload._ew("aten::copy_", "copy", pix, 1, 1, 4),  # autocast: fp32 batch -> bf16
           workload.KernelSpec("aten::cudnn_convolution", NCHW2NHWC, float(pix), 4.0 * pix,
                               KernelInfo(grid=(max(1, pix // 1024), 1, 1), block=(256, 1, 1)), "ew"),
           _conv_spec(arch, CONV[arch][0], "aten::cudnn_convolution", conv_m, h, conv_k),
           workload._ew("aten::cat", "cat", T * h, 1, 1),
           workload._ew("aten::add", "add", T * h)]
    fwd += layer_f * v["layers"]
    fwd += [workload._ew("aten::native_layer_norm", "layernorm", T * h, 1, 1),
            workload._gemm(gpu.arch, "aten::addmm", B, CLASSES, h),
            workload._ew("aten::_log_softmax", "softmax_xent", B * CLASSES, 1, 1, 4)]
    head_b = [workload._ew(EV + "LogSoftmaxBackward0", "mul_f32", B * CLASSES, 2, 1, 4),
              workload._gemm(gpu.arch, EV + "AddmmBackward0", B, h, CLASSES, "nn"),
              workload._gemm(gpu.arch, EV + "AddmmBackward0", CLASSES, h, B, "nt"),
              workload._ew(EV + "SelectBackward0", "fill", T * h, 0, 1),
              workload._ew(EV + "NativeLayerNormBackward0", "layernorm_bwd", T * h, 3, 1)]
    grad_at: dict[str, int] = {"head.weight": 2, "head.bias": 2, "norm.weight": 4, "norm.bias": 4}
    gemms = [i for i, s in enumerate(layer_b) if s.role == "gemm"]
    norms = [i for i, s in enumerate(layer_b) if s.op.endswith("NativeLayerNormBackward0")]
    assert len(gemms) == 8 and len(norms) == 2
    # gemm_bwd emits (dX, dW) per linear: fc2, fc1, proj, qkv; LayerNorm grads: norm2, norm1.
    dw = {"mlp.fc2": gemms[1], "mlp.fc1": gemms[3], "attn.proj": gemms[5], "attn.qkv": gemms[7],
          "norm2": norms[0], "norm1": norms[1]}
    bwd = list(head_b)
    for layer in reversed(range(v["layers"])):
        base = len(bwd)
        bwd += layer_b
        for mod, i in dw.items():
            grad_at[f"blocks.{layer}.{mod}.weight"] = grad_at[f"blocks.{layer}.{mod}.bias"] = base + i
    grad_at["pos_embed"] = len(bwd)
    bwd.append(workload._ew(EV + "AddBackward0", "sum", T * h, 1, 0))
    grad_at["cls_token"] = len(bwd)
    bwd.append(workload._ew(EV + "CatBackward0", "sum", B * h, 1, 0))
    grad_at["patch_embed.proj.weight"] = grad_at["patch_embed.proj.bias"] = len(bwd)
    bwd.append(_conv_spec(arch, CONV[arch][1], EV + "ConvolutionBackward0", h, conv_k, conv_m))
    return fwd, bwd, grad_at


def _buckets(v: dict, grad_at: dict) -> list[dict]:
    """DDP's bucket assignment: reverse parameter order, first bucket 1 MiB, then 25 MiB;
    a bucket closes once it reaches its cap. Each is ready when its last grad is."""
    out, cur, size = [], [], 0
    cap = FIRST_BUCKET_MIB * 2**20
    for name, n in reversed(v["tensors"]):
        cur.append((name, n))
        size += n * FP32
        if size >= cap:
            out.append(cur)
            cur, size, cap = [], 0, BUCKET_CAP_MIB * 2**20
    if cur:
        out.append(cur)
    return [{"nelems": sum(n for _, n in bk), "bytes": sum(n for _, n in bk) * FP32,
             "ready_at": max(grad_at[name] for name, _ in bk)} for bk in out]


def _adamw(v: dict):
    """Foreach AdamW's launches: each pass split by multi_tensor_apply's block/tensor limits."""
    sizes = [n for _, n in v["tensors"]]
    chunks = sum(-(-n // MTA_CHUNK) for n in sizes)
    info = KernelInfo(grid=(MTA_MAX_BLOCKS, 1, 1), block=(512, 1, 1), registers_per_thread=40)
    specs, group, weights, ops = [], [], [], []
    for g, (op, meta, functor, fn, nbytes) in enumerate(ADAMW_PASSES):
        depth = int(meta.rstrip(">").split(",")[-1].split("<")[-1])
        n = max(-(-chunks // MTA_MAX_BLOCKS), -(-len(sizes) // MTA_MAX_TENSORS[depth]))
        ns = "at::native::(anonymous namespace)::"
        name = (f"void {ns}multi_tensor_apply_kernel<{ns}{meta}, {ns}{functor}, {fn}>"
                f"({ns}{meta}, {ns}{functor}, {fn})")
        specs += [workload.KernelSpec(op, name, v["params"] / n, v["params"] * nbytes / n, info, "ew")] * n
        group += [g] * n
        weights += [nbytes] * n
        ops.append(op)
    return specs, np.array(group), np.array(weights, float), ops


# -- emission -------------------------------------------------------------------------

def _launch(b: TraceBuilder, *, pid: int, tid: int, stream: int, op_ids, kernel_ids, dur_ns, cpu_t0: int,
            gpu_t0: int, overhead_ns, launch_ns, hole_ns=None, emit_op=None, gpu_gap_ns=1_200,
            kernel_extra=None, timing: HostTiming = hosttime.V1, rng=None, between_mask=None, shaped=None):
    """launch_phase with CPU time after chosen ops (`hole_ns`: where DDP's hooks run on the
    autograd thread) and ops that are not their own span (`emit_op` False: the second and
    later launches of one foreach op). Returns op start/end and kernel start/end.
    `timing` (version 2: hosttime.MEASURED_2, with `rng`): kernel gaps, launch latency and the
    Python between ops as measured; `between_mask`: the ops followed by Python (the last
    launch of each foreach op; the others are its own C++ loop). `shaped` (version 2): launch_phase's
    op tree, autograd numbering and per-launch configurations (tree, autograd, backward, kernel_cfg)."""
    latency = 3_000
    if timing.measured:
        n = len(kernel_ids)
        gpu_gap_ns = timing.kernel_gaps_ns(rng, n)
        latency = timing.launch_latency_ns(rng, n)
        between = timing.between_ops_ns(rng, n)
        if between_mask is not None:
            between = np.where(between_mask, between, 0)
        hole_ns = between if hole_ns is None else between + hole_ns
    done = launch_phase(b, host_pid=pid, cpu_tid=tid, gpu_pid=0, stream=stream, op_names=np.asarray(op_ids),
                        kernel_names=np.asarray(kernel_ids), kernel_dur_ns=dur_ns, cpu_t0=cpu_t0, gpu_t0=gpu_t0,
                        op_overhead_ns=overhead_ns, launch_ns=launch_ns, gpu_gap_ns=gpu_gap_ns,
                        launch_latency_ns=latency, kernel_extra=kernel_extra, free_after_ns=hole_ns, emit_op=emit_op,
                        **(shaped or {}))
    return done.op_start, done.op_end, done.kernel_start, done.kernel_end


def _hooks(b: TraceBuilder, topo: training.Topology, *, starts: np.ndarray, hook_ns: np.ndarray,
           gpu_ready: np.ndarray, nccl_free: int, dur_ns: np.ndarray, nelems: list[int], world: int, kernel_id: int,
           timing: HostTiming = hosttime.V1, rng=None):
    """DDP's bucket all-reduces fired from AccumulateGrad hooks on the autograd thread.

    The NCCL stream waits on an event recorded after the bucket's last gradient kernel,
    so each kernel starts at max(gradient ready, launch + latency, previous NCCL end).
    Version 2 (`timing` measured, with `rng`): the calls' lengths and offsets vary per hook."""
    pid, tid = topo.host_pid, topo.autograd_tid
    n = len(starts)
    vary = (lambda ns: np.array([timing.host_ns(rng, ns) for _ in range(n)], np.int64)) if timing.measured else (
        lambda ns: ns)
    colls = [{"Collective name": "allreduce", "In msg nelems": int(e), "Out msg nelems": int(e),
              "Group size": world, "dtype": "Float", "In split size": "[]", "Out split size": "[]",
              "Process Group Name": "0", "Process Group Description": "default_pg",
              "Process Group Ranks": str(list(range(world)))} for e in nelems]
    spans = [(EV + "torch::autograd::AccumulateGrad", "cpu_op", 1_000, 2_000, None),
             ("c10d::allreduce_", "cpu_op", 4_000, 6_000, None),
             ("record_param_comms", "cpu_op", 9_000, 10_000,
              [{**c, "Global rank start": 0, "Global rank stride": 1} for c in colls]),
             ("nccl:all_reduce", "user_annotation", 16_000, 14_000, None)]
    for name, cat, lead, tail, extra in spans:
        b.add(Kind.CPU, cat, name, pid, tid, starts + lead, hook_ns - lead - tail, ext=b.external_ids(n), extra=extra)
    for name, off in (("cudaEventRecord", 20_000), ("cudaStreamWaitEvent", 26_000)):
        b.add(Kind.RUNTIME, "cuda_runtime", name, pid, tid, starts + off, vary(3_000), ext=b.external_ids(n),
              corr=b.correlation_ids(n))
    launch_at = starts + 40_000
    corr, ext = b.correlation_ids(n), b.external_ids(n)
    launch_ns = timing.launch_calls_ns(rng, n) if timing.measured else 9_000
    b.add(Kind.RUNTIME, "cuda_runtime", "cudaLaunchKernel", pid, tid, launch_at, launch_ns, ext=ext, corr=corr)
    k_start = in_order(np.maximum(gpu_ready + vary(4_000), launch_at + launch_ns + vary(12_000)), dur_ns,
                       timing.kernel_gaps_ns(rng, n, 2_000), nccl_free)
    b.add(Kind.KERNEL, "kernel", np.full(n, kernel_id, np.int32), topo.gpu, topo.nccl_stream, k_start, dur_ns,
          ext=ext, corr=corr, extra=colls)
    return k_start, k_start + dur_ns


def _emit_workers(b: TraceBuilder, pid: int, tids: list[int], batches: list[dict], lo: int, hi: int) -> None:
    """Worker rows: per batch `_MapDatasetFetcher.fetch` over B `ImageFolder.__getitem__`
    (each split into decode/augment stages) and `default_collate`, clipped to the window."""
    img_s = np.concatenate([bt["img_start"] for bt in batches])
    img_d = np.concatenate([bt["img_dur"] for bt in batches])
    img_tid = np.concatenate([np.full(len(bt["img_start"]), tids[bt["worker"]]) for bt in batches])
    keep = (img_s >= lo) & (img_s + img_d <= hi)
    s, d, t = img_s[keep], img_d[keep], img_tid[keep]
    n = len(s)
    b.add(Kind.CPU, "user_annotation", "ImageFolder.__getitem__", pid, t, s, d, ext=b.external_ids(n))
    inner = d * 97 // 100  # the rest is Python around the transforms
    at = s + d // 100
    for name, share in IMAGE_STAGES:
        sd = (inner * share).astype(np.int64)
        b.add(Kind.CPU, "user_annotation", name, pid, t, at, sd, ext=b.external_ids(n))
        at = at + sd
    fs = np.array([bt["start"] for bt in batches], np.int64)
    fe = np.array([bt["ready"] for bt in batches], np.int64)
    cs = np.array([bt["collate_start"] for bt in batches], np.int64)
    ft = np.array([tids[bt["worker"]] for bt in batches], np.int64)
    keep = (fs >= lo) & (fe <= hi)
    b.add(Kind.CPU, "user_annotation", "_MapDatasetFetcher.fetch", pid, ft[keep], fs[keep], (fe - fs)[keep],
          ext=b.external_ids(int(keep.sum())))
    keep = (cs >= lo) & (fe <= hi)
    b.add(Kind.CPU, "user_annotation", "default_collate", pid, ft[keep], cs[keep], (fe - cs)[keep] - 2_000,
          ext=b.external_ids(int(keep.sum())))


def build(p: Params, rng: np.random.Generator, seed) -> Built:
    gpu = physics.GPUS[p.gpu]
    v = _vit(p)
    ph = _phases(p)
    B, W = p.batch_per_gpu, p.workers
    fwd, bwd, grad_at = _specs(p, gpu, v)
    buckets = _buckets(v, grad_at)
    opt_specs, opt_group, opt_w, opt_ops = _adamw(v)
    w_f = workload.roofline_weights_us(fwd, gpu)
    w_b = workload.roofline_weights_us(bwd, gpu)
    busbw = gpu.busbw_gbps * p.nccl_busbw_frac
    ar_ns = np.array([physics.allreduce_ms(bk["bytes"], p.world_size, busbw, latency_us=12.0) * 1e6
                      for bk in buckets])
    img_bytes = B * 3 * p.image_px * p.image_px * FP32  # ToTensor + Normalize: float32 in the workers
    lbl_bytes = B * 8  # int64 labels

    v2 = building() >= 2
    # version 2: host rows as real traces show them; the fixed build feeds the GPU
    timing = hosttime.MEASURED_2 if v2 else hosttime.V1
    h = lambda ns: timing.host_ns(rng, ns)  # noqa: E731  (version 1: the nominal length, no draw)
    fx = v2 and fixed()
    if fx:
        W = FIX_WORKERS
    prefetch = FIX_PREFETCH if fx else 2
    h2d_gbps = PINNED_H2D_GBPS[p.gpu] if fx else p.h2d_gbps

    b, pid, t0 = new_builder(rng, gpu, rank=0, world=p.world_size, visible_gpus=p.world_size)
    worker_tids = [pid + 211 + 7 * i for i in range(W)]
    topo = training.Topology(pid, pid, pid + 37, 0, 7, nccl_stream=int(rng.choice([40, 52, 84])), copy_stream=13)
    # torch.profiler records only its own process: the workers are processes of their own
    # (version 2 leaves them to the per-process view, tool nsys-processes)
    topo.name_rows(b, workers=[] if v2 else worker_tids)
    f_ops, f_kern = workload.intern(b, fwd)
    b_ops, b_kern = workload.intern(b, bwd)
    o_ops, o_kern = workload.intern(b, opt_specs)
    nccl_id = b.kernel(NCCL_F32, KernelInfo(grid=(16, 1, 1), block=(640, 1, 1), registers_per_thread=96,
                                            shared_memory=87_568))
    ready_idx = np.array([bk["ready_at"] for bk in buckets])
    # buckets closing after the same op run their hooks back to back, in bucket order
    by_op = np.argsort(ready_idx, kind="stable")
    first_at_op = np.r_[True, ready_idx[by_op][1:] != ready_idx[by_op][:-1]]
    group_head = np.maximum.accumulate(np.where(first_at_op, np.arange(len(buckets)), 0))
    opt_first = np.r_[True, opt_group[1:] != opt_group[:-1]]
    opt_first_i = np.flatnonzero(opt_first)
    f_shaped = b_shaped = None
    autograd = None
    # backward kernels launched by the same call as the one before them (_flash_attention_backward's 2nd and 3rd)
    one_call = optree.EV + workload.SDPA_BACKWARD
    same_call = np.array([i > 0 and s.op == one_call == bwd[i - 1].op for i, s in enumerate(bwd)])
    if v2:  # the op tree around each launch, record_shapes, per-launch grids; sequence numbers fwd -> bwd
        widths = (v["hidden"], 3 * v["hidden"], v["ffn"], CLASSES)
        autograd = optree.Autograd(b, first=int(rng.integers(2_000, 400_000)))
        f_shaped = {"tree": [optree.tree_for(x, widths) for x in fwd], "autograd": autograd,
                    "kernel_cfg": workload.launch_configs(b, fwd)}
        b_shaped = {"tree": [optree.tree_for(x, widths) for x in bwd], "autograd": autograd, "backward": True,
                    "kernel_cfg": workload.launch_configs(b, bwd)}

    # -- the loader: worker k % W builds batch k; each keeps prefetch_factor=2 in flight --
    cycle_ns = B / p.per_worker_img_s * 1e9  # one worker, one batch (images + collate + queue put)
    worker_pids = [pid + 1_043 + 2 * i for i in range(W)]  # forked after the main process
    period_ns = cycle_ns / W
    collate_ns = int(img_bytes / 8e9 * 1e9)  # torch.stack into shared memory at ~8 GB/s
    put_ns = 200_000
    worker_offset = int(rng.integers(0, W))
    ready: dict[int, int] = {}
    consumed: dict[int, int] = {}
    batches: list[dict] = []
    last_worker_free = {}
    # the first window should look like the rest: the CPU time around a step that is not
    # loader wait (hand-over, copies, host overhead, launch gaps, the sync) sets its phase
    nonloader_est_ns = (1_450_000 + p.host_overhead_ms * 1e6 + 1_200 * (len(fwd) + len(bwd))
                        + 1_500 * len(opt_specs) + 60_000)
    wait_est = period_ns - ph["busy_ms"] * 1e6 - nonloader_est_ns

    def produce(k: int) -> int:
        w = (k + worker_offset) % W
        c = int(cycle_ns * rng.normal(1.0, 0.004))
        if k <= W:  # in flight when the profiler window opens: staggered by the loader period
            done = int(t0 + 25_000 + wait_est + (k - 1) * period_ns)
            start = done - (c - put_ns)
        else:
            issue = consumed.get(k - prefetch * W, -(2**62))
            start = max(last_worker_free[w], issue)
            done = start + c - put_ns
        last_worker_free[w] = done + put_ns
        per_img = rng.gamma(12.0, 1.0, B)
        img_total = max(done - start - collate_ns - 2_000, B * 1_000)
        d = np.floor(per_img / per_img.sum() * img_total).astype(np.int64)
        starts = start + np.concatenate([[0], np.cumsum(d)[:-1]])
        batches.append({"k": k, "worker": w, "start": start, "ready": done, "img_start": starts, "img_dur": d,
                        "collate_start": int(starts[-1] + d[-1]), "cycle": c})
        ready[k] = done
        return done

    steps = []
    first_step = int(rng.integers(3, 40))
    t = t0
    gpu_free = t0
    nccl_free = t0
    copy_free = t0
    sum_f = np.zeros(len(fwd), np.int64)
    sum_b = np.zeros(len(bwd), np.int64)
    sum_o = np.zeros(len(opt_specs), np.int64)
    for i in range(p.steps):
        s0 = t
        main = topo.main_tid
        # wait_stream(copy stream) left over from the previous iteration's prefetch
        ev0 = s0 + h(5_000)
        runtime_call(b, "cudaEventRecord", pid, main, ev0, h(3_000))
        runtime_call(b, "cudaStreamWaitEvent", pid, main, ev0 + h(6_000), h(3_000))
        req = s0 + h(25_000)
        batch_ready = produce(i + 1)
        # unpickle the batch from the queue (version 2: a pinned batch is already in page-locked memory)
        unpickle = int(rng.uniform(0.6, 1.2) * 1e6) if not v2 else h(PINNED_HANDOVER_NS if fx else 900_000)
        got = max(batch_ready, req) + unpickle
        consumed[i + 1] = got
        cpu_span(b, LOADER_NEXT, pid, main, req, got)
        # batch i+1 to the GPU on the side stream (pageable: pin_memory=False; fixed: pinned)
        c0 = got + h(20_000)
        h2d = []
        img_api = int(rng.uniform(150, 300) * 1e3) if not fx else h(25_000)  # pinned: the call only enqueues
        for nbytes, api in ((img_bytes, img_api), (lbl_bytes, h(8_000))):
            dur = int(nbytes / (h2d_gbps * 1e9) * 1e9 * rng.normal(1.0, 0.01)) + 1_500
            gstart = max(c0 + 12_000, copy_free)
            cpu_span(b, "aten::to", pid, main, c0, c0 + api + 14_000, cat="cpu_op")
            cpu_span(b, "aten::_to_copy", pid, main, c0 + 2_000, c0 + api + 12_000, cat="cpu_op")
            memcpy(b, host_pid=pid, cpu_tid=main, gpu_pid=0, stream=topo.copy_stream,
                   kind="HtoD_pinned" if fx else "HtoD", nbytes=nbytes,
                   cpu_start_ns=c0 + 4_000, api_ns=api, gpu_start_ns=gstart, gpu_dur_ns=dur)
            h2d.append((gstart, gstart + dur))
            copy_free = gstart + dur
            c0 += api + h(20_000)
        # forward of batch i (copied during the previous step) on the main thread
        f_t0 = c0 + int(p.host_overhead_ms * 1e6 * rng.uniform(0.9, 1.1))
        f_ns = workload.scaled_durations_ns(w_f, ph["fwd_ms"] * rng.normal(1, 0.004), rng)
        b_ns = workload.scaled_durations_ns(w_b, ph["bwd_ms"] * rng.normal(1, 0.004), rng)
        o_ns = workload.scaled_durations_ns(opt_w, ph["opt_ms"] * rng.normal(1, 0.004), rng, jitter=0.02)
        sum_f += f_ns
        sum_b += b_ns
        sum_o += o_ns
        oh, ln = training.op_overheads_ns(rng, len(fwd), p.op_overhead_us, timing)
        _, fo1, fk0, fk1 = _launch(b, pid=pid, tid=main, stream=7, op_ids=f_ops, kernel_ids=f_kern, dur_ns=f_ns,
                                  cpu_t0=f_t0, gpu_t0=gpu_free, overhead_ns=oh, launch_ns=ln, timing=timing, rng=rng,
                                  shaped=f_shaped)
        cpu_span(b, "DistributedDataParallel.forward", pid, main, f_t0 - min(600_000, (f_t0 - c0) // 2),
                 int(fo1[-1]) + (h(6_000) if v2 else 3_000))  # v2: after the last op tree's closes (<= 4 µs)
        # backward on the autograd thread; DDP's hooks fire bucket all-reduces in between
        hook_ns = rng.uniform(100, 160, len(buckets)).astype(np.int64) * 1_000
        engine_ns = np.zeros(len(buckets), np.int64)
        if v2:  # off the µs grid; the engine's time from the gradient's node closing to AccumulateGrad
            hook_ns += rng.integers(0, 1_000, len(buckets))
            engine_ns += ENGINE_NS + np.array([h(8_000) for _ in buckets], np.int64)
        hole = np.zeros(len(bwd), np.int64)
        np.add.at(hole, ready_idx, hook_ns + engine_ns)
        oh, ln = training.op_overheads_ns(rng, len(bwd), p.op_overhead_us, timing)
        if v2:  # an attention node's 2nd and 3rd kernels launch from inside its one C++ call (mha_bwd):
            # no dispatcher time before them, no engine time between them
            oh = np.where(same_call, np.maximum(oh // 10, 1_500), oh)
        _, bo1, bk0, bk1 = _launch(b, pid=pid, tid=topo.autograd_tid, stream=7, op_ids=b_ops, kernel_ids=b_kern,
                                  dur_ns=b_ns, cpu_t0=int(fo1[-1]) + h(30_000), gpu_t0=int(fk1[-1]),
                                  overhead_ns=oh, launch_ns=ln, hole_ns=hole, timing=timing, rng=rng,
                                  between_mask=~np.r_[same_call[1:], False] if v2 else None, shaped=b_shaped)
        # bucket j's hook sits after its ready op, behind the hooks of earlier buckets there
        before = np.cumsum((hook_ns + engine_ns)[by_op]) - (hook_ns + engine_ns)[by_op]
        offs = np.empty(len(buckets), np.int64)
        offs[by_op] = before - before[group_head]
        hs = bo1[ready_idx] + offs + engine_ns
        a_ns = (ar_ns * rng.normal(1, 0.01, len(buckets))).astype(np.int64)
        order_t = np.argsort(hs, kind="stable")
        n0, n1 = _hooks(b, topo, starts=hs[order_t], hook_ns=hook_ns[order_t], gpu_ready=bk1[ready_idx][order_t],
                        nccl_free=nccl_free, dur_ns=a_ns[order_t],
                        nelems=[buckets[j]["nelems"] for j in order_t], world=p.world_size, kernel_id=nccl_id,
                        timing=timing, rng=rng)
        nccl_free = int(n1[-1])
        bwd_cpu_end = int(bo1[-1] + hole[-1])
        # optimizer on the main thread once backward() returns; on the GPU after the last bucket
        o_t0 = bwd_cpu_end + h(40_000)
        oh = np.where(opt_first, rng.gamma(4.0, 10.0, len(opt_specs)) * 1e3 + 8_000, 2_500).astype(np.int64)
        if v2:
            ln = timing.launch_calls_ns(rng, len(opt_specs))
        else:
            ln = rng.uniform(4.0, 7.0, len(opt_specs)).astype(np.int64) * 1_000
        oo0, oo1, ok0, ok1 = _launch(b, pid=pid, tid=main, stream=7, op_ids=o_ops, kernel_ids=o_kern, dur_ns=o_ns,
                                     cpu_t0=o_t0 + h(60_000), gpu_t0=max(int(bk1[-1]), nccl_free) + h(5_000),
                                     overhead_ns=oh, launch_ns=ln, emit_op=np.zeros(len(opt_specs), bool),
                                     gpu_gap_ns=1_500, timing=timing, rng=rng,
                                     between_mask=np.r_[opt_first[1:], True])
        last = np.r_[opt_first_i[1:] - 1, len(opt_specs) - 1]
        for g, (fi, la) in enumerate(zip(opt_first_i, last)):
            cpu_span(b, opt_ops[g], pid, main, int(oo0[fi]), int(oo1[la]), cat="cpu_op")
        opt_cpu_end = int(oo1[-1]) + h(20_000)
        cpu_span(b, "Optimizer.step#AdamW.step", pid, main, o_t0, opt_cpu_end)
        zg = opt_cpu_end + h(15_000)
        if v2:  # set_to_none over the parameters, then Python until loss.item()
            zg_end = zg + h(225_000)
            cpu_span(b, "Optimizer.zero_grad#AdamW.zero_grad", pid, main, zg, zg_end)
            t_end = training.sync_on_loss(b, topo, cpu_t0=zg_end + h(20_000), gpu_done=int(ok1[-1]), rng=rng,
                                          timing=timing) + h(2_000)  # the step's annotation closes after .item()
        else:
            cpu_span(b, "Optimizer.zero_grad#AdamW.zero_grad", pid, main, zg, zg + int(rng.uniform(150, 300) * 1e3))
            t_end = training.sync_on_loss(b, topo, cpu_t0=zg + 320_000, gpu_done=int(ok1[-1]))
        cpu_span(b, f"ProfilerStep#{first_step + i}", pid, main, s0, t_end)
        steps.append({"start": s0, "end": t_end, "req": req, "got": got, "ready": batch_ready, "h2d": h2d,
                      "fwd": (int(fk0[0]), int(fk1[-1])), "bwd": (int(bk0[0]), int(bk1[-1])),
                      "opt": (int(ok0[0]), int(ok1[-1])), "nccl": (n0, n1)})
        gpu_free = t_end  # the DtoH of loss.item() ended before the CPU resumed
        t = t_end + h(15_000)
    # batches still being built when the window closes fill the worker rows to the end
    k = p.steps
    while min(last_worker_free.values()) < t:
        k += 1
        produce(k)
    if not v2:
        _emit_workers(b, pid, worker_tids, batches, t0, t)
    trace = b.build()
    if fx:  # what the trace after the fix measures; the instance's key is the unfixed build's
        windows = [(s["start"], n["start"]) for s, n in zip(steps, steps[1:])]
        step_ms = float(np.mean([hi - lo for lo, hi in windows]) / 1e6)
        busy_ns, gap_ns, _ = _stream_windows(trace, topo.compute_stream, windows)
        wait_ms = float(np.mean([(s["got"] - s["req"]) / 1e6 for s in steps[:-1]]))
        fixed_key = {"fixed": True, "observations": [
            obs("step_ms", f"step after the fix ({W} workers, pinned memory, prefetch_factor={prefetch})", step_ms,
                "ms"),
            obs("gpu_busy_ms", "compute-stream busy per step", float(busy_ns.mean() / 1e6), "ms"),
            obs("gpu_idle_ms", "compute-stream idle per step", step_ms - float(busy_ns.mean() / 1e6), "ms"),
            obs("gap_ms", "compute-stream gap at the start of each step", float(gap_ns.mean() / 1e6), "ms"),
            obs("dataloader_wait_ms", "main thread in DataLoader.__next__ per step", wait_ms, "ms"),
            obs("supply_img_s", "images/s the loader supplies", W * float(np.mean(
                [B / (bt["cycle"] / 1e9) for bt in batches])), "img/s", 1)]}
        return Built(key=fixed_key, artifacts={"gpus": gpu_clock_report(gpu, p.world_size, rng),
                                               "steps": [{"start_us": s["start"] / 1e3, "end_us": s["end"] / 1e3}
                                                         for s in steps]},
                     trace_for_rank=lambda rank: trace, ranks=1)
    key, artifacts = _key(p, seed, gpu, v, ph, steps, batches, buckets, trace, topo, fwd, bwd, opt_specs,
                          sum_f, sum_b, sum_o, img_bytes, rng)
    if v2:  # what the profiler leaves out: the worker processes, for the per-process view (nsys-processes)
        artifacts["dataloader"]["processes"] = {
            "main": {"pid": pid, "name": "python3.11", "threads": ["pt_main_thread", f"pt_autograd_{topo.gpu}"]},
            "workers": [{"pid": wp, "name": "python3.11", "worker_id": i} for i, wp in enumerate(worker_pids)],
            "image_stages": [[name, share] for name, share in IMAGE_STAGES],
            "batches": [{"worker": bt["worker"], "start_us": bt["start"] / 1e3, "collate_us": bt["collate_start"] / 1e3,
                         "ready_us": bt["ready"] / 1e3, "images": B} for bt in sorted(batches, key=lambda x: x["k"])],
        }
    return Built(key=key, artifacts=artifacts, trace_for_rank=lambda rank: trace, ranks=1)


# -- the key ------------------------------------------------------------------------

def _nvml_samples(ks: np.ndarray, ke: np.ndarray, lo: int, hi: int, gpus: int, rng) -> list[dict]:
    """nvidia-smi's utilization.gpu per GPU as NVML defines it (version 2): for each sample
    period, the percentage of it during which one or more kernels ran (any stream). A period
    inside the busy stretch reads ~99%, one inside the loader gap ~0%; their mean is the busy
    share. The ranks run in lockstep (every step ends in the same all-reduces), so each GPU is
    sampled on rank 0's kernels, at its own phase: NVML's sampler is not aligned to the steps."""
    us, ue = intervals.union(ks, ke)
    period = int(NVML_SAMPLE_S * 1e9)
    out = []
    for g in range(gpus):
        edges = lo + int(rng.uniform(0, period)) + np.arange(0, hi - lo, period)
        edges = edges[edges + period <= hi]
        read = [int(round(100 * intervals.busy_ns(us, ue, int(e), int(e) + period) / period)) for e in edges]
        out.append({"period_s": round(NVML_SAMPLE_S, 4), "readings_pct": read, "n": len(read), "max": max(read),
                    "min": min(read), "avg": float(round(np.mean(read)))})
    return out


def _stream_windows(trace, stream: int, windows: list[tuple[int, int]]):
    """Per window: busy ns and the largest idle gap on one GPU stream of GPU 0."""
    sel = (trace.pid == 0) & (trace.tid == stream) & ((trace.kind == Kind.KERNEL) | (trace.kind == Kind.MEMORY))
    us, ue = intervals.union(trace.ts_ns[sel], trace.ts_ns[sel] + trace.dur_ns[sel])
    busy, gap, gap_at = [], [], []
    for lo, hi in windows:
        a, z = np.searchsorted(ue, lo, "right"), np.searchsorted(us, hi, "left")
        s, e = us[a:z], ue[a:z]
        busy.append(intervals.busy_ns(s, e, lo, hi))
        g = max(intervals.gaps(s, e, lo, hi), key=lambda x: x[1] - x[0])
        gap.append(g[1] - g[0])
        gap_at.append(g)
    return np.array(busy), np.array(gap), gap_at


def _key(p, seed, gpu, v, ph, steps, batches, buckets, trace, topo, fwd, bwd, opt_specs, sum_f, sum_b, sum_o,
         img_bytes, rng):
    B, W = p.batch_per_gpu, p.workers
    windows = [(s["start"], n["start"]) for s, n in zip(steps, steps[1:])]
    periods = np.array([hi - lo for lo, hi in windows]) / 1e6
    step_ms = float(periods.mean())
    busy_ns, gap_ns, gap_at = _stream_windows(trace, topo.compute_stream, windows)
    busy_ms = float(busy_ns.mean() / 1e6)
    idle_ms = step_ms - busy_ms
    gap_ms = float(gap_ns.mean() / 1e6)
    inw = steps[:-1]
    wait_ms = float(np.mean([(s["got"] - s["req"]) / 1e6 for s in inw]))
    queue_ms = float(np.mean([(s["got"] - max(s["ready"], s["req"])) / 1e6 for s in inw]))
    h2d_ms = float(np.mean([sum(e - a for a, e in s["h2d"]) / 1e6 for s in inw]))
    img_copy_ms = float(np.mean([(s["h2d"][0][1] - s["h2d"][0][0]) / 1e6 for s in inw]))
    h2d_gbps = img_bytes / (img_copy_ms / 1e3) / 1e9
    fwd_ms = float(np.mean([(s["fwd"][1] - s["fwd"][0]) / 1e6 for s in inw]))
    bwd_ms = float(np.mean([(s["bwd"][1] - s["bwd"][0]) / 1e6 for s in inw]))
    opt_ms = float(np.mean([(s["opt"][1] - s["opt"][0]) / 1e6 for s in inw]))
    nccl_ms = float(np.mean([(s["nccl"][1] - s["nccl"][0]).sum() / 1e6 for s in inw]))
    exposed_comm_ms = float(np.mean([max(0, int(s["nccl"][1][-1]) - s["bwd"][1]) / 1e6 for s in inw]))
    under = [np.sum(np.minimum(s["nccl"][1], s["bwd"][1]) - np.minimum(s["nccl"][0], s["bwd"][1]))
             / np.sum(s["nccl"][1] - s["nccl"][0]) for s in inw]
    hidden_pct = 100.0 * float(np.mean(under))
    # the loader, measured on the worker rows: images / (time per batch incl. collate and queue put)
    per_worker = float(np.mean([B / (bt["cycle"] / 1e9) for bt in batches]))
    supply = W * per_worker
    demand = B / (busy_ms / 1e3)
    loader_batch_ms = B / supply * 1e3
    worker_batch_ms = B / per_worker * 1e3
    deficit_gap_ms = busy_ms * (demand / supply - 1.0)
    # after the fix: no wait beyond handing over a ready batch; the rest of the idle stays
    nonloader_idle_ms = idle_ms - wait_ms
    synthetic_ms = busy_ms + nonloader_idle_ms
    fixed_supply = FIX_WORKERS * per_worker
    after_ms = max(synthetic_ms + queue_ms, B / fixed_supply * 1e3)
    speedup = step_ms / after_ms
    residual_ms = after_ms - busy_ms
    reference_ms = after_ms
    deficit_pct = (1 - reference_ms / step_ms) * 100
    flops = physics.training_flops(v["params"], v["tokens"])
    mfu = physics.mfu_pct(flops, step_ms, gpu)
    mfu_after = physics.mfu_pct(flops, after_ms, gpu)
    mfu_busy = physics.mfu_pct(flops, busy_ms, gpu)
    idle_pct = idle_ms / step_ms * 100
    busy_pct = busy_ms / step_ms * 100
    # nvidia-smi as the seed models it: a sample reads busy if any kernel ran in its window
    sel = (trace.pid == 0) & (trace.kind == Kind.KERNEL)
    ks, ke = trace.ts_ns[sel], trace.ts_ns[sel] + trace.dur_ns[sel]
    lo, hi = steps[0]["start"], steps[-1]["end"]
    n_win = max(1, math.ceil((hi - lo) / (SMI_SAMPLE_S * 1e9)))
    edges = lo + np.arange(n_win + 1) * int(SMI_SAMPLE_S * 1e9)
    hit = [bool(np.any((ks < edges[j + 1]) & (ke > edges[j]))) for j in range(n_win)]
    smi_pct = 100.0 * sum(hit) / n_win
    v2 = building() >= 2
    if v2:  # NVML's definition: the share of each sample period in which some kernel ran
        smi = _nvml_samples(ks, ke, lo, hi, p.world_size, rng)
        readings = np.concatenate([x["readings_pct"] for x in smi])
        smi_pct = float(round(readings.mean()))
        smi_max, smi_min = int(readings.max()), int(readings.min())
    top = workload.kernel_table(fwd + bwd + opt_specs, np.concatenate([sum_f, sum_b, sum_o]) // p.steps)
    top_share = top[0]["total_us"] / 1e3 / busy_ms * 100
    n_buckets = len(buckets)
    copy_share = h2d_ms / gap_ms * 100

    observations = [
        obs("step_ms", "step period", step_ms, "ms"),
        obs("expected_step_ms", "step after feeding the GPU (16 workers, pinned memory, prefetch)", after_ms, "ms"),
        obs("speedup", "throughput gain", speedup, "x", 3),
        obs("reference_step_ms", "the same workload on this hardware when fed", reference_ms, "ms"),
        obs("throughput_deficit_pct", "throughput below the reference run", deficit_pct, "%", 1),
        obs("gpu_idle_ms", "compute-stream idle per step", idle_ms, "ms"),
        obs("gpu_busy_ms", "compute-stream busy per step", busy_ms, "ms"),
        obs("gap_ms", "compute-stream gap at the start of each step", gap_ms, "ms"),
        obs("idle_pct", "idle share of the step", idle_pct, "%", 1),
        obs("dataloader_wait_ms", "main thread blocked in DataLoader.__next__ per step", wait_ms, "ms"),
        obs("workers", "DataLoader workers per rank", W, "workers", 0),
        obs("per_worker_img_s", "images/s one worker decodes + augments + collates", per_worker, "img/s", 1),
        obs("supply_img_s", "images/s the loader supplies", supply, "img/s", 1),
        obs("demand_img_s", "images/s the GPU consumes when fed (batch / busy)", demand, "img/s", 1),
        obs("batch", "images per GPU per step", B, "images", 0),
        obs("worker_batch_ms", "one worker's time to build one batch", worker_batch_ms, "ms"),
        obs("loader_batch_ms", "time between batches from all workers together", loader_batch_ms, "ms"),
        obs("deficit_gap_ms", "busy x (demand / supply - 1): the gap the supply math predicts", deficit_gap_ms, "ms"),
        obs("h2d_ms", "HtoD copy per step (stream 13, beside forward)", h2d_ms, "ms"),
        obs("h2d_mb", "bytes of the float32 batch copy", img_bytes / 1e6, "MB", 1),
        obs("h2d_gbps", "pageable HtoD copy bandwidth", h2d_gbps, "GB/s"),
        obs("h2d_share_of_gap_pct", "the copy as a share of the gap", copy_share, "%", 1),
        obs("fwd_ms", "forward", fwd_ms, "ms"),
        obs("bwd_ms", "backward", bwd_ms, "ms"),
        obs("opt_ms", "optimizer step (foreach AdamW, fp32 master weights)", opt_ms, "ms"),
        obs("allreduce_ms", "bucketed all-reduce kernel time per step (NCCL stream)", nccl_ms, "ms"),
        obs("nccl_kernels_per_step", "all-reduce buckets per step", n_buckets, "kernels", 0),
        obs("comm_hidden_pct", "all-reduce time under backward", hidden_pct, "%", 1),
        obs("exposed_comm_ms", "all-reduce left after backward ends (last bucket)", exposed_comm_ms, "ms", 3),
        obs("nvidia_smi_util_pct", f"nvidia-smi utilization ({SMI_SAMPLE_S:g} s sample windows)", smi_pct, "%", 0)
        if not v2 else obs("nvidia_smi_util_pct", "nvidia-smi utilization.gpu, mean of the GPUs' samples (NVML: "
                           f"share of each {NVML_SAMPLE_S * 1e3:.0f} ms period with a kernel running)", smi_pct, "%",
                           0),
        obs("gpu_busy_pct", "compute-stream busy share of the step (what DCGM GR_ENGINE_ACTIVE shows)", busy_pct,
            "%", 1),
        obs("synthetic_step_ms", "step with synthetic in-memory data", synthetic_ms, "ms"),
        obs("fixed_supply_img_s", f"supply with {FIX_WORKERS} workers", fixed_supply, "img/s", 0),
        obs("residual_idle_ms", "idle left after the fix (host overhead, last bucket, queue hand-over)", residual_ms,
            "ms"),
        *([obs("nvidia_smi_util_max_pct", "nvidia-smi utilization.gpu, highest sample", smi_max, "%", 0),
           obs("nvidia_smi_util_min_pct", "nvidia-smi utilization.gpu, lowest sample", smi_min, "%", 0)]
          if v2 else []),
        obs("mfu_pct", "MFU", mfu, "%", 1),
        obs("expected_mfu_pct", "MFU after the fix", mfu_after, "%", 1),
        obs("busy_mfu_pct", "MFU inside the busy time", mfu_busy, "%", 1),
    ]
    first = windows[0]
    g0 = gap_at[0]
    n = p.world_size
    r_s, sup, dem = f"{per_worker:.0f}", f"{supply:.0f}", f"{demand:.0f}"
    top_name = top[0]["kernel"].split("(")[0]
    brief = (f"{n}x {gpu.key} ({gpu.interconnect}), {p.model} (~{v['params'] / 1e6:.0f}M params) image-classification "
             f"pre-training at {p.image_px} px, batch {B} images/GPU, DDP with bf16 autocast. nvidia-smi shows "
             f"{smi_pct:.0f}% GPU utilization, but throughput is {deficit_pct:.0f}% below the reference run. "
             f"Here is rank 0's trace. Walk me through it.") if not v2 else (
        f"{n}x {gpu.key} ({gpu.interconnect}), {p.model} (~{v['params'] / 1e6:.0f}M params) image-classification "
        f"pre-training at {p.image_px} px, batch {B} images/GPU, DDP with bf16 autocast. The nvidia-smi "
        f"utilization graph keeps touching {smi_max}% (its samples average {smi_pct:.0f}%), but "
        f"throughput is {deficit_pct:.0f}% below the reference run. Here is rank 0's trace. Walk me through it.")
    key = make_key(
        scenario, p, seed, brief=brief, observations=observations,
        discipline={
            "step_boundary": (f"ProfilerStep# gives a clean {step_ms:.0f} ms period. The reference run does this "
                              f"workload in ~{reference_ms:.0f} ms, so ~{step_ms - reference_ms:.0f} ms is "
                              f"unexplained: the trace should show an anomaly that size, and anything smaller is "
                              f"a distraction."),
            "gaps": (f"The compute stream is idle for the first {gap_ms:.0f} ms of every step ({idle_ms:.0f} ms idle "
                     f"in all, {idle_pct:.0f}%). During the gap the main thread is blocked in {LOADER_NEXT} for "
                     f"{wait_ms:.0f} ms and the {W} pt_data_worker rows are pegged with per-image JPEG decode and "
                     f"augmentation. The GPU is not waiting on itself; it is waiting on Python.") if not v2 else (
                f"The compute stream is idle for the first {gap_ms:.0f} ms of every step ({idle_ms:.0f} ms idle "
                f"in all, {idle_pct:.0f}%). During the gap the main thread is blocked in {LOADER_NEXT} for "
                f"{wait_ms:.0f} ms. The profiler records only the main process; the per-process view "
                f"(nsys-processes) shows the {W} DataLoader worker processes pegged near 100% of a core with "
                f"per-image JPEG decode and augmentation. The GPU is not waiting on itself; it is waiting on Python."),
            "overlap": (f"Once fed, the {busy_ms:.0f} ms of busy time is healthy: forward {fwd_ms:.0f}, backward "
                        f"{bwd_ms:.0f}, optimizer {opt_ms:.0f} ms; {n_buckets} bucketed all-reduces "
                        f"({nccl_ms:.0f} ms) run on the NCCL stream under backward ({hidden_pct:.0f}% hidden). "
                        f"The {h2d_ms:.0f} ms HtoD copy runs on copy stream {topo.copy_stream}, beside the start "
                        f"of forward, not in the gap."),
            "longest_kernel": (f"Nothing to win inside the busy time: the top kernel ({top_name}) is "
                               f"{top_share:.0f}% of it and the busy region runs at {mfu_busy:.0f}% MFU. Jumping "
                               f"here first would optimize a GEMM in a step that is {idle_pct:.0f}% idle."),
        },
        root_cause=(f"Input starvation: {W} DataLoader workers decode and augment at ~{r_s} images/s each, supplying "
                    f"~{sup} images/s against the GPU's demand of {dem} images/s ({B} images in {busy_ms:.0f} ms). "
                    f"Every step the GPU waits busy x (demand/supply - 1) = {busy_ms:.0f} x ({dem}/{sup} - 1) = "
                    f"{deficit_gap_ms:.0f} ms for the next batch."),
        traps=[{
            "id": "nvidia_smi_100",
            **({"claim": f"nvidia-smi shows {smi_pct:.0f}% utilization, so the GPU is busy and the kernels must be slow.",
                "why_wrong": (f"nvidia-smi's counter reads busy when any kernel was resident in its ~{SMI_SAMPLE_S:g} s "
                              f"sample window; every window here holds kernels, so it reads {smi_pct:.0f}%. The trace "
                              f"overrules it: the compute stream is idle {idle_ms:.0f} of every {step_ms:.0f} ms "
                              f"({idle_pct:.0f}%), and the busy region already runs at {mfu_busy:.0f}% MFU.")}
               if not v2 else {
                # NVML's utilization.gpu: the share of each sample period in which one or more
                # kernels ran; a period that falls in the busy stretch reads ~99% whatever the
                # kernels' efficiency, one in the loader gap ~0%
                "claim": (f"nvidia-smi's utilization reads up to {smi_max}%, so the GPU is busy and the kernels "
                          f"must be slow."),
                "why_wrong": (f"nvidia-smi's utilization is the share of each ~{NVML_SAMPLE_S * 1e3:.0f} ms sample "
                              f"period in which some kernel ran. A sample that falls inside the {busy_ms:.0f} ms busy "
                              f"stretch reads ~{smi_max}%, one inside the {gap_ms:.0f} ms loader gap "
                              f"~{smi_min}%; averaged they read {smi_pct:.0f}%, the busy share "
                              f"({busy_pct:.0f}%), not saturation. Even a reading of 100% would say nothing about "
                              f"SM occupancy or efficiency, so it cannot say the kernels are slow: the trace shows "
                              f"the compute stream idle {idle_ms:.0f} of every {step_ms:.0f} ms ({idle_pct:.0f}%) "
                              f"while the step is starved, and the busy region already runs at {mfu_busy:.0f}% MFU.")}),
        }, {
            "id": "h2d_copy",
            "claim": "The HtoD copy of the batch is the bottleneck.",
            "why_wrong": (f"The copy is real but it is {h2d_ms:.1f} ms ({img_bytes / 1e6:.0f} MB at "
                          f"{h2d_gbps:.1f} GB/s, pageable), {copy_share:.0f}% of the {gap_ms:.0f} ms gap, and it "
                          f"already runs on stream {topo.copy_stream} beside forward; pin_memory + prefetch hides "
                          f"it entirely. It cannot explain {gap_ms:.0f} ms."),
        }, {
            "id": "comm",
            "claim": "DDP communication is slow.",
            "why_wrong": (f"{n_buckets} bucketed all-reduces take {nccl_ms:.0f} ms per step and run under "
                          f"backward ({bwd_ms:.0f} ms); only {exposed_comm_ms:.2f} ms is left after backward ends. "
                          f"The NCCL stream is idle during the gap too."),
        }],
        decisive_measurement="synthetic-data",
        confirmation=(f"(1) Sum DataLoader.__next__ per step in the profiler: {wait_ms:.0f} ms, matching the "
                      f"{gap_ms:.0f} ms gap. (2) The decisive experiment: swap in a synthetic in-memory dataset "
                      f"(torch.randn batches already on the GPU); the step drops to ~{synthetic_ms:.0f} ms, which "
                      f"isolates the input pipeline from everything else in one run."),
        fix=(f"num_workers={W} -> {FIX_WORKERS} (supply {sup} -> ~{fixed_supply:,.0f} images/s, "
             f"{fixed_supply / demand:.1f}x demand), pin_memory=True, prefetch_factor=4; move JPEG decode to the "
             f"GPU (NVJPEG/DALI) only if CPU decode becomes the wall again."),
        expected={"before_ms": round(step_ms, 2), "after_ms": round(after_ms, 2), "speedup": round(speedup, 3),
                  "unit": "ms per step",
                  "arithmetic": (f"gap {gap_ms:.0f} -> ~{residual_ms:.0f} ms (host overhead and the last bucket); "
                                 f"step = busy {busy_ms:.0f} + {residual_ms:.0f} = {after_ms:.0f} ms; "
                                 f"{step_ms:.0f}/{after_ms:.0f} = {speedup:.2f}x; MFU {mfu:.0f}% -> "
                                 f"{mfu_after:.0f}%")},
        model_answer=(
            f"Step is {step_ms:.0f} ms but the GPU compute stream is idle for the first {gap_ms:.0f} ms of every "
            f"one: the CPU row is stuck in DataLoader.__next__ and {W} worker processes are pegged decoding JPEGs. "
            + (f"nvidia-smi said {smi_pct:.0f}% util, but that counter is 'any kernel resident', not 'busy'; the "
               f"trace overrules it. " if not v2 else
               f"nvidia-smi's samples touch {smi_max}% but average {smi_pct:.0f}%: utilization is only the "
               f"share of each sample period with a kernel running, nothing about efficiency, and the trace shows "
               f"{idle_pct:.0f}% of the step idle. ")
            + f"Supply math: {W} workers give ~{sup} images/s; the GPU consumes {dem}. The busy "
            f"{busy_ms:.0f} ms is healthy, comm hides under backward, so there's nothing to win inside it. Fix is "
            f"boring: {FIX_WORKERS} workers, pinned memory, prefetch; GPU decode only if the CPU becomes the wall "
            f"again. Confirm with a synthetic-data run: if step time drops to ~{synthetic_ms:.0f} ms, case closed. "
            f"Expected: ~{after_ms:.0f} ms steps, {speedup:.2f}x."),
        marks={"step": {"start_us": first[0] / 1e3, "end_us": first[1] / 1e3},
               "gap": {"start_us": g0[0] / 1e3, "end_us": g0[1] / 1e3}},
    )
    per_rank = []
    for r in range(n):
        j = 1.0 if r == 0 else float(rng.normal(1, 0.004))
        per_rank.append({"rank": r, "step_ms": round(step_ms, 2), "compute_ms": round(busy_ms * j, 2),
                         "dataloader_wait_ms": round(wait_ms * (2 - j), 2), "idle_ms": round(step_ms - busy_ms * j, 2),
                         "comm_ms": round(nccl_ms, 2), "wait_ms": 0.0, "optimizer_ms": round(opt_ms, 2)})
    artifacts = {
        "per_rank": per_rank,
        "gpus": gpu_clock_report(gpu, n, rng, util_pct=smi_pct) if not v2 else gpu_clock_report(
            gpu, n, rng, overrides={i: {"utilization_pct": x["avg"], "utilization_samples": x}
                                    for i, x in enumerate(smi)}),
        "gpu": {"key": gpu.key, "peak_tflops": gpu.bf16_tflops, "mem_tbps": gpu.mem_tbps,
                "ridge_flop_per_byte": round(physics.ridge_point(gpu), 1), "count": n},
        "kernels": top,
        "steps": [{"start_us": s["start"] / 1e3, "end_us": s["end"] / 1e3} for s in steps],
        "model": {"name": p.model, "params": v["params"], "hidden": v["hidden"], "layers": v["layers"],
                  "image_px": p.image_px, "tokens_per_image": v["seq"], "tokens_per_gpu": v["tokens"]},
        "dataloader": {"workers": W, "per_worker_img_s": round(per_worker, 1), "supply_img_s": round(supply, 1),
                       "demand_img_s": round(demand, 1), "batch": B, "prefetch_factor": 2, "pin_memory": False,
                       "worker_batch_ms": round(worker_batch_ms, 2), "loader_batch_ms": round(loader_batch_ms, 2),
                       "wait_ms": round(wait_ms, 2),
                       "fix": {"workers": FIX_WORKERS, "supply_img_s": round(fixed_supply, 1), "pin_memory": True,
                               "prefetch_factor": 4}},
        "ddp": {"bucket_cap_mb": BUCKET_CAP_MIB, "first_bucket_mb": FIRST_BUCKET_MIB, "grad_dtype": "float32",
                "grad_bytes": sum(b["bytes"] for b in buckets), "bucket_bytes": [b["bytes"] for b in buckets],
                "world_size": n},
        "experiments": {
            "synthetic_data": {"step_ms_before": round(step_ms, 2), "step_ms_synthetic": round(synthetic_ms, 2),
                               "gpu_idle_ms_before": round(idle_ms, 2),
                               "gpu_idle_ms_synthetic": round(nonloader_idle_ms, 2),
                               "dataloader_wait_ms_before": round(wait_ms, 2)},
            "nvidia_smi": {"utilization_pct": smi_pct, "sample_period_s": SMI_SAMPLE_S,
                           "compute_busy_pct": round(busy_pct, 1)} if not v2 else {
                "utilization_pct": smi_pct, "sample_period_s": round(NVML_SAMPLE_S, 4),
                "readings_pct": smi[0]["readings_pct"], "compute_busy_pct": round(busy_pct, 1)},
            "dcgm": {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(busy_pct / 100, 3),
                     "DCGM_FI_DEV_GPU_UTIL": smi_pct, "sm_clock_mhz": gpu.max_sm_clock_mhz},
            "nsys_nvtx_sum": {"ranges": [
                {"range": LOADER_NEXT, "instances": len(inw), "avg_ms": round(wait_ms, 2)},
                {"range": "ProfilerStep", "instances": len(inw), "avg_ms": round(step_ms, 2)}]},
        },
    }
    return key, artifacts


scenario = Scenario(
    id="dataloader", version=2, older=(1,), fixable=(2,), family="host-input", difficulty="easy",
    title="Input starvation",
    signature="The compute stream idles at the start of every step while the main thread waits in DataLoader.__next__",
    Params=Params, build=build,
    observations=("gpu_idle_ms", "gpu_busy_ms", "h2d_ms", "supply_img_s", "demand_img_s", "dataloader_wait_ms",
                  "workers", "per_worker_img_s", "fwd_ms", "bwd_ms", "opt_ms", "reference_step_ms",
                  "nvidia_smi_util_pct"),
    seed_headlines={"step_ms": 510, "gpu_idle_ms": 190, "gpu_busy_ms": 320, "h2d_ms": 12, "demand_img_s": 800,
                    "expected_step_ms": 325, "speedup": 1.57},
    reader_checks={"step_ms": "step_ms", "compute_idle_ms": "gpu_idle_ms", "compute_busy_ms": "gpu_busy_ms",
                   "h2d_ms_per_step": "h2d_ms", "max_gap_ms": "gap_ms"},
    rubric=Rubric(
        trap_parts={
            "nvidia_smi_100": r"\b(kernels?|gemms?|matmuls?|the model'?s? ops)\b",
            "h2d_copy": r"\b(h2d|htod|host[- ]to[- ]device|memcpy|the copy|copies|transfers?|pcie|data movement)\b",
            "comm": r"\b(ddp|nccl|all-?reduces?|allreduce|collectives?|comms?|communication|gradient sync\w*|syncing gradients|interconnect|fabric|the network)\b",
        },
        root_cause=(
            (r"(input|data) ?(pipeline|loader|loading)", r"data ?loader", r"starv\w*", r"__next__", r"next\(",
             r"waiting (on|for) (the )?(data|input|batch\w*|python|cpu|loader|images?|samples?)", r"(jpeg|image) decod\w*"),
            (r"(too few|only (2|two)|2|two) (data ?loader )?workers", r"\bsupply\b", r"img/s|images/s|images per second",
             r"num_workers", r"workers? (are|is) (pegged|saturated|maxed|the bottleneck)"),
        ),
        fix=(r"num_workers", r"(more|add\w*|increas\w*|rais\w*|bump\w*) .{0,25}workers", r"workers? .{0,12}(to|->|→) ?\d+",
             r"\bfix\w*( is|:)?.{0,15}\b\d+ (data ?loader )?workers\b", r"\b\d+ workers\s*(\+|,|and|with) ?(pin\w*|prefetch\w*)",
             r"\bdali\b|nvjpeg|gpu decod\w*", r"pin_memory"),
        traps={"nvidia_smi_100": (r"\b(optimi[sz]\w*|tun\w*|speed(ing)? up|faster|shav\w*)\b.{0,30}\b(kernels?|gemms?|attention|ops)\b", r"\b(kernels?|gemms?|attention)\b.{0,20}\b(faster|tun\w*|optimi[sz]\w*)\b", r"\bkernel[- ](level|by[- ]kernel) (optimi[sz]\w*|tuning)\b", r"\bfused (attention|mlp|kernels?|layernorm)\b",
                r"nvidia-smi", r"100 ?% (gpu )?util\w*", r"utili[sz]ation (is|says|shows|reads) (100|full)",
                                  r"\bgpus?('s| is| are)? (fully |100% )?(utili[sz]ed|saturated|maxed|pegged)\b",
                                  # the trap's conclusion: the time is lost inside the kernels
                                  r"\bkernels? (must be|are|is) (slow|inefficient|the (problem|bottleneck))\b",
                                  r"\b(loss|time|gap) is (inside|in) the kernels\b"),
               "h2d_copy": (r"\bpin(ned)?[ _]memory\b.{0,40}\bnon_?blocking\b", r"\bnon_?blocking\b", r"\btransfer[- ]bound\b", r"\b(the )?(input|data|batch|h2d) (copy|transfer|movement)\b",
                r"\bh2d\b|\bhtod\b|host.to.device", r"\bmemcpy\b", r"\bthe copy\b",
                            r"\b(batch|input|the) (transfer|upload)\b"),
               "comm": (r"(ddp |nccl )?(communication|all-?reduce|nccl).{0,30}(slow|bottleneck|problem)",
                        r"\bbucket(_cap_mb| size| count|s)\b", r"\bcollective (latency|overhead)\b",
                        r"\b(the )?(ddp|nccl|comm) (side|tuning)\b", r"\bnccl_debug\b", r"\bcomm\w*\b.{0,30}\bgat\w+\b",
                        r"\b(all-?reduce|collective)s? (calls?|latency|overhead)\b",
                        r"\bproblem is (the )?(ddp |nccl )?(communication|comm\w*|all-?reduce|nccl|sync\w*)\b")},
        also_confirms=("nsys-nvtx-sum",),
    ),
    hints=(
        Hint("Who owns the idle",
             "While the compute stream is idle at the start of each step, which span is the main thread "
             "inside, and what are the DataLoader's worker processes doing?"),
        Hint("Rates before kernels",
             "Work out how fast the GPU consumes a batch once it has one, and how fast a batch is produced for "
             "it. Compare the two rates before you look inside any kernel, and size anything else that looks "
             "suspicious before blaming it."),
        Hint("One experiment settles it",
             "Run the step with synthetic in-memory data (synthetic-data) and compare its step time with the "
             "real run's."),
    ),
)
