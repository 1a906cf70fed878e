"""Uploaded traces: the upload page, the read of a trace (page and JSON twin), and its SQL console."""

from __future__ import annotations

import gzip
import hashlib
import threading
from collections import OrderedDict
from typing import Annotated

from fastapi import APIRouter, Depends, File, HTTPException, Request, UploadFile
from fastapi.responses import RedirectResponse
from pydantic import BaseModel

from app.analysis import hta, read, sql, text
from app.config import Settings, get_settings
from app.trace.importer import ImportedTrace, TraceImportError, TraceTooLarge, load

router = APIRouter()
SettingsDep = Annotated[Settings, Depends(get_settings)]
_UPLOADS: OrderedDict[str, dict] = OrderedDict()  # id -> {"trace", "read", "name"}; newest last


async def _receive(upload: UploadFile, settings: Settings) -> str:
    """Read the upload within the size limit, import it, keep it; returns its id."""
    chunks, size = [], 0
    while chunk := await upload.read(1 << 20):
        size += len(chunk)
        if size > settings.max_upload_bytes:
            raise HTTPException(413, f"{upload.filename} is over the {settings.max_upload_bytes / 2**20:,.0f} MiB "
                                     f"upload limit")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw:
        raise HTTPException(400, "the upload is empty: choose a torch.profiler trace (.json or .json.gz)")
    tid = hashlib.sha1(raw).hexdigest()[:16]
    if tid not in _UPLOADS:
        try:
            trace = load(raw, max_bytes=settings.max_trace_bytes)
        except TraceImportError as e:
            status = 413 if isinstance(e, TraceTooLarge) else 400
            raise HTTPException(status, f"{upload.filename}: {e}") from None
        trace.source = upload.filename or "upload"
        # One DuckDB connection per trace, and DuckDB connections are not thread-safe: every
        # use after the import (timeline, SQL) holds the trace's lock.
        _UPLOADS[tid] = {"trace": trace, "name": trace.source, "read": _analysis(trace), "lock": threading.Lock()}
        while len(_UPLOADS) > settings.upload_cache_size:
            _UPLOADS.popitem(last=False)
    _UPLOADS.move_to_end(tid)
    return tid


def _analysis(tr: ImportedTrace) -> dict:
    r = read.read(tr)
    r.pop("metrics", None)
    r["hta"] = hta.figures(tr)
    return r


def _get(tid: str) -> dict:
    if tid not in _UPLOADS:
        raise HTTPException(404, f"no uploaded trace {tid!r} (uploads are kept in memory; upload it again)")
    return _UPLOADS[tid]


@router.get("/upload", include_in_schema=False)
def upload_page(request: Request):
    from app.web.templates import templates

    return templates.TemplateResponse(request, "upload.html", {})


@router.post("/upload", include_in_schema=False)
async def upload_form(settings: SettingsDep, trace: UploadFile = File(...)):
    return RedirectResponse(f"/traces/{await _receive(trace, settings)}", 303)


@router.post("/api/traces")
async def upload_api(settings: SettingsDep, trace: UploadFile = File(...)):
    tid = await _receive(trace, settings)
    return {"id": tid, "url": f"/traces/{tid}", **_get(tid)["read"]}


@router.get("/traces/{tid}.json")
def trace_json(tid: str):
    return {"id": tid, **_get(tid)["read"]}


@router.get("/traces/{tid}", include_in_schema=False)
def trace_page(request: Request, tid: str, q: str | None = None):
    from app.web.templates import templates

    up = _get(tid)
    result = error = None
    if q:
        try:
            with up["lock"]:
                result = sql.run(up["trace"], q, max_rows=500)
        except (sql.QueryRefused, sql.QueryFailed) as e:
            error = str(e)
    return templates.TemplateResponse(request, "trace.html", {
        "id": tid, "name": up["name"], "read": up["read"], "text": text.render(up["read"], up["read"]["hta"]),
        "timeline_url": f"/api/traces/{tid}/timeline.bin", "slice_url": f"/api/traces/{tid}/slices/{{src}}",
        "tools": None, "download_url": None,
        "query": q or "SELECT name, count(*) AS n, sum(dur) / 1e6 AS total_ms FROM slice WHERE category = 'kernel' "
                      "GROUP BY name ORDER BY total_ms DESC LIMIT 10",
        "result": result, "error": error})


@router.get("/api/traces/{tid}/timeline.bin")
def trace_timeline(tid: str, request: Request):
    """The uploaded trace as the viewer's columns (app/web/timeline.py), built once."""
    from app.web import timeline

    up = _get(tid)
    with up["lock"]:
        if "timeline" not in up:
            tr = up["trace"]
            steps, _ = read.steps(tr)
            up["timeline"] = gzip.compress(timeline.encode(timeline.from_import(tr), up["name"],
                                                           [(a * 1e3, b * 1e3) for a, b in steps]), compresslevel=1)
    from app.web.instances import timeline_response

    return timeline_response(up["timeline"], request)


@router.get("/api/traces/{tid}/slices/{src}")
def trace_slice(tid: str, src: int):
    """One event of the upload as its file has it, by the viewer's `src` id (events.idx)."""
    import json

    up = _get(tid)
    with up["lock"]:
        row = up["trace"].con.execute("SELECT ph, cat, name, pid, tid, ts, dur, args FROM events WHERE idx = ?",
                                      [src]).fetchone()
    if row is None:
        raise HTTPException(404, f"no event {src} in this trace")
    keys = ("ph", "cat", "name", "pid", "tid", "ts", "dur")
    return {**dict(zip(keys, row[:7])), "args": json.loads(row[7]) if row[7] else {}}


class Query(BaseModel):
    query: str


@router.post("/api/traces/{tid}/sql")
def trace_sql(tid: str, body: Query):
    try:
        up = _get(tid)
        with up["lock"]:
            return sql.run(up["trace"], body.query).as_json()
    except sql.QueryRefused as e:
        raise HTTPException(403, str(e)) from None
    except sql.QueryFailed as e:
        raise HTTPException(400, str(e)) from None
