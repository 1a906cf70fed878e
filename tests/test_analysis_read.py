"""The reference read recovers every scenario's key from the exported trace alone.

Registry-driven: a scenario's `reader_checks` name the metrics (shared with the
independent test reader) and the key observations they must equal within 2%.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import scenarios
from app.analysis import read
from app.scenario import observation
from app.trace import importer, kineto

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kineto"
CASES = [(sid, seed) for sid in scenarios.REGISTRY for seed in ("canonical", 3, 11)]


def analyze(sid: str, seed, tmp_path: Path) -> dict:
    inst = scenarios.get(sid).instance(seed)
    traces = []
    for rank in range(inst.ranks):
        path = tmp_path / f"rank-{rank}.json.gz"
        kineto.save(inst.trace(rank), path)
        traces.append(importer.load(path))
    return read.read_ranks(traces) if len(traces) > 1 else read.read(traces[0])


@pytest.mark.parametrize("sid,seed", CASES)
def test_read_recovers_the_key(sid, seed, tmp_path):
    got = analyze(sid, seed, tmp_path)["metrics"]
    key = scenarios.get(sid).instance(seed).key
    for metric, oid in scenarios.get(sid).reader_checks.items():
        assert got[metric] == pytest.approx(observation(key, oid), rel=0.02), f"{metric} vs {oid}"


def test_ddp_gap_is_owned_by_the_nccl_stream(tmp_path):
    r = analyze("ddp", "canonical", tmp_path)
    meanwhile = r["gaps"]["busy_meanwhile"]
    window = meanwhile["window_ms"]
    nccl = max(meanwhile["gpu_streams_ms"].values())
    assert nccl == pytest.approx(window, rel=0.01), "the NCCL stream is busy for the whole hole"
    assert r["overlap"]["comm_kernels_per_step"] == 1 and r["overlap"]["overlapped_pct"] < 5


def test_dataloader_gap_shows_the_main_thread_waiting(tmp_path):
    cpu = analyze("dataloader", "canonical", tmp_path)["gaps"]["busy_meanwhile"]["cpu"]
    assert any("DataLoader" in c["slice"] for c in cpu)


def test_launch_bound_verdict(tmp_path):
    assert analyze("launch-bound", "canonical", tmp_path)["launch"]["launch_bound"] is True
    assert analyze("ddp", "canonical", tmp_path)["launch"]["launch_bound"] is False


def test_straggler_is_the_late_arrival(tmp_path):
    r = analyze("straggler", "canonical", tmp_path)
    key = scenarios.get("straggler").instance("canonical").key
    assert r["straggler_rank"] == observation(key, "straggler_rank")
    assert r["max_over_median"] > 1.3


@pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"shared fixtures not found at {FIXTURES}")
def test_real_trace_reads_in_discipline_order():
    r = read.read(importer.load(FIXTURES / "hta_nccl_data_rank0.json.gz"))
    assert list(r)[2:7] == ["steps", "gaps", "overlap", "kernels", "launch"]
    assert r["steps"]["count"] >= 2 and r["steps"]["period_ms"] > 0
    assert r["kernels"]["top"][0]["time_pct"] > 0


@pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"shared fixtures not found at {FIXTURES}")
def test_sampled_pair_names_rank_1_as_the_straggler():
    """HTA's straggler detector names rank 1 of this pair; so does our late-arrival count."""
    traces = [importer.load(FIXTURES / f"sampled_rank-{r}.json.gz") for r in (0, 1)]
    r = read.read_ranks(traces)
    assert r["straggler_rank"] == 1 and r["rank_ids"] == [0, 1]
