"""Hardware catalog and the first-principles formulas every scenario builds on.

Every number carries its source. Units are in the names: `_tflops` is dense
bf16 TFLOP/s, `_tbps` TB/s (1e12 bytes/s), `_gbps` GB/s (1e9 bytes/s),
`_mhz` MHz, `_ms`/`_us`/`_ns` time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    key: str
    name: str  # as torch.cuda.get_device_properties prints it
    arch: str  # kernel-name family: sm90, sm80, sm89
    bf16_tflops: float  # dense, no sparsity
    fp8_tflops: float  # dense, no sparsity; 0 where the GPU has no FP8 tensor cores
    mem_tbps: float
    mem_kind: str
    interconnect: str
    busbw_gbps: float  # what nccl-tests' ring all-reduce reaches at large sizes
    link_peak_gbps: float  # per-direction peak of the link; busbw can never exceed it
    max_sm_clock_mhz: int
    mem_clock_mhz: int
    num_sms: int
    total_mem_bytes: int
    compute_major: int
    compute_minor: int
    tdp_w: int

    @property
    def ridge_flop_per_byte(self) -> float:
        return ridge_point(self)


GPUS: dict[str, Gpu] = {
    # H100 SXM5 datasheet: 989.4 TFLOP/s dense BF16, 1979 dense FP8, 3.35 TB/s HBM3, NVLink 4 at
    # 900 GB/s bidirectional (450 per direction), 1980 MHz max SM clock, 132 SMs,
    # 700 W. busbw ~350-400 GB/s: nccl-tests all_reduce_perf on 8x H100 DGX (DESIGN.md).
    "H100": Gpu("H100", "NVIDIA H100 80GB HBM3", "sm90", 989.0, 1979.0, 3.35, "HBM3",
                "NVLink 4", 370.0, 450.0, 1980, 2619, 132, 85_045_231_616, 9, 0, 700),
    # H200 SXM datasheet: same SMs and clocks as H100, 4.8 TB/s HBM3e, 141 GB.
    "H200": Gpu("H200", "NVIDIA H200", "sm90", 989.0, 1979.0, 4.8, "HBM3e",
                "NVLink 4", 370.0, 450.0, 1980, 3201, 132, 150_110_011_392, 9, 0, 700),
    # A100 SXM4 80GB datasheet: 312 TFLOP/s dense BF16 (no FP8 tensor cores), 2.039 TB/s HBM2e, NVLink 3 at
    # 600 GB/s bidirectional (300 per direction), 1410 MHz boost, 108 SMs, 400 W.
    # busbw ~230 GB/s: nccl-tests on DGX A100 (DESIGN.md).
    "A100": Gpu("A100", "NVIDIA A100-SXM4-80GB", "sm80", 312.0, 0.0, 2.04, "HBM2e",
                "NVLink 3", 230.0, 300.0, 1410, 1593, 108, 85_198_045_184, 8, 0, 400),
    # L40S datasheet: 362.05 TFLOP/s dense BF16 (733 with sparsity), 733 dense FP8, 864 GB/s GDDR6,
    # PCIe Gen4 x16 (~32 GB/s per direction, ~22 GB/s ring busbw), 2520 MHz boost,
    # 142 SMs, 350 W.
    "L40S": Gpu("L40S", "NVIDIA L40S", "sm89", 362.0, 733.0, 0.864, "GDDR6",
                "PCIe Gen4 x16", 22.0, 32.0, 2520, 9001, 142, 47_697_362_944, 8, 9, 350),
}

BF16_BYTES = 2
# CUDA Graph replay: ~0.4 µs device-side gap between captured kernels, and ~0.06 ms of
# host work per replay (cudaGraphLaunch, sampling, the item sync) for a batch-1 decode token.
CUDA_GRAPH_NODE_GAP_US = 0.4
CUDA_GRAPH_HOST_MS = 0.06
INT8_BYTES = 1
FP32_BYTES = 4


def ring_allreduce_bytes(message_bytes: float, ranks: int) -> float:
    """Bytes each GPU sends in a ring all-reduce: 2(N-1)/N x message (NCCL PERFORMANCE.md)."""
    return 2.0 * (ranks - 1) / ranks * message_bytes


def allreduce_ms(message_bytes: float, ranks: int, busbw_gbps: float, latency_us: float = 0.0) -> float:
    """Time of one ring all-reduce at a given bus bandwidth, plus a fixed latency."""
    return ring_allreduce_bytes(message_bytes, ranks) / (busbw_gbps * 1e9) * 1e3 + latency_us / 1e3


def busbw_gbps(message_bytes: float, ranks: int, time_ms: float) -> float:
    """Bus bandwidth nccl-tests would report for a measured all-reduce."""
    return ring_allreduce_bytes(message_bytes, ranks) / (time_ms / 1e3) / 1e9


def training_flops(params: float, tokens: float) -> float:
    """Forward + backward FLOPs of a dense transformer: 6 x params x tokens (Kaplan et al. 2020)."""
    return 6.0 * params * tokens


def mfu_pct(flops_per_step_per_gpu: float, step_ms: float, gpu: Gpu) -> float:
    """Model FLOPs utilization: achieved model FLOP/s over the GPU's dense peak, in percent."""
    return flops_per_step_per_gpu / (step_ms / 1e3) / (gpu.bf16_tflops * 1e12) * 100.0


def gemm_flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def gemm_bytes(m: int, n: int, k: int, elem_bytes: int = BF16_BYTES) -> float:
    """Minimum traffic of C[MxN] = A[MxK] @ B[KxN]: read A and B once, write C once."""
    return float(elem_bytes) * (m * k + k * n + m * n)


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    return flops / nbytes


def ridge_point(gpu: Gpu) -> float:
    """FLOP/byte where the roofline's slope meets its flat roof (H100: 989e12 / 3.35e12 ~ 295)."""
    return gpu.bf16_tflops * 1e12 / (gpu.mem_tbps * 1e12)


def roofline_us(flops: float, nbytes: float, gpu: Gpu, compute_eff: float = 1.0,
                mem_eff: float = 1.0, clock_ratio: float = 1.0) -> float:
    """Lower-bound kernel time: the slower of its compute and memory demands.

    `clock_ratio` scales the compute roof with the SM clock (a throttled GPU); HBM
    bandwidth does not follow the SM clock.
    """
    t_compute = flops / (gpu.bf16_tflops * 1e12 * compute_eff * clock_ratio)
    t_memory = nbytes / (gpu.mem_tbps * 1e12 * mem_eff)
    return max(t_compute, t_memory) * 1e6


def attainable_tflops(intensity: float, gpu: Gpu) -> float:
    """Roofline ceiling at a given arithmetic intensity."""
    return min(gpu.bf16_tflops, intensity * gpu.mem_tbps)


def decode_floor_ms(weight_bytes: float, gpu: Gpu) -> float:
    """Batch-1 decode reads every weight once per token: time >= weights / bandwidth."""
    return weight_bytes / (gpu.mem_tbps * 1e12) * 1e3


def ddp_bucket_count(grad_bytes: float, bucket_cap_mb: float = 25.0, first_bucket_mb: float = 1.0) -> int:
    """Gradient buckets DDP builds: a small first bucket, then bucket_cap_mb (MiB) each.

    torch.nn.parallel.DistributedDataParallel: bucket_cap_mb=25 default,
    _DEFAULT_FIRST_BUCKET_BYTES = 1 MiB. 16 GB of bf16 grads -> ~611 buckets, not the
    seed's "~26" (DESIGN.md: the model's number stands).
    """
    first = first_bucket_mb * 2**20
    rest = max(grad_bytes - first, 0.0)
    return 1 + math.ceil(rest / (bucket_cap_mb * 2**20))


def ddp_bucket_bytes(grad_bytes: float, bucket_cap_mb: float = 25.0, first_bucket_mb: float = 1.0) -> list[int]:
    """The sizes of the buckets `ddp_bucket_count` counts, as DDP's logger lists them
    (bucket_sizes), assuming parameters pack the buckets to their caps."""
    n = ddp_bucket_count(grad_bytes, bucket_cap_mb, first_bucket_mb)
    first = min(int(first_bucket_mb * 2**20), int(grad_bytes))
    cap = int(bucket_cap_mb * 2**20)
    sizes = [first] + [cap] * (n - 1)
    if n > 1:
        sizes[-1] = int(grad_bytes) - first - cap * (n - 2)
    return sizes


def percentile(values, q: float) -> float:
    """Nearest-rank percentile (what serving dashboards report), q in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return float(ordered[rank - 1])
