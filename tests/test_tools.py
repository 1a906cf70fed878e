"""The measurements, run on every scenario, agree with the trace they summarize."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import scenarios
from app import tools
from app.scenario import observation
from app.trace import kineto

CASES = [(sid, tid) for sid in scenarios.REGISTRY for tid in tools.TOOLS]


def rows(output: str) -> list[list[str]]:
    """The data rows of an nsys-style table: lines under the dashed rule, split on 2+ spaces."""
    lines = output.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("--------")) + 1
    out = []
    for ln in lines[start:]:
        if not ln.strip() or ln.strip().startswith("("):
            break
        out.append(re.split(r"\s{2,}", ln.strip()))
    return out


@pytest.mark.parametrize("sid,tid", CASES)
def test_every_tool_runs_or_says_why(sid, tid):
    inst = scenarios.get(sid).instance(0)
    try:
        out = tools.run(tid, inst)
    except tools.ToolNotApplicable as e:
        assert str(e)
        return
    assert out.startswith("$ ") and len(out.splitlines()) > 3


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_kern_sum_totals_are_the_traces_kernels(sid):
    inst = scenarios.get(sid).instance(0)
    doc = json.loads(kineto.dumps(inst.trace(0)))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    table = rows(tools.run("nsys-kern-sum", inst))
    by_name: dict[str, float] = {}
    for e in kernels:
        by_name[e["name"]] = by_name.get(e["name"], 0.0) + e["dur"] * 1000
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:len(table)]
    for (name, total_ns), row in zip(top, table):
        assert row[-1] == name
        assert int(row[1].replace(",", "")) == pytest.approx(total_ns, abs=len(kernels))
    assert sum(float(r[0]) for r in table) <= 100 + 0.05 * len(table)  # each share rounded to 0.1


def test_ddp_kern_sum_shows_one_allreduce_per_step():
    inst = scenarios.get("ddp").instance("canonical")
    nccl = [r for r in rows(tools.run("nsys-kern-sum", inst)) if r[-1].startswith("ncclDevKernel_AllReduce")]
    assert len(nccl) == 1 and int(nccl[0][2]) == inst.params.steps
    assert float(nccl[0][3].replace(",", "")) / 1e6 == pytest.approx(observation(inst.key, "allreduce_ms"), rel=0.02)


def test_launch_bound_api_sum_counts_one_launch_per_kernel():
    inst = scenarios.get("launch-bound").instance("canonical")
    launch = next(r for r in rows(tools.run("nsys-api-sum", inst)) if r[-1] == "cudaLaunchKernel")
    assert int(launch[2].replace(",", "")) == pytest.approx(
        observation(inst.key, "kernels_per_step") * inst.params.tokens, rel=0.01)
    assert float(launch[0]) > 90, "launch calls are nearly all of the API time"


def test_straggler_clocks_name_the_throttled_gpu():
    inst = scenarios.get("straggler").instance("canonical")
    rank = int(observation(inst.key, "straggler_rank"))
    smi = tools.run("nvidia-smi", inst)
    block = smi.split("GPU 00000000:")[rank + 1]
    assert re.search(r"SW Thermal Slowdown\s+: Active", block)
    assert f"SM                                : {int(observation(inst.key, 'sm_clock_mhz'))} MHz" in block
    assert smi.count(": Active") == 1, "only the straggler throttles"
    dcgm_row = next(ln for ln in tools.run("dcgm", inst).splitlines() if ln.startswith(f"GPU {rank} "))
    assert dcgm_row.split()[4] == str(0x20)


def test_tool_command_line():
    out = subprocess.run([sys.executable, "-m", "app", "tool", "ddp", "--seed", "2", "nvidia-smi"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Clocks Event Reasons" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "app", "tool", "ddp", "nsys-everything"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "valid tools: nsys-kern-sum" in bad.stderr
