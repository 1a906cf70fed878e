"""Uploaded traces: a content-addressed store on disk that any server process serves from.

An upload is named by the sha256 of its bytes as sent (64 hex digits). Its directory
<uploads_dir>/<first two hex digits>/<id>/ holds
  events.duckdb    the imported `events` table and the SQL console's tables (app.analysis.sql)
  read.json        the reference read with HTA's figures
  meta.json        {name, events, size_bytes}: the file's name as sent, its event count and size
  timeline.bin.gz  the viewer's columns, gzip-compressed
It is built in a temporary directory beside it and renamed into place: a directory that
exists is complete (a crash leaves only a temporary directory, swept later), and when two
processes import the same bytes at once the second rename fails and its copy is dropped.

Memory holds only a bounded cache of reads. The store stays under a byte budget by
dropping the least recently used uploads; every access touches the directory's mtime.

The import (decompress, DuckDB read, analysis, SQL tables, timeline) runs in a pool of
separate processes, so a parse holds neither the server's event loop nor its GIL.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import multiprocessing
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import duckdb
import orjson

from app.analysis import hta, read, sql
from app.trace.importer import ImportedTrace, TraceImportError, load

log = logging.getLogger(__name__)

ID = re.compile(r"[0-9a-f]{64}")
DATABASE, READ, META, TIMELINE = "events.duckdb", "read.json", "meta.json", "timeline.bin.gz"
STALE_S = 3600  # a temporary directory or incoming body this old belongs to a process that died
_MAX_NAME_CHARS = 100  # of a file's name as sent, kept and echoed in messages

# Builds the timeline body from an imported trace and its title. The encoder is the web
# viewer's wire format, so the web layer hands it in (a module-level function: the import
# process receives it by name).
TimelineBuilder = Callable[[ImportedTrace, str], bytes]


class UploadError(ValueError):
    """An upload cannot be taken or found; the message is one line."""


class NotFound(UploadError):
    """No upload of that id (malformed, never uploaded, or dropped from the store): HTTP 404."""


class UploadTooLarge(UploadError):
    """The body as sent is over the upload limit: HTTP 413."""


class ImportsBusy(UploadError):
    """More imports are waiting than the queue allows (HTTP 503)."""


class ImportCrashed(UploadError):
    """The import process died (killed for memory, most likely)."""


@dataclass(frozen=True)
class ImportLimits:
    max_trace_bytes: int  # uncompressed
    duckdb_threads: int
    duckdb_memory_mb: int


@dataclass(frozen=True)
class Upload:
    id: str
    name: str
    events: int
    size_bytes: int
    read: dict


def clean_name(filename: str | None) -> str:
    """A file's name as sent, safe to keep and echo: its last path part, printable, short."""
    name = "".join(c for c in (filename or "").replace("\\", "/").rsplit("/", 1)[-1] if c.isprintable())
    return name[:_MAX_NAME_CHARS] or "upload"


class Incoming:
    """An upload's body as it arrives: written to a temporary file in the store (never held
    whole in memory), hashed, refused past `max_bytes`. Deleted on leaving the `with`."""

    def __init__(self, root: Path, max_bytes: int):
        incoming = Path(root) / "incoming"
        incoming.mkdir(parents=True, exist_ok=True)
        fd, path = tempfile.mkstemp(suffix=".part", dir=incoming)
        self.path = Path(path)
        self.size_bytes, self.max_bytes = 0, max_bytes
        self._fh = os.fdopen(fd, "wb")
        self._sha = hashlib.sha256()

    def write(self, chunk: bytes) -> None:
        self.size_bytes += len(chunk)
        if self.size_bytes > self.max_bytes:
            raise UploadTooLarge(f"over the {self.max_bytes / 2**20:,.0f} MiB upload limit")
        self._sha.update(chunk)
        self._fh.write(chunk)

    def finish(self) -> str:
        """The upload's id."""
        self._fh.close()
        return self._sha.hexdigest()

    def __enter__(self) -> Incoming:
        return self

    def __exit__(self, *exc) -> None:
        self._fh.close()
        self.path.unlink(missing_ok=True)


class Store:
    """The uploads under `root`, with a bounded in-memory cache of their reads."""

    def __init__(self, root: Path, cache_entries: int = 8):
        self.root = Path(root)
        self.cache_entries = cache_entries
        self._cache: OrderedDict[str, Upload] = OrderedDict()
        self._lock = threading.Lock()  # sync routes run on a thread pool

    def dir(self, uid: str) -> Path:
        """The upload's directory, touched (its mtime orders eviction); NotFound unless an id
        of the right form whose upload is on disk."""
        if not ID.fullmatch(uid):
            raise NotFound(f"no uploaded trace {uid[:80]!r}: an upload's id is 64 hex digits")
        d = self.root / uid[:2] / uid
        try:
            os.utime(d)
        except FileNotFoundError:
            with self._lock:
                self._cache.pop(uid, None)
            raise NotFound(f"no uploaded trace {uid}: upload it again (unused uploads are dropped "
                           f"when the store is full)") from None
        return d

    def exists(self, uid: str) -> bool:
        try:
            self.dir(uid)
        except NotFound:
            return False
        return True

    def get(self, uid: str) -> Upload:
        d = self.dir(uid)
        with self._lock:
            if uid in self._cache:
                self._cache.move_to_end(uid)
                return self._cache[uid]
        try:
            meta = orjson.loads((d / META).read_bytes())
            up = Upload(uid, meta["name"], meta["events"], meta["size_bytes"], orjson.loads((d / READ).read_bytes()))
        except FileNotFoundError:  # evicted by another process between the touch and the read
            raise NotFound(f"no uploaded trace {uid}: upload it again") from None
        with self._lock:
            self._cache[uid] = up
            while len(self._cache) > self.cache_entries:
                self._cache.popitem(last=False)
        return up

    def database(self, uid: str) -> Path:
        return self.dir(uid) / DATABASE

    def timeline(self, uid: str) -> bytes:
        """The gzip-compressed timeline body (~30 MB for a million slices: read from the
        file, which the page cache keeps, rather than held per process)."""
        try:
            return (self.dir(uid) / TIMELINE).read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no uploaded trace {uid}: upload it again") from None

    def event(self, uid: str, idx: int, memory_limit_mb: int) -> dict | None:
        """One event as its file has it (ph, cat, name, pid, tid, ts, dur, args), by the
        viewer's `src` id (events.idx); None when there is no such event. Args that orjson
        cannot take (nested past its limit) come back as their JSON text."""
        if not 0 <= idx < 2**63:
            return None
        try:
            con = sql.connect(self.database(uid), memory_limit_mb)
        except duckdb.IOException:  # evicted by another process since the touch
            raise NotFound(f"no uploaded trace {uid}: upload it again") from None
        try:
            row = con.execute("SELECT ph, cat, name, pid, tid, ts, dur, args FROM events WHERE idx = ?",
                              [idx]).fetchone()
        finally:
            con.close()
        if row is None:
            return None
        keys = ("ph", "cat", "name", "pid", "tid", "ts", "dur")
        return {**dict(zip(keys, row[:7])), "args": _json_or_text(row[7])}

    def evict(self, budget_bytes: int, keep: str) -> list[str]:
        """Drop the least recently used uploads until the store fits `budget_bytes` (`keep`,
        the one just imported, stays even alone over budget), and temporary leftovers of
        dead processes; returns the ids dropped."""
        uploads, now = [], time.time()
        for d in self.root.glob("??/*"):
            try:
                st = d.stat()
                if d.name.startswith("."):
                    if now - st.st_mtime > STALE_S:
                        _remove(d)
                elif ID.fullmatch(d.name):
                    uploads.append((st.st_mtime, sum(f.stat().st_size for f in d.iterdir()), d))
            except FileNotFoundError:  # another process removed it meanwhile
                continue
        for part in self.root.glob("incoming/*.part"):
            with suppress(FileNotFoundError):  # another process swept it
                if now - part.stat().st_mtime > STALE_S:
                    part.unlink()
        total, dropped = sum(size for _, size, _ in uploads), []
        for _, size, d in sorted(uploads):
            if total <= budget_bytes:
                break
            if d.name != keep:
                _remove(d)
                total -= size
                dropped.append(d.name)
        with self._lock:
            for uid in dropped:
                self._cache.pop(uid, None)
        return dropped


def _json_or_text(text: str | None):
    if not text:
        return {}
    try:
        value = orjson.loads(text)
        orjson.dumps(value)  # what the response will do: its nesting limit is lower than loads'
        return value
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return text


def _remove(d: Path) -> None:
    """Rename out of the way first, so a reader sees the whole upload or none of it."""
    trash = d.parent / f".trash-{d.name}-{secrets.token_hex(4)}"
    try:
        os.rename(d, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def build(body: str, root: str, uid: str, name: str, limits: ImportLimits, timeline: TimelineBuilder) -> None:
    """Import the upload at `body` into the store as `uid` (runs in an import process).
    Raises the importer's TraceImportError (one line) when the trace cannot be read."""
    final = Path(root) / uid[:2] / uid
    if final.exists():
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{uid[:12]}-", dir=final.parent))
    try:
        con = duckdb.connect(str(tmp / DATABASE), config={
            "threads": limits.duckdb_threads, "memory_limit": f"{limits.duckdb_memory_mb}MB",
            "temp_directory": str(tmp / "spill")})
        con.execute("SET enable_progress_bar = false")  # it would draw on the server's stdout
        try:
            tr = load(body, max_bytes=limits.max_trace_bytes, con=con, name=name, tmp_dir=str(tmp))
            analysis = reading(tr)
            sql.prepare(tr)
            body_gz = timeline(tr, name)
            con.execute("CHECKPOINT")
        except TraceImportError:
            raise
        except Exception as e:  # the read, the tables or the timeline choked on what this file holds
            log.exception("reading upload %s (%s) failed", uid, name)
            reason = (str(e).splitlines() or [""])[0][:200]
            raise TraceImportError(f"{name} could not be read ({type(e).__name__}: {reason})") from None
        finally:
            con.close()
        shutil.rmtree(tmp / "spill", ignore_errors=True)
        _write(tmp / READ, orjson.dumps(analysis, default=float,
                                        option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY))
        _write(tmp / META, orjson.dumps({"name": name, "events": tr.events, "size_bytes": os.path.getsize(body)}))
        _write(tmp / TIMELINE, body_gz)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.exists():  # not another process's copy arriving first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing left after a successful rename


def reading(tr: ImportedTrace) -> dict:
    """What an upload's page shows: the reference read (its flat metrics aside) and HTA's figures."""
    r = read.read(tr)
    r.pop("metrics", None)
    r["hta"] = hta.figures(tr)
    return r


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())  # on disk before the rename makes the upload visible


def _background() -> None:
    """Imports yield the CPU to the workers answering pages: a 1M-event import is half a
    minute of two cores' work, and pages must not wait behind it (at nice 10 the scheduler
    gives a worker at nice 0 about ten times its share)."""
    os.nice(10)


class Importer:
    """Imports in a pool of `max_workers` processes, created on first use: spawned (a fresh
    interpreter holds none of the server's threads, locks or DuckDB handles). Past
    `max_queued` imports waiting for a worker, refuse rather than queue without end."""

    def __init__(self, max_workers: int, max_queued: int):
        self.max_workers, self.max_queued = max_workers, max_queued
        self._pool: ProcessPoolExecutor | None = None
        self._in_flight: dict[str, asyncio.Future] = {}  # id -> its import, shared by simultaneous uploads

    def admit(self) -> None:
        """Refuse early, before a body is received, when the queue is already full."""
        waiting = len(self._in_flight) - self.max_workers
        if waiting >= self.max_queued:
            raise ImportsBusy(f"{len(self._in_flight)} uploads are being read already; try again in a minute")

    async def run(self, store: Store, body: Path, uid: str, name: str, limits: ImportLimits,
                  timeline: TimelineBuilder, budget_bytes: int) -> None:
        """Import `body` as `uid` unless the store has it, then keep the store in budget."""
        if store.exists(uid):
            return
        fut = self._in_flight.get(uid)
        if fut is None:
            self.admit()
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self.max_workers, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_background)
            pool = self._pool
            fut = asyncio.get_running_loop().run_in_executor(
                pool, build, str(body), str(store.root), uid, name, limits, timeline)
            self._in_flight[uid] = fut
            fut.add_done_callback(lambda f: self._done(uid, f, pool))
        try:
            await asyncio.shield(fut)  # a client that goes away does not cancel an import others share
        except BrokenProcessPool:
            raise ImportCrashed("the import process died reading this trace (out of memory?)") from None
        await asyncio.to_thread(store.evict, budget_bytes, uid)

    def _done(self, uid: str, fut: asyncio.Future, pool: ProcessPoolExecutor) -> None:
        del self._in_flight[uid]
        if not fut.cancelled() and isinstance(fut.exception(), BrokenProcessPool) and self._pool is pool:
            pool.shutdown(wait=False)
            self._pool = None  # a broken pool takes no more work: the next import starts a new one
