"""Candidates side by side on the same question (or scenario): each ended round's
automatic score, the human levels this person may see (the blind rule holds here as on
the review page: a round whose other scorecards are hidden from you shows only yours),
and what the candidate did: words, measurements, hints taken, minutes to submit."""

from __future__ import annotations

from statistics import fmean

from sqlalchemy import func, select

import scenarios

from app.accounts import Staff
from app.db.base import Store
from app.db.staff import Candidate, Round, RoundEvent
from app.review import levels
from app.review.view import scorecards_for
from app.rounds import candidates, live, questions
from app.scenario import InstanceError
from app.scoring.read import LABELS

MAX_ROUNDS = 200


def side_by_side(store: Store, staff: Staff, *, question_id: int | None = None, scenario: str | None = None,
                 team_id: int | None = None) -> dict:
    if (question_id is None) == (scenario is None):
        raise InstanceError("compare on a question (question=ID) or a scenario (scenario=ID)")
    if question_id is not None:
        q = questions.get(store, staff, question_id)  # NoQuestion outside your teams
        where, team_id, title = Round.question_id == q.id, q.team_id, q.title
    else:
        if team_id is None:
            if len(staff.roles) != 1:
                raise InstanceError("you are in several teams: say which (team)")
            team_id = next(iter(staff.roles))
        if staff.role(team_id) is None:
            raise live.NoRound("no such team among yours")
        where, title = Round.scenario == scenario, scenarios.get(scenario).title
    with store.read() as db:
        rows = db.execute(select(Round, Candidate).outerjoin(Candidate, Candidate.id == Round.candidate_id)
                          .where(where, Round.team_id == team_id, Round.ended_at.is_not(None))
                          .order_by(Round.ended_at.desc()).limit(MAX_ROUNDS)).all()
        hint_counts = dict(db.execute(
            select(RoundEvent.round_id, func.count()).where(RoundEvent.round_id.in_([r.id for r, _ in rows] or [-1]),
                                                           RoundEvent.kind == "hint").group_by(RoundEvent.round_id)).all())
    out = []
    for r, c in rows:
        cards = scorecards_for(store, staff, r)
        shown = ([cards["own"]] if cards["own"] else []) + cards["others"]
        report = r.auto_report if cards["auto_visible"] else None
        human = {cid: round(fmean(lv), 2) if (lv := [k["criteria"][cid] for k in shown if cid in k["criteria"]])
                 else None for cid in live.CRITERIA}
        minutes = ((r.submitted_at or r.ended_at) - r.opened_at).total_seconds() / 60.0 if r.opened_at else None
        out.append({"round": r.public_id, "review_url": f"/rounds/{r.public_id}/review",
                    "candidate": candidates.public(c, staff) if c else {"display": candidates.pseudonym(None)},
                    "ended_at": live._iso(r.ended_at), "auto_total": report.get("total") if report else None,
                    "auto_levels": levels.auto_levels(report), "human_levels": human,
                    "recommendations": [k["recommendation"] for k in shown], "raters_shown": len(shown),
                    "raters_hidden": cards["hidden"], "words": len(r.narration.split()), "runs": len(r.runs),
                    "hints": hint_counts.get(r.id, 0), "minutes": round(minutes, 1) if minutes is not None else None,
                    "gold": r.gold})
    return {"title": title, "question_id": question_id, "scenario": scenario, "team_id": team_id,
            "criteria": [{"id": c, "label": LABELS[c]} for c in live.CRITERIA], "rounds": out}
