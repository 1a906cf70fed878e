"""DeepSpeed ZeRO-2's gradient path, as skinny_gemm.py's scenario runs it (stage 2 with
overlap_comm and contiguous_gradients, DeepSpeed <= 0.12.3's stage_1_and_2.py): gradients fill
`reduce_bucket_size` buckets in backward order; when one fills, average_tensor makes the reduction
stream wait on the compute stream and issues one async dist.reduce per rank partition the bucket
spans, to the rank that owns it. This module holds the buckets, their partition slices, the host
rows and NCCL kernels of the reduces (version 2; version 1's _reduce_scatter_base, which no
DeepSpeed stage-2 release issues, kept byte for byte) and each weight's AccumulateGrad node with
DeepSpeed's hook on the autograd thread.

Not a scenario (the registry skips modules whose name starts with an underscore): the scenario
itself (its params, the kernels of a micro-step, the build, the key) stays in skinny_gemm.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app import hosttime, physics
from app.trace import optree
from app.trace.builder import Kind, KernelInfo, TraceBuilder
from app.trace.optree import BF16
from app.trace.schedule import in_order

NCCL_RS = "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_REDUCE = "ncclDevKernel_Reduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
DEEPSPEED = "0.12.3"  # ZeRO-2's average_tensor issues one dist.reduce per destination partition up to here

COMM_CPU_NS = 115_000  # c10d::_reduce_scatter_base_ and what it nests, on the autograd thread
# Version 2's autograd thread: between two nodes the engine's own time (the real traces' autograd
# thread: p50 15-27 µs with the profiler on, ../shared/fixtures/kineto); after the node that makes a
# weight's gradient, its AccumulateGrad (the gradient is stolen, no kernel: DeepSpeed left
# param.grad None after the last reduce) with DeepSpeed's Python hook inside it
# (reduce_ready_partitions_and_remove_grads: p10 ~13, p50 20 µs), then the engine again.
ENGINE_MEDIAN_US = 15.0
HOOK_FLOOR_US, HOOK_MEDIAN_US, HOOK_SIGMA = 8.0, 20.0, 0.35
HOOK_REDUCE_AT = 0.35  # a full bucket's reduces start this far into the hook (after the AccumulateGrad itself)

def weight_shape(gemm_mnk) -> list[int]:
    """A weight's shape, [out, in], from its gradient GEMM (M, N, K) = (in, out, tokens)."""
    return [int(gemm_mnk[1]), int(gemm_mnk[0])]


def accumulate_grad(b: TraceBuilder, *, pid: int, tid: int, start: np.ndarray, core: np.ndarray, end: np.ndarray,
                     shapes: list[list[int]]) -> None:
    """Each weight's `autograd::engine::evaluate_function: torch::autograd::AccumulateGrad` over
    [start, end): the node, inside it first the gradient detached into param.grad (as a real eager
    trace nests them: AccumulateGrad > aten::detach > detach, no kernel), then DeepSpeed's hook
    (Python, and the bucket's reduces the caller placed) to the end; `core`: the hook's own time."""
    n = len(start)
    b.add(Kind.CPU, "cpu_op", optree.EV + "torch::autograd::AccumulateGrad", pid, tid, start, end - start,
          ext=b.external_ids(n))
    nest = [("torch::autograd::AccumulateGrad", 0.03, 0.30, None), ("aten::detach", 0.08, 0.25, "dims"),
            ("detach", 0.12, 0.21, None)]
    for name, a, z, dims in nest:
        extra = [{"Input Dims": [w], "Input type": [BF16]} for w in shapes] if dims else None
        b.add(Kind.CPU, "cpu_op", name, pid, tid, start + (core * a).astype(np.int64),
              np.maximum((core * (z - a)).astype(np.int64), 1), ext=b.external_ids(n), extra=extra)


def reduce_scatter_v1(b: TraceBuilder, *, pid: int, tid: int, stream: int, world: int, cpu_at: np.ndarray,
                    gpu_ready: np.ndarray, elems: np.ndarray, dur_ns: np.ndarray, nccl_free: int) -> np.ndarray:
    """Version 1: one bucketed reduce-scatter per bucket, launched in the CPU window at `cpu_at`; the
    NCCL stream waits on an event recorded when the bucket's last gradient landed. Returns kernel starts."""
    n = len(cpu_at)
    ranks = str(list(range(world)))
    coll = [{"Collective name": "_reduce_scatter_base", "In msg nelems": int(e), "Out msg nelems": int(e) // world,
             "Group size": world, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]",
             "Process Group Name": "0", "Process Group Description": "default_pg", "Process Group Ranks": ranks}
            for e in elems.tolist()]
    b.add(Kind.CPU, "cpu_op", "c10d::_reduce_scatter_base_", pid, tid, cpu_at + 2_000, 110_000,
          ext=b.external_ids(n))
    b.add(Kind.CPU, "cpu_op", "record_param_comms", pid, tid, cpu_at + 7_000, 100_000, ext=b.external_ids(n),
          extra=[{**c, "Global rank start": 0, "Global rank stride": 1} for c in coll])
    b.add(Kind.CPU, "user_annotation", "nccl:_reduce_scatter_base", pid, tid, cpu_at + 20_000, 85_000,
          ext=b.external_ids(n))
    b.add(Kind.RUNTIME, "cuda_runtime", "cudaEventRecord", pid, tid, cpu_at + 25_000, 3_000,
          ext=b.external_ids(n), corr=b.correlation_ids(n))
    b.add(Kind.RUNTIME, "cuda_runtime", "cudaStreamWaitEvent", pid, tid, cpu_at + 31_000, 3_000,
          ext=b.external_ids(n), corr=b.correlation_ids(n))
    corr, ext = b.correlation_ids(n), b.external_ids(n)
    b.add(Kind.RUNTIME, "cuda_runtime", "cudaLaunchKernel", pid, tid, cpu_at + 45_000, 9_000, ext=ext, corr=corr)
    ready = np.maximum(cpu_at + 54_000 + 3_000, gpu_ready + 4_000)
    start = in_order(ready, dur_ns, 2_000, nccl_free)
    name = b.kernel(NCCL_RS, KernelInfo(grid=(24, 1, 1), block=(640, 1, 1), registers_per_thread=96,
                                        shared_memory=87_568))
    b.add(Kind.KERNEL, "kernel", np.full(n, name, np.int32), 0, stream, start, dur_ns, ext=ext, corr=corr,
          extra=coll)
    return start


REDUCE_CPU_NS = 52_000  # version 2: one dist.reduce (c10d::reduce_ and what it nests) on the autograd thread
BUCKET_CPU_NS = 14_000  # version 2: average_tensor's stream.wait_stream and slicing before a bucket's reduces


def partition_slices(bucket_elems: np.ndarray, total: int, world: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DeepSpeed <= 0.12.3's average_tensor: each gradient bucket is cut where it crosses a
    rank's partition of the flat gradient, and each piece is reduced to the rank that owns it.
    Buckets fill in backward order, which is the flat buffer (parameter order) read from its
    end, so bucket i covers [total - cum_i, total - cum_{i-1}). Returns per reduce: its bucket,
    its element count and its destination rank, in issue order (ascending offset in the bucket)."""
    part = -(-total // world)
    bucket, elems, dst = [], [], []
    hi = total
    for i, e in enumerate(np.asarray(bucket_elems).tolist()):
        lo = hi - int(e)
        cuts = [lo] + [c for c in range((lo // part + 1) * part, hi, part)] + [hi]
        for a, z in zip(cuts[:-1], cuts[1:]):
            bucket.append(i)
            elems.append(z - a)
            dst.append(a // part)
        hi = lo
    return np.array(bucket, np.int64), np.array(elems, np.int64), np.array(dst, np.int64)


def reduces(b: TraceBuilder, *, pid: int, tid: int, stream: int, world: int, cpu_at: np.ndarray,
                gpu_ready: np.ndarray, slices: tuple[np.ndarray, np.ndarray, np.ndarray], dur_ns: np.ndarray,
                nccl_free: int, rng: np.random.Generator, timing: hosttime.HostTiming,
                shapes: bool = True) -> tuple[np.ndarray, int]:
    """Version 2's ZeRO-2 gradient reduction, as DeepSpeed 0.12.3 issues it with overlap_comm:
    per bucket, the reduction stream waits on the compute stream (cudaEventRecord +
    cudaStreamWaitEvent), then one async dist.reduce per partition the bucket spans (c10d::reduce_,
    record_param_comms, the NCCL annotation, the launch), each row's offset and length varied as
    measured. `shapes` (the op tree's record_shapes): each reduce's slice cut out of the bucket
    first (`tensor.narrow`: aten::narrow > aten::slice > aten::as_strided, views with no kernel),
    and the c10d ops with the Input Dims torch writes for them. Returns the kernels' starts and
    where each reduce's host rows end."""
    bucket, elems, dst = slices
    nb, n = len(cpu_at), len(elems)
    jit = lambda *shape: np.clip(rng.lognormal(0.0, 0.1, shape), 0.75, 1.35)  # noqa: E731
    ev = jit(nb, 3) * [3_000, 3_000, 2_500]
    rec0 = cpu_at + ev[:, 0].astype(np.int64)
    rec_d = timing.launch_calls_ns(rng, nb, mean_us=2.5)
    wait0 = rec0 + rec_d + ev[:, 2].astype(np.int64)
    wait_d = timing.launch_calls_ns(rng, nb, mean_us=2.5)
    first = np.r_[0, np.flatnonzero(np.diff(bucket)) + 1]
    k = np.arange(n) - np.repeat(first, np.diff(np.r_[first, n]))  # the reduce's place in its bucket
    t0 = (wait0 + wait_d)[bucket] + 2_000 + k * REDUCE_CPU_NS
    steps = jit(n, 4) * [2_000, 4_000, 9_000, 8_000]  # c10d op, record_param_comms, annotation, launch
    off = np.cumsum(steps, axis=1)
    launch = timing.launch_calls_ns(rng, n)
    tail = jit(n, 3) * [9_000, 1_500, 3_000]
    total = off[:, -1] + launch + tail.sum(axis=1)
    scale = np.minimum(1.0, (REDUCE_CPU_NS - 2_500) / total)  # never into the next reduce's window
    off, launch, tail = (off * scale[:, None]).astype(np.int64), (launch * scale).astype(np.int64), \
        (tail * scale[:, None]).astype(np.int64)
    c10d, rpc, ann, ln0 = (t0 + off[:, j] for j in range(4))
    ann_end = ln0 + launch + tail[:, 0]
    rpc_end = ann_end + tail[:, 1]
    c10d_end = rpc_end + tail[:, 2]
    ranks = str(list(range(world)))
    coll = [{"Collective name": "reduce", "In msg nelems": int(e), "Out msg nelems": int(e), "Group size": world,
             "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]", "Process Group Name": "0",
             "Process Group Description": "default_pg", "Process Group Ranks": ranks} for e in elems.tolist()]
    b.add(Kind.RUNTIME, "cuda_runtime", "cudaEventRecord", pid, tid, rec0, rec_d, ext=b.external_ids(nb),
          corr=b.correlation_ids(nb))
    b.add(Kind.RUNTIME, "cuda_runtime", "cudaStreamWaitEvent", pid, tid, wait0, wait_d, ext=b.external_ids(nb),
          corr=b.correlation_ids(nb))
    # the narrow's view rows: in the ~2 µs before the c10d op, each varied (its own draws, after
    # every draw the kernels' times take)
    cut = (jit(n, 3) * [1_700, 1_300, 900]).astype(np.int64)
    if shapes:  # tensor.narrow(0, offset, numel) of the bucket: narrow(self, dim, start, length) >
        # slice(self, dim, start, end, step) > as_strided(self, size, stride, storage_offset)
        whole = np.bincount(bucket, weights=elems).astype(np.int64)[bucket].tolist()
        at = c10d - 300 - cut[:, 0]
        rows = {"aten::narrow": (at, cut[:, 0]), "aten::slice": (at + (cut[:, 0] - cut[:, 1]) // 2, cut[:, 1]),
                "aten::as_strided": (at + (cut[:, 0] - cut[:, 2]) // 2, cut[:, 2])}
        args = {name: [] for name in rows}
        for e, w, o in zip(elems.tolist(), whole, _offsets(bucket, elems)):
            args["aten::narrow"].append({"Input Dims": [[w], [], [], []], "Input type": [BF16] + ["Scalar"] * 3,
                                         "Concrete Inputs": ["", "0", str(o), str(e)]})
            args["aten::slice"].append({"Input Dims": [[w], [], [], [], []], "Input type": [BF16] + ["Scalar"] * 4,
                                        "Concrete Inputs": ["", "0", str(o), str(o + e), "1"]})
            args["aten::as_strided"].append({"Input Dims": [[w], [], [], []],
                                             "Input type": [BF16, "ScalarList", "ScalarList", "Scalar"],
                                             "Concrete Inputs": ["", f"[{e}]", "[1]", str(o)]})
        for name, (ts, dur) in rows.items():
            b.add(Kind.CPU, "cpu_op", name, pid, tid, ts, dur, ext=b.external_ids(n), extra=args[name])
    reduce_args = ({"Input Dims": [[], [], [], [], [], []],
                    "Input type": ["TensorList", "", "", "Scalar", "Scalar", "Scalar"]} if shapes else {})
    comms_args = ({"Input Dims": [[], [], [], [], [], [], []],
                   "Input type": ["TensorList", "Scalar", "Scalar", "Scalar", "", "", ""]} if shapes else {})
    b.add(Kind.CPU, "cpu_op", "c10d::reduce_", pid, tid, c10d, c10d_end - c10d, ext=b.external_ids(n),
          extra=reduce_args or None)
    b.add(Kind.CPU, "cpu_op", "record_param_comms", pid, tid, rpc, rpc_end - rpc, ext=b.external_ids(n),
          extra=[{**c, "Global rank start": 0, "Global rank stride": 1, **comms_args} for c in coll])
    b.add(Kind.CPU, "user_annotation", "nccl:reduce", pid, tid, ann, ann_end - ann, ext=b.external_ids(n))
    corr, ext = b.correlation_ids(n), b.external_ids(n)
    b.add(Kind.RUNTIME, "cuda_runtime", "cudaLaunchKernel", pid, tid, ln0, launch, ext=ext, corr=corr)
    ready = np.maximum(ln0 + launch + timing.launch_latency_ns(rng, n),
                       gpu_ready[bucket] + timing.kernel_gaps_ns(rng, n))
    start = in_order(ready, dur_ns, timing.kernel_gaps_ns(rng, n), nccl_free)
    name = b.kernel(NCCL_REDUCE, KernelInfo(grid=(24, 1, 1), block=(640, 1, 1), registers_per_thread=96,
                                            shared_memory=87_568))
    b.add(Kind.KERNEL, "kernel", np.full(n, name, np.int32), 0, stream, start, dur_ns, ext=ext, corr=corr,
          extra=coll)
    return start, c10d_end


def _offsets(bucket: np.ndarray, elems: np.ndarray) -> list[int]:
    """Each reduce's offset in its bucket (the slices of a bucket are issued in ascending order)."""
    starts = np.cumsum(elems) - elems
    first = np.r_[0, np.flatnonzero(np.diff(bucket)) + 1]
    return (starts - np.repeat(starts[first], np.diff(np.r_[first, len(elems)]))).tolist()


@dataclass
class Buckets:
    """One micro-step's gradient buckets: where each gradient lands in the backward's kernels
    (`grad_pos`), which of them closes a bucket (`closes` into grad_pos, `close_pos` into the
    kernels), the buckets' sizes, the CPU time the autograd thread spends on the collectives after
    each kernel (`free_after`), and each collective's time on the wire (`rs_ns`: per bucket in
    version 1, per partition slice in version 2, whose `slices` are partition_slices')."""

    grad_pos: np.ndarray
    grad_elems: np.ndarray
    closes: np.ndarray
    close_pos: np.ndarray
    bucket_elems: np.ndarray
    free_after: np.ndarray
    rs_ns: np.ndarray
    slices: tuple[np.ndarray, np.ndarray, np.ndarray] | None


def buckets(param_elems: list[int], bucket_melem: float, world: int, busbw_gbps: float, v2: bool) -> Buckets:
    """The buckets of a backward whose kernels land `param_elems` gradient elements each (0: none).
    Gradients land in backward order; a bucket closes with the kernel that fills it."""
    grad_pos = np.flatnonzero(np.asarray(param_elems) > 0)
    grad_elems = np.asarray(param_elems, np.int64)[grad_pos]
    cap = int(bucket_melem * 1e6)
    cum = np.cumsum(grad_elems)
    bucket_of = (cum - 1) // cap
    closes = np.flatnonzero(np.r_[bucket_of[1:] != bucket_of[:-1], True])
    close_pos = grad_pos[closes]
    bucket_elems = np.diff(np.r_[0, cum[closes]])
    free_after = np.zeros(len(param_elems), np.int64)
    free_after[close_pos] = COMM_CPU_NS
    rs_ns = ((world - 1) / world * bucket_elems * physics.BF16_BYTES / (busbw_gbps * 1e9) * 1e9 + 25_000)
    slices = None
    if v2:  # DeepSpeed 0.12.3: a ring reduce per partition a bucket spans; each rank sends the slice once
        slices = partition_slices(bucket_elems, int(grad_elems.sum()), world)
        per_bucket = np.bincount(slices[0], minlength=len(bucket_elems))
        free_after[close_pos] = BUCKET_CPU_NS + per_bucket * REDUCE_CPU_NS
        rs_ns = slices[1] * physics.BF16_BYTES / (busbw_gbps * 1e9) * 1e9 + 25_000
    return Buckets(grad_pos, grad_elems, closes, close_pos, bucket_elems, free_after, rs_ns, slices)
