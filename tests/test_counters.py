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


def test_an_uploads_memory_events_become_memory_in_use():
    """torch.profiler(profile_memory=True) writes `[memory]` instants: Total Allocated after each
    allocation or free, per device. The viewer's counter is that series, in MiB."""
    from app.trace import importer
    from app.web import timeline

    mib = 2**20
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1000.0, "dur": 50.0,
               "args": {"stream": 7, "correlation": 1}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 990.0, "dur": 80.0}]
    allocated = [(995.0, 0, 64 * mib), (1010.0, 0, 192 * mib), (1060.0, 0, 64 * mib), (1000.0, -1, 3 * mib)]
    events += [{"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                "args": {"Device Type": 1 if dev >= 0 else 0, "Device Id": dev, "Addr": 1, "Bytes": 1,
                         "Total Allocated": b, "Total Reserved": b}} for ts, dev, b in allocated]
    tr = importer.load(json.dumps({"traceEvents": events}).encode())
    s = timeline.from_import(tr)
    body = timeline.encode(s, "t", [], timeline.memory_from_import(tr))
    h = json.loads(body[4:4 + int.from_bytes(body[:4], "little")])
    c = by_name(h)
    gpu = c["memory allocated · GPU 0"]
    assert gpu["unit"] == "MiB" and gpu["values"] == [64.0, 192.0, 64.0]
    assert gpu["ts_ns"] == [pytest.approx(5_000.0), pytest.approx(20_000.0), pytest.approx(70_000.0)]  # from 990 µs
    assert c["memory allocated · CPU"]["values"] == [3.0]
    assert [x["name"] for x in h["counters"]][0].endswith("GPU 0")  # GPUs first
