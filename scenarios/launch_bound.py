"""Case 3: launch-bound batch-1 decode.

The pathology: eager PyTorch decoding one token at a time. At batch 1 every kernel is
tiny (the weight GEMVs aside, ~2 µs elementwise kernels), while issuing each one costs
the CPU ~25 µs of Python, dispatcher and cudaLaunchKernel. The GPU finishes each kernel
before the next launch lands, so it idles between every pair of kernels: about two
thirds of every token is launch overhead, spread over ~1,100 small gaps.

What a strong read notices: one ProfilerStep# is one token; there is no big gap and no
dominant kernel but a picket fence (~1,100 kernels per token, mean ~10 µs, ~15 µs of idle
between consecutive kernels); kernels x mean = busy and busy + idle = the token; the
main thread is a solid wall of cpu_op + cudaLaunchKernel that never gets ahead of the
GPU; the GEMVs already run at ~90% of DRAM bandwidth (the weights are INT8: FP16 would
need 16 ms of reads, more than the whole busy time), so "tune the small GEMMs" attacks
the wrong third; nsys cuda_api_sum counts one cudaLaunchKernel per kernel; the fix is
CUDA Graphs on the decode step, then fusion of the elementwise soup.

Physics: batch-1 decode reads every weight once per token, so each GEMV takes
weight bytes / (DRAM bandwidth x efficiency) + ~1 µs; attention (FlashAttention-2
split-KV with in-kernel KV append) reads the KV cache at the context length; RMSNorm
(pow, mean, rsqrt, mul, mul), rotary (mul, neg, cat, mul, add for q and for k), residual
adds and SiLU x up are separate elementwise launches at the GPU's small-kernel floor
(1 µs + 1500 µs·MHz / SM clock: 1.6 µs on L40S, 1.8 on H100, 2.1 on A100); the sampling
tail of HF generate (repetition penalty, temperature, top-k, softmax, multinomial,
stopping criteria) with the embedding and rotary cos/sin prologue add 44 launches per
token (flash_attn_with_kvcache is a pybind call; its cpu_op is labelled
flash_attn::fwd_kvcache), and `aten::item` copies the token back
with a sync. The CPU issues each op for its drawn framework time plus cudaLaunchKernel;
app.trace.schedule's max-plus recurrence places each kernel at max(launch landed,
previous kernel done): the picket fence emerges, it is not drawn. Fix arithmetic: a
graph replays kernels ~0.4 µs apart plus ~60 µs of per-token host work; torch.compile
fuses each layer's 24 elementwise kernels into 4 and the 44-kernel tail into 8, each
fused kernel 1.25x the mean elementwise kernel.

Canonical: the seed's 1xL40S, 7B model (Llama-2 shape: 32 layers, hidden 4096, MHA,
32k vocabulary; the FFN is sized so the model has 7.0B parameters: 6.94B, FFN 11,520)
with INT8 weights (6.9 GB), context 512, eager PyTorch. It keeps the seed's 28 ms
token and ~1,100 kernels per token, the weight-floor arithmetic (6.9 GB / 864 GB/s =
8.0 ms; FP16 13.9 GB = 16.1 ms). Where the seed does not close, the model's numbers
stand (the key states them):
- busy 10.8 ms, not 9: 7 GB of INT8 weights take 8.0 ms at 100% of 864 GB/s, and the
  843 small kernels (elementwise, split-KV combine, sampling) add >= 843 x 1.6 µs =
  1.3 ms on top, so 9 ms would need the GEMVs above the bandwidth peak; at a realistic
  92% the GEMVs alone take 8.8 ms. (The seed's own "roofline says ~11 ms" agrees with
  the model.) Hence mean kernel 9.8 µs (not 8), idle 17.1 ms (not 19) and 15.4 µs
  between kernels (not 17); 1,100 x 9.8 µs = 10.8 ms and 10.8 + 17.1 = 28 ms still close.
- after the fix 9.9 ms/token (2.8x), not 8 ms (3.5x): a token cannot beat its weight
  reads, 8.8 ms of GEMVs plus 0.5 ms of attention, and the seed's 8 ms sits below the
  GEMVs at any efficiency under 100%. CUDA Graphs alone: 11.3 ms (idle 17.1 -> 0.5 ms,
  the seed's figure); fusion: 1,100 -> 425 kernels, busy 10.8 -> 9.7 ms.
- "total API time ~ wall time": cudaLaunchKernel itself is ~6.6 ms of the 28 (1,100 x
  ~6 µs); what fills the wall is the main thread (cpu_op + launch), busy >99% of it.

Seeds draw L40S/A100/H100 (sm89/sm80/sm90 kernel names), 3-13B models, INT8 (TensorRT-LLM
weight-only GEMV), FP8 (torch._scaled_mm, activations cast per linear: 8 more kernels per
layer; not on A100) or BF16 (cuBLAS gemv) weights, GQA 1/4/8, 32k or 128k vocabularies,
context 128-4096 and the CPU costs; a draw whose busy time would exceed 40% of the token
is shrunk (smaller model, then quantized weights) so it stays launch-bound.

Versions: 1, first model. 2: the host's side as real traces show it
(app/hosttime.MEASURED): cudaLaunchKernel with its long tail (its mean still `launch_us`),
the kernel's start after its launch returns varying instead of a constant 3 µs, and a
quarter of each op's Python run between ops instead of inside them (no two ops touching),
each op's CPU cost what it was. 3 (current), from the fidelity page (app/analysis/fidelity.py):
- the Python between ops is 70% of each op's framework time, not a quarter: version 2's
  4.6 µs median between ops lay under every real trace's (HTA: 22 µs; eager training
  ranks 140-190 µs); what happens inside an aten op (dispatch, allocation, the launch) is
  the smaller part. Each op's CPU cost, the case's physics, is unchanged, so the token is;
  the ops now cover about half the main thread, Python the rest;
- back-to-back kernels sit apart as hosttime.MEASURED_2 draws (two populations, with the
  real 3-20 µs tail), not uniform on 0.7-1.4 µs;
- the nvidia-smi trap on NVML's real definition: utilization.gpu is the share of each
  sample period in which a kernel ran, so here it reads about the busy share, well under
  100%; and a high reading would still say nothing about SM occupancy or efficiency;
- draws keep the GPU busy at least 22% of each token (the gain after the fix at most ~6x;
  version 2 drew up to 14.8x, past what graphed, fused decode reaches on real GPUs:
  gpt-fast reports ~4x for torch.compile over eager at batch 1), growing the model first;
- the op tree around each launch (app/trace/optree.py, "the op trees" below): aten::linear's
  for BF16, the INT8 GEMV's torch.ops.trtllm.weight_only_quant_gemm and FP8's aten::_scaled_mm
  with record_shapes' Input Dims, casts as aten::to > aten::_to_copy > aten::empty_strided +
  aten::copy_, softmax, torch.full and rsub with the op they call; each within the CPU time
  the flat op had, the main thread's covered time unchanged.
Versions 1 and 2 are still built for what was made with them.

The fixed build (version 3, `fixed=True`; `tracedojo generate launch-bound --fixed`): the same
instance with the key's fix applied, the decode step compiled and captured: per token a short
prologue, one cudaGraphLaunch, and on the stream the GEMVs and attention kernels as before
with each run of elementwise kernels fused into one Triton kernel (425 kernels per token on
the canonical instance, ~0.4 µs apart), then the token's copy back. Its token measures the
key's expected step (canonical 9.96 ms against 9.94).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import model_validator

from app import feasibility, hosttime, physics, training, workload
from app.scenario import (Built, Hint, Scenario, ScenarioParams, building, fixed, gpu_clock_report, make_key,
                          new_builder, obs, param)
from app.trace import intervals, optree
from app.trace.builder import Kind, KernelInfo, expect_events
from app.trace.emit import graph_replay, launch_phase
from app.workload import KernelSpec
from app.scoring.rubric import Rubric

HEAD_DIM = 128
GRAPH_GAP_US = physics.CUDA_GRAPH_NODE_GAP_US
GRAPH_HOST_MS = physics.CUDA_GRAPH_HOST_MS
FUSED_POINTWISE_PER_LAYER = 4  # torch.compile: rmsnorm, rotary, add+rmsnorm, silu*mul
FUSED_TAIL_KERNELS = 8  # embedding, cos/sin, final norm, logits processing, top-k x2, sample, stop
FUSED_KERNEL_FACTOR = 1.25  # a fused pointwise kernel does a few ops' work: 1.25x a lone one
DRAW_MAX_BUSY_SHARE = 0.40  # draws keep kernel time under 40% of the token (idle > busy)
DRAW_MIN_BUSY_SHARE = 0.22  # version 3: and over 22% (a gain after the fix of at most ~6x)
MAX_BUSY_SHARE = 0.48  # overrides past this are no longer the launch-bound case
GEMV_FIXED_US = 1.0  # ramp-up and tail of a weight GEMV on top of its bytes
ATTN_FIXED_US = 2.5
ATTN_MEM_EFF = 0.70  # split-KV attention's share of DRAM peak at decode
EW_MEM_EFF = 0.50
STEP_FIXED_MS = 0.15  # per token outside the launch wall: prologue, item sync, loop

_EW = ("void at::native::vectorized_elementwise_kernel<4, {f}, std::array<char*, {n}ul> >"
       "(int, {f}, std::array<char*, {n}ul>)")
_EWK = {
    "cos": _EW.format(f="at::native::cos_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::"
                        "{lambda()#2}::operator()() const::{lambda(float)#1}", n=2),
    "sin": _EW.format(f="at::native::sin_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::"
                        "{lambda()#2}::operator()() const::{lambda(float)#1}", n=2),
    "mul_scalar": _EW.format(f="at::native::BUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >", n=2),
    "mul_bf16_scalar": _EW.format(f="at::native::BUnaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
                                    "at::native::binary_internal::MulFunctor<float> >", n=2),
    "div": _EW.format(f="at::native::BinaryFunctor<float, float, float, at::native::binary_internal::DivFunctor<float> >", n=3),
    "lt": _EW.format(f="at::native::BinaryFunctor<float, float, bool, at::native::(anonymous namespace)::CompareLTFunctor<float> >", n=3),
    "lt_scalar": _EW.format(f="at::native::AUnaryFunctor<float, float, bool, at::native::(anonymous namespace)::CompareLTFunctor<float> >", n=2),
    "mul_long": _EW.format(f="at::native::binary_internal::MulFunctor<long>", n=3),
    "rsub_long": _EW.format(f="at::native::(anonymous namespace)::CUDAFunctorOnSelf_add<long>", n=2),
    "add_long": _EW.format(f="at::native::CUDAFunctor_add<long>", n=3),
    "add_long_scalar": _EW.format(f="at::native::CUDAFunctorOnSelf_add<long>", n=2),
    "eq_scalar": _EW.format(f="at::native::AUnaryFunctor<long, long, bool, at::native::(anonymous namespace)::CompareEqFunctor<long> >", n=2),
    "or": _EW.format(f="at::native::BitwiseOrFunctor<bool>", n=3),
    "and": _EW.format(f="at::native::BitwiseAndFunctor<bool>", n=3),
    "not": _EW.format(f="at::native::bitwise_not_kernel_cuda(at::TensorIteratorBase&)::{lambda(bool)#1}", n=2),
    "fill_bool": _EW.format(f="at::native::FillFunctor<bool>", n=1),
    "where": ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::(anonymous namespace)::"
              "where_kernel_impl(at::TensorIterator&)::{lambda()#1}::operator()() const::{lambda()#8}::operator()() const::"
              "{lambda(bool, float, float)#1}>(at::TensorIteratorBase&, at::native::(anonymous namespace)::where_kernel_impl("
              "at::TensorIterator&)::{lambda()#1}::operator()() const::{lambda()#8}::operator()() const::"
              "{lambda(bool, float, float)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::"
              "(anonymous namespace)::where_kernel_impl(at::TensorIterator&)::{lambda()#1}::operator()() const::{lambda()#8}::"
              "operator()() const::{lambda(bool, float, float)#1}>(at::TensorIteratorBase&, at::native::(anonymous namespace)::"
              "where_kernel_impl(at::TensorIterator&)::{lambda()#1}::operator()() const::{lambda()#8}::operator()() const::"
              "{lambda(bool, float, float)#1} const&)::{lambda(int)#1})"),
    "masked_fill": ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::(anonymous namespace)::"
                    "masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#7}::"
                    "operator()() const::{lambda(float, bool)#1}>(at::TensorIteratorBase&, at::native::(anonymous namespace)::"
                    "masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#7}::"
                    "operator()() const::{lambda(float, bool)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<"
                    "at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::"
                    "operator()() const::{lambda()#7}::operator()() const::{lambda(float, bool)#1}>(at::TensorIteratorBase&, "
                    "at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::"
                    "operator()() const::{lambda()#7}::operator()() const::{lambda(float, bool)#1} const&)::{lambda(int)#1})"),
    "gather": ("void at::native::_scatter_gather_elementwise_kernel<128, 4, at::native::_cuda_scatter_gather_internal_kernel<false, float>::"
               "operator()<at::native::TensorAssign>(at::TensorIterator&, long, long, long, at::native::TensorAssign const&)::"
               "{lambda(int)#1}>(int, at::native::_cuda_scatter_gather_internal_kernel<false, float>::operator()<at::native::"
               "TensorAssign>(at::TensorIterator&, long, long, long, at::native::TensorAssign const&)::{lambda(int)#1})"),
    "scatter": ("void at::native::_scatter_gather_elementwise_kernel<128, 4, at::native::_cuda_scatter_gather_internal_kernel<true, float>::"
                "operator()<at::native::TensorAssign>(at::TensorIterator&, long, long, long, at::native::TensorAssign const&)::"
                "{lambda(int)#1}>(int, at::native::_cuda_scatter_gather_internal_kernel<true, float>::operator()<at::native::"
                "TensorAssign>(at::TensorIterator&, long, long, long, at::native::TensorAssign const&)::{lambda(int)#1})"),
    "topk_gather": ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float const, "
                    "unsigned int>, unsigned int, unsigned int, bool, unsigned int, unsigned int, at::cuda::detail::TensorInfo<float, "
                    "unsigned int>, unsigned int, at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, float*)"),
    "topk_sort": ("void at::native::bitonicSortKVInPlace<2, -1, 16, 16, float, long, at::native::GTOp<float, true>, unsigned int>("
                  "at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, unsigned int, unsigned int, "
                  "at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, at::native::GTOp<float, true>)"),
    "softmax": ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::"
                "SoftMaxForwardEpilogue>(float*, float const*, int)"),
    "exponential": ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, at::native::templates::"
                    "cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, at::CUDAGeneratorImpl*)::"
                    "{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(curandStatePhilox4_32_10*)#2}, "
                    "at::native::(anonymous namespace)::distribution_nullary_kernel<float, float, float4, at::CUDAGeneratorImpl*, "
                    "at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, "
                    "at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::"
                    "{lambda(curandStatePhilox4_32_10*)#2}>(at::TensorIteratorBase&, at::CUDAGeneratorImpl*, ...)::"
                    "{lambda(int, float)#1}>(long, at::PhiloxCudaState, ...)"),
    "argmax": ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4> >"
               "(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4>)"),
    "max_long": ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<long, at::native::func_wrapper_t<long, at::native::"
                 "max_values_kernel_cuda_impl<long, long>(at::TensorIterator&)::{lambda(long, long)#1}>, unsigned int, long, 4, 4> >("
                 "at::native::ReduceOp<long, at::native::func_wrapper_t<long, at::native::max_values_kernel_cuda_impl<long, long>("
                 "at::TensorIterator&)::{lambda(long, long)#1}>, unsigned int, long, 4, 4>)"),
    "cat_long": ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<8u>, "
                 "unsigned int, 2, 64, 64>(at::native::(anonymous namespace)::OpaqueType<8u>*, at::native::(anonymous namespace)::"
                 "CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<8u>, unsigned int, 64, 64>, "
                 "at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)"),
    "sgemm_small": ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true, cublasGemvTensorStridedBatched<float const>, "
                    "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams<"
                    "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
                    "cublasGemvTensorStridedBatched<float>, float>)"),
}

# Weight GEMV kernels at M=1, per weight format and GPU generation.
_TRT_WO = ("void tensorrt_llm::kernels::weight_only::kernel<tensorrt_llm::kernels::weight_only::KernelDetails<"
           "tensorrt_llm::kernels::weight_only::BF16DetailsA, tensorrt_llm::kernels::weight_only::Int8DetailsW, "
           "tensorrt_llm::kernels::weight_only::{layout}, true, 64>, 1, 8, 128, 0, false, false, false, false, __nv_bfloat16>("
           "__nv_bfloat16*, __nv_bfloat16*, unsigned char*, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, "
           "float, int, int, int)")
_GEMV_BF16 = ("void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, false, false, "
              "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<"
              "__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16>, float> >(cublasGemvParamsEx<int, "
              "cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
              "cublasGemvTensorStridedBatched<__nv_bfloat16>, float>, float, float)")
_GEMM_FP8 = {
    "sm89": "sm89_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize64x64x128_stage4_warpsize2x2x1_tensor16x8x32_kernel",
    "sm90": "sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize64x64x128_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
}
_DTYPE_LABEL = {"int8": "INT8", "fp8": "FP8", "bf16": "BF16"}
_DTYPE_BYTES = {"int8": 1, "fp8": 1, "bf16": 2}


class Params(ScenarioParams):
    gpu: Literal["L40S", "A100", "H100"] = param("L40S", unit="GPU model", choices=["L40S", "A100", "H100"])
    model_params_b: float = param(7.0, unit="billion parameters (Llama-style dense decoder)", ge=1.0, le=34.0,
                                  draw=(3.0, 13.0))
    weight_dtype: Literal["int8", "fp8", "bf16"] = param("int8", unit="weight format of the linear layers",
                                                         choices=["int8", "fp8", "bf16"])
    gqa_groups: int = param(1, unit="query heads per KV head (1 = MHA)", ge=1, le=8, choices=[1, 4, 8])
    vocab: int = param(32_000, unit="vocabulary size (tokens)", ge=1_000, le=256_000, choices=[32_000, 128_256])
    context_len: int = param(512, unit="tokens in the KV cache at the first profiled token", ge=16, le=32_768,
                             draw=(128, 4096))
    gemv_mem_eff: float = param(0.92, unit="fraction of DRAM peak the weight GEMVs reach", ge=0.5, le=0.97,
                                draw=(0.86, 0.94))
    op_overhead_us: float = param(17.2, unit="µs of Python + dispatcher CPU time per op before its launch", ge=3.0,
                                  le=100.0, draw=(13.0, 22.0))
    launch_us: float = param(6.0, unit="µs per cudaLaunchKernel call (host side)", ge=2.0, le=30.0, draw=(4.5, 8.0))
    tokens: int = param(6, unit="decode tokens (ProfilerStep#) in the trace", ge=3, le=2000)

    @classmethod
    def canonical(cls) -> "Params":
        """The seed's case 3: 1xL40S, 7B model with INT8 weights, batch-1 eager decode, 28 ms/token."""
        return cls()

    def refusal(self) -> str | None:
        """Version 3: an override whose decode does not fit 90% of the one GPU's memory: the linear
        weights in their format, the embedding and lm_head in bf16, the bf16 KV cache at the last
        profiled token, and the runtime (draws stay within 13B, which fits everywhere)."""
        if building() < 3:
            return None
        s = _shape(self.model_params_b, self.gqa_groups, self.vocab)
        kv_tokens = self.context_len + self.tokens
        return feasibility.needs(
            f"a {self.model_params_b:g}B decode with {_DTYPE_LABEL[self.weight_dtype]} weights and "
            f"{kv_tokens:,} tokens of context on one {self.gpu}", physics.GPUS[self.gpu],
            [(f"{_DTYPE_LABEL[self.weight_dtype]} linear weights", s["linear_params"] * _DTYPE_BYTES[self.weight_dtype]),
             ("bf16 embedding, lm_head and norms", (s["params"] - s["linear_params"]) * physics.BF16_BYTES),
             ("bf16 KV cache", 2 * kv_tokens * s["kv_hidden"] * s["layers"] * physics.BF16_BYTES),
             ("CUDA context and workspaces", feasibility.RUNTIME_BYTES)])

    @model_validator(mode="after")
    def _still_launch_bound(self) -> "Params":
        if self.weight_dtype == "fp8" and self.gpu == "A100":
            raise ValueError("A100 has no FP8 tensor cores (torch._scaled_mm needs sm89+): use int8 or bf16")
        share = _busy_share(self.model_dump())
        if share > MAX_BUSY_SHARE:
            raise ValueError(f"these params make the GPU busy {share:.0%} of each token: not launch-bound "
                             f"(keep it under {MAX_BUSY_SHARE:.0%}: a smaller model, quantized weights or a faster GPU)")
        return self

    @classmethod
    def adjust_draw(cls, values: dict) -> dict:
        """Keep a uniform draw launch-bound: no FP8 on A100, and shrink what would keep the GPU busy."""
        if values["gpu"] == "A100" and values["weight_dtype"] == "fp8":
            values["weight_dtype"] = "int8"
        while _busy_share(values) > DRAW_MAX_BUSY_SHARE:
            if values["model_params_b"] > 3.0:
                values["model_params_b"] = max(3.0, round(values["model_params_b"] - 0.5, 4))
            elif values["weight_dtype"] == "bf16":
                values["weight_dtype"] = "int8"
            else:
                values["op_overhead_us"] = round(values["op_overhead_us"] + 1.0, 4)
        if building() >= 3:  # a GPU so idle that the fix would gain past ~5x: more weights to read
            while _busy_share(values) < DRAW_MIN_BUSY_SHARE:
                if values["model_params_b"] < 13.0:
                    values["model_params_b"] = min(13.0, round(values["model_params_b"] + 0.5, 4))
                elif values["weight_dtype"] != "bf16":
                    values["weight_dtype"] = "bf16"
                else:
                    values["op_overhead_us"] = round(values["op_overhead_us"] - 1.0, 4)
        return values


# -- the model and its kernels -------------------------------------------------------

def _shape(model_params_b: float, gqa_groups: int, vocab: int) -> dict:
    """Llama-style dimensions: 32 layers at 7B, 40 at 13B; hidden a multiple of 512
    (params ~ 13 x layers x hidden^2 with embeddings); the FFN takes the rest of the
    parameter budget, rounded down to 256."""
    p = model_params_b * 1e9
    layers = int(np.clip(round(32 + 1.27 * (model_params_b - 7.0)), 16, 80))
    hidden = 512 * max(2, round(math.sqrt(p / (13 * layers)) / 512))
    heads = hidden // HEAD_DIM
    kv_heads = max(1, heads // gqa_groups)
    kv_hidden = kv_heads * HEAD_DIM
    attn = 2 * hidden * hidden + 2 * hidden * kv_hidden
    ffn = 256 * int((p - 2 * vocab * hidden - layers * attn) / (3 * layers * hidden) // 256)
    ffn = int(np.clip(ffn, 2 * hidden, 6 * hidden))
    linear = layers * (attn + 3 * hidden * ffn)
    params = linear + 2 * vocab * hidden + (2 * layers + 1) * hidden
    return {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads, "kv_hidden": kv_hidden,
            "ffn": ffn, "vocab": vocab, "params": params, "linear_params": linear}


def _ew(op: str, name: str, elems: int, elem_bytes: int = 2, rw: int = 3, fmult: float = 1.0,
        block: int = 128) -> tuple[KernelSpec, float]:
    blocks = max(1, min(65_535, elems // (4 * block)))
    info = KernelInfo(grid=(blocks, 1, 1), block=(block, 1, 1), registers_per_thread=24)
    return KernelSpec(op, name, float(elems), float(elems * elem_bytes * rw), info, "ew", elems=elems), fmult


def _reduce(op: str, name: str, elems: int, elem_bytes: int = 4, fmult: float = 1.5) -> tuple[KernelSpec, float]:
    info = KernelInfo(grid=(1, 1, 1), block=(512, 1, 1), registers_per_thread=32, shared_memory=2_048)
    return KernelSpec(op, name, float(elems), float(elems * elem_bytes), info, "ew"), fmult


def _linear(arch: str, dtype: str, n: int, k: int) -> tuple[KernelSpec, float]:
    """One weight GEMV, y[1 x n] = x[1 x k] @ W^T: reads the n x k weights once."""
    wbytes = _DTYPE_BYTES[dtype]
    nbytes = float(n * k * wbytes + 2 * k + 2 * n + (2 * n if dtype != "bf16" else 0))  # + per-channel scales
    if dtype == "int8":
        layout = "ColumnMajorInterleavedForHopper" if arch == "sm90" else "ColumnMajorInterleaved"
        op, name = "trtllm::weight_only_quant_gemm", _TRT_WO.format(layout=layout)
        info = KernelInfo(grid=(1, max(1, n // 16), 1), block=(128, 1, 1), registers_per_thread=64)
    elif dtype == "fp8":
        op, name = "aten::_scaled_mm", _GEMM_FP8[arch]
        info = KernelInfo(grid=(max(1, -(-n // 64)), 1, 1), block=(128, 1, 1), registers_per_thread=168,
                          shared_memory=73_728)
    else:
        op, name = "aten::mm", _GEMV_BF16
        info = KernelInfo(grid=(max(1, n // 16), 1, 1), block=(128, 1, 1), registers_per_thread=40)
    return KernelSpec(op, name, physics.gemm_flops(1, n, k), nbytes, info, "gemm", (1, n, k)), 1.0


def _act_quant(h: int) -> list[tuple[KernelSpec, float]]:
    """FP8 W8A8: each linear input is scaled and cast to e4m3 by two eager kernels."""
    return [_ew("aten::mul", _EWK["mul_bf16_scalar"], h, 2, 2), _ew("aten::_to_copy", workload.ELEMENTWISE["copy"], h, 2, 2)]


def _rmsnorm(h: int) -> list[tuple[KernelSpec, float]]:
    E = workload.ELEMENTWISE
    return [_ew("aten::pow", E["pow"], h, 4, 2), _reduce("aten::mean", E["mean"], h),
            _ew("aten::rsqrt", E["rsqrt"], 1, 4, 2), _ew("aten::mul", E["mul_f32"], h, 4, 3),
            _ew("aten::mul", E["mul"], h, 2, 3)]


def _rotary(width: int) -> list[tuple[KernelSpec, float]]:
    """q*cos + rotate_half(q)*sin in eager: mul, neg (half), cat, mul, add."""
    E = workload.ELEMENTWISE
    return [_ew("aten::mul", E["mul"], width), _ew("aten::neg", E["neg"], width // 2, 2, 2),
            _ew("aten::cat", E["cat"], width, 2, 2, 1.1), _ew("aten::mul", E["mul"], width),
            _ew("aten::add", E["add"], width)]


def _layer(arch: str, dtype: str, s: dict, context: int, num_sms: int) -> list[tuple[KernelSpec, float]]:
    """The 33 kernels one eager decoder layer launches at batch 1 (41 with FP8 activation casts)."""
    h, kv, ffn = s["hidden"], s["kv_hidden"], s["ffn"]
    E = workload.ELEMENTWISE
    q = _act_quant(h) if dtype == "fp8" else []
    out: list[tuple[KernelSpec, float]] = []
    out += _rmsnorm(h) + q
    out += [_linear(arch, dtype, h, h), _linear(arch, dtype, kv, h), _linear(arch, dtype, kv, h)]
    out += _rotary(h) + _rotary(kv)
    # flash_attn_with_kvcache: appends the new k/v inside the kernel, reads the whole cache.
    kv_bytes = 2.0 * context * kv * 2
    splits = int(np.clip(round(1.7 * num_sms / s["heads"]), 1, max(1, min(128, -(-context // 64)))))
    info = KernelInfo(grid=(1, splits, s["heads"]), block=(128, 1, 1), registers_per_thread=255, shared_memory=49_152)
    out.append((KernelSpec("flash_attn::fwd_kvcache", workload.FLASH["splitkv"], 4.0 * context * h,
                           kv_bytes + 4.0 * h, info, "attn"), 1.0))
    out.append((KernelSpec("flash_attn::fwd_kvcache", workload.FLASH["splitkv_combine"], float(splits * h),
                           float(splits * h * 4 * 2), KernelInfo(grid=(max(1, s["heads"] // 4), 1, 1), block=(128, 1, 1),
                                                                 registers_per_thread=64), "ew"), 1.2))
    out += q + [_linear(arch, dtype, h, h), _ew("aten::add", E["add"], h)]
    out += _rmsnorm(h) + q
    out += [_linear(arch, dtype, ffn, h), _linear(arch, dtype, ffn, h)]
    out += [_ew("aten::silu", E["silu"], ffn, 2, 2), _ew("aten::mul", E["mul"], ffn)]
    out += q + [_linear(arch, dtype, h, ffn), _ew("aten::add", E["add"], h)]
    return out


def _prologue(h: int) -> list[tuple[KernelSpec, float]]:
    """Embedding lookup and HF's per-forward rotary cos/sin (10 kernels)."""
    E = workload.ELEMENTWISE
    half = HEAD_DIM // 2
    emb = KernelSpec("aten::embedding", E["embedding"], float(h), float(4 * h),
                     KernelInfo(grid=(max(1, h // 256), 1, 1), block=(128, 4, 1), registers_per_thread=32), "ew")
    return [(emb, 1.0), _ew("aten::_to_copy", E["copy"], 1, 8, 2),
            (KernelSpec("aten::bmm", _EWK["sgemm_small"], 2.0 * half, 8.0 * half,
                        KernelInfo(grid=(1, 1, 1), block=(128, 1, 1), registers_per_thread=56), "ew"), 1.4),
            _ew("aten::cat", E["cat"], HEAD_DIM, 4, 2), _ew("aten::cos", _EWK["cos"], HEAD_DIM, 4, 2),
            _ew("aten::sin", _EWK["sin"], HEAD_DIM, 4, 2), _ew("aten::mul", _EWK["mul_scalar"], HEAD_DIM, 4, 2),
            _ew("aten::mul", _EWK["mul_scalar"], HEAD_DIM, 4, 2), _ew("aten::_to_copy", E["copy"], HEAD_DIM, 4, 2),
            _ew("aten::_to_copy", E["copy"], HEAD_DIM, 4, 2)]


def _tail(arch: str, dtype: str, h: int, vocab: int) -> list[tuple[KernelSpec, float]]:
    """Final norm, lm_head and HF generate's sampling step (34 kernels, 36 with FP8):
    repetition penalty, temperature, top-k, softmax, multinomial, finished/stopping."""
    E = workload.ELEMENTWISE
    v = vocab
    out = _rmsnorm(h) + (_act_quant(h) if dtype == "fp8" else []) + [_linear(arch, dtype, v, h)]
    out += [_ew("aten::_to_copy", E["copy"], v, 2, 3),
            _ew("aten::gather", _EWK["gather"], 64, 4, 3), _ew("aten::lt", _EWK["lt_scalar"], 64, 4, 2),
            _ew("aten::mul", _EWK["mul_scalar"], 64, 4, 2), _ew("aten::div", _EWK["div"], 64, 4, 3),
            _ew("aten::where", _EWK["where"], 64, 4, 4, 1.2), _ew("aten::scatter", _EWK["scatter"], 64, 4, 3),
            _ew("aten::div", _EWK["div"], v, 4, 2)]
    topk = KernelSpec("aten::topk", _EWK["topk_gather"], float(v), float(16 * v),
                      KernelInfo(grid=(1, 1, 1), block=(1024, 1, 1), registers_per_thread=40, shared_memory=1_024), "ew")
    out += [(topk, 3.0), _reduce("aten::topk", _EWK["topk_sort"], 64, 12, 1.4),
            _ew("aten::lt", _EWK["lt"], v, 4, 2), _ew("aten::masked_fill", _EWK["masked_fill"], v, 4, 2, 1.1),
            _reduce("aten::softmax", _EWK["softmax"], v, 8, 1.6), _ew("aten::exponential_", _EWK["exponential"], v, 4, 1, 1.2),
            _ew("aten::div", _EWK["div"], v, 4, 3), _reduce("aten::argmax", _EWK["argmax"], v, 4, 1.6),
            _ew("aten::mul", _EWK["mul_long"], 1, 8), _ew("aten::rsub", _EWK["rsub_long"], 1, 8),
            _ew("aten::mul", _EWK["mul_long"], 1, 8), _ew("aten::add", _EWK["add_long"], 1, 8),
            _ew("aten::cat", _EWK["cat_long"], 1024, 8, 2), _ew("aten::fill_", _EWK["fill_bool"], 1, 1, 1),
            _ew("aten::bitwise_or", _EWK["or"], 1, 1), _ew("aten::bitwise_not", _EWK["not"], 1, 1),
            _ew("aten::bitwise_and", _EWK["and"], 1, 1), _reduce("aten::max", _EWK["max_long"], 1, 8, 1.3),
            _ew("aten::eq", _EWK["eq_scalar"], 1, 8, 2), _ew("aten::add", _EWK["add_long_scalar"], 1, 8, 2)]
    return out


def _nvml_pct(busy_ms: float, step_ms: float) -> float:
    """nvidia-smi's utilization.gpu over a decode loop: NVML's share of each sample period (1/6 s
    to 1 s) with a kernel running. Thousands of tokens' picket fences fill every period alike, so
    it reads the busy share (the key's gpu_saturated trap says so); versions 1 and 2 printed 100%."""
    return round(100.0 * busy_ms / step_ms)


def _compiled_token(b, specs: list[KernelSpec], base_ns: np.ndarray, is_ew: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fix, as torch.compile(mode="reduce-overhead") builds the decode step: the weight
    GEMVs and attention kernels as they were, each run of elementwise kernels between them
    fused into one Triton kernel (Inductor names them by the ops they fuse), the prologue's
    and sampling tail's into FUSED_TAIL_KERNELS, each fused kernel FUSED_KERNEL_FACTOR x the
    mean elementwise kernel: the kernels and times the key's expected step counts. Returns the
    kernels' name ids and durations (ns), replayed as one CUDA graph per token."""
    combine = np.array([x.kernel == workload.FLASH["splitkv_combine"] for x in specs])
    fusable = is_ew & ~combine
    fused_ns = float(base_ns[is_ew].mean()) * FUSED_KERNEL_FACTOR
    runs: list[list[int]] = []  # consecutive fusable kernels
    out: list[tuple[str, float]] = []
    for i, spec in enumerate(specs):
        if fusable[i]:
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
                out.append(("", -len(runs)))  # a placeholder for the run's fused kernel
        else:
            out.append((spec.kernel, float(base_ns[i])))
    # the prologue (embedding, rotary cos/sin) fuses apart from the first layer's norm, and the
    # sampling tail into several kernels (reductions break Inductor's fusion): 8 in all
    first_norm = next(j for j, i in enumerate(runs[0]) if specs[i].op == "aten::pow")
    tail = runs[-1]
    pieces = [runs[0][:first_norm], runs[0][first_norm:], *runs[1:-1],
              *[list(x) for x in np.array_split(tail, FUSED_TAIL_KERNELS - 2)]]
    seen: dict[str, int] = {}
    names = []
    for run in pieces:
        ops = sorted({specs[i].op.split("::")[-1].strip("_") for i in run})
        kind = "red" if any(o in ("mean", "softmax", "topk", "argmax", "max") for o in ops) else "poi"
        stem = f"triton_{kind}_fused_{'_'.join(ops[:6])}"
        names.append(f"{stem}_{seen.setdefault(stem, len(seen))}")
    kernels, durs, k = [], [], 0
    for name, d in out:
        if name:
            kernels.append(name)
            durs.append(d)
            continue
        run_index = -int(d) - 1
        n_pieces = (2 if run_index == 0 else FUSED_TAIL_KERNELS - 2 if run_index == len(runs) - 1 else 1)
        for _ in range(n_pieces):
            kernels.append(names[k])
            durs.append(fused_ns)
            k += 1
    info = KernelInfo(grid=(256, 1, 1), block=(256, 1, 1), registers_per_thread=32)
    return np.array([b.kernel(x, info) for x in kernels], np.int32), np.array(durs)


def _token(p: dict, gpu: physics.Gpu, s: dict) -> tuple[list[KernelSpec], np.ndarray]:
    """Every kernel of one decode token, with each kernel's physics duration in µs."""
    layer = _layer(gpu.arch, p["weight_dtype"], s, p["context_len"], gpu.num_sms)
    items = _prologue(s["hidden"]) + layer * s["layers"] + _tail(gpu.arch, p["weight_dtype"], s["hidden"], s["vocab"])
    specs = [k for k, _ in items]
    fmult = np.fromiter((m for _, m in items), float, len(items))
    nbytes = np.fromiter((k.nbytes for k in specs), float, len(specs))
    role = np.array([k.role for k in specs])
    bw = gpu.mem_tbps * 1e12
    floor_us = 1.0 + 1500.0 / gpu.max_sm_clock_mhz  # the smallest kernels CUPTI records on this GPU
    us = floor_us * fmult + nbytes / (bw * EW_MEM_EFF) * 1e6
    gemv = role == "gemm"
    us[gemv] = nbytes[gemv] / (bw * p["gemv_mem_eff"]) * 1e6 + GEMV_FIXED_US
    attn = role == "attn"
    us[attn] = nbytes[attn] / (bw * ATTN_MEM_EFF) * 1e6 + ATTN_FIXED_US
    return specs, us


def _busy_share(p: dict) -> float:
    """Kernel time over token time, before jitter: how launch-bound these params are."""
    gpu = physics.GPUS[p["gpu"]]
    s = _shape(p["model_params_b"], p["gqa_groups"], p["vocab"])
    _, us = _token(p, gpu, s)
    cost_us = p["op_overhead_us"] * 1.125 + p["launch_us"]  # launch_phase adds an epilogue of overhead/8
    return float(us.sum() / (len(us) * cost_us + STEP_FIXED_MS * 1e3))


# Of each op's Python and dispatcher time (op_overhead_us), the share that runs after the op
# returns and before the next one starts (version 2): between ops in a real trace there are
# always microseconds (HTA's traces: p10 8 µs, median 16 µs).
BETWEEN_OPS_SHARE = 0.25
BETWEEN_OPS_SHARE_V3 = 0.70  # version 3 (docstring): most of an op's framework time is the Python around it


# -- the op trees (version 3) ---------------------------------------------------------
# What torch.profiler records on the host around each launch of this decode (HF transformers'
# eager Llama under generate, no_grad: no sequence numbers). The weight GEMVs: the INT8 linear
# calls TensorRT-LLM's `torch.ops.trtllm.weight_only_quant_gemm(x, weight, torch.int8,
# weight_scale, torch.bfloat16)` (tensorrt_llm/_torch/custom_ops/torch_custom_ops.py registers it
# with torch.library.custom_op, so the dispatcher records the call, with record_shapes' Input
# Dims; its runner takes a 2-D activation and a [k, n] int8 weight, and allocates its output
# with at::detail::empty_cuda, which records no op), so the linear reshapes the [1, 1, k]
# activation to [1, k] first and views the [1, n] result back; FP8 reshapes, takes
# `weight.t()` and calls aten::_scaled_mm; BF16 is aten::linear's own tree. Around the rest,
# the views the Python between launches calls: each projection's `.view(1, 1, heads, 128)
# .transpose(1, 2)`, rotary's `cos.unsqueeze(1)` and rotate_half's two slices, the transposes
# back to flash_attn's [batch, seq, heads, dim], the attention output's reshape, the logits'
# `[:, -1, :]`; `.float()` / `.to(dtype)` is aten::to > aten::_to_copy > aten::empty_strided and
# the aten::copy_ that launches; softmax is aten::softmax > aten::_softmax. A view after a
# launch is laid out before the next op's launch (the Python between the two), so each op's CPU
# time, the case's physics, stays where it was.
# The views between launches: with them the canonical INT8 decode has the ops per launch of a
# real eager trace (2.48; seed 1, bf16: 3.3). Each splits the Python time between two launching
# ops, and this case's ~13 µs of it (the seed's 17 µs per op, 70% of it between ops) holds a view
# or two: the median time between top-level ops is 5.7 µs (p10 1.6), under the bound the
# training traces give (11.3 µs); a host-bound decode is that dense, so app/analysis/fidelity.py
# marks the quantity as the case's shape (PATHOLOGY_SHAPED). The main thread's covered time is the
# key's, and kernels, launches and key are the same either way (tests/test_scenario_launch_bound.py).
_VIEWS = True
_LAYER_GEMMS = ("q", "k", "v", "o", "gate", "up", "down")
I8, F8 = "signed char", "c10::Float8_e4m3fn"
# The casts this decode launches, by bytes moved per element: the FP8 activation cast (2 + 2: its
# e4m3 store counted at 2), the position ids' .float() (8 + 8), rotary cos/sin's .to(bf16) (4 + 4)
# and the logits' .float() (2 + 2 + 2: read, write, the copy's cast).
_CASTS = {4: (optree.BF16, "c10::Float8_e4m3fn"), 16: ("long int", optree.F32), 8: (optree.F32, optree.BF16),
          6: (optree.BF16, optree.F32)}
_DTYPE_ENUM = {"bf16": "15", "float": "6", "int8": "1"}  # c10::ScalarType, as Concrete Inputs shows a dtype


def _view(name: str, src: list, dst: list, ty: str = optree.BF16) -> optree.Op:
    """A view op (view, unsqueeze, slice, select, transpose, expand): no kernel; those that
    restride call aten::as_strided (view and reshape's view do not)."""
    if name == "aten::view":
        return optree.Op(name, [src, []], [ty, "ScalarList"])
    if name == "aten::reshape":
        return optree.Op(name, [src, []], [ty, "ScalarList"], children=[_view("aten::view", src, dst, ty)])
    scalars = {"aten::unsqueeze": 1, "aten::transpose": 2, "aten::select": 2, "aten::slice": 4}[name]
    return optree.Op(name, [src] + [[]] * scalars, [ty] + ["Scalar"] * scalars, children=[
        optree.Op("aten::as_strided", [dst, [], [], []], [ty, "ScalarList", "ScalarList", ""])])


def _to(d: list, src: str, dst: str) -> optree.Op:
    """`.to(dtype)` / `.float()`: aten::to > aten::_to_copy > aten::empty_strided, aten::copy_ (launches)."""
    copy = optree.Op("aten::_to_copy", [d] + [[]] * 6, [src, "Scalar", "", "", "", "Scalar", ""], children=[
        optree.Op("aten::empty_strided", [[]] * 6, ["ScalarList", "ScalarList", "Scalar", "", "", ""]),
        optree.Op("aten::copy_", [d, d, []], [dst, src, "Scalar"], launches=True)])
    return optree.Op("aten::to", [d] + [[]] * 4, [src] + ["Scalar"] * 4, keep_cover=True, children=[copy])


def _gemv(spec: KernelSpec, dtype: str, widths: tuple[int, ...]) -> list[optree.Op]:
    """The ops of one weight GEMV at M=1, the launching one last."""
    _, n, k = spec.shape
    if dtype == "bf16":
        return [optree.tree_for(spec, widths)]
    flat = _view("aten::reshape", [1, 1, k], [1, k])
    if dtype == "int8":
        return [flat, optree.Op("trtllm::weight_only_quant_gemm", [[1, k], [k, n], [], [n], [], []],
                                [optree.BF16, I8, "Scalar", optree.BF16, "Scalar", "Scalar"], launches=True,
                                concrete=["", "", _DTYPE_ENUM["int8"], "", _DTYPE_ENUM["bf16"], "False"])]
    wt = optree.Op("aten::t", [[n, k]], [F8], children=[
        optree.Op("aten::transpose", [[n, k], [], []], [F8, "Scalar", "Scalar"], children=[
            optree.Op("aten::as_strided", [[k, n], [], [], []], [F8, "ScalarList", "ScalarList", ""])])])
    return [flat, wt, optree.Op("aten::_scaled_mm", [[1, k], [k, n], [], [], [], [], [], []],
                                [F8, F8, "float", "float", "", "", "Scalar", "Scalar"], launches=True)]


def _decode_trees(specs: list[KernelSpec], s: dict, dtype: str) -> list[optree.Op]:
    """Each launch's tree, in launch order (the specs of _token: prologue, layers, tail)."""
    h, kv, heads, kvh = s["hidden"], s["kv_hidden"], s["heads"], s["kv_heads"]
    widths = (h, kv, s["ffn"], 2 * s["ffn"], s["vocab"])
    n_layer_gemms = len(_LAYER_GEMMS) * s["layers"]
    trees: list[optree.Op] = []
    pending: list[optree.Op] = []  # views after the previous launch, laid out before the next one
    gemms = 0
    rot = {}  # index of a rotary or attention launch -> what runs before it
    for i, spec in enumerate(specs):
        pre, core = pending, None
        pending = []
        if spec.role == "gemm":
            role = _LAYER_GEMMS[gemms % 7] if gemms < n_layer_gemms else "lm_head"
            gemms += 1
            _, n, _ = spec.shape
            if role == "o":  # attn_output.reshape(1, 1, -1)
                pre = pre + [_view("aten::reshape", [1, 1, heads, HEAD_DIM], [1, 1, h])]
            *before, core = _gemv(spec, dtype, widths)
            pre = pre + before
            if dtype != "bf16":  # the result back to [1, 1, n]
                pending.append(_view("aten::view", [1, n], [1, 1, n]))
            if role in ("q", "k", "v"):  # .view(1, 1, heads, 128).transpose(1, 2)
                nh = n // HEAD_DIM
                pending += [_view("aten::view", [1, 1, n], [1, 1, nh, HEAD_DIM]),
                            _view("aten::transpose", [1, 1, nh, HEAD_DIM], [1, nh, 1, HEAD_DIM])]
            if role == "v":  # apply_rotary_pos_emb on q, then k; then flash_attn_with_kvcache
                rot = {i + 1: "cos_sin", i + 2: (heads, "half"), i + 7: (kvh, "half"), i + 11: "attn"}
            if role == "lm_head":  # generate's logits[:, -1, :]
                pending += [_view("aten::slice", [1, 1, n], [1, 1, n]), _view("aten::select", [1, 1, n], [1, n]),
                            _view("aten::slice", [1, n], [1, n])]
        else:
            what = rot.get(i)
            d = [1, 1, int(spec.flops)] if spec.op == "aten::_to_copy" else None
            if what == "cos_sin":
                pre = pre + [_view("aten::unsqueeze", [1, 1, HEAD_DIM], [1, 1, 1, HEAD_DIM])] * 2
            elif what == "attn":
                pre = pre + [_view("aten::transpose", [1, nh, 1, HEAD_DIM], [1, 1, nh, HEAD_DIM])
                             for nh in (heads, kvh, kvh)]
            elif what:
                nh, _ = what
                pre = pre + [_view("aten::slice", [1, nh, 1, HEAD_DIM], [1, nh, 1, HEAD_DIM // 2])] * 2
            if spec.op == "aten::_to_copy":  # which cast, from the bytes it moves per element
                core = _to(d, *_CASTS[round(spec.nbytes / max(spec.flops, 1.0))])
            elif spec.op == "aten::softmax":
                dd = [1, int(spec.flops)]
                core = optree.Op("aten::softmax", [dd, [], []], [optree.F32, "Scalar", ""], keep_cover=True, children=[
                    optree.Op("aten::_softmax", [dd, [], []], [optree.F32, "Scalar", "Scalar"], launches=True)])
            elif spec.op == "aten::fill_":  # stopping criteria's torch.full((1,), False, dtype=torch.bool)
                core = optree.Op("aten::full", [[]] * 6, ["ScalarList", "Scalar", "Scalar", "", "", ""],
                                 keep_cover=True, children=[
                                     optree.Op("aten::empty", [[]] * 6, ["ScalarList", "Scalar", "", "", "", ""]),
                                     optree.Op("aten::fill_", [[1], []], ["bool", "Scalar"], launches=True)])
            elif spec.op == "aten::rsub":  # 1 - unfinished_sequences: rsub.Scalar calls aten::sub
                core = optree.Op("aten::rsub", [[1], [], []], ["long int", "Scalar", "Scalar"], keep_cover=True,
                                 children=[optree.Op("aten::sub", [[], [1], []], ["long int", "long int", "Scalar"],
                                                     launches=True)])
            else:
                core = optree.tree_for(spec, widths)
        trees.append(optree.forest(*pre, core) if pre and _VIEWS else core)
    return trees


# -- the trace -----------------------------------------------------------------------

def build(p: Params, rng: np.random.Generator, seed) -> Built:
    gpu = physics.GPUS[p.gpu]
    pd = p.model_dump()
    s = _shape(p.model_params_b, p.gqa_groups, p.vocab)
    specs, base_us = _token(pd, gpu, s)
    n = len(specs)
    role = np.array([k.role for k in specs])
    is_gemv = role == "gemm"
    is_attn = role == "attn"
    is_ew = role == "ew"

    v1 = building() == 1
    timing = hosttime.MEASURED if building() == 2 else hosttime.MEASURED_2
    between_share = BETWEEN_OPS_SHARE if building() == 2 else BETWEEN_OPS_SHARE_V3
    b, pid, t = new_builder(rng, gpu)
    tid = pid
    stream = 7
    if building() <= 2:
        b.process(pid, "python3", "CPU", 0)
        b.process(0, "GPU 0", "GPU 0", 1_000)
        b.thread(pid, tid, f"thread {tid} (pt_main_thread)", 1)
        b.thread(0, stream, f"stream {stream} ", stream)
    else:  # as Kineto names them: the GPU "process" carries the host's name, sorted after it
        training.Topology(pid, tid, tid, 0, stream).name_rows(b, autograd=False)
    ops, kernels = workload.intern(b, specs)
    shaped = {}
    if building() >= 3:  # the op tree around each launch (no autograd: decode runs under no_grad), shapes, ids
        shaped = {"tree": _decode_trees(specs, s, p.weight_dtype), "kernel_cfg": workload.launch_configs(b, specs),
                  "tree_keep_cover": True}
        b.number_ops(first_ev_idx=int(rng.integers(2_000, 40_000)))
    # Every token emits the same events: its ops (their trees), launches and kernels, and the
    # dozen rows around them (prologue, item, copy, step); counted now, a request past the
    # budget is refused before the loop.
    fx = fixed()
    per_token = 2 * n + (sum(optree.size(t) for t in shaped["tree"]) if shaped else n) + 12
    expect_events((n + 16 if fx else per_token) * p.tokens)  # the fixed build: one graph launch, its kernels
    first_step = int(rng.integers(2, 12))
    jitter_sd = np.where(is_gemv, 0.012, 0.03)
    base_ns = base_us * 1e3
    if fx:  # the fix: the decode step compiled and replayed as one CUDA graph (docstring)
        graph = _compiled_token(b, specs, base_ns, is_ew)

    tok_k_start, tok_k_end, tok_api_ns, tok_op_ns = [], [], [], []
    step_start, step_end, copies, item_us = [], [], [], []
    cpu_only = []  # (name, start, dur) of CPU-only ops in each token's prologue
    rt = []  # (name, start, dur, corr, ext) of memcpy / sync runtime calls
    gpu_free = t
    for i in range(p.tokens):
        s0 = t
        # prepare_inputs_for_generation: views and slices, no kernels (with the graph, the
        # inputs are static buffers: the same few ops, quicker)
        c = s0 + int(rng.integers(4_000, 8_000) if fx else rng.integers(15_000, 30_000))
        for name in ("aten::slice", "aten::unsqueeze", "aten::expand", "aten::select"):
            d = int(rng.integers(2_000, 4_000) if fx else rng.integers(3_000, 9_000))
            cpu_only.append((name, c, d))
            c += d + int(rng.integers(3_000, 6_000) if fx else rng.integers(8_000, 20_000))
        if fx:
            names, gdur = graph
            dur = np.maximum(gdur * rng.normal(1.0, 0.01, len(gdur)).clip(0.95, 1.05), 1_000).astype(np.int64)
            launch = np.array([int(rng.integers(9_000, 16_000))])
            ph = graph_replay(b, host_pid=pid, cpu_tid=tid, gpu_pid=0, stream=stream, kernel_names=names,
                              kernel_dur_ns=dur, cpu_t0=c, gpu_free=gpu_free, launch_ns=int(launch[0]),
                              latency_ns=int(timing.launch_latency_ns(rng, 1)[0]),
                              gap_ns=(GRAPH_GAP_US * 1e3 * rng.uniform(0.8, 1.2, len(names))).astype(np.int64),
                              graph_id=1)
        else:
            dur = np.maximum(base_ns * rng.normal(1.0, jitter_sd).clip(0.9, 1.12), 1_000).astype(np.int64)
            overhead = (np.maximum(rng.gamma(6.0, p.op_overhead_us / 6.0, n), 3.0) * 1e3).astype(np.int64)
            if v1:
                launch = (p.launch_us * rng.uniform(0.75, 1.25, n) * 1e3).astype(np.int64)
                host = {}
            else:
                # cudaLaunchKernel as measured (a long tail), its mean the param's; the kernel's
                # start after the call varies; and a share of each op's Python runs after the op
                # returns, before the next (real traces never show two ops touching). The split
                # keeps each op's CPU cost, the physics of this case, what it was.
                launch = timing.launch_calls_ns(rng, n, mean_us=p.launch_us)
                after = (overhead * between_share).astype(np.int64)
                overhead = overhead - after
                host = {"launch_latency_ns": timing.launch_latency_ns(rng, n),
                        "free_after_ns": after + after // 8}  # the epilogue launch_phase takes of the part moved
            if building() <= 2:
                gap = rng.integers(700, 1_400, n)  # back-to-back kernels on one stream still sit ~1 µs apart
            else:
                gap = timing.kernel_gaps_ns(rng, n)
            ph = launch_phase(b, host_pid=pid, cpu_tid=tid, gpu_pid=0, stream=stream, op_names=ops,
                              kernel_names=kernels, kernel_dur_ns=dur, cpu_t0=c, gpu_t0=gpu_free,
                              op_overhead_ns=overhead, launch_ns=launch, gpu_gap_ns=gap, **host, **shaped)
        # aten::item on the sampled token: DtoH copy on the compute stream, then a sync.
        c0 = ph.cpu_end + int(rng.integers(2_000, 6_000))
        api0, api_ns = c0 + 3_000, int(rng.integers(6_000, 10_000))
        copy_start = max(ph.gpu_end + 1_200, api0 + api_ns + 2_500)
        copy_ns = int(rng.integers(1_300, 2_000))
        sync0 = api0 + api_ns + 1_000
        sync_end = copy_start + copy_ns + int(rng.integers(3_000, 6_000))
        item_end = sync_end + 3_000
        rt.append(("cudaMemcpyAsync", api0, api_ns, c0))
        rt.append(("cudaStreamSynchronize", sync0, sync_end - sync0, c0))
        copies.append((copy_start, copy_ns))
        item_us.append((item_end - c0) / 1e3)
        t_end = item_end + int(rng.integers(4_000, 10_000))
        step_start.append(s0)
        step_end.append(t_end)
        tok_k_start.append(ph.kernel_start)
        tok_k_end.append(ph.kernel_end)
        tok_op_ns.append(ph.op_end - ph.op_start)
        tok_api_ns.append(launch)
        gpu_free = copy_start + copy_ns
        t = t_end + int(rng.integers(8_000, 20_000))  # prof.step() and the generate loop

    # The per-token rows outside launch_phase, emitted as whole arrays.
    T = p.tokens
    b.add(Kind.CPU, "user_annotation", [f"ProfilerStep#{first_step + i}" for i in range(T)], pid, tid,
          step_start, np.subtract(step_end, step_start), ext=b.external_ids(T))
    b.add(Kind.CPU, "cpu_op", [x[0] for x in cpu_only], pid, tid, [x[1] for x in cpu_only], [x[2] for x in cpu_only],
          ext=b.external_ids(len(cpu_only)))
    item0 = np.array([r[3] for r in rt[::2]], np.int64)
    item1 = item0 + np.round(np.array(item_us) * 1e3).astype(np.int64)
    ext = b.external_ids(T)
    b.add(Kind.CPU, "cpu_op", "aten::item", pid, tid, item0, item1 - item0, ext=ext)
    b.add(Kind.CPU, "cpu_op", "aten::_local_scalar_dense", pid, tid, item0 + 1_500, item1 - item0 - 2_500, ext=ext)
    corr = b.correlation_ids(2 * T)
    api_ts = np.array([r[1] for r in rt], np.int64)
    api_dur = np.array([r[2] for r in rt], np.int64)
    b.add(Kind.RUNTIME, "cuda_runtime", [r[0] for r in rt], pid, tid, api_ts, api_dur, ext=np.repeat(ext, 2), corr=corr)
    b.add(Kind.MEMORY, "gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 0, stream, [c[0] for c in copies],
          [c[1] for c in copies], ext=ext, corr=corr[::2], nbytes=8)
    trace = b.build()

    # -- the key, measured on the emitted timings (windows = ProfilerStep start to start) --
    W = T - 1
    periods = np.diff(step_start) / 1e6
    step_ms = float(periods.mean())
    busy, kcount, kdur, gaps = [], [], [], []
    for i in range(W):
        lo, hi = step_start[i], step_start[i + 1]
        ks = np.append(tok_k_start[i], copies[i][0])
        ke = np.append(tok_k_end[i], copies[i][0] + copies[i][1])
        busy.append(intervals.busy_ns(ks, ke, lo, hi) / 1e6)
        inside = (tok_k_start[i] >= lo) & (tok_k_start[i] < hi)
        kcount.append(int(inside.sum()))
        kdur.append((tok_k_end[i] - tok_k_start[i])[inside])
        s_in, e_in = tok_k_start[i][inside], tok_k_end[i][inside]
        g = np.maximum(s_in[1:] - e_in[:-1], 0)
        gaps.append(g)
    busy_ms = float(np.mean(busy))
    idle_ms = step_ms - busy_ms
    kernels_per_step = float(np.mean(kcount))
    mean_kernel_us = float(np.concatenate(kdur).mean() / 1e3)
    mean_gap_us = float(np.concatenate(gaps).mean() / 1e3)
    if fx:  # what the trace after the fix measures; the instance's key is the unfixed build's
        fixed_key = {"fixed": True, "observations": [
            obs("step_ms", "token after the fix", step_ms, "ms"), obs("gpu_busy_ms", "GPU busy per token", busy_ms, "ms"),
            obs("gpu_idle_ms", "GPU idle per token", idle_ms, "ms"),
            obs("kernels_per_step", "kernels per token", kernels_per_step, "kernels", 0),
            obs("mean_gap_us", "mean gap between kernels", mean_gap_us, "µs")]}
        return Built(key=fixed_key, artifacts={"gpus": gpu_clock_report(gpu, 1, rng, util_pct=_nvml_pct(busy_ms, step_ms))},
                     trace_for_rank=lambda rank: trace, ranks=1)
    kd = np.stack([tok_k_end[i] - tok_k_start[i] for i in range(W)]).mean(axis=0)  # mean ns per kernel slot
    gemv_ms = float(kd[is_gemv].sum() / 1e6)
    attn_ms = float(kd[is_attn].sum() / 1e6)
    ew_ms = float(kd[is_ew].sum() / 1e6)
    ew_count = int(is_ew.sum())
    ew_mean_us = ew_ms * 1e3 / ew_count
    longest = int(np.argmax(kd))
    longest_us = float(kd[longest] / 1e3)
    gemv_bytes = float(sum(k.nbytes for k, g in zip(specs, is_gemv) if g))
    gemv_gbps = gemv_bytes / (gemv_ms / 1e3) / 1e9
    gemv_pct = gemv_gbps / (gpu.mem_tbps * 1e3) * 100
    launch_api_ms = float(np.mean([a.sum() for a in tok_api_ns[:W]]) / 1e6)
    cpu_op_us = float(np.mean([o.mean() for o in tok_op_ns[:W]]) / 1e3)
    # Main-thread coverage: the cpu_ops under each ProfilerStep (the step itself covers everything).
    child = (trace.pid == pid) & (trace.tid == tid) & (trace.kind == Kind.CPU) \
        & (trace.cat != trace.cats.index("user_annotation"))
    c_ts, c_end = trace.ts_ns[child], trace.ts_ns[child] + trace.dur_ns[child]  # sorted by ts (Trace order)
    cut = np.searchsorted(c_ts, step_start)
    main_busy = [intervals.busy_ns(c_ts[cut[i]:cut[i + 1]], c_end[cut[i]:cut[i + 1]], step_start[i], step_start[i + 1])
                 for i in range(W)]
    main_busy_pct = float(np.mean(main_busy) / 1e6 / step_ms * 100)
    sync_us = float(np.mean(item_us[:W]))

    dtype = _DTYPE_LABEL[p.weight_dtype]
    wbytes = _DTYPE_BYTES[p.weight_dtype]
    weight_gb = s["params"] * wbytes / 1e9  # every weight in the drawn format (embedding included)
    bw_gbps = gpu.mem_tbps * 1e3
    weight_floor_ms = weight_gb / bw_gbps * 1e3
    fp16_gb = s["params"] * 2 / 1e9
    fp16_floor_ms = fp16_gb / bw_gbps * 1e3
    read_gb = gemv_bytes / 1e9
    read_floor_ms = read_gb / bw_gbps * 1e3
    kv_mb = 2.0 * p.context_len * s["kv_hidden"] * 2 * s["layers"] / 1e6

    # The fix: CUDA Graphs (same kernels, ~0.4 µs apart), then fusion of the elementwise soup.
    k = int(round(kernels_per_step))
    graphed_idle_ms = k * GRAPH_GAP_US / 1e3 + GRAPH_HOST_MS
    graphed_ms = busy_ms + graphed_idle_ms
    n_fused_pw = FUSED_POINTWISE_PER_LAYER * s["layers"] + FUSED_TAIL_KERNELS
    k_after = int(is_gemv.sum() + is_attn.sum() + s["layers"] + n_fused_pw)  # + the split-KV combines
    combine_ms = float(kd[np.array([sp.kernel == workload.FLASH["splitkv_combine"] for sp in specs])].sum() / 1e6)
    busy_fused_ms = gemv_ms + attn_ms + combine_ms + n_fused_pw * ew_mean_us * FUSED_KERNEL_FACTOR / 1e3
    idle_fused_ms = k_after * GRAPH_GAP_US / 1e3 + GRAPH_HOST_MS
    after_ms = busy_fused_ms + idle_fused_ms
    speedup = step_ms / after_ms
    idle_pct = idle_ms / step_ms * 100
    api_pct = launch_api_ms / step_ms * 100
    cost_us = step_ms * 1e3 / kernels_per_step

    observations = [
        obs("step_ms", "decode step (one token, ProfilerStep# period)", step_ms, "ms", 3),
        obs("expected_step_ms", "token after CUDA Graphs + fusion", after_ms, "ms", 3),
        obs("speedup", "token-rate gain", speedup, "x", 3),
        obs("kernels_per_step", "kernels per token", kernels_per_step, "kernels", 1),
        obs("gpu_busy_ms", "compute-stream busy per token (sum of kernel time)", busy_ms, "ms", 3),
        obs("gpu_idle_ms", "compute-stream idle per token", idle_ms, "ms", 3),
        obs("idle_pct", "idle share of the token", idle_pct, "%", 1),
        obs("mean_kernel_us", "mean kernel duration", mean_kernel_us, "µs", 3),
        obs("mean_gap_us", "mean idle between consecutive kernels", mean_gap_us, "µs", 3),
        obs("cpu_per_kernel_us", "CPU time per launched kernel (token / kernels)", cost_us, "µs", 2),
        obs("cpu_op_us", "mean launching cpu_op duration", cpu_op_us, "µs", 2),
        obs("launches_per_step", "cudaLaunchKernel calls per token", kernels_per_step, "calls", 1),
        obs("launch_api_ms", "cudaLaunchKernel host time per token", launch_api_ms, "ms"),
        obs("launch_api_pct", "cudaLaunchKernel time as a share of the token", api_pct, "%", 1),
        obs("main_thread_busy_pct", "main thread covered by cpu_ops", main_busy_pct, "%", 1),
        obs("sync_us", "aten::item (DtoH + sync) per token", sync_us, "µs", 1),
        obs("weight_gb", f"{dtype} weights resident", weight_gb, "GB"),
        obs("weight_floor_ms", "weights / DRAM bandwidth", weight_floor_ms, "ms"),
        obs("fp16_weight_floor_ms", "the same model in FP16 / DRAM bandwidth", fp16_floor_ms, "ms"),
        obs("weight_read_gb", "weight bytes the GEMVs read per token", read_gb, "GB", 3),
        obs("weight_read_floor_ms", "per-token weight reads / DRAM bandwidth", read_floor_ms, "ms"),
        obs("gemv_ms", "weight GEMV time per token", gemv_ms, "ms", 3),
        obs("gemv_bw_gbps", "GEMV achieved bandwidth", gemv_gbps, "GB/s", 1),
        obs("gemv_bw_pct", "GEMV bandwidth as a share of peak", gemv_pct, "%", 1),
        obs("attention_ms", "split-KV attention per token", attn_ms, "ms", 3),
        obs("elementwise_kernels_per_step", "elementwise/small kernels per token", ew_count, "kernels", 0),
        obs("elementwise_ms", "elementwise/small kernel time per token", ew_ms, "ms", 3),
        obs("longest_kernel_us", "longest kernel", longest_us, "µs", 1),
        obs("context_len", "KV-cache length", p.context_len, "tokens", 0),
        obs("kv_cache_mb", "KV cache read per token", kv_mb, "MB", 1),
        obs("graphed_step_ms", "token with CUDA Graphs only", graphed_ms, "ms"),
        obs("graphed_idle_ms", "idle per token with CUDA Graphs", graphed_idle_ms, "ms", 3),
        obs("expected_graphed_kernels", "kernels per token after fusion", k_after, "kernels", 0),
        obs("expected_busy_ms", "busy per token after fusion", busy_fused_ms, "ms", 3),
    ]

    # Marks: the first full token, and one inter-kernel gap of typical length inside it.
    ks0, ke0 = tok_k_start[0], tok_k_end[0]
    g0 = ks0[1:] - ke0[:-1]
    small = is_ew[1:] & is_ew[:-1]
    pick = int(np.argmin(np.where(small, np.abs(g0 - mean_gap_us * 1e3), np.iinfo(np.int64).max)))
    marks = {"step": {"start_us": step_start[0] / 1e3, "end_us": step_start[1] / 1e3},
             "gap": {"start_us": int(ke0[pick]) / 1e3, "end_us": int(ks0[pick + 1]) / 1e3}}

    size = f"{p.model_params_b:g}B"
    longest_name = specs[longest].op
    if p.weight_dtype == "bf16":
        gemm_trap = (f"At batch 1 the GEMMs are GEMVs and memory-bound: {weight_gb:.1f} GB of BF16 weights / {bw_gbps:.0f} GB/s "
                     f"= {weight_floor_ms:.1f} ms, and the GEMVs measure {gemv_ms:.1f} ms, {gemv_pct:.0f}% of peak DRAM "
                     f"bandwidth: no tile size beats the floor. Quantizing to INT8 would save at most half of that, "
                     f"~{gemv_ms / 2:.1f} ms, while the {idle_ms:.1f} ms of idle between kernels stays. Making kernels faster "
                     f"attacks the {busy_ms:.1f} ms; the bug is the {idle_ms:.1f} ms of nothing.")
        weights_line = f"{weight_gb:.1f} GB of BF16 weights over {bw_gbps:.0f} GB/s is ~{weight_floor_ms:.1f} ms"
    else:
        gemm_trap = (f"At batch 1 the GEMMs are GEMVs and memory-bound: {size} in FP16 would be {fp16_gb:.1f} GB, and "
                     f"{fp16_gb:.1f} GB / {bw_gbps:.0f} GB/s = {fp16_floor_ms:.1f} ms, "
                     f"{'more than' if fp16_floor_ms > busy_ms else 'most of'} the {busy_ms:.1f} ms of busy time, so the "
                     f"weights are already {dtype} ({weight_gb:.1f} GB / {bw_gbps:.0f} GB/s = {weight_floor_ms:.1f} ms; the "
                     f"GEMVs measure {gemv_ms:.1f} ms, {gemv_pct:.0f}% of peak DRAM bandwidth). Making kernels faster attacks "
                     f"the {busy_ms:.1f} ms; the bug is the {idle_ms:.1f} ms of nothing.")
        weights_line = f"{weight_gb:.1f} GB of {dtype} weights over {bw_gbps:.0f} GB/s is ~{weight_floor_ms:.1f} ms"
    brief = (f"1x {gpu.key}, {size} model with {dtype} weights, batch-1 decode in eager PyTorch (on-prem latency-sensitive "
             f"product). Inter-token latency is {step_ms:.0f} ms; the weight reads alone say a memory-bound decode step "
             f"should take ~{read_floor_ms:.0f} ms. Here is the trace of {T} decode tokens. Walk me through it.")
    # version 2 runs part of each op's Python between ops: the thread never rests, yet the ops
    # alone no longer cover it
    wall, by_ops = ("is a solid wall of cpu_op + cudaLaunchKernel", "") if v1 else (
        "never rests: cpu_op + cudaLaunchKernel back to back", " by ops, the rest Python between them")
    key = make_key(
        scenario, p, seed, brief=brief, observations=observations,
        discipline={
            "step_boundary": (f"One ProfilerStep# = one decode token = {step_ms:.1f} ms. Zoomed in there is no single gap "
                              f"and no dominant kernel: a picket fence of {k:,} kernels per token."),
            "gaps": (f"The idle is distributed: ~{mean_gap_us:.0f} µs between consecutive kernels, {idle_ms:.1f} ms per "
                     f"token ({idle_pct:.0f}%). Kernels x mean = {k:,} x {mean_kernel_us:.1f} µs = {busy_ms:.1f} ms busy; "
                     f"{busy_ms:.1f} + {idle_ms:.1f} = {step_ms:.1f} ms. While the GPU idles, the main thread {wall} "
                     f"({main_busy_pct:.0f}% covered{by_ops}, ~{cost_us:.0f} µs per kernel vs "
                     f"{mean_kernel_us:.1f} µs of kernel): the CPU never gets ahead. The per-token aten::item sync is only "
                     f"{sync_us:.0f} µs."),
            "overlap": ("Single GPU, no communication stream: nothing to overlap. The GPU finishes each small kernel before "
                        "the CPU has launched the next one."),
            "longest_kernel": (f"Only now the kernels: the longest is a {longest_name} GEMV ({longest_us:.0f} µs); all "
                               f"{int(is_gemv.sum())} weight GEMVs take {gemv_ms:.1f} ms at {gemv_gbps:.0f} GB/s, "
                               f"{gemv_pct:.0f}% of {gpu.key} peak: at the weight-bandwidth floor. The other "
                               f"{ew_count} kernels are elementwise soup (RMSNorm, rotary, residual adds, casts, sampling) "
                               f"at ~{ew_mean_us:.1f} µs each, {ew_ms:.1f} ms in all."),
        },
        root_cause=(f"Launch-bound eager decode: at batch 1 a kernel (mean {mean_kernel_us:.1f} µs) is shorter than the CPU "
                    f"cost of issuing it (~{cost_us:.0f} µs of Python, dispatcher and cudaLaunchKernel), so the GPU idles "
                    f"between every pair of kernels, and unfused elementwise ops ({ew_count} of {k:,} kernels) multiply "
                    f"the launches."),
        traps=[{
            "id": "optimize_gemms",
            "claim": "The small GEMMs are inefficient: tune tile sizes or quantize further.",
            "why_wrong": gemm_trap,
        }, {
            "id": "item_sync",
            "claim": "The .item() sync at the end of each token stalls the pipeline; remove it.",
            "why_wrong": (f"aten::item costs {sync_us:.0f} µs per token, {sync_us / 1e3 / step_ms * 100:.1f}% of "
                          f"{step_ms:.1f} ms; the {idle_ms:.1f} ms of idle is spread over {k - 1:,} gaps of "
                          f"~{mean_gap_us:.0f} µs, not one stall."),
        }, {
            "id": "gpu_saturated",
            **({"claim": "nvidia-smi shows ~100% utilization, so the GPU is saturated and needs to be faster.",
                "why_wrong": (f"nvidia-smi counts a sample as busy if any kernel ran in it; the stream is busy "
                              f"{busy_ms:.1f} of {step_ms:.1f} ms ({100 - idle_pct:.0f}%). A faster GPU shrinks only "
                              f"the {busy_ms:.1f} ms.")} if building() <= 2 else {
                # NVML's utilization.gpu: the share of each sample period (1/6 s to 1 s) in which
                # one or more kernels ran; at thousands of kernels per second every period sees
                # the same mix, so its readings sit near the busy share
                "claim": "nvidia-smi shows the GPU busy, so the GPU is the bottleneck and needs to be faster.",
                "why_wrong": (f"nvidia-smi's utilization is the share of each sample period in which some kernel "
                              f"ran: the stream is busy {busy_ms:.1f} of {step_ms:.1f} ms, so it reads about "
                              f"{100 - idle_pct:.0f}%, not saturation. Even a reading near 100% would say nothing "
                              f"about SM occupancy or efficiency: these are {mean_kernel_us:.0f} µs kernels on a "
                              f"few SMs. A faster GPU shrinks only the {busy_ms:.1f} ms; the {idle_ms:.1f} ms of "
                              f"waiting for launches stays.")}),
        }],
        decisive_measurement="nsys-api-sum",
        confirmation=(f"nsys stats --report cuda_api_sum: cudaLaunchKernel {k:,} calls per token ({k * T:,} over {T} "
                      f"tokens), {launch_api_ms:.1f} ms of the {step_ms:.1f} ms token; with the framework time wrapped "
                      f"around each call the main thread is busy {main_busy_pct:.0f}% of the wall time. A well-fused, "
                      f"graphed decode is 200-400 kernels; {k:,} means eager mode. One-line experiment: capture the decode "
                      f"step in a torch.cuda.CUDAGraph and diff two tokens: {step_ms:.1f} -> {graphed_ms:.1f} ms."),
        fix=("CUDA Graphs on the decode step (static shapes at batch 1: capture once, replay with one cudaGraphLaunch per "
             "token), then fuse the elementwise soup (torch.compile mode='reduce-overhead' does both: fused RMSNorm, "
             "rotary, residual add and SiLU x up)."),
        expected={"before_ms": round(step_ms, 2), "after_ms": round(after_ms, 2), "speedup": round(speedup, 3),
                  "unit": "ms per token",
                  "arithmetic": (f"graphs: idle {idle_ms:.1f} -> {graphed_idle_ms:.2f} ms ({k:,} kernels x "
                                 f"{GRAPH_GAP_US} µs + {GRAPH_HOST_MS} ms host), token {step_ms:.1f} -> {graphed_ms:.1f} ms; "
                                 f"fusion: {k:,} -> {k_after} kernels, busy {busy_ms:.1f} -> {busy_fused_ms:.1f} ms, idle "
                                 f"{idle_fused_ms:.2f} ms: {after_ms:.1f} ms per token, {speedup:.2f}x; the weight reads "
                                 f"alone are {read_floor_ms:.1f} ms.")},
        model_answer=(
            f"{step_ms:.0f} ms per token but the sum of GPU kernel time is only {busy_ms:.1f} ms. The timeline is a picket "
            f"fence: ~{k:,} kernels per token averaging {mean_kernel_us:.0f} µs, with {mean_gap_us:.0f} µs of idle between "
            f"each: kernel duration below launch cost, the CPU launch wall keeping the GPU starved. The tempting fix is "
            f"'optimize the small GEMMs', but they're already at the weight-bandwidth floor: {weights_line}, and the GEMVs "
            f"take {gemv_ms:.1f} ms, {gemv_pct:.0f}% of peak. The {idle_ms:.0f} ms of overhead is the target: CUDA-graph "
            f"the decode step to collapse the launches, then fuse the elementwise soup to cut kernel count. Confirm with "
            f"nsys stats cuda_api_sum: {k:,} cudaLaunchKernel calls per token and a main thread busy the whole token. "
            f"Expected: {step_ms:.0f} to ~{after_ms:.0f} ms per token, {speedup:.1f}x, back on the roofline."),
        marks=marks,
    )

    kern_ns = np.stack([tok_k_end[i] - tok_k_start[i] for i in range(T)]).mean(axis=0)
    gemv_rows = []
    for spec, d in zip(specs, kern_ns):
        if spec.role == "gemm" and spec.shape and not any(r["n"] == spec.shape[1] and r["k"] == spec.shape[2]
                                                          for r in gemv_rows):
            gb = spec.nbytes / (d / 1e9) / 1e9
            gemv_rows.append({"kernel": spec.kernel, "op": spec.op, "m": 1, "n": spec.shape[1], "k": spec.shape[2],
                              "bytes": spec.nbytes, "dur_us": round(d / 1e3, 3), "achieved_gbps": round(gb, 1),
                              "peak_gbps": bw_gbps, "pct_of_peak": round(gb / bw_gbps * 100, 1)})
    artifacts = {
        "gpus": gpu_clock_report(gpu, 1, rng, util_pct=_nvml_pct(busy_ms, step_ms) if building() >= 3 else 100.0),
        "gpu": {"key": gpu.key, "peak_tflops": gpu.bf16_tflops, "mem_tbps": gpu.mem_tbps,
                "ridge_flop_per_byte": round(physics.ridge_point(gpu), 1), "count": 1},
        "kernels": workload.kernel_table(specs, kern_ns.astype(np.int64)),
        "steps": [{"start_us": a / 1e3, "end_us": e / 1e3} for a, e in zip(step_start, step_end)],
        "decode": {"tokens": T, "kernels_per_token": k, "weight_bytes": int(round(weight_gb * 1e9)),
                   "weight_read_bytes": int(gemv_bytes), "weight_dtype": p.weight_dtype, "context_len": p.context_len,
                   "kv_cache_bytes": int(kv_mb * 1e6), "params": s["params"], "layers": s["layers"],
                   "hidden": s["hidden"], "ffn": s["ffn"], "heads": s["heads"], "kv_heads": s["kv_heads"],
                   "vocab": s["vocab"], "elementwise_kernels_per_token": ew_count,
                   "gemv_kernels_per_token": int(is_gemv.sum())},
        "experiments": {
            "cuda_graph": {"token_ms_before": round(step_ms, 3), "token_ms_graphed": round(graphed_ms, 3),
                           "token_ms_graphed_fused": round(after_ms, 3), "launches_before": k, "launches_after": 1,
                           "kernels_after_fusion": k_after, "idle_ms_before": round(idle_ms, 3),
                           "idle_ms_graphed": round(graphed_idle_ms, 3), "busy_ms_before": round(busy_ms, 3),
                           "busy_ms_fused": round(busy_fused_ms, 3)},
            "nsys_api_sum": {"tokens": T, "wall_ms": round(step_ms * T, 3),
                             "rows": [{"name": "cudaLaunchKernel", "calls": k * T,
                                       "total_ms": round(float(sum(a.sum() for a in tok_api_ns)) / 1e6, 3),
                                       "avg_us": round(float(np.concatenate(tok_api_ns).mean()) / 1e3, 3)},
                                      {"name": "cudaStreamSynchronize", "calls": T,
                                       "total_ms": round(float(api_dur[1::2].sum()) / 1e6, 3),
                                       "avg_us": round(float(api_dur[1::2].mean()) / 1e3, 3)},
                                      {"name": "cudaMemcpyAsync", "calls": T,
                                       "total_ms": round(float(api_dur[::2].sum()) / 1e6, 3),
                                       "avg_us": round(float(api_dur[::2].mean()) / 1e3, 3)}],
                             "main_thread_busy_pct": round(main_busy_pct, 1)},
            "gemm_microbench": {"gemvs": gemv_rows, "weight_floor_ms": round(weight_floor_ms, 3),
                                "fp16_weight_floor_ms": round(fp16_floor_ms, 3), "gemv_ms": round(gemv_ms, 3)},
        },
    }
    return Built(key=key, artifacts=artifacts, trace_for_rank=lambda rank: trace, ranks=1)


scenario = Scenario(
    id="launch-bound", version=3, older=(1, 2), fixable=(3,), family="host-input", difficulty="medium",
    title="Launch-bound batch-1 decode",
    signature="A picket fence: ~1,100 tiny kernels per token with longer idle gaps between them, under a solid CPU launch wall",
    Params=Params, build=build,
    observations=("kernels_per_step", "gpu_busy_ms", "gpu_idle_ms", "mean_kernel_us", "mean_gap_us"),
    seed_headlines={"step_ms": 28, "kernels_per_step": 1100, "weight_floor_ms": 8, "fp16_weight_floor_ms": 16},
    reader_checks={"step_ms": "step_ms", "kernels_per_step": "kernels_per_step", "mean_kernel_us": "mean_kernel_us",
                   "mean_gap_us": "mean_gap_us", "compute_busy_ms": "gpu_busy_ms", "compute_idle_ms": "gpu_idle_ms"},
    rubric=Rubric(
        trap_parts={
            "optimize_gemms": r"\b(gemms?|gemvs?|matmuls?|matrix multipl\w*|linear layers?|projections?|weight reads?)\b",
            "item_sync": r"(\.item\(\)|\bsync\b|\bsynchroni[sz]\w*|\breadback\b|\bcuda(stream|device)synchronize\b)",
            "gpu_saturated": r"\b(the gpu|the device|the card|accelerator|the hardware|l40s)\b",
        },
        root_cause=(
            (r"launch[- ]bound", r"launch (overhead|latency|cost)", r"\bcpu[- ]bound", r"host[- ]bound",
             r"\b(host|cpu|python|dispatch\w*) overhead\b",
             r"(cpu|python|host|dispatch\w*) (can.t|cannot|isn.t able to|doesn.t) (keep up|launch)",
             r"kernels? (are |is )?(shorter|smaller|faster) than (the )?(launch|cpu|time to launch)",
             r"(gpu|stream) (waits|waiting|idles?|sits idle) (on|for) (the )?(cpu|launch\w*|host|python)"),
            (r"(1,?100|too many|thousands? of|hundreds of|a thousand) (tiny |small )?(kernels|launches)", r"unfused", r"elementwise",
             r"\bfus(e|ion|ing)\b", r"eager"),
        ),
        fix=(r"cuda[- ]?graph\w*", r"torch\.compile", r"reduce-overhead", r"\bcaptur\w*"),
        traps={"optimize_gemms": (r"\b(awq|gptq|int4|int8|fp8)\b", r"\b(tun\w*|optimi[sz]\w*|faster|better)\b.{0,25}\b(gemms?|gemvs?|matmuls?|linear layers?)\b",
                r"(tune|optimi[sz]\w*|faster|improve|speed up) .{0,20}(gemm|gemv|matmul)s?", r"tile sizes?",
                                  r"quantiz\w*", r"(gemm|gemv)s? (cheaper|faster)", r"\bint4\b", r"\bawq\b|\bgptq\b|\bmarlin\b",
                                  r"\b(gemm|gemv|matmul)s? (are|is) (slow|inefficient|the (bottleneck|problem))\b",
                                  r"\bbottlenecked by\b.{0,30}\b(weights?|gemvs?|gemms?)\b",
                                  r"\bweight (traffic|bandwidth|bytes|reads?)\b.{0,20}\b(bottleneck|problem|limit\w*)\b",
                                  r"\bweight-only\b", r"\b(fp8|int8|int4|nf4)\b.{0,20}\b(weights?|gemvs?|quant\w*)\b",
                                  r"\bgemvs?\b.{0,30}\b(tun\w*|faster|swap\w*|replac\w*|split\w*)\b",
                                  r"\b(tun\w*|swap\w*|replac\w*|faster|better)\b.{0,30}\bgemvs?\b"),
               "item_sync": (r"\.item\(\)", r"\bitem\b.{0,60}\bsync\w*", r"sync\w* (at the end|per token|stall\w*)",
                             r"aten::item", r"(remove|drop) the \.?item", r"cuda ?stream ?synchroni[sz]e",
                             r"\b(the|that|this|per-token|host) sync\b", r"\bround-?trip\w*\b.{0,20}\b(cpu|host)\b",
                             r"\b(keep|leave) the (next |sampled )?token on (the )?(device|gpu)\b",
                             r"\b(token|sampl\w*) (coming |going )?back to the (cpu|host)\b"),
               "gpu_saturated": (r"\b(bigger|faster|newer|beefier) (gpu|card|device)s?\b", r"\b(gpu|device|hardware)[- ](bound|limited)\b", r"\bcompute[- ]bound\b",
                r"nvidia-smi", r"100 ?% util\w*", r"gpu (is )?saturated", r"faster gpu",
                                 r"\b(gpu|device)s? (is |are )?(maxed|pegged|fully busy|at (its )?limit)\b",
                                 r"\b(bigger|newer) gpus?\b|\bupgrade the gpus?\b",
                                 r"\b(move|switch|upgrade|migrate)\b.{0,30}\bto (an? )?(h100|h200|b200|b100|gb200|faster|bigger)\b")},
        also_confirms=("cuda-graph",),
        skip_stages=("overlap",),  # one GPU, no communication: nothing to overlap
        # the busy/idle split and the per-kernel means, said to within a fifth, tell the same story
        tolerance={"gpu_busy_ms": 0.2, "gpu_idle_ms": 0.2, "mean_kernel_us": 0.2, "mean_gap_us": 0.2},
    ),
    hints=(
        Hint("Zoom in",
             "Zoom into a fraction of a millisecond of one token. What does the compute stream look like at "
             "that scale? Compare a typical kernel's duration with the idle after it."),
        Hint("The CPU row",
             "What is the main thread doing while the GPU sits between kernels? Compare the CPU time it spends "
             "per launched kernel with the kernel's own duration, and count the kernels in one token."),
        Hint("Count the launches",
             "Run the CUDA API summary (nsys-api-sum): how many cudaLaunchKernel calls does one token make, "
             "and how much of the token's wall time does the launching thread cover?"),
    ),
)
