"""Scenario-specific checks for case 6 (skinny-gemm), beyond the registry-driven ones.

They read the exported trace the way a candidate would (kernel rows summed by config,
NCCL overlap, launch lead) and check that the Nsight Compute section and the fix
arithmetic close on the same numbers the key states.
"""

from __future__ import annotations

import functools
import json
import math

import numpy as np

import pytest

import scenarios
from app import physics
from app.scenario import InstanceError, observation
from app.trace import kineto
from scenarios import skinny_gemm as sg

SEEDS = ["canonical"] + list(range(20))
SCN = scenarios.get("skinny-gemm")


@functools.lru_cache(maxsize=None)
def inst(seed):
    return SCN.instance(seed)


@functools.lru_cache(maxsize=None)
def doc(seed) -> dict:
    i = inst(seed)
    return json.loads(kineto.dumps(i.trace(0), i.trace_name(0)))


def ob(seed, oid):
    return observation(inst(seed).key, oid)


def close(a, b, rel):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_shape_is_memory_bound_and_the_fix_is_not(seed):
    ai, ridge, ai4 = ob(seed, "arithmetic_intensity"), ob(seed, "ridge_point"), ob(seed, "expected_ai")
    assert ai < ridge < ai4
    assert ob(seed, "gemm_m") == inst(seed).params.seq


@pytest.mark.parametrize("seed", SEEDS)
def test_ncu_section_closes(seed):
    a = inst(seed).artifacts["ncu"]
    gpu = physics.GPUS[inst(seed).params.gpu]
    dur = a["duration_us"] * 1e-6
    assert close(a["dram_throughput_pct"], a["dram_bytes"] / dur / (gpu.mem_tbps * 1e12) * 100, 0.01)
    assert close(a["tensor_pipe_pct"], a["flops"] / dur / (gpu.bf16_tflops * 1e12) * 100, 0.01)
    assert a["dram_throughput_pct"] > 70 > 40 > a["tensor_pipe_pct"]
    assert a["dram_bytes"] > a["min_bytes"]
    mb = inst(seed).artifacts["experiments"]["gemm_microbench"]
    assert close(mb["ratio"], ob(seed, "family_speedup"), 0.02)
    assert mb["tflops_at_4m"] < gpu.bf16_tflops and mb["tflops_at_m"] < physics.attainable_tflops(mb["ai_at_m"], gpu)


@pytest.mark.parametrize("seed", SEEDS)
def test_top_family_read_off_the_trace(seed):
    """Sum compute-stream kernel time per cuBLAS config (name without the layout): the 128x64
    family is the top config and matches the key's share."""
    per: dict[str, float] = {}
    total = 0.0
    for e in doc(seed)["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and e["tid"] == 7:
            name = e["name"]
            cfg = sg.config_of(name)
            per[cfg] = per.get(cfg, 0.0) + float(e["dur"])
            total += float(e["dur"])
    top = max(per, key=per.get)
    assert top == sg.family_label(inst(seed).version >= 2)
    assert close(per[top] / total * 100, ob(seed, "top_kernel_share_pct"), 0.01)


@pytest.mark.parametrize("seed", SEEDS)
def test_comm_is_bucketed_and_hidden_and_cpu_runs_ahead(seed):
    ev = doc(seed)["traceEvents"]
    nccl = [e for e in ev if e.get("cat") == "kernel" and e["name"].startswith(("ncclDevKernel_ReduceScatter", "ncclDevKernel_Reduce_"))]
    steps = inst(seed).params.steps
    assert len(nccl) == steps * ob(seed, "nccl_kernels_per_step") and ob(seed, "nccl_kernels_per_step") >= 10
    assert all(e["tid"] != 7 for e in nccl)
    # version 2's stream shows the 1-20 µs gaps real ones do between back-to-back kernels (~8% of
    # a micro-step of ~2,700 kernels), so its busy share, and the comm's overlap with it, sit lower
    assert ob(seed, "nccl_hidden_pct") > 85
    assert ob(seed, "nccl_ms_per_step") < ob(seed, "step_ms")
    assert ob(seed, "launch_lead_ms") > 1.0
    assert ob(seed, "gpu_busy_pct") > 85


@pytest.mark.parametrize("seed", SEEDS)
def test_fix_arithmetic_closes(seed):
    k = inst(seed).key
    a = inst(seed).artifacts
    saved = sum(a["time_by_class_ms"][c] - a["after_by_class_ms"][c] for c in ("family", "kindred", "other"))
    step, gaps = ob(seed, "step_ms"), ob(seed, "gaps_ms")
    assert close(step - saved - 0.75 * gaps, k["expected"]["after_ms"], 0.005)
    assert ob(seed, "expected_step_ms") < ob(seed, "expected_step_gemm_only_ms") < step
    assert close(ob(seed, "expected_mfu_pct") / ob(seed, "mfu_pct"), ob(seed, "speedup"), 0.02)
    mfu = physics.mfu_pct(physics.training_flops(ob(seed, "model_params_b") * 1e9, ob(seed, "gemm_m")),
                          step, physics.GPUS[inst(seed).params.gpu])
    assert close(mfu, ob(seed, "mfu_pct"), 0.01)


def test_canonical_states_the_model_numbers_where_the_seed_does_not_close():
    """Version 2 keeps the seed's 13B as the real Llama-2-13B (hidden 5120, 40 layers): its
    micro-step is ~92 ms, not 210 (the seed's 13B cannot fill 210 ms at its own ncu read)."""
    assert ob("canonical", "model_params_b") == pytest.approx(13.02, abs=0.01)
    assert ob("canonical", "gemm_n") == ob("canonical", "gemm_k") == 5120 and ob("canonical", "layers") == 40
    assert 85 < ob("canonical", "step_ms") < 100
    assert 20 < ob("canonical", "mfu_pct") < 25  # not the seed's 33%
    assert 1.9 < ob("canonical", "speedup") < 2.3  # not the seed's 1.45
    assert ob("canonical", "top_kernel_share_pct") > ob("canonical", "other_share_pct")
    old = SCN.instance("canonical", version=1).key
    assert 29 < observation(old, "model_params_b") < 31  # version 1: a 30B on 148 layers of width 4096


def test_params_keep_the_pathology():
    with pytest.raises(InstanceError, match="memory-bound"):
        SCN.instance("canonical", {"seq": "384"})
    with pytest.raises(InstanceError, match="accumulation window"):
        SCN.instance("canonical", {"steps": "600", "grad_accum": "512"})
    with pytest.raises(InstanceError):
        SCN.instance("canonical", {"gpu": "A100"})
    for seed in range(20):
        p = SCN.params_for(seed, version=1)
        assert p.hidden == next(h for top, h in sg.HIDDEN_BANDS if p.model_params_b <= top)
        assert p.seq in sg.SEQ_DRAW
        p = SCN.params_for(seed)
        assert sg.model_v2(p.model_params_b, p.hidden)[1]["hidden"] == p.hidden
        assert p.seq in sg.SEQ_DRAW


# -- version 2: every seed a job that runs (issue 13) -------------------------------------

V2_SEEDS = range(200)


@functools.lru_cache(maxsize=None)
def v2_params():
    return [SCN.params_for(seed) for seed in V2_SEEDS]


def test_version_2_seeds_fit_in_memory_with_the_fix():
    """ZeRO-2 (bf16 weights whole, fp32 master, gradients and Adam moments partitioned),
    activations at the fix's micro-batch 4: within 90% of HBM on every seed (version 1's
    30B canonical needed ~113 GB of an 80 GB H100)."""
    gpu = physics.GPUS["H100"]
    cap = sg.feasibility.efficiency_cap("sm90", "gemm_bf16")
    for p in v2_params():
        _, cfg = sg.model_v2(p.model_params_b, p.hidden)
        mem = sg.memory_v2(cfg, p.world_size, 4 * p.seq)
        assert mem.share_of(gpu) <= 0.90, (p, mem.describe(gpu))
        # the GEMM efficiencies each seed draws stay under the best published cuBLAS on H100
        assert p.large_gemm_eff < cap and sg.ASSUMED_GEMM_EFF < cap and p.dram_frac <= 0.95
    old = sg.feasibility.training_memory(30.2e9, world=8, tokens_per_gpu=1024, hidden=4096, layers=148,
                                         sharding="zero2", master_fp32=True)
    assert not old.fits(gpu)  # the defect version 2 removes


def test_version_2_draws_real_models_and_world_sizes():
    """Real configurations only (Llama-2-7B/13B, Qwen1.5-14B), and the world sizes real jobs
    use: 8, sometimes 4 (version 1 drew 5-7 GPUs on 64% of seeds)."""
    ps = v2_params()
    worlds = [p.world_size for p in ps]
    assert set(worlds) <= {4, 8} and worlds.count(8) > 0.6 * len(ps) and worlds.count(4) > 0
    names = {sg.model_v2(p.model_params_b, p.hidden)[0] for p in ps}
    assert names == set(sg.MODELS)
    for name, cfg in sg.MODELS.items():  # the published sizes
        assert sg._count(cfg) / 1e9 == pytest.approx({"Llama-2-7B": 6.74, "Llama-2-13B": 13.02,
                                                       "Qwen1.5-14B": 14.17}[name], abs=0.01)
    odd = [SCN.params_for(s, version=1).world_size for s in V2_SEEDS]
    assert sum(w in (5, 6, 7) for w in odd) > 0.5 * len(odd)  # what version 1 drew


@pytest.mark.parametrize("seed", ["canonical", 0, 1, 2, 3, 5, 8])
def test_version_2_efficiencies_under_the_caps_and_hopper_names(seed):
    """No GEMM beats the best published cuBLAS on H100 (feasibility's cap), and the GEMMs carry
    the names cuBLAS gives them on Hopper (version 1 showed Ampere's on an H100)."""
    cap = sg.feasibility.efficiency_cap("sm90", "gemm_bf16")
    assert ob(seed, "tensor_pct") / 100 < cap and ob(seed, "microbench_tflops_4m") / 989 < cap
    gemms = {e["name"] for e in doc(seed)["traceEvents"] if e.get("cat") == "kernel" and "gemm" in e["name"]}
    assert gemms and all(n.startswith("sm90_xmma_gemm_bf16bf16") for n in gemms)
    old = SCN.instance(seed, version=1)
    assert old.artifacts["ncu"]["kernel"].startswith("ampere_")


@pytest.mark.parametrize("seed", ["canonical", 1])
def test_version_2_reduces_as_deepspeed_0_12_3_does(seed):
    """ZeRO-2 in DeepSpeed <= 0.12.3 (stage_1_and_2.py, average_tensor): per gradient bucket,
    one async dist.reduce per partition the bucket spans, to the rank that owns it; version 1
    showed a _reduce_scatter_base DeepSpeed never issues."""
    ev = doc(seed)["traceEvents"]
    p = inst(seed).params
    comms = [e["args"] for e in ev if e.get("name") == "record_param_comms"]
    assert comms and {c["Collective name"] for c in comms} == {"reduce"}
    assert all(c["In msg nelems"] == c["Out msg nelems"] for c in comms)
    # the reduces of one micro-step cover every gradient once
    per_step = len(comms) // p.steps
    total = sum(c["In msg nelems"] for c in comms[:per_step])
    assert total == pytest.approx(ob(seed, "model_params_b") * 1e9, rel=0.01)
    b, e, dst = sg.partition_slices(np.array([600, 300, 100]), 1000, 4)
    # bucket 0 is the flat buffer's last 600 elements, [400, 1000), cut at the partitions (250 each)
    assert e.tolist() == [100, 250, 250, 150, 150, 100] and dst.tolist() == [1, 2, 3, 0, 1, 0]
    assert b.tolist() == [0, 0, 0, 1, 1, 2]
    old = json.loads(kineto.dumps(SCN.instance(seed, version=1).trace(0)))
    assert {x["args"]["Collective name"] for x in old["traceEvents"] if x.get("name") == "record_param_comms"} \
        == {"_reduce_scatter_base"}


def _nests(events) -> bool:
    """Every host row on a thread either holds the next one or ends before it starts."""
    rows = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime", "user_annotation"):
            a = round(float(e["ts"]) * 1000)
            rows.setdefault((e["pid"], e["tid"]), []).append((a, a + round(float(e["dur"]) * 1000), e["name"]))
    for spans in rows.values():
        stack = []
        for a, z, name in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1][0] <= a:
                stack.pop()
            if stack and z > stack[-1][0] + 2:  # µs with 3 decimals near 2^52 ns: each of ts, dur off by 1 ns
                raise AssertionError(f"{name} at {a} crosses {stack[-1][1]}")
            stack.append((z, name))
    return True


@pytest.mark.parametrize("seed", ["canonical", 1])
def test_version_2_shows_the_op_tree_a_real_eager_zero2_trace_has(seed):
    """Version 2 was flat (one cpu_op per launch: 1.01 ops per launch, no Input Dims, no
    sequence numbers). Now each launch sits in its op tree (aten::linear > aten::matmul >
    aten::mm beside the views that launch nothing; backward's evaluate_function > MmBackward0 >
    two aten::mm), numbered as torch.profiler numbers it, with record_shapes; the skinny GEMM's
    aten::mm shows its shape; the autograd thread has each weight's AccumulateGrad and the
    ZeRO-2 reduces' narrow views and c10d ops with their Input Dims."""
    ev = doc(seed)["traceEvents"]
    p, h = inst(seed).params, inst(seed).params.hidden
    ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    launches = [e for e in ev if e.get("name") == "cudaLaunchKernel"]
    assert 2.0 < len(ops) / len(launches) < 5.5  # real eager traces: 2.0-5.3
    assert sum("Input Dims" in e["args"] for e in ops) / len(ops) > 0.75  # record_shapes: 86% on a real one
    assert _nests(ev)
    rf = [e["args"]["Record function id"] for e in ev if e.get("ph") == "X" and e.get("cat") in ("cpu_op",
                                                                                                   "user_annotation")]
    assert len(set(rf)) == len(rf) and all("Ev Idx" in e["args"] for e in ops)
    # the launching op shares its External id with the launch; views never launch
    launching = {e["args"]["External id"] for e in launches}
    by_name = lambda n: [e for e in ops if e["name"] == n]  # noqa: E731
    for view in ("aten::t", "aten::transpose", "aten::as_strided", "aten::view", "aten::narrow", "aten::slice"):
        assert by_name(view) and not any(e["args"]["External id"] in launching for e in by_name(view))
    assert all(e["args"]["External id"] in launching for e in by_name("aten::mm"))
    # the skinny GEMM: the family's forward kernel, launched by an aten::mm whose Input Dims show M x K @ K x N
    kernel_of = {e["args"]["External id"]: e["name"] for e in ev if e.get("cat") == "kernel"}
    family = [e for e in by_name("aten::mm") if sg.config_of(kernel_of[e["args"]["External id"]])
              == sg.family_label(True) and sg.layout_of(kernel_of[e["args"]["External id"]]) == "tn"]
    assert family and all(e["args"]["Input Dims"] == [[p.seq, h], [h, h]] for e in family)
    # aten::linear > aten::matmul > aten::mm, on the main thread
    mm = family[0]
    holders = [e for e in ops if e["tid"] == mm["tid"] and float(e["ts"]) <= float(mm["ts"])
               and float(e["ts"]) + float(e["dur"]) >= float(mm["ts"]) + float(mm["dur"]) and e is not mm]
    assert [e["name"] for e in sorted(holders, key=lambda e: float(e["ts"]))][-2:] == ["aten::linear", "aten::matmul"]
    assert holders[-1]["args"]["Input Dims"][0] == [1, p.seq, h]
    # backward: the GEMM nodes, their sequence numbers taken from forward, joined by fwdbwd flows
    mmb = by_name(sg.EV + "MmBackward0")
    fwd_seq = {e["args"]["Sequence number"] for e in by_name("aten::linear")}
    assert mmb and all(e["args"]["Sequence number"] in fwd_seq for e in mmb)
    assert mmb[0]["tid"] != mm["tid"]
    assert sum(e.get("cat") == "fwdbwd" for e in ev) > 2 * len(mmb)
    # DeepSpeed's host ops on the autograd thread: each weight's AccumulateGrad, each reduce's slice
    grads = sum(k.param_elems > 0 for k in sg._Recipe(p, physics.GPUS[p.gpu], sg.model_v2(
        p.model_params_b, p.hidden)[1]).bwd)
    assert len(by_name(sg.EV + "torch::autograd::AccumulateGrad")) == grads * p.steps
    reduces = by_name("c10d::reduce_")
    assert len(by_name("aten::narrow")) == len(reduces)
    assert all(e["args"]["Input type"][0] == "TensorList" and e["tid"] == mmb[0]["tid"] for e in reduces)


@pytest.mark.parametrize("seed", ["canonical", 1])
def test_version_2_op_tree_moves_no_kernel(seed, monkeypatch):
    """The tree only adds ops within the CPU time each flat op had: with it off, every kernel
    (and copy) starts and lasts the same, and the flat build has one op per launch."""
    kernels = lambda d: [(e["name"], e["ts"], e["dur"]) for e in d["traceEvents"]  # noqa: E731
                         if e.get("cat") in ("kernel", "gpu_memcpy")]
    monkeypatch.setattr(sg, "OP_TREE", False)
    i = SCN.instance(seed)
    flat = json.loads(kineto.dumps(i.trace(0), i.trace_name(0)))
    assert kernels(flat) == kernels(doc(seed))
    ops = sum(e.get("cat") == "cpu_op" for e in flat["traceEvents"])
    assert ops / sum(e.get("name") == "cudaLaunchKernel" for e in flat["traceEvents"]) < 1.1


@pytest.mark.parametrize("seed", [35, 86, 121, 179])
def test_version_2_launch_delays_are_the_step_starts_of_a_gpu_bound_trace(seed):
    """Seeds whose launch-delay p90 (20-50 µs) the fidelity page marked: in this GPU-bound trace the
    only launches within 50 µs of their kernel are each micro-step's first layer (the GPU idles
    at the step boundary, then each kernel launched while the first GEMMs run waits behind them,
    up to their length); every later launch runs milliseconds ahead. That is the case's shape,
    not a host-timing tell (as for launch-bound and prefill), and the page says so."""
    from app.analysis import fidelity
    i = inst(seed)
    ev = doc(seed)["traceEvents"]
    calls = {e["args"]["correlation"]: e for e in ev if e.get("name") == "cudaLaunchKernel"}
    ks = sorted((e for e in ev if e.get("cat") == "kernel" and e["args"].get("correlation") in calls
                 and e["tid"] == 7), key=lambda e: float(e["ts"]))
    per_step = len(ks) // i.params.steps
    near = [j % per_step for j, k in enumerate(ks)
            if -5 <= float(k["ts"]) - float(calls[k["args"]["correlation"]]["ts"])
            - float(calls[k["args"]["correlation"]]["dur"]) <= 50]
    assert near and max(near) < 40  # the first layer (26 kernels after the embedding) and a little more
    rep = fidelity.report(i)
    assert rep["quantities"]["launch_delay_us"]["pathology"]
    assert "launch_delay_us" not in rep["tells"]


@pytest.mark.parametrize("seed", ["canonical", 1])
def test_version_2_busy_departs_from_the_seed_as_the_docstring_says(seed):
    """~90% busy, not the seed's 97%: the step-boundary hole, the back-to-back slivers and the
    waited-on tail of MEASURED_2's gaps (22% of them at 3-20 µs) add up to the idle time the key
    states; without the tail the step would be ~95% busy (module docstring)."""
    ev = doc(seed)["traceEvents"]
    steps = sorted(float(e["ts"]) for e in ev if e.get("name", "").startswith("ProfilerStep#"))
    ks = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in ev
                if e.get("cat") in ("kernel", "gpu_memcpy") and e["tid"] == 7)
    s, e = np.array([k[0] for k in ks]), np.array([k[1] for k in ks])
    inside = (s[1:] >= steps[0]) & (s[1:] < steps[-1])
    g = (s[1:] - e[:-1])[inside]
    span = steps[-1] - steps[0]
    hole, tight, waited = g[g > 100].sum(), g[(g >= 0) & (g < 2.5)].sum(), g[(g >= 2.5) & (g <= 100)].sum()
    busy = ob(seed, "gpu_busy_pct")
    assert 88 < busy < 95
    assert abs((hole + tight + waited) / span * 100 - (100 - busy)) < 1.5
    assert 0.18 < ((g >= 2.5) & (g <= 100)).mean() < 0.27 and 3 < waited / span * 100 < 6
    assert busy + waited / span * 100 > 94


def test_version_2_fixed_build_has_the_tree_too():
    """The trace after the fix (micro-batch 4) launches the same kernels inside the same trees,
    its GEMMs' Input Dims at 4 x seq tokens."""
    i = SCN.instance("canonical", fixed=True)
    ev = json.loads(kineto.dumps(i.trace(0), i.trace_name(0)))["traceEvents"]
    assert _nests(ev)
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    assert 2.0 < len(ops) / sum(e.get("name") == "cudaLaunchKernel" for e in ev) < 5.5
    m, h = 4 * i.params.seq, i.params.hidden
    assert any(e["name"] == "aten::mm" and e["args"]["Input Dims"] == [[m, h], [h, h]] for e in ops)
