"""The measurements, run on every scenario, agree with the trace they summarize."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import scenarios
from app import instances, physics, tools
from app.scenario import InstanceError, observation
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
    inst = instances.instance(sid, 0)  # the server's cache: one build per case, not one per tool
    try:
        out = tools.run(tid, inst)
    except tools.ToolNotApplicable as e:
        assert len(str(e)) > 20, "a tool that does not apply says why"
        return
    assert out.startswith("$ ") and len(out.splitlines()) > 3
    chart = tools.chart(tid, inst)
    assert chart is None or json.loads(json.dumps(chart))["kind"] in {"bars", "roofline", "scatter"}


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
@pytest.mark.parametrize("seed", ["canonical", 0, 7])
def test_the_decisive_measurement_applies(sid, seed):
    """The key's decisive tool runs on its own scenario, for every seed."""
    inst = scenarios.get(sid).instance(seed)
    assert inst.key["decisive_measurement"] in tools.TOOLS
    assert tools.run(inst.key["decisive_measurement"], inst).startswith("$ ")


# Where each tool makes physical sense; the rest say why not. A new scenario states its
# own row here, so offering a tool stays a deliberate, physical decision.
APPLIES = {
    "per-rank": {"ddp", "dataloader", "straggler", "skinny-gemm"},
    "synthetic-data": {"ddp", "dataloader", "straggler", "skinny-gemm"},
    "cuda-graph": {"launch-bound", "prefill"},
    "ddp-debug": {"ddp", "dataloader"},
    "nsys-processes": {"dataloader"},
    "request-log": {"prefill"},
    "itl-scatter": {"prefill"},
    "ncu": set(scenarios.REGISTRY),
    "gemm-microbench": set(scenarios.REGISTRY),
}


@pytest.mark.parametrize("tid", list(APPLIES))
def test_tools_apply_where_they_make_physical_sense(tid):
    applies = set()
    for sid in scenarios.REGISTRY:
        try:
            tools.run(tid, scenarios.get(sid).instance("canonical"))
            applies.add(sid)
        except tools.ToolNotApplicable:
            pass
    assert applies == APPLIES[tid]


def test_per_rank_agrees_with_the_read_of_every_rank_file(tmp_path):
    from app.analysis import read
    from app.trace import importer

    inst = scenarios.get("straggler").instance(5)
    traces = []
    for r in range(inst.ranks):
        kineto.save(inst.trace(r), tmp_path / f"rank{r}.json")
        traces.append(importer.load(tmp_path / f"rank{r}.json"))
    got = read.read_ranks(traces)
    chart = tools.chart("per-rank", inst)
    compute = next(s["values"] for s in chart["series"] if s["id"] == "compute_ms")
    assert compute == pytest.approx(got["rank_compute_ms"], rel=0.02)
    assert chart["slowest_rank"] == got["straggler_rank"] == observation(inst.key, "straggler_rank")
    assert chart["spread"] == pytest.approx(got["max_over_median"], rel=0.02)
    assert f"(slowest: rank {got['straggler_rank']})" in tools.run("per-rank", inst)


def test_per_rank_on_ddp_rejects_the_straggler_hypothesis():
    chart = tools.chart("per-rank", scenarios.get("ddp").instance(4))
    assert chart["spread"] < 1.02


@pytest.mark.parametrize("seed", ["canonical", 1, 9])
def test_ncu_on_the_skinny_gemm_reads_the_keys_figures(seed):
    inst = scenarios.get("skinny-gemm").instance(seed)
    out = tools.run("ncu", inst)
    ncu_text, notes = out.split("Trace Dojo notes")
    metric = {m.group(1).strip(): float(m.group(2).replace(",", ""))
              for m in re.finditer(r"^    (\S.*?)\s{2,}\S*\s+([\d,.]+)$", ncu_text, re.M)}
    assert metric["DRAM Throughput"] == pytest.approx(observation(inst.key, "dram_pct"), abs=0.1)
    assert metric["Compute (SM) Throughput"] == pytest.approx(observation(inst.key, "tensor_pct"), abs=0.1)
    # the rows ncu's Speed Of Light prints, and none it never prints (issue 13)
    assert {"L1/TEX Cache Throughput", "L2 Cache Throughput", "SM Active Cycles"} <= set(metric)
    assert not {"Problem Shape", "Ridge Point", "Minimum Bytes (each operand once)"} & set(metric)
    assert metric["SM Frequency"] == pytest.approx(inst.artifacts["gpus"][0]["sm_clock_mhz"] / 1e3, abs=0.01)
    assert "--clock-control none" in out.splitlines()[0]  # the clocks the trace ran at, not ncu's base lock
    ours = {m.group(1).strip(): float(m.group(2).replace(",", ""))
            for m in re.finditer(r"^    (\S.*?)\s{2,}\S*\s+([\d,.]+)$", notes, re.M)}
    assert ours["Arithmetic Intensity (ideal)"] == pytest.approx(observation(inst.key, "arithmetic_intensity"), rel=0.01)
    assert ours["Ridge Point"] == pytest.approx(observation(inst.key, "ridge_point"), rel=0.01)
    assert "memory-bound" in notes
    roof = tools.chart("ncu", inst)
    assert roof["points"][0]["ai"] < roof["ridge"]


@pytest.mark.parametrize("sid", ["ddp", "straggler"])
def test_ncu_on_a_big_gemm_is_compute_bound(sid):
    p = tools.chart("ncu", scenarios.get(sid).instance(2))
    assert p["points"][0]["ai"] > p["ridge"]


def test_ncu_takes_a_kernel_regex():
    inst = scenarios.get("skinny-gemm").instance("canonical")
    # version 2's Hopper names carry the layout mid-name (version 1: ampere_..._128x256_..._nt)
    assert "_nt_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas (" in \
        tools.run("ncu", inst, kernel="_nt_n_tilesize128x256")
    old = scenarios.get("skinny-gemm").instance("canonical", version=1)
    assert "128x256_ldg8_f2f_stages_64x3_nt (" in tools.run("ncu", old, kernel="128x256.*_nt")
    with pytest.raises(InstanceError, match="no profiled kernel matches"):
        tools.run("ncu", inst, kernel="^flash_attn_bwd")
    with pytest.raises(InstanceError, match="bad kernel regex"):
        tools.run("ncu", inst, kernel="sm90[")
    with pytest.raises(InstanceError, match="takes no option"):
        tools.run("per-rank", inst, kernel="x")


def test_ncu_uses_the_fp8_roof_for_an_fp8_gemm():
    inst = scenarios.get("prefill").instance("canonical")
    p = tools.chart("ncu", inst)
    assert p["peak_tflops"] == inst.artifacts["gpu"]["fp8_peak_tflops"]
    assert "Peak (FP8 tensor)" in tools.run("ncu", inst)


@pytest.mark.parametrize("seed", ["canonical", 2, 13])
def test_gemm_microbench(seed):
    skinny = scenarios.get("skinny-gemm").instance(seed)
    assert f"{observation(skinny.key, 'microbench_ratio'):.2f}x" in tools.run("gemm-microbench", skinny)
    # the throttled GPU's GEMMs run at its clock ratio; the healthy ones agree
    strag = scenarios.get("straggler").instance(seed)
    out = tools.run("gemm-microbench", strag)
    rank = int(observation(strag.key, "straggler_rank"))
    ratio = observation(strag.key, "sm_clock_mhz") / strag.artifacts["gpus"][rank]["max_sm_clock_mhz"]
    assert f"GPU {rank} reaches {ratio:.2f}x the median" in out
    # a batch-1 GEMV is memory-bound: 4x the rows cost almost nothing
    lb = tools.run("gemm-microbench", scenarios.get("launch-bound").instance(seed))
    assert float(re.search(r"\(GPU 0\): ([\d.]+)x", lb).group(1)) > 3.5


@pytest.mark.parametrize("seed", ["canonical", 4, 17])
def test_synthetic_data(seed):
    """The dataloader case drops to the model's own counterfactual; elsewhere the step
    barely moves, which is what rejects the input-pipeline hypothesis."""
    from app.tools.experiments import synthetic

    inst = scenarios.get("dataloader").instance(seed)
    got = synthetic(inst)
    model = inst.artifacts["experiments"]["synthetic_data"]
    assert got["step_ms_synthetic"] == pytest.approx(model["step_ms_synthetic"], rel=0.01)
    assert got["step_ms_before"] == pytest.approx(observation(inst.key, "step_ms"), rel=0.01)
    for sid in ("ddp", "straggler", "skinny-gemm"):
        r = synthetic(scenarios.get(sid).instance(seed))
        assert r["step_ms_synthetic"] > 0.98 * r["step_ms_before"], sid


@pytest.mark.parametrize("seed", ["canonical", 5, 12])
def test_cuda_graph(seed):
    from app.tools.experiments import graphed

    lb = scenarios.get("launch-bound").instance(seed)
    g = graphed(lb)
    assert g["eager_ms"] == pytest.approx(observation(lb.key, "step_ms"), rel=0.01)
    assert g["graphed_ms"] == pytest.approx(lb.artifacts["experiments"]["cuda_graph"]["token_ms_graphed"], rel=0.03)
    assert g["eager_ms"] / g["graphed_ms"] > 1.8
    # prefill: decode iterations already replay a graph (cudaGraphLaunch), and the stalls run eager either way
    pf = graphed(scenarios.get("prefill").instance(seed))
    assert pf["already_graphed"] == pf["captured"] > 0
    assert pf["eager_ms"] == pf["graphed_ms"]
    assert pf["longest_graphed_ms"] == pf["longest_eager_ms"]


def test_ddp_debug_shows_the_buckets_that_never_fired():
    inst = scenarios.get("ddp").instance("canonical")
    out = tools.run("ddp-debug", inst)
    n = int(observation(inst.key, "expected_buckets"))
    assert f"({n} buckets)" in out and "bucket_cap_bytes: 26214400" in out
    assert "per step on rank 0: " + ", ".join(["1"] * inst.params.steps) in out
    dl = scenarios.get("dataloader").instance(3)
    k = int(observation(dl.key, "nccl_kernels_per_step"))
    assert f"(the reducer has {k} buckets)" in tools.run("ddp-debug", dl)


@pytest.mark.parametrize("seed", ["canonical", 3, 8])
def test_itl_scatter_and_request_log_match_the_key(seed):
    from app.tools.serving import itl_samples

    inst = scenarios.get("prefill").instance(seed)
    s = itl_samples(inst)
    y = s["itl_ms"].tolist()
    assert physics.percentile(y, 50) == pytest.approx(observation(inst.key, "itl_p50_ms"), rel=0.01)
    assert physics.percentile(y, 99) == pytest.approx(observation(inst.key, "itl_p99_ms"), rel=0.01)
    above = s["itl_ms"] > observation(inst.key, "itl_threshold_ms")
    assert int(above.sum()) == observation(inst.key, "itl_samples_above_threshold")
    assert (s["prefill_tokens"][above] >= inst.params.long_prompt_tokens).all(), "every stall crosses a long prefill"
    assert s["itl_ms"][~above].max() == pytest.approx(observation(inst.key, "other_itl_max_ms"), rel=0.01)
    chart = tools.chart("itl-scatter", inst)
    assert len(chart["x"]) == len(chart["y"]) == len(y)
    log = tools.run("request-log", inst)
    p99 = float(re.search(r"P99 ITL \(ms\):\s+([\d.]+)", log).group(1))
    assert p99 == pytest.approx(observation(inst.key, "itl_p99_ms"), rel=0.01)
    long_ttft = [r["ttft_ms"] for r in inst.artifacts["request_log"] if r["long_prompt"] and r["ttft_ms"] is not None]
    assert sum(long_ttft) / len(long_ttft) == pytest.approx(observation(inst.key, "ttft_ms"), rel=0.01)


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


def test_tool_options_on_the_command_line():
    ncu = subprocess.run([sys.executable, "-m", "app", "tool", "skinny-gemm", "--canonical", "ncu", "--kernel",
                          "_nt_n_", "--json"], capture_output=True, text=True, timeout=120)
    doc = json.loads(ncu.stdout)
    assert ncu.returncode == 0 and doc["applicable"] and doc["chart"]["kind"] == "roofline"
    assert "_nt_n_" in doc["chart"]["kernel"]
    bad = subprocess.run([sys.executable, "-m", "app", "tool", "ddp", "--seed", "1", "ncu", "--kernel", "("],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "bad kernel regex" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    na = subprocess.run([sys.executable, "-m", "app", "tool", "launch-bound", "--seed", "1", "per-rank"],
                        capture_output=True, text=True, timeout=120)
    assert na.returncode == 0 and na.stdout.startswith("per-rank does not apply here: a single GPU")


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_ncu_prints_the_rows_ncu_prints_and_sets_ours_apart(sid):
    """Speed Of Light as ncu prints it (L1/TEX, L2, SM Active Cycles included), at the clocks the
    trace ran at (--clock-control none: ncu locks to base by default); the roofline arithmetic
    ncu only draws comes after, labelled as ours, never inside ncu's section."""
    inst = scenarios.get(sid).instance("canonical")
    out = tools.run("ncu", inst)
    assert "--clock-control none" in out.splitlines()[0]
    sol, ours = out.split("Trace Dojo notes", 1)
    rows = [m.group(1).strip() for m in re.finditer(r"^    (\S.*?)\s{2,}\S*\s+[\d,.]+$", sol, re.M)]
    assert rows == ["DRAM Frequency", "SM Frequency", "Elapsed Cycles", "Memory Throughput", "DRAM Throughput",
                    "Duration", "L1/TEX Cache Throughput", "L2 Cache Throughput", "SM Active Cycles",
                    "Compute (SM) Throughput"]
    assert "Ridge Point" in ours and "Problem Shape" in ours
    p = tools.kernels.profile(inst)
    assert p["memory_throughput_pct"] == max(p["dram_throughput_pct"], p["l2_throughput_pct"], p["l1tex_throughput_pct"])
    assert p["sm_frequency_ghz"] == round(inst.artifacts["gpus"][0]["sm_clock_mhz"] / 1e3, 2)
    assert 0 < p["sm_active_cycles"] < p["elapsed_cycles"]


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_ncu_sm_active_cycles_count_the_sms_a_grid_leaves_idle(sid):
    """SM Active Cycles is the mean over SMs: a grid of fewer blocks than SMs, or a last wave
    that fills only some, leaves the rest idle (one block per SM)."""
    p = tools.kernels.profile(scenarios.get(sid).instance("canonical"))
    sms = physics.GPUS[p["gpu"]].num_sms
    blocks = p["grid"][0] * p["grid"][1] * p["grid"][2]
    share = blocks / (-(-blocks // sms) * sms)
    assert p["sm_active_cycles"] / p["elapsed_cycles"] == pytest.approx(share * 0.985, rel=0.01)
