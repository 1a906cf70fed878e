"""Candidates: one record per person a team interviews, so their rounds can be found and
compared. Review shows a candidate by a pseudonym ("Candidate 7F3A") so a reviewer judges
the read and not the name; the name is shown to those who run rounds (admins and
interviewers: they talk to the person). Codes are random, not sequential, so a code says
nothing about when or in what order someone was interviewed.
"""

from __future__ import annotations

import secrets

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.accounts import Staff
from app.db.base import Store
from app.db.staff import Candidate, Round
from app.scenario import InstanceError

NAME_ROLES = ("admin", "interviewer")  # who sees a candidate's name; reviewers see the pseudonym


class NoCandidate(InstanceError):
    """No such candidate in your teams (HTTP 404)."""


def pseudonym(c: Candidate | None) -> str:
    return f"Candidate {c.code}" if c is not None else "Candidate (none)"


def new_code(db: Session, team_id: int) -> str:
    """A code unused in the team: 4 hex digits (65,536) while that leaves collisions rare,
    longer once the team has thousands of candidates."""
    used = db.scalar(select(func.count()).select_from(Candidate).where(Candidate.team_id == team_id)) or 0
    digits = 4 if used < 4000 else 6 if used < 1_000_000 else 8
    for _ in range(50):
        code = secrets.token_hex(4)[:digits].upper()
        if db.scalar(select(Candidate.id).where(Candidate.team_id == team_id, Candidate.code == code)) is None:
            return code
    raise InstanceError("could not draw a free candidate code; try again")


def create(db: Session, team_id: int, name: str | None, *, email: str | None = None, created_by: int | None = None,
           synthetic: bool = False) -> Candidate:
    """A new candidate, in the caller's write transaction (two racing creations that draw
    the same code: the unique constraint refuses one, and the caller's write fails whole)."""
    c = Candidate(team_id=team_id, code=new_code(db, team_id), name=name, email=email, created_by=created_by,
                  synthetic=synthetic)
    db.add(c)
    db.flush()
    return c


def by_code(store: Store, staff: Staff, code: str, team_id: int | None = None) -> Candidate:
    code = (code or "").strip().upper()
    if not code or len(code) > 8:
        raise NoCandidate("no such candidate in your teams")
    with store.read() as db:
        q = select(Candidate).where(Candidate.code == code, Candidate.team_id.in_(list(staff.roles) or [-1]))
        if team_id is not None:
            q = q.where(Candidate.team_id == team_id)
        found = list(db.scalars(q))
    if not found:
        raise NoCandidate(f"no candidate {code[:8]!r} in your teams")
    if len(found) > 1:  # the same code in two of your teams
        raise InstanceError(f"candidate {code} is in several of your teams: say which (team)")
    return found[0]


def public(c: Candidate, staff: Staff) -> dict:
    """A candidate as this staff member may see them: the name only for those who run rounds."""
    named = staff.role(c.team_id) in NAME_ROLES
    return {"code": c.code, "pseudonym": pseudonym(c), "team_id": c.team_id, "synthetic": c.synthetic,
            "name": c.name if named else None, "email": c.email if named else None,
            "display": (c.name or pseudonym(c)) if named else pseudonym(c),
            "created_at": c.created_at.isoformat() if c.created_at else None, "url": f"/candidates/{c.code}"}


def listing(store: Store, staff: Staff, limit: int = 500) -> list[tuple[Candidate, int]]:
    """Candidates of this person's teams with their number of rounds, newest first."""
    if not staff.roles:
        return []
    with store.read() as db:
        rows = db.execute(
            select(Candidate, func.count(Round.id)).outerjoin(Round, Round.candidate_id == Candidate.id)
            .where(Candidate.team_id.in_(list(staff.roles))).group_by(Candidate.id)
            .order_by(Candidate.created_at.desc(), Candidate.id.desc()).limit(limit)).all()
    return [(c, n) for c, n in rows]


def rounds_of(store: Store, c: Candidate) -> list[Round]:
    with store.read() as db:
        return list(db.scalars(select(Round).where(Round.candidate_id == c.id).order_by(Round.created_at)))


def by_ids(store: Store, ids: list[int]) -> dict[int, Candidate]:
    if not ids:
        return {}
    with store.read() as db:
        return {c.id: c for c in db.scalars(select(Candidate).where(Candidate.id.in_(sorted(set(ids)))))}


def of_round(store: Store, r: Round) -> Candidate | None:
    if r.candidate_id is None:
        return None
    with store.read() as db:
        return db.get(Candidate, r.candidate_id)

