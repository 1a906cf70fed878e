"""The candidate's side of a live round, reached only through the link's token (no
account): the page (the practice round's page without a score), its JSON twin, the
round's instance under the link's own URLs, the candidate's writes under /api/r/{token}/
and their own event stream (hints, phase, lock, end).

Nothing here names the scenario or the seed, or serves the key, the model answer, the
traps or a score, before or after the round ends (tests/test_rounds_secrecy.py). The one
list of cases is the candidate's own practice history (/api/r/{token}/practice), which
the round's page loads after itself: the titles of what that browser practised, with
their totals, to attach to the round with consent (app/rounds/consent.py).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from fastapi import APIRouter, Body, HTTPException, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field, FiniteFloat, field_validator
from starlette.concurrency import run_in_threadpool

from app.rounds import consent, live
from app.scenario import InstanceError
from app.config import get_settings
from app.web import deps, forms, instances as served, sql_console, sse
from app.web.attempts import Marks, Text
from app.web.deps import Owner, StoreDep
from app.web.templates import templates

router = APIRouter()


def _urls(token: str) -> served.Urls:
    return served.Urls(f"/r/{token}", f"/r/{token}")


def _view(store, token: str) -> tuple:
    r = live.by_token(store, token)
    return r, live.candidate_view(store, r)


@router.get("/r/{token}.json")
def candidate_json(token: str, store: StoreDep, rank: str | None = None):
    r, view = _view(store, token)
    ctx = served.viewer_context(live.instance_of(r), _urls(token), rank)
    return {**view, **{k: v for k, v in ctx.items() if k not in ("views", "brief")},
            "events_url": f"/r/{token}/events", "api": f"/api/r/{token}"}


@router.get("/r/{token}", include_in_schema=False)
def candidate_page(token: str, request: Request, store: StoreDep, rank: str | None = None):
    r = live.opened(store, token, request.headers.get("user-agent", ""))
    view = live.candidate_view(store, r)
    ctx = served.viewer_context(live.instance_of(r), _urls(token), rank)
    return templates.TemplateResponse(request, "round_candidate.html", {
        **ctx, "sql_url": sql_console.url(_urls(token), ctx["rank"]), "round": view,
        "page": {"api": f"/api/r/{token}", "events_url": f"/r/{token}/events", "after": view["last_event_id"],
                 "narration": view["narration"], "marks": view["marks"], "runs": view["runs"],
                 "timer": view["timer"], "ended": view["ended"], "max_chars": view["max_chars"],
                 "submitted_at": view["submitted_at"]}})


@router.get("/r/{token}/events")
def candidate_events(token: str, request: Request, store: StoreDep):
    """What the interviewer pushes: hints, phase, lock and end (text/event-stream); each
    event is followed by the status fragment the page swaps in (htmx hx-sse)."""
    r = live.by_token(store, token)

    def fragment(e: dict) -> bytes:
        try:
            view = live.candidate_view(store, live.by_token(store, token))
        except InstanceError:  # the link expired or was replaced while the page was open
            return b": this link no longer opens the round\n\n"
        html = templates.get_template("_candidate_status.html").render(round=view)
        lines = "".join(f"data: {line}\n" for line in html.splitlines() if line.strip())
        return f"id: {e['id']}\n{lines}\n".encode()

    return sse.stream(request, store, r.id, live.TO_CANDIDATE, fragment)


@router.get("/r/{token}/status", include_in_schema=False)
def candidate_status(token: str, request: Request, store: StoreDep):
    """The status fragment on its own (the page's first paint and a reconnect)."""
    _, view = _view(store, token)
    return templates.TemplateResponse(request, "_candidate_status.html", {"round": view})


# -- the round's instance, by the link alone ------------------------------------------------

def _instance(store, token):
    r = live.by_token(store, token)
    return r, served.http(lambda: live.instance_of(r))


@router.get("/r/{token}/timeline.bin")
def candidate_timeline(token: str, request: Request, store: StoreDep, rank: str = "0"):
    _, inst = _instance(store, token)
    r = served.parse_rank(rank, inst.ranks)
    return served.timeline_response(served.timeline_body(inst, r, "interview round", counters=False), request)


@router.get("/r/{token}/slices/{src}")
def candidate_slice(token: str, src: str, store: StoreDep, rank: str = "0"):
    _, inst = _instance(store, token)
    return served.slice_args(inst, served.parse_rank(rank, inst.ranks), src)


@router.get("/r/{token}/trace.json")
def candidate_trace(token: str, store: StoreDep, rank: str = "0"):
    _, inst = _instance(store, token)
    return served.trace_download(inst, rank, "interview-round", compress=False)


@router.get("/r/{token}/trace.json.gz")
def candidate_trace_gz(token: str, store: StoreDep, rank: str = "0"):
    _, inst = _instance(store, token)
    return served.trace_download(inst, rank, "interview-round", compress=True)


@router.post("/r/{token}/sql")
def candidate_sql(token: str, body: sql_console.Query, store: StoreDep, rank: str = "0"):
    """The Query tab: SQL over the round's trace (the trace only: nothing of the key). Each
    query joins the round's log, answered or refused, for the interviewer's console."""
    _, inst = _instance(store, token)
    try:
        res = sql_console.instance_result(inst, rank, body.query, get_settings())
    except HTTPException as e:
        if e.status_code != 429:  # busy is the server's state, not something the candidate asked
            live.add_query(store, token, body.query, None, str(e.detail))
        raise
    live.add_query(store, token, body.query, len(res.rows), None)
    return sql_console.response(res)


@router.get("/r/{token}/tools/{tool_id}")
def candidate_tool(token: str, tool_id: str, request: Request, store: StoreDep):
    _, inst = _instance(store, token)
    return served.run_tool(inst, tool_id, request)


# -- the candidate's writes -------------------------------------------------------------------

class Run(BaseModel):
    tool: str = Field(max_length=64)
    options: dict[str, str] = Field(default_factory=dict, max_length=8)
    since_open_s: FiniteFloat | None = None


class Area(BaseModel):
    start_ns: FiniteFloat
    end_ns: FiniteFloat


class Viewport(BaseModel):
    kind: Literal["viewport"]
    start_ns: FiniteFloat
    end_ns: FiniteFloat
    scroll_y: FiniteFloat = 0
    rank: str = Field(default="0", max_length=8)
    t: FiniteFloat | None = None  # the browser's clock when sent (ms since the epoch): for latency figures


class Selection(BaseModel):
    kind: Literal["selection"]
    area: Area | None = None
    row: int | None = Field(default=None, ge=0, le=2**31)  # the slice's row in the round's timeline
    name: str | None = Field(default=None, max_length=300)
    t: FiniteFloat | None = None


class Integrity(BaseModel):
    kind: Literal["integrity"]
    what: Literal["hidden", "visible", "paste", "blur", "focus"]
    chars: int | None = Field(default=None, ge=0, le=10**7)  # a paste's size
    t: FiniteFloat | None = None


class Note(BaseModel):
    """A note the candidate put on the timeline (Shift+M): a point, or a span with `end_ns`."""
    kind: Literal["note"]
    text: str = Field(min_length=1, max_length=500)
    start_ns: FiniteFloat
    end_ns: FiniteFloat | None = None
    id: str | None = Field(default=None, max_length=40)
    t: FiniteFloat | None = None

    @field_validator("text")
    @classmethod
    def _some_text(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("a note needs some text")
        return v.strip()


CandidateEvent = Annotated[Union[Viewport, Selection, Integrity, Note], Field(discriminator="kind")]


@router.put("/api/r/{token}/narration")
def put_narration(token: str, body: Text, store: StoreDep):
    return live.save_narration(store, token, body.narration)


@router.post("/api/r/{token}/narration-beacon", status_code=204)
async def narration_beacon(token: str, request: Request, store: StoreDep):
    """The page's last words on unload (navigator.sendBeacon posts plain text)."""
    raw = await request.body()
    if len(raw) > 4 * live.MAX_CHARS:
        return Response(status_code=413)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Response(status_code=400)
    await run_in_threadpool(live.save_narration, store, token, text)


@router.put("/api/r/{token}/marks")
def put_marks(token: str, body: Marks, store: StoreDep):
    return {"marks": live.set_marks(store, token, body.model_dump(exclude_none=True))}


@router.post("/api/r/{token}/runs")
def post_run(token: str, body: Run, store: StoreDep):
    return {"runs": live.add_run(store, token, body.tool, body.options, body.since_open_s)}


@router.post("/api/r/{token}/events", status_code=201)
async def post_event(token: str, body: CandidateEvent = Body()):
    """`{kind: viewport|selection|integrity|note, ...}`: the console mirrors it (a note joins
    the interviewer's notes, by "candidate"). Async, with no
    sync dependency (FastAPI runs those in the thread pool): several a second per candidate."""
    data = body.model_dump(exclude={"kind"}, exclude_none=True)
    return {"id": await live.candidate_event_async(deps.store(), token, body.kind, data)}


@router.post("/api/r/{token}/submit")
def post_submit(token: str, store: StoreDep):
    return live.submit(store, token)


# -- the candidate's practice history, shown to the round's team with their consent ------------

PublicId = Annotated[str, Field(min_length=1, max_length=32)]


class PracticeChoice(BaseModel):
    attempt_ids: list[PublicId] = Field(default_factory=list, max_length=consent.MAX_ATTACHED)

    @field_validator("attempt_ids", mode="before")
    @classmethod
    def _one_box(cls, v):
        """A form with one box ticked sends one value, not a list."""
        return [v] if isinstance(v, str) else v


def _practice(request: Request, store, token: str, who: str, result: dict | None = None):
    """This browser's submitted attempts and which are attached (with the change's result,
    if any) for scripts; for htmx, the round page's consent panel."""
    view = consent.listing(store, token, who)
    if forms.wants_fragment(request):
        return templates.TemplateResponse(request, "_practice_consent.html",
                                          {"practice": view, "api": f"/api/r/{token}", "result": result})
    return {**view, **(result or {})}


@router.get("/api/r/{token}/practice")
def get_practice(token: str, request: Request, store: StoreDep, who: Owner):
    return _practice(request, store, token, who)


@router.put("/api/r/{token}/practice")
async def put_practice(token: str, request: Request, store: StoreDep, who: Owner):
    """`{attempt_ids: [...]}`: the attempts of this browser the round's team may read,
    replacing the ones it attached before (an empty list withdraws them)."""
    body = await forms.parse(request, PracticeChoice)
    out = await run_in_threadpool(consent.attach, store, token, who, body.attempt_ids)
    return await run_in_threadpool(_practice, request, store, token, who, out)


@router.delete("/api/r/{token}/practice")
def delete_practice(token: str, request: Request, store: StoreDep, who: Owner):
    """Withdraw consent: the round's team no longer reads any attached attempt."""
    return _practice(request, store, token, who, consent.withdraw(store, token))
