"""The trace after the fix (issue 13 item 5): the same instance built with its key's fix applied,
from the same physics, so that its step is the step the key expects; and a clear answer where a
scenario's version builds no such trace."""

from __future__ import annotations

import json

import pytest

import scenarios
from app.scenario import InstanceError, observation

FIXABLE = [(sid, scn) for sid, scn in scenarios.REGISTRY.items() if scn.version in scn.fixable]
# Where the step is not what the fix changes: prefill's step is the median scheduler iteration (a
# decode batch, before the fix and after), its expected step the mixed iteration; its serving
# variant (ITL p99, mixed iteration, TTFT against the key) is tests/test_fixed_prefill.py.
SERVING = {"prefill"}


def test_a_version_without_a_fixed_build_says_which_have_one():
    scn = scenarios.get("ddp")
    with pytest.raises(InstanceError, match="ddp version 1 has no build with its fix applied"):
        scn.instance("canonical", version=1, fixed=True)


def test_every_fixable_scenario_has_a_check_of_its_fix():
    assert SERVING <= {sid for sid, _ in FIXABLE}  # the serving variant checks what it claims to


@pytest.mark.parametrize("sid", [sid for sid, _ in FIXABLE if sid not in SERVING])
@pytest.mark.parametrize("seed", ["canonical", 1, 2, 3])
def test_the_fixed_step_is_the_step_the_key_expects(sid, seed):
    scn = scenarios.get(sid)
    after = scn.instance(seed, fixed=True)
    before = scn.instance(seed)
    assert after.key == before.key  # the instance's key, whichever trace is shown
    assert after.params == before.params
    fixed_step = observation(after.fixed_key, "step_ms")
    assert fixed_step == pytest.approx(observation(before.key, "expected_step_ms"), rel=0.03)
    assert fixed_step < observation(before.key, "step_ms")


def test_the_explorer_shows_before_and_after(tmp_path_factory):
    from fastapi.testclient import TestClient

    from tests.conftest import sqlite_app

    with TestClient(sqlite_app(tmp_path_factory, "fixed")) as client:
        after = client.get("/scenarios/launch-bound/canonical?fixed=1")
        assert after.status_code == 200 and "After the fix:" in after.text and "the trace as it is" in after.text
        before = client.get("/scenarios/launch-bound/canonical")
        assert "the same instance after the fix" in before.text
        assert client.get("/api/scenarios/launch-bound/canonical/timeline.bin?fixed=1").status_code == 200
        trace = client.get("/scenarios/launch-bound/canonical/trace.json?fixed=1").json()
        assert sum(e.get("name") == "cudaGraphLaunch" for e in trace["traceEvents"]) > 0
        assert client.get("/scenarios/launch-bound/canonical?fixed=yes").status_code == 400
        no = client.get("/scenarios/ddp/canonical?fixed=1&version=1")
        assert no.status_code == 400 and "no build with its fix applied" in no.text


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_the_trace_after_the_fix_shows_its_steps(tmp_path_factory, sid):
    """The viewer draws step bands and step names from the build's steps; four fixed builds
    carried none, so the trace after the fix opened with no steps on the ruler. Where a build
    does not list them, they are its ProfilerStep# spans, as the reference read finds them."""
    from fastapi.testclient import TestClient

    from tests.conftest import sqlite_app

    with TestClient(sqlite_app(tmp_path_factory, f"fixed-steps-{sid}")) as client:
        body = client.get(f"/api/scenarios/{sid}/canonical/timeline.bin?fixed=1").content
    n = int.from_bytes(body[:4], "little")
    steps = json.loads(body[4:4 + n])["steps"]
    assert len(steps) >= 2
    assert all(0 <= s["start_ns"] < s["end_ns"] for s in steps)
    assert all(a["end_ns"] <= b["start_ns"] for a, b in zip(steps, steps[1:]))
