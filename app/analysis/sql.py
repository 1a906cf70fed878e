"""A read-only SQL console over one trace, with Perfetto-like tables, in a locked DuckDB.

Tables (times in ns, as Perfetto's trace processor has them):
  process(upid, pid, name, label)            thread(utid, upid, tid, name)
  track(id, name, type, upid, utid)          type: 'thread' or 'gpu_stream'
  slice(id, ts, dur, track_id, category, name, depth, args)
  counter(id, ts, track_id, name, value)     from `C` events, one track per series

Two locks: the connection's own configuration (no file system, no extensions, then the
configuration itself is frozen) and a statement allowlist (SELECT, and EXPLAIN of one),
so ATTACH, COPY, SET, PRAGMA, INSTALL/LOAD and any write are refused before they run.
A timer interrupts a query past its time limit; results stop at a row limit.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import duckdb
import numpy as np

from app.trace.importer import ImportedTrace

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MAX_ROWS = 10_000


class QueryRefused(ValueError):
    """The statement is not allowed here; the message says why."""


class QueryFailed(ValueError):
    """DuckDB rejected or interrupted the query; the message is DuckDB's."""


@dataclass
class Result:
    columns: list[str]
    rows: list[list]
    truncated: bool

    def as_json(self) -> dict:
        return {"columns": self.columns, "rows": self.rows, "truncated": self.truncated}


def prepare(tr: ImportedTrace) -> duckdb.DuckDBPyConnection:
    """Build the Perfetto-like tables on the trace's connection, then lock it.

    After this the connection can still run the analyses' SELECTs, but nothing can
    reach the file system, load an extension or change a setting."""
    if tr.cache.get("sql_ready"):
        return tr.con
    con = tr.con
    con.execute("""
        CREATE OR REPLACE TABLE process AS
        SELECT row_number() OVER (ORDER BY pid) - 1 AS upid, pid,
               max(CASE WHEN name = 'process_name' THEN args ->> 'name' END) AS name,
               max(CASE WHEN name = 'process_labels' THEN args ->> 'labels' END) AS label
        FROM events WHERE pid IS NOT NULL GROUP BY pid
    """)
    con.execute("""
        CREATE OR REPLACE TABLE thread AS
        SELECT row_number() OVER (ORDER BY e.pid, e.tid) - 1 AS utid, p.upid, e.tid,
               trim(max(CASE WHEN e.ph = 'M' AND e.name = 'thread_name' THEN e.args ->> 'name' END)) AS name
        FROM events e JOIN process p USING (pid) WHERE e.tid IS NOT NULL GROUP BY e.pid, e.tid, p.upid
    """)
    con.execute("""
        CREATE OR REPLACE TABLE track AS
        SELECT t.utid AS id, COALESCE(t.name, 'thread ' || t.tid) AS name,
               CASE WHEN EXISTS (SELECT 1 FROM events g WHERE g.pid = p.pid AND g.tid = t.tid
                                 AND g.cat IN ('kernel', 'gpu_memcpy', 'gpu_memset'))
                    THEN 'gpu_stream' ELSE 'thread' END AS type,
               t.upid, t.utid
        FROM thread t JOIN process p USING (upid)
    """)
    ts = con.execute("""
        SELECT e.idx, round(e.ts * 1000)::BIGINT AS ts, round(e.dur * 1000)::BIGINT AS dur, th.utid AS track_id
        FROM events e JOIN process p ON p.pid = e.pid JOIN thread th ON th.upid = p.upid AND th.tid = e.tid
        WHERE e.ph = 'X' AND e.dur IS NOT NULL AND e.ts IS NOT NULL
        ORDER BY track_id, ts, dur DESC
    """).fetchnumpy()
    depth = _depths(ts["track_id"], ts["ts"], ts["ts"] + ts["dur"])
    # DuckDB scans a dict of numpy arrays in place: no Python object per slice.
    con.register("_depth", {"idx": np.asarray(ts["idx"], np.int64), "depth": depth})
    con.execute("""
        CREATE OR REPLACE TABLE slice AS
        SELECT e.idx AS id, round(e.ts * 1000)::BIGINT AS ts, round(e.dur * 1000)::BIGINT AS dur,
               th.utid AS track_id, e.cat AS category, e.name, d.depth, e.args
        FROM events e JOIN process p ON p.pid = e.pid JOIN thread th ON th.upid = p.upid AND th.tid = e.tid
        JOIN _depth d ON d.idx = e.idx
        WHERE e.ph = 'X' AND e.dur IS NOT NULL AND e.ts IS NOT NULL
    """)
    con.execute("""
        CREATE OR REPLACE TABLE counter AS
        SELECT row_number() OVER () - 1 AS id, round(e.ts * 1000)::BIGINT AS ts, th.utid AS track_id,
               e.name || '.' || k.key AS name, TRY_CAST(k.value AS DOUBLE) AS value
        FROM events e JOIN process p ON p.pid = e.pid JOIN thread th ON th.upid = p.upid AND th.tid = e.tid,
             json_each(e.args) k
        WHERE e.ph = 'C'
    """)
    con.unregister("_depth")
    for setting in ("SET enable_external_access = false", "SET autoinstall_known_extensions = false",
                    "SET autoload_known_extensions = false", "SET allow_community_extensions = false",
                    "SET lock_configuration = true"):
        con.execute(setting)
    tr.cache["sql_ready"] = True
    return con


def _depths(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of each slice, rows sorted by (track, start, longer first): the
    slices of its track that started before it and have not ended by its start."""
    depth = np.zeros(len(start), np.int32)
    bounds = np.flatnonzero(np.diff(track)) + 1
    for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(start)]])):
        s, e = start[lo:hi], end[lo:hi]
        ended = np.searchsorted(np.sort(e), s, side="right")
        depth[lo:hi] = np.maximum(np.arange(hi - lo) - ended, 0)
    return depth


def check(query: str) -> None:
    """Refuse anything but one SELECT (or EXPLAIN of one)."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as e:
        raise QueryFailed(str(e).splitlines()[0]) from None
    if len(statements) != 1:
        raise QueryRefused(f"one statement at a time, got {len(statements)}")
    kind = statements[0].type
    if kind not in ALLOWED:
        raise QueryRefused(f"only SELECT queries are allowed here, not {kind.name}")


def run(tr: ImportedTrace, query: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
        max_rows: int = DEFAULT_MAX_ROWS) -> Result:
    check(query)
    con = prepare(tr)
    timer = threading.Timer(timeout_s, con.interrupt)
    timer.start()
    try:
        cur = con.execute(query)
        rows = cur.fetchmany(max_rows + 1)
        columns = [d[0] for d in cur.description or []]
    except duckdb.InterruptException:
        raise QueryFailed(f"query interrupted after the {timeout_s:g} s time limit") from None
    except duckdb.PermissionException as e:  # file system or extension access: the lock held
        raise QueryRefused(str(e).splitlines()[0]) from None
    except duckdb.Error as e:
        raise QueryFailed(str(e).splitlines()[0]) from None
    finally:
        timer.cancel()
    truncated = len(rows) > max_rows
    return Result(columns, [list(r) for r in rows[:max_rows]], truncated)
