"""Who may review a round, and whose scorecards each of them sees.

Review is for the team's reviewers and admins, and for the interviewer of the round: the
one who created it, or who took part in it (a hint, a note) or scored it. Another
team's round is as absent as a missing one (404, from live.for_staff). A reviewer opens a
round's review once it has ended: until then its log holds a read in progress, and
the key beside it would be one step from the candidate.

Blind scorecards. Each rater sees their own scorecard. Everyone else's follow the team's
rule (teams.scorecard_visibility): `never`, `always`, or `after_own` (the default: once
your own is in, so the first judgement is yours). The rule holds for admins too: an
admin who scores is a rater like any other (the export, for admins only, is where the
team's whole record is). The automatic score is shown as another rater's card would be,
except under `never`, where it shows once your own is in: it is the machine, not a
colleague, and comparing with it is what calibrates it.
"""

from __future__ import annotations

from sqlalchemy import select

from app.accounts import AccessDenied, Staff
from app.db.base import Store
from app.db.staff import VISIBILITY, Round, RoundEvent, Scorecard, Team
from app.rounds import live
from app.scenario import InstanceError

REVIEWERS = ("admin", "reviewer")  # review any round of the team
SCORERS = ("admin", "interviewer", "reviewer")  # may put a scorecard on a round they may review


class NotYet(live.RoundClosed):
    """The round is still running: a reviewer reviews it when it ends (HTTP 409)."""


def took_part(store: Store, staff: Staff, r: Round) -> bool:
    """This person created the round, scored it, or acted in it (a hint, a note, a phase)."""
    if r.created_by == staff.user_id:
        return True
    with store.read() as db:
        if db.scalar(select(Scorecard.id).where(Scorecard.round_id == r.id, Scorecard.user_id == staff.user_id)):
            return True
        return db.scalar(select(RoundEvent.id).where(
            RoundEvent.round_id == r.id, RoundEvent.actor == "interviewer",
            RoundEvent.data["by"].as_string() == staff.email).limit(1)) is not None


def for_review(store: Store, staff: Staff, public_id: str) -> Round:
    """The round, if this person may review it; NoRound (404), AccessDenied (403) or
    NotYet (409) otherwise."""
    r = live.for_staff(store, staff, public_id)
    role = staff.role(r.team_id)
    if role == "reviewer" and r.ended_at is None:
        raise NotYet("this round is still running: its review opens when the interviewer ends it")
    if role == "interviewer" and not took_part(store, staff, r):
        raise AccessDenied("an interviewer reviews the rounds they ran or scored; reviewers and admins review all")
    return r


def visibility(store: Store, team_id: int) -> str:
    with store.read() as db:
        return db.scalar(select(Team.scorecard_visibility).where(Team.id == team_id)) or "after_own"


def set_visibility(store: Store, staff: Staff, team_id: int, rule: str) -> str:
    if staff.role(team_id) is None:
        raise live.NoRound("no such team among yours")
    if not staff.is_(team_id, "admin"):
        raise AccessDenied("only the team's admins set who sees whose scorecards")
    if rule not in VISIBILITY:
        raise InstanceError(f"scorecard visibility is one of {', '.join(VISIBILITY)}")
    with store.write() as db:
        db.get(Team, team_id).scorecard_visibility = rule
    return rule


def sees_others(rule: str, has_own: bool) -> bool:
    return rule == "always" or (rule == "after_own" and has_own)


def sees_auto(rule: str, has_own: bool) -> bool:
    return rule == "always" or has_own
