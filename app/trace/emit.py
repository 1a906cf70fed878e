"""Emit the rows torch.profiler records when a CPU thread launches kernels.

One call emits a whole phase: per kernel a `cpu_op` (the aten op), inside it a
`cudaLaunchKernel` runtime call, and the kernel on its stream, linked by a fresh
correlation id (the export adds the `ac2g` flow pair) and by External id.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.trace import optree
from app.trace.builder import Kind, TraceBuilder
from app.trace.schedule import LAUNCH_QUEUE_DEPTH, launch_and_run


@dataclass
class Launched:
    """Where a phase landed, all int64 ns relative to the trace base."""

    op_start: np.ndarray
    op_end: np.ndarray
    kernel_start: np.ndarray
    kernel_end: np.ndarray
    blocked_launches: int = 0  # launch calls that waited for a free slot in the launch queue

    @property
    def cpu_end(self) -> int:
        return int(self.op_end[-1]) if len(self.op_end) else 0

    @property
    def gpu_end(self) -> int:
        return int(self.kernel_end[-1]) if len(self.kernel_end) else 0


def launch_phase(b: TraceBuilder, *, host_pid: int, cpu_tid: int, gpu_pid: int, stream: int,
                 op_names: np.ndarray, kernel_names: np.ndarray, kernel_dur_ns: np.ndarray,
                 cpu_t0: int, gpu_t0: int, op_overhead_ns: np.ndarray, launch_ns: np.ndarray,
                 gpu_gap_ns: np.ndarray | int, launch_latency_ns: int = 3_000,
                 op_cat: str = "cpu_op", queue_depth: int = LAUNCH_QUEUE_DEPTH,
                 kernel_extra=None, launch_api: str = "cudaLaunchKernel",
                 free_after_ns: np.ndarray | None = None, emit_op: np.ndarray | None = None,
                 pending_kernel_start: np.ndarray | None = None, tree: list | None = None,
                 autograd=None, backward: bool = False, kernel_cfg: np.ndarray | None = None,
                 tree_room_ns: np.ndarray | None = None, tree_close_div: int = 3,
                 tree_keep_cover: bool = False) -> Launched:
    """Emit one op + launch + kernel per entry; returns the timing.

    op_names / kernel_names: name ids (TraceBuilder.name_id). op_overhead_ns: the
    framework's CPU time in each op before it calls the launch API; launch_ns: the API
    call's own time. The op ends a short epilogue after the launch returns.
    free_after_ns: CPU time the thread spends on other work after an op before its next
    one (DDP's bucket hooks, a reduce-scatter launch), emitted by the caller.
    emit_op: a mask of the ops that get their own cpu_op row (a foreach op's second and
    later launches sit inside its first).
    pending_kernel_start: start times of kernels launched before this phase on the same
    device; until they start they hold slots in the launch queue.
    tree: per launch, the op tree around it (app/trace/optree.py) to emit instead of one flat
    op, within the same CPU time; `autograd` numbers its nodes, `backward` says which pass;
    `tree_room_ns`: per op, how much of the time after it its tree's closes may use (default:
    all of it up to the next op; less where the caller puts its own rows in `free_after_ns`).
    `tree_close_div`: the tree closes within 1/tree_close_div of the Python time after each op.
    `tree_keep_cover`: the trees may be forests (optree.forest: views before the op) and keep the
    thread's covered time the flat ops' (optree._place).
    kernel_cfg: per launch, its own launch configuration (TraceBuilder.kernel_config).
    """
    n = len(kernel_names)
    if n == 0:
        z = np.empty(0, np.int64)
        return Launched(z, z, z, z)
    op_overhead_ns = np.asarray(op_overhead_ns, np.int64)
    launch_ns = np.asarray(launch_ns, np.int64)
    epilogue = np.maximum(op_overhead_ns // 8, 500)  # result wrapping after the launch returns
    cost = op_overhead_ns + launch_ns + epilogue
    if free_after_ns is not None:
        cost = cost + np.asarray(free_after_ns, np.int64)
    op_start, launch_start, launch_dur, k_start = launch_and_run(
        cpu_t0, cost, op_overhead_ns, launch_ns, kernel_dur_ns, gpu_t0, gpu_gap_ns,
        launch_latency_ns, queue_depth, pending_kernel_start)
    op_dur = (launch_start - op_start) + launch_dur + epilogue
    corr = b.correlation_ids(n)
    ext = b.external_ids(n)
    m = slice(None) if emit_op is None else emit_op
    if tree is None:
        b.add(Kind.CPU, op_cat, np.asarray(op_names)[m], host_pid, cpu_tid, op_start[m], op_dur[m], ext=ext[m])
    else:
        if emit_op is not None:
            raise ValueError("an op tree replaces each launch's op: emit_op does not apply")
        free_last = int(np.asarray(free_after_ns)[-1]) if free_after_ns is not None else 0
        next_start = np.append(op_start[1:], op_start[-1] + op_dur[-1] + free_last)
        if tree_room_ns is not None:
            next_start = np.minimum(next_start, op_start + op_dur + np.asarray(tree_room_ns, np.int64))
        ext = optree.emit(b, tree, pid=host_pid, tid=cpu_tid, op_start=op_start, launch_start=launch_start,
                          op_end=op_start + op_dur, next_start=next_start, ext=ext, autograd=autograd,
                          backward=backward, close_div=tree_close_div, keep_cover=tree_keep_cover)
    b.add(Kind.RUNTIME, "cuda_runtime", launch_api, host_pid, cpu_tid, launch_start, launch_dur,
          ext=ext, corr=corr)
    b.add(Kind.KERNEL, "kernel", kernel_names, gpu_pid, stream, k_start, kernel_dur_ns, ext=ext, corr=corr,
          extra=kernel_extra, cfg=-1 if kernel_cfg is None else kernel_cfg)
    blocked = int((launch_dur > launch_ns + 2_000).sum())
    return Launched(op_start, op_start + op_dur, k_start, k_start + np.asarray(kernel_dur_ns, np.int64), blocked)


def graph_replay(b: TraceBuilder, *, host_pid: int, cpu_tid: int, gpu_pid: int, stream: int,
                 kernel_names: np.ndarray, kernel_dur_ns: np.ndarray, cpu_t0: int, gpu_free: int,
                 launch_ns: int, latency_ns: int, gap_ns: np.ndarray, graph_id: int,
                 kernel_cfg: np.ndarray | None = None) -> Launched:
    """A CUDA graph replayed: one cudaGraphLaunch on the CPU thread, and on the stream its
    kernels back to back (`gap_ns` apart, the graph's node-to-node latency), each carrying
    the launch's correlation id, as CUPTI reports graph kernels, with the "graph id" and
    "graph node id" Kineto writes for them. The export draws one ac2g flow from the launch
    to each kernel."""
    n = len(kernel_names)
    dur = np.asarray(kernel_dur_ns, np.int64)
    gaps = np.broadcast_to(np.asarray(gap_ns, np.int64), (n,)).copy()
    gaps[0] = 0
    first = max(int(gpu_free), cpu_t0 + launch_ns + latency_ns)
    starts = first + np.concatenate([[0], np.cumsum(dur[:-1] + gaps[1:])]).astype(np.int64)
    corr = b.correlation_ids(1)
    ext = b.external_ids(1)
    b.add(Kind.RUNTIME, "cuda_runtime", "cudaGraphLaunch", host_pid, cpu_tid, [cpu_t0], [launch_ns], ext=ext, corr=corr)
    node0 = graph_id * 1_000_000
    b.add(Kind.KERNEL, "kernel", kernel_names, gpu_pid, stream, starts, dur, ext=int(ext[0]), corr=int(corr[0]),
          extra=[{"graph id": graph_id, "graph node id": node0 + j} for j in range(n)],
          cfg=-1 if kernel_cfg is None else kernel_cfg)
    return Launched(np.array([cpu_t0]), np.array([cpu_t0 + launch_ns]), starts, starts + dur)


def cpu_span(b: TraceBuilder, name: str, pid: int, tid: int, start_ns: int, end_ns: int,
             cat: str = "user_annotation", extra: dict | None = None) -> None:
    """One annotation or op on a CPU thread, e.g. ProfilerStep#N or a DataLoader wait."""
    b.add(Kind.CPU, cat, name, pid, tid, [int(start_ns)], [int(end_ns - start_ns)],
          ext=b.external_ids(1), extra=[extra] if extra else None)


def runtime_call(b: TraceBuilder, name: str, pid: int, tid: int, start_ns: int, dur_ns: int,
                 correlation: bool = True) -> int:
    """A CUDA runtime call that launches nothing (synchronize, event record); returns its correlation."""
    corr = int(b.correlation_ids(1)[0]) if correlation else 0
    b.add(Kind.RUNTIME, "cuda_runtime", name, pid, tid, [int(start_ns)], [int(dur_ns)],
          ext=b.external_ids(1), corr=corr)
    return corr


def memcpy(b: TraceBuilder, *, host_pid: int, cpu_tid: int, gpu_pid: int, stream: int, kind: str,
           nbytes: int, cpu_start_ns: int, api_ns: int, gpu_start_ns: int, gpu_dur_ns: int,
           op_name: str = "aten::copy_") -> None:
    """A cudaMemcpyAsync inside its aten op, and the copy on the GPU (kind: HtoD, DtoH, DtoD)."""
    label = {"HtoD": "Memcpy HtoD (Pageable -> Device)", "HtoD_pinned": "Memcpy HtoD (Pinned -> Device)",
             "DtoH": "Memcpy DtoH (Device -> Pageable)", "DtoD": "Memcpy DtoD (Device -> Device)"}[kind]
    corr = b.correlation_ids(1)
    ext = b.external_ids(1)
    b.add(Kind.CPU, "cpu_op", op_name, host_pid, cpu_tid, [cpu_start_ns], [api_ns + 4_000], ext=ext)
    b.add(Kind.RUNTIME, "cuda_runtime", "cudaMemcpyAsync", host_pid, cpu_tid, [cpu_start_ns + 2_000],
          [api_ns], ext=ext, corr=corr)
    b.add(Kind.MEMORY, "gpu_memcpy", label, gpu_pid, stream, [gpu_start_ns], [gpu_dur_ns], ext=ext,
          corr=corr, nbytes=nbytes)
