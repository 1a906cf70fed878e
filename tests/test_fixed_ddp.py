"""ddp's trace after the fix (issue 13 item 5): the same instance with DDP's bucketed
all-reduces overlapped under backward, its step the step the key expects (test_fixed.py's
pattern), and the overlap visible where a reader looks for it."""

from __future__ import annotations

import pytest

import scenarios
from app.scenario import InstanceError, observation
from app.trace.builder import Kind

DDP = scenarios.get("ddp")


@pytest.mark.parametrize("seed", ["canonical", 1, 2, 3, 11])
def test_the_fixed_step_is_the_step_the_key_expects(seed):
    before = DDP.instance(seed)
    after = DDP.instance(seed, fixed=True)
    assert after.key == before.key and after.params == before.params
    fk = after.fixed_key
    assert observation(fk, "step_ms") == pytest.approx(observation(before.key, "expected_step_ms"), rel=0.03)
    assert observation(fk, "step_ms") < observation(before.key, "step_ms")
    # one all-reduce per bucket, as many as the key says DDP fires, where the unfixed trace has one
    assert observation(fk, "nccl_kernels_per_step") == observation(before.key, "expected_buckets")
    assert observation(fk, "exposed_comm_ms") == pytest.approx(observation(before.key, "exposed_comm_ms"),
                                                               abs=0.03 * observation(fk, "step_ms"))


def test_the_buckets_run_under_backward_launched_by_the_autograd_thread():
    inst = DDP.instance("canonical", fixed=True)
    tr = inst.trace(0)
    names = [tr.names[i] for i in tr.name]
    nccl = [j for j, n in enumerate(names) if n.startswith("ncclDevKernel_AllReduce") and tr.kind[j] == Kind.KERNEL]
    compute = [j for j in range(len(names)) if tr.kind[j] == Kind.KERNEL and tr.tid[j] == 7]
    first_nccl = min(tr.ts_ns[j] for j in nccl)
    last_compute_of_step = max(tr.ts_ns[j] for j in compute if tr.ts_ns[j] < first_nccl + 100e6)
    assert last_compute_of_step > first_nccl  # compute keeps running while buckets reduce
    c10d = [j for j, n in enumerate(names) if n == "c10d::allreduce_"]
    assert {int(tr.tid[j]) for j in c10d} == {int(tr.pid[c10d[0]]) + 37}  # the autograd thread's hooks


def test_older_versions_have_no_fixed_build():
    for v in (1, 2):
        with pytest.raises(InstanceError, match=f"ddp version {v} has no build with its fix applied"):
            DDP.instance("canonical", version=v, fixed=True)


def test_the_fixed_trace_is_valid_kineto_with_nothing_crossing():
    """The hooks' c10d rows sit in the autograd thread's time between backward ops, never
    across them; every NCCL kernel has its launch (test_scenarios' checks, on the fixed trace)."""
    import json

    from app.trace import kineto
    from tests.test_scenarios import check_no_overlap_or_negative_slices, check_valid_kineto

    inst = DDP.instance("canonical", fixed=True)
    ds = [json.loads(kineto.dumps(inst.trace(0), inst.trace_name(0)))]
    check_valid_kineto("ddp", "canonical", ds)
    check_no_overlap_or_negative_slices(ds)
