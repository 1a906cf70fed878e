"""Counter tracks: computed from the scenario's physics, carried in the timeline's header (never
in the Kineto export, whose bytes tests/test_versions.py pins), and equal to that physics."""

from __future__ import annotations

import gzip
import json

import pytest

import scenarios
from app import instances
from app.scenario import observation
from app.web import instances as served


def header(inst, rank) -> dict:
    body = gzip.decompress(served.timeline_body(inst, rank, "test"))
    n = int.from_bytes(body[:4], "little")
    return json.loads(body[4:4 + n])


def by_name(h: dict) -> dict:
    return {c["name"]: c for c in h["counters"]}


def test_the_throttled_ranks_clock_reads_the_scenarios_throttled_mhz():
    inst = instances.instance("straggler", "canonical")
    s = int(observation(inst.key, "straggler_rank"))
    slow, healthy = observation(inst.key, "sm_clock_mhz"), observation(inst.key, "max_sm_clock_mhz")
    for r in range(inst.ranks):
        c = by_name(header(inst, r))
        assert set(c["SM clock"]["values"]) == {slow if r == s else healthy}
        assert c["SM clock"]["unit"] == "MHz" and c["power"]["unit"] == "W"
        assert set(c["power"]["values"]) == {inst.artifacts["gpus"][r]["power_w"]}
    assert "Counters" in header(inst, "all")["collapsed"] and "Counters" not in header(inst, 0)["collapsed"]
    stacked = by_name(header(inst, "all"))
    assert set(stacked[f"rank {s} · SM clock"]["values"]) == {slow}
    assert len(stacked) == 2 * inst.ranks


def test_counters_span_the_trace_on_its_clock():
    inst = instances.instance("straggler", 1)
    h = header(inst, 0)
    t = inst.trace(0)
    for c in h["counters"]:
        assert c["ts_ns"][0] == pytest.approx(0) and len(c["ts_ns"]) == len(c["values"])
        assert c["ts_ns"][-1] == pytest.approx(float((t.ts_ns + t.dur_ns).max() - t.ts_ns.min()))


def test_prefill_counts_the_queue_and_the_decode_batch_from_its_simulation():
    inst = instances.instance("prefill", "canonical")
    c = by_name(header(inst, 0))
    its = inst.artifacts["iterations"]
    assert c["decode batch"]["values"] == [float(it["decode_tokens"]) for it in its]
    # a whole prefill's iteration decodes nothing: the stall the case is about
    assert 0.0 in c["decode batch"]["values"]
    # requests waiting at each sample: arrived in the window by then, first token not yet out
    arrived = [r for r in inst.artifacts["request_log"] if r["arrival_ms"] >= 0]
    t0_ns = inst.artifacts["steps"][0]["start_us"] * 1e3
    h = header(inst, 0)
    for t_rel, v in zip(c["requests waiting"]["ts_ns"], c["requests waiting"]["values"]):
        t_ms = (t_rel + h["t0_ns"] - t0_ns) / 1e6
        want = sum(r["arrival_ms"] <= t_ms + 1e-6 < r["token_times_ms"][0] for r in arrived)
        assert v == want, t_ms
    assert max(c["requests waiting"]["values"]) >= 1


@pytest.mark.parametrize("sid", [s for s in scenarios.REGISTRY if scenarios.get(s).counters is None])
def test_a_scenario_without_counters_has_none(sid):
    inst = instances.instance(sid, "canonical")
    assert header(inst, 0)["counters"] == []
