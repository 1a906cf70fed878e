"""Malformed and odd uploads: what the web app does with an upload either refuses it with
TraceImportError (a 400) or completes; no other exception escapes (a 500).

Hypothesis mutates small valid Kineto traces (wrong types per field, missing fields,
extreme numbers, NaN/Infinity as JSON tokens, odd names, non-object events, repeated
keys, metadata only) and writes them in both layouts the importer reads differently:
Kineto's own (traceEvents closing on a line of its own: DuckDB's reader, which takes
NaN and Infinity tokens) and minified (orjson first), plain or gzip.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scenarios
from app.analysis import hta, read, sql, text
from app.trace import importer, kineto
from app.trace.importer import TraceImportError
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


class Obj(list):
    """A JSON object as its (key, value) pairs, so a key can repeat."""


def dump(v) -> str:
    """JSON that may hold what json.dumps will not write: repeated keys and NaN/Infinity tokens."""
    if isinstance(v, Obj):
        return "{" + ",".join(f"{json.dumps(k)}:{dump(x)}" for k, x in v) + "}"
    if isinstance(v, dict):
        return dump(Obj(v.items()))
    if isinstance(v, list):
        return "[" + ",".join(dump(x) for x in v) + "]"
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"
    return json.dumps(v)


def document(events: list, *, kineto_layout: bool = True, compress: bool = False, top: dict | None = None) -> bytes:
    top = {"schemaVersion": 1, **(top or {})}
    if kineto_layout:  # as torch.profiler writes it: the importer's fast path
        head = "".join(f"  {json.dumps(k)}: {dump(v)},\n" for k, v in top.items())
        raw = "{\n" + head + '  "traceEvents": [\n' + ",\n".join("  " + dump(e) for e in events) + "\n  ]\n}"
    else:
        raw = dump({**top, "traceEvents": events})
    return gzip.compress(raw.encode()) if compress else raw.encode()


ODD_NAMES = ["void gemm<float, 128>(Params)",
             "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
             "(anonymous namespace)::softmax_kernel", "<lambda>", "(", "<", "", "ü☃ ✓", "nul\u0000byte",
             "two\nlines", "ProfilerStep#", "ProfilerStep#x", "k" * 300, "%_'\"\\"]
PHASES = ["X", "M", "i", "s", "f", "C", "B", "E", "Z", ""]
CATS = ["kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_runtime", "cuda_driver", "cpu_op",
        "user_annotation", "Kernel", "Runtime", "ac2g", "Trace", "weird", ""]

numbers = st.one_of(
    st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -2**63, 2**64 - 1, 10**30, -10**30]),
    st.sampled_from([1e308, -1e308, 1e30, -1e30, 4e15, 4.1e15, -4e15, 1e12, 1e12 + 1, 1e15, 5e-324, -0.0, 0.5]),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70))
scalars = st.one_of(st.none(), st.booleans(), numbers,
                    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e308", "5", "stream 7", "GPU 0", *ODD_NAMES]),
                    st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from(
                                                           ["stream", "correlation", "External id", "name",
                                                            "labels", "x"]), inner, max_size=3)), max_leaves=6)

ids = st.one_of(st.none(), st.integers(-2**64, 2**64), st.sampled_from([2**63, 2**64 - 1, 10**30, 1e30, 1.5]),
                st.sampled_from(["7", "stream 7", "stream 99999999999999999999", "99999999999999999999", "-5",
                                 "PyTorch Profiler", "Spans", "", "ü"]))
# Per field, odd values of the type a real trace writes there (so they reach the analyses),
# mixed with any value at all (so they test the refusals).
FIELDS = {
    "ph": st.sampled_from(PHASES), "cat": st.sampled_from(CATS), "name": st.sampled_from(ODD_NAMES),
    "pid": ids, "tid": ids, "id": ids, "s": st.sampled_from(["g", "t", "p"]), "bp": st.just("e"),
    "ts": st.sampled_from([0, -1, 1e-3, 4e15, -4e15, 4e15 + 1, 1e308, -1e308, 1e30, math.inf, -math.inf, math.nan]),
    "dur": st.sampled_from([0, 1e-3, 1e12, 1e12 + 1, -1e-3, 1e308, -1e308, 1e30, math.inf, math.nan]),
    "args": st.fixed_dictionaries({}, optional={"stream": ids, "correlation": ids, "External id": ids,
                                               "name": scalars, "labels": scalars}) | values,
}

# The top-level keys the analyses read or show, with any value.
tops = st.fixed_dictionaries({}, optional={k: values for k in ("baseTimeNanoseconds", "distributedInfo",
                                                                "deviceProperties", "displayTimeUnit", "traceName")})


@st.composite
def valid_events(draw) -> list[dict]:
    """A small trace as torch.profiler writes one: metadata, steps, a launch per kernel
    with its flow, a compute and an NCCL stream, a copy, an instant and a counter."""
    t = draw(st.sampled_from([1682725898079292, 1712195495502094.5, 4458676416788.066, 0]))
    dur = st.sampled_from([0, 0.001, 1, 2.5, 40, 1000.25])
    host, gpu = draw(st.sampled_from([(2910249, 0), ("2910249", "0"), (7, 7)]))
    ev = [{"name": "process_labels", "ph": "M", "ts": t, "pid": gpu, "tid": 0, "args": {"labels": "GPU 0"}},
          {"name": "thread_name", "ph": "M", "ts": t, "pid": host, "tid": host,
           "args": {"name": "thread 1 (pt_main_thread)"}},
          {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
           "tid": "Trace PyTorch Profiler", "ts": t}]
    corr = 1
    for step in range(draw(st.integers(0, 3))):
        start = t + step * 1000
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 4}", "pid": host, "tid": host,
                   "ts": start, "dur": draw(st.sampled_from([0, 900, 1000]))})
        for k in range(draw(st.integers(0, 3))):
            launch = start + 10 + 100 * k
            name = draw(st.sampled_from(ODD_NAMES))
            ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": host, "tid": host,
                    "ts": launch, "dur": draw(dur), "args": {"correlation": corr, "External id": corr}},
                   {"ph": "X", "cat": "kernel", "name": name, "pid": gpu, "tid": 7, "ts": launch + 20,
                    "dur": draw(dur), "args": {"stream": 7, "correlation": corr, "External id": corr}},
                   {"ph": "s", "id": corr, "pid": host, "tid": host, "ts": launch, "cat": "ac2g", "name": "ac2g"},
                   {"ph": "f", "id": corr, "pid": gpu, "tid": 7, "ts": launch + 20, "cat": "ac2g", "name": "ac2g",
                    "bp": "e"}]
            corr += 1
        ev.append({"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)",
                   "pid": gpu, "tid": 40, "ts": start + 50, "dur": draw(dur), "args": {"stream": 40, "correlation": 0}})
    ev += [{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": gpu, "tid": 13,
            "ts": t + 5, "dur": draw(dur), "args": {"stream": 13, "correlation": corr}},
           {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": host, "tid": host, "ts": t + 1, "dur": draw(dur)},
           {"ph": "C", "name": "mem", "pid": host, "tid": host, "ts": t + 2, "args": {"bytes": 5, "x": "y"}}]
    return ev


@st.composite
def mutated(draw) -> list:
    """A valid trace with up to five things done to it that no profiler would do; now and
    then only its metadata, or nothing."""
    events: list = [Obj(e.items()) for e in draw(valid_events())]
    shape = draw(st.sampled_from(["mutated"] * 8 + ["metadata_only", "empty"]))
    if shape == "metadata_only":
        events = [e for e in events if ("ph", "M") in e]
    elif shape == "empty":
        return []
    for _ in range(draw(st.integers(0, 5))):
        i = draw(st.integers(0, len(events) - 1))
        e = events[i]
        what = draw(st.sampled_from(["set"] * 6 + ["drop", "drop", "repeat_key", "not_object", "copy"]))
        field = draw(st.sampled_from(sorted(FIELDS)))
        if not isinstance(e, Obj) or what == "not_object":
            events[i] = draw(scalars | st.lists(scalars, max_size=2))
        elif what == "copy":
            events.insert(i, e)
        elif what == "set":
            value = draw(FIELDS[field] | values)
            events[i] = Obj([(k, v) for k, v in e if k != field] + [(field, value)])
        elif what == "drop":
            events[i] = Obj([(k, v) for k, v in e if k != field])
        else:
            events[i] = Obj([*e, (field, draw(FIELDS[field]))])
    return events


@settings(max_examples=120, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=mutated(), top=tops, kineto_layout=st.booleans(), compress=st.booleans())
def test_an_upload_is_refused_in_one_line_or_analysed(events, top, kineto_layout, compress):
    try:
        pipeline(document(events, top=top, kineto_layout=kineto_layout, compress=compress))
    except TraceImportError as e:
        assert "\n" not in str(e)


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


@pytest.fixture(scope="module")
def upload_client(tmp_path_factory):
    """The app with its own upload store (imports run in its separate import process)."""
    import os

    from fastapi.testclient import TestClient

    from app.config import get_settings

    tmp = tmp_path_factory.mktemp("fuzz")
    uploads_before = os.environ.get("TRACEDOJO_UPLOADS_DIR")
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp / 'fuzz.db'}"
    os.environ["TRACEDOJO_UPLOADS_DIR"] = str(tmp / "uploads")
    get_settings.cache_clear()
    from app.web.main import create_app

    with TestClient(create_app()) as c:
        yield c
    # back to the session's store (tests/conftest.py), not the checkout's data/uploads
    if uploads_before is None:
        os.environ.pop("TRACEDOJO_UPLOADS_DIR")
    else:
        os.environ["TRACEDOJO_UPLOADS_DIR"] = uploads_before
    get_settings.cache_clear()


# Fewer examples than above: each goes through HTTP, multipart and the import process.
@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(events=mutated(), top=tops, compress=st.booleans())
def test_the_upload_route_answers_400_or_a_read_never_500(upload_client, events, top, compress):
    raw = document(events, top=top, compress=compress)
    r = upload_client.post("/api/traces", files={"trace": ("fuzz.json", raw, "application/octet-stream")})
    assert r.status_code in (200, 400), (r.status_code, r.text[:300])
    if r.status_code == 400:
        assert set(r.json()) == {"error"} and "\n" not in r.json()["error"]
    else:
        assert r.json()["id"] and upload_client.get(r.json()["url"] + ".json").status_code == 200
