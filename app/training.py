"""The rows of one data-parallel training step, as torch.profiler records them.

Scenarios decide the physics (how long forward, backward, the collective and the
optimizer take, and what depends on what); these helpers turn that into the rows a
real step shows: ProfilerStep on the main thread, forward launches there, backward
launches on the autograd device thread, the DDP all-reduce on the NCCL stream, the
fused optimizer, and the `.item()` that makes the CPU wait for the GPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from app import hosttime, physics, workload
from app.hosttime import HostTiming
from app.trace import optree
from app.trace.builder import Kind, KernelInfo, TraceBuilder
from app.trace.emit import Launched, cpu_span, launch_phase, memcpy, runtime_call


@dataclass(frozen=True)
class Topology:
    """Where a training process's rows live in the trace."""

    host_pid: int
    main_tid: int
    autograd_tid: int
    gpu: int  # device index = the GPU rows' pid
    compute_stream: int = 7  # the default stream on NVIDIA
    nccl_stream: int = 0  # 0: no NCCL stream
    copy_stream: int = 0

    def name_rows(self, b: TraceBuilder, workers: list[int] = (), autograd: bool = True) -> None:
        """Metadata as Kineto writes it: the GPU "process" carries the host process's name and
        the label "GPU N", sorted after the host (16777216 + device); threads sort by tid.
        `autograd=False`: a process that never ran backward has no autograd thread."""
        proc = "python3.11"
        b.process(self.host_pid, proc, "CPU", self.host_pid)
        b.process(self.gpu, proc, f"GPU {self.gpu}", 16_777_216 + self.gpu)
        b.thread(self.host_pid, self.main_tid, f"thread {self.main_tid} (pt_main_thread)", self.main_tid)
        if autograd:
            b.thread(self.host_pid, self.autograd_tid, f"thread {self.autograd_tid} (pt_autograd_{self.gpu})",
                     self.autograd_tid)
        for i, w in enumerate(workers):
            b.thread(self.host_pid, w, f"thread {w} (pt_data_worker_{i})", w)
        for stream in (self.compute_stream, self.nccl_stream, self.copy_stream):
            if stream:
                b.thread(self.gpu, stream, f"stream {stream} ", stream)


def op_overheads_ns(rng: np.random.Generator, n: int, mean_us: float,
                    timing: HostTiming = hosttime.V1) -> tuple[np.ndarray, np.ndarray]:
    """Per-op framework time before the launch, and the cudaLaunchKernel call itself.

    Eager PyTorch spends ~10-40 µs of dispatcher and Python per op with the profiler on;
    cudaLaunchKernel itself takes ~4-8 µs (CUDA 12 on x86 hosts), with a tail (hosttime).
    """
    overhead = np.maximum(rng.gamma(4.0, mean_us / 4.0, n), 2.0) * 1e3
    return overhead.astype(np.int64), timing.launch_calls_ns(rng, n)


def _phase_timing(rng: np.random.Generator, n: int, timing: HostTiming, gap_ns: int) -> dict:
    """launch_phase's host and stream timing for n launches (version 1: its constants)."""
    return {"gpu_gap_ns": timing.kernel_gaps_ns(rng, n, gap_ns),
            "launch_latency_ns": timing.launch_latency_ns(rng, n),
            "free_after_ns": timing.between_ops_ns(rng, n)}


def forward_backward(b: TraceBuilder, topo: Topology, rng: np.random.Generator, *,
                     fwd: list[workload.KernelSpec], fwd_ns: np.ndarray,
                     bwd: list[workload.KernelSpec], bwd_ns: np.ndarray,
                     cpu_t0: int, gpu_t0: int, op_mean_us: float = 25.0,
                     gpu_gap_ns: int = 1_200, module: str = "DistributedDataParallel.forward",
                     timing: HostTiming = hosttime.V1, autograd: optree.Autograd | None = None,
                     tree_widths: tuple[int, ...] = (), launch_configs: bool = False) -> tuple[Launched, Launched]:
    """Forward on the main thread, backward on the autograd thread, one stream. With
    `autograd`, each launch is emitted inside its op tree (app/trace/optree.py; `tree_widths`:
    the activation widths the model has, for the shapes), numbered by it; with
    `launch_configs`, each kernel with the grid its own shape needs."""
    trees = (lambda specs: [optree.tree_for(x, tree_widths) for x in specs]) if autograd else (lambda specs: None)  # noqa: E731
    cfgs = (lambda specs: workload.launch_configs(b, specs)) if launch_configs else (lambda specs: None)  # noqa: E731
    ops, kernels = workload.intern(b, fwd)
    oh, ln = op_overheads_ns(rng, len(fwd), op_mean_us, timing)
    f = launch_phase(b, host_pid=topo.host_pid, cpu_tid=topo.main_tid, gpu_pid=topo.gpu,
                     stream=topo.compute_stream, op_names=ops, kernel_names=kernels, kernel_dur_ns=fwd_ns,
                     cpu_t0=cpu_t0, gpu_t0=gpu_t0, op_overhead_ns=oh, launch_ns=ln,
                     tree=trees(fwd), autograd=autograd, kernel_cfg=cfgs(fwd),
                     **_phase_timing(rng, len(fwd), timing, gpu_gap_ns))
    cpu_span(b, module, topo.host_pid, topo.main_tid, cpu_t0 - 2_000, f.cpu_end + 3_000)
    ops, kernels = workload.intern(b, bwd)
    oh, ln = op_overheads_ns(rng, len(bwd), op_mean_us, timing)
    bw = launch_phase(b, host_pid=topo.host_pid, cpu_tid=topo.autograd_tid, gpu_pid=topo.gpu,
                      stream=topo.compute_stream, op_names=ops, kernel_names=kernels, kernel_dur_ns=bwd_ns,
                      cpu_t0=f.cpu_end + timing.host_ns(rng, 20_000), gpu_t0=f.gpu_end, op_overhead_ns=oh,
                      launch_ns=ln, pending_kernel_start=f.kernel_start, tree=trees(bwd), autograd=autograd,
                      backward=True, kernel_cfg=cfgs(bwd), **_phase_timing(rng, len(bwd), timing, gpu_gap_ns))
    return f, bw


def comm_args(name: str, in_nelems: int, out_nelems: int, world: int) -> dict:
    """record_param_comms' args for a bf16 collective on the default process group."""
    return {"Collective name": name, "In msg nelems": in_nelems, "Out msg nelems": out_nelems,
            "Group size": world, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]",
            "Process Group Name": "0", "Process Group Description": "default_pg",
            "Process Group Ranks": str(list(range(world)))}


def comm_offsets_ns(h) -> tuple[int, ...]:
    """Where a collective's host rows start and end after its c10d op starts, ns, each length
    `h(nominal)`: record_param_comms, the nccl: range, the event record, the stream wait and
    the launch start a step after the one before (so varied lengths never cross); then the
    nccl: range's, record_param_comms' and the c10d op's ends."""
    steps = [h(x) for x in (5_000, 15_000, 5_000, 5_000, 30_000)]
    t_rec, t_nccl, t_ev, t_wait, t_launch = (int(x) for x in np.cumsum(steps))
    t_nccl_end = t_launch + h(40_000)
    t_rec_end = t_nccl_end + h(10_000)
    return t_rec, t_nccl, t_ev, t_wait, t_launch, t_nccl_end, t_rec_end, t_rec_end + h(10_000)


def allreduce(b: TraceBuilder, topo: Topology, *, cpu_t0: int, gpu_ready: int, dur_ns: int,
              nelems: int, world: int, channels: int = 24, rng: np.random.Generator | None = None,
              timing: HostTiming = hosttime.V1) -> tuple[int, int, int]:
    """One NCCL all-reduce launched from the main thread; returns (cpu_end, kernel start, kernel end).

    The NCCL stream first waits on an event recorded on the compute stream (the
    gradients must exist), so the kernel starts no earlier than `gpu_ready`. The host
    rows' lengths are nominal (version 1) or vary as measured (`timing`, with `rng`).
    """
    h = (lambda ns: timing.host_ns(rng, ns)) if rng is not None else int
    coll = comm_args("allreduce", nelems, nelems, world)
    pid, tid = topo.host_pid, topo.main_tid
    # nested as torch writes them: c10d op > record_param_comms > nccl:all_reduce > the calls
    t_rec, t_nccl, t_ev, t_wait, t_launch, t_nccl_end, t_rec_end, t_end = comm_offsets_ns(h)
    cpu_span(b, "c10d::allreduce_", pid, tid, cpu_t0, cpu_t0 + t_end, cat="cpu_op")
    cpu_span(b, "record_param_comms", pid, tid, cpu_t0 + t_rec, cpu_t0 + t_rec_end, cat="cpu_op",
             extra={**coll, "Global rank start": 0, "Global rank stride": 1})
    cpu_span(b, "nccl:all_reduce", pid, tid, cpu_t0 + t_nccl, cpu_t0 + t_nccl_end)
    runtime_call(b, "cudaEventRecord", pid, tid, cpu_t0 + t_ev, min(h(3_000), t_wait - t_ev - 500))
    runtime_call(b, "cudaStreamWaitEvent", pid, tid, cpu_t0 + t_wait, h(3_000))
    launch_at = cpu_t0 + t_launch
    launch_ns = h(9_000)
    k_start = max(gpu_ready + h(4_000), launch_at + launch_ns + h(3_000))
    corr = b.correlation_ids(1)
    ext = b.external_ids(1)
    b.add(Kind.RUNTIME, "cuda_runtime", "cudaLaunchKernel", pid, tid, [launch_at], [launch_ns], ext=ext, corr=corr)
    name = b.kernel(workload.NCCL_ALLREDUCE, KernelInfo(grid=(channels, 1, 1), block=(640, 1, 1),
                                                        registers_per_thread=96, shared_memory=87_568))
    b.add(Kind.KERNEL, "kernel", np.array([name]), topo.gpu, topo.nccl_stream, [k_start], [dur_ns],
          ext=ext, corr=corr, extra=[coll])
    return cpu_t0 + t_end, k_start, k_start + dur_ns


def optimizer(b: TraceBuilder, topo: Topology, rng: np.random.Generator, *, params: float, cpu_t0: int,
              gpu_ready: int, gpu: physics.Gpu, bytes_per_param: float = 14.0,
              tensors_per_launch: int = 110, tensors: int = 0,
              pending_kernel_start: np.ndarray | None = None, timing: HostTiming = hosttime.V1) -> Launched:
    """Fused AdamW: memory-bound multi_tensor_apply launches over all parameters.

    Bytes: AdamW on bf16 params with bf16 state reads param, grad, exp_avg, exp_avg_sq
    and writes param, exp_avg, exp_avg_sq: 7 x 2 B = 14 B per parameter, streamed at
    ~85% of HBM bandwidth (multi_tensor_apply reaches that on large lists).
    """
    total_ms = params * bytes_per_param / (gpu.mem_tbps * 1e12 * 0.85) * 1e3
    n = max(4, (tensors or 300) // tensors_per_launch + 1)
    info = KernelInfo(grid=(320, 1, 1), block=(512, 1, 1), registers_per_thread=64, shared_memory=0)
    specs = [workload.KernelSpec("aten::_fused_adamw_", workload.ADAM, 0.0, 1.0, info, "ew")] * n
    durs = workload.scaled_durations_ns(np.ones(n), total_ms, rng, jitter=0.02)
    start = cpu_t0 + timing.host_ns(rng, 40_000)
    runtime_call(b, "cudaStreamWaitEvent", topo.host_pid, topo.main_tid, cpu_t0 + timing.host_ns(rng, 10_000),
                 timing.host_ns(rng, 3_000))
    ops, kernels = workload.intern(b, specs)
    oh, ln = op_overheads_ns(rng, n, 40.0, timing)
    done = launch_phase(b, host_pid=topo.host_pid, cpu_tid=topo.main_tid, gpu_pid=topo.gpu,
                        stream=topo.compute_stream, op_names=ops, kernel_names=kernels, kernel_dur_ns=durs,
                        cpu_t0=start, gpu_t0=gpu_ready + timing.host_ns(rng, 5_000), op_overhead_ns=oh, launch_ns=ln,
                        pending_kernel_start=pending_kernel_start, **_phase_timing(rng, n, timing, 1_500))
    tail = timing.host_ns(rng, 8_000)
    cpu_span(b, "Optimizer.step#AdamW.step", topo.host_pid, topo.main_tid, cpu_t0, done.cpu_end + tail)
    done.op_end[-1] += tail  # callers continue after the annotation closes
    return done


# torch's fused AdamW (torch/optim/adamw.py, _fused_adamw) on one device: the step counts +1
# (_foreach_add_, depth 1) then aten::_fused_adamw_, whose multi_tensor_apply
# (ATen/native/cuda/MultiTensorApply.cuh) launches a kernel each time a list fills: 65,536
# elements per block, at most 320 blocks or 36 tensors (depth 4: param, grad, exp_avg,
# exp_avg_sq) per launch. The functor runs in the params' dtype: bf16 for DDP's bf16 replica
# (ADAMW_BF16), float for FSDP's fp32 shards (workload.ADAM).
MTA_CHUNK_ELEMS = 65_536
MTA_MAX_BLOCKS = 320
MTA_MAX_TENSORS = {1: 110, 4: 36}
_MTA = "at::native::(anonymous namespace)::"
ADAMW_BF16 = workload.ADAM.replace("FusedAdamMathFunctor<float,", "FusedAdamMathFunctor<c10::BFloat16,")
FOREACH_ADD = (f"void {_MTA}multi_tensor_apply_kernel<{_MTA}TensorListMetadata<1>, {_MTA}BinaryOpScalarFunctor<float, 1, "
               f"1, 0>, std::plus<float>, float>({_MTA}TensorListMetadata<1>, {_MTA}BinaryOpScalarFunctor<float, 1, 1, 0>, "
               f"std::plus<float>, float)")


@functools.lru_cache(maxsize=16)
def mta_launches(numels: tuple[int, ...], depth: int) -> tuple[tuple[int, int], ...]:
    """(blocks, elements) of each kernel multi_tensor_apply launches over these tensors: a
    launch when the list holds its most tensors (at a tensor's last chunk), its most blocks,
    or the last chunk of all; a tensor cut by a full block list carries over."""
    out, blocks, elems, tensors = [], 0, 0, 0
    for t, n in enumerate(numels):
        tensors += 1
        left = n
        chunks = max(1, -(-n // MTA_CHUNK_ELEMS))
        while chunks:
            take = min(chunks, MTA_MAX_BLOCKS - blocks)  # whole chunks until the block list fills
            blocks += take
            chunks -= take
            got = min(left, take * MTA_CHUNK_ELEMS)
            elems += got
            left -= got
            last = chunks == 0
            if blocks == MTA_MAX_BLOCKS or (last and (tensors == MTA_MAX_TENSORS[depth] or t == len(numels) - 1)):
                out.append((blocks, elems))
                blocks, elems = 0, 0
                tensors = 0 if last else 1
    return tuple(out)


def fused_adamw(b: TraceBuilder, topo: Topology, rng: np.random.Generator, timing: HostTiming, *,
                numels: tuple[int, ...], n_params: float, bytes_per_param: float, kernel: str, gpu: physics.Gpu,
                cpu_t0: int, gpu_ready: int, pending_kernel_start: np.ndarray | None) -> Launched:
    """Optimizer.step#AdamW.step with fused=True as it runs over the tensors the optimizer holds
    (`numels`, in registration order): the step counts' _foreach_add_ (a few small launches) and
    aten::_fused_adamw_ holding one multi_tensor_apply launch per 320 blocks, each streaming
    `bytes_per_param` per parameter it covers at 85% of HBM bandwidth (the time `optimizer`
    gives), with its own grid. `kernel`: the functor's dtype (ADAMW_BF16, or workload.ADAM's float)."""
    adam = mta_launches(numels, 4)
    steps = mta_launches((1,) * len(numels), 1)
    total_ms = n_params * bytes_per_param / (gpu.mem_tbps * 1e12 * 0.85) * 1e3
    elems = np.array([e for _, e in adam], np.float64)
    adam_ns = workload.scaled_durations_ns(elems, total_ms, rng, jitter=0.01)
    step_ns = (rng.uniform(2.2, 3.0, len(steps)) * 1e3).astype(np.int64)
    names = [FOREACH_ADD] * len(steps) + [kernel] * len(adam)
    info = lambda blocks: KernelInfo(grid=(blocks, 1, 1), block=(512, 1, 1), registers_per_thread=64)  # noqa: E731
    specs = [workload.KernelSpec("aten::_foreach_add_", FOREACH_ADD, 0.0, 0.0, info(bl)) for bl, _ in steps] + [
        workload.KernelSpec("aten::_fused_adamw_", kernel, 0.0, 0.0, info(bl)) for bl, _ in adam]
    n = len(names)
    ops, kernels = workload.intern(b, specs)
    # inside one op, each launch costs multi_tensor_apply's metadata packing and the call
    overhead = (rng.gamma(4.0, 0.8, n) * 1e3 + 1_500).astype(np.int64)
    launch = timing.launch_calls_ns(rng, n)
    k = len(steps)
    between = np.zeros(n, np.int64)
    between[k - 1] = timing.host_ns(rng, 30_000)  # Python between the two calls (>= 22 µs: the ops never touch)
    runtime = timing.host_ns(rng, 3_000)
    wait_at = cpu_t0 + timing.host_ns(rng, 10_000)
    runtime_call(b, "cudaStreamWaitEvent", topo.host_pid, topo.main_tid, wait_at, runtime)
    start = wait_at + runtime + timing.host_ns(rng, 30_000)
    done = launch_phase(b, host_pid=topo.host_pid, cpu_tid=topo.main_tid, gpu_pid=topo.gpu,
                        stream=topo.compute_stream, op_names=ops, kernel_names=kernels,
                        kernel_dur_ns=np.concatenate([step_ns, adam_ns]), cpu_t0=start,
                        gpu_t0=gpu_ready + timing.host_ns(rng, 5_000), op_overhead_ns=overhead, launch_ns=launch,
                        gpu_gap_ns=timing.kernel_gaps_ns(rng, n), launch_latency_ns=timing.launch_latency_ns(rng, n),
                        emit_op=np.zeros(n, bool), pending_kernel_start=pending_kernel_start,
                        kernel_cfg=workload.launch_configs(b, specs), free_after_ns=between)
    ext = b.external_ids(2)
    add0, add1 = int(done.op_start[0]) - 4_000, int(done.op_end[k - 1]) + 3_000
    adam0 = max(int(done.op_start[k]) - 12_000, add1 + 6_000)
    b.add(Kind.CPU, "cpu_op", ["aten::_foreach_add_", "aten::_fused_adamw_"], topo.host_pid, topo.main_tid,
          [add0, adam0], [add1 - add0, int(done.op_end[-1]) + 6_000 - adam0], ext=ext)
    tail = timing.host_ns(rng, 8_000)
    cpu_span(b, "Optimizer.step#AdamW.step", topo.host_pid, topo.main_tid, cpu_t0, done.cpu_end + 6_000 + tail)
    done.op_end[-1] += 6_000 + tail  # callers continue after the annotation closes
    return done


def sync_on_loss(b: TraceBuilder, topo: Topology, *, cpu_t0: int, gpu_done: int,
                 rng: np.random.Generator | None = None, timing: HostTiming = hosttime.V1) -> int:
    """`loss.item()`: a 4-byte DtoH copy and a synchronize that blocks the CPU until the
    GPU drains; this is what ties the CPU's ProfilerStep to the GPU's step. Returns when
    the CPU resumes."""
    h = (lambda ns: timing.host_ns(rng, ns)) if rng is not None else int
    pid, tid = topo.host_pid, topo.main_tid
    api_ns = h(9_000)
    sync_at = cpu_t0 + 8_000 + api_ns + h(1_000)  # after the copy's op (4 µs in, the call, 4 µs out)
    copy_start = max(gpu_done + h(2_000), sync_at + h(2_000))
    end = copy_start + h(2_500) + h(8_000)
    cpu_span(b, "aten::item", pid, tid, cpu_t0, end + 4_000, cat="cpu_op")
    cpu_span(b, "aten::_local_scalar_dense", pid, tid, cpu_t0 + 2_000, end + 2_000, cat="cpu_op")
    memcpy(b, host_pid=pid, cpu_tid=tid, gpu_pid=topo.gpu, stream=topo.compute_stream, kind="DtoH", nbytes=4,
           cpu_start_ns=cpu_t0 + 4_000, api_ns=api_ns, gpu_start_ns=copy_start, gpu_dur_ns=1_600,
           op_name="aten::copy_")
    runtime_call(b, "cudaStreamSynchronize", pid, tid, sync_at, end - sync_at)
    return end + 4_000


def model_shape(params: float) -> dict:
    """Llama-style dimensions for a dense model of `params` parameters.

    Layers grow slowly with size (32 at 8B, 40 at 13B, as Llama 2/3 have);
    params ~ 12 x layers x hidden^2 fixes the hidden size; FFN at 3.5x hidden (Llama 3);
    grouped-query attention with a quarter of the heads for K and V.
    """
    layers = int(np.clip(round(20 + 1.5 * params / 1e9), 16, 96))
    hidden = int(128 * round((params / (12 * layers)) ** 0.5 / 128))
    ffn = int(256 * round(3.5 * hidden / 256))
    return {"layers": layers, "hidden": hidden, "ffn": ffn, "kv_hidden": hidden // 4}


LLAMA3_VOCAB = 128_256  # Llama 3 tokenizer


def llm_step_specs(arch: str, params: float, tokens: int, vocab: int = LLAMA3_VOCAB):
    """One training step's kernels for a Llama-style model: (shape, forward, backward).

    Forward: embedding, the layers, the LM head GEMM and the log-softmax of the loss;
    backward mirrors it with the head's data- and weight-gradient GEMMs. One packed
    sequence per GPU, attention over at most 8K tokens.
    """
    shape = model_shape(params)
    t, h = tokens, shape["hidden"]
    seq = min(t, 8192)
    layer_f = workload.transformer_layer(arch, t, seq, h, shape["ffn"], shape["kv_hidden"])
    layer_b = workload.transformer_layer(arch, t, seq, h, shape["ffn"], shape["kv_hidden"], backward=True)
    ev = "autograd::engine::evaluate_function: "
    fwd = [workload._ew("aten::embedding", "embedding", t * h, 1, 1)] + layer_f * shape["layers"] + [
        workload._gemm(arch, "aten::mm", t, vocab, h),
        workload._ew("aten::_log_softmax", "softmax_xent", t * vocab, 1, 1, 4)]
    bwd = [workload._ew(ev + "LogSoftmaxBackward0", "mul_f32", t * vocab, 2, 1, 4),
           workload._gemm(arch, ev + "MmBackward0", t, h, vocab, "nn"),
           workload._gemm(arch, ev + "MmBackward0", vocab, h, t, "nt")] \
        + layer_b * shape["layers"] + [workload._ew(ev + "EmbeddingBackward0", "sum", t * h, 1, 1)]
    return shape, fwd, bwd
