"""prefill's version 1 trace, as it was first modelled and is still built for what was made
with it (tests/test_versions.py pins it byte for byte): each kernel row drawn for a group of
layers (`layer_rows`), the TP all-reduce on its own NCCL stream, the iteration's efficiency
as a target, constant host timing. scenarios/prefill.py holds version 2, the key and the
rubric; this module only lays out version 1's events and hands them to the same key."""

from __future__ import annotations

import numpy as np

from app import physics, workload
from app.scenario import Built, new_builder
from app.trace.builder import Kind
from app.trace.schedule import in_order
from scenarios._serving import (DECODE_NODE_US, GPU_GAP_NS, H2D_GBPS, LAUNCH_LATENCY_NS, _MODELS, _ROLES, _Physics,
                                _Template, _fp8_gemm_name, _plan, _simulate, _tp_for)

def _cumsum0(x: np.ndarray) -> np.ndarray:
    out = np.zeros(len(x), np.int64)
    np.cumsum(x[:-1], out=out[1:])
    return out


def build_v1(p, rng: np.random.Generator, seed) -> Built:
    from scenarios.prefill import _key_and_artifacts  # the key both versions share (imported late: prefill imports this module)

    gpu = physics.GPUS[p.gpu]
    m = _MODELS[p.model]
    tp = _tp_for(m, gpu)
    ph = _Physics(m, gpu, tp, p)
    n_groups = min(p.layer_rows, m.layers)
    groups = np.full(n_groups, m.layers // n_groups, np.int64)
    groups[:m.layers % n_groups] += 1
    kinds = _plan(p, rng)
    sim = _simulate(p, kinds, rng)
    n = p.iterations

    b, pid, t = new_builder(rng, gpu, rank=0, world=tp, visible_gpus=tp)
    main_tid = pid
    nccl_stream = int(rng.choice([20, 28, 36, 44]))
    b.process(pid, f"python3 (vllm worker, TP rank 0 of {tp})", "CPU", 0)
    b.process(0, "GPU 0", "GPU 0", 1_000)
    b.thread(pid, main_tid, f"thread {main_tid} (pt_main_thread)", 1)
    b.thread(0, 7, "stream 7 ", 7)
    b.thread(0, nccl_stream, f"stream {nccl_stream} ", nccl_stream)

    nid = b.name_id
    ann_ids = {k: nid(v) for k, v in {
        "sched": "Scheduler.schedule", "exec": "Worker.execute_model",
        "prep": "ModelRunner._prepare_model_input_tensors", "fwd": f"{m.arch}.forward",
        "sample": "ModelRunner.compute_logits_and_sample", "proc": "LLMEngine._process_model_outputs",
        "gc": "gc.collect"}.items()}
    copy_op = nid("aten::copy_")
    memcpy_api = nid("cudaMemcpyAsync")
    sync_api = nid("cudaStreamSynchronize")
    h2d_name = nid("Memcpy HtoD (Pinned -> Device)")
    d2h_name = nid("Memcpy DtoH (Device -> Pageable)")

    templates: dict[tuple, _Template] = {}

    def template(decode: bool, m_tokens: int, rows_out: int) -> _Template:
        key = (decode, _fp8_gemm_name(m_tokens), workload.gemm_name("sm90", rows_out))
        if key not in templates:
            templates[key] = _Template(b, ph, groups, decode, m_tokens, rows_out, nccl_stream)
        return templates[key]

    # per-iteration CPU costs and distractors, drawn up front
    jit = rng.uniform(0.85, 1.15, (n, 3))
    gc_on = np.zeros(n, bool)
    n_gc = round(p.gc_pct / 100 * n)
    cand = np.flatnonzero(kinds == 0)
    if n_gc and len(cand):
        gc_on[rng.choice(cand, size=min(n_gc, len(cand)), replace=False)] = True
    gc_ns = (rng.uniform(1.5, 6.0, n) * 1e6).astype(np.int64)
    first_step = int(rng.integers(2_000, 60_000))

    ann_name, ann_ts, ann_dur, ann_extra = [], [], [], []
    op_name, op_ts, op_dur = [], [], []
    rt_name, rt_ts, rt_dur = [], [], []
    k_name, k_tid, k_ts, k_dur, k_extra = [], [], [], [], []
    mem_name, mem_ts, mem_dur, mem_bytes = [], [], [], []
    op_ext, rt_ext, rt_corr, k_ext, k_corr, mem_ext, mem_corr = [], [], [], [], [], [], []
    ann_ext = []

    step_start = np.zeros(n, np.int64)
    step_end = np.zeros(n, np.int64)
    token_t = np.zeros(n, np.int64)
    gpu_first = np.zeros(n, np.int64)
    gpu_last = np.zeros(n, np.int64)
    copies_ns = np.zeros(n, np.int64)
    gc_gap = np.zeros(n, np.int64)
    tmpl_of: list[_Template] = []
    dur_rows: list[np.ndarray] = []
    gpu_free = t
    cpu = t

    for k in range(n):
        kind = int(kinds[k])
        decode = kind == 0
        seqs = sim.prefill_seqs[k]
        tokens = int(sim.decode_tokens[k]) if decode else int(sum(seqs))
        rows_out = tokens if decode else len(seqs)
        tpl = template(decode, tokens, rows_out)
        lay = ph.layer_us(decode, tokens, int(sim.ctx_tokens[k]), seqs)
        head = ph.head_us(tokens, rows_out)
        floor_us = tpl.row_us(lay, head)
        if decode:
            dur = np.maximum(floor_us * rng.normal(1.0, 0.015, len(floor_us)).clip(0.95, 1.05) * 1e3, 1_500)
            dur = dur.astype(np.int64)
        else:
            # phase time from FLOPs at the prefill efficiency; compute rows share it by their roofline floors
            flops = 2.0 * tokens * ph.lin_params_gpu + ph.attn_flops(seqs) * m.layers
            target_us = flops / (ph.fp8 * p.prefill_flop_eff) * 1e6
            comm = tpl.is_nccl
            gaps_us = tpl.represented_kernels() * GPU_GAP_NS / 1e3
            pure_floor = floor_us - (tpl.group_of_row - 1) * GPU_GAP_NS / 1e3
            compute_us = max(target_us - floor_us[comm].sum() - gaps_us, pure_floor[~comm].sum())
            dur = np.empty(len(floor_us), np.int64)
            dur[~comm] = workload.scaled_durations_ns(pure_floor[~comm], compute_us / 1e3, rng, jitter=0.02)
            dur[~comm] += (tpl.group_of_row[~comm] - 1) * GPU_GAP_NS
            dur[comm] = (floor_us[comm] * rng.normal(1.0, 0.01, int(comm.sum())).clip(0.97, 1.03) * 1e3).astype(np.int64)
        tmpl_of.append(tpl)
        dur_rows.append(dur)

        # -- CPU side: schedule, prepare inputs, launch, sample, sync, process outputs
        pre_tokens = 0 if decode else tokens
        sched = int((0.35 * p.cpu_overhead_ms * jit[k, 0] * 1e6) + pre_tokens * 40)
        prep = int(max(0.08, 0.25 * p.cpu_overhead_ms * jit[k, 1]) * 1e6 + pre_tokens * 60)
        proc = int(0.40 * p.cpu_overhead_ms * jit[k, 2] * 1e6)
        t0 = cpu
        s0 = t0 + 12_000
        e0 = s0 + sched + 8_000
        p0 = e0 + 6_000
        c0 = p0 + prep // 3
        p1 = p0 + prep
        f0 = p1 + 5_000
        nk = len(dur)
        # CPU time before each launch: a row stands for `group_of_row` kernels; decode replays them the way a
        # captured CUDA graph would (~2 µs a node), prefill dispatches them eagerly
        per_kernel_us = DECODE_NODE_US if decode else p.op_overhead_us
        oh = (np.maximum(rng.gamma(4.0, 0.25, nk) * per_kernel_us * tpl.group_of_row, 1.0) * 1e3).astype(np.int64)
        ln = (rng.uniform(4.0, 7.0, nk) * 1e3).astype(np.int64)
        ep = np.maximum(oh // 8, 500)
        cost = oh + ln + ep
        nf = tpl.n_fwd
        ost = np.empty(nk, np.int64)
        ost[:nf] = f0 + _cumsum0(cost[:nf])
        f1 = int(ost[nf - 1] + cost[nf - 1]) + 3_000
        sa0 = f1 + 3_000
        ost[nf:] = sa0 + 5_000 + _cumsum0(cost[nf:])
        d0 = int(ost[-1] + cost[-1]) + 2_000
        lst = ost + oh
        ready = lst + ln + LAUNCH_LATENCY_NS
        h2d_bytes = tokens * 24 + int(sim.decode_tokens[k]) * 512 + 4096
        h2d_dur = 2_000 + int(h2d_bytes / (H2D_GBPS * 1e9) * 1e9)
        d2h_bytes = max(1, rows_out) * 8
        all_ready = np.concatenate([[c0 + 11_000 + LAUNCH_LATENCY_NS], ready, [d0 + 11_000 + LAUNCH_LATENCY_NS]])
        all_dur = np.concatenate([[h2d_dur], dur, [1_800]])
        starts = in_order(all_ready, all_dur, GPU_GAP_NS, gpu_free)
        ends = starts + all_dur
        sync0 = d0 + 14_000
        sync1 = max(sync0 + 3_000, int(ends[-1]) + 4_000)
        sa1 = sync1 + 3_000
        e1 = sa1 + 4_000
        q0 = e1 + 5_000
        q1 = q0 + proc
        end = q1 + 6_000
        if gc_on[k]:
            g0 = q1 + 10_000
            end = g0 + int(gc_ns[k]) + 6_000
        step_start[k] = t0
        step_end[k] = end
        token_t[k] = q1
        gpu_first[k] = starts[1]
        gpu_last[k] = ends[-2]
        copies_ns[k] = h2d_dur + 1_800

        # annotations (ProfilerStep is added with its args below)
        names = [ann_ids["sched"], ann_ids["exec"], ann_ids["prep"], ann_ids["fwd"], ann_ids["sample"], ann_ids["proc"]]
        ts = [s0, e0, p0, f0, sa0, q0]
        du = [sched, e1 - e0, prep, f1 - f0, sa1 - sa0, proc]
        if gc_on[k]:
            names.append(ann_ids["gc"])
            ts.append(q1 + 10_000)
            du.append(int(gc_ns[k]))
        ann_name.append(np.array(names, np.int32))
        ann_ts.append(np.array(ts, np.int64))
        ann_dur.append(np.array(du, np.int64))
        ann_ext.append(b.external_ids(len(names)))
        ann_extra.extend([None] * len(names))
        ann_name.append(np.array([nid(f"ProfilerStep#{first_step + k}")], np.int32))
        ann_ts.append(np.array([t0], np.int64))
        ann_dur.append(np.array([end - t0], np.int64))
        ann_ext.append(b.external_ids(1))
        ann_extra.append({"num_prefill_tokens": pre_tokens, "num_decode_tokens": int(sim.decode_tokens[k]),
                          "num_seqs": int(sim.decode_tokens[k]) if decode else len(seqs)})

        # ops + launches + kernels, with the two copies and the sync
        ext = b.external_ids(nk + 2)
        corr = b.correlation_ids(nk + 3)
        op_name.append(np.concatenate([tpl.op_ids, [copy_op, copy_op]]).astype(np.int32))
        op_ts.append(np.concatenate([ost, [c0, d0]]))
        op_dur.append(np.concatenate([cost, [13_000, 13_000]]))
        op_ext.append(ext)
        rt_name.append(np.concatenate([tpl.api_ids, [memcpy_api, memcpy_api, sync_api]]).astype(np.int32))
        rt_ts.append(np.concatenate([lst, [c0 + 2_000, d0 + 2_000, sync0]]))
        rt_dur.append(np.concatenate([ln, [9_000, 9_000, sync1 - sync0]]))
        rt_ext.append(np.concatenate([ext, [b.external_ids(1)[0]]]))
        rt_corr.append(corr)
        k_name.append(tpl.k_ids)
        k_tid.append(tpl.tid)
        k_ts.append(starts[1:-1])
        k_dur.append(dur)
        k_ext.append(ext[:nk])
        k_corr.append(corr[:nk])
        msg = tokens * m.hidden
        ar_args = {"Collective name": "allreduce", "In msg nelems": msg, "Out msg nelems": msg, "Group size": tp,
                   "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]", "Process Group Name": "0",
                   "Process Group Description": "default_pg", "Process Group Ranks": str(list(range(tp)))}
        ag_n = rows_out * ph.vocab_tp
        ag_args = {**ar_args, "Collective name": "allgather", "In msg nelems": ag_n, "Out msg nelems": ag_n * tp}
        k_extra.extend(ar_args if r == "ar" else (ag_args if r == "ag" else None) for r in tpl.roles)
        mem_name.append(np.array([h2d_name, d2h_name], np.int32))
        mem_ts.append(np.array([starts[0], starts[-1]], np.int64))
        mem_dur.append(np.array([h2d_dur, 1_800], np.int64))
        mem_bytes.append(np.array([h2d_bytes, d2h_bytes], np.int64))
        mem_ext.append(ext[nk:])
        mem_corr.append(corr[nk:nk + 2])

        if gc_on[k]:
            gc_gap[k] = int(gc_ns[k])
        gpu_free = int(ends[-1])
        cpu = end + 25_000

    cat = np.concatenate
    # per-iteration sums by kernel role, from the emitted durations (one pass, no per-iteration loop)
    n_rows = np.array([len(d) for d in dur_rows])
    it_of = np.repeat(np.arange(n), n_rows)
    all_dur = cat(dur_rows).astype(np.float64)
    codes = cat([tp_.role_code for tp_ in tmpl_of])
    # kernel time by role, without the launch gaps a grouped row carries for the layers it stands for
    pure = all_dur - (cat([tp_.group_of_row for tp_ in tmpl_of]) - 1) * GPU_GAP_NS
    role_sum = {r: np.bincount(it_of[codes == c], weights=pure[codes == c], minlength=n).astype(np.int64)
                for c, r in enumerate(_ROLES)}
    role_sum["ar"] = role_sum["ar"] + role_sum["ag"]
    nccl_rows = (codes == _ROLES.index("ar")) | (codes == _ROLES.index("ag"))
    kernel_ns = np.bincount(it_of, weights=all_dur, minlength=n).astype(np.int64)
    nccl_ns = np.bincount(it_of[nccl_rows], weights=all_dur[nccl_rows], minlength=n).astype(np.int64)
    gpu_busy = kernel_ns + copies_ns  # both streams; they never overlap (one dependency chain)
    comp_busy = kernel_ns - nccl_ns + copies_ns  # compute stream 7: kernels and copies
    comp_kernels = np.array([tp_.n_compute for tp_ in tmpl_of])
    nccl_kernels = np.array([tp_.n_nccl for tp_ in tmpl_of])
    b.add(Kind.CPU, "user_annotation", cat(ann_name), pid, main_tid, cat(ann_ts), cat(ann_dur), ext=cat(ann_ext),
          extra=ann_extra)
    b.add(Kind.CPU, "cpu_op", cat(op_name), pid, main_tid, cat(op_ts), cat(op_dur), ext=cat(op_ext))
    b.add(Kind.RUNTIME, "cuda_runtime", cat(rt_name), pid, main_tid, cat(rt_ts), cat(rt_dur), ext=cat(rt_ext),
          corr=cat(rt_corr))
    b.add(Kind.KERNEL, "kernel", cat(k_name), 0, cat(k_tid), cat(k_ts), cat(k_dur), ext=cat(k_ext),
          corr=cat(k_corr), extra=k_extra)
    b.add(Kind.MEMORY, "gpu_memcpy", cat(mem_name), 0, 7, cat(mem_ts), cat(mem_dur), ext=cat(mem_ext),
          corr=cat(mem_corr), nbytes=cat(mem_bytes))
    trace = b.build()

    return _key_and_artifacts(p, rng, seed, gpu, m, tp, ph, sim, kinds, groups, trace, nccl_stream,
                              step_start=step_start, step_end=step_end, first_step=first_step, token_t=token_t, gpu_first=gpu_first, gpu_last=gpu_last,
                              gpu_busy=gpu_busy, comp_busy=comp_busy, comp_kernels=comp_kernels,
                              nccl_kernels=nccl_kernels, role_sum=role_sum, gc_gap=gc_gap, tmpl_of=tmpl_of,
                              dur_rows=dur_rows)
