"""A ROCm trace read as HTA 0.5 reads it (issue 14 item 8): an MI250's hipLaunchKernel writes
its HIP stream as text ("stream": "0x0"); HTA's int() fails on it, so the call is a CPU
event, the launch of its kernel. Our reader cast "0x0" to stream 0, took every launch for a
GPU kernel, found no kernel launched before the last ProfilerStep, and gave the block as
None of 0 µs. The trace is made by tests/rocm_trace.py; the figures below are HTA 0.5's on it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from app.analysis import hta
from app.trace import importer
from tests import rocm_trace
from tests.test_hta import HTA_PYTHON

# HTA 0.5's get_temporal_breakdown and get_idle_time_breakdown on rocm_trace.trace()
HTA_TEMPORAL = {"idle_time_pctg": 25.49, "compute_time_pctg": 73.63, "non_compute_time_pctg": 0.88,
                "kernel_time_us": 8182.0}
HTA_IDLE = {0: {"host_wait": 1890.0, "kernel_wait": 196.0, "other": 0.0}}


@pytest.fixture(scope="module")
def rocm():
    return importer.load(rocm_trace.dumps())


def test_the_rocm_trace_is_shaped_as_the_real_one():
    doc = rocm_trace.trace()
    assert doc["deviceProperties"][0]["name"].startswith("AMD Instinct MI250")
    ev = doc["traceEvents"]
    steps = [e for e in ev if e.get("name", "").startswith("ProfilerStep#")]
    assert len(steps) > 2 and steps[-1]["dur"] == 49.0
    kernels = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy")]
    assert {(e["pid"], e["args"]["stream"]) for e in kernels} == {(2, 0)}
    assert {e["args"]["stream"] for e in ev if e.get("cat") == "cuda_runtime"} == {"0x0"}


def test_a_rocm_trace_gets_htas_block(rocm):
    got = hta.temporal_breakdown(rocm)
    assert {k: got[k] for k in HTA_TEMPORAL} == HTA_TEMPORAL
    assert hta.idle_breakdown(rocm) == HTA_IDLE
    assert hta.comm_comp_overlap_pctg(rocm) is None  # no RCCL kernels


@pytest.mark.parametrize("raw, stream", [
    ('"0x0"', -1), ('"0x7f3a2c000d10"', -1), ('"7.0"', -1), ('"stream 7"', -1), ('" 7 "', 7), ('"-3"', -3),
    ("7", 7), ("7.9", 7), ("0", 0),
])
def test_a_stream_is_what_pythons_int_makes_of_it(raw, stream):
    doc = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 2, "tid": 0, "ts": 10, "dur": 5,
         "args": {"stream": json.loads(raw), "correlation": 1}}]}
    tr = importer.load(json.dumps(doc).encode())
    got = tr.con.execute(f"SELECT COALESCE({hta.STREAM_SQL}, -1) FROM events").fetchone()[0]
    assert got == stream


@pytest.mark.skipif(not HTA_PYTHON.exists(), reason=f"Holistic Trace Analysis not installed ({HTA_PYTHON} missing)")
def test_the_rocm_figures_are_live_htas(tmp_path, rocm):
    (tmp_path / "rank-0.json").write_bytes(rocm_trace.dumps())
    out = subprocess.run([str(HTA_PYTHON), str(Path(__file__).with_name("hta_probe.py")), str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    t = theirs["temporal"][0]
    assert {k: t[k] for k in HTA_TEMPORAL if k != "kernel_time_us"} == {
        k: v for k, v in HTA_TEMPORAL.items() if k != "kernel_time_us"}
    assert t["kernel_time(us)"] == HTA_TEMPORAL["kernel_time_us"]
    assert {int(s): v for s, v in theirs["idle"]["0"].items()} == HTA_IDLE
    ours = hta.temporal_breakdown(rocm)
    for key in ("idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg"):
        assert ours[key] == t[key], key
