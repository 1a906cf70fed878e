"""The FastAPI application: the home page, its JSON twin, and instance downloads."""

from __future__ import annotations

import gzip
import secrets
import threading
from collections import OrderedDict
from urllib.parse import quote, urlencode

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, Field

import scenarios
from app import __version__
from app.config import ROOT, get_settings
from app.scenario import InstanceError
from app.trace import kineto
from app.web import attempts, practice, timeline, traces
from app.web.instances import cached, resolve

templates = Jinja2Templates(directory=str(ROOT / "templates"))


def scenario_rows() -> list[dict]:
    """Every registered scenario with its canonical brief and download links."""
    rows = []
    for scn in scenarios.REGISTRY.values():
        inst = cached(scn.id, "canonical")
        base = f"/scenarios/{scn.id}/canonical"
        rows.append({
            "id": scn.id, "version": scn.version, "title": scn.title, "signature": scn.signature,
            "brief": inst.key["brief"], "ranks": inst.ranks,
            "trace_url": f"{base}/trace.json", "key_url": f"{base}/key.json",
            "params": scn.Params.describe(),
        })
    return rows


def create_app(migrate: bool = True) -> FastAPI:
    settings = get_settings()
    if migrate:
        from app.db.base import upgrade_to_head

        upgrade_to_head(settings.database_url)
    app = FastAPI(title="Trace Dojo", version=__version__)
    app.mount("/static", StaticFiles(directory=str(ROOT / "static")), name="static")
    app.include_router(traces.router)
    app.include_router(attempts.router)
    app.include_router(practice.router)
    app.middleware("http")(attempts.identity_middleware)

    @app.get("/", include_in_schema=False)
    def index(request: Request):
        return templates.TemplateResponse(request, "index.html", {"scenarios": scenario_rows()})

    @app.get("/index.json")
    def index_json():
        return {"scenarios": scenario_rows()}

    @app.get("/surprise", include_in_schema=False)
    def surprise():
        """A random scenario with a random seed, in the viewer (the brief does not say which)."""
        rng = secrets.SystemRandom()
        sid = rng.choice(list(scenarios.REGISTRY))
        return RedirectResponse(f"/scenarios/{quote(sid)}/{rng.randrange(0, 100_000)}", 303)

    @app.get("/scenarios/{sid}/download", include_in_schema=False)
    def download(sid: str, seed: str = "0", rank: int = 0, view: str = ""):
        """The home page's seed form: redirect to the instance's viewer page or trace."""
        if view:
            return RedirectResponse(f"/scenarios/{quote(sid)}/{quote(seed.strip() or '0')}", 303)
        query = f"?rank={rank}" if rank else ""
        return RedirectResponse(f"/scenarios/{quote(sid)}/{quote(seed.strip() or '0')}/trace.json{query}", 303)

    @app.get("/scenarios/{sid}/{seed}.json")
    def scenario_page_json(sid: str, seed: str, request: Request, rank: str | None = None):
        """The scenario page's JSON twin: the brief and what the page loads, never the key."""
        return _page(sid, seed, request, rank)

    @app.get("/scenarios/{sid}/{seed}", include_in_schema=False)
    def scenario_page(sid: str, seed: str, request: Request, rank: str | None = None):
        return templates.TemplateResponse(request, "scenario.html", _page(sid, seed, request, rank))

    @app.get("/api/scenarios/{sid}/{seed}/timeline.bin")
    def timeline_bin(sid: str, seed: str, request: Request, rank: str = "0"):
        """One rank's trace (or every rank's, stacked on one clock, with rank=all) as the
        viewer's compact columns (app/web/timeline.py)."""
        inst = resolve(sid, seed, request)
        r = _rank(rank, inst.ranks)
        body = _timeline_body(inst, r, f"{sid} · {seed} · rank {rank}")
        return timeline_response(body, request)

    @app.get("/api/scenarios/{sid}/{seed}/slices/{src}")
    def slice_args(sid: str, seed: str, src: int, request: Request, rank: str = "0"):
        """One slice as the Kineto export writes it (its args), by the viewer's `src` id."""
        inst = resolve(sid, seed, request)
        r = _rank(rank, inst.ranks)
        sub_rank, row = timeline.source_ref(src) if r == "all" else (r, src)
        if not 0 <= sub_rank < inst.ranks:
            raise HTTPException(404, f"no slice {src} in this instance")
        t = inst.trace(sub_rank)
        if not 0 <= row < len(t):
            raise HTTPException(404, f"no slice {src} in this instance")
        return kineto.event(t, row)

    @app.get("/scenarios/{sid}/{seed}/trace.json")
    def trace_json(sid: str, seed: str, request: Request, rank: int = 0):
        return _trace(sid, seed, request, rank, compress=False)

    @app.get("/scenarios/{sid}/{seed}/trace.json.gz")
    def trace_json_gz(sid: str, seed: str, request: Request, rank: int = 0):
        return _trace(sid, seed, request, rank, compress=True)

    @app.get("/scenarios/{sid}/{seed}/key.json")
    def key_json(sid: str, seed: str, request: Request):
        return resolve(sid, seed, request).key

    @app.get("/api/scenarios/{sid}/{seed}/tools/{tool_id}")
    def run_tool(sid: str, seed: str, tool_id: str, request: Request):
        """A measurement on an instance, as the real tool prints it (or why it does not
        apply), with its figures as chart data where the tool's natural output is a chart."""
        from app import tools

        inst = resolve(sid, seed, request)
        if tool_id not in tools.TOOLS:
            raise HTTPException(404, f"unknown tool {tool_id!r}; valid tools: {', '.join(tools.TOOLS)}")
        tool = tools.TOOLS[tool_id]
        options = {k: v for k, v in request.query_params.items() if k in tool.options and v}
        head = {"tool": tool_id, "title": tool.title, "command": tool.command}
        try:
            return {**head, "applicable": True, "output": tools.run(tool_id, inst, **options),
                    "chart": tools.chart(tool_id, inst, **options)}
        except tools.ToolNotApplicable as e:
            return {**head, "applicable": False, "reason": str(e)}
        except InstanceError as e:  # a bad option, e.g. an ncu kernel regex that matches nothing
            raise HTTPException(400, str(e)) from None

    @app.post("/api/scenarios/{sid}/{seed}/score")
    def score_read(sid: str, seed: str, body: Narration, request: Request):
        """Score a narrated read of an instance: contract 4, with evidence and misses."""
        from app.scoring.score import NarrationError, NarrationTooLong, score

        inst = resolve(sid, seed, request)
        try:
            return score(inst.key, inst.scenario.rubric, body.narration, [r.model_dump() for r in body.runs])
        except NarrationError as e:
            raise HTTPException(413 if isinstance(e, NarrationTooLong) else 400, str(e)) from None

    @app.exception_handler(HTTPException)
    def http_error(request: Request, exc: HTTPException):
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    def bad_body(request: Request, exc: RequestValidationError):
        """One line naming the field, like every other error here."""
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body") or "body"
        return JSONResponse({"error": f"{where}: {first.get('msg', 'invalid')}"}, status_code=422)

    return app


_BODIES: OrderedDict = OrderedDict()  # (id(instance), rank) -> (instance, gzipped body)
_BODIES_LOCK = threading.Lock()


def _timeline_body(inst, rank: int, title: str) -> bytes:
    """A 1M-slice body is ~30 MB and ~0.5 s to encode: keep the last few. Instances are
    cached (app.web.instances), so their identity keys the body; holding the instance
    keeps that identity from being reused."""
    key = (id(inst), rank)
    with _BODIES_LOCK:  # sync endpoints run on a thread pool
        if key in _BODIES:
            _BODIES.move_to_end(key)
            return _BODIES[key][1]
    steps = [(st["start_us"] * 1e3, st["end_us"] * 1e3) for st in inst.artifacts.get("steps", [])]
    if rank == "all":
        slices = timeline.stack([timeline.from_trace(inst.trace(r)) for r in range(inst.ranks)])
    else:
        slices = timeline.from_trace(inst.trace(rank))
    body = gzip.compress(timeline.encode(slices, title, steps), compresslevel=1)
    with _BODIES_LOCK:
        _BODIES[key] = (inst, body)
        while len(_BODIES) > 4:
            _BODIES.popitem(last=False)
    return body


def timeline_response(gz: bytes, request: Request) -> Response:
    """The viewer's columns, gzip-compressed once when built (level 1: ~4x smaller in a
    fifth of a second for a million slices); inflated here for a client that cannot."""
    headers = {"Cache-Control": "private, max-age=3600", "Vary": "Accept-Encoding"}
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(gz, media_type="application/octet-stream", headers={**headers, "Content-Encoding": "gzip"})
    return Response(gzip.decompress(gz), media_type="application/octet-stream", headers=headers)


def _rank(raw: str, ranks: int) -> int | str:
    """A rank number in range, or "all" (every rank stacked) on a multi-rank instance."""
    if raw == "all" and ranks > 1:
        return "all"
    try:
        r = int(raw)
    except ValueError:
        r = -1
    if not 0 <= r < ranks:
        more = ' or "all"' if ranks > 1 else ""
        raise HTTPException(400, f"rank {raw!r} out of range: this instance has {ranks} rank(s) (0-{ranks - 1}{more})")
    return r


def _page(sid: str, seed: str, request: Request, rank: str | None) -> dict:
    inst = resolve(sid, seed, request)
    # the instance's params, without the page's own keys (rank, testing)
    params = [(k, v) for k, v in request.query_params.multi_items() if k not in ("rank", "testing")]
    return viewer_context(inst, sid, seed, params, rank)


def viewer_context(inst, sid: str, seed: str, params: list[tuple[str, str]], rank: str | None) -> dict:
    """What a page with the viewer needs for an instance: its brief, the timeline, slice,
    download and tool URLs, and the case's charts. Never anything from the answer key
    but the brief."""
    from app import tools

    # a multi-rank case opens with every rank stacked: the straggler is a comparison
    rank = _rank(rank if rank is not None else ("all" if inst.ranks > 1 else "0"), inst.ranks)
    scn = scenarios.get(sid)
    query = urlencode(params)
    q = f"?{query}" if query else ""
    amp = f"&{query}" if query else ""
    base = f"/scenarios/{sid}/{seed}"
    return {
        "scenario": {"id": scn.id, "title": scn.title, "version": scn.version},
        "seed": seed, "rank": rank, "ranks": inst.ranks, "brief": inst.key["brief"],
        "params": inst.params.model_dump(),
        "timeline_url": f"/api/scenarios/{sid}/{seed}/timeline.bin?rank={rank}{amp}",
        "slice_url": f"/api/scenarios/{sid}/{seed}/slices/{{src}}?rank={rank}{amp}",
        "trace_urls": [f"{base}/trace.json?rank={r}{amp}" for r in range(inst.ranks)],
        "download_url": f"{base}/trace.json?rank={0 if rank == 'all' else rank}{amp}",
        "tools": [{"id": t.id, "title": t.title, "url": f"/api/scenarios/{sid}/{seed}/tools/{t.id}{q}"}
                  for t in tools.TOOLS.values()],
        "views": _views(inst),
    }


def _views(inst) -> list[dict]:
    """Charts a case shows beside its timeline: the symptom, never the decisive
    measurement (that one appears when the candidate runs its tool)."""
    from app.tools import ToolNotApplicable
    from app.tools.serving import itl_series

    views = []
    try:
        views.append(itl_series(inst))
    except ToolNotApplicable:
        pass
    return views


class Run(BaseModel):
    """A measurement the candidate ran, as the viewer records it."""

    tool: str = Field(max_length=64)
    at: str | None = Field(default=None, max_length=64)
    since_open_s: float | None = None


class Narration(BaseModel):
    narration: str
    runs: list[Run] = Field(default_factory=list, max_length=500)


def _trace(sid: str, seed: str, request: Request, rank: int, compress: bool) -> Response:
    inst = resolve(sid, seed, request)
    try:
        trace = inst.trace(rank)
    except InstanceError as e:
        raise HTTPException(400, str(e)) from None
    body = kineto.dumps(trace, inst.trace_name(rank)).encode()
    suffix = f"-rank{rank}" if inst.ranks > 1 else ""
    name = f"{sid}-{inst.seed}{suffix}.json"
    if compress:
        body = gzip.compress(body, compresslevel=3, mtime=0)
        name += ".gz"
    return Response(body, media_type="application/gzip" if compress else "application/json",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})
