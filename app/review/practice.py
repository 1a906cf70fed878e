"""The practice history a candidate attached to a round (app/rounds/consent.py), as those
who may review the round see it: a list for the review page, and each attached report.

A staff member reaches a practice attempt only through a round it is attached to, and
only while it is: withdrawn consent, or an attempt never attached, is as absent as a
missing one (404). Who may review the round is app.review.access.for_review's to say.
"""

from __future__ import annotations

from sqlalchemy import select

import scenarios
from app.accounts import Staff
from app.db.base import Store
from app.db.models import Attempt
from app.db.staff import Round, RoundPractice
from app.practice import NoAttempt
from app.review.access import for_review
from app.rounds import live


def attached(store: Store, r: Round) -> list[dict]:
    """The attempts attached to the round, in the order they were attached: id (public),
    scenario, title, total, submitted_at and the score per criterion (contract 4)."""
    with store.read() as db:
        rows = list(db.execute(select(Attempt, RoundPractice.attached_at)
                               .join(RoundPractice, RoundPractice.attempt_id == Attempt.id)
                               .where(RoundPractice.round_id == r.id).order_by(RoundPractice.id)))
    titles = {s.id: s.title for s in scenarios.REGISTRY.values()}
    return [{"id": a.public_id, "scenario": a.scenario, "title": titles.get(a.scenario, a.scenario),
             "seed": a.seed, "total": a.total, "trap_endorsed": a.trap_endorsed,
             "submitted_at": live._iso(a.submitted_at), "attached_at": live._iso(at),
             "criteria": [{"id": c["id"], "label": c["label"], "score": c["score"], "max": c["max"]}
                          for c in (a.report or {}).get("criteria", [])],
             "url": f"/rounds/{r.public_id}/practice/{a.public_id}"}
            for a, at in rows]


def attached_attempt(store: Store, staff: Staff, round_id: str, public_id: str) -> tuple[Round, Attempt]:
    """The round (if this person may review it) and one practice attempt attached to it;
    NoAttempt (404) for one that is not attached, whoever owns it."""
    r = for_review(store, staff, round_id)
    with store.read() as db:
        a = db.scalar(select(Attempt).join(RoundPractice, RoundPractice.attempt_id == Attempt.id)
                      .where(RoundPractice.round_id == r.id, Attempt.public_id == public_id))
    if a is None or a.submitted_at is None:
        raise NoAttempt(f"no practice attempt {public_id[:40]!r} attached to this round")
    return r, a
