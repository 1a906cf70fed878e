"""The kernels of one skinny-gemm micro-step (skinny_gemm.py's scenario): the model's shape they
follow, cuBLAS's configurations for each GEMM and the names it gives them (Ampere's in version 1,
Hopper's in version 2), the skinny GEMM's DRAM traffic model, and the recipe, every kernel the
forward and backward launch with its duration now (T tokens, memory-bound) and after the fix
(4T tokens). The physics is the module docstring's of skinny_gemm.py, which states the numbers.

Not a scenario (the registry skips modules whose name starts with an underscore): the params,
the build that emits these kernels, the key and the rubric stay in skinny_gemm.py; the recipe
reads only the Params fields it names.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import numpy as np

from app import physics, workload
from app.trace.builder import KernelInfo

if TYPE_CHECKING:
    from scenarios.skinny_gemm import Params

EV = "autograd::engine::evaluate_function: "
VOCAB = 32_000  # Llama 2 tokenizer
ASSUMED_GEMM_EFF = 0.70  # no skinny kernel beats this share of the tensor peak (compute cap)
EW_BW_FRAC = 0.80  # PyTorch's vectorized elementwise kernels on 1-30 MB tensors, past the ramp
ATTN_EFF = 0.55  # FlashAttention 2 at full occupancy (share of dense peak)
RAMP_US = 1.8  # fixed launch ramp and tail of a small kernel
ATTN_RAMP_US = 4.0
LARGE_OVERFETCH = 1.2  # DRAM traffic over the minimum for the sm90 large-tile kernel
FAMILY = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_"
WIDE = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_"
DEEP = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_"
WGRAD = "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_"
CONFIG = {  # kernel config -> (tile_m, tile_n, threads, shared memory bytes)
    FAMILY: (128, 64, 128, 98_304),
    WIDE: (128, 128, 256, 98_304),
    DEEP: (128, 128, 256, 81_920),
    WGRAD: (128, 256, 256, 147_456),
}
# Version 2: what cuBLAS 12 names these configurations on Hopper (the Hopper-native xmma
# kernels with warpgroup MMA; `ampere_*` kernels are what it picks on A100). The tile shapes
# are the version 1 configs' (the DRAM traffic model keeps its 128-row tiles); {l} is the layout.
_SM90 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_{l}_n_tilesize{tile}_warpgroupsize{wg}_execute_segment_k_{seg}_kernel__5x_cublas"
SM90_NAME = {
    FAMILY: _SM90.format(l="{l}", tile="128x64x64", wg="1x1x1", seg="off"),
    WIDE: _SM90.format(l="{l}", tile="128x128x64", wg="1x1x1", seg="off"),
    DEEP: _SM90.format(l="{l}", tile="128x128x64", wg="1x1x1", seg="on"),
    WGRAD: _SM90.format(l="{l}", tile="128x256x64", wg="2x1x1", seg="off"),
}
SM90_LAUNCH = {  # config -> (threads: a producer warpgroup plus the consumers, shared memory bytes)
    FAMILY: (256, 197_632), WIDE: (256, 213_248), DEEP: (256, 213_248), WGRAD: (384, 229_376),
}

def _ffn(h: int) -> int:
    """Llama's SwiGLU width: 8/3 h rounded up to a multiple of 256 (11008 at 4096, 13824 at 5120)."""
    return 256 * math.ceil(8 * h / 3 / 256)


def _layers(params_b: float, h: int) -> int:
    per = 4 * h * h + 3 * h * _ffn(h) + 2 * h
    return int(round((params_b * 1e9 - 2 * VOCAB * h) / per))


def gemm_name(cfg: str, layout: str, v2: bool) -> str:
    return SM90_NAME[cfg].format(l=layout) if v2 else cfg + layout


def config_of(kernel: str) -> str:
    """A GEMM's configuration: its name without the layout (nsys lists one row per layout)."""
    if kernel.startswith("ampere_bf16"):
        return kernel[:-3]
    if kernel.startswith("sm90_xmma_gemm"):
        return re.sub(r"_(tn|nn|nt)_n_", "_", kernel)
    return kernel


def layout_of(kernel: str) -> str:
    found = re.search(r"_(tn|nn|nt)(_n_|$)", kernel)
    return found.group(1) if found else ""


def family_label(v2: bool) -> str:
    return config_of(gemm_name(FAMILY, "tn", v2)) if v2 else FAMILY.rstrip("_")


# -- the physics of one kernel ----------------------------------------------------

def _skinny_bytes(t: int, k_in: int, n_out: int, layout: str, tile_m: int, tile_n: int, refetch: float) -> float:
    """DRAM bytes of a skinny GEMM: the weight-sized operand once per M-tile (token slice), the
    activation strip `refetch` times per 64 N-tiles (L2 misses as the CTA columns sweep it), the
    other activation once."""
    w = k_in * n_out
    if layout == "nn":  # dX[T, K] = dY[T, N] W^T: the strip is dY, swept across K columns
        a, c, cols = t * n_out, t * k_in, k_in
    else:  # forward tn, weight grad nt: the strip is X, swept across N columns
        a, c, cols = t * k_in, t * n_out, n_out
    return 2.0 * (w * math.ceil(t / tile_m) + a * refetch * (cols / tile_n) / 64 + c)


def _gemm_shape(t: int, k_in: int, n_out: int, layout: str) -> tuple[int, int, int]:
    """(M, N, K) as cuBLAS sees it: forward T x N_out over K_in, data grad T x K_in over N_out,
    weight grad K_in x N_out over the T tokens."""
    return {"tn": (t, n_out, k_in), "nn": (t, k_in, n_out), "nt": (k_in, n_out, t)}[layout]


class _Kernel:
    """One kernel of the micro-step recipe: its spec for the trace, its class and its times."""

    __slots__ = ("spec", "cls", "base_ns", "after_ns", "dram_bytes", "param_elems")

    def __init__(self, spec, cls, base_ns, after_ns, dram_bytes=0.0, param_elems=0):
        self.spec, self.cls, self.base_ns, self.after_ns = spec, cls, base_ns, after_ns
        self.dram_bytes, self.param_elems = dram_bytes, param_elems


class _Recipe:
    """The kernels of one micro-step (forward on the main thread, backward on the autograd
    thread) with their physics durations now (T tokens) and after the fix (4T tokens)."""

    def __init__(self, p: Params, gpu: physics.Gpu, model: dict | None = None, tokens: int | None = None,
                 large: bool = False):
        """`model`: version 2's real config (its widths, depth, vocabulary and Hopper kernel names).
        `tokens`, `large`: the fixed build's micro-step (4 x seq tokens) and its GEMMs, compute-bound
        under cuBLAS's large-tile kernel (only the specs are used: its times are the `after_ns`
        of the unfixed recipe, the same physics the key's expected step comes from)."""
        self.large = large
        self.p, self.gpu, self.model = p, gpu, model
        self.v2 = model is not None
        if model is None:
            self.h, self.f = p.hidden, _ffn(p.hidden)
            self.layers = _layers(p.model_params_b, p.hidden)
            self.vocab = VOCAB
        else:
            self.h, self.f, self.layers, self.vocab = model["hidden"], model["ffn"], model["layers"], model["vocab"]
        self.t = tokens or p.seq
        self.bw = gpu.mem_tbps * 1e12
        self.peak = gpu.bf16_tflops * 1e12
        self.fwd: list[_Kernel] = []
        self.bwd: list[_Kernel] = []
        self._build()

    # durations, ns
    def _gemm_ns(self, t, k_in, n_out, layout, cfg, after=False):
        m, n, k = _gemm_shape(t, k_in, n_out, layout)
        flops = physics.gemm_flops(m, n, k)
        if after:
            return max(flops / (self.peak * self.p.large_gemm_eff),
                       LARGE_OVERFETCH * physics.gemm_bytes(m, n, k) / (self.bw * self.p.dram_frac)) * 1e9, 0.0
        traffic = _skinny_bytes(t, k_in, n_out, layout, CONFIG[cfg][0], CONFIG[cfg][1], self.p.act_refetch)
        return max(traffic / (self.bw * self.p.dram_frac), flops / (self.peak * ASSUMED_GEMM_EFF)) * 1e9, traffic

    def _ew_ns(self, nbytes, frac=EW_BW_FRAC):
        return (RAMP_US * 1e-6 + nbytes / (self.bw * frac)) * 1e9

    def _attn_ns(self, flops, batch):
        heads = max(1, self.h // 128)
        ctas = math.ceil(self.t / 128) * batch * heads
        eff = ATTN_EFF * min(1.0, ctas / self.gpu.num_sms)
        return (ATTN_RAMP_US * 1e-6 + flops / (self.peak * eff)) * 1e9

    def _config(self, weight: str, layout: str) -> str:
        """cuBLAS's pick for each skinny GEMM, as its heuristics land on these shapes: the square
        h x h projections get the 128x64 kernel in all three layouts; the MLP and LM-head GEMMs split
        by what is wide: a wide output (N = ffn or vocab) 128x128, a deep reduction (K = ffn) the
        32x5-stage 128x128, and their token-reduction weight grads the 128x256."""
        if weight in ("q", "k", "v", "o"):
            return FAMILY
        if layout == "nt":
            return WGRAD
        wide_out = (layout == "tn" and weight in ("gate", "up", "head")) or (layout == "nn" and weight == "down")
        return WIDE if wide_out else DEEP

    def _gemm(self, op, k_in, n_out, layout, weight):
        t = self.t
        cfg = self._config(weight, layout)
        m, n, k = _gemm_shape(t, k_in, n_out, layout)
        if self.large:  # at M = 4 x seq every GEMM is compute-bound: cuBLAS's large tile
            cfg = WGRAD
        tile_m, tile_n, threads, smem = CONFIG[cfg]
        regs = 168 if cfg == FAMILY else 232
        if self.v2:
            threads, smem = SM90_LAUNCH[cfg]
            regs = 168
        info = KernelInfo(grid=workload.gemm_grid(m, n, tile_m, tile_n), block=(threads, 1, 1),
                          registers_per_thread=regs, shared_memory=smem)
        now, traffic = self._gemm_ns(t, k_in, n_out, layout, cfg)
        after, _ = self._gemm_ns(4 * t, k_in, n_out, layout, cfg, after=True)
        spec = workload.KernelSpec(op, gemm_name(cfg, layout, self.v2), physics.gemm_flops(m, n, k),
                                   physics.gemm_bytes(m, n, k), info, "gemm", (m, n, k))
        grad = k_in * n_out if layout == "nt" else 0  # the weight grad lands with this kernel
        return _Kernel(spec, "family" if cfg == FAMILY else "kindred", now, after / 4, traffic, grad)

    def _ew(self, op, kernel, elems, bytes_per_elem, cls="other"):
        blocks = max(1, min(65_535, elems // 1024))
        spec = workload.KernelSpec(op, kernel, float(elems), float(elems * bytes_per_elem),
                                   KernelInfo(grid=(blocks, 1, 1), block=(256, 1, 1), registers_per_thread=32), "ew",
                                   elems=elems)
        return _Kernel(spec, cls, self._ew_ns(elems * bytes_per_elem), self._ew_ns(4 * elems * bytes_per_elem) / 4)

    def _attn(self, op, kernel, flops, nbytes, bwd=False):
        heads = max(1, self.h // 128)
        info = KernelInfo(grid=(max(1, self.t // 128), 1, heads), block=(256 if bwd else 128, 1, 1),
                          registers_per_thread=255, shared_memory=49_152 if not bwd else 98_304)
        spec = workload.KernelSpec(op, kernel, flops, nbytes, info, "attn")
        return _Kernel(spec, "other", self._attn_ns(flops, 1), self._attn_ns(4 * flops, 4) / 4)

    def _build(self):
        h, f, t = self.h, self.f, self.t
        att_flops = 2.0 * t * t * h  # causal QK^T and PV
        E = workload.ELEMENTWISE
        ew = lambda op, key, elems, bpe: self._ew(op, E[key], elems, bpe)
        g = self._gemm

        def rms():  # HF LlamaRMSNorm in eager: fp32 pow, mean, rsqrt, scale, then the bf16 weight
            return [ew("aten::pow", "pow", t * h, 8), ew("aten::mean", "mean", t * h, 4),
                    ew("aten::rsqrt", "rsqrt", t, 8), ew("aten::mul", "mul_f32", t * h, 12),
                    ew("aten::mul", "mul", t * h, 6)]

        def rms_b():
            return [ew(EV + "MulBackward0", "mul", t * h, 6), ew(EV + "MulBackward0", "mul_f32", t * h, 12),
                    ew(EV + "RsqrtBackward0", "mul_f32", t, 12), ew(EV + "MeanBackward1", "mul_f32", t * h, 8),
                    ew(EV + "PowBackward0", "mul_f32", t * h, 12), ew(EV + "ToCopyBackward0", "copy", t * h, 6)]

        layer = rms()
        layer += [g("aten::mm", h, h, "tn", "q") for _ in range(1)] + [g("aten::mm", h, h, "tn", "k"),
                                                                        g("aten::mm", h, h, "tn", "v")]
        layer += [ew("aten::mul", "mul", 2 * t * h, 6), ew("aten::neg", "neg", t * h, 4),
                  ew("aten::cat", "cat", 2 * t * h, 4), ew("aten::add", "add", 2 * t * h, 6),
                  self._attn("FlashAttnFunc", workload.FLASH["fwd"], att_flops, 8.0 * t * h),
                  g("aten::mm", h, h, "tn", "o"), ew("aten::add", "add", t * h, 6)]
        layer += rms()
        layer += [g("aten::mm", h, f, "tn", "gate"), g("aten::mm", h, f, "tn", "up"),
                  ew("aten::silu", "silu", t * f, 4), ew("aten::mul", "mul", t * f, 6),
                  g("aten::mm", f, h, "tn", "down"), ew("aten::add", "add", t * h, 6)]
        self.fwd = ([ew("aten::embedding", "embedding", t * h, 4)] + layer * self.layers + rms()
                    + [g("aten::mm", h, self.vocab, "tn", "head"),
                       ew("aten::_log_softmax", "softmax_xent", t * self.vocab, 8)])

        mm = EV + "MmBackward0"
        fb = EV + "FlashAttnFuncBackward"
        layer = [ew(EV + "AddBackward0", "add", t * h, 6), g(mm, f, h, "nn", "down"), g(mm, f, h, "nt", "down"),
                 ew(EV + "MulBackward0", "mul", t * f, 6), ew(EV + "MulBackward0", "mul", t * f, 6),
                 ew(EV + "SiluBackward0", "silu", t * f, 6)]
        for w in ("gate", "up"):
            layer += [g(mm, h, f, "nn", w), g(mm, h, f, "nt", w)]
        layer += [ew(EV + "AddBackward0", "add", t * h, 6)] + rms_b() + [ew(EV + "AddBackward0", "add", t * h, 6),
                                                                          g(mm, h, h, "nn", "o"),
                                                                          g(mm, h, h, "nt", "o")]
        layer += [self._ew(fb, workload.FLASH["bwd_dot"], t * h, 6),
                  self._attn(fb, workload.FLASH["bwd"], 2.5 * att_flops, 16.0 * t * h, bwd=True),
                  self._ew(fb, workload.FLASH["bwd_convert"], t * h, 6),
                  ew(EV + "MulBackward0", "mul", 2 * t * h, 6), ew(EV + "CatBackward0", "neg", t * h, 4),
                  ew(EV + "AddBackward0", "add", 2 * t * h, 6)]
        for w in ("q", "k", "v"):
            layer += [g(mm, h, h, "nn", w), g(mm, h, h, "nt", w)]
        layer += [ew(EV + "AddBackward0", "add", t * h, 6), ew(EV + "AddBackward0", "add", t * h, 6)] + rms_b()
        self.bwd = ([ew(EV + "LogSoftmaxBackward0", "mul_f32", t * self.vocab, 12), g(mm, h, self.vocab, "nn", "head"),
                     g(mm, h, self.vocab, "nt", "head")] + rms_b() + layer * self.layers
                    + [ew(EV + "EmbeddingBackward0", "sum", t * h, 4)])
        self.bwd[-1] = _Kernel(self.bwd[-1].spec, "other", self.bwd[-1].base_ns, self.bwd[-1].after_ns,
                               param_elems=self.vocab * h)

    def arrays(self, kernels):
        return (np.array([k.base_ns for k in kernels]), np.array([k.after_ns for k in kernels]),
                np.array([k.cls for k in kernels]))
