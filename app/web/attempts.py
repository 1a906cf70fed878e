"""Practice attempts over HTTP, owned by the signed browser identity cookie."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session, sessionmaker

from app import practice
from app.config import get_settings
from app.db.base import engine_for
from app.identity import COOKIE, identity_of, new_identity
from app.scenario import InstanceError
from app.scoring.score import MAX_CHARS, NarrationError, NarrationTooLong

router = APIRouter()


def db_session() -> Iterator[Session]:
    with sessionmaker(engine_for(get_settings().database_url), expire_on_commit=False)() as db:
        yield db
        db.commit()


DB = Annotated[Session, Depends(db_session)]


async def identity_middleware(request: Request, call_next):
    """Every request carries a browser identity (request.state.owner); a browser without a
    valid one gets a new one in a signed cookie, whatever the response (page or JSON)."""
    ident = identity_of(request.cookies.get(COOKIE))
    fresh = None
    if ident is None:
        ident, fresh = new_identity()
    request.state.owner = ident
    response = await call_next(request)
    if fresh:
        response.set_cookie(COOKIE, fresh, max_age=5 * 365 * 86400, httponly=True, samesite="lax")
    return response


def owner(request: Request) -> str:
    return request.state.owner


Owner = Annotated[str, Depends(owner)]


class NewAttempt(BaseModel):
    scenario: str = Field(max_length=64)
    seed: str = Field(default="0", max_length=32)
    params: dict[str, str] = Field(default_factory=dict, max_length=64)


class Text(BaseModel):
    narration: str


class Span(BaseModel):
    start_us: float
    end_us: float


class Marks(BaseModel):
    step: Span | None = None
    gap: Span | None = None


class Run(BaseModel):
    tool: str = Field(max_length=64)
    since_open_s: float | None = None


def _attempt(db: Session, who: str, aid: str):
    a = practice.get(db, who, aid)
    if a is None:
        raise HTTPException(404, f"no attempt {aid!r} in this browser")
    return a


def _guard(fn, *args):
    try:
        return fn(*args)
    except NarrationError as e:
        raise HTTPException(413 if isinstance(e, NarrationTooLong) else 400, str(e)) from None
    except InstanceError as e:
        raise HTTPException(409 if isinstance(e, practice.AttemptClosed) else 400, str(e)) from None


@router.post("/api/attempts", status_code=201)
def create_attempt(body: NewAttempt, db: DB, who: Owner):
    a = _guard(practice.create, db, who, body.scenario, body.seed, body.params)
    return practice.public(a)


@router.get("/api/attempts")
def my_attempts(db: DB, who: Owner):
    return {"attempts": [practice.public(a) for a in practice.mine(db, who)]}


@router.get("/api/attempts/{aid}")
def get_attempt(aid: str, db: DB, who: Owner):
    return practice.public(_attempt(db, who, aid))


@router.put("/api/attempts/{aid}/narration")
def autosave(aid: str, body: Text, db: DB, who: Owner):
    a = _attempt(db, who, aid)
    _guard(practice.save_narration, a, body.narration)
    db.flush()
    return {"saved": True, "saves": len(a.saves), "chars": len(a.narration), "limit": MAX_CHARS}


@router.post("/api/attempts/{aid}/narration-beacon", status_code=204)
async def autosave_beacon(aid: str, request: Request, db: DB, who: Owner):
    """The page's last words on unload (navigator.sendBeacon posts plain text)."""
    raw = await request.body()
    if len(raw) > 4 * MAX_CHARS:
        raise HTTPException(413, f"the narration is over the {MAX_CHARS:,}-character limit")
    a = _attempt(db, who, aid)
    _guard(practice.save_narration, a, raw.decode("utf-8", errors="replace"))


@router.put("/api/attempts/{aid}/marks")
def marks(aid: str, body: Marks, db: DB, who: Owner):
    a = _attempt(db, who, aid)
    _guard(practice.set_marks, a, body.model_dump(exclude_none=True))
    return {"marks": a.marks}


@router.post("/api/attempts/{aid}/runs")
def run(aid: str, body: Run, db: DB, who: Owner):
    a = _attempt(db, who, aid)
    _guard(practice.add_run, a, body.tool, body.since_open_s)
    return {"runs": a.runs}


@router.post("/api/attempts/{aid}/submit")
def submit(aid: str, db: DB, who: Owner, body: Text | None = None):
    a = _attempt(db, who, aid)
    if body is not None:
        _guard(practice.save_narration, a, body.narration)
    report = _guard(practice.submit, a)
    return {"id": a.public_id, **report}
