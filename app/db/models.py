"""Practice attempts: one row per (browser identity, instance) round, with the narration's
autosave history. migrations/versions/0001_attempts.py creates these tables."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, Boolean, false, DateTime, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.db.base import Base


def now() -> datetime:
    return datetime.now(timezone.utc)


class Attempt(Base):
    __tablename__ = "attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    public_id: Mapped[str] = mapped_column(String(32), unique=True, index=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)  # the signed browser identity
    # the instance tuple (contract 1): scenario, version, seed, param overrides
    scenario: Mapped[str] = mapped_column(String(64), index=True)
    version: Mapped[int] = mapped_column(Integer)
    seed: Mapped[str] = mapped_column(String(32))  # drawn on the server, never sent before the report
    params: Mapped[dict] = mapped_column(JSON, default=dict)
    # "Surprise me": the pathology's name stays out of every page until the report
    surprise: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # said in the 60-second mode: running over time costs points
    timed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    narration: Mapped[str] = mapped_column(Text, default="")
    marks: Mapped[dict] = mapped_column(JSON, default=dict)  # {"step": {start_us, end_us}, "gap": {...}}
    runs: Mapped[list] = mapped_column(JSON, default=list)  # measurements run: {tool, at, since_open_s}
    report: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    total: Mapped[float | None] = mapped_column(Float, nullable=True)
    trap_endorsed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now, onupdate=now)
    submitted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # A shared report's link is an HMAC of this nonce under the server's key: the owner
    # can see it again, a copy of the database alone cannot open it, and a revoke (nonce
    # cleared) or a new link (a new nonce) kills every link given before.
    share_nonce: Mapped[str | None] = mapped_column(String(32), nullable=True)
    shared_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    saves: Mapped[list["NarrationSave"]] = relationship(back_populates="attempt", cascade="all, delete-orphan",
                                                        order_by="NarrationSave.id")


class NarrationSave(Base):
    """Each autosave of the narration, so a reload or a restart loses nothing and the
    history of a read can be replayed."""

    __tablename__ = "narration_saves"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"), index=True)
    text: Mapped[str] = mapped_column(Text)
    saved_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)

    attempt: Mapped[Attempt] = relationship(back_populates="saves")
