"""Uploaded traces: a content-addressed store on disk that any server process serves from.

An upload is named by the sha256 of its bytes as sent (64 hex digits; several files: of
their names and digests, see `multi_id`). One file may be a trace, or a .zip / .tar(.gz) of a
trace directory; several trace files are one multi-rank upload (see `expand` and `ranked`). Its directory
<uploads_dir>/<first two hex digits>/<id>/ holds
  events.duckdb    the imported `events` table and the SQL console's tables (app.analysis.sql)
  read.json        the reference read with HTA's figures
  meta.json        {name, events, size_bytes}: the file's name as sent, its event count and size
                   (several ranks: also `ranks`, one {rank, name, events, database} per rank in
                   rank order, each rank's events in its own database; events.duckdb is the first's)
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
import gzip
import hashlib
import logging
import multiprocessing
import os
import re
import secrets
import shutil
import tarfile
import tempfile
import threading
import time
import zipfile
import zlib
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
from app.trace.importer import ImportedTrace, TraceImportError, TraceTooLarge, load

log = logging.getLogger(__name__)

ID = re.compile(r"[0-9a-f]{64}")
DATABASE, READ, META, TIMELINE = "events.duckdb", "read.json", "meta.json", "timeline.bin.gz"
STALE_S = 3600  # a temporary directory or incoming body this old belongs to a process that died
_MAX_NAME_CHARS = 100  # of a file's name as sent, kept and echoed in messages
MAX_RANKS = 64  # trace files in one upload (sent as several files or inside an archive)
MAX_ARCHIVE_MEMBERS = 2000  # entries of any kind an archive may list (a trace directory holds a few)
_CHUNK_BYTES = 1 << 20
_RANK_IN_NAME = re.compile(r"rank[-_ .]?(\d{1,6})", re.I)

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
    ranks: tuple = ()  # several ranks: one {rank, name, events, database} each, in rank order


def multi_id(parts: list[tuple[str, str]]) -> str:
    """The id of several files sent together, from their (name, sha256) pairs: the same
    files in any order are the same upload (a name can carry the rank, so it counts)."""
    h = hashlib.sha256(b"tracedojo ranks\0")
    for name, digest in sorted(parts):
        h.update(f"{name}\0{digest}\0".encode())
    return h.hexdigest()


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
            up = Upload(uid, meta["name"], meta["events"], meta["size_bytes"], orjson.loads((d / READ).read_bytes()),
                        tuple(meta.get("ranks", ())))
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

    def event(self, uid: str, idx: int, memory_limit_mb: int, rank_pos: int = 0) -> dict | None:
        """One event as its file has it (ph, cat, name, pid, tid, ts, dur, args), by the
        viewer's `src` id (events.idx) in the `rank_pos`-th rank (in rank order); None when
        there is no such event. Args that orjson cannot take (nested past its limit) come
        back as their JSON text."""
        if not 0 <= idx < 2**63:
            return None
        ranks = self.get(uid).ranks
        if rank_pos and not 0 <= rank_pos < len(ranks):
            return None
        path = self.dir(uid) / ranks[rank_pos]["database"] if ranks else self.database(uid)
        try:
            con = sql.connect(path, memory_limit_mb)
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


def build(body: str | list[tuple[str, str]], root: str, uid: str, name: str, limits: ImportLimits,
          timeline: TimelineBuilder) -> None:
    """Import the upload into the store as `uid` (runs in an import process): `body` is one
    file's path, or several (path, name as sent) pairs. Raises the importer's
    TraceImportError (one line) when the trace cannot be read."""
    final = Path(root) / uid[:2] / uid
    if final.exists():
        return
    bodies = [(body, name)] if isinstance(body, (str, Path)) else [(str(p), n) for p, n in body]
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{uid[:12]}-", dir=final.parent))
    cons: list[duckdb.DuckDBPyConnection] = []
    try:
        members = expand(bodies, tmp / "members", limits.max_trace_bytes)
        multi = len(members) > 1
        # DuckDB's memory is shared out: several ranks are one trace's budget, not N of them
        memory_mb = max(256, limits.duckdb_memory_mb // len(members))
        traces, budget = [], limits.max_trace_bytes
        try:
            for i, (path, member) in enumerate(members):
                con = duckdb.connect(str(tmp / (f"events-{i}.duckdb" if multi else DATABASE)), config={
                    "threads": limits.duckdb_threads, "memory_limit": f"{memory_mb}MB",
                    "temp_directory": str(tmp / "spill")})
                cons.append(con)
                con.execute("SET enable_progress_bar = false")  # it would draw on the server's stdout
                if budget <= 0:
                    raise TraceTooLarge(f"{name}: its traces pass the {limits.max_trace_bytes / 1e6:,.0f} MB limit "
                                        f"together, uncompressed")
                tr = load(path, max_bytes=budget, con=con, name=member, tmp_dir=str(tmp))
                budget -= tr.size_bytes
                traces.append(tr)
            order = ranked([(member, tr.meta) for (_, member), tr in zip(members, traces)])
            if multi:
                ranks = [(r, traces[i]) for i, r in order]
                analysis = reading_ranks(ranks)
            else:
                analysis = reading(traces[0])
            for tr in traces:
                sql.prepare(tr)
            body_gz = timeline([(r, tr) for r, tr in ranks] if multi else traces[0], name)
            for con in cons:
                con.execute("CHECKPOINT")
        except TraceImportError:
            raise
        except Exception as e:  # the read, the tables or the timeline choked on what this file holds
            log.exception("reading upload %s (%s) failed", uid, name)
            reason = (str(e).splitlines() or [""])[0][:200]
            raise TraceImportError(f"{name} could not be read ({type(e).__name__}: {reason})") from None
        finally:
            for con in cons:
                con.close()
        shutil.rmtree(tmp / "spill", ignore_errors=True)
        shutil.rmtree(tmp / "members", ignore_errors=True)
        meta = {"name": name, "events": sum(tr.events for tr in traces),
                "size_bytes": sum(os.path.getsize(p) for p, _ in bodies)}
        if multi:
            # the first rank's database is the one the SQL console opens
            os.rename(tmp / f"events-{order[0][0]}.duckdb", tmp / DATABASE)
            dbs = {order[0][0]: DATABASE}
            meta["ranks"] = [{"rank": r, "name": members[i][1], "events": traces[i].events,
                              "database": dbs.get(i, f"events-{i}.duckdb")} for i, r in order]
        _write(tmp / READ, orjson.dumps(analysis, default=float,
                                        option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY))
        _write(tmp / META, orjson.dumps(meta))
        _write(tmp / TIMELINE, body_gz)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.exists():  # not another process's copy arriving first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing left after a successful rename


def ranked(traces: list[tuple[str, dict]]) -> list[tuple[int, int]]:
    """(index, rank) of each (name, top-level keys) in rank order. A rank is the trace's
    distributedInfo.rank where it is a number, else the file name's `rank<N>`, else the next
    rank no other file claims, files in name order. Two files of one rank are refused."""
    claimed: dict[int, int] = {}
    for i, (member, meta) in enumerate(traces):
        info = meta.get("distributedInfo")
        r = info.get("rank") if isinstance(info, dict) else None
        if not (isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 2**31):
            m = _RANK_IN_NAME.search(member.rsplit("/", 1)[-1])
            r = int(m.group(1)) if m else None
        if r is None:
            continue
        if r in claimed:
            raise TraceImportError(f"two traces are rank {r} ({traces[claimed[r]][0]} and {member}): "
                                   f"send one trace per rank")
        claimed[r] = i
    out, free = {i: r for r, i in claimed.items()}, 0
    for i in sorted((i for i in range(len(traces)) if i not in out), key=lambda i: traces[i][0]):
        while free in claimed:
            free += 1
        out[i], claimed[free] = free, i
    return sorted(out.items(), key=lambda ir: ir[1])


def _is_trace_name(member: str) -> bool:
    base = member.rsplit("/", 1)[-1].lower()
    return (base.endswith((".json", ".json.gz")) and not base.startswith((".", "._"))
            and not member.startswith("__MACOSX/"))


def _safe_member(archive: str, member: str) -> str:
    """A member's name as shown; refused when it climbs out of the archive (never used as a
    path here: members are written under numbered names, but such an archive is not a trace
    directory and may be an attack on tools that do)."""
    parts = member.replace("\\", "/").split("/")
    if member.startswith(("/", "\\")) or ".." in parts or (len(member) > 1 and member[1] == ":"):
        raise TraceImportError(f"{archive}: member {member[:80]!r} points outside the archive; refused")
    return clean_name(member)


class _Bounded:
    """A read-only stream that counts what it gives and stops past `max_bytes`: an archive
    is refused as it expands, never after."""

    def __init__(self, raw, max_bytes: int, name: str):
        self.raw, self.max_bytes, self.name, self.total = raw, max_bytes, name, 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(_CHUNK_BYTES if n is None or n < 0 else min(n, _CHUNK_BYTES) or n)
        self.total += len(data)
        if self.total > self.max_bytes:
            raise TraceTooLarge(f"{self.name} expands past the {self.max_bytes / 1e6:,.0f} MB limit when extracted")
        return data


def _copy(src, dst_path: Path, budget: list[int], archive: str) -> None:
    """A member's bytes to `dst_path` a chunk at a time, `budget[0]` bytes left in all."""
    with open(dst_path, "wb") as out:
        while chunk := src.read(_CHUNK_BYTES):
            budget[0] -= len(chunk)
            if budget[0] < 0:
                raise TraceTooLarge(f"{archive} expands past its limit when extracted")
            out.write(chunk)


def _archive_kind(path: str) -> str | None:
    """"zip", "tar" or "tar.gz" by content (names lie), None for anything else (a trace)."""
    with open(path, "rb") as fh:
        head = fh.read(512)
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[257:262] == b"ustar":
        return "tar"
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as gz:
                inner = gz.read(512)
        except (OSError, EOFError, zlib.error):  # a broken gzip: the importer names what is wrong
            return None
        if inner[257:262] == b"ustar":
            return "tar.gz"
    return None


def expand(bodies: list[tuple[str, str]], out_dir: Path, max_bytes: int) -> list[tuple[str, str]]:
    """The trace files of an upload as (path, name): each file sent, with a .zip or
    .tar(.gz) replaced by its trace members (*.json, *.json.gz; anything else skipped).
    Members go to numbered files in `out_dir`, all within `max_bytes` extracted, at most
    MAX_ARCHIVE_MEMBERS entries read per archive and MAX_RANKS traces in all."""
    out: list[tuple[str, str]] = []
    budget = [max_bytes]
    for path, name in bodies:
        kind = _archive_kind(path)
        if kind is None:
            out.append((path, name))
        else:
            out_dir.mkdir(parents=True, exist_ok=True)
            found = _extract(path, name, kind, out_dir, budget, len(out))
            if not found:
                raise TraceImportError(f"{name} holds no trace: no *.json or *.json.gz file in the {kind} archive")
            out += found
        if len(out) > MAX_RANKS:
            raise TraceImportError(f"{name}: over {MAX_RANKS} trace files in one upload")
    return out


def _extract(path: str, name: str, kind: str, out_dir: Path, budget: list[int], before: int) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []

    def take(member: str, src) -> None:
        if len(found) + before >= MAX_RANKS:
            raise TraceImportError(f"{name}: over {MAX_RANKS} trace files in one upload")
        dst = out_dir / f"member-{before + len(found)}"
        _copy(src, dst, budget, name)
        found.append((str(dst), member))

    try:
        if kind == "zip":
            with zipfile.ZipFile(path) as z:
                infos = z.infolist()
                if len(infos) > MAX_ARCHIVE_MEMBERS:
                    raise TraceImportError(f"{name} lists {len(infos):,} entries, over the {MAX_ARCHIVE_MEMBERS:,} "
                                           f"an upload may hold")
                for info in infos:
                    member = _safe_member(name, info.filename)
                    if info.is_dir() or not _is_trace_name(info.filename):
                        continue
                    with z.open(info) as src:  # decompressed as read: _copy's budget stops a bomb
                        take(member, src)
        else:
            with open(path, "rb") as raw:
                stream = gzip.GzipFile(fileobj=raw) if kind == "tar.gz" else raw
                # every byte the tar stream expands to (headers, skipped members) counts
                bounded = _Bounded(stream, budget[0] + 64 * 2**20, name)
                with tarfile.open(fileobj=bounded, mode="r|") as t:
                    for n, info in enumerate(t):
                        if n >= MAX_ARCHIVE_MEMBERS:
                            raise TraceImportError(f"{name} lists over {MAX_ARCHIVE_MEMBERS:,} entries, more than an "
                                                   f"upload may hold")
                        member = _safe_member(name, info.name)
                        if not info.isreg() or not _is_trace_name(info.name):  # links, devices, directories
                            continue
                        take(member, t.extractfile(info))
    except TraceImportError:
        raise
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, zlib.error, NotImplementedError,
            RuntimeError) as e:
        reason = (str(e).splitlines() or [""])[0][:120] or type(e).__name__
        raise TraceImportError(f"{name} is not a readable {kind} archive ({reason})") from None
    return found


def reading_ranks(ranks: list[tuple[int, ImportedTrace]]) -> dict:
    """Several ranks' page: the first rank's read and HTA figures (as one rank's), plus
    `ranks`: who is who, each one's compute per step, the spread and the late arrivals."""
    multi = read.read_ranks([tr for _, tr in ranks], ids=[r for r, _ in ranks])
    out = dict(multi["ranks"][0])
    out.pop("metrics", None)
    out["hta"] = hta.figures(ranks[0][1])
    out["ranks"] = {
        "ids": multi["rank_ids"], "names": [tr.source for _, tr in ranks],
        "events": [tr.events for _, tr in ranks],
        "step_ms": [r["steps"]["period_ms"] for r in multi["ranks"]],
        "compute_ms": multi["rank_compute_ms"], "max_over_median": multi["max_over_median"],
        "straggler_rank": multi["straggler_rank"], "late_arrivals": multi["late_arrivals"][:50],
    }
    return out


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

    async def run(self, store: Store, body: Path | str | list[tuple[str, str]], uid: str, name: str,
                  limits: ImportLimits, timeline: TimelineBuilder, budget_bytes: int) -> None:
        """Import `body` (a path, or several (path, name) pairs) as `uid` unless the store has
        it, then keep the store in budget."""
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
                pool, build, body if isinstance(body, list) else str(body), str(store.root), uid, name, limits,
                timeline)
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
