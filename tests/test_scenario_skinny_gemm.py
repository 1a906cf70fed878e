"""Scenario-specific checks for case 6 (skinny-gemm), beyond the registry-driven ones.

They read the exported trace the way a candidate would (kernel rows summed by config,
NCCL overlap, launch lead) and check that the Nsight Compute section and the fix
arithmetic close on the same numbers the key states.
"""

from __future__ import annotations

import functools
import json
import math

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
    """Sum compute-stream kernel time per cuBLAS config (name without the layout suffix): the
    128x64 family is the top config and matches the key's share."""
    per: dict[str, float] = {}
    total = 0.0
    for e in doc(seed)["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and e["tid"] == 7:
            name = e["name"]
            cfg = name[:-3] if name.startswith("ampere_bf16") else name
            per[cfg] = per.get(cfg, 0.0) + float(e["dur"])
            total += float(e["dur"])
    top = max(per, key=per.get)
    assert top == sg.FAMILY.rstrip("_")
    assert close(per[top] / total * 100, ob(seed, "top_kernel_share_pct"), 0.01)


@pytest.mark.parametrize("seed", SEEDS)
def test_comm_is_bucketed_and_hidden_and_cpu_runs_ahead(seed):
    ev = doc(seed)["traceEvents"]
    nccl = [e for e in ev if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_ReduceScatter")]
    steps = inst(seed).params.steps
    assert len(nccl) == steps * ob(seed, "nccl_kernels_per_step") and ob(seed, "nccl_kernels_per_step") >= 10
    assert all(e["tid"] != 7 for e in nccl)
    assert ob(seed, "nccl_hidden_pct") > 90
    assert ob(seed, "nccl_ms_per_step") < ob(seed, "step_ms")
    assert ob(seed, "launch_lead_ms") > 1.0
    assert ob(seed, "gpu_busy_pct") > 92


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
    assert 29 < ob("canonical", "model_params_b") < 31  # the seed's 13B cannot fill 210 ms at its ncu read
    assert 20 < ob("canonical", "mfu_pct") < 25  # not the seed's 33%
    assert 1.9 < ob("canonical", "speedup") < 2.2  # not the seed's 1.45
    assert ob("canonical", "top_kernel_share_pct") > ob("canonical", "other_share_pct")


def test_params_keep_the_pathology():
    with pytest.raises(InstanceError, match="memory-bound"):
        SCN.instance("canonical", {"seq": "384"})
    with pytest.raises(InstanceError, match="accumulation window"):
        SCN.instance("canonical", {"steps": "600", "grad_accum": "512"})
    with pytest.raises(InstanceError):
        SCN.instance("canonical", {"gpu": "A100"})
    for seed in range(20):
        p = SCN.params_for(seed)
        assert p.hidden == next(h for top, h in sg.HIDDEN_BANDS if p.model_params_b <= top)
        assert p.seq in sg.SEQ_DRAW
