"""straggler version 2's trace after the fix (as tests/test_fixed.py, on every rank): the same
instance with rank N's clock restored; its step is within 3% of what the key expected, every
rank's trace shows it, and the straggler no longer computes slower than its peers."""

from __future__ import annotations

import functools

import pytest

import scenarios
from app.scenario import observation
from tests import kineto_reader
from app.trace import kineto
import json

SID = "straggler"


@functools.lru_cache(maxsize=None)
def pair(seed):
    scn = scenarios.get(SID)
    return scn.instance(seed), scn.instance(seed, fixed=True)


@pytest.mark.parametrize("seed", ["canonical", 1])
def test_every_rank_of_the_fixed_build_runs_the_expected_step(seed):
    before, after = pair(seed)
    assert after.key == before.key and after.ranks == before.ranks
    docs = [json.loads(kineto.dumps(after.trace(r), after.trace_name(r))) for r in range(after.ranks)]
    m = kineto_reader.measure_ranks(docs)
    expected = observation(before.key, "expected_step_ms")
    for r in m["ranks"]:
        assert r["mean_step_ms"] == pytest.approx(expected, rel=0.03)
    s = int(observation(before.key, "straggler_rank"))
    healthy = m["rank_compute_ms"][s] / m["median_rank_compute_ms"]
    assert healthy < 1.03, "the straggler computes at its peers' pace once its clock is back"
    assert observation(after.fixed_key, "step_ms") < observation(before.key, "step_ms")


def test_version_1_has_no_fixed_build():
    from app.scenario import InstanceError
    with pytest.raises(InstanceError, match="straggler version 1 has no build with its fix applied"):
        scenarios.get(SID).instance("canonical", version=1, fixed=True)
