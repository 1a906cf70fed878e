"""The hiring team's side (contract 7): a round's review (replay, final read with its
evidence, scorecards under the blind rule, anchors, the gold set) with its JSON twin and
the round's instance for the replay's timeline; candidates and their rounds; candidates
side by side on one question; the team's scorecard rule. The calibration page and the
exports have their own routers."""

from __future__ import annotations

import html

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

import scenarios
from app.accounts import AccessDenied
from app.db.staff import VISIBILITY
from app.review import access, anchors, compare, view
from app.rounds import candidates, live
from app.web import forms, instances as served
from app.web.deps import StaffDep, StaffPage, StoreDep
from app.web.templates import templates

router = APIRouter()


# -- a round's review ------------------------------------------------------------------------

def _review(store, staff, rid: str, at: str | None = None) -> tuple:
    r = access.for_review(store, staff, rid)
    if at is not None:
        try:
            view.replay.parse_time(at)
        except ValueError:
            raise HTTPException(400, f"at: want an ISO 8601 time, got {at[:40]!r}") from None
    return r, view.review(store, staff, r, at)


@router.get("/rounds/{rid}/review.json")
def review_json(rid: str, store: StoreDep, staff: StaffDep, at: str | None = None):
    """Everything the review page shows, as this person may see it; `?at=` (ISO time) adds
    `state_at`, the round as it stood then, replayed from its log."""
    return _review(store, staff, rid, at)[1]


@router.get("/rounds/{rid}/review", include_in_schema=False)
def review_page(rid: str, request: Request, store: StoreDep, staff: StaffPage):
    r, v = _review(store, staff, rid)
    inst = live.instance_of(r)
    base = f"/rounds/{r.public_id}/review"
    ctx = served.viewer_context(inst, served.Urls(base, base), None)
    ctx["download_url"] = None  # the review's timeline is for the replay; the trace is on the console
    return templates.TemplateResponse(request, "round_review.html", {
        **ctx, "v": v, "page": {"id": r.public_id, "json_url": f"{base}.json", "tool_base": f"{base}/tools/"}})


@router.get("/rounds/{rid}/review/timeline.bin")
def review_timeline(rid: str, request: Request, store: StoreDep, staff: StaffDep, rank: str = "0"):
    r = access.for_review(store, staff, rid)
    inst = served.http(lambda: live.instance_of(r))
    return served.timeline_response(served.timeline_body(inst, served.parse_rank(rank, inst.ranks),
                                                         f"round {r.public_id}"), request)


@router.get("/rounds/{rid}/review/slices/{src}")
def review_slice(rid: str, src: str, store: StoreDep, staff: StaffDep, rank: str = "0"):
    r = access.for_review(store, staff, rid)
    inst = served.http(lambda: live.instance_of(r))
    return served.slice_args(inst, served.parse_rank(rank, inst.ranks), src)


@router.get("/rounds/{rid}/review/tools/{tool_id}")
def review_tool(rid: str, tool_id: str, request: Request, store: StoreDep, staff: StaffDep):
    """A measurement's output as the candidate saw it when they ran it."""
    r = access.for_review(store, staff, rid)
    return served.run_tool(served.http(lambda: live.instance_of(r)), tool_id, request)


@router.get("/rounds/{rid}/review/parts/scorecards", include_in_schema=False)
def review_scorecards_part(rid: str, request: Request, store: StoreDep, staff: StaffDep):
    r, v = _review(store, staff, rid)
    return templates.TemplateResponse(request, "_review_scorecards.html", {"v": v})


# -- the gold set and anchors ------------------------------------------------------------------

class GoldBody(BaseModel):
    gold: bool


@router.post("/api/rounds/{rid}/gold")
async def set_gold(rid: str, request: Request, store: StoreDep, staff: StaffDep):
    body = await forms.parse(request, GoldBody)
    out = await run_in_threadpool(anchors.set_gold, store, staff, rid, body.gold)
    return await run_in_threadpool(_curation_answer, request, store, staff, rid, out)


class AnchorBody(BaseModel):
    level: int = Field(ge=1, le=4)
    note: str = Field(default="", max_length=anchors.MAX_NOTE_CHARS)


@router.put("/api/rounds/{rid}/anchors/{criterion}")
async def put_anchor(rid: str, criterion: str, request: Request, store: StoreDep, staff: StaffDep):
    body = await forms.parse(request, AnchorBody)
    out = await run_in_threadpool(anchors.set_anchor, store, staff, rid, criterion, body.level, body.note)
    return await run_in_threadpool(_curation_answer, request, store, staff, rid, out)


@router.delete("/api/rounds/{rid}/anchors/{criterion}")
def delete_anchor(rid: str, criterion: str, request: Request, store: StoreDep, staff: StaffDep):
    out = anchors.remove_anchor(store, staff, rid, criterion)
    return _curation_answer(request, store, staff, rid, out)


def _curation_answer(request: Request, store, staff, rid: str, result: dict):
    if not forms.wants_fragment(request):
        return result
    r, v = _review(store, staff, rid)
    return templates.TemplateResponse(request, "_review_curation.html", {"v": v})


# -- candidates ---------------------------------------------------------------------------------

def _candidates(store, staff) -> dict:
    return {"candidates": [{**candidates.public(c, staff), "rounds": n, "team": staff.teams.get(c.team_id)}
                           for c, n in candidates.listing(store, staff)]}


@router.get("/candidates.json")
def candidates_json(store: StoreDep, staff: StaffDep):
    return _candidates(store, staff)


@router.get("/candidates", include_in_schema=False)
def candidates_page(request: Request, store: StoreDep, staff: StaffPage):
    return templates.TemplateResponse(request, "candidates.html", _candidates(store, staff))


def _candidate(store, staff, code: str) -> dict:
    c = candidates.by_code(store, staff, code)
    rounds = []
    for r in candidates.rounds_of(store, c):
        cards = view.scorecards_for(store, staff, r)
        named = staff.is_(r.team_id, *candidates.NAME_ROLES)
        rounds.append({**live.summary(r), "candidate_name": r.candidate_name if named else None,
                       "review_url": f"/rounds/{r.public_id}/review", "question_id": r.question_id,
                       "auto_total": (r.auto_report or {}).get("total") if cards["auto_visible"] else None,
                       "gold": r.gold})
    return {"candidate": candidates.public(c, staff), "rounds": rounds}


@router.get("/candidates/{code}.json")
def candidate_json(code: str, store: StoreDep, staff: StaffDep):
    return _candidate(store, staff, code)


@router.get("/candidates/{code}", include_in_schema=False)
def candidate_page(code: str, request: Request, store: StoreDep, staff: StaffPage):
    return templates.TemplateResponse(request, "candidate.html", _candidate(store, staff, code))


# -- candidates side by side ---------------------------------------------------------------------

def _compare(store, staff, question: int | None, scenario: str | None, team: str | None) -> dict:
    team_id = staff.team_id(team.lower()) if team else None
    if team and team_id is None:
        raise live.NoRound(f"you are not in a team {team[:64]!r}")
    if scenario is not None and scenario not in scenarios.REGISTRY:
        raise HTTPException(404, f"unknown scenario {scenario[:64]!r}; valid: {', '.join(scenarios.REGISTRY)}")
    out = compare.side_by_side(store, staff, question_id=question, scenario=scenario, team_id=team_id)
    if not staff.is_(out["team_id"], *access.REVIEWERS):
        raise AccessDenied("comparing candidates is for the team's reviewers and admins")
    return out


QuestionId = Annotated[int | None, Query(ge=1, le=2**31 - 1)]  # an id the database's integer can hold


@router.get("/compare.json")
def compare_json(store: StoreDep, staff: StaffDep, question: QuestionId = None, scenario: str | None = None,
                 team: str | None = None):
    """Candidates side by side: `?question=ID` or `?scenario=ID` (and `team=` if you are in several)."""
    return _compare(store, staff, question, scenario, team)


@router.get("/compare", include_in_schema=False)
def compare_page(request: Request, store: StoreDep, staff: StaffPage, question: QuestionId = None,
                 scenario: str | None = None, team: str | None = None):
    return templates.TemplateResponse(request, "compare.html", _compare(store, staff, question, scenario, team))


# -- the team's blind rule ------------------------------------------------------------------------

class VisibilityBody(BaseModel):
    rule: str = Field(max_length=16, description=" | ".join(VISIBILITY))


@router.put("/api/teams/{slug}/scorecard-visibility")
async def put_visibility(slug: str, request: Request, store: StoreDep, staff: StaffDep):
    """Whose scorecards a rater sees: never, always, or after_own (after submitting theirs)."""
    body = await forms.parse(request, VisibilityBody)
    team_id = staff.team_id(slug.lower())
    if team_id is None:
        raise AccessDenied(f"you are not an admin of a team {slug[:64]!r}")
    rule = await run_in_threadpool(access.set_visibility, store, staff, team_id, body.rule)
    if forms.wants_fragment(request):
        return HTMLResponse(f"saved: {html.escape(rule.replace('_', ' '))}")
    return {"team": slug.lower(), "scorecard_visibility": rule}
