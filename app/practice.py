"""Practice attempts: create one on an instance, autosave its narration, record its marks
and measurement runs, and submit it for scoring. The answer key stays on the server until
an attempt is submitted; `public()` is the only view of an attempt that leaves it."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone

from sqlalchemy import select
from sqlalchemy.orm import Session

import scenarios
from app.db.models import Attempt, NarrationSave
from app.scenario import Instance, InstanceError
from app.scoring.marks import score_marks
from app.scoring.score import MAX_CHARS, NarrationTooLong, score

MAX_RUNS = 500


class AttemptClosed(InstanceError):
    """The attempt was submitted; it takes no more changes (HTTP 409)."""


def instance_of(a: Attempt) -> Instance:
    """The attempt's instance (validated seed and params; InstanceError says what is wrong)."""
    from app.cli import parse_seed
    from app.web.instances import cached

    seed = parse_seed(None, True) if a.seed == "canonical" else parse_seed(a.seed, False)
    return cached(a.scenario, seed, tuple(sorted((k, str(v)) for k, v in a.params.items())))


def create(db: Session, owner: str, scenario: str, seed: str, params: dict[str, str] | None = None) -> Attempt:
    if scenario not in scenarios.REGISTRY:
        raise InstanceError(f"unknown scenario {scenario!r}; valid scenarios: {', '.join(scenarios.REGISTRY)}")
    a = Attempt(public_id=secrets.token_hex(8), owner=owner, scenario=scenario,
                version=scenarios.get(scenario).version, seed=str(seed), params=dict(params or {}),
                narration="", marks={}, runs=[])
    instance_of(a)  # validates the seed and params now, not at submission
    db.add(a)
    db.flush()
    return a


def get(db: Session, owner: str, public_id: str) -> Attempt | None:
    """The owner's attempt; another browser's is as absent as a missing one."""
    return db.scalar(select(Attempt).where(Attempt.public_id == public_id, Attempt.owner == owner))


def mine(db: Session, owner: str) -> list[Attempt]:
    return list(db.scalars(select(Attempt).where(Attempt.owner == owner).order_by(Attempt.created_at)))


def _open(a: Attempt) -> None:
    if a.submitted_at is not None:
        raise AttemptClosed("this attempt was submitted; start a new one to practise again")


def save_narration(a: Attempt, text: str) -> None:
    """Keep the text, and a history entry when it changed."""
    _open(a)
    if len(text) > MAX_CHARS:
        raise NarrationTooLong(f"the narration is {len(text):,} characters; the limit is {MAX_CHARS:,}")
    if text != a.narration:
        a.narration = text
        a.saves.append(NarrationSave(text=text))


def set_marks(a: Attempt, marks: dict) -> None:
    _open(a)
    a.marks = {**a.marks, **{k: v for k, v in marks.items() if k in ("step", "gap")}}


def add_run(a: Attempt, tool: str, since_open_s: float | None) -> None:
    from app import tools

    _open(a)
    if tool not in tools.TOOLS:
        raise InstanceError(f"unknown tool {tool!r}")
    if len(a.runs) >= MAX_RUNS:
        raise InstanceError(f"an attempt records at most {MAX_RUNS} measurement runs")
    a.runs = a.runs + [{"tool": tool, "at": datetime.now(timezone.utc).isoformat(), "since_open_s": since_open_s}]


def submit(a: Attempt) -> dict:
    """Score the narration with the runs and marks; the report joins the key's answer."""
    _open(a)
    inst = instance_of(a)
    report = score(inst.key, inst.scenario.rubric, a.narration, a.runs)
    report["marks"] = score_marks(inst.key, a.marks)
    report["model_answer"] = inst.key["model_answer"]
    report["observations"] = inst.key["observations"]
    report["expected"] = inst.key["expected"]
    report["root_cause"] = inst.key["root_cause"]
    report["fix"] = inst.key["fix"]
    a.report, a.total, a.trap_endorsed = report, report["total"], report["trap_endorsed"]
    a.submitted_at = datetime.now(timezone.utc)
    return report


def public(a: Attempt) -> dict:
    """What the browser may see: before submission, nothing from the key."""
    out = {"id": a.public_id, "scenario": a.scenario, "version": a.version, "seed": a.seed, "params": a.params,
           "narration": a.narration, "marks": a.marks, "runs": a.runs, "saves": len(a.saves),
           "created_at": a.created_at.isoformat() if a.created_at else None,
           "updated_at": a.updated_at.isoformat() if a.updated_at else None,
           "submitted_at": a.submitted_at.isoformat() if a.submitted_at else None}
    if a.submitted_at is not None:
        out.update(report=a.report, total=a.total, trap_endorsed=a.trap_endorsed)
    return out
