"""skinny-gemm's trace after the fix (issue 13 item 5): the same instance at micro-batch 4 (the
key's fix: M = 4 x seq, accumulation / 4, the same global batch), each kernel at the 4 x seq
time the key's expected step is computed from, so the fixed build's step per seq-token
equivalent is the step the key expects."""

from __future__ import annotations

import json

import pytest

import scenarios
from app.scenario import InstanceError, observation
from app.trace import kineto
from scenarios import skinny_gemm as sg

SCN = scenarios.get("skinny-gemm")


def test_version_1_has_no_fixed_build_and_version_2_does():
    with pytest.raises(InstanceError, match="skinny-gemm version 1 has no build with its fix applied"):
        SCN.instance("canonical", version=1, fixed=True)
    assert SCN.version in SCN.fixable


@pytest.mark.parametrize("seed", ["canonical", 1, 2, 3, 7])
def test_the_fixed_step_is_the_step_the_key_expects(seed):
    before, after = SCN.instance(seed), SCN.instance(seed, fixed=True)
    assert after.key == before.key and after.params == before.params
    fixed = after.fixed_key
    assert observation(fixed, "step_ms") == pytest.approx(observation(before.key, "expected_step_ms"), rel=0.03)
    assert observation(fixed, "microstep_ms") == pytest.approx(4 * observation(fixed, "step_ms"), rel=1e-3)
    assert observation(fixed, "step_ms") < observation(before.key, "step_ms") / 1.5
    assert observation(fixed, "grad_accum") == before.params.grad_accum // 4
    # comm is the same bytes per micro-step in a 4x longer micro-step: it hides better, not worse
    assert observation(fixed, "nccl_hidden_pct") >= observation(before.key, "nccl_hidden_pct")


@pytest.mark.parametrize("seed", ["canonical", 1])
def test_the_fixed_trace_runs_the_gemms_at_four_times_m(seed):
    """The fixed trace's GEMMs are M = 4 x seq under cuBLAS's large-tile Hopper kernel, and its
    top GEMM's grid covers 4x the rows; the unfixed one runs the 128x64 family at M = seq."""
    after = SCN.instance(seed, fixed=True)
    ev = json.loads(kineto.dumps(after.trace(0), after.trace_name(0)))["traceEvents"]
    gemms = [e for e in ev if e.get("cat") == "kernel" and "gemm" in e["name"]]
    assert gemms and {sg.config_of(e["name"]) for e in gemms} == {sg.config_of(sg.gemm_name(sg.WGRAD, "tn", True))}
    m = 4 * after.params.seq
    fwd_q = next(e for e in gemms if sg.layout_of(e["name"]) == "tn")
    assert fwd_q["args"]["grid"][1] == -(-m // 128)
    before = json.loads(kineto.dumps(SCN.instance(seed).trace(0)))["traceEvents"]
    assert any(sg.config_of(e["name"]) == sg.family_label(True) for e in before if e.get("cat") == "kernel")
    copies = [e for e in ev if e.get("cat") == "gpu_memcpy" and "HtoD" in e["name"]]
    assert copies and all(e["args"]["bytes"] == m * 16 for e in copies)  # 4x the int64 ids and labels
