"""Anchors and the gold set: how a team makes its rubric concrete and measures itself.

An anchor is a round a reviewer holds up as what level L of a criterion looks like on
its scenario. The rubric on the console and on review pages lists, under each level,
the anchors for that scenario with the words that earned it (the automatic score's
evidence for that criterion in the anchored round's narration), so "good findings"
means "like this". One anchor per round and criterion; a later one replaces it.

The gold set is rounds the team scores on purpose with several raters: the agreement
figures of the calibration page are computed on it first (app/review/calibration.py).
Both are set by the team's reviewers and admins, on ended rounds.
"""

from __future__ import annotations

from sqlalchemy import delete, select

from app.accounts import AccessDenied, Staff
from app.db.base import Store
from app.db.staff import Anchor, Round
from app.review.access import REVIEWERS
from app.rounds import live
from app.scenario import InstanceError

MAX_NOTE_CHARS = 1000
MAX_EXCERPT_CHARS = 400
PER_LEVEL = 3  # anchors shown under one level: examples, not a list to read through


def _editable(store: Store, staff: Staff, public_id: str) -> Round:
    r = live.for_staff(store, staff, public_id)
    if not staff.is_(r.team_id, *REVIEWERS):
        raise AccessDenied("the team's reviewers and admins choose anchors and the gold set")
    if r.ended_at is None:
        raise live.RoundClosed("anchor or gold-mark a round once it has ended")
    return r


def set_anchor(store: Store, staff: Staff, public_id: str, criterion: str, level: int, note: str = "") -> dict:
    r = _editable(store, staff, public_id)  # first: what is wrong with a body is no one's business but the team's
    if criterion not in live.CRITERIA:
        raise InstanceError(f"criterion must be one of {', '.join(live.CRITERIA)}")
    if level not in live.LEVELS:
        raise InstanceError("level is 1 (poor) to 4 (excellent)")
    note = note.strip()
    if len(note) > MAX_NOTE_CHARS:
        raise InstanceError(f"an anchor's note holds at most {MAX_NOTE_CHARS:,} characters")
    with store.write() as db:
        a = db.scalar(select(Anchor).where(Anchor.round_id == r.id, Anchor.criterion == criterion))
        if a is None:
            a = Anchor(team_id=r.team_id, round_id=r.id, scenario=r.scenario, criterion=criterion)
            db.add(a)
        a.level, a.note, a.created_by = level, note, staff.user_id
    return {"round": r.public_id, "criterion": criterion, "level": level, "note": note}


def remove_anchor(store: Store, staff: Staff, public_id: str, criterion: str) -> dict:
    r = _editable(store, staff, public_id)
    with store.write() as db:
        gone = db.execute(delete(Anchor).where(Anchor.round_id == r.id, Anchor.criterion == criterion)).rowcount
    return {"round": r.public_id, "criterion": criterion, "removed": bool(gone)}


def set_gold(store: Store, staff: Staff, public_id: str, gold: bool) -> dict:
    r = _editable(store, staff, public_id)
    with store.write() as db:
        db.get(Round, r.id).gold = gold
    return {"round": r.public_id, "gold": gold}


def of_round(store: Store, round_pk: int) -> dict[str, dict]:
    with store.read() as db:
        return {a.criterion: {"level": a.level, "note": a.note}
                for a in db.scalars(select(Anchor).where(Anchor.round_id == round_pk))}


def excerpt(r: Round, criterion: str) -> str:
    """The words of the anchored round's narration that earned `criterion` (the automatic
    score's evidence), else its opening."""
    report = r.auto_report or {}
    crit = next((c for c in report.get("criteria", []) if c["id"] == criterion), None)
    spans = [r.narration[e["start"]:e["end"]] for e in (crit or {}).get("evidence", []) if e["end"] > e["start"]]
    text = " … ".join(dict.fromkeys(s.strip() for s in spans if s.strip())) or r.narration.strip()
    return text if len(text) <= MAX_EXCERPT_CHARS else text[:MAX_EXCERPT_CHARS - 1] + "…"


def for_scenario(store: Store, team_id: int, scenario: str) -> dict[str, dict[int, list[dict]]]:
    """{criterion: {level: [{round, excerpt, note, review_url}]}} for the team's anchors on
    this scenario, newest first, PER_LEVEL at most per level."""
    with store.read() as db:
        rows = db.execute(select(Anchor, Round).join(Round, Round.id == Anchor.round_id)
                          .where(Anchor.team_id == team_id, Anchor.scenario == scenario)
                          .order_by(Anchor.created_at.desc(), Anchor.id.desc())).all()
    out: dict[str, dict[int, list[dict]]] = {}
    for a, r in rows:
        shelf = out.setdefault(a.criterion, {}).setdefault(a.level, [])
        if len(shelf) < PER_LEVEL:
            shelf.append({"round": r.public_id, "excerpt": excerpt(r, a.criterion), "note": a.note,
                          "review_url": f"/rounds/{r.public_id}/review"})
    return out


def anchored(rubric: list[dict], anchors: dict[str, dict[int, list[dict]]]) -> list[dict]:
    """The rubric (guide.anchored_rubric's shape) with each level's anchors beside it."""
    return [{**c, "levels": [{**lv, "anchors": anchors.get(c["id"], {}).get(lv["level"], [])} for lv in c["levels"]]}
            for c in rubric]
