"""Practice attempts over HTTP, owned by the signed browser identity cookie. Each write
is committed by app.practice (app.sharing for the report's link) before the response is
built."""

from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks, HTTPException, Request
from pydantic import BaseModel, Field, FiniteFloat

from app import practice, sharing
from app.scoring import second_opinion
from app.scoring.score import MAX_CHARS
from app.web import forms
from app.web.deps import Owner, StoreDep
from app.web.templates import templates

router = APIRouter()


class NewAttempt(BaseModel):
    scenario: str = Field(max_length=64, description='a scenario id, or "surprise"')
    seed: str | None = Field(default=None, max_length=32,
                             description="a public seed to practice on; by default a secret one is drawn")
    params: dict[str, str] = Field(default_factory=dict, max_length=64)
    family: str | None = Field(default=None, max_length=40, description="with surprise: draw from this family only")
    difficulty: str | None = Field(default=None, max_length=20,
                                   description="with surprise: draw from this difficulty only")


class Text(BaseModel):
    narration: str


class Submission(BaseModel):
    narration: str | None = None  # the last words, if the page has newer ones than its autosave
    timed: bool = False  # said in the 60-second mode


class Span(BaseModel):
    start_us: FiniteFloat
    end_us: FiniteFloat


class Marks(BaseModel):
    step: Span | None = None
    gap: Span | None = None


class Run(BaseModel):
    tool: str = Field(max_length=64)
    since_open_s: FiniteFloat | None = None


@router.post("/api/attempts", status_code=201)
def create_attempt(body: NewAttempt, store: StoreDep, who: Owner):
    return practice.public(practice.create(store, who, body.scenario, body.seed, body.params,
                                           family=body.family, difficulty=body.difficulty))


@router.get("/api/attempts")
def my_attempts(store: StoreDep, who: Owner):
    return {"attempts": [practice.public(a) for a in practice.mine(store, who)]}


@router.get("/api/attempts/{aid}")
def get_attempt(aid: str, store: StoreDep, who: Owner):
    a = practice.get(store, who, aid)
    return {**practice.public(a), **sharing.state(a), "saves": practice.saves(store, who, aid)}


@router.put("/api/attempts/{aid}/narration")
def autosave(aid: str, body: Text, store: StoreDep, who: Owner):
    return practice.save_narration(store, who, aid, body.narration)


@router.post("/api/attempts/{aid}/narration-beacon", status_code=204)
async def autosave_beacon(aid: str, request: Request, store: StoreDep, who: Owner):
    """The page's last words on unload (navigator.sendBeacon posts plain text; the
    security middleware has refused it already if it came from another site)."""
    raw = await request.body()
    if len(raw) > 4 * MAX_CHARS:
        raise HTTPException(413, f"the narration is over the {MAX_CHARS:,}-character limit")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HTTPException(400, f"the narration is not UTF-8 (byte {e.start})") from None
    from starlette.concurrency import run_in_threadpool

    await run_in_threadpool(practice.save_narration, store, who, aid, text)


@router.put("/api/attempts/{aid}/marks")
def marks(aid: str, body: Marks, store: StoreDep, who: Owner):
    return {"marks": practice.set_marks(store, who, aid, body.model_dump(exclude_none=True))}


@router.post("/api/attempts/{aid}/runs")
def run(aid: str, body: Run, store: StoreDep, who: Owner):
    return {"runs": practice.add_run(store, who, aid, body.tool, body.since_open_s)}


@router.post("/api/attempts/{aid}/submit")
def submit(aid: str, store: StoreDep, who: Owner, background: BackgroundTasks, body: Submission | None = None):
    body = body or Submission()
    a, report = practice.submit(store, who, aid, body.narration, body.timed)
    if second_opinion.is_pending(report):
        # after the response: the report is stored and answered, the opinion joins it later
        background.add_task(practice.add_second_opinion, store, a.public_id)
    return {"id": a.public_id, **report}


# -- the report's link ---------------------------------------------------------------------

def _shared(request: Request, a):
    """`{url, shared_at}` for scripts (url: null once revoked); for htmx, the report
    page's share controls as they now stand."""
    state = sharing.state(a)
    if forms.wants_fragment(request):
        return templates.TemplateResponse(request, "_share.html", {"attempt": {**practice.public(a), **state}})
    return {"url": state["share_url"], "shared_at": state["shared_at"]}


@router.post("/api/attempts/{aid}/share")
def share(aid: str, request: Request, store: StoreDep, who: Owner):
    """A link anyone can read the submitted report with; any earlier link stops working."""
    return _shared(request, sharing.share(store, who, aid))


@router.delete("/api/attempts/{aid}/share")
def unshare(aid: str, request: Request, store: StoreDep, who: Owner):
    """Every link to the report stops working."""
    return _shared(request, sharing.revoke(store, who, aid))
