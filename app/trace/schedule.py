"""Vectorized timing of a CPU thread launching kernels into one in-order CUDA stream.

Both sides are max-plus recurrences, solved in closed form with a running maximum:
a kernel starts when it has been launched and its predecessor has finished,
    s[i] = max(ready[i], s[i-1] + dur[i-1] + gap[i-1])
and with D[i] = sum_{k<i} (dur[k] + gap[k]) that is s = D + cummax(ready - D).
The same identity times a CPU thread whose calls can be blocked (a full launch
queue, a synchronize). So a phase of 100,000 kernels is a few numpy passes.
"""

from __future__ import annotations

import numpy as np

# CUDA's pending-launch queue holds about 1024 entries; past that cudaLaunchKernel
# blocks until the GPU drains one (observed in GPU-bound torch.profiler traces).
LAUNCH_QUEUE_DEPTH = 1024


def in_order(ready: np.ndarray, dur: np.ndarray, gap: np.ndarray | int, t0: int) -> np.ndarray:
    """Start times of work items on a resource that runs one at a time, in order.

    ready: earliest start of each item (ns); dur: its duration (ns); gap: idle the
    resource needs between consecutive items (ns); t0: when the resource frees up.
    """
    ready = np.asarray(ready, dtype=np.int64)
    dur = np.asarray(dur, dtype=np.int64)
    n = len(ready)
    if n == 0:
        return ready.copy()
    step = dur + np.broadcast_to(np.asarray(gap, dtype=np.int64), (n,))
    offs = np.zeros(n, dtype=np.int64)
    np.cumsum(step[:-1], out=offs[1:])
    first = ready.copy()
    first[0] = max(int(first[0]), int(t0))
    return offs + np.maximum.accumulate(first - offs)


def launch_and_run(cpu_t0: int, cpu_cost: np.ndarray, launch_offset: np.ndarray,
                   launch_dur: np.ndarray, kernel_dur: np.ndarray, gpu_t0: int,
                   gpu_gap: np.ndarray | int, launch_latency: int,
                   queue_depth: int = LAUNCH_QUEUE_DEPTH, pending: np.ndarray | None = None):
    """Time a CPU thread that issues one kernel per op, and the stream that runs them.

    cpu_cost[i]: CPU time of op i, launch included (ns). launch_offset[i]: where in the
    op its cudaLaunchKernel starts; launch_dur[i]: the API call's own time. The kernel
    is ready `launch_latency` ns after its launch call returns. When the GPU lags by more
    than `queue_depth` kernels, the launch call blocks until a slot frees. `pending`: the
    start times of kernels launched earlier on the device (the previous phase), which
    hold queue slots until they start.

    Returns (op_start, launch_start, launch_dur_actual, kernel_start), all int64 ns.
    """
    cpu_cost = np.asarray(cpu_cost, dtype=np.int64)
    n = len(cpu_cost)
    op_start = in_order(np.full(n, cpu_t0, np.int64), cpu_cost, 0, cpu_t0)
    launch_start = op_start + launch_offset
    # A negative latency (a kernel timestamped before its call returned) never puts the
    # kernel before the call began: at most all but 300 ns of the call.
    launch_latency = np.maximum(launch_latency, 300 - np.asarray(launch_dur, np.int64))
    ready = launch_start + launch_dur + launch_latency
    k_start = in_order(ready, kernel_dur, gpu_gap, gpu_t0)
    launch_dur = np.asarray(launch_dur, np.int64)
    prior = np.asarray(pending if pending is not None else [], np.int64)[-queue_depth:]
    if n + len(prior) <= queue_depth:
        return op_start, launch_start, launch_dur.copy(), k_start
    # Launch i of this phase is the (len(prior) + i)-th in the device's queue.
    slot = np.arange(n) + len(prior) - queue_depth
    has_slot = slot >= 0
    # Queue full: launch i cannot return before kernel i - depth has started. Op i+1
    # then starts at max(op i's normal end, that release + op i's epilogue), a
    # recurrence of the same max-plus shape. The release times come from the stream,
    # which (being the bottleneck whenever the queue fills) barely moves; two passes
    # settle it.
    epilogue = cpu_cost - launch_offset - launch_dur
    for _ in range(2):
        free_at = np.full(n, np.iinfo(np.int64).min // 2, np.int64)
        free_at[has_slot] = np.concatenate([prior, k_start])[slot[has_slot]]
        ready = np.empty(n, np.int64)
        ready[0] = cpu_t0
        ready[1:] = free_at[:-1] + epilogue[:-1]
        op_start = in_order(ready, cpu_cost, 0, cpu_t0)
        launch_start = op_start + launch_offset
        returns = np.maximum(launch_start + launch_dur, free_at)
        k_start = in_order(returns + launch_latency, kernel_dur, gpu_gap, gpu_t0)
    return op_start, launch_start, returns - launch_start, k_start
