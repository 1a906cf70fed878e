"""Staff accounts, teams and live interview rounds (contract 7 of DESIGN.md).
migrations/versions/0004_rounds.py creates these tables; 0005_review adds candidates, anchors,
the gold set, practice attached to rounds and the team's scorecard visibility.

A round's truth is its append-only event log (`round_events`): every change a candidate
or an interviewer makes is one row with a monotonic id, written in the same transaction
as the round's current state, so the console, the candidate's page and a later replay
read the same story. Secrets (session, invite and candidate tokens) are stored as
SHA-256 hashes: a copy of the database opens no round and signs no one in.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base
from app.db.models import now

ROLES = ("admin", "interviewer", "reviewer")
# Whose scorecards a rater of a round sees (teams.scorecard_visibility): nobody else's,
# everyone's, or everyone's once their own is in (the default: blind until you commit).
VISIBILITY = ("never", "always", "after_own")


class Team(Base):
    __tablename__ = "teams"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), unique=True)  # as typed in `--team`, lower case
    name: Mapped[str] = mapped_column(String(200))
    scorecard_visibility: Mapped[str] = mapped_column(String(16), default="after_own", server_default="after_own")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    email: Mapped[str] = mapped_column(String(254), unique=True)  # lower case
    password_hash: Mapped[str] = mapped_column(String(255))  # Argon2id, PHC string
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Membership(Base):
    """A user's role in one team; the same person may be an interviewer here and a
    reviewer there."""

    __tablename__ = "memberships"
    __table_args__ = (UniqueConstraint("user_id", "team_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(16))  # one of ROLES
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class StaffSession(Base):
    """A signed-in browser: the cookie holds a random token, this row its hash. Revoked
    by logout (or an admin); expires idle and absolutely."""

    __tablename__ = "staff_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Invite(Base):
    """A single-use link an admin sends: whoever opens it sets a password and joins the
    team in the role given."""

    __tablename__ = "invites"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    email: Mapped[str] = mapped_column(String(254))
    role: Mapped[str] = mapped_column(String(16))
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class LoginFailure(Base):
    """Failed sign-ins, kept a while: the rate limit counts them per email and per address
    across every worker and host."""

    __tablename__ = "login_failures"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    email: Mapped[str] = mapped_column(String(254), index=True)
    ip: Mapped[str] = mapped_column(String(64), index=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now, index=True)


class Question(Base):
    """A team's question: which instance a round runs on and how its time is planned."""

    __tablename__ = "questions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    title: Mapped[str] = mapped_column(String(200))
    scenario: Mapped[str] = mapped_column(String(64))
    # "canonical", "seed" (a fixed public seed, `seed`) or "secret" (a fresh secret seed
    # drawn for every round)
    instance: Mapped[str] = mapped_column(String(16))
    seed: Mapped[str | None] = mapped_column(String(32), nullable=True)
    params: Mapped[dict] = mapped_column(JSON, default=dict)
    rubric_version: Mapped[int] = mapped_column(Integer, default=1)
    time_plan: Mapped[list] = mapped_column(JSON, default=list)  # [{"phase": "brief", "minutes": 5}, ...]
    tags: Mapped[list] = mapped_column(JSON, default=list)
    difficulty: Mapped[str] = mapped_column(String(16), default="medium")
    builtin: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())  # one of the six canonical
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    archived_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Candidate(Base):
    """A person a team interviews. Review shows them by `code` ("Candidate 7F3A") so a
    reviewer judges the read, not the name; the name is for those who run rounds."""

    __tablename__ = "candidates"
    __table_args__ = (UniqueConstraint("team_id", "code"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    code: Mapped[str] = mapped_column(String(8))  # upper-case hex, unique in the team
    name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    email: Mapped[str | None] = mapped_column(String(254), nullable=True)
    synthetic: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())  # `tracedojo demo`'s
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class Round(Base):
    """One live interview round: its instance (contract 1), the candidate's link, and the
    state its event log has built so far (narration, marks, runs, phase)."""

    __tablename__ = "rounds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    public_id: Mapped[str] = mapped_column(String(32), unique=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    question_id: Mapped[int | None] = mapped_column(ForeignKey("questions.id", ondelete="SET NULL"), nullable=True)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    candidate_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    candidate_id: Mapped[int | None] = mapped_column(ForeignKey("candidates.id", ondelete="SET NULL"),
                                                     nullable=True, index=True)
    # in the gold set: scored by several raters on purpose, the agreement figures' base
    gold: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    scenario: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    seed: Mapped[str] = mapped_column(String(32))  # never reaches the candidate
    seed_kind: Mapped[str] = mapped_column(String(16))  # canonical | seed | secret
    params: Mapped[dict] = mapped_column(JSON, default=dict)
    rubric_version: Mapped[int] = mapped_column(Integer, default=1)
    time_plan: Mapped[list] = mapped_column(JSON, default=list)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)  # the candidate link's
    token_expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    phase: Mapped[str] = mapped_column(String(16), default="waiting")
    phase_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    locked: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    narration: Mapped[str] = mapped_column(Text, default="")
    marks: Mapped[dict] = mapped_column(JSON, default=dict)
    runs: Mapped[list] = mapped_column(JSON, default=list)
    last_event_id: Mapped[int] = mapped_column(Integer, default=0)
    event_count: Mapped[int] = mapped_column(Integer, default=0)  # the log's length, for its limit
    opened_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    submitted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    auto_report: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # the automatic score, at the end
    auto_total: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class RoundEvent(Base):
    """The round's log, append only. Ids only grow: a reader that has seen id N asks for
    `id > N` and misses nothing (appends to one round are serialized on its row)."""

    __tablename__ = "round_events"
    __table_args__ = (Index("ix_round_events_round_id_id", "round_id", "id"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    actor: Mapped[str] = mapped_column(String(16))  # candidate | interviewer | system
    kind: Mapped[str] = mapped_column(String(16))
    data: Mapped[dict] = mapped_column(JSON, default=dict)


class Scorecard(Base):
    """One interviewer's judgement of a round: a level 1-4 per criterion and an overall
    recommendation on a four-point scale with no neutral."""

    __tablename__ = "scorecards"
    __table_args__ = (UniqueConstraint("round_id", "user_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    criteria: Mapped[dict] = mapped_column(JSON, default=dict)  # criterion id -> level 1-4
    recommendation: Mapped[int] = mapped_column(Integer)  # 1 strong no, 2 no, 3 yes, 4 strong yes
    notes: Mapped[str] = mapped_column(Text, default="")
    submitted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class Anchor(Base):
    """A round a reviewer holds up as what `level` looks like for `criterion` on this
    scenario: the rubric in the console and on review pages links it as an example."""

    __tablename__ = "anchors"
    __table_args__ = (UniqueConstraint("round_id", "criterion"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id", ondelete="CASCADE"), index=True)
    scenario: Mapped[str] = mapped_column(String(64))  # the round's, so a rubric finds its anchors by one index
    criterion: Mapped[str] = mapped_column(String(32))
    level: Mapped[int] = mapped_column(Integer)  # 1-4
    note: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class RoundPractice(Base):
    """A practice attempt the candidate chose to show the team of a round: attached from
    the round's page by the browser that made it, and only what existed at that moment."""

    __tablename__ = "round_practice"
    __table_args__ = (UniqueConstraint("round_id", "attempt_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id", ondelete="CASCADE"), index=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"))
    attached_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
