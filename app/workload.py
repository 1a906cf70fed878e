"""Kernel sequences of real workloads: what one transformer layer launches, with FLOPs and bytes.

The names are the library kernels torch.profiler shows on each GPU generation
(cuBLAS, FlashAttention 2, PyTorch's elementwise and reduce kernels, the fused
Adam multi-tensor kernel). Durations come from a roofline per kernel; a scenario
scales a phase to the time its physics gives (FLOPs / achieved FLOP/s), so the
kernel mix keeps its shape while the phase keeps its total.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from app import physics
from app.trace.builder import KernelInfo, TraceBuilder

_EW = "void at::native::vectorized_elementwise_kernel<4, {f}, std::array<char*, {n}ul> >(int, {f}, std::array<char*, {n}ul>)"

ELEMENTWISE = {
    "add": _EW.format(f="at::native::CUDAFunctor_add<c10::BFloat16>", n=3),
    "mul": _EW.format(f="at::native::binary_internal::MulFunctor<c10::BFloat16>", n=3),
    "mul_f32": _EW.format(f="at::native::binary_internal::MulFunctor<float>", n=3),
    "pow": _EW.format(f="at::native::(anonymous namespace)::pow_tensor_scalar_kernel_impl<float, float>(at::TensorIteratorBase&, float)::{lambda(float)#1}", n=2),
    "rsqrt": _EW.format(f="at::native::rsqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}", n=2),
    "silu": _EW.format(f="at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}", n=2),
    "gelu": _EW.format(f="at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}", n=2),
    "neg": _EW.format(f="at::native::neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#11}::operator()() const::{lambda(c10::BFloat16)#1}", n=2),
    "copy": "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)",
    "mean": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4, 4>)",
    "sum": "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<float, at::native::sum_functor<c10::BFloat16, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4, 4> >(at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<float, at::native::sum_functor<c10::BFloat16, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4, 4>)",
    "cat": "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 3, 128, 1>(at::native::(anonymous namespace)::OpaqueType<2u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)",
    "layernorm": "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
    "layernorm_bwd": "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)",
    "embedding": "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)",
    "softmax_xent": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
    "fill": _EW.format(f="at::native::FillFunctor<float>", n=1),
}

FLASH = {
    "fwd": "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(flash::Flash_fwd_params)",
    "bwd": "void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, false, false, false, false, true, false, false>(flash::Flash_bwd_params)",
    "bwd_dot": "void flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> > >(flash::Flash_bwd_params)",
    "bwd_convert": "void flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> > >(flash::Flash_bwd_params, int)",
    "splitkv": "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(flash::Flash_fwd_params)",
    "splitkv_combine": "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, 4, 5, false>(flash::Flash_fwd_params)",
}

# cuBLAS kernel names per GPU generation, by role: large GEMMs, skinny or small ones.
# Layout suffix: forward "tn", data-grad "nn", weight-grad "nt".
GEMM = {
    "sm90": {
        "large": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_{l}_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
        "small": "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_{l}",
    },
    "sm80": {
        "large": "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_{l}",
        "small": "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_{l}",
    },
    "sm89": {
        "large": "sm89_xmma_gemm_bf16bf16_bf16f32_f32_{l}_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel",
        "small": "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_{l}",
    },
}

ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, "
        "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, "
        "double*, double, double, double, double, double, bool, bool*, bool*>(at::native::(anonymous namespace)::TensorListMetadata<4>, "
        "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, "
        "double*, double, double, double, double, double, bool, bool*, bool*)")

NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


@dataclass(frozen=True)
class KernelSpec:
    op: str  # the aten op (or autograd node) on the CPU that launches it
    kernel: str
    flops: float
    nbytes: float
    info: KernelInfo
    role: str = "ew"  # gemm, attn, ew: picks the efficiency the roofline uses
    shape: tuple[int, int, int] | None = None  # (M, N, K) of a GEMM
    elems: int | None = None  # elements an elementwise kernel writes: its PyTorch grid (pytorch_launch)


def gemm_name(arch: str, m: int, layout: str = "tn") -> str:
    size = "large" if m >= 1024 else "small"
    return GEMM[arch][size].format(l=layout)


def gemm_grid(m: int, n: int, tile_m: int, tile_n: int) -> tuple[int, int, int]:
    """A cuBLAS GEMM's grid: one CTA per tile_m x tile_n tile of the M x N output (the tile the
    kernel name carries), N along x as cuBLAS lays them out."""
    return (max(1, -(-n // tile_n)), max(1, -(-m // tile_m)), 1)


def _gemm(arch, op, m, n, k, layout="tn") -> KernelSpec:
    tile_m, tile_n = (128, 256) if m >= 1024 else (128, 64)
    grid = gemm_grid(m, n, tile_m, tile_n)
    info = KernelInfo(grid=grid, block=(384 if arch == "sm90" else 256, 1, 1), registers_per_thread=168,
                      shared_memory=213_248 if arch == "sm90" else 73_728)
    return KernelSpec(op, gemm_name(arch, m, layout), physics.gemm_flops(m, n, k),
                      physics.gemm_bytes(m, n, k), info, "gemm", (m, n, k))


def _ew(op, key, elems, reads=2, writes=1, elem_bytes=2) -> KernelSpec:
    blocks = max(1, min(65_535, elems // 512))
    return KernelSpec(op, ELEMENTWISE[key], float(elems), float(elems * elem_bytes * (reads + writes)),
                      KernelInfo(grid=(blocks, 1, 1), block=(128, 1, 1), registers_per_thread=24), "ew", elems=elems)


def transformer_layer(arch: str, tokens: int, seq: int, hidden: int, ffn: int, kv_hidden: int,
                      *, norm: str = "rms", act: str = "silu", causal: bool = True,
                      backward: bool = False) -> list[KernelSpec]:
    """The kernels one eager-mode transformer layer launches (forward, or backward).

    tokens = batch x seq rows of the activations. `norm="rms"` is Llama's eager RMSNorm
    (pow, mean, rsqrt, two muls); "ln" is nn.LayerNorm's single fused kernel.
    """
    t, h = tokens, hidden
    att_flops = (2 if causal else 4) * t * seq * h  # QK^T and PV, halved when causal
    heads = max(1, h // 128)
    flash_info = KernelInfo(grid=(max(1, seq // 128), max(1, t // seq), heads), block=(128, 1, 1),
                            registers_per_thread=255, shared_memory=49_152)
    qkv_n = h + 2 * kv_hidden
    if not backward:
        specs: list[KernelSpec] = []

        def norm_fwd():
            if norm == "rms":
                specs.extend([_ew("aten::pow", "pow", t * h, 1, 1, 4), _ew("aten::mean", "mean", t * h, 1, 0, 4),
                              _ew("aten::rsqrt", "rsqrt", t, 1, 1, 4), _ew("aten::mul", "mul_f32", t * h, 2, 1, 4),
                              _ew("aten::mul", "mul", t * h)])
            else:
                specs.append(_ew("aten::native_layer_norm", "layernorm", t * h, 1, 1))

        norm_fwd()
        specs.append(_gemm(arch, "aten::mm", t, qkv_n, h))
        if causal:  # rotary embedding in eager: q*cos + rotate_half(q)*sin, same for k
            specs.extend([_ew("aten::mul", "mul", t * h), _ew("aten::neg", "neg", t * h // 2, 1, 1),
                          _ew("aten::cat", "cat", t * h, 1, 1), _ew("aten::add", "add", t * h)])
        specs.append(KernelSpec("FlashAttnFunc", FLASH["fwd"], att_flops, 2.0 * t * (h + qkv_n), flash_info, "attn"))
        specs.append(_gemm(arch, "aten::mm", t, h, h))
        specs.append(_ew("aten::add", "add", t * h))
        norm_fwd()
        if act == "silu":
            specs.append(_gemm(arch, "aten::mm", t, 2 * ffn, h))
            specs.extend([_ew("aten::silu", "silu", t * ffn, 1, 1), _ew("aten::mul", "mul", t * ffn)])
        else:
            specs.append(_gemm(arch, "aten::addmm", t, ffn, h))
            specs.append(_ew("aten::gelu", "gelu", t * ffn, 1, 1))
        specs.append(_gemm(arch, "aten::mm", t, h, ffn))
        specs.append(_ew("aten::add", "add", t * h))
        return specs

    ev = "autograd::engine::evaluate_function: "
    specs = []

    def gemm_bwd(node, m, n, k):
        specs.append(_gemm(arch, ev + node, m, k, n, "nn"))  # dX = dY @ W
        specs.append(_gemm(arch, ev + node, n, k, m, "nt"))  # dW = dY^T @ X

    def norm_bwd():
        if norm == "rms":
            specs.extend([_ew(ev + "MulBackward0", "mul", t * h), _ew(ev + "MulBackward0", "mul_f32", t * h, 2, 1, 4),
                          _ew(ev + "RsqrtBackward0", "mul_f32", t, 2, 1, 4), _ew(ev + "MeanBackward1", "mul_f32", t * h, 1, 1, 4),
                          _ew(ev + "PowBackward0", "mul_f32", t * h, 2, 1, 4), _ew(ev + "ToCopyBackward0", "copy", t * h, 1, 1)])
        else:
            specs.append(_ew(ev + "NativeLayerNormBackward0", "layernorm_bwd", t * h, 3, 1))

    specs.append(_ew(ev + "AddBackward0", "add", t * h))
    gemm_bwd("MmBackward0", t, h, ffn)
    if act == "silu":
        specs.extend([_ew(ev + "MulBackward0", "mul", t * ffn), _ew(ev + "MulBackward0", "mul", t * ffn),
                      _ew(ev + "SiluBackward0", "silu", t * ffn)])
        gemm_bwd("MmBackward0", t, 2 * ffn, h)
    else:
        specs.append(_ew(ev + "GeluBackward0", "gelu", t * ffn))
        gemm_bwd("AddmmBackward0", t, ffn, h)
    norm_bwd()
    specs.append(_ew(ev + "AddBackward0", "add", t * h))
    gemm_bwd("MmBackward0", t, h, h)
    specs.append(KernelSpec(ev + "FlashAttnFuncBackward", FLASH["bwd_dot"], 2.0 * t * h, 6.0 * t * h, flash_info, "ew"))
    specs.append(KernelSpec(ev + "FlashAttnFuncBackward", FLASH["bwd"], 2.5 * att_flops, 4.0 * t * (h + qkv_n), flash_info, "attn"))
    specs.append(KernelSpec(ev + "FlashAttnFuncBackward", FLASH["bwd_convert"], float(t * h), 6.0 * t * h, flash_info, "ew"))
    if causal:
        specs.extend([_ew(ev + "MulBackward0", "mul", t * h), _ew(ev + "CatBackward0", "neg", t * h // 2, 1, 1),
                      _ew(ev + "AddBackward0", "add", t * h)])
    gemm_bwd("MmBackward0", t, qkv_n, h)
    norm_bwd()
    return specs


# F.scaled_dot_product_attention's flash backend: the op that launches its forward kernel and its
# backward node (app/trace/optree.py lays out the ops between).
SDPA_FORWARD, SDPA_BACKWARD = "aten::scaled_dot_product_attention", "ScaledDotProductFlashAttentionBackward0"


def sdpa_flash(specs: list[KernelSpec], head_dim: int = 128, causal: bool = True, seq: int = 0) -> list[KernelSpec]:
    """The same kernels with attention through F.scaled_dot_product_attention's flash backend
    (timm's fused_attn, HF's sdpa) instead of the flash_attn package: PyTorch vendors
    FlashAttention-2 in aten/src/ATen/native/transformers/cuda/flash_attn under namespace
    pytorch_flash, so the kernels are FA2's under that namespace (a profile reads `void
    pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<...>, ...>(pytorch_flash::Flash_fwd_params)`),
    launched by aten::scaled_dot_product_attention in forward and by the layer's one
    ScaledDotProductFlashAttentionBackward0 node in backward (app/trace/optree.py). The
    template arguments follow the call: the tile FA2 picks for the head dimension, and
    Is_causal / Is_even_MN from the mask and the sequence (a ViT's 197 tokens are not a
    multiple of its 128-row tile)."""
    out = []
    for s in specs:
        if s.op == "FlashAttnFunc":
            s = replace(s, op=SDPA_FORWARD, kernel=_pytorch_flash(s.kernel, head_dim, causal, seq))
        elif s.op.endswith(": FlashAttnFuncBackward"):
            s = replace(s, op=s.op[:-len("FlashAttnFuncBackward")] + SDPA_BACKWARD,
                        kernel=_pytorch_flash(s.kernel, head_dim, causal, seq))
        out.append(s)
    return out


# FlashAttention-2's tiles on A100/H100 (>= 144 KB of shared memory per block), no dropout, by
# the head dimension it rounds up to (flash_fwd_launch_template.h, flash_bwd_launch_template.h):
# forward (kBlockM, kBlockN, kNWarps); backward (kBlockM, kBlockN, kNWarps, AtomLayoutMSdP,
# AtomLayoutNdKV, AtomLayoutMdQ, Is_V_in_regs).
_FA2_TILES = {64: ("128, 128, 4", "128, 128, 8, 4, 4, 4, false"),
              96: ("128, 64, 4", "64, 128, 8, 2, 4, 4, true"),
              128: ("128, 64, 4", "64, 128, 8, 2, 4, 2, false")}


def _pytorch_flash(kernel: str, head_dim: int = 128, causal: bool = True, seq: int = 0) -> str:
    if kernel not in FLASH.values():
        raise ValueError(f"not a FlashAttention-2 kernel: {kernel[:60]}")
    hd = next(d for d in sorted(_FA2_TILES) if d >= head_dim)
    fwd, bwd = _FA2_TILES[hd]
    bwd_base = ", ".join(bwd.split(", ")[:3])
    name = (kernel.replace("flash::", "pytorch_flash::")
            # the derived traits and their Flash_kernel_traits base both name the tile
            .replace("<128, 128, 64, 4,", f"<{hd}, {fwd},")
            .replace("<128, 64, 128, 8, 2, 4, 2, false,", f"<{hd}, {bwd},")
            .replace("Flash_kernel_traits<128, 64, 128, 8,", f"Flash_kernel_traits<{hd}, {bwd_base},"))
    if name.startswith("void pytorch_flash::flash_fwd_kernel<"):
        # <Traits, Is_dropout, Is_causal, Is_local, Has_alibi, Is_even_MN, Is_even_K, ...>
        block_m, block_n = (int(x) for x in fwd.split(", ")[:2])
        even_mn = not seq or (seq % block_m == 0 and seq % block_n == 0)
        traits, flags = name.rsplit(" >, ", 1)
        bools = flags.split(">(")[0].split(", ")
        bools[1], bools[4] = str(causal).lower(), str(even_mn).lower()
        name = f"{traits} >, {', '.join(bools)}>(pytorch_flash::Flash_fwd_params)"
    return name


EFFICIENCY = {"gemm": (0.70, 0.85), "attn": (0.55, 0.80), "ew": (1.0, 0.70)}  # (compute, memory) share of peak


def roofline_weights_us(specs: list[KernelSpec], gpu: physics.Gpu, clock_ratio: float = 1.0) -> np.ndarray:
    """Each kernel's roofline time with typical achieved efficiencies, µs; at least 2 µs
    (the shortest kernels torch.profiler records on these GPUs take 1.5-3 µs)."""
    out = np.empty(len(specs))
    for i, s in enumerate(specs):
        ce, me = EFFICIENCY[s.role]
        out[i] = max(2.0, physics.roofline_us(s.flops, s.nbytes, gpu, ce, me, clock_ratio))
    return out


def scaled_durations_ns(weights_us: np.ndarray, total_ms: float, rng: np.random.Generator,
                        jitter: float = 0.03, floor_us: float = 1.5) -> np.ndarray:
    """Spread `total_ms` over kernels in proportion to their roofline weights, with
    per-kernel jitter; the sum stays exactly `total_ms` (to the ns)."""
    w = weights_us * rng.normal(1.0, jitter, len(weights_us)).clip(0.8, 1.2)
    ns = np.maximum(w / w.sum() * total_ms * 1e6, floor_us * 1e3)
    ns = np.floor(ns).astype(np.int64)
    ns[np.argmax(ns)] += int(round(total_ms * 1e6)) - int(ns.sum())
    return ns


def intern(b: TraceBuilder, specs: list[KernelSpec]) -> tuple[np.ndarray, np.ndarray]:
    """Name ids of each spec's op and kernel, registering the kernels' launch configs."""
    ops = np.fromiter((b.name_id(s.op) for s in specs), np.int32, len(specs))
    kernels = np.fromiter((b.kernel(s.kernel, s.info) for s in specs), np.int32, len(specs))
    return ops, kernels


# PyTorch's vectorized elementwise launch (aten/src/ATen/native/cuda/CUDALoops.cuh,
# launch_vectorized_kernel): 128 threads of 4 elements, ceil(N / 512) blocks, no cap (grid.x
# reaches 2^31 - 1). Version 1 of the scenarios capped it at 65,535 and rounded down; they keep
# that in their spec's own info, and the per-launch configurations below (which only the
# versions made since draw) launch it as PyTorch does.
_VECTORIZED = _EW.split("{")[0]
EW_THREADS, EW_ELEMS_PER_BLOCK = 128, 512


def pytorch_launch(s: KernelSpec) -> KernelInfo:
    """The launch configuration PyTorch picks for this spec: for a vectorized elementwise kernel
    whose element count is known, ceil(N / 512) blocks of 128 threads; else the spec's own."""
    if s.elems and s.kernel.startswith(_VECTORIZED):
        blocks = -(-s.elems // EW_ELEMS_PER_BLOCK)
        return replace(s.info, grid=(blocks, 1, 1), block=(EW_THREADS, 1, 1))
    return s.info


def launch_configs(b: TraceBuilder, specs: list[KernelSpec]) -> np.ndarray:
    """Each spec's own launch configuration (grid from its shape), for launch_phase's kernel_cfg:
    a kernel name runs with the grid its problem needs, not its first launch's."""
    return np.fromiter((b.kernel_config(pytorch_launch(s)) for s in specs), np.int32, len(specs))


def kernel_table(specs: list[KernelSpec], dur_ns: np.ndarray, top: int = 5) -> list[dict]:
    """Per kernel name: instances and time, with the FLOPs, bytes and GEMM shape of its
    heaviest instance; the inputs an Nsight Compute section is computed from."""
    rows: dict[str, dict] = {}
    for s, d in zip(specs, np.asarray(dur_ns).tolist()):
        r = rows.setdefault(s.kernel, {"kernel": s.kernel, "op": s.op, "role": s.role, "instances": 0,
                                       "total_us": 0.0, "flops": 0.0, "bytes": 0.0, "dur_us": 0.0,
                                       "shape": None})
        r["instances"] += 1
        r["total_us"] += d / 1e3
        if s.flops >= r["flops"]:
            r.update(flops=s.flops, bytes=s.nbytes, dur_us=d / 1e3, shape=list(s.shape) if s.shape else None)
    out = sorted(rows.values(), key=lambda r: -r["total_us"])[:top]
    for r in out:
        r["total_us"] = round(r["total_us"], 3)
        r["mean_us"] = round(r["total_us"] / r["instances"], 3)
        r["dur_us"] = round(r["dur_us"], 3)
    return out
