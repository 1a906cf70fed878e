"""Practice attempts: create one on a secret instance, autosave its narration, record its
marks and measurement runs, and submit it for scoring.

What the candidate may know: before submission, the attempt's id, the brief and its own
work; never the seed (drawn here from 2**53 values, so no one can look the instance up
in the open explorer), nor, in a surprise round, the pathology's name. `public()` is the
only view of an attempt that leaves the server. After submission the report shows the
key, the seed and the link to the open explorer.

Every change is one short write transaction that commits before the function returns,
conditional on the attempt still being open (`submitted_at IS NULL`), on the owner's row
locked (SELECT ... FOR UPDATE on PostgreSQL; SQLite's write lock is the whole database):
of two racing submits exactly one wins, and nothing changes after it.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timezone
from urllib.parse import urlencode

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

import scenarios
from app import instances
from app.db.base import Store
from app.db.models import Attempt, NarrationSave
from app.scenario import Instance, InstanceError
from app.scoring import second_opinion
from app.scoring.marks import score_marks
from app.scoring.score import MAX_CHARS, check_text, score

MAX_RUNS = 500
SURPRISE = "surprise"


class AttemptClosed(InstanceError):
    """The attempt was submitted; it takes no more changes (HTTP 409)."""


class NotSubmitted(InstanceError):
    """The attempt is still open: its report (and so a link to it, or showing it to a
    round's team) comes after submission (HTTP 409)."""


class NoAttempt(InstanceError):
    """No such attempt for this owner; another browser's is as absent as a missing one (HTTP 404)."""


def now() -> datetime:
    return datetime.now(timezone.utc)


def instance_of(a: Attempt) -> Instance:
    """The attempt's instance (built or from the cache), of the version it was made at."""
    return instances.instance(a.scenario, instances.parse_seed(a.seed), {k: str(v) for k, v in a.params.items()},
                              a.version)


def create(store: Store, owner: str, scenario: str, seed: str | None = None,
           params: dict[str, str] | None = None, family: str | None = None,
           difficulty: str | None = None) -> Attempt:
    """A new round of `scenario` (or, for "surprise", a random one of the given family and
    difficulty, any when not given) on a secret seed, or on the public seed given
    (self-study of an instance the candidate already knows)."""
    rng = secrets.SystemRandom()
    surprise = scenario == SURPRISE
    if surprise:
        shelf = scenarios.shelf(family, difficulty)
        if not shelf:
            raise InstanceError(f"no case is both {family or 'any family'} and {difficulty or 'any difficulty'}; "
                                "widen the filter")
        sid = rng.choice(shelf).id
    else:
        sid = scenario
    if sid not in scenarios.REGISTRY:  # a bad field of the request (400), not a missing page
        raise InstanceError(f"unknown scenario {instances.clip(sid)!r}; valid: {', '.join(scenarios.REGISTRY)}, "
                            f"{SURPRISE}")
    label = instances.parse_seed(seed) if seed else rng.randrange(instances.MAX_SEED + 1)
    a = Attempt(public_id=secrets.token_hex(8), owner=owner, scenario=sid, surprise=surprise,
                version=scenarios.get(sid).version,
                seed=str(label), params=dict(params or {}), narration="", marks={}, runs=[],
                created_at=now(), updated_at=now())
    instance_of(a)  # validates scenario, seed and params, and builds outside the write lock
    with store.write() as db:
        db.add(a)
    return a


def get(store: Store, owner: str, public_id: str) -> Attempt:
    with store.read() as db:
        return _find(db, owner, public_id)


def mine(store: Store, owner: str) -> list[Attempt]:
    with store.read() as db:
        return list(db.scalars(select(Attempt).where(Attempt.owner == owner).order_by(Attempt.created_at)))


def saves(store: Store, owner: str, public_id: str) -> int:
    with store.read() as db:
        return _saves(db, _find(db, owner, public_id))


def _find(db: Session, owner: str, public_id: str, lock: bool = False) -> Attempt:
    q = select(Attempt).where(Attempt.public_id == public_id, Attempt.owner == owner)
    a = db.scalar(q.with_for_update() if lock else q)
    if a is None:
        raise NoAttempt(f"no attempt {instances.clip(public_id, 40)!r} in this browser")
    return a


def _saves(db: Session, a: Attempt) -> int:
    return db.scalar(select(func.count()).select_from(NarrationSave).where(NarrationSave.attempt_id == a.id))


def _change(db: Session, a: Attempt, **values) -> None:
    """Set columns of an open attempt, or AttemptClosed if a submit got there first."""
    done = db.execute(update(Attempt).where(Attempt.id == a.id, Attempt.submitted_at.is_(None))
                      .values(updated_at=now(), **values).execution_options(synchronize_session=False))
    if done.rowcount != 1:
        raise AttemptClosed("this attempt was submitted; start a new one to practice again")
    for k, v in values.items():  # the row holds these now; the session need not write them again
        set_committed_value(a, k, v)


def _open_attempt(db: Session, owner: str, public_id: str) -> Attempt:
    a = _find(db, owner, public_id, lock=True)
    if a.submitted_at is not None:
        raise AttemptClosed("this attempt was submitted; start a new one to practice again")
    return a


def save_narration(store: Store, owner: str, public_id: str, text: str) -> dict:
    """Keep the text, and a history entry when it changed; returns what the page shows."""
    check_text(text)
    with store.write() as db:
        a = _open_attempt(db, owner, public_id)
        if text != a.narration:
            _change(db, a, narration=text)
            db.add(NarrationSave(attempt_id=a.id, text=text, saved_at=now()))
            db.flush()
        return {"saved": True, "saves": _saves(db, a), "chars": len(text), "limit": MAX_CHARS}


def set_marks(store: Store, owner: str, public_id: str, marks: dict) -> dict:
    with store.write() as db:
        a = _open_attempt(db, owner, public_id)
        _change(db, a, marks={**a.marks, **{k: v for k, v in marks.items() if k in ("step", "gap")}})
        return a.marks


def add_run(store: Store, owner: str, public_id: str, tool: str, since_open_s: float | None) -> list:
    from app import tools

    if tool not in tools.TOOLS:
        raise InstanceError(f"unknown tool {instances.clip(tool, 64)!r}")
    with store.write() as db:
        a = _open_attempt(db, owner, public_id)
        if len(a.runs) >= MAX_RUNS:
            raise InstanceError(f"an attempt records at most {MAX_RUNS} measurement runs")
        _change(db, a, runs=a.runs + [{"tool": tool, "at": now().isoformat(), "since_open_s": since_open_s}])
        return a.runs


def submit(store: Store, owner: str, public_id: str, narration: str | None = None,
           timed: bool = False) -> tuple[Attempt, dict]:
    """Score the narration with the runs and marks, once: the report joins the key's answer.
    `timed`: the read was said in the 60-second mode."""
    if narration is not None:
        check_text(narration)
    inst = instance_of(get(store, owner, public_id))  # built before the write lock is taken
    with store.write() as db:
        a = _open_attempt(db, owner, public_id)
        if narration is not None and narration != a.narration:
            db.add(NarrationSave(attempt_id=a.id, text=narration, saved_at=now()))
            a.narration = narration
        report = score(inst.key, inst.scenario.rubric, a.narration, a.runs, timed=timed)
        report["marks"] = score_marks(inst.key, a.marks)
        if second_opinion.wanted():
            report["second_opinion"] = second_opinion.pending()  # asked after the response (add_second_opinion)
        for k in ("model_answer", "observations", "expected", "root_cause", "fix"):
            report[k] = inst.key[k]
        _change(db, a, narration=a.narration, report=report, total=report["total"], timed=timed,
                trap_endorsed=report["trap_endorsed"], submitted_at=now())
    return a, report


def add_second_opinion(store: Store, public_id: str) -> dict | None:
    """Ask the configured endpoint about a submitted attempt's stance and store its answer in
    the report (run after the submit's response: the request never waits for it). The call is
    made outside any transaction; None where no opinion is pending."""
    with store.read() as db:
        a = db.scalar(select(Attempt).where(Attempt.public_id == public_id))
    if a is None or not second_opinion.is_pending(a.report):
        return None
    opinion = second_opinion.ask_configured(instance_of(a).key, a.narration)
    with store.write() as db:
        row = db.scalar(select(Attempt).where(Attempt.id == a.id).with_for_update())
        row.report = second_opinion.merged(row.report, opinion)
        return row.report


def link_params(a: Attempt) -> list[tuple[str, str]]:
    """The query that opens the attempt's instance in the open explorer: its params, and its
    version where the scenario has moved on since (contract 1)."""
    q = sorted((k, str(v)) for k, v in a.params.items())
    return q + [("version", str(a.version))] if a.version != scenarios.get(a.scenario).version else q


def public(a: Attempt) -> dict:
    """What the browser may see. Before submission: its own work, and the pathology's
    name unless the round is a surprise; never the seed or params. After: everything."""
    out = {"id": a.public_id, "narration": a.narration, "marks": a.marks, "runs": a.runs,
           "created_at": a.created_at.isoformat() if a.created_at else None,
           "updated_at": a.updated_at.isoformat() if a.updated_at else None,
           "submitted_at": a.submitted_at.isoformat() if a.submitted_at else None,
           "surprise": a.surprise}
    if a.submitted_at is not None or not a.surprise:
        out.update(scenario=a.scenario, title=scenarios.get(a.scenario).title, version=a.version)
    if a.submitted_at is not None:
        out.update(seed=a.seed, params=a.params, report=a.report, total=a.total, trap_endorsed=a.trap_endorsed,
                   explorer_url=f"/scenarios/{a.scenario}/{a.seed}" + (f"?{urlencode(q)}" if (q := link_params(a)) else ""))
    return out
