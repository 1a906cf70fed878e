"""A candidate shows a round's team their practice history, with their consent.

From the round's page, the browser holding the candidate link lists its own submitted
practice attempts and attaches some of them to the round (`round_practice`); the round's
reviewers then read those reports (app/review/practice.py) and no others. Consent can be
withdrawn at any time the link opens the round, after its end too: the link is the
candidate's only handle on the round, and withdrawing must not depend on the interviewer.

Only this browser's attempts can be attached (the identity cookie owns them, as for every
practice route) and only submitted ones (an open attempt has no report yet, and its
instance is still secret). A browser can see only its own attempts, so a PUT replaces the
set of *its* attachments and leaves any another browser made (the same candidate on
another machine) alone; DELETE withdraws every attachment of the round.

Each change is one event in the round's log (`practice`, actor candidate, data
`{count, attempt_ids}`: the whole attached set after it) written on the round's locked
row with live.py's own helpers, so appends stay serialized and the console's stream and
the review's replay see it like any other candidate write.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

import scenarios
from app import instances, practice
from app.db.base import Store
from app.db.models import Attempt
from app.db.staff import Round, RoundPractice
from app.rounds import live
from app.scenario import InstanceError

MAX_ATTACHED = 50  # a round's whole attached set: a history, not an archive


def _linked_round(db: Session, token: str) -> Round:
    """The round behind a live link, its row locked. Unlike the read's writes, an ended or
    locked round still takes this one: it is consent, not part of the read."""
    if not token or len(token) > 100:
        raise live.NoRound("no round at this link")
    r = db.scalar(select(Round).where(Round.token_hash == live.token_hash(token)).with_for_update())
    if r is None:
        raise live.NoRound("no round at this link: it may have been replaced by a newer one")
    if live._aware(r.token_expires_at) < live.now():
        raise live.LinkExpired("this round's link has expired; ask your interviewer for a new one")
    return r


def _attached_ids(db: Session, round_pk: int) -> list[tuple[int, str, str]]:
    """(attempt pk, public id, owner) of every attempt attached to the round, oldest first."""
    return list(db.execute(select(Attempt.id, Attempt.public_id, Attempt.owner)
                           .join(RoundPractice, RoundPractice.attempt_id == Attempt.id)
                           .where(RoundPractice.round_id == round_pk).order_by(RoundPractice.id)))


def listing(store: Store, token: str, owner: str) -> dict:
    """This browser's submitted attempts, newest first, each marked attached or not, and
    how many attempts another browser attached (they are not this browser's to list)."""
    r = live.by_token(store, token)
    done = [a for a in practice.mine(store, owner) if a.submitted_at is not None]
    with store.read() as db:
        attached = _attached_ids(db, r.id)
    ours = {pk for pk, _pid, who in attached if who == owner}
    titles = {s.id: s.title for s in scenarios.REGISTRY.values()}
    rows = [{"id": a.public_id, "scenario": a.scenario, "title": titles.get(a.scenario, a.scenario),
             "submitted_at": live._iso(a.submitted_at), "total": a.total, "attached": a.id in ours}
            for a in sorted(done, key=lambda a: live._aware(a.submitted_at), reverse=True)]
    return {"attempts": rows, "attached": len(ours), "attached_elsewhere": len(attached) - len(ours),
            "max": MAX_ATTACHED}


def attach(store: Store, token: str, owner: str, public_ids: list[str]) -> dict:
    """Make these (this browser's, submitted) the attempts this browser shows the round;
    an empty list withdraws this browser's. Returns `{changed, count, event_id}`."""
    ids = list(dict.fromkeys(public_ids))
    if len(ids) > MAX_ATTACHED:
        raise InstanceError(f"attach at most {MAX_ATTACHED} practice attempts to a round")
    with store.write() as db:
        r = _linked_round(db, token)
        found = {a.public_id: a for a in db.scalars(
            select(Attempt).where(Attempt.owner == owner, Attempt.public_id.in_(ids)))} if ids else {}
        for pid in ids:
            if pid not in found:  # another browser's attempt is as absent as a missing one
                raise practice.NoAttempt(f"no attempt {instances.clip(pid, 40)!r} in this browser")
            if found[pid].submitted_at is None:
                raise practice.NotSubmitted(f"attempt {pid} is not submitted yet: only a finished report can be "
                                            f"shown to the round's team")
        before = _attached_ids(db, r.id)
        ours = {pk for pk, _pid, who in before if who == owner}
        want = {a.id for a in found.values()}
        drop, add = ours - want, want - {pk for pk, _pid, _who in before}
        if len(before) - len(drop) + len(add) > MAX_ATTACHED:
            raise InstanceError(f"a round holds at most {MAX_ATTACHED} attached practice attempts")
        if not drop and not add:
            return {"changed": False, "count": len(before), "event_id": None}
        if drop:
            db.execute(delete(RoundPractice).where(RoundPractice.round_id == r.id,
                                                   RoundPractice.attempt_id.in_(drop)))
        for a in sorted((a for a in found.values() if a.id in add), key=lambda a: ids.index(a.public_id)):
            db.add(RoundPractice(round_id=r.id, attempt_id=a.id, attached_at=live.now()))
        db.flush()
        ev, out = _logged(db, r)
    live._published(r.id, "practice", ev)
    return out


def withdraw(store: Store, token: str) -> dict:
    """Withdraw every attachment to the round, whichever browser made it."""
    with store.write() as db:
        r = _linked_round(db, token)
        if not _attached_ids(db, r.id):
            return {"changed": False, "count": 0, "event_id": None}
        db.execute(delete(RoundPractice).where(RoundPractice.round_id == r.id))
        ev, out = _logged(db, r)
    live._published(r.id, "practice", ev)
    return out


def _logged(db: Session, r: Round) -> tuple:
    """The `practice` event for the round's attached set as it now stands."""
    now_ids = [pid for _pk, pid, _who in _attached_ids(db, r.id)]
    ev = live._append(db, r, "candidate", "practice", {"count": len(now_ids), "attempt_ids": now_ids})
    return ev, {"changed": True, "count": len(now_ids), "event_id": ev.id}
