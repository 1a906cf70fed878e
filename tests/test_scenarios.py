"""Registry-driven tests: every scenario, its canonical instance and seeds 0 to 19 (its
exports read back on the canonical and seeds 0 to 7).

A new scenario file is tested here without new test code: it declares its seed
headlines and which reader metrics its key must match, and the checks below apply.
"""

from __future__ import annotations

import functools
import json
import math

import orjson
import pytest

import scenarios
from app import physics
from app.scenario import COMMON_OBSERVATIONS, observation
from app.trace import kineto
from tests import kineto_reader

SEEDS = ["canonical"] + list(range(20))
IDS = list(scenarios.REGISTRY)
CASES = [(s, seed) for s in IDS for seed in SEEDS]
# Exporting every rank and reading it back as JSON is most of this file's time (a straggler
# seed is 160 MB over eight ranks, 15 s). The export's validity is one code path whatever the
# numbers, and the physics of every seed is held by the key tests below over all 20 seeds and
# by each scenario's 200-seed plan test; so the independent read covers the canonical and
# eight seeds, not twenty (the suite was 31 min of a 15-min budget).
READ_BACK = [(s, seed) for s in IDS for seed in ["canonical"] + list(range(8))]


@functools.lru_cache(maxsize=None)
def key(sid: str, seed) -> dict:
    """Keys are small and several tests read them: keep every one."""
    return scenarios.get(sid).instance(seed).key


def docs(sid: str, seed) -> list[dict]:
    """Every rank's export, parsed. Not cached: 126 parsed traces would hold gigabytes,
    so each case is read back once, by test_trace_reads_back."""
    inst = scenarios.get(sid).instance(seed)
    # orjson: the same objects as json.loads, sooner (a straggler seed is 160 MB of JSON)
    return [orjson.loads(kineto.dumps(inst.trace(r), inst.trace_name(r))) for r in range(inst.ranks)]


def obs(sid, seed, oid):
    return observation(key(sid, seed), oid)


def close(a: float, b: float, rel: float) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


# -- the export is valid Kineto ---------------------------------------------------

@pytest.mark.parametrize("sid,seed", READ_BACK)
def test_trace_reads_back(sid, seed):
    """The export is valid Kineto, physically drawable, and an independent read matches the key."""
    ds = docs(sid, seed)
    check_valid_kineto(sid, seed, ds)
    check_no_overlap_or_negative_slices(ds)
    check_reader_agrees_with_key(sid, seed, ds)


def check_valid_kineto(sid, seed, ds):
    ranks = len(ds)
    for rank, doc in enumerate(ds):
        assert doc["schemaVersion"] == 1
        assert isinstance(doc["baseTimeNanoseconds"], int)
        props = doc["deviceProperties"]
        assert props and {"id", "name", "totalGlobalMem", "numSms", "computeMajor"} <= set(props[0])
        if ranks > 1 or "distributedInfo" in doc:
            info = doc["distributedInfo"]
            assert info["rank"] == rank and info["world_size"] >= ranks and info["backend"] == "nccl"
        ev = doc["traceEvents"]
        xs = [e for e in ev if e["ph"] == "X"]
        for e in xs:
            assert {"name", "cat", "pid", "tid", "ts", "dur"} <= set(e), e
            assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0, e
        meta = {(e["name"], e["pid"], e["tid"]) for e in ev if e["ph"] == "M"}
        names = {m[0] for m in meta}
        assert {"process_name", "process_labels", "thread_name"} <= names
        launches = {e["args"]["correlation"]: e for e in xs
                    if e["cat"] in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
        kernels = [e for e in xs if e["cat"] == "kernel"]
        assert kernels
        for k in kernels:
            a = k["args"]
            assert a["stream"] == k["tid"] and a["device"] == k["pid"]
            assert len(a["grid"]) == 3 and len(a["block"]) == 3
            launch = launches.get(a["correlation"])
            assert launch is not None and launch["name"] in ("cudaLaunchKernel", "cudaLaunchKernelExC",
                                                              "cudaGraphLaunch", "cuLaunchKernel")
            assert launch["ts"] <= k["ts"], "a kernel starts after its launch"
        # GPU rows and CPU rows are named, and every GPU stream has a thread_name.
        streams = {(k["pid"], k["tid"]) for k in kernels}
        for pid, tid in streams:
            assert ("thread_name", pid, tid) in meta
        flows_s = {e["id"] for e in ev if e["ph"] == "s" and e["cat"] == "ac2g"}
        flows_f = {e["id"] for e in ev if e["ph"] == "f" and e["cat"] == "ac2g"}
        assert flows_s == flows_f and {k["args"]["correlation"] for k in kernels} <= flows_f
        steps = kineto_reader.steps(doc)
        assert len(steps) >= 3, "at least three ProfilerStep# on the main thread"


def check_no_overlap_or_negative_slices(ds):
    """One stream runs one thing at a time; CPU slices on a thread nest, never cross."""
    for doc in ds:
        rows: dict[tuple, list] = {}
        for e in doc["traceEvents"]:
            if e["ph"] == "X" and isinstance(e["pid"], int):
                rows.setdefault((e["pid"], e["tid"], e["cat"] in kineto_reader.GPU_CATS), []).append(
                    (float(e["ts"]), float(e["ts"]) + float(e["dur"])))
        for (pid, tid, is_gpu), iv in rows.items():
            iv.sort(key=lambda x: (x[0], -x[1]))
            if is_gpu:
                for (s0, e0), (s1, _) in zip(iv, iv[1:]):
                    assert s1 >= e0 - 1e-3, f"overlap on GPU {pid} stream {tid} at {s1}"
            else:
                stack: list[float] = []
                for s, e in iv:
                    while stack and stack[-1] <= s + 1e-3:
                        stack.pop()
                    assert not stack or e <= stack[-1] + 1e-3, f"crossing slices on thread {tid} at {s}"
                    stack.append(e)


def check_reader_agrees_with_key(sid, seed, ds):
    scn = scenarios.get(sid)
    assert scn.reader_checks, f"{sid} declares no reader checks"
    measured = kineto_reader.measure_ranks(list(ds)) if len(ds) > 1 else kineto_reader.measure(ds[0])
    if len(ds) > 1:
        measured = {**measured["ranks"][0], **measured}
    for metric, oid in scn.reader_checks.items():
        expect = obs(sid, seed, oid)
        assert close(measured[metric], expect, 0.02), f"{metric}={measured[metric]:.4g} vs key {oid}={expect}"


# -- the key's arithmetic closes ------------------------------------------------

@pytest.mark.parametrize("sid,seed", CASES)
def test_key_arithmetic_closes(sid, seed):
    k = key(sid, seed)
    ids = {o["id"]: o["value"] for o in k["observations"]}
    for oid in COMMON_OBSERVATIONS + scenarios.get(sid).observations:
        assert oid in ids, f"key lacks {oid}"
    exp = k["expected"]
    assert close(exp["speedup"], exp["before_ms"] / exp["after_ms"], 0.005)
    assert close(ids["speedup"], ids["step_ms"] / ids["expected_step_ms"], 0.01) or sid == "prefill"
    if "gpu_busy_ms" in ids and "gpu_idle_ms" in ids:
        assert close(ids["gpu_busy_ms"] + ids["gpu_idle_ms"], ids["step_ms"], 0.01)
    if "mfu_pct" in ids and "expected_mfu_pct" in ids:
        assert close(ids["expected_mfu_pct"] / ids["mfu_pct"], ids["speedup"], 0.02)
    gpu = physics.GPUS[k["params"]["gpu"]] if "gpu" in k["params"] else None
    if "ridge_point" in ids and gpu:
        assert close(ids["ridge_point"], gpu.bf16_tflops / gpu.mem_tbps, 0.01)
    if {"gemm_m", "gemm_n", "gemm_k", "arithmetic_intensity"} <= set(ids):
        gm, gn, gk = ids["gemm_m"], ids["gemm_n"], ids["gemm_k"]
        assert close(ids["arithmetic_intensity"], physics.gemm_flops(gm, gn, gk) / physics.gemm_bytes(gm, gn, gk), 0.01)
    if {"busbw_gbps", "grad_gb", "allreduce_ms"} <= set(ids):
        world = k["params"]["world_size"]
        assert close(ids["busbw_gbps"], 2 * (world - 1) / world * ids["grad_gb"] / (ids["allreduce_ms"] / 1e3), 0.01)
    if {"kernels_per_step", "mean_kernel_us", "gpu_busy_ms"} <= set(ids):
        assert close(ids["kernels_per_step"] * ids["mean_kernel_us"] / 1e3, ids["gpu_busy_ms"], 0.02)
    if {"straggler_compute_ms", "peer_compute_ms", "wait_ms"} <= set(ids):
        assert close(ids["straggler_compute_ms"] - ids["peer_compute_ms"], ids["wait_ms"], 0.03)
    if {"wait_ms", "comm_ms", "allreduce_ms"} <= set(ids):
        assert close(ids["wait_ms"] + ids["comm_ms"], ids["allreduce_ms"], 0.03)
    for text in (k["model_answer"], k["brief"]):
        assert text and "{" not in text, "model answer and brief are filled with this instance's numbers"
    assert k["traps"] and all(t["why_wrong"] for t in k["traps"])
    assert k["decisive_measurement"]


@pytest.mark.parametrize("sid,seed", CASES)
def test_numbers_stay_physical(sid, seed):
    k = key(sid, seed)
    ids = {o["id"]: o["value"] for o in k["observations"]}
    for oid, v in ids.items():
        if isinstance(v, (int, float)):
            assert v >= 0, f"{oid} is negative"
            if oid.endswith("_pct"):
                assert v <= 100, f"{oid} over 100%"
    for oid in ("mfu_pct", "expected_mfu_pct"):
        if oid in ids:
            assert 0 < ids[oid] < 100
    if "busbw_gbps" in ids and "gpu" in k["params"]:
        assert ids["busbw_gbps"] < physics.GPUS[k["params"]["gpu"]].link_peak_gbps
    assert ids["expected_step_ms"] > 0 and ids["speedup"] > 1


# -- the seed's case, reproduced ------------------------------------------------

@pytest.mark.parametrize("sid", IDS)
def test_canonical_reproduces_seed_headlines(sid):
    scn = scenarios.get(sid)
    assert scn.seed_headlines, f"{sid} declares no seed headlines"
    for oid, seed_value in scn.seed_headlines.items():
        got = obs(sid, "canonical", oid)
        assert close(got, seed_value, 0.02), f"canonical {oid}={got}, seed says {seed_value}"


# -- reproducible, and different per seed -----------------------------------------

@pytest.mark.parametrize("sid", IDS)
def test_same_seed_same_bytes(sid):
    scn = scenarios.get(sid)
    for seed in ("canonical", 7):
        a, b = scn.instance(seed), scn.instance(seed)
        assert kineto.dumps(a.trace(0)) == kineto.dumps(b.trace(0))
        assert json.dumps(a.key) == json.dumps(b.key)


@pytest.mark.parametrize("sid", IDS)
def test_seeds_change_the_numbers_not_the_pathology(sid):
    steps = {obs(sid, s, "step_ms") for s in range(20)}
    assert len(steps) >= 18, "seeds give their own step times (two may meet at the key's rounding)"
    decisive = {key(sid, s)["decisive_measurement"] for s in SEEDS}
    assert len(decisive) == 1, "the pathology (and what settles it) is the same on every seed"


@pytest.mark.parametrize("sid", IDS)
def test_trace_scales_with_params(sid):
    """How much the trace shows is a param: more units, more events."""
    scn = scenarios.get(sid)
    unit = next(n for n in ("steps", "tokens", "iterations") if n in scn.Params.model_fields)
    base = scn.instance(0)
    more = scn.instance(0, {unit: str(getattr(base.params, unit) * 2)})
    assert len(more.trace(0)) > 1.8 * len(base.trace(0))


@pytest.mark.parametrize("sid", IDS)
def test_every_case_is_shelved_in_the_bank(sid):
    """The practice filters and the question bank's tags read these: a case on no shelf
    would never be drawn by a filtered "Surprise me"."""
    scn = scenarios.get(sid)
    assert scn.family in scenarios.FAMILIES and scn.difficulty in scenarios.DIFFICULTIES
