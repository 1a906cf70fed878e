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


def _without_profiler_steps(sid, tmp_path: Path, mode: str) -> tuple[dict, float]:
    """The instance's trace with ProfilerStep# renamed to a hand-written annotation, or
    with every annotation gone, read back."""
    import json

    inst = scenarios.get(sid).instance("canonical")
    doc = json.loads(kineto.dumps(inst.trace(0)))
    if mode == "renamed":
        events = [dict(e, name=e["name"].replace("ProfilerStep#", "train_step ")) for e in doc["traceEvents"]]
    else:
        events = [e for e in doc["traceEvents"] if e.get("cat") not in ("user_annotation", "gpu_user_annotation")]
    path = tmp_path / f"{sid}.json"
    path.write_text(json.dumps(dict(doc, traceEvents=events)))
    return read.read(importer.load(path))["steps"], observation(inst.key, "step_ms")


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_steps_from_a_repeating_annotation(sid, tmp_path):
    st, step_ms = _without_profiler_steps(sid, tmp_path, "renamed")
    assert st["source"] == "annotation 'train_step'"
    assert st["period_ms"] == pytest.approx(step_ms, rel=0.02)


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_steps_from_the_kernel_sequence_alone(sid, tmp_path):
    """No annotations at all: the period of the compute stream's kernel sequence, or no
    steps (serving iterations change shape every time), never a wrong period."""
    st, step_ms = _without_profiler_steps(sid, tmp_path, "bare")
    if st["source"] is None:
        assert st["period_ms"] is None and sid == "prefill"
    else:
        assert st["source"] == "kernel-sequence period"
        assert st["period_ms"] == pytest.approx(step_ms, rel=0.02)


def test_an_amd_rocm_trace_reads_like_its_nvidia_twin(tmp_path):
    """ROCm Kineto files: GPU events on pid 2, stream 0, hip* runtime names, and the
    ProfilerStep# copies on the GPU track (kineto-format.md). Same read, same numbers."""
    import json

    inst = scenarios.get("dataloader").instance(6)
    doc = json.loads(kineto.dumps(inst.trace(0)))
    amd = []
    for e in doc["traceEvents"]:
        e = dict(e, args=dict(e.get("args", {})))
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") or (e.get("ph") == "M" and e.get("pid") == 0):
            e["pid"] = 2
            if "stream" in e["args"]:
                e["args"]["stream"] = e["tid"] = e["args"]["stream"] - 7  # compute stream 7 -> 0
        if e.get("cat") == "cuda_runtime":
            e["name"] = e["name"].replace("cudaLaunchKernel", "hipLaunchKernel").replace("cuda", "hip")
        amd.append(e)
        if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") == "user_annotation":
            amd.append(dict(e, cat="gpu_user_annotation", pid=2, tid=0, args={}))
    nvidia, rocm = tmp_path / "nv.json", tmp_path / "rocm.json"
    nvidia.write_text(json.dumps(doc))
    rocm.write_text(json.dumps(dict(doc, traceEvents=amd)))
    a, b = read.read(importer.load(nvidia)), read.read(importer.load(rocm))
    assert b["gaps"]["compute_stream"] == {"gpu": "2", "stream": 0}
    assert b["steps"]["count"] == a["steps"]["count"], "the GPU-side ProfilerStep# copies are not steps"
    for metric in ("step_ms", "compute_busy_ms", "compute_idle_ms", "kernels_per_step", "h2d_ms_per_step"):
        assert b["metrics"][metric] == pytest.approx(a["metrics"][metric], rel=1e-6), metric
    assert b["launch"]["launch_delay_us"] == pytest.approx(a["launch"]["launch_delay_us"], rel=1e-6)
