"""What a round's review shows one staff member (contract 7's `/rounds/{id}/review.json`):
the round and its candidate (pseudonymous unless this person runs rounds), the whole event
log with its times and the replay's axis, the final narration with the automatic score's
evidence over it, the scorecards this person may see under the team's blind rule, "who
said what" per criterion, the key, and the rubric with the team's anchors."""

from __future__ import annotations

from sqlalchemy import select

from app.accounts import Staff
from app.db.base import Store
from app.db.staff import Membership, Round, Scorecard, User
from app.review import access, anchors, levels, practice, replay
from app.rounds import candidates, guide, live
from app.scoring.evidence import segments
from app.scoring.read import LABELS


def _cards(store: Store, r: Round) -> list[dict]:
    with store.read() as db:
        rows = db.execute(select(Scorecard, User.email, Membership.role).join(User, User.id == Scorecard.user_id)
                          .outerjoin(Membership, (Membership.user_id == User.id) & (Membership.team_id == r.team_id))
                          .where(Scorecard.round_id == r.id).order_by(Scorecard.submitted_at, Scorecard.id)).all()
    return [{**live.scorecard_json(card, email), "user_id": card.user_id, "role": role,
             "ran_round": card.user_id == r.created_by} for card, email, role in rows]


def scorecards_for(store: Store, staff: Staff, r: Round) -> dict:
    """The scorecards of the round as the team's rule lets this person see them."""
    rule = access.visibility(store, r.team_id)
    cards = _cards(store, r)
    own = next((c for c in cards if c["user_id"] == staff.user_id), None)
    others = [c for c in cards if c["user_id"] != staff.user_id]
    see = access.sees_others(rule, own is not None)
    auto = access.sees_auto(rule, own is not None) and r.auto_report is not None
    strip = lambda c: {k: v for k, v in c.items() if k != "user_id"}  # noqa: E731
    return {"rule": rule, "own": strip(own) if own else None, "others": [strip(c) for c in others] if see else [],
            "hidden": 0 if see else len(others), "auto_visible": auto,
            "why_hidden": None if see else ("this team never shows one rater another's scorecard" if rule == "never"
                                            else "submit your own scorecard first: then you see the others'")}


def who_said_what(cards: list[dict], report: dict | None) -> list[dict]:
    """Per criterion, each visible rater's level and the automatic score's, side by side."""
    auto = levels.auto_levels(report)
    rows = []
    for cid in live.CRITERIA:
        said = [{"by": c["by"], "level": c["criteria"].get(cid)} for c in cards]
        known = [s["level"] for s in said if s["level"] is not None]
        rows.append({"id": cid, "label": LABELS[cid], "raters": said, "auto": auto.get(cid),
                     "spread": (max(known) - min(known)) if len(known) > 1 else None})
    rows.append({"id": "recommendation", "label": "Recommendation",
                 "raters": [{"by": c["by"], "level": c["recommendation"]} for c in cards],
                 "auto": levels.auto_recommendation(report), "spread": None})
    return rows


def review(store: Store, staff: Staff, r: Round, at: str | None = None) -> dict:
    inst = live.instance_of(r)
    log = live.events(store, r.id, limit=live.MAX_EVENTS)
    cand = candidates.of_round(store, r)
    cards = scorecards_for(store, staff, r)
    shown = ([cards["own"]] if cards["own"] else []) + cards["others"]
    report = r.auto_report if cards["auto_visible"] else None
    scored = bool(report and report.get("total") is not None)
    role = staff.role(r.team_id)
    rubric = anchors.anchored(guide.anchored_rubric(inst), anchors.for_scenario(store, r.team_id, r.scenario))
    with store.read() as db:
        interviewer = db.scalar(select(User.email).where(User.id == r.created_by)) if r.created_by else None
    return {
        "round": {"id": r.public_id, "team_id": r.team_id, "scenario": r.scenario, "title": inst.scenario.title,
                  "seed_kind": r.seed_kind, "seed": r.seed, "version": r.version, "question_id": r.question_id,
                  "interviewer": interviewer, "gold": r.gold, "phase": r.phase,
                  "created_at": live._iso(r.created_at), "opened_at": live._iso(r.opened_at),
                  "submitted_at": live._iso(r.submitted_at), "ended_at": live._iso(r.ended_at),
                  "console_url": f"/rounds/{r.public_id}", "review_url": f"/rounds/{r.public_id}/review"},
        "candidate": candidates.public(cand, staff) if cand else {"pseudonym": candidates.pseudonym(None),
                                                                   "display": candidates.pseudonym(None)},
        "events": log,
        "axis": replay.axis(log),
        "lanes": replay.lanes(log),
        "state_at": replay.state_at(log, at) if at else None,
        "final": {"narration": r.narration, "marks": r.marks, "runs": r.runs,
                  "segments": segments(r.narration, report) if scored else [{"text": r.narration, "criteria": [],
                                                                                "why": ""}]},
        "auto_score": report,
        "auto_score_hidden": r.auto_report is not None and not cards["auto_visible"],
        "scorecards": cards,
        "who_said_what": who_said_what(shown, report) if shown or report else [],
        "anchors": anchors.of_round(store, r.id),
        "practice": practice.attached(store, r),  # what the candidate chose to show, with consent
        "key": guide.live_key(inst),
        "rubric": rubric,
        "may": {"score": role in access.SCORERS and r.ended_at is not None,
                "curate": role in access.REVIEWERS and r.ended_at is not None,
                "console": role in live.RUNNERS},
        "criteria": [{"id": c, "label": LABELS[c]} for c in live.CRITERIA],
        "levels": live.LEVELS, "recommendations": live.RECOMMENDATIONS,
    }
