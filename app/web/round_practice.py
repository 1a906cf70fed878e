"""A practice report the candidate attached to a round, for those who may review the round
(app/review/access.py): the page and its JSON twin. An attempt that is not attached to
this round (never, or no longer: consent withdrawn) is a 404, whoever asks."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.review import practice as attached
from app.web.deps import StaffDep, StaffPage, StoreDep
from app.web.practice import read_only
from app.web.templates import templates

router = APIRouter()

# Staff read a candidate's words here: no shared cache keeps them.
NO_STORE = {"Cache-Control": "private, no-store"}


def _view(store, staff, rid: str, aid: str) -> dict:
    r, a = attached.attached_attempt(store, staff, rid, aid)
    return {**read_only(a, json_url=f"/rounds/{r.public_id}/practice/{a.public_id}.json"),
            "round": {"id": r.public_id, "review_url": f"/rounds/{r.public_id}/review"},
            "practice_id": a.public_id}


# Declared before the page: "/rounds/r/practice/x.json" also matches ".../{aid}".
@router.get("/rounds/{rid}/practice/{aid}.json")
def attached_json(rid: str, aid: str, store: StoreDep, staff: StaffDep):
    return JSONResponse({k: v for k, v in _view(store, staff, rid, aid).items() if k not in ("views", "mine")}, headers=NO_STORE)


@router.get("/rounds/{rid}/practice/{aid}", include_in_schema=False)
def attached_page(rid: str, aid: str, request: Request, store: StoreDep, staff: StaffPage):
    return templates.TemplateResponse(request, "round_practice.html", _view(store, staff, rid, aid),
                                      headers=NO_STORE)
