"""A read-only SQL console over one trace, with Perfetto-like tables, in a locked DuckDB.

Tables (times in ns, as Perfetto's trace processor has them):
  process(upid, pid, name, label)            thread(utid, upid, tid, name)
  track(id, name, type, upid, utid)          type: 'thread' or 'gpu_stream'
  slice(id, ts, dur, track_id, category, name, depth, args)
  counter(id, ts, track_id, name, value)     from `C` events, one track per series

`prepare` builds them into the trace's database file once, at import; every query then
opens that file on its own connection and closes it after, so nothing one user runs can
be seen by the next. Locks, each enough alone against a write:
- a statement allowlist (one SELECT, or EXPLAIN of one), and no keyword that writes or
  changes state (INSERT, COPY, ATTACH, SET...) anywhere outside literals and comments:
  `EXPLAIN ANALYZE UPDATE` and `WITH x AS (INSERT ... RETURNING ...) SELECT` parse as
  EXPLAIN and SELECT;
- the connection: read-only, one thread, a memory limit, no spilling, no file system
  beyond the database, no extensions, then its configuration frozen.
Limits on what comes back: a row limit, a byte limit on the cells' JSON (fetched in
batches, stopping at the limit), a time limit over execute, fetch and conversion, and a
few queries at once per process.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import orjson

from app.trace.importer import ImportedTrace, load

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
# Words that write or change state; as bare keywords or identifiers they refuse a query
# (a column named "load" has to be quoted). REPLACE is left out: it is also a string function.
WRITES = frozenset({
    "INSERT", "UPDATE", "DELETE", "MERGE", "UPSERT", "TRUNCATE", "CREATE", "DROP", "ALTER", "COPY", "EXPORT",
    "IMPORT", "ATTACH", "DETACH", "USE", "INSTALL", "LOAD", "SET", "RESET", "PRAGMA", "CALL", "VACUUM",
    "CHECKPOINT", "COMMENT", "GRANT", "REVOKE", "BEGIN", "COMMIT", "ROLLBACK", "PREPARE", "EXECUTE", "DEALLOCATE",
})
# How a statement EXPLAIN may wrap begins (a parenthesised one too); anything else is refused.
_SELECT_STARTS = frozenset({"SELECT", "WITH", "FROM", "VALUES", "TABLE", "SUMMARIZE", "DESCRIBE", "SHOW", "("})
_MAX_ECHO_CHARS = 200  # of a query (or DuckDB's quote of one) in a message


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 5.0
    max_rows: int = 10_000
    max_bytes: int = 2**20  # of the rows' JSON
    memory_limit_mb: int = 256
    max_concurrent: int = 2  # queries at once in this process


class QueryRefused(ValueError):
    """The statement is not allowed here; the message says why."""


class QueryFailed(ValueError):
    """DuckDB rejected or interrupted the query; the message is DuckDB's."""


class QueryBusy(RuntimeError):
    """Too many queries are running in this process; try again shortly."""


@dataclass
class Result:
    columns: list[str]
    rows: list[list]
    truncated: bool

    def as_json(self) -> dict:
        return {"columns": self.columns, "rows": self.rows, "truncated": self.truncated}


def prepare(tr: ImportedTrace) -> None:
    """Build the Perfetto-like tables beside `events` in the trace's database."""
    if tr.cache.get("sql_ready"):
        return
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
    tr.cache["sql_ready"] = True


def database(source: str | Path | bytes, path: Path, **load_options) -> Path:
    """Import a trace into a new database file at `path` with the console's tables: what
    `run` opens. (An upload is built the same way, with its read beside it: app/uploads.py.)"""
    con = duckdb.connect(str(path))
    try:
        prepare(load(source, con=con, **load_options))
    finally:
        con.close()
    return path


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


def connect(database: str | Path, memory_limit_mb: int = Limits.memory_limit_mb) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a trace's database that reaches nothing else.

    Every reader in a process must pass the same settings: DuckDB shares one instance per
    file per process and refuses a second configuration while a connection is open."""
    return duckdb.connect(str(database), read_only=True, config={
        "threads": 1, "memory_limit": f"{memory_limit_mb}MB",
        # No spilling: a query fits the memory limit or fails. (Not temp_directory="": DuckDB
        # applies these in no fixed order, and that one fails once external access is off.)
        "max_temp_directory_size": "0B",
        "enable_external_access": False, "autoinstall_known_extensions": False,
        "autoload_known_extensions": False, "allow_community_extensions": False,
        "lock_configuration": True,
    })


def check(query: str) -> None:
    """Refuse anything but one SELECT (or EXPLAIN of one) that names no writing keyword."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as e:
        raise QueryFailed(_one_line(e)) from None
    if len(statements) != 1:
        raise QueryRefused(f"one statement at a time, got {len(statements)}")
    kind = statements[0].type
    if kind not in ALLOWED:
        raise QueryRefused(f"only SELECT queries are allowed here, not {kind.name}")
    words = _words(query)
    writing = next((w for _, w in words if w in WRITES), None)
    if writing:
        raise QueryRefused(f"only SELECT queries are allowed here: {writing} writes or changes state")
    if kind == duckdb.StatementType.EXPLAIN and _explained(query, words) != duckdb.StatementType.SELECT:
        raise QueryRefused("EXPLAIN is allowed of a SELECT only")


def _words(query: str) -> list[tuple[int, str]]:
    """(position, text upper-cased) of each keyword, unquoted identifier and operator, by
    DuckDB's own tokenizer: string literals, quoted identifiers and comments drop out
    exactly as the parser sees them (E'\\'' and $$...$$ included)."""
    tokens = duckdb.tokenize(query)
    ends = [p for p, _ in tokens[1:]] + [len(query)]
    out = []
    for (pos, kind), end in zip(tokens, ends):
        text = query[pos:end].strip()
        if kind in (duckdb.token_type.keyword, duckdb.token_type.operator) or (
                kind == duckdb.token_type.identifier and not text.startswith('"')):
            out.append((pos, text.upper()))
    return out


def _explained(query: str, words: list[tuple[int, str]]) -> duckdb.StatementType | None:
    """The type of the statement after EXPLAIN [ANALYZE] [(options)]."""
    i = 2 if len(words) > 1 and words[1][1] == "ANALYZE" else 1
    if i + 1 < len(words) and words[i][1] == "(" and words[i + 1][1] not in _SELECT_STARTS:
        depth = 0
        for i in range(i, len(words)):  # past the options' closing parenthesis
            depth += words[i][1].count("(") - words[i][1].count(")")
            if depth == 0:
                i += 1
                break
    if i >= len(words) or words[i][1] not in _SELECT_STARTS:
        return None
    try:
        inner = duckdb.extract_statements(query[words[i][0]:])
    except duckdb.Error:
        return None
    return inner[0].type if len(inner) == 1 else None


_running = 0  # queries running in this process
_running_lock = threading.Lock()


@contextmanager
def _slot(max_concurrent: int) -> Iterator[None]:
    """Past `max_concurrent` queries at once, refuse rather than queue: each holds a core
    until its time limit, and a queue would hold every later user behind them."""
    global _running
    with _running_lock:
        if _running >= max_concurrent:
            raise QueryBusy(f"{_running} SQL queries are already running on this server; try again in a few seconds")
        _running += 1
    try:
        yield
    finally:
        with _running_lock:
            _running -= 1


def run(database: str | Path, query: str, limits: Limits = Limits()) -> Result:
    """One query on a trace's database file (built by `prepare`), within `limits`."""
    check(query)
    with _slot(limits.max_concurrent):
        try:
            con = connect(database, limits.memory_limit_mb)
        except duckdb.Error as e:  # the file is gone (an upload dropped since it was found)
            raise QueryFailed(_one_line(e)) from None
        try:
            return _fetch(con, query, limits)
        finally:
            con.close()


def _fetch(con: duckdb.DuckDBPyConnection, query: str, limits: Limits) -> Result:
    deadline = time.monotonic() + limits.timeout_s
    interrupted = QueryFailed(f"interrupted after {limits.timeout_s:g} s, the time limit")

    def interrupt() -> None:
        with suppress(duckdb.Error):  # the query may have just finished
            con.interrupt()

    timer = threading.Timer(limits.timeout_s, interrupt)
    timer.start()
    try:
        cur = con.execute(query)
        columns = [d[0] for d in cur.description or []]
        rows: list[list] = []
        size_bytes, truncated, batch = 0, False, 1
        while not truncated and (chunk := cur.fetchmany(batch)):
            for raw in chunk:
                if len(rows) == limits.max_rows:
                    truncated = True
                    break
                row = [_cell(v) for v in raw]
                size_bytes += len(orjson.dumps(row))
                if size_bytes > limits.max_bytes:
                    truncated = True
                    break
                rows.append(row)
            if time.monotonic() > deadline:
                raise interrupted
            # Rows are converted a batch at a time: size a batch to fit the byte budget
            # at the mean row size so far (a 1 MB cell is fetched alone, small ones by the thousand).
            mean = size_bytes / max(len(rows), 1)
            batch = int(max(1, min(1024, (limits.max_bytes - size_bytes) / max(mean, 1))))
    except duckdb.InterruptException:
        raise interrupted from None
    except duckdb.PermissionException as e:  # file system or extension access: the lock held
        raise QueryRefused(_one_line(e)) from None
    except duckdb.Error as e:
        msg = _one_line(e)
        if "read-only mode" in msg:  # a write got past check(): the read-only connection held
            raise QueryRefused(msg) from None
        raise QueryFailed(msg) from None
    finally:
        timer.cancel()
    return Result(columns, rows, truncated)


def _cell(v):
    """A value JSON can carry: NaN as null, infinities as strings, numbers past 64 bits,
    dates, decimals and bytes as text; lists and structs as JSON (NaN inside as null)."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v if -2**63 <= v < 2**64 else str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return None
        return v if math.isfinite(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, (list, tuple, dict)):
        try:
            return orjson.loads(orjson.dumps(v, default=str, option=orjson.OPT_NON_STR_KEYS))
        except orjson.JSONEncodeError:  # past 64-bit ints or orjson's nesting limit
            return str(v)
    return str(v)


def _one_line(e: Exception) -> str:
    line = str(e).splitlines()[0] if str(e) else type(e).__name__
    return line if len(line) <= _MAX_ECHO_CHARS else line[:_MAX_ECHO_CHARS] + "…"
