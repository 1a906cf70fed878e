"""Malformed and odd uploads: what the web app does with an upload either refuses it with
TraceImportError (a 400) or completes; no other exception escapes (a 500).
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

import scenarios
from app.analysis import hta, read, sql, text
from app.trace import importer, kineto
from app.web import timeline


def _strict(token: str):
    raise ValueError(f"{token} in the viewer's header: JSON.parse refuses it")


def pipeline(raw: bytes) -> dict:
    """What app/web/traces.py does with an upload: import, the read and HTA's figures as
    the JSON reply and as text, the viewer's columns, the SQL console's tables."""
    tr = importer.load(raw)
    r = read.read(tr)
    figures = hta.figures(tr)
    json.dumps({**r, "hta": figures}, allow_nan=False)  # Starlette's JSONResponse refuses NaN too
    text.render(r, figures)
    steps, _ = read.steps(tr)
    blob = timeline.encode(timeline.from_import(tr), "t", [(a * 1e3, b * 1e3) for a, b in steps])
    json.loads(blob[4:4 + int.from_bytes(blob[:4], "little")], parse_constant=_strict)
    sql.prepare(tr)
    return r


def dump(v) -> str:
    """JSON that may hold what json.dumps will not write: NaN/Infinity tokens."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"
    if isinstance(v, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{dump(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(dump(x) for x in v) + "]"
    return json.dumps(v)


def document(events: list, *, kineto_layout: bool = True, compress: bool = False, top: dict | None = None) -> bytes:
    top = {"schemaVersion": 1, **(top or {})}
    if kineto_layout:  # as torch.profiler writes it: the importer's fast path
        head = "".join(f"  {json.dumps(k)}: {dump(v)},\n" for k, v in top.items())
        raw = "{\n" + head + '  "traceEvents": [\n' + ",\n".join("  " + dump(e) for e in events) + "\n  ]\n}"
    else:
        raw = dump({**top, "traceEvents": events})
    return gzip.compress(raw.encode()) if compress else raw.encode()


def kernel(**fields) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1000, "dur": 5,
            "args": {"stream": 7, "correlation": 1}, **fields}


def cpu(**fields) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 990, "dur": 20, **fields}


def step(n: int, **fields) -> dict:
    return cpu(cat="user_annotation", name=f"ProfilerStep#{n}", **fields)


ODD_BUT_POSSIBLE = {
    "kernel names opening with ( or <": [kernel(name="(anonymous namespace)::softmax"),
                                         kernel(name="<lambda>", ts=2000)],
    "zero-duration kernels": [kernel(dur=0), kernel(dur=0, ts=1010)],
    "zero-duration kernels at one instant": [kernel(dur=0), kernel(dur=0)],
    "steps that start together": [step(1), step(2), kernel()],
    "tids past int64": [kernel(), cpu(tid=2**64 - 1), cpu(tid="99999999999999999999"),
                        cpu(tid="stream 10000000000000")],
    "complete events without pid or tid": [kernel(pid=None, tid=None, args=None), cpu(pid=None, tid=None)],
    "no GPU events": [cpu(), step(1), step(2, ts=2000)],
    "one event": [kernel()],
    "no steps": [kernel(), kernel(ts=1100)],
    "unknown categories": [kernel(cat="weird"), cpu(cat=""), cpu(cat=None)],
    "duplicate timestamps": [kernel(), kernel(), kernel(), cpu(), cpu()],
    "huge pid and tid numbers and strings": [kernel(pid=10**30), cpu(pid=2**64 - 1, tid=-2**63),
                                             cpu(pid="GPU x", tid="PyTorch Profiler")],
    "args that are not objects": [kernel(args=[1, 2]), cpu(args="x"), cpu(args=5),
                                  kernel(args={"stream": {"a": 1}})],
    "unicode, empty and one-line names": [kernel(name="ü☃ ✓"), kernel(name="", ts=2000), cpu(name="a\nb\u0000")],
}


@pytest.mark.parametrize("events", ODD_BUT_POSSIBLE.values(), ids=ODD_BUT_POSSIBLE.keys())
@pytest.mark.parametrize("kineto_layout", [True, False], ids=["kineto", "minified"])
def test_odd_but_possible_traces_are_analysed(events, kineto_layout):
    assert pipeline(document(events, kineto_layout=kineto_layout))["events"] == len(events)


def test_a_kernel_named_by_its_signature_is_its_own_family():
    tr = importer.load(document([kernel(name="(anonymous namespace)::softmax", dur=9), kernel(name="<lambda>")]))
    r = read.read(tr)
    assert r["kernels"]["top_family"] == "(anonymous namespace)::softmax"
    assert r["kernels"]["top_family_pct"] == pytest.approx(64.29)


def test_kernels_of_no_duration_at_one_instant_have_no_idle_share():
    tr = importer.load(document([kernel(dur=0), kernel(dur=0)]))
    r = read.read(tr)
    assert r["gaps"]["idle_pct"] is None and r["metrics"]["busy_pct"] is None and not r["launch"]["launch_bound"]
    assert "(n/a)" in text.render(r, hta.figures(tr))


def test_ranks_named_by_anything_but_a_number_are_named_by_position():
    nccl = kernel(name="ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    traces = [importer.load(document([kernel(), nccl], top={"distributedInfo": info}))
              for info in ({"rank": [1]}, 5)]
    assert read.read_ranks(traces)["rank_ids"] == [0, 1]


FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kineto"


@pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"shared fixtures not found at {FIXTURES}")
@pytest.mark.parametrize("name", ["hta_nccl_data_rank0.json.gz", "sampled_rank-0.json.gz", "sampled_rank-1.json.gz",
                                  "tiny_triton_example.json.gz"])
def test_real_traces_pass_validation_and_the_pipeline(name):
    assert pipeline((FIXTURES / name).read_bytes())["kernels"]["top"]


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_every_scenario_export_passes_validation_and_the_pipeline(sid):
    assert pipeline(kineto.dumps(scenarios.get(sid).instance(0).trace(0), "x").encode())["kernels"]["top"]
