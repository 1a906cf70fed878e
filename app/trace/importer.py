"""Read any torch.profiler (Kineto) trace into a DuckDB table, one row per event.

Every variant of ../shared/kineto-format.md: plain or gzip; integer, float or relative
(baseTimeNanoseconds) µs; 2021 categories and string tids; with or without flows; AMD,
Triton's cuLaunchKernel; metadata, instant and counter events.

The fast path never makes a Python object per event: the `traceEvents` array's text is
cut out of the document (Kineto closes it on a line of its own) and handed to DuckDB's
parallel JSON array reader; only the small rest of the document goes through orjson.
A 237 MB, 1M-event trace loads in about 1.5 s on 2 cores (orjson into dicts alone takes
3.8 s). A file laid out otherwise (minified) falls back to orjson, then the same reader.
"""

from __future__ import annotations

import os
import re
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import orjson

DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB uncompressed; also bounds how far a gzip may expand

# Columns read from each event; anything else stays in `args`/the raw line.
# ts stays JSON until normalized: whether it was written as a float matters (HTA rounds
# float timestamps to whole µs and leaves integer ones alone).
_COLUMNS = ("{'ph': 'VARCHAR', 'cat': 'VARCHAR', 'name': 'VARCHAR', 'pid': 'JSON', 'tid': 'JSON', "
            "'ts': 'JSON', 'dur': 'DOUBLE', 'args': 'JSON', 'id': 'JSON', 's': 'VARCHAR', 'bp': 'VARCHAR'}")

# PyTorch 1.8/1.9 category names and their current equivalents.
_LEGACY_CATS = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel", "Memcpy": "gpu_memcpy",
                "Memset": "gpu_memset", "async_cpu_to_gpu": "ac2g", "async_gpu": "ac2g", "launch": "ac2g",
                "async": "ac2g"}

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
# Kineto closes traceEvents on a line of its own at the top level's indentation ("  ]");
# brackets inside events sit deeper or inline. A wrong cut cannot pass as a valid array,
# so DuckDB's parse error sends such a file to the slow path.
_ARRAY_END = re.compile(rb"\n[ \t]{0,2}\]")


class TraceImportError(ValueError):
    """The trace cannot be read; the message is one line naming what is wrong."""


class TraceTooLarge(TraceImportError):
    """Over the size limit, as sent or once decompressed (HTTP 413)."""


@dataclass
class ImportedTrace:
    """A trace in DuckDB: table `events` (one row per event) plus the top-level keys."""

    con: duckdb.DuckDBPyConnection
    meta: dict
    events: int
    source: str
    fast_path: bool
    float_ts: bool = False  # some ts written as a float (Kineto 2024+, or float absolute µs)
    cache: dict = field(default_factory=dict)  # derived tables analyses share (app.analysis.hta)

    @property
    def base_time_ns(self) -> int | None:
        return self.meta.get("baseTimeNanoseconds")


def read_bytes(source: str | Path | bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The uncompressed bytes of a trace file (gzip detected by magic), within `max_bytes`."""
    if isinstance(source, (bytes, bytearray)):
        raw = bytes(source)
        name = "upload"
    else:
        path = Path(source)
        if not path.is_file():
            raise TraceImportError(f"no such trace file: {path}")
        with open(path, "rb") as fh:
            head = fh.read(2)
        if head != b"\x1f\x8b" and path.stat().st_size > max_bytes:
            raise TraceTooLarge(f"{path.name} is {path.stat().st_size / 1e6:,.0f} MB, over the "
                                f"{max_bytes / 1e6:,.0f} MB limit")
        raw = path.read_bytes()
        name = path.name
    if raw[:2] == b"\x1f\x8b":
        return _gunzip(raw, max_bytes, name)
    if len(raw) > max_bytes:
        raise TraceTooLarge(f"{name} is {len(raw) / 1e6:,.0f} MB, over the {max_bytes / 1e6:,.0f} MB limit")
    return raw


def _gunzip(raw: bytes, max_bytes: int, name: str) -> bytes:
    """Decompress every gzip member, refusing to expand past `max_bytes` (a gzip bomb)."""
    out, total, data = [], 0, raw
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            chunk = d.decompress(data, max_bytes - total + 1)
        except zlib.error as e:
            raise TraceImportError(f"{name} is not valid gzip: {e}") from None
        total += len(chunk)
        if total > max_bytes:
            raise TraceTooLarge(f"{name} expands past the {max_bytes / 1e6:,.0f} MB limit when decompressed")
        out.append(chunk)
        if not d.eof:
            raise TraceImportError(f"{name} is a truncated gzip: the stream ends before its last block")
        data = d.unused_data.lstrip(b"\x00")
    return b"".join(out)


def load(source: str | Path | bytes, *, max_bytes: int = DEFAULT_MAX_BYTES,
         con: duckdb.DuckDBPyConnection | None = None) -> ImportedTrace:
    """Read a trace into `con` (a fresh in-memory DuckDB by default) as table `events`."""
    raw = read_bytes(source, max_bytes)
    name = "upload" if isinstance(source, (bytes, bytearray)) else Path(source).name
    con = con or duckdb.connect()
    start = raw.lstrip()[:1]
    if start != b"{":
        raise TraceImportError(f"{name} is not JSON: a trace starts with '{{', this starts with {raw[:20]!r}")
    used_fast = False
    split = _split_events(raw)
    if split is not None:
        try:
            meta = orjson.loads(split[0])
            _read_array(con, split[1])
            used_fast = True
        except (orjson.JSONDecodeError, duckdb.Error):
            con.execute("DROP TABLE IF EXISTS raw_events")
    if not used_fast:
        meta = _load_slow(con, raw, name)
    if not isinstance(meta, dict):
        raise TraceImportError(f"{name} is JSON but not a trace object")
    _normalize(con)
    n = con.execute("SELECT count(*) FROM events").fetchone()[0]
    missing = con.execute("SELECT count(*), any_value(name) FROM events WHERE ts IS NULL AND ph NOT IN ('M')"
                          ).fetchone()
    if missing[0]:
        raise TraceImportError(f"{name}: {missing[0]:,} events have no ts (first: {missing[1]!r})")
    float_ts = bool(con.execute("SELECT bool_or(ts_float) FROM events").fetchone()[0])
    return ImportedTrace(con=con, meta=meta, events=n, source=name, fast_path=used_fast, float_ts=float_ts)


def _split_events(raw: bytes) -> tuple[bytes, bytes] | None:
    """(the document with an empty traceEvents, the traceEvents array's text), or None
    when the array does not close on a line of its own."""
    m = _EVENTS_KEY.search(raw)
    if not m:
        return None
    end = _ARRAY_END.search(raw, m.end())
    if not end:
        return None
    close = end.end()  # just past the "]"
    return raw[:m.end()] + raw[close - 1:], raw[m.end() - 1:close]


def _read_array(con: duckdb.DuckDBPyConnection, array: bytes) -> None:
    """DuckDB reads files; /dev/shm keeps the round trip in memory where it exists."""
    tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.NamedTemporaryFile(suffix=".json", dir=tmp_dir, delete=False) as fh:
        fh.write(array)
        path = fh.name
    try:
        con.execute(f"CREATE OR REPLACE TABLE raw_events AS SELECT * FROM read_json(?, format='array', "
                    f"columns={_COLUMNS}, maximum_object_size=67108864)", [path])
    finally:
        os.unlink(path)


def _load_slow(con: duckdb.DuckDBPyConnection, raw: bytes, name: str) -> dict:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise TraceImportError(f"{name} is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise TraceImportError(f"{name} is JSON but not a trace object (it is a {type(doc).__name__})")
    events = doc.pop("traceEvents", None)
    if not isinstance(events, list):
        raise TraceImportError(f"{name} has no traceEvents array")
    if not events:
        raise TraceImportError(f"{name} has an empty traceEvents array")
    _read_array(con, orjson.dumps(events))
    return doc


def _normalize(con: duckdb.DuckDBPyConnection) -> None:
    """`events`: the raw columns plus what analysis joins on, in one vocabulary.

    pid/tid as text (legacy files use strings such as "stream 7"); `stream` from
    args.stream or the legacy tid; `correlation` and `external_id` from args (legacy
    files spell it "external id"); legacy categories mapped to today's names.
    """
    cats = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in _LEGACY_CATS.items())
    con.execute(f"""
        CREATE OR REPLACE TABLE events AS
        SELECT row_number() OVER () - 1 AS idx,
               ph, CASE cat {cats} ELSE cat END AS cat, name,
               CASE WHEN json_type(pid) = 'VARCHAR' THEN pid ->> '$' ELSE CAST(pid AS VARCHAR) END AS pid,
               CASE WHEN json_type(tid) = 'VARCHAR' THEN tid ->> '$' ELSE CAST(tid AS VARCHAR) END AS tid,
               TRY_CAST(ts AS DOUBLE) AS ts, json_type(ts) = 'DOUBLE' AS ts_float, dur,
               COALESCE(TRY_CAST(args ->> 'stream' AS BIGINT),
                        TRY_CAST(regexp_extract(tid ->> '$', '^stream (\\d+)', 1) AS BIGINT)) AS stream,
               TRY_CAST(args ->> 'correlation' AS BIGINT) AS correlation,
               TRY_CAST(COALESCE(args ->> 'External id', args ->> 'external id') AS BIGINT) AS external_id,
               args, id, s, bp
        FROM raw_events
    """)
    con.execute("DROP TABLE raw_events")
