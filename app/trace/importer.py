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

import io
import mmap
import os
import re
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import duckdb
import orjson

DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB uncompressed; also bounds how far a gzip may expand
MAX_LEADING_WHITESPACE_BYTES = 1 << 20  # Kineto writes "{" first; more blank than this is not a trace
GZIP_MAGIC = b"\x1f\x8b"
_CHUNK_BYTES = 1 << 20  # gzip input read, and output produced, per step

# Columns read from each event; anything else stays in `args`/the raw line.
# ts stays JSON until normalized: whether it was written as a float matters (HTA rounds
# float timestamps to whole µs and leaves integer ones alone). dur too, so a string there
# reaches _validate instead of failing the read. Every column takes any JSON value, so the
# only record the reader cannot take is one that is not an object.
_COLUMNS = ("{'ph': 'VARCHAR', 'cat': 'VARCHAR', 'name': 'VARCHAR', 'pid': 'JSON', 'tid': 'JSON', "
            "'ts': 'JSON', 'dur': 'JSON', 'args': 'JSON', 'id': 'JSON', 's': 'VARCHAR', 'bp': 'VARCHAR'}")

# Bounds of a time in a real trace, µs. ts counts from the Unix epoch (absolute files:
# 1.7e15 in 2024) or from baseTimeNanoseconds (relative files: under a quarter, 8e12).
# The SQL console and the viewer hold times as int64 ns, which end at 9.2e15 µs (2262);
# ±4e15 µs (2096) leaves ts + dur inside that.
MAX_TS_US = 4e15
# A profiler window lasts seconds to minutes; 1e12 µs is 11.6 days.
MAX_DUR_US = 1e12

# PyTorch 1.8/1.9 category names and their current equivalents.
_LEGACY_CATS = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel", "Memcpy": "gpu_memcpy",
                "Memset": "gpu_memset", "async_cpu_to_gpu": "ac2g", "async_gpu": "ac2g", "launch": "ac2g",
                "async": "ac2g"}

_BLANK = re.compile(rb"[ \t\r\n]*")  # JSON's whitespace
_TEMP_FILE = re.compile(r' in file "[^"]*",?')  # DuckDB names its input; the server's paths are not the user's business
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
    size_bytes: int = 0  # the document uncompressed (what several ranks' budget adds up)
    cache: dict = field(default_factory=dict)  # derived tables analyses share (app.analysis.hta)

    @property
    def base_time_ns(self) -> int | None:
        return self.meta.get("baseTimeNanoseconds")


@contextmanager
def uncompressed(source: str | Path | bytes, max_bytes: int = DEFAULT_MAX_BYTES, name: str | None = None,
                 tmp_dir: str | None = None) -> Iterator[bytes | mmap.mmap]:
    """The uncompressed trace (gzip detected by magic), within `max_bytes`: the bytes given,
    or the file mapped into memory, never read into one Python bytes object. A gzip is
    first decompressed, chunk by chunk, into a temporary file in `tmp_dir`."""
    if isinstance(source, (bytes, bytearray)):
        name = name or "upload"
        if source[:2] == GZIP_MAGIC:
            with tempfile.TemporaryFile(dir=tmp_dir) as out:
                _gunzip(io.BytesIO(source), out, max_bytes, name)
                with _mapped(out) as doc:
                    yield doc
            return
        if len(source) > max_bytes:
            raise TraceTooLarge(f"{name} is {len(source) / 1e6:,.0f} MB, over the {max_bytes / 1e6:,.0f} MB limit")
        yield bytes(source)
        return
    path = Path(source)
    name = name or path.name
    if not path.is_file():
        raise TraceImportError(f"no such trace file: {path}")
    with open(path, "rb") as fh:
        if fh.read(2) == GZIP_MAGIC:
            fh.seek(0)
            with tempfile.TemporaryFile(dir=tmp_dir) as out:
                _gunzip(fh, out, max_bytes, name)
                with _mapped(out) as doc:
                    yield doc
            return
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            raise TraceTooLarge(f"{name} is {size / 1e6:,.0f} MB, over the {max_bytes / 1e6:,.0f} MB limit")
        with _mapped(fh) as doc:
            yield doc


@contextmanager
def _mapped(fh: BinaryIO) -> Iterator[bytes | mmap.mmap]:
    fh.flush()
    if os.fstat(fh.fileno()).st_size == 0:  # mmap refuses an empty file
        yield b""
        return
    with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as doc:
        yield doc


def _gunzip(src: BinaryIO, dst: BinaryIO, max_bytes: int, name: str) -> None:
    """Decompress every gzip member of `src` into `dst` a chunk at a time, stopping as soon
    as the output passes `max_bytes` (a gzip bomb) or starts as no trace can."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data, ended, total, lead = b"", False, 0, _Lead(name)
    while True:
        if not data and not ended:
            data = src.read(_CHUNK_BYTES)
            ended = not data
        try:
            # Bounding the output per call keeps a 1000:1 bomb from expanding a whole input chunk at once.
            out = d.decompress(data, _CHUNK_BYTES)
        except zlib.error as e:
            raise TraceImportError(f"{name} is not valid gzip: {e}") from None
        data = d.unconsumed_tail
        total += len(out)
        if total > max_bytes:
            raise TraceTooLarge(f"{name} expands past the {max_bytes / 1e6:,.0f} MB limit when decompressed")
        lead.feed(out)
        dst.write(out)
        if d.eof:
            data = d.unused_data.lstrip(b"\x00")  # members may be padded with NULs
            while not data and not ended:
                more = src.read(_CHUNK_BYTES)
                ended, data = not more, more.lstrip(b"\x00")
            if not data:
                return
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif ended and not out and not data:
            raise TraceImportError(f"{name} is a truncated gzip: the stream ends before its last block")


class _Lead:
    """Whether a document starts as a trace does ('{' after any whitespace), decided from
    its first bytes: a file of a billion spaces is refused after a mebibyte of them."""

    def __init__(self, name: str):
        self.name, self.spaces, self.decided = name, 0, False

    def feed(self, chunk: bytes | memoryview) -> None:
        if self.decided or not len(chunk):
            return
        blank = _BLANK.match(chunk).end()
        self.spaces += blank
        if blank < len(chunk):
            start = bytes(chunk[blank:blank + 20])
            if start[:1] != b"{":
                raise TraceImportError(f"{self.name} is not JSON: a trace starts with '{{', this starts with {start!r}")
            self.decided = True
        elif self.spaces > MAX_LEADING_WHITESPACE_BYTES:
            raise TraceImportError(f"{self.name} starts with over {MAX_LEADING_WHITESPACE_BYTES // 2**20} MiB "
                                   f"of whitespace: not a trace")

    def finish(self) -> None:
        if not self.decided:
            raise TraceImportError(f"{self.name} is not JSON: a trace starts with '{{', this is blank")


def load(source: str | Path | bytes, *, max_bytes: int = DEFAULT_MAX_BYTES,
         con: duckdb.DuckDBPyConnection | None = None, name: str | None = None,
         tmp_dir: str | None = None) -> ImportedTrace:
    """Read a trace into `con` (a fresh in-memory DuckDB by default) as table `events`.

    `name` is what messages call the trace (the file's name by default); temporary files
    (a decompressed gzip, the events array for DuckDB) go to `tmp_dir` when given."""
    name = name or ("upload" if isinstance(source, (bytes, bytearray)) else Path(source).name)
    con = con or duckdb.connect()
    # Views of a mapped file are released by `with` even when an error's traceback still
    # holds them: the file cannot be unmapped while one is live.
    with uncompressed(source, max_bytes, name, tmp_dir) as doc, memoryview(doc) as view:
        lead = _Lead(name)
        with view[:MAX_LEADING_WHITESPACE_BYTES + 1] as head:
            lead.feed(head)
        lead.finish()
        used_fast = False
        split = _split_events(doc)
        if split is not None:
            rest, (start, end) = split
            try:
                meta = orjson.loads(rest)
                with view[start:end] as array:
                    _read_array(con, array, tmp_dir)
                used_fast = True
            except (orjson.JSONDecodeError, duckdb.Error):
                con.execute("DROP TABLE IF EXISTS raw_events")
        if not used_fast:
            meta = _load_slow(con, view, name, tmp_dir)
        size_bytes = len(view)
    if not isinstance(meta, dict):
        raise TraceImportError(f"{name} is JSON but not a trace object")
    _normalize(con)
    _validate(con, name)
    n = con.execute("SELECT count(*) FROM events").fetchone()[0]
    missing = con.execute("SELECT count(*), any_value(name) FROM events WHERE ts IS NULL AND ph NOT IN ('M')"
                          ).fetchone()
    if missing[0]:
        raise TraceImportError(f"{name}: {missing[0]:,} events have no ts (first: {missing[1]!r})")
    float_ts = bool(con.execute("SELECT bool_or(ts_float) FROM events").fetchone()[0])
    return ImportedTrace(con=con, meta=meta, events=n, source=name, fast_path=used_fast, float_ts=float_ts,
                         size_bytes=size_bytes)


def _split_events(doc: bytes | mmap.mmap) -> tuple[bytes, tuple[int, int]] | None:
    """(the document with an empty traceEvents, the traceEvents array's [start, end) in
    `doc`), or None when the array does not close on a line of its own."""
    m = _EVENTS_KEY.search(doc)
    if not m:
        return None
    end = _ARRAY_END.search(doc, m.end())
    if not end:
        return None
    close = end.end()  # just past the "]"
    return doc[:m.end()] + doc[close - 1:], (m.end() - 1, close)


def _read_array(con: duckdb.DuckDBPyConnection, array: bytes | memoryview, tmp_dir: str | None = None) -> None:
    """DuckDB reads files; /dev/shm keeps the round trip in memory where it exists, unless
    the caller names a directory (an upload's, on disk, so a big trace is not held twice in RAM).
    A memoryview of a mapped file goes to the kernel as it is: no Python copy. The raw rows
    are a temporary table: in a database file, only the normalized `events` is written out."""
    if tmp_dir is None and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        tmp_dir = "/dev/shm"
    with tempfile.NamedTemporaryFile(suffix=".json", dir=tmp_dir, delete=False) as fh:
        fh.write(array)
        path = fh.name
    try:
        # ignore_errors: a record that is not an object (a number, a string, an array) reads
        # as a row of NULLs, for _validate to name, rather than failing the read. Parse
        # errors still fail: the array format cannot skip them.
        con.execute(f"CREATE OR REPLACE TEMP TABLE raw_events AS SELECT * FROM read_json(?, format='array', "
                    f"columns={_COLUMNS}, maximum_object_size=67108864, ignore_errors=true)", [path])
    finally:
        os.unlink(path)


def _load_slow(con: duckdb.DuckDBPyConnection, raw: bytes | memoryview, name: str, tmp_dir: str | None) -> dict:
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
    try:
        array = orjson.dumps(events)
    except orjson.JSONEncodeError as e:  # orjson writes 255 levels of nesting, reads 1024
        raise TraceImportError(f"{name}: an event nests deeper than the importer can copy ({e})") from None
    try:
        _read_array(con, array, tmp_dir)
    except duckdb.Error as e:  # an event of the wrong shape ("dur": "abc", a bare number)
        reason = _TEMP_FILE.sub("", str(e).splitlines()[0])[:200]
        raise TraceImportError(f"{name} has events that cannot be read: {reason}") from None
    return doc


def _normalize(con: duckdb.DuckDBPyConnection) -> None:
    """`events`: the raw columns plus what analysis joins on, in one vocabulary.

    pid/tid as text (legacy files use strings such as "stream 7"); `stream` from
    args.stream or the legacy tid; `correlation` and `external_id` from args (legacy
    files spell it "external id"); legacy categories mapped to today's names.
    ts and dur are doubles where the file wrote a JSON number, NULL where it wrote none
    (or null), and NaN where it wrote anything else ("5", true, {}), so that _validate
    refuses those with the non-finite numbers.
    """
    cats = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in _LEGACY_CATS.items())
    con.execute(f"""
        CREATE OR REPLACE TABLE events AS
        SELECT row_number() OVER () - 1 AS idx,
               ph, CASE cat {cats} ELSE cat END AS cat, name,
               CASE WHEN json_type(pid) = 'VARCHAR' THEN pid ->> '$' ELSE CAST(pid AS VARCHAR) END AS pid,
               CASE WHEN json_type(tid) = 'VARCHAR' THEN tid ->> '$' ELSE CAST(tid AS VARCHAR) END AS tid,
               {_number('ts')} AS ts, json_type(ts) = 'DOUBLE' AS ts_float, {_number('dur')} AS dur,
               COALESCE(TRY_CAST(args ->> 'stream' AS BIGINT),
                        TRY_CAST(regexp_extract(tid ->> '$', '^stream (\\d+)', 1) AS BIGINT)) AS stream,
               TRY_CAST(args ->> 'correlation' AS BIGINT) AS correlation,
               TRY_CAST(COALESCE(args ->> 'External id', args ->> 'external id') AS BIGINT) AS external_id,
               args, id, s, bp
        FROM raw_events
    """)
    con.execute("DROP TABLE raw_events")


def _number(col: str) -> str:
    """SQL for a JSON value as a time (see _normalize)."""
    return (f"CASE WHEN json_type({col}) IN ('BIGINT', 'UBIGINT', 'DOUBLE') THEN CAST({col} AS DOUBLE) "
            f"WHEN json_type({col}) <> 'NULL' THEN 'NaN'::DOUBLE END")


def _validate(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Refuse what no real trace holds and the analyses cannot take, naming the first event
    at fault: an event that is not an object with a phase; a ts or dur that is not a finite
    number or lies outside MAX_TS_US/MAX_DUR_US; a negative dur (interval arithmetic takes
    end >= start); a complete event without the name or dur every reader needs. Then a
    trace without a single complete event: metadata alone has nothing to analyse."""
    bad = con.execute(f"""
        SELECT idx, name, ts, dur, problem FROM (
            SELECT idx, name, ts, dur, CASE
                WHEN ph IS NULL THEN 'ph'
                WHEN NOT isfinite(ts) THEN 'ts'
                WHEN abs(ts) > {MAX_TS_US} THEN 'ts_far'
                WHEN NOT isfinite(dur) THEN 'dur'
                WHEN dur < 0 THEN 'dur_negative'
                WHEN dur > {MAX_DUR_US} THEN 'dur_long'
                WHEN ph = 'X' AND dur IS NULL THEN 'no_dur'
                WHEN ph = 'X' AND name IS NULL THEN 'no_name'
            END AS problem FROM events)
        WHERE problem IS NOT NULL ORDER BY idx LIMIT 1""").fetchone()
    if bad:
        idx, ev, ts, dur, problem = bad
        what = {
            "ph": 'is not an object with a "ph" (phase)',
            "ts": "has a ts that is not a finite JSON number",
            "ts_far": f"has ts {ts!r} µs, beyond ±{MAX_TS_US:g} µs (the year 2096)",
            "dur": "has a dur that is not a finite JSON number",
            "dur_negative": f"has a negative dur, {dur!r} µs",
            "dur_long": f"has dur {dur!r} µs, over {MAX_DUR_US:g} µs (11.6 days)",
            "no_dur": 'is a complete ("X") event without a dur',
            "no_name": 'is a complete ("X") event without a name',
        }[problem]
        label = f"event {idx:,}" + (f" ({_quote(ev)})" if ev else "")
        raise TraceImportError(f"{name}: {label} {what}")
    if not con.execute("SELECT 1 FROM events WHERE ph = 'X' LIMIT 1").fetchone():
        raise TraceImportError(f'{name} has no complete ("X") events: nothing to analyse')


def _quote(text: str, limit: int = 80) -> str:
    """A name from the file as one line (repr escapes newlines) of about `limit` characters."""
    r = repr(text[:limit])
    return r if len(text) <= limit and len(r) <= limit else r[:limit] + "…"
