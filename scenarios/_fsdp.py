"""The FSDP training engine straggler.py's version 2 runs: an FSDP FULL_SHARD training step on
every rank at once (PyTorch's FullyShardedDataParallel with limit_all_gathers, forward_prefetch and
BACKWARD_PRE prefetch, a Llama-style model wrapped per layer), each rank's host rows as
torch.profiler records them (the op tree around each launch, FSDP's own record_function rows,
the c10d rows of each all-gather and reduce-scatter) and its NCCL kernels ending together on
every rank.

Not a scenario (the registry skips modules whose name starts with an underscore): a scenario
decides each rank's compute (how long its forward and backward take, from its clock and its
spread) and reads its key from what `run_ranks` returns; this module takes no Params type.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from app import hosttime, physics, training, workload
from app.scenario import new_builder
from app.trace import optree
from app.trace.builder import Kind, KernelInfo
from app.trace.emit import cpu_span, launch_phase, memcpy


def _root_params(shape: dict) -> float:
    """The root FSDP unit: the embedding and the LM head (untied), Llama 3's vocabulary."""
    return 2.0 * training.LLAMA3_VOCAB * shape["hidden"]


def _layer_bytes(n_params: float, shape: dict) -> float:
    """bf16 bytes one transformer layer's all-gather assembles (and its reduce-scatter reduces)."""
    return (n_params - _root_params(shape)) / shape["layers"] * physics.BF16_BYTES


def shard_numels(n_params: float, shape: dict, world: int) -> tuple[int, ...]:
    """The tensors each rank's optimizer steps under FSDP1 FULL_SHARD with one unit per layer
    (use_orig_params=False): one FlatParameter per unit, padded to a multiple of the world and cut
    in `world` equal shards; the root's (embedding, LM head) registered first, then each layer's."""
    root = _root_params(shape)
    layer = (n_params - root) / shape["layers"]
    return tuple(int(-(-int(u) // world)) for u in [root] + [layer] * shape["layers"])


def _spread_ns(weights: np.ndarray, total_ns: int, rng: np.random.Generator, jitter: float = 0.03,
               floor_ns: int = 1_500) -> np.ndarray:
    """Kernel durations in proportion to roofline weights with per-kernel jitter; the sum is
    exactly `total_ns` (workload.scaled_durations_ns, with an integer total)."""
    w = weights * rng.normal(1.0, jitter, len(weights)).clip(0.8, 1.2)
    ns = np.floor(np.maximum(w / w.sum() * total_ns, floor_ns)).astype(np.int64)
    ns[np.argmax(ns)] += int(total_ns) - int(ns.sum())
    return ns


AG_KERNEL = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
RS_KERNEL = "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_INFO = KernelInfo(grid=(24, 1, 1), block=(640, 1, 1), registers_per_thread=96, shared_memory=87_568)


class _Rows:
    """A rank's host rows and NCCL kernels, buffered and added in a few batches (one add per
    row would cost more than the rest of the build)."""

    def __init__(self, b):
        self.b = b
        self.rows: dict[tuple, list] = {}

    def put(self, kind: Kind, cat: str, name, pid: int, tid: int, start: int, dur: int, *, corr: int = 0,
            extra: dict | None = None, ext: int | None = None) -> int:
        ext = int(self.b.external_ids(1)[0]) if ext is None else ext
        self.rows.setdefault((kind, cat, tid), []).append((name, int(start), int(dur), int(corr), extra, ext))
        return ext

    def flush(self, pid: int) -> None:
        for (kind, cat, tid), rows in self.rows.items():
            names = [r[0] for r in rows]
            if kind == Kind.KERNEL:
                names = np.array(names, np.int32)
            self.b.add(kind, cat, names, pid if kind != Kind.KERNEL else rows[0][4]["_gpu"], tid,
                       [r[1] for r in rows], [r[2] for r in rows], ext=[r[5] for r in rows],
                       corr=[r[3] for r in rows],
                       extra=[({k: v for k, v in r[4].items() if k != "_gpu"} if r[4] else None) for r in rows])
        self.rows = {}


class _Batched:
    """A TraceBuilder that gathers the shared helpers' small adds (a launch phase per layer,
    ~2,700 per rank-trace) and hands them to the real builder in one batch per row: the
    events and their ids are the same, the build several times faster."""

    def __init__(self, b):
        self._b = b
        self._buf: dict[tuple, list] = {}

    def __getattr__(self, name):
        return getattr(self._b, name)

    def add(self, kind, cat, name, pid, tid, ts_ns, dur_ns, *, ext=0, corr=0, nbytes=0, extra=None, cfg=-1):
        if extra is not None:
            return self._b.add(kind, cat, name, pid, tid, ts_ns, dur_ns, ext=ext, corr=corr, nbytes=nbytes,
                               extra=extra, cfg=cfg)
        ts = np.atleast_1d(np.asarray(ts_ns, np.int64))
        n = len(ts)
        if n == 0:
            return None
        if isinstance(name, str):
            names = np.full(n, self._b.name_id(name), np.int32)
        elif isinstance(name, np.ndarray) and name.dtype.kind in "iu":
            names = name.astype(np.int32)
        else:
            names = self._b.name_ids(list(name))
        def col(v):  # a scalar for the batch, or one value per event
            return np.full(n, v, np.int64) if isinstance(v, (int, np.integer)) else np.asarray(v, np.int64)
        self._buf.setdefault((kind, cat, pid, tid), []).append(
            (names, ts, col(dur_ns), col(ext), col(corr), col(nbytes), col(cfg)))
        return None

    def flush(self) -> None:
        for (kind, cat, pid, tid), parts in self._buf.items():
            c = [np.concatenate([x[i] for x in parts]) for i in range(7)]
            self._b.add(kind, cat, c[0], pid, tid, c[1], c[2], ext=c[3], corr=c[4], nbytes=c[5], cfg=c[6])
        self._buf = {}


def _collective_rows(rows: _Rows, topo, tid: int, h, cpu_t0: int, ag: bool, shard_nelems: int, world: int):
    """The host rows of one FSDP collective as torch writes them: the c10d op >
    record_param_comms > nccl:_all_gather_base / _reduce_scatter_base > the stream-wait event
    and the launch; lengths nominal x the measured step-to-step variation (`h`). Returns
    (cpu_end, launch_end, correlation, the collective's args)."""
    full = shard_nelems * world
    coll = training.comm_args("_allgather_base" if ag else "_reduce_scatter_base",
                              shard_nelems if ag else full, full if ag else shard_nelems, world)
    pid, b = topo.host_pid, rows.b
    t_rec, t_nccl, t_ev, t_wait, t_launch, t_nccl_end, t_rec_end, t_end = training.comm_offsets_ns(h)
    # record_shapes: the op's output and input tensors (as a sampled HTA trace writes an
    # _allgather_base_), record_param_comms' input, the nccl: range's input
    out_n, in_n = (full, shard_nelems) if ag else (shard_nelems, full)
    bf16 = optree.BF16
    rows.put(Kind.CPU, "cpu_op", "c10d::_allgather_base_" if ag else "c10d::_reduce_scatter_base_", pid, tid,
             cpu_t0, t_end, extra={"Input Dims": [[out_n], [in_n], []], "Input type": [bf16, bf16, ""]})
    rows.put(Kind.CPU, "cpu_op", "record_param_comms", pid, tid, cpu_t0 + t_rec, t_rec_end - t_rec,
             extra={**coll, "Global rank start": 0, "Global rank stride": 1,
                    "Input Dims": [[in_n], [], [], [], [], [], []],
                    "Input type": [bf16, "Scalar", "Scalar", "Scalar", "", "", ""]})
    rows.put(Kind.CPU, "user_annotation", "nccl:_all_gather_base" if ag else "nccl:_reduce_scatter_base", pid, tid,
             cpu_t0 + t_nccl, t_nccl_end - t_nccl, extra={"Input Dims": [[in_n]], "Input type": [bf16]})
    rows.put(Kind.RUNTIME, "cuda_runtime", "cudaEventRecord", pid, tid, cpu_t0 + t_ev,
             min(h(3_000), t_wait - t_ev - 500), corr=int(b.correlation_ids(1)[0]))
    rows.put(Kind.RUNTIME, "cuda_runtime", "cudaStreamWaitEvent", pid, tid, cpu_t0 + t_wait, h(3_000),
             corr=int(b.correlation_ids(1)[0]))
    launch_ns = h(9_000)
    corr = int(b.correlation_ids(1)[0])
    ext = rows.put(Kind.RUNTIME, "cuda_runtime", "cudaLaunchKernel", pid, tid, cpu_t0 + t_launch, launch_ns,
                   corr=corr)
    return cpu_t0 + t_end, cpu_t0 + t_launch + launch_ns, corr, ext, coll


# The op trees' closes take at most 1/TREE_CLOSE_DIV of the Python time after each op
# (optree.emit; 3 elsewhere): this file's per-layer phases and collectives already split the
# host's between-op time, and a third more would put its median (~10 µs) under what real
# traces allow (fidelity: >= 11.3 µs); a sixteenth (~1 µs for a median op, as torch's own
# closes take) keeps it at ~12 µs, near the flat build's 13.
TREE_CLOSE_DIV = 16


def _tree_close_ns(free_ns: int) -> int:
    """How far past its launching op's end a phase's last tree may close: its share of the
    Python time after it (optree._layout), and a backward GEMM pair's node and evaluate_function
    closing up to 2 x 400 ns after that (optree.emit)."""
    return free_ns // TREE_CLOSE_DIV + 2 * min(400, free_ns // 6) + 64


@dataclass
class _Block:
    """A stretch of one thread's CPU time the build emitted (a collective's rows, a stream
    wait, a layer's launches up to where their op trees close), or one the FSDP hooks add."""

    kind: str  # fence, sync, coll, wait, ops; post_forward, acc_node, free_event, post_bwd_prefetch
    name: str  # the collective or segment it belongs to (AG_f3, F3, RS3, ...)
    start: int
    end: int


# Where a hook opens or closes in the idle time between two blocks, by nesting depth: the
# outer ones open first and close last, each a few percent of the gap apart, so the spans
# nest strictly however short the gap (>= ~450 ns here: a stream wait and the op after it).
def _open_at(a: int, z: int, depth: int) -> int:
    return a + int((z - a) * (0.55 + 0.08 * depth))


def _close_at(a: int, z: int, depth: int) -> int:
    return a + int((z - a) * (0.45 - 0.08 * depth))


FSDP = "FullyShardedDataParallel."
ACC_GRAD = "torch::autograd::AccumulateGrad"


def _fsdp_hooks(R: dict, S: dict, layers: int) -> None:
    """FSDP's own rows around one step's collectives and layers on one rank, as FSDP (the
    FullyShardedDataParallel wrapper, torch/distributed/fsdp/_runtime_utils.py) records them:
    each layer's `FullyShardedDataParallel.forward` > `_pre_forward` > `_pre_forward_prefetch`
    (forward_prefetch: the next layer's all-gather, behind `rate_limiter` where
    limit_all_gathers blocks on cudaEventSynchronize) and the stream wait, the layer's ops,
    `_post_forward` (resharding records the free event); in backward `_pre_backward_hook` >
    `_pre_backward_prefetch` (BACKWARD_PRE: the next layer's all-gather) and the wait, and
    after a layer's gradients the flat parameter's AccumulateGrad node, whose post hook
    `_post_backward_hook` records the free event, runs `_post_backward_prefetch` and issues
    the reduce-scatter. Every row is laid in the idle time between what the build emitted
    (no row moves, nothing else draws differently); the root's pre-forward sits before the
    layers' ones. One difference from the source: the build issues a layer's prefetch before
    its stream wait, where _pre_forward_unshard waits first."""
    rows, pid, tid_main, tid_bwd = R["rows"], R["pid"], R["topo"].main_tid, R["topo"].autograd_tid
    rng = R["hook_rng"]
    S["blocks"]["main"].append(_Block("fence", "root", S["cpu"]["main"] + 3_000, S["cpu"]["main"] + 3_001))
    S["blocks"]["bwd"].append(_Block("fence", "end", S["cpu"]["bwd"], S["cpu"]["bwd"] + 1))

    def event_record(tid: int, a: int, z: int) -> None:
        dur = min(int(2_500 * rng.lognormal(0.0, 0.25)), int(0.7 * (z - a)))
        rows.put(Kind.RUNTIME, "cuda_runtime", "cudaEventRecord", pid, tid, a + (z - a) // 7, max(dur, 1),
                 corr=int(rows.b.correlation_ids(1)[0]))

    for thread, tid in (("main", tid_main), ("bwd", tid_bwd)):
        blocks, placed = S["blocks"][thread], []
        for i, blk in enumerate(blocks):
            if blk.kind == "coll" and blk.name.startswith("RS"):  # the AccumulateGrad node and its hook first
                a, g = placed[-1].end, blk.start - placed[-1].end
                # late in the Python time after the layer's last op, which stays a gap between ops
                placed += [_Block("acc_node", blk.name, a + int(0.60 * g), a + int(0.70 * g)),
                           _Block("free_event", blk.name, a + int(0.76 * g), a + int(0.84 * g)),
                           _Block("post_bwd_prefetch", blk.name, a + int(0.88 * g), a + int(0.93 * g))]
            placed.append(blk)
            if blk.kind == "ops" and thread == "main" and blk.name != "F_emb":  # a unit's forward ends
                g = blocks[i + 1].start - blk.end
                placed.append(_Block("post_forward", blk.name, blk.end + int(0.2 * g), blk.end + int(0.4 * g)))
        at = {(x.kind, x.name): j for j, x in enumerate(placed)}
        spans = []  # (name, cat, first block index, last block index, depth)
        if thread == "main":
            spans += [(FSDP + "_pre_forward", at["coll", "AG_root"], at["wait", "F_emb"], 1),
                      (FSDP + "_pre_forward_prefetch", at["coll", "AG_f0"], at["coll", "AG_f0"], 2)]
            for u in range(layers):
                nxt = f"AG_f{u + 1}"
                first = at.get(("sync", nxt), at.get(("coll", nxt), at["wait", f"F{u}"]))
                spans += [(FSDP + "forward", first, at["post_forward", f"F{u}"], 1),
                          (FSDP + "_pre_forward", first, at["wait", f"F{u}"], 2)]
                if ("coll", nxt) in at:
                    spans.append((FSDP + "_pre_forward_prefetch", first, at["coll", nxt], 3))
                if ("sync", nxt) in at:
                    spans.append((FSDP + "rate_limiter", at["sync", nxt], at["sync", nxt], 4))
        else:
            for u in range(layers - 1, -1, -1):
                first = at["coll", f"AG_b{u}"] if u == layers - 1 else at.get(("coll", f"AG_b{u - 1}"),
                                                                                   at["wait", f"B{u}"])
                spans.append((FSDP + "_pre_backward_hook", first, at["wait", f"B{u}"], 1))
                if ("coll", f"AG_b{u - 1}") in at:
                    spans.append((FSDP + "_pre_backward_prefetch", at["coll", f"AG_b{u - 1}"],
                                  at["coll", f"AG_b{u - 1}"], 2))
            for rs in [f"RS{u}" for u in range(layers)] + ["RS_root"]:
                spans += [(optree.EV + ACC_GRAD, at["acc_node", rs], at["coll", rs], 1),
                          (FSDP + "_post_backward_hook", at["free_event", rs], at["coll", rs], 2)]
        for name, i, j, depth in spans:
            a = _open_at(placed[i - 1].end, placed[i].start, depth)
            z = _close_at(placed[j].end, placed[j + 1].start, depth)
            cat = "cpu_op" if name.startswith(optree.EV) else "user_annotation"
            rows.put(Kind.CPU, cat, name, pid, tid, a, z - a)
        for blk in placed:
            if blk.kind == "post_forward":
                rows.put(Kind.CPU, "user_annotation", FSDP + "_post_forward", pid, tid, blk.start, blk.end - blk.start)
                if blk.name != "F_head":  # the root keeps its parameters for backward (FULL_SHARD)
                    event_record(tid, blk.start, blk.end)
            elif blk.kind == "acc_node":
                rows.put(Kind.CPU, "cpu_op", ACC_GRAD, pid, tid, blk.start, blk.end - blk.start)
            elif blk.kind == "free_event":
                event_record(tid, blk.start, blk.end)
            elif blk.kind == "post_bwd_prefetch":
                rows.put(Kind.CPU, "user_annotation", FSDP + "_post_backward_prefetch", pid, tid, blk.start,
                         blk.end - blk.start)


WAIT_GAP_NS = 50_000  # a compute-stream hole this long is a wait, not a kernel's dispatch gap (~1-20 µs)


def _waits_on_collectives_ns(compute: tuple[list, list], nccl: tuple[list, list], step_start: int) -> int:
    """How long the compute stream stands idle while the NCCL stream runs, counting only
    holes of WAIT_GAP_NS or more from the step's start to its last compute kernel (the
    dispatch gaps between kernels are there on every rank, waiting or not)."""
    from app.trace import intervals
    cs, ce = np.concatenate(compute[0]), np.concatenate(compute[1])
    holes = [(a, z) for a, z in intervals.gaps(cs, ce, step_start, int(ce.max())) if z - a >= WAIT_GAP_NS]
    if not holes:
        return 0
    hs, he = np.array([h[0] for h in holes], np.int64), np.array([h[1] for h in holes], np.int64)
    return int(intervals.intersection_len((hs, he), intervals.union(np.concatenate(nccl[0]), np.concatenate(nccl[1]))))


def run_ranks(*, gpu: physics.Gpu, specs_f: list, specs_b: list, shape: dict, n_params: float,
              tokens_per_gpu: int, weights: list[tuple[np.ndarray, np.ndarray]], fwd_ns: np.ndarray,
              bwd_ns: np.ndarray, busbw_gbps: float, op_overhead_us: float, host_prologue_ms: float,
              opt_bytes_per_param: float, emit_seed: int, start0: np.ndarray, first_step: int,
              nccl_stream: int, fused_optimizer: bool = False) -> dict:
    """Every rank's trace of `steps` FSDP FULL_SHARD training steps, emitted together one
    collective at a time: a collective ends on every rank when its last rank has entered it
    plus its wire time (its bytes x (N-1)/N over `busbw_gbps`), and each rank's layers wait on
    their all-gathers. Per rank r: `weights[r]`, the roofline weights its forward and backward
    kernels are spread by; `fwd_ns[r, k]` and `bwd_ns[r, k]`, their total time in step k;
    `start0[r]`, when its first step starts. `fused_optimizer`: AdamW(fused=True) as
    multi_tensor_apply launches it over each rank's shards (training.fused_adamw; the float
    functor: FSDP steps fp32 shards); else training.optimizer's four launches (straggler 2).
    Every other draw comes from streams seeded by `emit_seed` and the rank. Returns the traces and what the key reads back from them: step
    starts, per step and rank the kernel busy time, NCCL kernel time, compute idle on
    collectives, forward and backward spans, optimizer span, and the wire time per step."""
    world, steps = fwd_ns.shape
    timing = hosttime.MEASURED_2
    fwd_tot, bwd_tot = fwd_ns, bwd_ns
    busbw = busbw_gbps
    layers = shape["layers"]
    layer_bytes = _layer_bytes(n_params, shape)
    root_bytes = _root_params(shape) * physics.BF16_BYTES
    wire = lambda nbytes: nbytes * (world - 1) / world / (busbw * 1e9) * 1e9  # noqa: E731  ns, ring AG / RS
    comm_rng = np.random.default_rng([emit_seed, 99])
    shard_params = n_params / world
    numels = shard_numels(n_params, shape, world)
    h2d_bytes = tokens_per_gpu * 8 * 2
    h2d_ns = int(h2d_bytes / 20e9 * 1e9) + 2_000

    # units: which kernels each FSDP unit launches (forward list, backward list)
    lf = (len(specs_f) - 3) // layers
    lb = (len(specs_b) - 4) // layers
    # the op tree around each launch (app/trace/optree.py), the same for every rank
    widths = (shape["hidden"], shape["hidden"] + 2 * shape["kv_hidden"], shape["ffn"], 2 * shape["ffn"],
              training.LLAMA3_VOCAB)
    trees = {"f": [optree.tree_for(x, widths) for x in specs_f], "b": [optree.tree_for(x, widths) for x in specs_b]}

    ranks = []
    for r in range(world):
        meta_rng = np.random.default_rng([emit_seed, r, 2])
        real, pid, _ = new_builder(meta_rng, gpu, rank=r, world=world, visible_gpus=world)
        b = _Batched(real)
        topo = training.Topology(pid, pid, pid + 37, r, 7, nccl_stream=nccl_stream)
        topo.name_rows(b)
        w_f, w_b = weights[r]
        ops_f, kern_f = workload.intern(b, specs_f)
        ops_b, kern_b = workload.intern(b, specs_b)
        # each launch with the grid its own shape needs (one grid per name whatever its shape is a tell)
        cfg = {"f": workload.launch_configs(b, specs_f), "b": workload.launch_configs(b, specs_b)}
        ranks.append({"b": b, "pid": pid, "topo": topo, "w": (w_f, w_b), "ops": (ops_f, ops_b),
                      "kern": (kern_f, kern_b), "cfg": cfg, "ag": b.kernel(AG_KERNEL, NCCL_INFO),
                      "rs": b.kernel(RS_KERNEL, NCCL_INFO), "dur_rng": np.random.default_rng([emit_seed, r, 0]),
                      "h_rng": np.random.default_rng([emit_seed, r, 1]), "nccl_free": 0, "pending": None,
                      "rows": _Rows(b),
                      # the rank's host rows, each its nominal length as it varies step to step
                      "h": functools.partial(timing.host_ns, np.random.default_rng([emit_seed, r, 3]))})
        # the tree's numbers and the FSDP hooks' own lengths: streams of their own, so the rest
        # of the rank (and every other rank) draws what it drew without them
        tree_rng = np.random.default_rng([emit_seed, r, 4])
        real.number_ops(first_ev_idx=int(tree_rng.integers(2_000, 40_000)))
        ranks[-1].update(autograd=optree.Autograd(real, int(tree_rng.integers(1_000, 60_000))), hook_rng=tree_rng)
    start = np.zeros((world, steps), np.int64)
    start[:, 0] = start0
    rec = {"busy": np.zeros((world, steps)), "nccl": np.zeros((world, steps)), "exposed": np.zeros((world, steps)),
           "step_end": np.zeros((world, steps), np.int64), "fwd": np.zeros((world, steps)),
           "bwd": np.zeros((world, steps)), "comm": np.zeros(steps), "n_coll": 0, "opt": np.zeros((world, steps))}
    for k in range(steps):
        st = []
        for r, R in enumerate(ranks):
            b, topo, hr = R["b"], R["topo"], R["h_rng"]
            h = R["h"]
            s0 = int(start[r, k])
            w_f, w_b = R["w"]
            f_ns = _spread_ns(w_f, int(fwd_tot[r, k]), R["dur_rng"])
            b_ns = _spread_ns(w_b, int(bwd_tot[r, k]), R["dur_rng"])
            draws = {}
            for tag, n in (("f", len(specs_f)), ("b", len(specs_b))):
                oh, ln = training.op_overheads_ns(hr, n, op_overhead_us, timing)
                draws[tag] = {"oh": oh, "ln": ln, "gap": timing.kernel_gaps_ns(hr, n),
                              "lat": timing.launch_latency_ns(hr, n), "free": timing.between_ops_ns(hr, n)}
            zg0 = s0 + h(20_000)
            zg1 = zg0 + h(300_000)
            cpu_span(b, "Optimizer.zero_grad#AdamW.zero_grad", R["pid"], topo.main_tid, zg0, zg1)
            dl0 = zg1 + h(80_000)
            dl1 = dl0 + h(int(host_prologue_ms * 1e6 * 0.3))
            cpu_span(b, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", R["pid"], topo.main_tid,
                     dl0, dl1)
            memcpy(b, host_pid=R["pid"], cpu_tid=topo.main_tid, gpu_pid=r, stream=7, kind="HtoD_pinned",
                   nbytes=h2d_bytes, cpu_start_ns=dl1 + h(20_000), api_ns=h(10_000), gpu_start_ns=dl1 + h(40_000),
                   gpu_dur_ns=h2d_ns, op_name="aten::copy_")
            cpu_fwd = dl1 + h(80_000)
            st.append({"s0": s0, "f_ns": f_ns, "b_ns": b_ns, "d": draws, "cpu": {"main": cpu_fwd, "bwd": 0},
                       "fwd_cpu0": cpu_fwd, "comp_free": dl1 + 100_000 + h2d_ns, "seg": {}, "coll": {},
                       "ck": ([], []), "nk": ([], []), "busy": h2d_ns + 1_600, "ci": 0,
                       "nccl_lat": timing.launch_latency_ns(hr, 3 * layers + 2),
                       "nccl_gap": timing.kernel_gaps_ns(hr, 3 * layers + 2),
                       "blocks": {"main": [_Block("fence", "root", cpu_fwd - 2_000, cpu_fwd - 1_999)], "bwd": []}})

        def collective(name: str, ag: bool, nbytes: float, thread: str, gpu_ready=None, cpu_wait=None) -> None:
            launched = []
            for r, R in enumerate(ranks):
                S, b, topo = st[r], R["b"], R["topo"]
                h = R["h"]
                tid = topo.main_tid if thread == "main" else topo.autograd_tid
                c = S["cpu"][thread]
                if cpu_wait is not None:  # limit_all_gathers: the CPU waits on the event of layer u-2's end
                    until = int(cpu_wait(S)) + h(4_000)
                    if until > c + 2_000:
                        R["rows"].put(Kind.RUNTIME, "cuda_runtime", "cudaEventSynchronize", R["pid"], tid, c,
                                      until - c, corr=int(b.correlation_ids(1)[0]))
                        S["blocks"][thread].append(_Block("sync", name, c, until))
                        c = until + h(3_000)
                cpu_end, launch_end, corr, ext, coll = _collective_rows(
                    R["rows"], topo, tid, h, c, ag, int(nbytes / physics.BF16_BYTES / world), world)
                S["blocks"][thread].append(_Block("coll", name, c, cpu_end))
                S["cpu"][thread] = cpu_end + h(2_000)
                ready = launch_end + int(S["nccl_lat"][S["ci"]])
                if gpu_ready is not None:
                    ready = max(ready, int(gpu_ready(S)) + h(4_000))
                ready = max(ready, R["nccl_free"] + int(S["nccl_gap"][S["ci"]]))
                S["ci"] += 1
                launched.append((ready, corr, ext, coll))
            comm = int(wire(nbytes) * comm_rng.normal(1.0, 0.01))
            end = max(x[0] for x in launched) + comm
            rec["comm"][k] += comm
            for r, R in enumerate(ranks):
                k0, corr, ext, coll = launched[r]
                k1 = end + int(comm_rng.integers(0, 3_000))
                R["rows"].put(Kind.KERNEL, "kernel", R["ag" if ag else "rs"], r, R["topo"].nccl_stream, k0, k1 - k0,
                              corr=corr, ext=ext, extra={**coll, "_gpu": r})
                R["nccl_free"] = k1
                st[r]["coll"][name] = k1
                st[r]["nk"][0].append(np.array([k0]))
                st[r]["nk"][1].append(np.array([k1]))

        def segment(name: str, tag: str, lo: int, hi: int, thread: str, gate: str | None) -> None:
            for r, R in enumerate(ranks):
                S, b, topo = st[r], R["b"], R["topo"]
                h = R["h"]
                tid = topo.main_tid if thread == "main" else topo.autograd_tid
                d = S["d"][tag]
                dur = (S["f_ns"] if tag == "f" else S["b_ns"])[lo:hi]
                gap = d["gap"][lo:hi]
                g0 = S["comp_free"] + int(gap[0])
                c = S["cpu"][thread]
                if gate is not None:  # the compute stream waits on the unshard stream's event
                    wait_ns = h(3_000)
                    R["rows"].put(Kind.RUNTIME, "cuda_runtime", "cudaStreamWaitEvent", R["pid"], tid, c, wait_ns,
                                  corr=int(b.correlation_ids(1)[0]))
                    S["blocks"][thread].append(_Block("wait", name, c, c + wait_ns))
                    c += h(6_000)
                    g0 = max(g0, S["coll"][gate] + h(3_000))
                ph = launch_phase(b, host_pid=R["pid"], cpu_tid=tid, gpu_pid=r, stream=7,
                                  op_names=R["ops"][0 if tag == "f" else 1][lo:hi],
                                  kernel_names=R["kern"][0 if tag == "f" else 1][lo:hi], kernel_dur_ns=dur,
                                  cpu_t0=c, gpu_t0=g0, op_overhead_ns=d["oh"][lo:hi], launch_ns=d["ln"][lo:hi],
                                  gpu_gap_ns=gap, launch_latency_ns=d["lat"][lo:hi], free_after_ns=d["free"][lo:hi],
                                  pending_kernel_start=R["pending"], tree=trees[tag][lo:hi], autograd=R["autograd"],
                                  backward=tag == "b", tree_close_div=TREE_CLOSE_DIV, kernel_cfg=R["cfg"][tag][lo:hi])
                R["pending"] = ph.kernel_start
                S["cpu"][thread] = ph.cpu_end + int(d["free"][hi - 1])  # Python after the last op
                S["blocks"][thread].append(_Block("ops", name, int(ph.op_start[0]),
                                                  ph.cpu_end + _tree_close_ns(int(d["free"][hi - 1]))))
                S["comp_free"] = ph.gpu_end
                S["seg"][name] = (int(ph.kernel_start[0]), ph.gpu_end)
                S["ck"][0].append(ph.kernel_start)
                S["ck"][1].append(ph.kernel_end)
                S["busy"] += int(np.sum(dur))

        # forward: the root unit (embedding, LM head) and each layer gathered before it runs;
        # limit_all_gathers keeps two in flight, so the CPU issues layer u's after layer u-2 ends
        collective("AG_root", True, root_bytes, "main")
        collective("AG_f0", True, layer_bytes, "main")
        segment("F_emb", "f", 0, 1, "main", "AG_root")
        for u in range(layers):
            if u + 1 < layers:
                wait = (lambda S, u=u: S["seg"][f"F{u - 2}"][1]) if u >= 2 else None
                collective(f"AG_f{u + 1}", True, layer_bytes, "main", cpu_wait=wait)
            segment(f"F{u}", "f", 1 + u * lf, 1 + (u + 1) * lf, "main", f"AG_f{u}")
        segment("F_head", "f", 1 + layers * lf, len(specs_f), "main", None)
        for S in st:
            cpu_span(ranks[st.index(S)]["b"], "FullyShardedDataParallel.forward", ranks[st.index(S)]["pid"],
                     ranks[st.index(S)]["topo"].main_tid, S["fwd_cpu0"] - 2_000, S["cpu"]["main"] + 3_000)
            S["cpu"]["bwd"] = S["cpu"]["main"] + timing.host_ns(ranks[st.index(S)]["h_rng"], 20_000)
        # backward on the autograd thread: the head (root, still gathered), then each layer
        # gathered again (BACKWARD_PRE prefetches the next) and its gradients reduce-scattered
        segment("B_head", "b", 0, 3, "bwd", None)
        collective(f"AG_b{layers - 1}", True, layer_bytes, "bwd")
        for j, u in enumerate(range(layers - 1, -1, -1)):
            if u >= 1:
                collective(f"AG_b{u - 1}", True, layer_bytes, "bwd")
            segment(f"B{u}", "b", 3 + j * lb, 3 + (j + 1) * lb, "bwd", f"AG_b{u}")
            collective(f"RS{u}", False, layer_bytes, "bwd", gpu_ready=lambda S, u=u: S["seg"][f"B{u}"][1])
        segment("B_emb", "b", 3 + layers * lb, len(specs_b), "bwd", None)
        collective("RS_root", False, root_bytes, "bwd", gpu_ready=lambda S: S["seg"]["B_emb"][1])
        rec["n_coll"] = 3 * layers + 2
        for R, S in zip(ranks, st):
            _fsdp_hooks(R, S, layers)
        for r, R in enumerate(ranks):
            S, b, topo, hr = st[r], R["b"], R["topo"], R["h_rng"]
            rec["fwd"][r, k] = (S["seg"]["F_head"][1] - S["seg"]["F_emb"][0]) / 1e6
            rec["bwd"][r, k] = (S["seg"]["B_emb"][1] - S["seg"]["B_head"][0]) / 1e6
            cpu = max(S["cpu"]["main"], S["cpu"]["bwd"]) + timing.host_ns(hr, 20_000)
            if fused_optimizer:
                opt = training.fused_adamw(b, topo, hr, timing, numels=numels, n_params=shard_params,
                                           bytes_per_param=opt_bytes_per_param, kernel=workload.ADAM, gpu=gpu,
                                           cpu_t0=cpu, gpu_ready=S["coll"]["RS_root"],
                                           pending_kernel_start=R["pending"])
            else:
                opt = training.optimizer(b, topo, hr, params=shard_params, cpu_t0=cpu, gpu_ready=S["coll"]["RS_root"],
                                         gpu=gpu, bytes_per_param=opt_bytes_per_param, pending_kernel_start=R["pending"],
                                         timing=timing)
            R["pending"] = None
            S["busy"] += int(np.sum(opt.kernel_end - opt.kernel_start))
            rec["opt"][r, k] = (opt.gpu_end - opt.kernel_start[0]) / 1e6
            S["ck"][0].append(opt.kernel_start)
            S["ck"][1].append(opt.kernel_end)
            t_end = training.sync_on_loss(b, topo, cpu_t0=opt.cpu_end + timing.host_ns(hr, 10_000),
                                          gpu_done=opt.gpu_end, rng=hr, timing=timing)
            cpu_span(b, f"ProfilerStep#{first_step + k}", R["pid"], topo.main_tid, S["s0"], t_end)
            rec["step_end"][r, k] = t_end
            rec["busy"][r, k] = S["busy"]
            rec["nccl"][r, k] = sum(int(e[0] - s_[0]) for s_, e in zip(*S["nk"]))
            # the compute stream idle while the NCCL stream runs: the collectives this rank waits on
            rec["exposed"][r, k] = _waits_on_collectives_ns(S["ck"], S["nk"], S["s0"])
            if k + 1 < steps:
                start[r, k + 1] = t_end + timing.host_ns(hr, 15_000)
    for R in ranks:
        R["rows"].flush(R["pid"])
        R["b"].flush()
    return {"traces": [R["b"]._b.build() for R in ranks], "start": start, "rec": rec, "first_step": first_step,
            "layers": layers, "layer_bytes": layer_bytes, "root_bytes": root_bytes, "busbw": busbw}
