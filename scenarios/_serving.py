"""The serving engine that prefill.py's scenario runs (vLLM-like, on Hopper): the served models'
public configs, the per-GPU roofline of each kernel an iteration launches, the kernel names vLLM's
libraries give them, the rows an iteration emits, and the continuous-batching schedule (which
iteration prefills, which decodes, which request emits a token when).

Not a scenario (the registry skips modules whose name starts with an underscore): the scenario
itself (its params, the build, the key, hints and rubric) stays in prefill.py, and this module
takes no Params type, only the few fields it reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from app import physics, workload
from functools import lru_cache

from app.trace import optree
from app.trace.builder import KernelInfo


# -- the served models (public configs), FP8 weights ------------------------------

@dataclass(frozen=True)
class _Model:
    key: str
    name: str  # the checkpoint as a serving engine loads it
    arch: str  # the HF architecture class torch.profiler shows in the forward annotation
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_hidden(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def linear_params_per_layer(self) -> int:
        h = self.hidden
        return h * (h + 2 * self.kv_hidden) + h * h + 3 * h * self.ffn

    @property
    def linear_params(self) -> int:
        return self.layers * self.linear_params_per_layer

    @property
    def params(self) -> int:
        return self.linear_params + 2 * self.vocab * self.hidden  # untied embedding and lm_head


_MODELS = {
    "llama-3.1-70b": _Model("llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct-FP8", "LlamaForCausalLM",
                            80, 8192, 64, 8, 28672, 128256),
    "qwen2.5-72b": _Model("qwen2.5-72b", "Qwen/Qwen2.5-72B-Instruct-FP8", "Qwen2ForCausalLM",
                          80, 8192, 64, 8, 29568, 152064),
    "llama-3.1-405b": _Model("llama-3.1-405b", "meta-llama/Llama-3.1-405B-Instruct-FP8", "LlamaForCausalLM",
                             126, 16384, 128, 8, 53248, 128256),
}

WEIGHT_MEM_FRAC = 0.72  # FP8 weights may take this share of a GPU; the rest is KV cache, activations, workspace
SHORT_PROMPT_MAX = 1024  # tokens a chat turn's prompt carries at most in this workload (per prefill iteration)
GPU_GAP_NS = 1_200  # idle between consecutive kernels when the launch queue runs ahead
LAUNCH_LATENCY_NS = 3_000
EW_FLOOR_US = 2.4  # shortest fused elementwise kernel on H100/H200
ATTN_FLOOR_US = 6.0  # split-KV decode attention launch + combine minimum
EW_BW = 0.90  # memory-bound fused kernels reach ~90% of HBM bandwidth
KV_BW = 0.80  # paged KV reads (64-token blocks) in decode attention
GEMM_CEIL = 0.92  # best FP8 GEMM share of dense peak at large M (floor only; phase time decides prefill)
GEMM_BW_CEIL = 0.90
ATTN_CEIL = 0.70  # FA3 FP8 forward share of FP8 dense peak (floor only)
H2D_GBPS = 20.0  # pinned small host-to-device copies
DECODE_NODE_US = 2.0  # CPU per kernel when decode replays as a CUDA graph (vLLM captures decode batch sizes)


def _ar_latency_us(tp: int) -> float:
    """NCCL LL all-reduce latency inside one NVLink domain: ~12 µs at 2 GPUs, ~30 µs at 8."""
    return 6.0 + 3.0 * tp


def _tp_for(m: _Model, gpu: physics.Gpu) -> int:
    weights = m.linear_params + m.vocab * m.hidden * physics.BF16_BYTES  # FP8 linears, bf16 lm_head
    tp = 2
    while weights / tp > WEIGHT_MEM_FRAC * gpu.total_mem_bytes and tp < 8:
        tp *= 2
    return tp


# -- kernel names (vLLM on Hopper: cutlass 3.x FP8 GEMMs, FA3, fused custom ops) --------

def _fp8_gemm_name(m: int) -> str:
    """vLLM's sm90 FP8 cutlass_scaled_mm dispatch: tile and cluster shape by M."""
    if m <= 16:
        tile, cl = (64, 64, 128), (1, 4, 1)
    elif m <= 64:
        tile, cl = (64, 64, 128), (1, 8, 1)
    elif m <= 128:
        tile, cl = (64, 128, 128), (2, 1, 1)
    else:
        tile, cl = (128, 128, 128), (2, 1, 1)
    t = ", ".join(f"cute::C<{x}>" for x in tile)
    c = ", ".join(f"cute::C<{x}>" for x in cl)
    g = (f"vllm::cutlass_3x_gemm<cutlass::float_e4m3_t, cutlass::bfloat16_t, vllm::c3x::ScaledEpilogue, "
         f"cute::tuple<{t} >, cute::tuple<{c} >, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum, "
         f"cutlass::epilogue::TmaWarpSpecialized, false>")
    return f"void cutlass::device_kernel<{g}::GemmKernel>({g}::GemmKernel::Params)"


_FA3 = ("flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, "
        "cute::C<1> >, cute::tuple<cute::C<128>, cute::C<{n}>, cute::C<128> >, 128, cutlass::float_e4m3_t, float, "
        "cutlass::arch::Sm90, true, false, false, true, {split}, false, false, true, true, false, false>, "
        "flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, cute::C<{n}> >, cute::tuple<"
        "cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, true, false, {split}, "
        "false>, flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, {split}, true, true> >")
K_FA3_PREFILL = ("void cutlass::device_kernel<flash::enable_sm90_or_later<" + _FA3.format(n=176, split="false")
                 + " > >(" + _FA3.format(n=176, split="false") + "::Params)")
K_FA3_DECODE = ("void cutlass::device_kernel<flash::enable_sm90_or_later<" + _FA3.format(n=128, split="true")
                + " > >(" + _FA3.format(n=128, split="true") + "::Params)")
K_FA3_COMBINE = ("void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, cute::C<128> >, "
                 "7, 256, 1, false, true, cutlass::bfloat16_t, float, cutlass::arch::Sm90> >(flash::FlashAttnFwdCombine"
                 "<cute::tuple<cute::C<8>, cute::C<128> >, 7, 256, 1, false, true, cutlass::bfloat16_t, float, "
                 "cutlass::arch::Sm90>::Params)")
K_NORM_Q = ("void vllm::fused_add_rms_norm_static_fp8_quant_kernel<c10::BFloat16, 8, c10::Float8_e4m3fn>("
            "c10::Float8_e4m3fn*, c10::BFloat16*, int, c10::BFloat16*, c10::BFloat16 const*, float, float const*, "
            "int, int)")
K_ROPE = ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, "
          "c10::BFloat16 const*, int, long, long, int, int, int)")
K_CACHE = ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, (vllm::Fp8KVCacheDataType)1>("
           "__nv_bfloat16 const*, __nv_bfloat16 const*, unsigned char*, unsigned char*, long const*, long, long, "
           "long, int, int, int, float const*, float const*)")
K_QUANT = ("void vllm::scaled_fp8_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn>(c10::Float8_e4m3fn*, "
           "c10::BFloat16 const*, float const*, long)")
K_ACT = ("void vllm::act_and_mul_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn, &vllm::silu_kernel<float>, false>("
         "c10::Float8_e4m3fn*, c10::BFloat16 const*, float const*, int)")
K_FINAL_NORM = ("void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, "
                "c10::BFloat16 const*, float, int, int)")
K_ALLGATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
K_DIV = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
         "at::native::binary_internal::DivFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor"
         "<float, float, float, at::native::binary_internal::DivFunctor<float> >, std::array<char*, 3ul>)")
K_SOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
             "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)")
K_EXP = ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
         "at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, "
         "at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::"
         "{lambda(curandStatePhilox4_32_10*)#1}>(long, at::PhiloxCudaState, "
         "at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, double, "
         "at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::"
         "{lambda(curandStatePhilox4_32_10*)#1})")
K_ARGMAX = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
            "unsigned int, long, 4, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, "
            "long, 4, 4>)")

# Per-layer kernel rows: (slot, role, cpu op, launch API). Roles: gemm, ew, attn, comb, ar.
_LAYER = [
    ("norm_in", "ew", "_C::fused_add_rms_norm_static_fp8_quant", "cudaLaunchKernel"),
    ("qkv", "gemm", "_C::cutlass_scaled_mm", "cudaLaunchKernelExC"),
    ("rope", "ew", "_C::rotary_embedding", "cudaLaunchKernel"),
    ("cache", "ew", "_C_cache_ops::reshape_and_cache_flash", "cudaLaunchKernel"),
    ("attn", "attn", "_vllm_fa3_C::fwd", "cudaLaunchKernelExC"),
    ("combine", "comb", "_vllm_fa3_C::fwd", "cudaLaunchKernel"),
    ("quant", "ew", "_C::static_scaled_fp8_quant", "cudaLaunchKernel"),
    ("o", "gemm", "_C::cutlass_scaled_mm", "cudaLaunchKernelExC"),
    ("ar1", "ar", "vllm::all_reduce", "cudaLaunchKernel"),
    ("norm_post", "ew", "_C::fused_add_rms_norm_static_fp8_quant", "cudaLaunchKernel"),
    ("gate_up", "gemm", "_C::cutlass_scaled_mm", "cudaLaunchKernelExC"),
    ("act", "ew", "_C::silu_and_mul_quant", "cudaLaunchKernel"),
    ("down", "gemm", "_C::cutlass_scaled_mm", "cudaLaunchKernelExC"),
    ("ar2", "ar", "vllm::all_reduce", "cudaLaunchKernel"),
]
_HEAD = [
    ("final_norm", "ew", "_C::rms_norm", "cudaLaunchKernel"),
    ("lm_head", "lm", "aten::mm", "cudaLaunchKernel"),
    ("gather", "ag", "vllm::all_gather", "cudaLaunchKernel"),
    ("div", "ew", "aten::div_", "cudaLaunchKernel"),
    ("softmax", "ew", "aten::_softmax", "cudaLaunchKernel"),
    ("exp", "ew", "aten::exponential_", "cudaLaunchKernel"),
    ("argmax", "ew", "aten::argmax", "cudaLaunchKernel"),
]


class _Physics:
    """Per-GPU roofline of one iteration's kernels for a model, GPU and TP group."""

    def __init__(self, m: _Model, gpu: physics.Gpu, tp: int, p):  # p: prefill.Params (decode_bw_eff)
        self.m, self.gpu, self.tp = m, gpu, tp
        self.h = m.hidden
        self.hq = m.hidden // tp
        self.kvh = m.kv_hidden // tp
        self.ffn = m.ffn // tp
        self.vocab_tp = m.vocab // tp
        self.fp8 = gpu.fp8_tflops * 1e12
        self.bw = gpu.mem_tbps * 1e12
        self.decode_bw_eff = p.decode_bw_eff
        self.busbw = gpu.busbw_gbps * 1e9
        self.ar_lat_us = _ar_latency_us(tp)
        self.gemm_nk = {"qkv": (self.hq + 2 * self.kvh, self.h), "o": (self.h, self.hq),
                        "gate_up": (2 * self.ffn, self.h), "down": (self.h, self.ffn)}
        # bytes each fused kernel moves per token (norm+quant: x, residual in, residual, fp8 out)
        self.ew_bpt = {"norm_in": 7 * self.h, "norm_post": 7 * self.h, "rope": 4 * (self.hq + self.kvh),
                       "cache": 3 * 2 * self.kvh, "quant": 3 * self.hq, "act": 5 * self.ffn}
        self.kv_bytes_token_layer = 2 * self.kvh  # FP8 K and V
        self.lin_params_gpu = m.linear_params / tp
        self.weight_bytes_gpu = self.lin_params_gpu + self.vocab_tp * self.h * physics.BF16_BYTES

    def gemm_flops_bytes(self, slot: str, tokens: int) -> tuple[float, float]:
        n, k = self.gemm_nk[slot]
        return 2.0 * tokens * n * k, float(n * k + tokens * k + 2 * tokens * n)

    def gemm_us(self, slot: str, tokens: int, mem_eff: float) -> float:
        flops, nbytes = self.gemm_flops_bytes(slot, tokens)
        ce = GEMM_CEIL * tokens / (tokens + 64.0)  # small M fills fewer tiles
        return max(flops / (self.fp8 * ce), nbytes / (self.bw * mem_eff)) * 1e6

    def ar_us(self, tokens: int) -> float:
        msg = tokens * self.h * physics.BF16_BYTES
        return self.ar_lat_us + physics.ring_allreduce_bytes(msg, self.tp) / self.busbw * 1e6

    def attn_flops(self, seqs) -> float:
        """Causal attention FLOPs of one layer per GPU for prefill sequences (QK^T and PV, halved)."""
        return float(sum(2.0 * s * s * self.hq for s in seqs))

    def chunk_attn_flops(self, chunk: int, prefix: int) -> float:
        return 4.0 * chunk * (prefix + chunk / 2.0) * self.hq

    def layer_us(self, decode: bool, tokens: int, ctx_tokens: int = 0, seqs=()) -> dict[str, float]:
        """Per-layer floor time of each kernel slot (µs): roofline at the ceilings (prefill) or the
        decode bandwidth efficiency (decode)."""
        out: dict[str, float] = {}
        mem_eff = self.decode_bw_eff if decode else GEMM_BW_CEIL
        for slot, role, _, _ in _LAYER:
            if role == "gemm":
                out[slot] = self.gemm_us(slot, tokens, mem_eff)
            elif role == "ew":
                out[slot] = max(EW_FLOOR_US, tokens * self.ew_bpt[slot] / (self.bw * EW_BW) * 1e6)
            elif role == "attn":
                if decode:
                    out[slot] = max(ATTN_FLOOR_US, ctx_tokens * self.kv_bytes_token_layer / (self.bw * KV_BW) * 1e6)
                else:
                    out[slot] = self.attn_flops(seqs) / (self.fp8 * ATTN_CEIL) * 1e6
            elif role == "comb":
                out[slot] = EW_FLOOR_US if decode else 0.0
            else:
                out[slot] = self.ar_us(tokens)
        return out

    def head_us(self, tokens: int, rows: int) -> dict[str, float]:
        """Final norm over every token, then logits and sampling for `rows` (one per sequence)."""
        logits = rows * self.m.vocab * physics.FP32_BYTES
        lm_bytes = self.vocab_tp * self.h * physics.BF16_BYTES + rows * self.h * 2
        lm_flops = 2.0 * rows * self.vocab_tp * self.h
        return {
            "final_norm": max(EW_FLOOR_US, tokens * 4 * self.h / (self.bw * EW_BW) * 1e6),
            "lm_head": max(lm_flops / (self.gpu.bf16_tflops * 1e12 * 0.5), lm_bytes / (self.bw * self.decode_bw_eff)) * 1e6,
            "gather": self.ar_lat_us + rows * self.vocab_tp * 2 * (self.tp - 1) / self.busbw * 1e6,
            "div": max(EW_FLOOR_US, 3 * logits / (self.bw * 0.7) * 1e6),
            "softmax": max(3.0, 2 * logits / (self.bw * 0.7) * 1e6),
            "exp": max(EW_FLOOR_US, 2 * logits / (self.bw * 0.7) * 1e6),
            "argmax": max(3.0, logits / (self.bw * 0.7) * 1e6),
        }


def _kernel_spec(ph: _Physics, slot: str, role: str, op: str, kernel: str, tokens: int, decode: bool,
                 ctx: int, seqs, layers: int) -> workload.KernelSpec:
    """The FLOPs, bytes and launch shape one emitted row stands for (`layers` layers of one slot)."""
    h = ph.h
    if role == "gemm":
        n, k = ph.gemm_nk[slot]
        flops, nbytes = ph.gemm_flops_bytes(slot, tokens)
        tm, tn = (64, 64) if tokens <= 64 else ((64, 128) if tokens <= 128 else (128, 128))
        info = KernelInfo(grid=workload.gemm_grid(tokens, n, tm, tn), block=(384, 1, 1),
                          registers_per_thread=168, shared_memory=197_632)
        return workload.KernelSpec(op, kernel, flops * layers, nbytes * layers, info, "gemm", (tokens, n, k))
    if role == "attn":
        if decode:
            nbytes = ctx * ph.kv_bytes_token_layer
            splits = int(np.clip(ctx // max(1, tokens) // 1024, 1, 8))  # split-KV over long contexts
            info = KernelInfo(grid=(splits, ph.kvh // ph.m.head_dim, max(1, tokens)),
                              block=(384, 1, 1), registers_per_thread=128, shared_memory=164_864)
            return workload.KernelSpec(op, kernel, 4.0 * ctx * ph.hq * layers, nbytes * layers, info, "ew")
        info = KernelInfo(grid=(132, 1, 1), block=(384, 1, 1), registers_per_thread=168, shared_memory=214_016)
        t = sum(seqs)
        return workload.KernelSpec(op, kernel, ph.attn_flops(seqs) * layers,
                                   float(t * (ph.hq + 2 * ph.kvh) * 2 * layers), info, "attn")
    if role == "ar" and "cross_device_reduce" in kernel:  # vLLM's custom all-reduce: up to 36 blocks of 512
        info = KernelInfo(grid=(int(np.clip(tokens * h * 2 // (512 * 16), 1, 36)), 1, 1), block=(512, 1, 1),
                          registers_per_thread=64)
        return workload.KernelSpec(op, kernel, 0.0, float(tokens * h * 2 * layers), info, "ew")
    if role in ("ar", "ag"):
        info = KernelInfo(grid=(ph.tp * 8 if role == "ar" else 8, 1, 1), block=(640, 1, 1), registers_per_thread=96, shared_memory=87_568)
        nbytes = tokens * h * 2 if role == "ar" else tokens * ph.vocab_tp * 2
        return workload.KernelSpec(op, kernel, 0.0, float(nbytes * layers), info, "ew")
    if role == "lm":
        info = KernelInfo(grid=(max(1, ph.vocab_tp // 64), max(1, -(-tokens // 128)), 1), block=(256, 1, 1),
                          registers_per_thread=168, shared_memory=73_728)
        return workload.KernelSpec(op, kernel, 2.0 * tokens * ph.vocab_tp * h,
                                   float(ph.vocab_tp * h * 2), info, "gemm", (tokens, ph.vocab_tp, h))
    bpt = ph.ew_bpt.get(slot, 4 * h)
    elems = tokens * bpt
    info = KernelInfo(grid=(max(1, min(65_535, tokens)), 1, 1), block=(256, 1, 1), registers_per_thread=32)
    # the sampler's logits.div_ is PyTorch's own elementwise kernel over [seqs, vocab] (pytorch_launch)
    written = tokens * ph.m.vocab if slot == "div" else None
    return workload.KernelSpec(op, kernel, float(elems) * layers / 4, float(elems * layers), info, "ew", elems=written)


_ROLES = ["gemm", "ew", "attn", "comb", "ar", "ag", "lm"]
# A mixed iteration (chunked prefill, the fixed build): vLLM V0's FlashAttention backend runs the
# chunk's queries over its prefix and the decode batch's queries over their KV caches as two calls,
# the decode one split-KV with its combine; every other kernel runs once over all the tokens.
_LAYER_MIXED = _LAYER[:5] + [("attn_dec", "attn", "_vllm_fa3_C::fwd", "cudaLaunchKernelExC")] + _LAYER[5:]
_DECODE_SLOTS = ("attn_dec", "combine")  # the decode part of a mixed iteration: launch shapes as decode's
_SAMPLER_ROWS = ("lm_head", "gather", "div", "softmax", "exp", "argmax")  # run on one row per sequence


class _Template:
    """The rows one iteration emits: name ids and static launch data, plus per-row metadata."""

    def __init__(self, b, ph: _Physics, groups: np.ndarray, decode: bool, m_tokens: int, rows_out: int,
                 nccl_stream: int):
        self.decode = decode
        layer = self._layer_rows(decode)
        self.layer = layer
        self.groups = groups
        slots, roles, ops, apis, kernels = [], [], [], [], []
        for _ in groups:
            for slot, role, op, api in layer:
                slots.append(slot)
                roles.append(role)
                ops.append(op)
                apis.append(api)
                kernels.append(self._kname(slot, role, decode, m_tokens))
        for slot, role, op, api in _HEAD:
            slots.append(slot)
            roles.append(role)
            ops.append(op)
            apis.append(api)
            kernels.append(self._kname(slot, role, decode, rows_out))
        self.slots, self.roles, self.kernel_names = slots, np.array(roles), kernels
        self.n_layer_rows = len(groups) * len(layer)
        self.op_ids = np.fromiter((b.name_id(o) for o in ops), np.int32, len(ops))
        self.api_ids = np.fromiter((b.name_id(a) for a in apis), np.int32, len(apis))
        # register each kernel name with the launch config its first (representative) shape uses
        k_ids = []
        for slot, role, op, kname in zip(slots, roles, ops, kernels):
            tok = m_tokens if slot not in _SAMPLER_ROWS else rows_out
            spec = _kernel_spec(ph, slot, role, op, kname, tok, decode or slot in _DECODE_SLOTS, tok * 2048,
                                (m_tokens,), 1)
            k_ids.append(b.kernel(kname, spec.info))
        self.k_ids = np.array(k_ids, np.int32)
        self.is_nccl = np.isin(self.roles, ["ar", "ag"])
        self.role_code = np.array([_ROLES.index(r) for r in roles], np.int64)
        self.n_compute = int((~self.is_nccl).sum())
        self.n_nccl = int(self.is_nccl.sum())
        self.tid = np.where(self.is_nccl, nccl_stream, 7).astype(np.int64)
        self.n_fwd = self.n_layer_rows + 1  # the final norm closes the forward
        self.group_of_row = np.concatenate([np.repeat(groups, len(layer)), np.ones(len(_HEAD), np.int64)])
        # the layers repeat their rows: launch_cfgs takes one spec per distinct row
        index: dict[tuple, int] = {}
        self._of_row = np.array([index.setdefault(r, len(index)) for r in zip(slots, roles, kernels)], np.int64)
        self._distinct = list(index)

    def launch_cfgs(self, b, ph: _Physics, tokens: int, rows_out: int, ctx: int, dec_tokens: int = 0,
                    dec_ctx: int = 0) -> np.ndarray:
        """Each row's own launch configuration (TraceBuilder.kernel_config) for an iteration of
        `tokens` rows, `rows_out` of them sampled: the grid _kernel_spec gives its shape, not the
        one of the iteration that first registered the name (one grid per name whatever the batch
        is a tell). A mixed iteration's decode part (_DECODE_SLOTS) runs `dec_tokens` queries over
        `dec_ctx` cached tokens."""
        decode = self.decode
        own = np.empty(len(self._distinct), np.int32)
        for j, (slot, role, kname) in enumerate(self._distinct):
            dec_part = slot in _DECODE_SLOTS and not decode
            tok = rows_out if slot in _SAMPLER_ROWS else (dec_tokens if dec_part else tokens)
            spec = _kernel_spec(ph, slot, role, "", kname, tok, decode or slot in _DECODE_SLOTS,
                                dec_ctx if dec_part else ctx, (tok,), 1)
            own[j] = b.kernel_config(workload.pytorch_launch(spec))
        return own[self._of_row]

    @staticmethod
    def _layer_rows(decode: bool) -> list:
        return [r for r in _LAYER if decode or r[0] != "combine"]

    @staticmethod
    def _kname(slot, role, decode, m):
        if role == "gemm":
            return _fp8_gemm_name(m)
        return {"norm_in": K_NORM_Q, "norm_post": K_NORM_Q, "rope": K_ROPE, "cache": K_CACHE, "quant": K_QUANT,
                "act": K_ACT, "attn": K_FA3_DECODE if decode else K_FA3_PREFILL, "combine": K_FA3_COMBINE,
                "attn_dec": K_FA3_DECODE,
                "ar1": workload.NCCL_ALLREDUCE, "ar2": workload.NCCL_ALLREDUCE, "final_norm": K_FINAL_NORM,
                "lm_head": workload.gemm_name("sm90", m), "gather": K_ALLGATHER, "div": K_DIV,
                "softmax": K_SOFTMAX, "exp": K_EXP, "argmax": K_ARGMAX}[slot]

    def row_us(self, layer_us: dict, head_us: dict) -> np.ndarray:
        """Each emitted row's µs: a layer group's summed kernels plus the launch gaps between them."""
        per_layer = np.array([layer_us[s] for s, _, _, _ in self.layer])
        rows = np.outer(self.groups, per_layer) + (self.groups - 1)[:, None] * (GPU_GAP_NS / 1e3)
        head = np.array([head_us[s] for s, _, _, _ in _HEAD])
        return np.concatenate([rows.ravel(), head])

    def represented_kernels(self) -> int:
        return int(self.groups.sum()) * len(self.layer) + len(_HEAD)


# -- the schedule: which iteration does what ----------------------------------------

def _plan(p, rng: np.random.Generator) -> np.ndarray:
    """Iteration kinds: 0 decode, 1 short-prompt prefill, 2 long-prompt prefill (V0: prefill-first)."""
    n = p.iterations
    kinds = np.zeros(n, np.int8)
    # p99 sits on the spike only if long-prefill stalls are more than 1% of the ITL samples
    n_long = max(1, round(p.long_prompt_pct / 100 * n), math.ceil(0.0125 * n))
    lo, hi = 4, n - 3  # a few healthy iterations first; the decode after the last spike is in the trace
    edges = np.linspace(lo, hi + 1, n_long + 1)
    for i in range(n_long):
        a, z = int(math.ceil(edges[i])), int(math.floor(edges[i + 1])) - 2
        kinds[int(rng.integers(a, max(a, z) + 1))] = 2
    blocked = np.zeros(n, bool)
    longs = np.flatnonzero(kinds == 2)
    for k in longs:
        blocked[max(0, k - 1):k + 2] = True
    blocked[0] = blocked[n - 1] = True
    n_short = round(p.short_prefill_pct / 100 * n)
    chosen = 0
    for k in rng.permutation(n):
        if chosen >= n_short:
            break
        if blocked[k]:
            continue
        kinds[k] = 1
        blocked[max(0, k - 1):k + 2] = True
        chosen += 1
    return kinds


@dataclass
class _Sim:
    kinds: np.ndarray
    decode_tokens: np.ndarray  # B per iteration
    ctx_tokens: np.ndarray  # KV tokens decode attention reads
    prefill_seqs: list  # per iteration: prompt lengths prefilled
    emit_rid: np.ndarray  # (request id, iteration) of every token emitted
    emit_it: np.ndarray
    req_prompt: np.ndarray
    req_output: np.ndarray
    req_first_it: np.ndarray  # -1: first token before the window
    req_generated_before: np.ndarray
    req_long: np.ndarray


def _simulate(p, kinds: np.ndarray, rng: np.random.Generator) -> _Sim:
    n = len(kinds)
    b0 = p.streams
    n_short_it = int((kinds == 1).sum())
    n_decode = int((kinds == 0).sum())
    # remaining-output scale so that streams finishing ~ short arrivals: concurrency stays ~streams
    r_scale = int(np.clip(b0 * n_decode / max(1.0, 1.4 * n_short_it), 40, 4000))
    ctx0 = np.maximum(16, (rng.uniform(0.3, 1.7, b0) * p.context_tokens)).astype(np.int64)
    gen0 = np.minimum(ctx0 - 8, rng.integers(1, 600, b0)).clip(1)
    rem = rng.integers(1, r_scale + 1, b0).astype(np.int64)
    rid = np.arange(b0, dtype=np.int64)
    ctx = ctx0.copy()
    req_prompt = list((ctx0 - gen0).tolist())
    req_output = list((gen0 + rem).tolist())
    req_first = [-1] * b0
    req_gen = list(gen0.tolist())
    req_long = [False] * b0
    next_id = b0
    dec_tok = np.zeros(n, np.int64)
    ctx_tok = np.zeros(n, np.int64)
    seqs_all: list = []
    emit_r: list = []
    emit_i: list = []
    finished_since = 0
    for k in range(n):
        kind = kinds[k]
        if kind == 0:
            dec_tok[k] = len(rid)
            ctx_tok[k] = int(ctx.sum() + len(rid))
            emit_r.append(rid)
            emit_i.append(np.full(len(rid), k, np.int64))
            ctx = ctx + 1
            rem = rem - 1
            done = rem <= 0
            if done.any():
                finished_since += int(done.sum())
                keep = ~done
                rid, ctx, rem = rid[keep], ctx[keep], rem[keep]
            seqs_all.append(())
            continue
        if kind == 2:
            prompts = [p.long_prompt_tokens]
            outs = [int(rng.integers(150, 601))]
        else:
            n_new = int(np.clip(finished_since, 1, 3))
            cap = SHORT_PROMPT_MAX // n_new
            prompts = [int(x) for x in rng.integers(48, cap + 1, n_new)]
            outs = [int(x) for x in rng.integers(max(8, r_scale // 2), max(9, 3 * r_scale // 2) + 1, n_new)]
            finished_since = 0
        new_ids = np.arange(next_id, next_id + len(prompts), dtype=np.int64)
        next_id += len(prompts)
        for pr, out in zip(prompts, outs):
            req_prompt.append(pr)
            req_output.append(out)
            req_first.append(k)
            req_gen.append(0)
            req_long.append(kind == 2)
        emit_r.append(new_ids)
        emit_i.append(np.full(len(new_ids), k, np.int64))
        rid = np.concatenate([rid, new_ids])
        ctx = np.concatenate([ctx, np.array(prompts, np.int64) + 1])
        rem = np.concatenate([rem, np.array(outs, np.int64) - 1])
        seqs_all.append(tuple(prompts))
    return _Sim(kinds, dec_tok, ctx_tok, seqs_all, np.concatenate(emit_r), np.concatenate(emit_i),
                np.array(req_prompt), np.array(req_output), np.array(req_first), np.array(req_gen),
                np.array(req_long))


# -- version 2: one row per layer and kernel, vLLM's custom all-reduce, GEMMs under their cap ------

# vLLM's custom all-reduce (csrc/custom_all_reduce.cuh): one kernel on the compute stream, each GPU
# reading its peers' buffers over NVLink; used below CUSTOM_AR_MAX_BYTES (vLLM's default max_size,
# 8 MiB), above it pynccl's NCCL all-reduce, on the same (current) stream. At 2 GPUs it is always the
# one-stage kernel; at 4 and 8 the two-stage one past 512 KB and 256 KB.
CUSTOM_AR_MAX_BYTES = 8 * 2**20
CUSTOM_AR_LAT_US = 5.5  # its two barriers over NVLink and the launch of 36 blocks
CUSTOM_AR_BW_SHARE = 0.25  # share of the catalog busbw its peer loads reach (small messages, 36 blocks)
# The best FP8 GEMM share of dense peak (app/feasibility.py EFFICIENCY_CAP, sm90 gemm_fp8): the
# prefill's GEMMs run at the instance's `prefill_flop_eff`, never above it.
FP8_GEMM_CAP = 0.75
ATTN_SHARE_OF_GEMM = 0.74  # FA3's FP8 causal forward at long sequences, against the GEMMs' share (~0.55 of peak)
CUDA_GRAPH_SIZES = (1, 2, 4) + tuple(range(8, 513, 8))  # the decode batch sizes vLLM captures


def _custom_ar_name(tp: int, nbytes: int) -> str:
    stage = "1stage" if tp == 2 or (tp <= 4 and nbytes < 512 * 1024) or (tp <= 8 and nbytes < 256 * 1024) else "2stage"
    return (f"void vllm::cross_device_reduce_{stage}<__nv_bfloat16, {tp}>(vllm::RankData*, vllm::RankSignals, "
            f"vllm::Signal*, __nv_bfloat16*, int, int)")


def graph_batch(b: int) -> int:
    """The captured batch size a decode batch of b is padded to (vLLM pads to the next capture)."""
    return next((s for s in CUDA_GRAPH_SIZES if s >= b), b)


class _PhysicsV2(_Physics):
    """Version 2's per-kernel roofline: the prefill's GEMMs at the instance's efficiency (under the
    FP8 cap), attention at FA3's, the TP all-reduce as vLLM runs it (custom kernel or NCCL)."""

    def __init__(self, m: _Model, gpu: physics.Gpu, tp: int, p):
        super().__init__(m, gpu, tp, p)
        self.gemm_eff = min(p.prefill_flop_eff, FP8_GEMM_CAP)
        self.attn_eff = self.gemm_eff * ATTN_SHARE_OF_GEMM

    def gemm_us(self, slot: str, tokens: int, mem_eff: float) -> float:
        flops, nbytes = self.gemm_flops_bytes(slot, tokens)
        ce = self.gemm_eff * tokens / (tokens + 64.0)  # small M fills fewer tiles
        return max(flops / (self.fp8 * ce), nbytes / (self.bw * mem_eff)) * 1e6

    def ar_us(self, tokens: int) -> float:
        msg = tokens * self.h * physics.BF16_BYTES
        if msg < CUSTOM_AR_MAX_BYTES:
            return CUSTOM_AR_LAT_US + 1.5 * self.tp + msg * (self.tp - 1) / (self.busbw * CUSTOM_AR_BW_SHARE) * 1e6
        return self.ar_lat_us + physics.ring_allreduce_bytes(msg, self.tp) / self.busbw * 1e6

    def layer_us(self, decode: bool, tokens: int, ctx_tokens: int = 0, seqs=()) -> dict[str, float]:
        out = super().layer_us(decode, tokens, ctx_tokens, seqs)
        if not decode:
            t = sum(seqs)
            kv_bytes = t * (self.hq + 2 * self.kvh) * 2
            out["attn"] = max(4.0, self.attn_flops(seqs) / (self.fp8 * self.attn_eff) * 1e6,
                              kv_bytes / (self.bw * KV_BW) * 1e6)
        return out

    def mixed_layer_us(self, chunk: int, prefix: int, b_dec: int, ctx_dec: int) -> dict[str, float]:
        """Per-layer kernel times of a mixed iteration (chunked prefill): `chunk` prompt tokens whose
        `prefix` tokens are already in the KV cache, co-scheduled with `b_dec` decode tokens that read
        `ctx_dec` cached tokens. The GEMMs, small kernels and all-reduce run once over chunk + b_dec
        tokens at the prefill's physics; the chunk's causal attention attends to its prefix (later
        chunks cost more), reading the prefix's FP8 KV from the paged cache; decode attention as decode's."""
        tokens = chunk + b_dec
        out = _Physics.layer_us(self, False, tokens, 0, (chunk,))
        q_kv_bytes = chunk * (self.hq + 2 * self.kvh) * 2 + prefix * self.kv_bytes_token_layer
        out["attn"] = max(4.0, self.chunk_attn_flops(chunk, prefix) / (self.fp8 * self.attn_eff) * 1e6,
                          q_kv_bytes / (self.bw * KV_BW) * 1e6)
        out["attn_dec"] = max(ATTN_FLOOR_US, ctx_dec * self.kv_bytes_token_layer / (self.bw * KV_BW) * 1e6)
        out["combine"] = EW_FLOOR_US
        return out

    def ar_name(self, tokens: int) -> str:
        msg = tokens * self.h * physics.BF16_BYTES
        return _custom_ar_name(self.tp, msg) if msg < CUSTOM_AR_MAX_BYTES else workload.NCCL_ALLREDUCE


class _TemplateV2(_Template):
    """One row per layer and kernel, every row on the compute stream; the all-reduce named as vLLM
    runs it for this batch's message."""

    def __init__(self, b, ph: _PhysicsV2, decode: bool, m_tokens: int, rows_out: int):
        self._ar = ph.ar_name(m_tokens)
        super().__init__(b, ph, np.ones(ph.m.layers, np.int64), decode, m_tokens, rows_out, 7)
        self.is_nccl_name = np.array([k.startswith("nccl") for k in self.kernel_names])

    def _kname(self, slot, role, decode, m):
        if role == "ar":
            return self._ar
        return _Template._kname(slot, role, decode, m)


class _TemplateMixed(_TemplateV2):
    """A mixed iteration's rows (the fixed build): a prefill's eager layer with the decode batch's
    split-KV attention and its combine beside the chunk's attention (_LAYER_MIXED)."""

    def __init__(self, b, ph: _PhysicsV2, m_tokens: int, rows_out: int):
        super().__init__(b, ph, False, m_tokens, rows_out)

    @staticmethod
    def _layer_rows(decode: bool) -> list:
        return _LAYER_MIXED


# -- the op tree around each eager launch (app/trace/optree.py) ---------------------
# What torch.profiler (record_shapes, under torch.inference_mode: no autograd nodes, no sequence
# numbers) records around each launch of a vLLM V0 iteration run eagerly. Only dispatcher ops are
# recorded: a custom op the model calls from Python (_C::cutlass_scaled_mm, _C::rotary_embedding)
# is a leaf, its C++ dispatches nothing; what nests is what a custom op registered with
# direct_register_custom_op runs in Python (vllm::unified_attention_with_output: FlashAttentionImpl
# .forward's KV-cache views and slices, the cache write and the FA3 varlen call; vllm::all_reduce:
# the output's torch.empty_like, then the custom all-reduce or pynccl), the allocations an op's C++
# makes (_vllm_fa3_C::fwd's softmax LSE), and aten's own composites (F.linear, torch.softmax).
# The Python wrappers' own allocations beside a custom op (torch.empty for its output) are left
# out: each would be a top-level op in the Python time between two launches, which the flat op's
# CPU time has no room for (the time between ops, app/analysis/fidelity.py, would shrink below the
# real traces'). Shapes are per GPU; vLLM flattens the batch to [tokens, hidden].
FP8 = "c10::Float8_e4m3fn"
UNIFIED_ATTN = "vllm::unified_attention_with_output"
_S, _L = "Scalar", "ScalarList"


def _empty() -> optree.Op:
    """torch::empty(sizes, options): the sizes are an int list, which record_shapes shows as []."""
    return optree.Op("aten::empty", [[], [], [], [], [], []], [_L, _S, _S, "Device", _S, _S])


def _empty_like(shape: list, ty: str = optree.BF16) -> optree.Op:
    return optree.Op("aten::empty_like", [shape, [], [], [], [], []], [ty, _S, _S, _S, _S, _S], children=[
        optree.Op("aten::empty_strided", [[], [], [], [], [], []], [_L, _L, _S, _S, "Device", _S])])


def _slice(shape: list, ty: str = optree.BF16) -> optree.Op:
    """tensor[:n]: aten::slice > aten::as_strided."""
    return optree.Op("aten::slice", [shape, [], [], [], []], [ty, _S, _S, _S, _S], children=[
        optree.Op("aten::as_strided", [shape, [], [], []], [ty, _L, _L, ""])])


def _select(shape: list) -> optree.Op:
    """kv_cache[0]: aten::select > aten::as_strided."""
    return optree.Op("aten::select", [shape, [], []], ["unsigned char", _S, _S], children=[
        optree.Op("aten::as_strided", [shape[1:], [], [], []], ["unsigned char", _L, _L, ""])])


@lru_cache(maxsize=2048)
def row_tree(ph: _Physics, slot: str, op: str, tokens: int, ar_custom: bool) -> optree.Op:
    """The tree of one emitted row (a slot of _LAYER / _LAYER_MIXED / _HEAD) for a batch of
    `tokens` rows (the sampler's rows for the head's sampling slots). The launching op keeps the
    flat trace's name, except the custom all-reduce's, which vllm::all_reduce holds."""
    Op, BF = optree.Op, optree.BF16
    t, h, hd = tokens, ph.h, ph.m.head_dim
    q, kv = [t, ph.hq // hd, hd], [t, ph.kvh // hd, hd]
    cache = [2, 4096, 16, ph.kvh // hd, hd]  # [K/V, blocks, block size, kv heads, head dim] (its shape, not its size)
    if slot in ("norm_in", "norm_post"):
        return Op(op, [[t, h], [t, h], [t, h], [h], [], []], [FP8, BF, BF, BF, "float", _S], launches=True)
    if slot in ph.gemm_nk:  # cutlass_scaled_mm(out, a, b, scale_a, scale_b, bias)
        n, k = ph.gemm_nk[slot]
        return Op(op, [[t, n], [t, k], [k, n], [1], [1], []], [BF, FP8, FP8, "float", "float", ""], launches=True)
    if slot == "rope":  # rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)
        return Op(op, [[t], [t, ph.hq], [t, ph.kvh], [], [131072, hd], []], ["long int", BF, BF, _S, BF, _S],
                  launches=True)
    if slot == "act":  # silu_and_mul_quant(out, input, scale)
        return Op(op, [[t, ph.ffn], [t, 2 * ph.ffn], [1]], [FP8, BF, "float"], launches=True)
    if slot == "quant":  # static_scaled_fp8_quant(out, input, scale)
        return Op(op, [[t, ph.hq], [t, ph.hq], [1]], [FP8, BF, "float"], launches=True)
    if slot == "final_norm":  # rms_norm(out, input, weight, epsilon)
        return Op(op, [[t, h], [t, h], [h], []], [BF, BF, BF, "float"], launches=True)
    if slot == "cache":  # the unified attention op: key_cache = kv_cache[0], value_cache = kv_cache[1],
        # slot_mapping.flatten(), then the cache write (the attention rows join this op)
        return Op(UNIFIED_ATTN, [q, kv, kv, q, []], [BF, BF, BF, BF, ""], children=[
            _select(cache), _select(cache), Op("aten::flatten", [[t], [], []], ["long int", _S, _S]),
            Op(op, [kv, kv, cache[1:], cache[1:], [t], [], [], []],
               [BF, BF, "unsigned char", "unsigned char", "long int", "", "float", "float"], launches=True)])
    if slot in ("attn", "attn_dec", "combine"):  # in the same op: query[:n], key[:n], value[:n], output[:n] for
        # this part of the batch, then the FA3 varlen call, which allocates its softmax LSE
        return Op(UNIFIED_ATTN, joins_previous=True, children=[
            _slice(q), _slice(kv), _slice(kv), _slice(q),
            Op(op, [q, cache[1:], cache[1:], [], [], [t + 1]], [BF, FP8, FP8, "", "", "int"], launches=True,
               children=[_empty()])])
    if slot in ("ar1", "ar2"):  # vllm::all_reduce: out = torch.empty_like(input), then the custom AR or pynccl
        if ar_custom:
            return Op(op, [[t, h]], [BF], children=[_empty_like([t, h]), Op(
                "_C_custom_ar::all_reduce", [[], [t, h], [t, h], [], []], [_S, BF, BF, _S, _S], launches=True)])
        return Op(op, [[t, h]], [BF], launches=True, children=[_empty_like([t, h])])
    if slot == "lm_head":  # LogitsProcessor: F.linear(hidden_states, lm_head.weight) on the sampled rows
        v = ph.vocab_tp
        return Op("aten::linear", [[t, h], [v, h], []], [BF, BF, ""], children=[
            Op("aten::t", [[v, h]], [BF], children=[
                Op("aten::transpose", [[v, h], [], []], [BF, _S, _S], children=[
                    Op("aten::as_strided", [[h, v], [], [], []], [BF, _L, _L, ""])])]),
            Op("aten::matmul", [[t, h], [h, v]], [BF, BF], children=[
                Op(op, [[t, h], [h, v]], [BF, BF], launches=True)])])
    if slot == "gather":  # vllm::all_gather: the output's torch.empty, then the NCCL all-gather
        return Op(op, [[t, ph.vocab_tp], []], [BF, _S], launches=True, children=[_empty()])
    if slot == "softmax":  # torch.softmax(logits, dim=-1, dtype=torch.float)
        return Op("aten::softmax", [[t, ph.m.vocab], [], []], ["float", _S, _S], children=[
            Op(op, [[t, ph.m.vocab], [], []], ["float", _S, _S], launches=True)])
    if slot == "div":  # logits.div_(temperatures.unsqueeze(dim=1))
        return Op(op, [[t, ph.m.vocab], [t, 1]], ["float", "float"], launches=True)
    if slot == "exp":  # q.exponential_()
        return Op(op, [[t, ph.m.vocab], [], []], ["float", _S, ""], launches=True)
    if slot == "argmax":  # probs.div_(q).argmax(dim=1)
        return Op(op, [[t, ph.m.vocab], [], []], ["float", _S, _S], launches=True)
    raise KeyError(slot)
