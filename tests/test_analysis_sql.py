"""The SQL console: Perfetto-like tables over a trace, and a sandbox nobody gets out of."""

from __future__ import annotations

import json
import time

import pytest

import scenarios
from app.analysis import sql
from app.trace import importer, kineto


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    path = tmp_path_factory.mktemp("sql") / "ddp.json.gz"
    inst = scenarios.get("ddp").instance("canonical")
    kineto.save(inst.trace(0), path)
    return importer.load(path)


def test_tables_describe_the_trace(ddp):
    n_x = ddp.con.execute("SELECT count(*) FROM events WHERE ph = 'X' AND cat <> 'Trace'").fetchone()[0]
    assert sql.run(ddp, "SELECT count(*) FROM slice WHERE category <> 'Trace'").rows == [[n_x]]
    tracks = dict(sql.run(ddp, "SELECT name, type FROM track").rows)
    assert tracks["stream 7"] == "gpu_stream" and any("pt_main_thread" in t for t in tracks)
    labels = {r[0] for r in sql.run(ddp, "SELECT label FROM process").rows}
    assert {"CPU", "GPU 0"} <= labels
    steps = sql.run(ddp, "SELECT depth, dur FROM slice WHERE name LIKE 'ProfilerStep#%' ORDER BY ts").rows
    assert all(d == 0 for d, _ in steps) and len(steps) == 4
    # A forward launch sits in its aten op, in DistributedDataParallel.forward, in the step.
    depth = sql.run(ddp, "SELECT min(s.depth) FROM slice s JOIN track t ON t.id = s.track_id "
                         "WHERE s.name = 'cudaLaunchKernel' AND t.name LIKE '%pt_main_thread%'").rows[0][0]
    assert depth == 3
    step_ns = sql.run(ddp, "SELECT median(d) FROM (SELECT lead(ts) OVER (ORDER BY ts) - ts AS d FROM slice "
                           "WHERE name LIKE 'ProfilerStep#%') WHERE d IS NOT NULL").rows[0][0]
    key_ms = next(o["value"] for o in scenarios.get("ddp").instance("canonical").key["observations"]
                  if o["id"] == "step_ms")
    assert step_ns / 1e6 == pytest.approx(key_ms, rel=0.02), "ts and dur are in ns"


def test_counter_events_become_counter_rows(tmp_path):
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "C", "name": "mem", "pid": 1, "tid": 1, "ts": 12, "args": {"allocated": 5.5, "reserved": 8}},
    ]}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    rows = sql.run(importer.load(path), "SELECT name, value, ts FROM counter ORDER BY name").rows
    assert rows == [["mem.allocated", 5.5, 12000], ["mem.reserved", 8.0, 12000]]


@pytest.mark.parametrize("query,kind,needle", [
    ("SELECT * FROM read_csv('/etc/passwd')", sql.QueryRefused, "Permission"),
    ("SELECT * FROM read_text('/etc/passwd')", sql.QueryRefused, "Permission"),
    ("SELECT * FROM '/etc/passwd'", sql.QueryFailed, "does not exist"),
    ("SELECT * FROM glob('/etc/*')", sql.QueryRefused, "Permission"),
    ("COPY slice TO '/tmp/tracedojo-leak.csv'", sql.QueryRefused, "not COPY"),
    ("ATTACH '/tmp/other.db' AS other", sql.QueryRefused, "not ATTACH"),
    ("INSTALL httpfs", sql.QueryRefused, "not LOAD"),
    ("LOAD httpfs", sql.QueryRefused, "not LOAD"),
    ("SET enable_external_access = true", sql.QueryRefused, "not SET"),
    ("PRAGMA enable_profiling", sql.QueryRefused, "not PRAGMA"),
    ("DROP TABLE slice", sql.QueryRefused, "not DROP"),
    ("SELECT 1; SELECT 2", sql.QueryRefused, "one statement"),
    ("SELEC 1", sql.QueryFailed, "syntax error"),
    ("SELECT nope FROM slice", sql.QueryFailed, "nope"),
])
def test_sandbox_refuses_and_explains(ddp, query, kind, needle):
    with pytest.raises(kind) as e:
        sql.run(ddp, query)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_settings_stay_locked_even_through_select(ddp):
    sql.prepare(ddp)
    assert sql.run(ddp, "SELECT current_setting('enable_external_access')").rows == [[False]]
    with pytest.raises(sql.QueryRefused):
        sql.run(ddp, "SELECT * FROM read_json('/etc/hostname')")


def test_a_query_that_runs_forever_is_interrupted(ddp):
    t0 = time.perf_counter()
    with pytest.raises(sql.QueryFailed) as e:
        sql.run(ddp, "SELECT count(*) FROM range(1000000000000) a, range(1000) b", timeout_s=0.5)
    assert "time limit" in str(e.value) and time.perf_counter() - t0 < 5
    assert sql.run(ddp, "SELECT 1").rows == [[1]], "the connection still works after an interrupt"


def test_row_limit_truncates(ddp):
    r = sql.run(ddp, "SELECT id FROM slice", max_rows=10)
    assert len(r.rows) == 10 and r.truncated
