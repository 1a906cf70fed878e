"""Would this instance run at all? The gates every drawn instance passes (issue 13): it fits in
the GPU's memory, and its kernels run no faster than the best published kernels of their
family on that GPU. A scenario applies them in `adjust_draw` (pulling a draw back into the
feasible region) and states them in its `Params` validator (refusing an override that leaves
it), so every seed is an instance a real job could have produced.

Memory of a data-parallel training step, per GPU (ZeRO paper, Rajbhandari et al. 2020, §3.1;
activations: Korthikanti et al. 2022, "Reducing Activation Recomputation", §4.1):
- weights and gradients in the parameter dtype (bf16: 2 + 2 bytes per parameter);
- AdamW's two moments: torch.optim.AdamW keeps them in the parameter's dtype (bf16: 4 bytes
  per parameter); mixed precision with fp32 master weights keeps 4 (master) + 8 (moments);
- sharding: ZeRO-1 splits the optimizer state over the ranks, ZeRO-2 the gradients too,
  ZeRO-3 / FSDP everything (plus one layer's gathered weights at a time);
- activations of a transformer layer, bf16, flash attention (no s x s scores kept):
  34 x hidden bytes per token (Korthikanti's sbh(34 + 5as/h) without the attention-score
  term); with full activation checkpointing only each layer's input, 2 x hidden bytes per
  token, is kept, plus one layer's full activations while it is recomputed;
- the CUDA context, NCCL buffers and the caching allocator's fragmentation: a fixed few GB.

An instance may use at most 90% of HBM (the allocator needs room to breathe; real jobs at
95%+ thrash, which is another case).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app import physics

HBM_BUDGET = 0.90  # share of the GPU's memory an instance may plan to use
RUNTIME_BYTES = 3 * 2**30  # CUDA context, cuBLAS workspaces, NCCL buffers, fragmentation
ACT_BYTES_PER_TOKEN_HIDDEN = 34  # bf16 transformer layer with flash attention (Korthikanti et al.)
CHECKPOINT_BYTES_PER_TOKEN_HIDDEN = 2  # a checkpointed layer keeps its bf16 input only

Sharding = Literal["ddp", "zero1", "zero2", "zero3"]  # zero3: FSDP FULL_SHARD likewise


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes per GPU, by what holds them."""
    weights: float
    grads: float
    optimizer: float
    activations: float
    runtime: float
    master_fp32: bool = False  # what the parts hold, for `needs`: fp32 grads and master weights + moments

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.runtime

    def share_of(self, gpu: physics.Gpu) -> float:
        return self.total / gpu.total_mem_bytes

    def fits(self, gpu: physics.Gpu) -> bool:
        return self.share_of(gpu) <= HBM_BUDGET

    def describe(self, gpu: physics.Gpu) -> str:
        gb = lambda x: f"{x / 1e9:.1f}"  # noqa: E731
        return (f"{gb(self.total)} GB of {gpu.key}'s {gb(gpu.total_mem_bytes)} GB ({self.share_of(gpu):.0%}): "
                f"weights {gb(self.weights)}, grads {gb(self.grads)}, optimizer {gb(self.optimizer)}, "
                f"activations {gb(self.activations)}, runtime {gb(self.runtime)}")

    def needs(self, gpu: physics.Gpu, what: str) -> str | None:
        """None when it fits; else the one line an override past memory is refused with,
        naming the figure and what holds it (see `needs`); `what` names the job and its sharding."""
        if self.fits(gpu):
            return None
        opt = "fp32 master weights + AdamW moments" if self.master_fp32 else "bf16 AdamW moments"
        return needs(what, gpu, [("bf16 params", self.weights),
                                 ("fp32 grads" if self.master_fp32 else "bf16 grads", self.grads),
                                 (opt, self.optimizer), ("activations", self.activations),
                                 ("CUDA context, workspaces and NCCL buffers", self.runtime)])


def needs(what: str, gpu: physics.Gpu, parts: list[tuple[str, float]]) -> str | None:
    """None when `parts` (label, bytes per GPU) fit the budget; else one line naming the figure:
    "70B ... needs 568.9 GB of the H100's 85.0 GB HBM3 (a plan may use 90%, 76.5 GB): bf16 params
    140.0 GB + ...". Scenarios refuse an override past memory with it before any build work
    (ScenarioParams.refusal)."""
    total = sum(b for _, b in parts)
    if total <= HBM_BUDGET * gpu.total_mem_bytes:
        return None
    gb = lambda x: f"{x / 1e9:.1f} GB"  # noqa: E731
    return (f"{what} needs {gb(total)} of the {gpu.key}'s {gb(gpu.total_mem_bytes)} {gpu.mem_kind} (a plan may use "
            f"{HBM_BUDGET:.0%}, {gb(HBM_BUDGET * gpu.total_mem_bytes)}): "
            + " + ".join(f"{label} {gb(b)}" for label, b in parts if b))


def training_memory(n_params: float, *, world: int, tokens_per_gpu: int, hidden: int, layers: int,
                    sharding: Sharding = "ddp", master_fp32: bool = False,
                    checkpointing: bool = False) -> TrainingMemory:
    """Per-GPU memory of one training step of a dense transformer with AdamW."""
    shard = lambda x, from_stage: x / world if _stage(sharding) >= from_stage else x  # noqa: E731
    weights = shard(n_params * physics.BF16_BYTES, 3)
    grads = shard(n_params * (4 if master_fp32 else physics.BF16_BYTES), 2)
    optimizer = shard(n_params * (12 if master_fp32 else 2 * physics.BF16_BYTES), 1)
    if _stage(sharding) >= 3:  # one layer's weights gathered at a time (two with prefetch)
        weights += 2 * n_params / max(layers, 1) * physics.BF16_BYTES
    full_layer = ACT_BYTES_PER_TOKEN_HIDDEN * hidden * tokens_per_gpu
    if checkpointing:
        acts = CHECKPOINT_BYTES_PER_TOKEN_HIDDEN * hidden * tokens_per_gpu * layers + full_layer
    else:
        acts = full_layer * layers
    return TrainingMemory(weights, grads, optimizer, acts, RUNTIME_BYTES, master_fp32)


def _stage(sharding: Sharding) -> int:
    return {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}[sharding]


# The best sustained share of dense peak a kernel family reaches on each architecture, from
# published kernels: cuBLAS bf16 GEMMs at large sizes ~75-80% on H100, ~80% on A100;
# FlashAttention-2 forward ~35% of H100's peak and ~70% of A100's, FlashAttention-3 ~75% on
# H100 (Shah et al. 2024, arXiv 2407.08608, figs. 4-5); FP8 GEMMs ~65-75% sustained once power
# pulls the clocks down. A drawn efficiency above its cap is a kernel nobody has written.
EFFICIENCY_CAP = {
    ("sm90", "gemm_bf16"): 0.80, ("sm80", "gemm_bf16"): 0.82, ("sm89", "gemm_bf16"): 0.75,
    ("sm90", "gemm_fp8"): 0.75, ("sm89", "gemm_fp8"): 0.70,
    ("sm90", "flash2"): 0.38, ("sm80", "flash2"): 0.72, ("sm90", "flash3"): 0.75,
}


def efficiency_cap(arch: str, family: str) -> float:
    return EFFICIENCY_CAP[(arch, family)]
