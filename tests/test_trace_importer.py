"""The importer reads every Kineto variant into DuckDB, and refuses bad input in one line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import scenarios
from app.trace import importer, kineto
from app.trace.importer import TraceImportError

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kineto"
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"shared fixtures not found at {FIXTURES}")


def count_by_json(raw: bytes) -> tuple[int, dict]:
    doc = json.loads(raw)
    return len(doc["traceEvents"]), doc


@needs_fixtures
@pytest.mark.parametrize("name", ["hta_nccl_data_rank0.json.gz", "sampled_rank-0.json.gz",
                                  "sampled_rank-1.json.gz", "tiny_triton_example.json.gz"])
def test_real_traces_load_every_event(name):
    path = FIXTURES / name
    n, doc = count_by_json(gzip.decompress(path.read_bytes()))
    tr = importer.load(path)
    assert tr.events == n
    assert tr.meta.get("baseTimeNanoseconds") == doc.get("baseTimeNanoseconds")
    assert "traceEvents" not in tr.meta or tr.meta["traceEvents"] == []
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    got = tr.con.execute("SELECT count(*), sum(dur), count(stream), count(correlation) FROM events "
                         "WHERE cat = 'kernel'").fetchone()
    assert got[0] == len(kernels)
    assert got[1] == pytest.approx(sum(e["dur"] for e in kernels))
    assert got[2] == got[3] == len(kernels), "every kernel keeps its stream and correlation"
    steps = tr.con.execute("SELECT count(*) FROM events WHERE name LIKE 'ProfilerStep#%' "
                           "AND cat IN ('user_annotation', 'cpu_op')").fetchone()[0]
    assert steps == sum(1 for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")
                        and e.get("cat") in ("user_annotation", "cpu_op"))


@needs_fixtures
def test_triton_driver_launches_are_read():
    tr = importer.load(FIXTURES / "tiny_triton_example.json.gz")
    n = tr.con.execute("SELECT count(*) FROM events WHERE cat = 'cuda_driver' AND name = 'cuLaunchKernel'").fetchone()
    assert n[0] > 0


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_generated_traces_take_the_fast_path(sid, tmp_path):
    inst = scenarios.get(sid).instance(2)
    path = tmp_path / "t.json.gz"
    kineto.save(inst.trace(0), path)
    tr = importer.load(path)
    assert tr.fast_path
    assert tr.events == inst.trace(0).event_count()
    assert tr.base_time_ns == inst.trace(0).base_time_ns


def _doc(events, **top):
    return {"schemaVersion": 1, **top, "traceEvents": events}


LEGACY = _doc([
    {"ph": "X", "cat": "Operator", "name": "ProfilerStep#5", "pid": 25738, "tid": "25738", "ts": 1623142623500000,
     "dur": 1000},
    {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 25738, "tid": "25738", "ts": 1623142623531600,
     "dur": 5, "args": {"cbid": 211, "correlation": 34441, "external id": 544}},
    {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 1623142623531625, "dur": 2,
     "args": {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 34441, "external id": 544}},
    {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 13",
     "ts": 1623142623531700, "dur": 9},
])


@pytest.mark.parametrize("indent", [None, 2])
def test_legacy_categories_and_string_tids_are_normalized(indent, tmp_path):
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps(LEGACY, indent=indent))
    tr = importer.load(path)
    rows = tr.con.execute("SELECT cat, tid, stream, correlation, external_id FROM events ORDER BY ts").fetchall()
    assert rows == [("cpu_op", "25738", None, None, None), ("cuda_runtime", "25738", None, 34441, 544),
                    ("kernel", "stream 7", 7, 34441, 544), ("gpu_memcpy", "stream 13", 13, None, None)]


@pytest.mark.parametrize("ts,dur", [(1682725898079292, 607312), (1712195495502094.5, 3.25),
                                    (4458676416788.066, 222442.191)])
def test_every_timestamp_variant_keeps_its_value(ts, dur, tmp_path):
    doc = _doc([{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": ts,
                 "dur": dur}])
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    got = importer.load(path).con.execute("SELECT ts, dur FROM events").fetchone()
    assert got == (pytest.approx(ts, abs=1e-3), pytest.approx(dur))


def test_minified_and_indented_files_read_the_same(tmp_path):
    inst = scenarios.get("ddp").instance(0)
    text = kineto.dumps(inst.trace(0))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(text)
    b.write_text(json.dumps(json.loads(text), separators=(",", ":")))
    ta, tb = importer.load(a), importer.load(b)
    assert ta.fast_path and not tb.fast_path
    q = "SELECT cat, name, pid, tid, ts, dur, stream, correlation FROM events ORDER BY idx"
    assert ta.con.execute(q).fetchall() == tb.con.execute(q).fetchall()


def _one_line(exc: TraceImportError) -> str:
    msg = str(exc)
    assert "\n" not in msg and msg
    return msg


@pytest.mark.parametrize("raw,needle", [
    (b"hello, trace", "is not JSON"),
    (b"[1, 2, 3]", "is not JSON"),
    (b'{"traceEvents": [ {"ph": "X", "name": "a", "ts": 1, ', "not valid JSON"),
    (b'{"schemaVersion": 1}', "no traceEvents"),
    (b'{"traceEvents": []}', "empty traceEvents"),
    (b'{"traceEvents": {"ph": "X"}}', "no traceEvents array"),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "dur": 3}]}', "have no ts"),
])
def test_malformed_input_gets_one_line(raw, needle):
    with pytest.raises(TraceImportError) as e:
        importer.load(raw)
    assert needle in _one_line(e.value)


def test_truncated_and_corrupt_gzip(tmp_path):
    good = gzip.compress(json.dumps(LEGACY).encode())
    with pytest.raises(TraceImportError) as e:
        importer.load(good[: len(good) // 2])
    assert "truncated gzip" in _one_line(e.value)
    with pytest.raises(TraceImportError) as e:
        importer.load(good[:10] + b"\xff" * 40)
    assert "not valid gzip" in _one_line(e.value)


def test_size_limit_bounds_files_and_gzip_expansion(tmp_path):
    big = json.dumps(LEGACY).encode() + b" " * 5_000_000
    path = tmp_path / "big.json"
    path.write_bytes(big)
    with pytest.raises(TraceImportError) as e:
        importer.load(path, max_bytes=1_000_000)
    assert "over the 1 MB limit" in _one_line(e.value)
    bomb = gzip.compress(b"{" + b" " * 50_000_000 + b"}")  # ~50 KB that expands to 50 MB
    assert len(bomb) < 100_000
    with pytest.raises(TraceImportError) as e:
        importer.load(bomb, max_bytes=1_000_000)
    assert "expands past the 1 MB limit" in _one_line(e.value)
    assert importer.load(path).events == 4  # the default limit (1 GiB) takes it


def test_missing_file_is_named():
    with pytest.raises(TraceImportError) as e:
        importer.load("/nonexistent/trace.json")
    assert "no such trace file" in _one_line(e.value)


def _kineto_text(*events: str) -> bytes:
    """Events as JSON text in torch.profiler's layout, which DuckDB reads directly: it
    takes NaN and Infinity tokens that orjson (the minified path) refuses."""
    return ('{\n  "schemaVersion": 1,\n  "traceEvents": [\n  ' + ",\n  ".join(events) + "\n  ]\n}").encode()


def _kernel(**fields) -> str:
    ev = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1000, "dur": 5,
          "args": {"stream": 7, "correlation": 1}}
    return json.dumps({**ev, **fields})


@pytest.mark.parametrize("field,token,needle", [
    ("ts", "1e308", "has ts 1e+308 µs, beyond ±4e+15 µs"),
    ("ts", "-1e308", "has ts -1e+308 µs, beyond ±4e+15 µs"),
    ("ts", "1e30", "has ts 1e+30 µs, beyond ±4e+15 µs"),
    ("ts", "Infinity", "has a ts that is not a finite JSON number"),
    ("ts", "NaN", "has a ts that is not a finite JSON number"),
    ("ts", '"NaN"', "has a ts that is not a finite JSON number"),
    ("dur", "1e308", "has dur 1e+308 µs, over 1e+12 µs"),
    ("dur", "-1e308", "has a negative dur, -1e+308 µs"),
    ("dur", "1e30", "has dur 1e+30 µs, over 1e+12 µs"),
    ("dur", "Infinity", "has a dur that is not a finite JSON number"),
    ("dur", '"five"', "has a dur that is not a finite JSON number"),
    ("dur", '"5"', "has a dur that is not a finite JSON number"),
    ("dur", "null", 'is a complete ("X") event without a dur'),
    ("name", "null", 'is a complete ("X") event without a name'),
])
def test_absurd_fields_are_refused_naming_the_event(field, token, needle):
    odd = _kernel(**{field: "@"}).replace('"@"', token)
    with pytest.raises(TraceImportError) as e:
        importer.load(_kineto_text(_kernel(), odd))
    msg = _one_line(e.value)
    assert msg.startswith("upload: event 1") and needle in msg


@pytest.mark.parametrize("layout", ["kineto", "minified"])
@pytest.mark.parametrize("odd", ["3", '"x"', "null", "[1, 2]", "{}",
                                 '{"cat": "kernel", "name": "k", "ts": 1, "dur": 1}'])
def test_an_event_that_is_not_an_object_with_a_phase_is_refused(odd, layout):
    raw = _kineto_text(_kernel(), odd)
    if layout == "minified":
        raw = json.dumps(json.loads(raw)).encode()
    with pytest.raises(TraceImportError) as e:
        importer.load(raw)
    msg = _one_line(e.value)
    assert msg.startswith("upload: event 1") and 'is not an object with a "ph"' in msg


def test_a_trace_of_metadata_alone_is_refused():
    meta = json.dumps({"name": "process_labels", "ph": "M", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}})
    with pytest.raises(TraceImportError) as e:
        importer.load(_kineto_text(meta, meta))
    assert 'has no complete ("X") events' in _one_line(e.value)


def test_a_refusal_quotes_at_most_80_characters_of_a_name():
    with pytest.raises(TraceImportError) as e:
        importer.load(_kineto_text(_kernel(name="\u0001" * 10_000, dur=-1)))
    assert len(_one_line(e.value)) < 200


def test_times_at_the_bounds_load():
    tr = importer.load(_kineto_text(_kernel(ts=-4e15, dur=0), _kernel(ts=4e15, dur=1e12)))
    assert tr.con.execute("SELECT min(ts), max(ts), max(dur) FROM events").fetchone() == (-4e15, 4e15, 1e12)
