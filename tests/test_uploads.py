"""Uploaded traces: one store on disk that every process serves from, imports off the event
loop and bounded, and a SQL console that cannot write, hog or crash the server."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import scenarios
from app import uploads
from app.config import get_settings
from app.trace import importer, kineto
from app.web.main import create_app
from app.web.traces import _timeline_gz
from tests.server import running_server


@pytest.fixture(scope="module")
def ddp_json() -> bytes:
    return kineto.dumps(scenarios.get("ddp").instance("canonical").trace(0)).encode()


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("uploads")


@pytest.fixture(scope="module")
def apps(tmp_path_factory, store_dir):
    """Two apps, as two worker processes would be: each its own cache, one uploads_dir."""
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp_path_factory.mktemp('db') / 'test.db'}"
    os.environ["TRACEDOJO_UPLOADS_DIR"] = str(store_dir)
    get_settings.cache_clear()
    with TestClient(create_app()) as a, TestClient(create_app()) as b:
        yield a, b


@pytest.fixture
def settings():
    """The settings the apps read, restored after a test that changes them."""
    s = get_settings()
    saved = s.model_dump()
    yield s
    for k, v in saved.items():
        setattr(s, k, v)


def _post(client, name: str, content: bytes):
    return client.post("/api/traces", files={"trace": (name, content, "application/octet-stream")})


@pytest.fixture(scope="module")
def uploaded(apps, ddp_json) -> str:
    r = _post(apps[0], "rank0.json", ddp_json)
    assert r.status_code == 200, r.text
    return r.json()["id"]


def test_an_upload_through_one_app_is_read_queried_and_drawn_through_the_other(apps, uploaded, ddp_json):
    a, b = apps
    assert uploaded == hashlib.sha256(ddp_json).hexdigest()
    mine, theirs = a.get(f"/traces/{uploaded}.json").json(), b.get(f"/traces/{uploaded}.json").json()
    assert mine == theirs and theirs["steps"]["count"] == 4
    q = b.post(f"/api/traces/{uploaded}/sql", json={"query": "SELECT count(*) FROM slice WHERE name LIKE 'ProfilerStep#%'"})
    assert q.status_code == 200 and q.json()["rows"] == [[4]]
    tl = b.get(f"/api/traces/{uploaded}/timeline.bin", headers={"Accept-Encoding": "identity"})
    head = json.loads(tl.content[4:4 + int.from_bytes(tl.content[:4], "little")])
    assert tl.status_code == 200 and head["title"] == "rank0.json" and head["count"] > 1000
    assert b.get(f"/traces/{uploaded}").status_code == 200
    assert b.get(f"/api/traces/{uploaded}/slices/3").json()["ph"]


def test_the_upload_is_one_complete_directory_named_by_its_hash(store_dir, uploaded, ddp_json):
    d = store_dir / uploaded[:2] / uploaded
    assert sorted(p.name for p in d.iterdir()) == ["events.duckdb", "meta.json", "read.json", "timeline.bin.gz"]
    assert json.loads((d / "meta.json").read_text()) == {
        "name": "rank0.json", "events": len(json.loads(ddp_json)["traceEvents"]), "size_bytes": len(ddp_json)}
    assert not list(store_dir.glob("*/.tmp-*")) and not list(store_dir.glob("incoming/*"))


@pytest.mark.timed
def test_the_same_bytes_again_are_not_imported_again(apps, uploaded, ddp_json):
    t0 = time.perf_counter()
    r = _post(apps[1], "again.json", ddp_json)
    assert r.json()["id"] == uploaded and time.perf_counter() - t0 < 1


def _build(args):
    uploads.build(*args)


def test_two_processes_importing_the_same_bytes_leave_one_good_copy(tmp_path, ddp_json):
    body = tmp_path / "body.json"
    body.write_bytes(ddp_json)
    uid = hashlib.sha256(ddp_json).hexdigest()
    limits = uploads.ImportLimits(2**30, 1, 512)
    root = tmp_path / "store"
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        list(pool.map(_build, [(str(body), str(root), uid, "t.json", limits, _timeline_gz)] * 2))
    assert [p.name for p in root.glob("*/*")] == [uid]
    up = uploads.Store(root).get(uid)
    assert up.events == len(json.loads(ddp_json)["traceEvents"]) and up.read["steps"]["count"] == 4


def _fail(tr, title):
    raise RuntimeError("the import died half way")


def test_a_failed_import_leaves_nothing_behind(tmp_path, ddp_json):
    body = tmp_path / "body.json"
    body.write_bytes(ddp_json)
    with pytest.raises(importer.TraceImportError, match="could not be read"):
        uploads.build(str(body), str(tmp_path / "store"), "ab" * 32, "t.json", uploads.ImportLimits(2**30, 1, 512), _fail)
    assert not [p for p in (tmp_path / "store").rglob("*") if p.is_dir() and p.parent != tmp_path / "store"]


def test_the_store_drops_the_least_recently_used_past_its_budget(tmp_path, ddp_json):
    root, limits = tmp_path / "store", uploads.ImportLimits(2**30, 1, 512)
    ids = []
    for i in range(3):
        body = tmp_path / f"{i}.json"
        body.write_bytes(ddp_json + b" " * i)  # three different uploads of one trace
        ids.append(hashlib.sha256(body.read_bytes()).hexdigest())
        uploads.build(str(body), str(root), ids[-1], f"{i}.json", limits, _timeline_gz)
    store = uploads.Store(root)
    for age_s, uid in zip((300, 200, 100), ids):  # 0 oldest
        os.utime(root / uid[:2] / uid, (time.time() - age_s,) * 2)
    store.get(ids[0])  # reading it makes it the most recent
    size = sum(f.stat().st_size for f in (root / ids[0][:2] / ids[0]).iterdir())
    assert store.evict(budget_bytes=int(size * 2.5), keep=ids[2]) == [ids[1]]
    assert store.exists(ids[0]) and store.exists(ids[2]) and not store.exists(ids[1])
    with pytest.raises(uploads.NotFound):
        store.get(ids[1])


@pytest.mark.parametrize("tid", ["0123456789abcdef", "AB" * 32, "ab" * 31 + "a", "ab" * 32 + "0", "zz" * 32,
                                 "0x" + "ab" * 31, "é" * 64, "a" * 5000])
def test_an_id_not_of_the_form_is_404_with_a_short_message(apps, tid):
    a, _ = apps
    for r in (a.get(f"/traces/{tid}.json"), a.get(f"/api/traces/{tid}/timeline.bin"),
              a.get(f"/api/traces/{tid}/slices/1"), a.post(f"/api/traces/{tid}/sql", json={"query": "SELECT 1"})):
        assert r.status_code == 404 and len(r.json()["error"]) < 300 and "\n" not in r.json()["error"]


def test_an_unknown_id_of_the_right_form_is_404(apps):
    r = apps[1].get(f"/traces/{'0' * 64}.json")
    assert r.status_code == 404 and "upload it again" in r.json()["error"]


@pytest.mark.timed
def test_a_gzip_bomb_is_refused_without_growing_memory(tmp_path):
    """2 GB of zeros in a 2 MB gzip, against a 50 MB limit, in a fresh process that reports
    its own and its import worker's peak RSS (VmHWM) around the upload."""
    script = textwrap.dedent(f"""
        import gzip, json, os, time
        os.environ["DATABASE_URL"] = "sqlite:///{tmp_path}/t.db"
        os.environ["TRACEDOJO_UPLOADS_DIR"] = "{tmp_path}/uploads"
        os.environ["TRACEDOJO_MAX_TRACE_BYTES"] = str(50 * 2**20)
        from fastapi.testclient import TestClient
        from app.web.main import create_app

        def peaks_mb():
            pids = [os.getpid()] + [int(p) for t in os.listdir("/proc/self/task")
                                    for p in open(f"/proc/self/task/{{t}}/children").read().split()]
            out = {{}}
            for pid in pids:
                for line in open(f"/proc/{{pid}}/status"):
                    if line.startswith("VmHWM"):
                        out[pid] = int(line.split()[1]) / 1024
            return out

        if __name__ == "__main__":
            zeros = gzip.compress(bytes(2**24), 9)  # gzip members concatenated are one gzip
            bomb = gzip.compress(b"{{" + bytes(2**24), 9) + zeros * 127
            small = json.dumps({{"traceEvents": [{{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}}]}})
            with TestClient(create_app()) as client:
                assert client.post("/api/traces", files={{"trace": ("small.json", small)}}).status_code == 200
                before = peaks_mb()
                t0 = time.perf_counter()
                r = client.post("/api/traces", files={{"trace": ("bomb.json.gz", bomb)}})
                took = time.perf_counter() - t0
                after = peaks_mb()
            print(json.dumps({{"status": r.status_code, "error": r.json()["error"], "took_s": took, "bomb_bytes": len(bomb),
                              "growth_mb": {{str(p): after[p] - before.get(p, 0) for p in after}}}}))
    """)
    (tmp_path / "bomb.py").write_text(script)
    root = str(Path(__file__).resolve().parents[1])  # this checkout's `app`, whatever is installed
    out = subprocess.run([sys.executable, str(tmp_path / "bomb.py")], capture_output=True, text=True, timeout=120,
                         cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["status"] == 413 and "expands past the 52 MB limit" in report["error"]
    assert report["bomb_bytes"] < 3e6 and len(report["growth_mb"]) >= 2  # the server, its import worker(s)
    assert max(report["growth_mb"].values()) < 64, report
    assert report["took_s"] < 5, report


@pytest.mark.timed
def test_leading_whitespace_is_refused_after_a_mebibyte(apps):
    blank = gzip.compress(b" " * 2**24) * 60 + gzip.compress(b"{}")  # 1000 MB of spaces, then a document
    t0 = time.perf_counter()
    r = _post(apps[0], "blank.json.gz", blank)
    assert r.status_code == 400 and "whitespace" in r.json()["error"] and time.perf_counter() - t0 < 2
    r = _post(apps[0], "blank.json", b"\n" * 3_000_000 + b"{}")
    assert r.status_code == 400 and "whitespace" in r.json()["error"]
    r = _post(apps[0], "list.json", b"  \n [1, 2]")
    assert r.status_code == 400 and "is not JSON" in r.json()["error"]


@pytest.mark.parametrize("doc,needle", [
    ('{"traceEvents": [{"ph": "X", "dur": "abc", "ts": 1, "pid": 1, "tid": 1}]}', "not a finite JSON number"),
    ('{"traceEvents": [1, 2, 3]}', "not an object"),
    ('{"traceEvents": [{"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "x"}}]}',
     "no complete"),
])
def test_a_trace_of_the_wrong_shape_is_400_not_500(apps, doc, needle):
    r = _post(apps[0], "odd.json", doc.encode())
    assert r.status_code == 400 and needle in r.json()["error"] and "/tmp" not in r.json()["error"]


def test_an_upload_over_the_limit_stops_and_leaves_nothing(apps, settings, store_dir):
    settings.max_upload_bytes = 2**20
    r = _post(apps[0], "big.json", b"{" + b" " * 5_000_000 + b"}")  # refused on its Content-Length
    assert r.status_code == 413 and "5 MiB, over the 1 MiB upload limit" in r.json()["error"]
    r = _post(apps[0], "big.json", b"{" + b" " * (2**20 + 10_000) + b"}")  # refused as it streams in
    assert r.status_code == 413 and "big.json is over the 1 MiB upload limit" in r.json()["error"]
    assert not list(store_dir.glob("incoming/*"))


def test_a_long_file_name_is_cut_in_messages(apps):
    r = _post(apps[0], "x" * 5000 + ".json", b"nope")
    assert r.status_code == 400 and len(r.json()["error"]) < 300


def test_a_path_is_read_without_holding_the_file_in_python(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(kineto.dumps(scenarios.get("launch-bound").instance(1, {"tokens": "10"}).trace(0)).encode())
    assert path.stat().st_size > 10e6
    tracemalloc.start()
    try:
        tr = importer.load(path)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tr.fast_path and tr.events > 10_000
    assert peak_bytes < path.stat().st_size / 10, f"{peak_bytes / 1e6:.1f} MB of Python objects"


@pytest.mark.parametrize("depth,parsed", [(3, True), (300, False), (200_000, False)])
def test_deeply_nested_args_come_back_as_text_not_a_500(apps, depth, parsed):
    a, b = apps
    args = '{"a":' * depth + "1" + "}" * depth
    doc = ('{\n  "traceEvents": [\n  {"ph": "X", "cat": "cpu_op", "name": "deep", "pid": 1, "tid": 1, "ts": 1, '
           f'"dur": 2, "args": {args}}}\n  ]\n}}')  # laid out as Kineto writes it: DuckDB reads the events
    up = _post(a, f"deep{depth}.json", doc.encode())
    assert up.status_code == 200, up.text
    src = b.post(f"/api/traces/{up.json()['id']}/sql", json={"query": "SELECT id FROM slice WHERE name = 'deep'"})
    r = b.get(f"/api/traces/{up.json()['id']}/slices/{src.json()['rows'][0][0]}")
    assert r.status_code == 200 and r.json()["name"] == "deep"
    got = r.json()["args"]
    assert (json.dumps(got, separators=(",", ":")) == args) if parsed else (got.replace(" ", "") == args)
    assert b.get(f"/api/traces/{up.json()['id']}/slices/{2**70}").status_code == 404
    minified = _post(a, "minified.json", doc.replace("\n", "").encode())  # orjson's way: it reads, cannot write
    assert minified.status_code == (200 if parsed else 400), minified.text


WRITES = ["EXPLAIN ANALYZE UPDATE events SET name = 'pwned'",
          "WITH x AS (INSERT INTO events (idx, name) VALUES (-1, 'pwned') RETURNING *) SELECT * FROM x",
          "EXPLAIN ANALYZE CREATE TABLE big AS SELECT * FROM range(100000000)",
          "DELETE FROM slice", "DROP TABLE slice", "COPY slice TO '/tmp/leak.csv'", "ATTACH '/tmp/x.db' AS x"]


@pytest.mark.parametrize("query", WRITES)
def test_every_write_is_403_and_the_upload_is_unchanged(apps, uploaded, query):
    a, b = apps
    count = {"query": "SELECT count(*), min(name), max(name), (SELECT count(*) FROM slice) FROM events"}
    before = b.post(f"/api/traces/{uploaded}/sql", json=count).json()
    r = a.post(f"/api/traces/{uploaded}/sql", json={"query": query})
    assert r.status_code == 403 and "\n" not in r.json()["error"]
    assert b.post(f"/api/traces/{uploaded}/sql", json=count).json() == before


@pytest.mark.timed
def test_big_cells_are_truncated_at_the_byte_limit_quickly(apps, uploaded):
    t0 = time.perf_counter()
    r = apps[0].post(f"/api/traces/{uploaded}/sql", json={"query": "SELECT repeat('x', 1000000) FROM range(1000)"})
    assert r.status_code == 200 and r.json()["truncated"] and time.perf_counter() - t0 < 3
    assert len(r.content) <= get_settings().sql_max_bytes + 1000


@pytest.mark.timed
def test_a_long_query_is_interrupted_within_the_limit(apps, uploaded, settings):
    settings.sql_timeout_s = 1
    t0 = time.perf_counter()
    r = apps[0].post(f"/api/traces/{uploaded}/sql",
                     json={"query": "SELECT count(*) FROM range(1000000000000) a, range(1000) b"})
    assert r.status_code == 400 and r.json()["error"].startswith("interrupted after 1 s")
    assert time.perf_counter() - t0 < 2


def test_nan_and_infinity_cells_come_back_as_json(apps, uploaded):
    r = apps[1].post(f"/api/traces/{uploaded}/sql",
                     json={"query": "SELECT 'nan'::DOUBLE AS a, 'inf'::DOUBLE AS b, ['-inf'::DOUBLE] AS c, '\\xFF'::BLOB AS d"})
    assert r.status_code == 200 and r.json()["rows"] == [[None, "Infinity", [None], "b'\\xff'"]]


@pytest.mark.timed
def test_past_the_sql_concurrency_limit_the_answer_is_429(apps, uploaded, settings):
    settings.max_concurrent_sql, settings.sql_timeout_s = 1, 2
    a, b = apps
    slow_query = {"query": "SELECT count(*) FROM range(1000000000000) a, range(1000) b"}
    slow = {}
    thread = threading.Thread(target=lambda: slow.update(r=a.post(f"/api/traces/{uploaded}/sql", json=slow_query)))
    thread.start()
    time.sleep(0.3)  # the slow query holds the one slot (a probe sent at once could take it first)
    busy = None
    t0 = time.perf_counter()
    while thread.is_alive() and busy is None and time.perf_counter() - t0 < 1.5:
        r = b.post(f"/api/traces/{uploaded}/sql", json={"query": "SELECT 1"})
        busy = r if r.status_code == 429 else None
    thread.join()
    assert slow["r"].status_code == 400 and "interrupted" in slow["r"].json()["error"]
    assert busy is not None and "already running" in busy.json()["error"] and busy.headers["retry-after"]


def _multipart(name: str, content: bytes) -> tuple[bytes, str]:
    boundary = "tracedojo-test-boundary"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="trace"; filename="{name}"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + content + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def _post_url(url: str, name: str, content: bytes, timeout_s: float = 300) -> tuple[int, dict, dict]:
    body, ctype = _multipart(name, content)
    req = urllib.request.Request(url, data=body, headers={"Content-Type": ctype}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


@pytest.mark.timed
def test_a_parse_in_progress_does_not_hold_other_requests(tmp_path, monkeypatch):
    """A real server: while a 245k-event trace is imported, the home page's JSON still
    answers at once, and a second upload finds the queue full (503, Retry-After)."""
    monkeypatch.setenv("TRACEDOJO_UPLOADS_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("TRACEDOJO_MAX_QUEUED_IMPORTS", "0")
    big = kineto.dumps(scenarios.get("launch-bound").instance(1, {"tokens": "60"}).trace(0)).encode()
    with running_server(tmp_path) as base:
        urllib.request.urlopen(base + "/index.json", timeout=30).read()  # the instances it lists, built once
        result = {}
        upload = threading.Thread(target=lambda: result.update(
            zip(("status", "body", "headers"), _post_url(base + "/api/traces", "big.json", big))))
        t0 = time.perf_counter()
        upload.start()
        time.sleep(1.0)  # the body is sent and the import under way
        latencies_s = []
        for _ in range(5):
            t = time.perf_counter()
            urllib.request.urlopen(base + "/index.json", timeout=10).read()
            latencies_s.append(time.perf_counter() - t)
            time.sleep(0.2)
        busy = _post_url(base + "/api/traces", "small.json", b'{"traceEvents": []}')
        still_parsing = upload.is_alive()
        upload.join(300)
        took_s = time.perf_counter() - t0
    assert result["status"] == 200 and result["body"]["events"] == len(json.loads(big)["traceEvents"]), result
    assert still_parsing, f"the import ended before the GETs were timed ({took_s:.1f} s)"
    assert max(latencies_s) < 0.5, latencies_s
    assert busy[0] == 503 and "try again" in busy[1]["error"] and int(busy[2]["retry-after"]) > 0
    print(f"245k-event upload imported in {took_s:.1f} s; GET /index.json meanwhile: "
          f"{', '.join(f'{x * 1e3:.0f}' for x in latencies_s)} ms")


FIXTURES = Path("/work/shared/fixtures/kineto")
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"the real torch.profiler traces are not at {FIXTURES}")


@needs_fixtures
@pytest.mark.parametrize("name", ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"])
def test_a_deep_gpu_queue_is_not_called_launch_bound(name):
    """These real ranks have wide gaps (idle ~80%) but an ~18 ms launch delay against
    ~0.2 ms kernels: each kernel waits behind ~90 others, the GPU is the bottleneck."""
    from app.analysis import read, text

    r = read.read(importer.load(FIXTURES / name))
    ln = r["launch"]
    assert ln["launch_delay_us"] > 15_000 and ln["mean_gap_us"] > ln["mean_kernel_us"]  # the old rule's trap
    assert ln["launch_bound"] is False and ln["queue_deep"] is True
    assert "not launch-bound" in text.render(r) and "GPU-bound" in text.render(r)


@pytest.mark.parametrize("scenario,seed,bound", [
    ("launch-bound", "canonical", True), ("launch-bound", 9, True), ("launch-bound", 13, True),
    ("ddp", "canonical", False), ("ddp", 1, False)])
def test_generated_instances_keep_their_launch_bound_verdict(scenario, seed, bound):
    from app.analysis import read

    r = read.read(importer.load(kineto.dumps(scenarios.get(scenario).instance(seed).trace(0)).encode()))
    assert r["launch"]["launch_bound"] is bound
    if bound:  # launch delays of the order of a kernel, the queue drained
        assert r["launch"]["launch_delay_us"] < read.MAX_LAUNCH_DELAY_KERNELS * r["launch"]["mean_kernel_us"]


def _tracks(client, uid: str) -> list[dict]:
    tl = client.get(f"/api/traces/{uid}/timeline.bin", headers={"Accept-Encoding": "identity"})
    return json.loads(tl.content[4:4 + int.from_bytes(tl.content[:4], "little")])["tracks"]


def test_negative_huge_and_text_tids_are_named_as_perfetto_names_threads(apps):
    """Kineto cuts a 64-bit system tid to int32 (-549452224); such a thread is "thread N"
    with a small N, or its thread_name; its CUDA API row says so too."""
    def ev(tid, ts, cat="cpu_op", name="aten::mm", **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": 2, "args": args}
    doc = {"traceEvents": [
        ev(-549452224, 1), ev(-549452224, 4, "cuda_runtime", "cudaLaunchKernel", correlation=1),
        ev(2**40, 10), ev(2**40, 13, "cuda_runtime", "cudaLaunchKernel", correlation=2),
        ev(-7, 20), ev("PyTorch Profiler", 30, "user_annotation", "step"),
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": -7, "args": {"name": "pt_main_thread"}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 6, "dur": 1, "args": {"stream": 7, "correlation": 1}}]}
    r = _post(apps[0], "tids.json", json.dumps(doc).encode())
    assert r.status_code == 200, r.text
    labels = [t["label"] for t in _tracks(apps[0], r.json()["id"]) if not t["gpu"]]
    assert not [x for x in labels if "549452224" in x or str(2**40) in x], labels
    assert {"thread 1", "thread 2", "CUDA API · thread 1", "CUDA API · thread 2", "main thread",
            "PyTorch Profiler"} <= set(labels), labels


# --- several ranks in one upload: several files, a .zip or a .tar.gz of a trace directory ---

import io  # noqa: E402
import tarfile  # noqa: E402
import zipfile  # noqa: E402


@pytest.fixture(scope="module")
def straggler_ranks() -> dict[int, bytes]:
    """Three ranks of a generated straggler instance (rank 3 is the slow one), gzipped, with
    torch.profiler's file names, which carry no rank: distributedInfo.rank names them."""
    inst = scenarios.get("straggler").instance("canonical", {"steps": "3"})
    assert inst.key["params"]["straggler_rank"] == 3
    return {r: gzip.compress(kineto.dumps(inst.trace(r), inst.trace_name(r)).encode(), 1) for r in (3, 0, 1)}


def _post_many(client, files: list[tuple[str, bytes]], url="/api/traces"):
    return client.post(url, files=[("trace", (n, c, "application/octet-stream")) for n, c in files])


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for n, c in members.items():
            z.writestr(n, c)
    return buf.getvalue()


def _targz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for n, c in members.items():
            info = tarfile.TarInfo(n)
            info.size = len(c)
            t.addfile(info, io.BytesIO(c))
    return buf.getvalue()


def _header(client, uid: str) -> dict:
    tl = client.get(f"/api/traces/{uid}/timeline.bin", headers={"Accept-Encoding": "identity"})
    return json.loads(tl.content[4:4 + int.from_bytes(tl.content[:4], "little")])


@pytest.fixture(scope="module")
def multi_upload(apps, straggler_ranks) -> dict:
    files = [(f"host_{1000 + r}.pt.trace.json.gz", c) for r, c in straggler_ranks.items()]
    r = _post_many(apps[0], files)
    assert r.status_code == 200, r.text
    return r.json()


def test_several_files_are_one_upload_of_ranks_on_one_clock(apps, multi_upload, straggler_ranks):
    a, b = apps
    up = multi_upload
    assert up["ranks"]["ids"] == [0, 1, 3]  # distributedInfo.rank, in rank order, whatever order sent
    assert up["ranks"]["straggler_rank"] == 3 and max(up["ranks"]["compute_ms"]) == up["ranks"]["compute_ms"][2]
    head = _header(b, up["id"])
    groups = list(dict.fromkeys(t["group"] for t in head["tracks"]))
    assert [g.split(" · ")[0] for g in groups] == ["rank 0", "rank 0", "rank 1", "rank 1", "rank 3", "rank 3"], groups
    assert head["count"] > 3 * 10_000 and head["steps"]
    # a slice of rank 3 (the stack's third) answers with rank 3's own event
    q = b.post(f"/api/traces/{up['id']}/sql", json={"query": "SELECT count(*) FROM slice"}).json()["rows"][0][0]
    assert q < head["count"]  # the console reads the first rank's events
    ev = b.get(f"/api/traces/{up['id']}/slices/{2 * 10**9 + 5}")
    assert ev.status_code == 200 and ev.json()["ph"]
    assert b.get(f"/api/traces/{up['id']}/slices/{3 * 10**9 + 5}").status_code == 404
    page = b.get(f"/traces/{up['id']}")
    assert page.status_code == 200 and "rank 3" in page.text
    # the same files in another order are the same upload
    again = _post_many(a, [(f"host_{1000 + r}.pt.trace.json.gz", c) for r, c in sorted(straggler_ranks.items())])
    assert again.json()["id"] == up["id"]


def test_a_zip_and_a_tar_gz_of_a_trace_directory_read_as_those_ranks(apps, straggler_ranks, multi_upload):
    members = {f"log/host_{1000 + r}.pt.trace.json.gz": c for r, c in straggler_ranks.items()}
    members["log/notes.txt"] = b"not a trace"
    for name, body in (("traces.zip", _zip(members)), ("traces.tar.gz", _targz(members))):
        r = _post(apps[1], name, body)
        assert r.status_code == 200, r.text
        assert r.json()["ranks"] == multi_upload["ranks"], name


def test_ranks_come_from_file_names_then_order_when_traces_do_not_say(apps, ddp_json):
    doc = json.loads(ddp_json)
    doc.pop("distributedInfo", None)
    plain = json.dumps(doc).encode()
    r = _post(apps[0], "dir.zip", _zip({"worker_rank2.json": plain, "b.json": plain + b" ", "a.json": plain + b"  "}))
    assert r.status_code == 200, r.text
    assert r.json()["ranks"]["ids"] == [0, 1, 2] and r.json()["ranks"]["names"] == ["a.json", "b.json", "worker_rank2.json"]
    dup = _post(apps[0], "dup.zip", _zip({"rank1.json": plain, "x/rank1.json": plain}))
    assert dup.status_code == 400 and "two traces are rank 1" in dup.json()["error"]


def _refused(client, name, body, status, needle):
    r = _post(client, name, body)
    assert r.status_code == status and needle in r.json()["error"], r.text
    assert "\n" not in r.json()["error"] and len(r.json()["error"]) < 300


def test_archives_that_climb_out_hold_nothing_or_too_much_are_refused(apps, settings, ddp_json):
    a, _ = apps
    _refused(a, "evil.zip", _zip({"../../etc/rank0.json": ddp_json}), 400, "points outside the archive")
    _refused(a, "evil.tar.gz", _targz({"/abs/rank0.json": ddp_json}), 400, "points outside the archive")
    _refused(a, "empty.zip", _zip({"README.md": b"hi"}), 400, "holds no trace")
    _refused(a, "empty.tar.gz", _targz({"README.md": b"hi"}), 400, "holds no trace")
    _refused(a, "many.zip", _zip({f"r{i}.json": b"{}" for i in range(uploads.MAX_RANKS + 1)}), 400,
             f"over {uploads.MAX_RANKS} trace files")
    _refused(a, "entries.zip", _zip({f"f{i}.txt": b"" for i in range(uploads.MAX_ARCHIVE_MEMBERS + 1)}), 400, "entries")
    _refused(a, "cut.tar.gz", _targz({"rank0.json": ddp_json})[:-200], 400, "not a readable tar.gz archive")
    _refused(a, "cut.zip", _zip({"rank0.json": ddp_json})[:-30], 400, "not a readable zip archive")


@pytest.mark.timed
def test_an_archive_bomb_stops_at_the_limit_quickly(apps, settings):
    """1 GB of zeros in a ~1 MB zip and tar.gz, against a 50 MB limit: refused as it expands."""
    settings.max_trace_bytes = 50 * 2**20
    zeros = b"{" + bytes(2**30)
    for name, body in (("bomb.zip", _zip({"rank0.json": zeros})), ("bomb.tar.gz", _targz({"rank0.json": zeros}))):
        assert len(body) < 6e6
        t0 = time.perf_counter()
        _refused(apps[0], name, body, 413, "expands past")
        assert time.perf_counter() - t0 < 5


# --- errors on the upload page, the same reason as the JSON twin ---

@pytest.mark.parametrize("name,body,needle", [
    ("notes.txt", b"hello", "is not JSON"),
    ("list.json", b"[1, 2]", "is not JSON"),
    ("meta.json", b'{"schemaVersion": 1}', "traceEvents"),
    # mtime=0: the gzip header would carry the moment of collection, and pytest-xdist's workers
    # must collect the same parameters
    ("cut.json.gz", gzip.compress(b'{"traceEvents": []}' * 1000, mtime=0)[:-40], "truncated gzip"),
    ("empty.zip", _zip({"README.md": b"hi"}), "holds no trace"),
], ids=["text", "json-list", "no-events", "truncated-gzip", "empty-zip"])
def test_a_bad_file_gets_a_readable_page_and_the_twin_the_same_json(apps, name, body, needle):
    a, _ = apps
    api = _post(a, name, body)
    assert api.status_code == 400 and needle in api.json()["error"], api.text
    page = a.post("/upload", files={"trace": (name, body, "application/octet-stream")})
    assert page.status_code == 400 and page.headers["content-type"].startswith("text/html")
    assert 'role="alert"' in page.text and api.json()["error"] in page.text.replace("&#39;", "'").replace("&#34;", '"')
    assert page.text.lstrip().startswith("<!doctype html>") and 'id="upload-form"' in page.text


def test_ranks_written_relative_and_absolute_share_one_clock(apps, straggler_ranks):
    """Kineto 2024+ writes ts relative to baseTimeNanoseconds, older files epoch µs: a rank
    of each, sent together, are placed as the same two ranks written alike."""
    rel1 = gzip.decompress(straggler_ranks[1])
    doc = json.loads(rel1)
    base_us = doc["baseTimeNanoseconds"] / 1e3  # kept: a file may carry it beside epoch µs
    for ev in doc["traceEvents"]:
        if isinstance(ev.get("ts"), (int, float)):
            ev["ts"] = round(ev["ts"] + base_us, 3)
    absolute1 = json.dumps(doc, indent=1).encode()
    alike = _post_many(apps[0], [("a.json.gz", straggler_ranks[0]), ("b.json.gz", straggler_ranks[1])])
    mixed = _post_many(apps[0], [("a.json.gz", straggler_ranks[0]), ("b.json", absolute1)])
    assert alike.status_code == 200 and mixed.status_code == 200, mixed.text
    h1, h2 = _header(apps[1], alike.json()["id"]), _header(apps[1], mixed.json()["id"])
    assert h1["t0_ns"] > 1.6e18 and abs(h1["t0_ns"] - h2["t0_ns"]) < 2_000  # epoch ns, within float µs rounding
    assert h1["steps"] == h2["steps"] and h1["count"] == h2["count"]
    first1, first2 = _rank_start_ns(apps[1], alike.json()["id"], "rank 1"), _rank_start_ns(apps[1], mixed.json()["id"], "rank 1")
    assert first1 > 0 and abs(first1 - first2) < 2_000


def _rank_start_ns(client, uid: str, rank: str) -> float:
    """The first slice of a rank's tracks, ns after the timeline's t0."""
    import numpy as np

    body = client.get(f"/api/traces/{uid}/timeline.bin", headers={"Accept-Encoding": "identity"}).content
    n = int.from_bytes(body[:4], "little")
    head, data = json.loads(body[4:4 + n]), body[4 + n + (-(4 + n)) % 8:]
    cols = {c["name"]: np.frombuffer(data, c["dtype"], c["length"], c["offset"]) for c in head["columns"]}
    ours = [t["id"] for t in head["tracks"] if t["group"].startswith(rank + " · ")]
    return float(cols["ts"][np.isin(cols["track"], ours)].min())


def test_one_bad_rank_among_several_is_named_and_too_many_files_refused(apps, ddp_json):
    r = _post_many(apps[0], [("rank0.json", ddp_json), ("rank1.json", b"oops")])
    assert r.status_code == 400 and r.json()["error"].startswith("rank1.json is not JSON"), r.text
    r = _post_many(apps[0], [(f"r{i}.json", b"{}") for i in range(uploads.MAX_RANKS + 1)])
    assert r.status_code == 400 and f"over {uploads.MAX_RANKS} trace files" in r.json()["error"]
    page = _post_many(apps[0], [("rank0.json", ddp_json), ("rank1.json", b"oops")], url="/upload")
    assert page.status_code == 400 and "rank1.json is not JSON" in page.text and 'role="alert"' in page.text
