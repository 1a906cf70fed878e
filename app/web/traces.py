"""Uploaded traces: the upload page, the read of a trace (page and JSON twin), its timeline,
its events' args, and its SQL console. The store, the import and the console are the
domain's (app/uploads.py, app/analysis/sql.py); this module maps them onto HTTP."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel, Field
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from app import uploads
from app.analysis import read, sql, text
from app.config import Settings, get_settings
from app.trace.importer import ImportedTrace, TraceImportError, TraceTooLarge

router = APIRouter()
SettingsDep = Annotated[Settings, Depends(get_settings)]
RETRY_AFTER_S = 30  # an import of a large trace takes tens of seconds
FORM_OVERHEAD_BYTES = 64 * 2**10  # multipart boundaries and part headers around the file
MAX_QUERY_CHARS = 100_000
# A relative ts (from a quarter-floored baseTimeNanoseconds) stays under ~8e12 µs; absolute
# epoch µs are past 1.6e15. Between them lies the line (1e14 µs, as ns).
RELATIVE_TS_MAX_NS = 10**17
_IMPORTER: uploads.Importer | None = None  # this process's import pool; touched on the event loop only


def _store(request: Request, settings: Settings) -> uploads.Store:
    """The app's view of the store on disk (its own cache of reads; every process and app
    sharing `uploads_dir` sees the same uploads)."""
    store = getattr(request.app.state, "uploads", None)
    if store is None or store.root != Path(settings.uploads_dir):
        store = request.app.state.uploads = uploads.Store(settings.uploads_dir, settings.upload_cache_size)
    return store


def _importer(settings: Settings) -> uploads.Importer:
    global _IMPORTER
    if _IMPORTER is None:
        _IMPORTER = uploads.Importer(settings.max_concurrent_imports, settings.max_queued_imports)
    return _IMPORTER


def _timeline_gz(tr: ImportedTrace | list[tuple[int, ImportedTrace]], title: str) -> bytes:
    """The viewer's columns for an upload, gzip level 1 (app/web/instances.py's timeline_response
    serves them); runs in the import process. Several (rank, trace) pairs are stacked on one
    clock as a generated multi-rank instance's are, each rank's rows labelled with its rank;
    the steps marked are the first rank's."""
    from app.web import timeline

    if isinstance(tr, list):
        parts, shifts = [], []
        for _, t in tr:
            s = timeline.from_import(t)
            # relative files (Kineto 2024+) count ts from their baseTimeNanoseconds: back to the
            # epoch, so that ranks written either way share one clock
            base = t.base_time_ns if isinstance(t.base_time_ns, int) and not isinstance(t.base_time_ns, bool) else 0
            shift = base if 0 < base < 2**62 and s.t0_ns < RELATIVE_TS_MAX_NS else 0
            s.t0_ns += shift
            parts.append(s)
            shifts.append(shift)
        slices = timeline.stack(parts, rank_ids=[r for r, _ in tr])
        base_ns = shifts[0]
        steps, _ = read.steps(tr[0][1])
        counters = [{**c, "name": f"rank {r} · {c['name']}"}
                    for (r, t), shift in zip(tr, shifts) for c in timeline.memory_from_import(t, shift)]
        return gzip.compress(timeline.encode(slices, title, [(a * 1e3 + base_ns, b * 1e3 + base_ns) for a, b in steps],
                                             counters), compresslevel=1)
    steps, _ = read.steps(tr)
    one = timeline.from_import(tr)
    one.ranks = [uploads.ranked([("", tr.meta)])[0][1]]  # its distributedInfo.rank, else 0
    return gzip.compress(timeline.encode(one, title, [(a * 1e3, b * 1e3) for a, b in steps],
                                         timeline.memory_from_import(tr)), compresslevel=1)


class _TraceParts:
    """python-multipart callbacks that send each of the form's `trace` files to its own
    `Incoming` file as it arrives (all of them within one size limit) and ignore any other
    field."""

    def __init__(self, root: Path, max_bytes: int):
        self.root, self.max_bytes = root, max_bytes
        self.files: list[tuple[str, uploads.Incoming]] = []
        self.total_bytes = 0
        self._field, self._value, self._headers, self._ours = b"", b"", {}, False

    @property
    def name(self) -> str | None:
        return self.files[-1][0] if self.files else None

    def callbacks(self) -> dict:
        return {"on_part_begin": self._begin, "on_header_field": self._header_field,
                "on_header_value": self._header_value, "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished, "on_part_data": self._data}

    def _begin(self) -> None:
        self._headers, self._ours = {}, False

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _header_end(self) -> None:
        self._headers[self._field.lower()] = self._value
        self._field = self._value = b""

    def _headers_finished(self) -> None:
        _, params = parse_options_header(self._headers.get(b"content-disposition", b""))
        self._ours = params.get(b"name") == b"trace"
        if self._ours:
            if len(self.files) >= uploads.MAX_RANKS:
                raise HTTPException(400, f"over {uploads.MAX_RANKS} trace files in one upload")
            name = uploads.clean_name(params.get(b"filename", b"").decode("utf-8", "replace"))
            self.files.append((name, uploads.Incoming(self.root, self.max_bytes)))

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self._ours:
            self.total_bytes += end - start
            if self.total_bytes > self.max_bytes:
                raise uploads.UploadTooLarge(f"over the {self.max_bytes / 2**20:,.0f} MiB upload limit")
            self.files[-1][1].write(data[start:end])

    def close(self) -> None:
        for _, incoming in self.files:
            incoming.__exit__()


async def _receive(request: Request, settings: Settings) -> str:
    """Stream the form's `trace` file to disk within the size limit, import it (in the
    import pool) unless the store has it; returns its id."""
    importer = _importer(settings)
    importer.admit()
    kind, params = parse_options_header(request.headers.get("content-type"))
    if kind != b"multipart/form-data" or not params.get(b"boundary"):
        raise HTTPException(400, "send the trace as multipart/form-data in a field named 'trace'")
    limit_mib = settings.max_upload_bytes / 2**20
    sent = request.headers.get("content-length", "")
    if sent.isdigit() and int(sent) > settings.max_upload_bytes + FORM_OVERHEAD_BYTES:
        raise HTTPException(413, f"the upload is {int(sent) / 2**20:,.0f} MiB, over the {limit_mib:,.0f} MiB "
                                 f"upload limit")
    store = _store(request, settings)
    parts = _TraceParts(store.root, settings.max_upload_bytes)
    try:
        parser = MultipartParser(params[b"boundary"], parts.callbacks())
        received = 0
        try:
            async for chunk in request.stream():
                received += len(chunk)
                if received > settings.max_upload_bytes + FORM_OVERHEAD_BYTES:  # other fields, unbounded
                    raise uploads.UploadTooLarge(f"over the {limit_mib:,.0f} MiB upload limit")
                parser.write(chunk)
            parser.finalize()
        except uploads.UploadTooLarge as e:
            what = parts.name if len(parts.files) == 1 else f"{len(parts.files)} files" if parts.files else None
            raise HTTPException(413, f"{what or 'the upload'} is {e}") from None
        except MultipartParseError:
            raise HTTPException(400, "the form is not valid multipart/form-data") from None
        if not parts.files:
            raise HTTPException(400, "no trace in the form: send the file in a field named 'trace'")
        digests = [(name, incoming.finish()) for name, incoming in parts.files]
        for (name, incoming) in parts.files:
            if incoming.size_bytes == 0:
                what = "the upload is empty" if len(parts.files) == 1 else f"{name} is empty"
                raise HTTPException(400, f"{what}: choose a torch.profiler trace (.json or .json.gz), "
                                         f"several, or a .zip or .tar.gz of them")
        if len(digests) == 1:
            uid, title = digests[0][1], digests[0][0]
            body: str | list = str(parts.files[0][1].path)
        else:
            names = ", ".join(sorted(n for n, _ in digests))
            uid = uploads.multi_id(digests)
            title = f"{len(digests)} traces: " + (names if len(names) <= 120 else names[:119] + "…")
            body = [(str(incoming.path), name) for name, incoming in parts.files]
        limits = uploads.ImportLimits(settings.max_trace_bytes, settings.import_duckdb_threads,
                                      settings.import_memory_limit_mb)
        try:
            await importer.run(store, body, uid, title, limits, _timeline_gz, settings.max_upload_store_bytes)
        except TraceImportError as e:
            raise HTTPException(413 if isinstance(e, TraceTooLarge) else 400, str(e)) from None
        except uploads.ImportCrashed as e:
            raise HTTPException(503, str(e)) from None
    finally:
        parts.close()
    return uid


async def _upload(request: Request, settings: Settings) -> str:
    """The id of the upload; a 503 with Retry-After when the import queue is full."""
    try:
        return await _receive(request, settings)
    except uploads.ImportsBusy as e:
        raise HTTPException(503, str(e), headers={"Retry-After": str(RETRY_AFTER_S)}) from None


@contextmanager
def _found() -> Iterator[None]:
    try:
        yield
    except uploads.NotFound as e:
        raise HTTPException(404, str(e)) from None


def _upload_page(request: Request, error: str | None = None, status_code: int = 200, headers=None):
    from app.web.templates import templates

    return templates.TemplateResponse(request, "upload.html", {"error": error}, status_code=status_code,
                                      headers=headers)


@router.get("/upload", include_in_schema=False)
def upload_page(request: Request):
    return _upload_page(request)


@router.post("/upload", include_in_schema=False)
async def upload_form(request: Request, settings: SettingsDep):
    """The form's upload: the trace's page, or the upload page again with the one-line
    reason and the same status the JSON twin (POST /api/traces) answers with."""
    try:
        uid = await _upload(request, settings)
    except HTTPException as e:
        return _upload_page(request, str(e.detail), e.status_code, e.headers)
    return RedirectResponse(f"/traces/{uid}", 303)


@router.post("/api/traces")
async def upload_api(request: Request, settings: SettingsDep):
    """A trace as multipart/form-data, field `trace` (.json or .json.gz): its id, URL and read.
    Several `trace` files, or one .zip / .tar.gz of a trace directory, are one multi-rank
    upload (the read gains `ranks`)."""
    uid = await _upload(request, settings)
    with _found():
        return {"id": uid, "url": f"/traces/{uid}", **_store(request, settings).get(uid).read}


@router.get("/traces/{tid}.json")
def trace_json(tid: str, request: Request, settings: SettingsDep):
    with _found():
        return {"id": tid, **_store(request, settings).get(tid).read}


def _sql_limits(settings: Settings, max_rows: int | None = None) -> sql.Limits:
    return sql.Limits(timeout_s=settings.sql_timeout_s, max_rows=max_rows or settings.sql_max_rows,
                      max_bytes=settings.sql_max_bytes, memory_limit_mb=settings.sql_memory_limit_mb,
                      max_concurrent=settings.max_concurrent_sql)


@router.get("/traces/{tid}", include_in_schema=False)
def trace_page(request: Request, tid: str, settings: SettingsDep, q: str | None = None):
    from app.web.templates import templates

    store = _store(request, settings)
    with _found():
        up = store.get(tid)
        result = error = None
        if q and len(q) > MAX_QUERY_CHARS:
            error = f"the query is over {MAX_QUERY_CHARS:,} characters"
        elif q:
            try:
                result = sql.run(store.database(tid), q, _sql_limits(settings, max_rows=500))
            except (sql.QueryRefused, sql.QueryFailed, sql.QueryBusy) as e:
                error = str(e)
    return templates.TemplateResponse(request, "trace.html", {
        "id": tid, "name": up.name, "read": up.read, "text": text.render(up.read, up.read["hta"]),
        "timeline_url": f"/api/traces/{tid}/timeline.bin", "slice_url": f"/api/traces/{tid}/slices/{{src}}",
        "sql_url": f"/api/traces/{tid}/sql",
        "tools": None, "download_url": None,
        "query": q or "SELECT name, count(*) AS n, sum(dur) / 1e6 AS total_ms FROM slice WHERE category = 'kernel' "
                      "GROUP BY name ORDER BY total_ms DESC LIMIT 10",
        "result": result, "error": error})


@router.get("/api/traces/{tid}/timeline.bin")
def trace_timeline(tid: str, request: Request, settings: SettingsDep):
    """The uploaded trace as the viewer's columns (app/web/timeline.py), built at import."""
    from app.web.instances import timeline_response

    with _found():
        return timeline_response(_store(request, settings).timeline(tid), request)


@router.get("/api/traces/{tid}/slices/{src}")
def trace_slice(tid: str, src: int, request: Request, settings: SettingsDep):
    """One event of the upload as its file has it, by the viewer's `src` id (events.idx).
    Encoded by orjson, not FastAPI's recursive encoder: args may nest deep."""
    from app.web import timeline

    store = _store(request, settings)
    with _found():
        # several ranks are stacked: the viewer's id carries the rank's position (timeline.stack)
        pos, idx = timeline.source_ref(src) if store.get(tid).ranks and src >= 0 else (0, src)
        event = store.event(tid, idx, settings.sql_memory_limit_mb, rank_pos=pos)
    if event is None:
        raise HTTPException(404, f"no event {src} in this trace")
    return Response(orjson.dumps(event), media_type="application/json")


class Query(BaseModel):
    query: str = Field(max_length=MAX_QUERY_CHARS)


@router.post("/api/traces/{tid}/sql")
def trace_sql(tid: str, body: Query, request: Request, settings: SettingsDep):
    from app.web import sql_console

    with _found():
        database = _store(request, settings).database(tid)
    return sql_console.respond(database, body.query, settings)
