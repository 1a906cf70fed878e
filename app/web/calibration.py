"""The team's calibration page and its JSON twin (contract 7: GET /calibration and
/calibration.json): per rater, agreement between raters and with the automatic score,
drift by week. The figures are app.review.calibration's; this router only picks the team
(`?team=slug`, else the person's only team) and renders."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from app.accounts import Staff
from app.review import calibration
from app.review.access import REVIEWERS
from app.web.deps import StaffDep, StaffPage, StoreDep
from app.web.templates import templates

router = APIRouter()
TeamQuery = Query(default=None, max_length=64, description="team slug, if you are in several teams")


def _page(store, staff: Staff, team: str | None) -> dict:
    team_id = calibration.team_for(staff, team)
    out = calibration.dashboard(store, team_id)
    out["teams"] = sorted(staff.teams[t] for t, role in staff.roles.items() if role in REVIEWERS)
    return out


@router.get("/calibration.json")
def calibration_json(store: StoreDep, staff: StaffDep, team: str | None = TeamQuery):
    return _page(store, staff, team)


@router.get("/calibration", include_in_schema=False)
def calibration_page(request: Request, store: StoreDep, staff: StaffPage, team: str | None = TeamQuery):
    return templates.TemplateResponse(request, "calibration.html", {"page": _page(store, staff, team)})
