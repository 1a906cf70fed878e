"""A team's question bank: which instance a round runs on (the canonical case, a fixed
public seed, or a fresh secret seed per round), parameter overrides, the rubric version,
the time plan, tags and difficulty. Every team starts with every registered case (the
built-ins), and gains a newly registered one the next time its bank is read.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import select
from sqlalchemy.orm import Session

import scenarios
from app import instances
from app.accounts import AccessDenied, Staff
from app.db.base import Store
from app.db.staff import Question
from app.scenario import DIFFICULTIES, FAMILIES, InstanceError

INSTANCE_KINDS = ("canonical", "seed", "secret")
PHASES = ("brief", "reading", "discussion")
# 45 minutes as the walkthroughs plan a round: brief, the read itself, then questions
DEFAULT_PLAN = ({"phase": "brief", "minutes": 5}, {"phase": "reading", "minutes": 25},
                {"phase": "discussion", "minutes": 15})
MAX_MINUTES = 240


class QuestionError(InstanceError):
    """A question field is wrong (HTTP 400)."""


class NoQuestion(InstanceError):
    """No such question in the teams this person belongs to (HTTP 404)."""


def now() -> datetime:
    return datetime.now(timezone.utc)


def check_plan(plan: list[dict] | None) -> list[dict]:
    """A time plan: each phase of PHASES at most once, in that order, 0-240 minutes."""
    if not plan:
        return [dict(p) for p in DEFAULT_PLAN]
    out = []
    for p in plan:
        phase, minutes = p.get("phase"), p.get("minutes")
        if phase not in PHASES:
            raise QuestionError(f"time plan: phase {instances.clip(str(phase), 20)!r} is not one of {', '.join(PHASES)}")
        if not isinstance(minutes, (int, float)) or isinstance(minutes, bool) or not 0 < minutes <= MAX_MINUTES:
            raise QuestionError(f"time plan: {phase} wants minutes between 1 and {MAX_MINUTES}")
        out.append({"phase": phase, "minutes": minutes})
    order = [PHASES.index(p["phase"]) for p in out]
    if order != sorted(set(order)):
        raise QuestionError(f"time plan: phases once each, in the order {', '.join(PHASES)}")
    return out


def check_instance(scenario: str, kind: str, seed: str | None, params: dict[str, str]) -> None:
    """The question's instance builds: a known scenario, a valid seed and params in range."""
    if kind not in INSTANCE_KINDS:
        raise QuestionError(f"instance must be one of {', '.join(INSTANCE_KINDS)}, got {instances.clip(kind, 20)!r}")
    if kind == "seed" and not seed:
        raise QuestionError("instance 'seed' needs the seed")
    label = {"canonical": "canonical", "secret": 0}.get(kind) if kind != "seed" else instances.parse_seed(seed)
    if scenario not in scenarios.REGISTRY:
        raise QuestionError(f"unknown scenario {instances.clip(scenario)!r}; valid: {', '.join(scenarios.REGISTRY)}")
    instances.instance(scenario, label, {k: str(v) for k, v in params.items()})


def ensure_builtin(db: Session, team_id: int) -> None:
    """Every registered case, once per team (a team may archive one, not lose it to a second
    seeding; a case registered later is added beside the others). Each round draws fresh secret numbers: the canonical instance and every
    small public seed have their key open in the explorer, where a candidate who
    recognizes the brief could read it."""
    have = set(db.scalars(select(Question.scenario).where(Question.team_id == team_id, Question.builtin)))
    for s in scenarios.REGISTRY.values():
        if s.id not in have:
            db.add(Question(team_id=team_id, title=s.title, scenario=s.id, instance="secret", seed=None, params={},
                            rubric_version=s.version, time_plan=[dict(p) for p in DEFAULT_PLAN],
                            tags=["built-in", FAMILIES[s.family]], difficulty=s.difficulty, builtin=True,
                            created_at=now()))


def is_public(kind: str) -> bool:
    """A round on this instance kind can be looked up in the open explorer (its key too)."""
    return kind in ("canonical", "seed")


def for_team(store: Store, staff: Staff, team_id: int) -> list[Question]:
    if staff.role(team_id) is None:
        raise NoQuestion("no such team among yours")
    with store.read() as db:
        have = set(db.scalars(select(Question.scenario).where(Question.team_id == team_id, Question.builtin)))
    if not have >= set(scenarios.REGISTRY):  # a new team, or a case registered since its bank was seeded
        with store.write() as db:
            ensure_builtin(db, team_id)
    with store.read() as db:
        return list(db.scalars(select(Question).where(Question.team_id == team_id, Question.archived_at.is_(None))
                               .order_by(Question.builtin.desc(), Question.id)))


def get(store: Store, staff: Staff, question_id: int) -> Question:
    with store.read() as db:
        q = db.get(Question, question_id)
    if q is None or staff.role(q.team_id) is None:
        raise NoQuestion(f"no question {question_id} in your teams")
    return q


def create(store: Store, staff: Staff, team_id: int, *, title: str, scenario: str, instance: str = "secret",
           seed: str | None = None, params: dict[str, str] | None = None, time_plan: list[dict] | None = None,
           tags: list[str] | None = None, difficulty: str = "medium") -> Question:
    """A new question (interviewers and admins of the team)."""
    if not staff.is_(team_id, "admin", "interviewer"):
        raise AccessDenied("only the team's interviewers and admins edit its question bank")
    title = " ".join(title.split())
    if not 1 <= len(title) <= 200:
        raise QuestionError("a question needs a title of 1-200 characters")
    if difficulty not in DIFFICULTIES:
        raise QuestionError(f"difficulty must be one of {', '.join(DIFFICULTIES)}")
    tags = sorted({" ".join(t.split())[:40] for t in (tags or []) if t.strip()})[:20]
    params = {str(k): str(v) for k, v in (params or {}).items()}
    check_instance(scenario, instance, seed, params)
    q = Question(team_id=team_id, title=title, scenario=scenario, instance=instance,
                 seed=str(instances.parse_seed(seed)) if instance == "seed" else None, params=params,
                 rubric_version=scenarios.get(scenario).version, time_plan=check_plan(time_plan), tags=tags,
                 difficulty=difficulty, builtin=False, created_by=staff.user_id, created_at=now())
    with store.write() as db:
        db.add(q)
    return q


def archive(store: Store, staff: Staff, question_id: int) -> None:
    q = get(store, staff, question_id)
    if not staff.is_(q.team_id, "admin", "interviewer"):
        raise AccessDenied("only the team's interviewers and admins edit its question bank")
    with store.write() as db:
        db.get(Question, q.id).archived_at = now()


def public(q: Question) -> dict:
    return {"id": q.id, "title": q.title, "scenario": q.scenario, "instance": q.instance, "seed": q.seed,
            "params": q.params, "rubric_version": q.rubric_version, "time_plan": q.time_plan, "tags": q.tags,
            "difficulty": q.difficulty, "builtin": q.builtin, "public_instance": is_public(q.instance),
            "minutes": sum(p["minutes"] for p in q.time_plan)}
