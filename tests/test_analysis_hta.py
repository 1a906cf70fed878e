"""Our HTA metrics equal Holistic Trace Analysis 0.5's on the same traces.

The fixture figures are the ones HTA 0.5 reports (issue 3); the generated traces are
compared live against HTA when its virtualenv exists (see tests/test_hta.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import scenarios
from app.analysis import hta
from app.trace import importer, kineto
from tests.test_hta import HTA_PYTHON

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kineto"
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"shared fixtures not found at {FIXTURES}")

# (idle %, compute %, non-compute %, kernel time µs, overlap %) as HTA 0.5 prints them.
HTA_FIGURES = {
    "hta_nccl_data_rank0.json.gz": (77.78, 17.26, 4.97, 435586, 14.31),
    "sampled_rank-0.json.gz": (53.56, 17.71, 28.74, 600058, 11.81),
    "sampled_rank-1.json.gz": (54.72, 22.57, 22.72, 600674, 20.05),
}


@needs_fixtures
@pytest.mark.parametrize("name", list(HTA_FIGURES))
def test_fixture_figures_match_hta(name):
    idle, compute, non_compute, kernel_us, overlap = HTA_FIGURES[name]
    tr = importer.load(FIXTURES / name)
    tb = hta.temporal_breakdown(tr)
    assert tb["idle_time_pctg"] == pytest.approx(idle, abs=0.1)
    assert tb["compute_time_pctg"] == pytest.approx(compute, abs=0.1)
    assert tb["non_compute_time_pctg"] == pytest.approx(non_compute, abs=0.1)
    assert tb["kernel_time_us"] == pytest.approx(kernel_us, abs=2)
    assert hta.comm_comp_overlap_pctg(tr) == pytest.approx(overlap, abs=0.1)


@needs_fixtures
def test_fixture_idle_breakdown_matches_hta():
    got = hta.idle_breakdown(importer.load(FIXTURES / "hta_nccl_data_rank0.json.gz"))
    assert got[7]["host_wait"] == pytest.approx(357247, abs=2)
    assert got[7]["kernel_wait"] == pytest.approx(2155, abs=2)
    assert got[40]["host_wait"] == pytest.approx(381499, abs=2)


def assert_idle_equal(ours: dict, theirs: dict) -> None:
    """HTA lists only the categories it saw; a missing one is zero."""
    assert {str(s) for s in ours} == set(theirs)
    for stream, cats in ours.items():
        for cat, us in cats.items():
            assert us == pytest.approx(theirs[str(stream)].get(cat, 0.0), abs=2), (stream, cat)


@needs_fixtures
def test_no_comm_kernels_means_no_overlap_figure():
    tr = importer.load(FIXTURES / "tiny_triton_example.json.gz")
    assert hta.comm_comp_overlap_pctg(tr) is None


@pytest.mark.skipif(not HTA_PYTHON.exists(), reason=f"Holistic Trace Analysis not installed ({HTA_PYTHON} missing)")
@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_generated_traces_match_live_hta(sid, tmp_path):
    inst = scenarios.get(sid).instance(1)
    path = tmp_path / "rank-0.json.gz"
    kineto.save(inst.trace(0), path, inst.trace_name(0))
    out = subprocess.run([str(HTA_PYTHON), str(Path(__file__).with_name("hta_probe.py")), str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    t, o = theirs["temporal"][0], theirs["overlap"][0]
    tr = importer.load(path)
    ours = hta.temporal_breakdown(tr)
    for key in ("idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg"):
        assert ours[key] == pytest.approx(t[key], abs=0.1), key
    assert ours["kernel_time_us"] == pytest.approx(t["kernel_time(us)"], abs=2)
    overlap = hta.comm_comp_overlap_pctg(tr)
    if overlap is not None:
        assert overlap == pytest.approx(o["comp_comm_overlap_pctg"], abs=0.1)
    assert_idle_equal(hta.idle_breakdown(tr), theirs["idle"]["0"])


@needs_fixtures
@pytest.mark.skipif(not HTA_PYTHON.exists(), reason=f"Holistic Trace Analysis not installed ({HTA_PYTHON} missing)")
def test_sampled_fixture_pair_matches_live_hta(tmp_path):
    for rank in (0, 1):
        (tmp_path / f"sampled_rank-{rank}.json.gz").write_bytes((FIXTURES / f"sampled_rank-{rank}.json.gz").read_bytes())
    out = subprocess.run([str(HTA_PYTHON), str(Path(__file__).with_name("hta_probe.py")), str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    for rank in (0, 1):
        assert_idle_equal(hta.idle_breakdown(importer.load(FIXTURES / f"sampled_rank-{rank}.json.gz")),
                          theirs["idle"][str(rank)])
