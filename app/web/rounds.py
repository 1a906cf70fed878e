"""The interviewer's side of a live round (contract 7): the rounds list, the question
bank, creating a round, the console with its event stream, and the console's actions
(hints, notes, phase, lock, end, scorecard). Each page has its JSON twin; each action
answers JSON to scripts and a server-rendered fragment to htmx.

A round's instance reaches the console under /rounds/{id}/ (timeline, slices, trace,
tools) for the round's team only; the candidate reaches the same instance under the
link's own URLs (app/web/candidate.py).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, BackgroundTasks, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse
from pydantic import BaseModel, Field, field_validator, model_validator
from starlette.concurrency import run_in_threadpool

import scenarios
from app.config import get_settings
from app.review import access, anchors, view as review_view
from app.rounds import candidates, live, questions
from app.scoring import second_opinion
from app.web import forms, instances as served, sse
from app.web.deps import StaffDep, StaffPage, StoreDep
from app.web.templates import templates

router = APIRouter()


def links(r, token: str | None = None) -> dict:
    out = {"id": r.public_id, "console_url": f"/rounds/{r.public_id}",
           "review_url": f"/rounds/{r.public_id}/review"}
    if token is not None:
        out["candidate_url"] = f"/r/{token}"
    return out


# -- the rounds list and new rounds ----------------------------------------------------------

def _rounds(store, staff, rows) -> list[dict]:
    """Rounds as this person may see them: the candidate by pseudonym unless they run
    rounds in that team, the console only for those who do."""
    cands = candidates.by_ids(store, [r.candidate_id for r in rows if r.candidate_id])
    out = []
    for r in rows:
        c = cands.get(r.candidate_id)
        who = candidates.public(c, staff) if c else None
        runs, named = staff.is_(r.team_id, *live.RUNNERS), staff.is_(r.team_id, *candidates.NAME_ROLES)
        out.append({**live.summary(r), "candidate_name": r.candidate_name if named else None,
                    "candidate": who["display"] if who else (r.candidate_name if named else None) or "—",
                    "candidate_url": who["url"] if who else None, "gold": r.gold, "team_id": r.team_id,
                    "console_url": f"/rounds/{r.public_id}" if runs else None,
                    # a review link where it opens (access.for_review has the whole rule: an
                    # interviewer who only scored or took notes finds it from the console)
                    "review_url": f"/rounds/{r.public_id}/review" if staff.is_(r.team_id, "admin") or (
                        staff.is_(r.team_id, "reviewer") and r.ended_at) or r.created_by == staff.user_id else None})
    return out


def _listing(store, staff) -> dict:
    teams = [{"id": tid, "slug": staff.teams.get(tid), "role": role} for tid, role in staff.roles.items()]
    return {"me": {"email": staff.email, "teams": teams},
            "rounds": _rounds(store, staff, live.listing(store, staff)),
            "scenarios": [{"id": s.id, "title": s.title} for s in scenarios.REGISTRY.values()],
            "runs_rounds": any(role in live.RUNNERS for role in staff.roles.values())}


@router.get("/rounds.json")
def rounds_json(store: StoreDep, staff: StaffDep):
    return _listing(store, staff)


@router.get("/rounds", include_in_schema=False)
def rounds_page(request: Request, store: StoreDep, staff: StaffPage):
    return templates.TemplateResponse(request, "rounds.html", _listing(store, staff))


class NewRound(BaseModel):
    scenario: str | None = Field(default=None, max_length=64)
    seed: int | str | None = Field(default=None, description='N, "canonical" or "secret" (default)')
    params: dict[str, str] = Field(default_factory=dict, max_length=64)
    question_id: int | None = None
    team: str | None = Field(default=None, max_length=64, description="team slug, if you run rounds in several")
    candidate_name: str | None = Field(default=None, max_length=200)
    candidate: str | None = Field(default=None, max_length=8, description="an existing candidate's code (7F3A)")

    @field_validator("seed", "question_id", "scenario", "team", "candidate_name", "candidate", mode="before")
    @classmethod
    def _blank(cls, v):  # a form's empty field is "not given"
        return None if v == "" else v

    @model_validator(mode="after")
    def _one(self):
        if (self.scenario is None) == (self.question_id is None):
            raise ValueError("give either a scenario or a question_id")
        return self


def _create(store, staff, body: NewRound):
    team_id = None
    if body.team is not None:
        team_id = staff.team_id(body.team.lower())
        if team_id is None:
            raise live.NoRound(f"you are not in a team {body.team[:64]!r}")
    return live.create(store, staff, scenario=body.scenario, seed=body.seed, params=body.params,
                       question_id=body.question_id, team_id=team_id, candidate_name=body.candidate_name,
                       candidate_code=body.candidate,
                       link_hours=get_settings().candidate_link_hours)


@router.post("/api/rounds", status_code=201)
async def create_round(request: Request, store: StoreDep, staff: StaffDep):
    """JSON `{scenario, seed: N | "canonical" | "secret", params?}` or `{question_id}`:
    201 `{id, candidate_url, console_url, review_url}`. A form post (the rounds and
    question pages) goes to the console, which shows the candidate link once."""
    body = await forms.parse(request, NewRound)
    r, token = await run_in_threadpool(_create, store, staff, body)
    out = links(r, token)
    if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        # the fragment never reaches the server: the console reads it once and drops it
        return RedirectResponse(f"{out['console_url']}#link={token}", 303)
    return JSONResponse(out, 201)


@router.post("/api/rounds/{rid}/link")
def new_link(rid: str, store: StoreDep, staff: StaffDep):
    """A fresh candidate link; the previous one stops working."""
    token = live.new_link(store, staff, rid, get_settings().candidate_link_hours)
    return {"candidate_url": f"/r/{token}"}


# -- the question bank ---------------------------------------------------------------------

def _bank(store, staff) -> dict:
    teams = []
    for tid, role in staff.roles.items():
        qs = questions.for_team(store, staff, tid)
        teams.append({"id": tid, "slug": staff.teams.get(tid), "role": role, "edit": role in live.RUNNERS,
                      "questions": [questions.public(q) for q in qs]})
    return {"teams": teams, "scenarios": [{"id": s.id, "title": s.title} for s in scenarios.REGISTRY.values()],
            "instance_kinds": questions.INSTANCE_KINDS, "difficulties": questions.DIFFICULTIES,
            "phases": questions.PHASES}


@router.get("/questions.json")
def questions_json(store: StoreDep, staff: StaffDep):
    return _bank(store, staff)


@router.get("/questions", include_in_schema=False)
def questions_page(request: Request, store: StoreDep, staff: StaffPage):
    return templates.TemplateResponse(request, "questions.html", _bank(store, staff))


class NewQuestion(BaseModel):
    team: str | None = Field(default=None, max_length=64)
    title: str = Field(max_length=200)
    scenario: str = Field(max_length=64)
    instance: Literal["canonical", "seed", "secret"] = "secret"
    seed: str | None = Field(default=None, max_length=32)
    params: dict[str, str] = Field(default_factory=dict, max_length=64)
    time_plan: list[dict] | None = None
    brief_minutes: int | None = Field(default=None, ge=1, le=questions.MAX_MINUTES)
    reading_minutes: int | None = Field(default=None, ge=1, le=questions.MAX_MINUTES)
    discussion_minutes: int | None = Field(default=None, ge=1, le=questions.MAX_MINUTES)
    tags: list[str] | str = Field(default_factory=list)
    difficulty: Literal["easy", "medium", "hard"] = "medium"

    @field_validator("seed", "team", "brief_minutes", "reading_minutes", "discussion_minutes", mode="before")
    @classmethod
    def _blank(cls, v):
        return None if v == "" else v

    @field_validator("params", mode="before")
    @classmethod
    def _params(cls, v):
        """A form sends params as lines of K=V."""
        if isinstance(v, str):
            out = {}
            for line in v.replace(",", "\n").splitlines():
                if line.strip():
                    k, sep, val = line.partition("=")
                    if not sep:
                        raise ValueError(f"params: want KEY=VALUE per line, got {line.strip()[:40]!r}")
                    out[k.strip()] = val.strip()
            return out
        return v

    def plan(self) -> list[dict] | None:
        if self.time_plan is not None:
            return self.time_plan
        given = [(p, getattr(self, f"{p}_minutes")) for p in questions.PHASES]
        return [{"phase": p, "minutes": m} for p, m in given if m] or None

    def tag_list(self) -> list[str]:
        return [t for t in (self.tags.split(",") if isinstance(self.tags, str) else self.tags)]


@router.post("/api/questions", status_code=201)
async def create_question(request: Request, store: StoreDep, staff: StaffDep):
    body = await forms.parse(request, NewQuestion)
    team_id = staff.team_id(body.team.lower()) if body.team else live.team_for(staff, None)
    if team_id is None:
        raise live.NoRound(f"you are not in a team {body.team!r}")
    q = await run_in_threadpool(lambda: questions.create(
        store, staff, team_id, title=body.title, scenario=body.scenario, instance=body.instance, seed=body.seed,
        params=body.params, time_plan=body.plan(), tags=body.tag_list(), difficulty=body.difficulty))
    if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return RedirectResponse("/questions", 303)
    return JSONResponse(questions.public(q), 201)


@router.post("/api/questions/{qid}/archive")
def archive_question(qid: int, request: Request, store: StoreDep, staff: StaffDep):
    questions.archive(store, staff, qid)
    if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return RedirectResponse("/questions", 303)
    return {"archived": qid}


# -- the console ---------------------------------------------------------------------------------

def _urls(r) -> served.Urls:
    return served.Urls(f"/rounds/{r.public_id}", f"/rounds/{r.public_id}")


def _console(store, staff, rid: str, whole_log: bool = False) -> tuple:
    r = live.for_staff(store, staff, rid, live.RUNNERS)
    view = live.console_view(store, staff, r, whole_log)
    view["rubric"] = anchors.anchored(view["rubric"], anchors.for_scenario(store, r.team_id, r.scenario))
    return r, view


@router.get("/rounds/{rid}.json")
def console_json(rid: str, store: StoreDep, staff: StaffDep):
    return _console(store, staff, rid, whole_log=True)[1]


@router.get("/rounds/{rid}", include_in_schema=False)
def console_page(rid: str, request: Request, store: StoreDep, staff: StaffPage):
    r, view = _console(store, staff, rid)
    inst = live.instance_of(r)
    return templates.TemplateResponse(request, "round_console.html", {
        **served.viewer_context(inst, _urls(r), None), "console": view,
        "page": {"id": r.public_id, "events_url": f"/rounds/{r.public_id}/events",
                 "after": view["state"]["last_event_id"], "narration": view["state"]["narration"],
                 "marks": view["state"]["marks"], "timer": view["timer"],
                 # the tools run and the queries asked, in the order they happened, as the live list shows them
                 "runs": sorted(view["state"]["runs"] + view["queries"], key=lambda x: x.get("at") or ""),
                 "tool_base": f"/rounds/{r.public_id}/tools/", "integrity": view["integrity"][-300:]}})


@router.get("/rounds/{rid}/events")
def console_events(rid: str, request: Request, store: StoreDep, staff: StaffDep):
    """Every event of the round as it happens (text/event-stream; resumes from Last-Event-ID)."""
    r = live.for_staff(store, staff, rid, live.RUNNERS)
    return sse.stream(request, store, r.id)


@router.get("/rounds/{rid}/timeline.bin")
def console_timeline(rid: str, request: Request, store: StoreDep, staff: StaffDep, rank: str = "0"):
    r = live.for_staff(store, staff, rid, live.RUNNERS)
    inst = served.http(lambda: live.instance_of(r))
    rk = served.parse_rank(rank, inst.ranks)
    return served.timeline_response(served.timeline_body(inst, rk, f"round {r.public_id}"), request)


@router.get("/rounds/{rid}/slices/{src}")
def console_slice(rid: str, src: str, store: StoreDep, staff: StaffDep, rank: str = "0"):
    r = live.for_staff(store, staff, rid, live.RUNNERS)
    inst = served.http(lambda: live.instance_of(r))
    return served.slice_args(inst, served.parse_rank(rank, inst.ranks), src)


@router.get("/rounds/{rid}/trace.json")
def console_trace(rid: str, store: StoreDep, staff: StaffDep, rank: str = "0"):
    r = live.for_staff(store, staff, rid, live.RUNNERS)
    return served.trace_download(served.http(lambda: live.instance_of(r)), rank, f"round-{r.public_id}", False)


@router.get("/rounds/{rid}/tools/{tool_id}")
def console_tool(rid: str, tool_id: str, request: Request, store: StoreDep, staff: StaffDep):
    """The tool's output as the candidate saw it (the console fetches each run's)."""
    r = live.for_staff(store, staff, rid, live.RUNNERS)
    return served.run_tool(served.http(lambda: live.instance_of(r)), tool_id, request)


# -- the console's actions -------------------------------------------------------------------------

def _answer(request: Request, store, staff, rid: str, result: dict, fragment: str):
    """JSON for scripts; for htmx, the console's fragment as it stands now."""
    if not forms.wants_fragment(request):
        return result
    r, view = _console(store, staff, rid)
    return templates.TemplateResponse(request, fragment, {"console": view, "rid": r.public_id})


class HintBody(BaseModel):
    index: int = Field(ge=0, le=100)


@router.post("/api/rounds/{rid}/hints")
async def reveal_hint(rid: str, request: Request, store: StoreDep, staff: StaffDep):
    body = await forms.parse(request, HintBody)
    out = await run_in_threadpool(live.reveal_hint, store, staff, rid, body.index)
    return await run_in_threadpool(_answer, request, store, staff, rid, out, "_console_hints.html")


class NoteBody(BaseModel):
    text: str = Field(max_length=live.MAX_NOTE_CHARS)


@router.post("/api/rounds/{rid}/notes")
async def add_note(rid: str, request: Request, store: StoreDep, staff: StaffDep):
    body = await forms.parse(request, NoteBody)
    out = await run_in_threadpool(live.add_note, store, staff, rid, body.text)
    return await run_in_threadpool(_answer, request, store, staff, rid, out, "_console_notes.html")


class PhaseBody(BaseModel):
    phase: str = Field(max_length=32)


@router.post("/api/rounds/{rid}/phase")
async def set_phase(rid: str, request: Request, store: StoreDep, staff: StaffDep):
    body = await forms.parse(request, PhaseBody)
    out = await run_in_threadpool(live.set_phase, store, staff, rid, body.phase)
    return await run_in_threadpool(_answer, request, store, staff, rid, out, "_console_controls.html")


class LockBody(BaseModel):
    locked: bool


@router.post("/api/rounds/{rid}/lock")
async def set_lock(rid: str, request: Request, store: StoreDep, staff: StaffDep):
    body = await forms.parse(request, LockBody)
    out = await run_in_threadpool(live.set_lock, store, staff, rid, body.locked)
    return await run_in_threadpool(_answer, request, store, staff, rid, out, "_console_controls.html")


@router.post("/api/rounds/{rid}/end")
def end_round(rid: str, request: Request, store: StoreDep, staff: StaffDep, background: BackgroundTasks):
    out = live.end(store, staff, rid)
    if not out["already"] and second_opinion.wanted():
        background.add_task(live.add_second_opinion, store, rid)  # after the response: it never waits on it
    return _answer(request, store, staff, rid, out, "_console_controls.html")


class ScorecardBody(BaseModel):
    criteria: dict[str, int] = Field(max_length=20)
    recommendation: int
    notes: str = Field(default="", max_length=live.MAX_NOTE_CHARS * 4)

    @model_validator(mode="before")
    @classmethod
    def _form(cls, v):
        """A form sends criterion_<id>=level fields."""
        if isinstance(v, dict) and "criteria" not in v:
            v = {**v, "criteria": {k[len("criterion_"):]: lv for k, lv in v.items() if k.startswith("criterion_")}}
        return v


@router.put("/api/rounds/{rid}/scorecard")
async def put_scorecard(rid: str, request: Request, store: StoreDep, staff: StaffDep, part: str = "console"):
    """A rater's scorecard; htmx gets back the fragment it came from (`part`: the
    console's scorecard, or the review page's scorecards, which may now show the others')."""
    body = await forms.parse(request, ScorecardBody)
    out = await run_in_threadpool(live.put_scorecard, store, staff, rid, body.criteria, body.recommendation,
                                  body.notes)
    if part == "review" and forms.wants_fragment(request):
        return await run_in_threadpool(_review_part, request, store, staff, rid)
    return await run_in_threadpool(_answer, request, store, staff, rid, out, "_console_scorecard.html")


def _review_part(request: Request, store, staff, rid: str):
    r = access.for_review(store, staff, rid)
    return templates.TemplateResponse(request, "_review_scorecards.html", {"v": review_view.review(store, staff, r)})


PARTS = {"controls": "_console_controls.html", "hints": "_console_hints.html", "notes": "_console_notes.html",
         "scorecard": "_console_scorecard.html"}


@router.get("/rounds/{rid}/parts/{part}", include_in_schema=False)
def console_part(rid: str, part: str, request: Request, store: StoreDep, staff: StaffDep):
    """One of the console's fragments as it stands (the console refreshes it when the log
    says it changed, e.g. a hint another interviewer revealed)."""
    if part not in PARTS:
        raise HTTPException(404, f"no console part {part[:40]!r}; parts: {', '.join(PARTS)}")
    r, view = _console(store, staff, rid)
    return templates.TemplateResponse(request, PARTS[part], {"console": view, "rid": r.public_id})
