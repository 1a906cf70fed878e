"""A live interview round: created by an interviewer on a question or an instance, opened
by the candidate through an unguessable link, watched on the interviewer's console as it
happens, ended, and scored.

Every change is one write transaction that appends to the round's event log and updates
the round's current state together, on the round's row locked (FOR UPDATE on PostgreSQL;
SQLite's write lock is the whole database): appends to one round are serialized, so a
reader that has seen event N and asks for `id > N` misses nothing. The wake-up
(app/rounds/wakeup.py) goes out after the commit.

Who sees what: the candidate reaches the round only by its link (`by_token`) and sees
`candidate_view`: the brief, their own work, the phase and timer, hints revealed, and
never the key, the model answer, the traps, the scenario or the seed. Staff reach it by
its public id, within their teams (another team's round is as absent as a missing one).
"""

from __future__ import annotations

import asyncio
import hashlib
import queue
import secrets
import threading
from concurrent.futures import Future
from datetime import datetime, timedelta, timezone

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

import scenarios
from app import instances
from app.accounts import AccessDenied, Staff
from app.db.base import Store
from app.db.staff import Candidate, Question, Round, RoundEvent, Scorecard
from app.rounds import candidates, guide, questions
from app.rounds.wakeup import HUB, notify_sql
from app.scenario import Instance, InstanceError
from app.scoring import second_opinion
from app.scoring.marks import score_marks
from app.scoring.read import LABELS
from app.scoring.score import MAX_CHARS, NarrationError, check_text, score

RUNNERS = ("admin", "interviewer")  # who may create, watch and steer a round
SCORERS = ("admin", "interviewer", "reviewer")  # who may put a scorecard on an ended round
ACTORS = ("candidate", "interviewer", "system")
# What the candidate's own stream carries: what the interviewer pushes to them.
TO_CANDIDATE = frozenset({"hint", "phase", "lock", "end"})
# What the candidate may post to /events beyond the dedicated writes.
CANDIDATE_EVENT_KINDS = ("viewport", "selection", "integrity", "note")  # note: the candidate's, on the timeline
MAX_EVENTS = 100_000  # ~5 per second for 5 hours: a round's log past this is abuse
MAX_RUNS = 500
MAX_NOTE_CHARS = 4000
CRITERIA = tuple(LABELS)  # contract 4's criterion ids, in order
LEVELS = {1: "poor", 2: "mixed", 3: "good", 4: "excellent"}
RECOMMENDATIONS = {1: "strong no hire", 2: "no hire", 3: "hire", 4: "strong hire"}


class NoRound(InstanceError):
    """No such round, or not one of yours (HTTP 404)."""


class RoundClosed(InstanceError):
    """The round takes no more of this change: ended, locked, or not ended yet (HTTP 409)."""


class LinkExpired(InstanceError):
    """The candidate link expired (HTTP 410)."""


def now() -> datetime:
    return datetime.now(timezone.utc)


def _aware(t: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes for what was stored in UTC."""
    return t.replace(tzinfo=timezone.utc) if t is not None and t.tzinfo is None else t


def _iso(t: datetime | None) -> str | None:
    return _aware(t).isoformat() if t is not None else None


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def instance_of(r: Round) -> Instance:
    return instances.instance(r.scenario, instances.parse_seed(r.seed), {k: str(v) for k, v in r.params.items()},
                              r.version)


# -- creating a round ----------------------------------------------------------------------

def team_for(staff: Staff, team_id: int | None) -> int:
    """The team a new round belongs to: the one named, else the only one where this person
    runs rounds."""
    if team_id is not None:
        if staff.role(team_id) is None:
            raise NoRound("no such team among yours")
        if not staff.is_(team_id, *RUNNERS):
            raise AccessDenied("only the team's interviewers and admins run rounds")
        return team_id
    mine = [t for t, role in staff.roles.items() if role in RUNNERS]
    if not mine:
        raise AccessDenied("only interviewers and admins run rounds")
    if len(mine) > 1:
        raise InstanceError("you run rounds for several teams: say which (team)")
    return mine[0]


def create(store: Store, staff: Staff, *, scenario: str | None = None, seed: str | int | None = None,
           params: dict[str, str] | None = None, question_id: int | None = None, team_id: int | None = None,
           candidate_name: str | None = None, candidate_code: str | None = None,
           link_hours: float = 72.0) -> tuple[Round, str]:
    """A new round and its candidate token (returned once; the database keeps its hash).
    The round is for the team's candidate `candidate_code`, else for a new candidate
    record (named `candidate_name`, if given): every round has one, so review can show
    its pseudonym and find the person's other rounds."""
    time_plan: list[dict] | None = None
    if question_id is not None:
        q: Question = questions.get(store, staff, question_id)
        if q.archived_at is not None:
            raise questions.NoQuestion(f"question {question_id} is archived")
        team_id = team_for(staff, q.team_id)
        scenario, kind, params, time_plan = q.scenario, q.instance, dict(q.params), q.time_plan
        seed = q.seed if kind == "seed" else kind
    else:
        team_id = team_for(staff, team_id)
        if not scenario:
            raise InstanceError("a round needs a scenario (or a question_id)")
        seed = "secret" if seed is None else str(seed)
        kind = seed if seed in ("canonical", "secret") else "seed"
    if scenario not in scenarios.REGISTRY:
        raise InstanceError(f"unknown scenario {instances.clip(str(scenario))!r}; valid: {', '.join(scenarios.REGISTRY)}")
    label = secrets.SystemRandom().randrange(instances.MAX_SEED + 1) if kind == "secret" else \
        instances.parse_seed(str(seed))
    name = " ".join((candidate_name or "").split())[:200] or None
    token = secrets.token_urlsafe(32)
    r = Round(public_id=secrets.token_hex(8), team_id=team_id, question_id=question_id, created_by=staff.user_id,
              candidate_name=name, scenario=scenario, version=scenarios.get(scenario).version, seed=str(label),
              seed_kind=kind, params={k: str(v) for k, v in (params or {}).items()},
              rubric_version=scenarios.get(scenario).version, time_plan=questions.check_plan(time_plan),
              token_hash=token_hash(token), token_expires_at=now() + timedelta(hours=link_hours),
              phase="waiting", locked=False, narration="", marks={}, runs=[], last_event_id=0, event_count=0,
              created_at=now())
    instance_of(r)  # validates the params and builds the instance outside the write lock
    with store.write() as db:
        if candidate_code:
            c = db.scalar(select(Candidate).where(Candidate.team_id == team_id,
                                                  Candidate.code == candidate_code.strip().upper()[:8]))
            if c is None:
                raise candidates.NoCandidate(f"no candidate {instances.clip(candidate_code, 8)!r} in this team")
            r.candidate_name = r.candidate_name or c.name
        else:
            c = candidates.create(db, team_id, name, created_by=staff.user_id)
        r.candidate_id = c.id
        db.add(r)
        db.flush()
        ev = _append(db, r, "system", "created", {"by": staff.email, "phase": "waiting"})
    _published(r.id, "created", ev)
    return r, token


def new_link(store: Store, staff: Staff, public_id: str, link_hours: float = 72.0) -> str:
    """A fresh candidate link; the old one stops working (the interviewer lost it, or it
    reached the wrong person)."""
    r = for_staff(store, staff, public_id, RUNNERS)
    token = secrets.token_urlsafe(32)
    with store.write() as db:
        row = _lock(db, r.id)
        row.token_hash, row.token_expires_at = token_hash(token), now() + timedelta(hours=link_hours)
        ev = _append(db, row, "interviewer", "link", {"by": staff.email, "expires_at": _iso(row.token_expires_at)})
    _published(r.id, "link", ev)
    return token


# -- finding a round ----------------------------------------------------------------------

def by_token(store: Store, token: str) -> Round:
    if not token or len(token) > 100:
        raise NoRound("no round at this link")
    with store.read() as db:
        r = db.scalar(select(Round).where(Round.token_hash == token_hash(token)))
    if r is None:
        raise NoRound("no round at this link: it may have been replaced by a newer one")
    if _aware(r.token_expires_at) < now():
        raise LinkExpired("this round's link has expired; ask your interviewer for a new one")
    return r


def for_staff(store: Store, staff: Staff, public_id: str, roles: tuple[str, ...] | None = None) -> Round:
    """The round if it is in one of this person's teams (else NoRound), and if `roles` is
    given, only for those roles there (else AccessDenied)."""
    with store.read() as db:
        r = db.scalar(select(Round).where(Round.public_id == public_id))
    if r is None or staff.role(r.team_id) is None:
        raise NoRound(f"no round {instances.clip(public_id, 40)!r} in your teams")
    if roles is not None and not staff.is_(r.team_id, *roles):
        raise AccessDenied(f"a {staff.role(r.team_id)} may not do this; interviewers and admins run rounds")
    return r


def listing(store: Store, staff: Staff, limit: int = 200) -> list[Round]:
    if not staff.roles:
        return []
    with store.read() as db:
        return list(db.scalars(select(Round).where(Round.team_id.in_(list(staff.roles)))
                               .order_by(Round.created_at.desc()).limit(limit)))


# -- the log ---------------------------------------------------------------------------------

def _lock(db: Session, round_pk: int) -> Round:
    r = db.scalar(select(Round).where(Round.id == round_pk).with_for_update())
    if r is None:
        raise NoRound("the round is gone")
    return r


def _append(db: Session, r: Round, actor: str, kind: str, data: dict) -> RoundEvent:
    """One event, on the round's locked row, in the caller's transaction. `e.prev` is the
    round's event before it: appends to a round are serialized, so (prev, id) links the
    round's log into a chain a stream can follow without reading it back."""
    if (r.event_count or 0) >= MAX_EVENTS:
        raise RoundClosed(f"this round's log holds its limit of {MAX_EVENTS:,} events")
    prev = r.last_event_id or 0
    e = RoundEvent(round_id=r.id, at=now(), actor=actor, kind=kind, data=data)
    db.add(e)
    db.flush()
    r.last_event_id, r.event_count = e.id, (r.event_count or 0) + 1
    e.prev, e.as_json = prev, event_json(e)  # plain attributes, not columns
    notify_sql(db, r.id, kind, e.id, prev, e.as_json)
    return e


def _published(round_pk: int, kind: str, e: RoundEvent | None = None) -> None:
    """After the commit: wake this process's streams, handing them the event (other
    workers hear it from the feed)."""
    if e is None:
        HUB.publish(round_pk, kind)
    else:
        HUB.publish(round_pk, kind, e.id, e.prev, e.as_json)


def event_json(e: RoundEvent) -> dict:
    return {"id": e.id, "at": _iso(e.at), "actor": e.actor, "kind": e.kind, "data": e.data}


def events(store: Store, round_pk: int, after: int = 0, kinds: frozenset[str] | None = None,
           limit: int = 2000) -> list[dict]:
    q = select(RoundEvent).where(RoundEvent.round_id == round_pk, RoundEvent.id > after)
    if kinds is not None:
        q = q.where(RoundEvent.kind.in_(sorted(kinds)))
    with store.read() as db:
        return [event_json(e) for e in db.scalars(q.order_by(RoundEvent.id).limit(limit))]


def splice(old: str, new: str) -> dict:
    """`new` as one edit of `old`: keep `at` characters, delete `del`, insert `ins`. The log
    stores this, not the whole text at every keystroke; replaying the edits from "" gives
    the narration as it stood at any moment."""
    n = min(len(old), len(new))
    p = 0
    while p < n and old[p] == new[p]:
        p += 1
    s = 0
    while s < n - p and old[len(old) - 1 - s] == new[len(new) - 1 - s]:
        s += 1
    return {"at": p, "del": len(old) - p - s, "ins": new[p:len(new) - s], "len": len(new)}


def apply_splice(text: str, d: dict) -> str:
    return text[:d["at"]] + d["ins"] + text[d["at"] + d["del"]:]


# -- the candidate's writes ------------------------------------------------------------------

def _check_open(r, *, writing_read: bool = False) -> None:
    """The round (a Round, or a row with its columns) behind a live link takes this write:
    it exists, its link is live, it has not ended, and for the read itself (narration,
    marks) it is not locked."""
    if r is None:
        raise NoRound("no round at this link: it may have been replaced by a newer one")
    if _aware(r.token_expires_at) < now():
        raise LinkExpired("this round's link has expired; ask your interviewer for a new one")
    if r.ended_at is not None:
        raise RoundClosed("the interviewer has ended this round; nothing more is recorded")
    if writing_read and r.locked:
        raise RoundClosed("the interviewer has locked your read for now; it is saved as it stands")


def _candidate_round(db: Session, token: str, *, writing_read: bool) -> Round:
    """The round behind a live link, locked, open for this write."""
    r = db.scalar(select(Round).where(Round.token_hash == token_hash(token)).with_for_update())
    _check_open(r, writing_read=writing_read)
    return r


def opened(store: Store, token: str, user_agent: str = "") -> Round:
    """The candidate's page was opened: the first time is an event the console shows."""
    r = by_token(store, token)
    if r.opened_at is not None or r.ended_at is not None:
        return r
    ev = None
    with store.write() as db:
        row = _candidate_round(db, token, writing_read=False)
        if row.opened_at is None:
            row.opened_at = now()
            ev = _append(db, row, "candidate", "opened", {"user_agent": user_agent[:200]})
    _published(r.id, "opened", ev)
    return by_token(store, token)


def save_narration(store: Store, token: str, text: str) -> dict:
    check_text(text)
    with store.write() as db:
        r = _candidate_round(db, token, writing_read=True)
        eid = None
        if text != r.narration:
            ev = _append(db, r, "candidate", "narration", splice(r.narration, text))
            eid = ev.id
            r.narration = text
        rid = r.id
    if eid:
        _published(rid, "narration", ev)
    return {"saved": True, "chars": len(text), "limit": MAX_CHARS, "event_id": eid}


def set_marks(store: Store, token: str, marks: dict) -> dict:
    with store.write() as db:
        r = _candidate_round(db, token, writing_read=True)
        r.marks = {**r.marks, **{k: v for k, v in marks.items() if k in ("step", "gap")}}
        ev = _append(db, r, "candidate", "marks", dict(r.marks))
        out, rid = dict(r.marks), r.id
    _published(rid, "marks", ev)
    return out


def add_run(store: Store, token: str, tool: str, options: dict[str, str], since_open_s: float | None) -> list:
    from app import tools

    if tool not in tools.TOOLS:
        raise InstanceError(f"unknown tool {instances.clip(tool, 64)!r}")
    options = {k: str(v)[:200] for k, v in options.items() if k in tools.TOOLS[tool].options}
    with store.write() as db:
        r = _candidate_round(db, token, writing_read=False)
        if len(r.runs) >= MAX_RUNS:
            raise RoundClosed(f"a round records at most {MAX_RUNS} measurement runs")
        run = {"tool": tool, "options": options, "at": now().isoformat(), "since_open_s": since_open_s}
        r.runs = r.runs + [run]
        ev = _append(db, r, "candidate", "run", run)
        out, rid = list(r.runs), r.id
    _published(rid, "run", ev)
    return out


MAX_QUERY_LOG_CHARS = 2000  # of a query's text kept in the log: enough to read what was asked


def add_query(store: Store, token: str, query: str, rows: int | None, error: str | None) -> None:
    """A query the candidate ran in the Query tab, as a `query` event: the interviewer sees what
    was asked of the trace, and what came back (a row count, or the one-line refusal), as
    they see a tool's run. Not a run: runs are the tools the scorer credits."""
    data = {"query": query[:MAX_QUERY_LOG_CHARS], "at": now().isoformat()}
    data.update({"rows": rows} if error is None else {"error": error[:300]})
    with store.write() as db:
        r = _candidate_round(db, token, writing_read=False)
        ev = _append(db, r, "candidate", "query", data)
        rid = r.id
    _published(rid, "query", ev)


def candidate_event(store: Store, token: str, kind: str, data: dict) -> int:
    """A view change or an integrity signal (tab hidden, a paste): the console mirrors it;
    integrity is information for the interviewer, never a penalty. The page sends one per
    100 ms while the candidate moves: this process's writer (`_Batcher`) stores whatever
    arrived meanwhile in one transaction, and the answer waits for its commit."""
    if kind not in CANDIDATE_EVENT_KINDS:
        raise InstanceError(f"kind must be one of {', '.join(CANDIDATE_EVENT_KINDS)}")
    return _batcher(store).submit(token, kind, data).result()


async def candidate_event_async(store: Store, token: str, kind: str, data: dict) -> int:
    """candidate_event for an async route: it waits for the commit on the event loop, not
    in a thread of the pool that would do nothing but wait."""
    if kind not in CANDIDATE_EVENT_KINDS:
        raise InstanceError(f"kind must be one of {', '.join(CANDIDATE_EVENT_KINDS)}")
    return await asyncio.wrap_future(_batcher(store).submit(token, kind, data))


BATCH_MAX = 200  # events in one transaction
_batchers: dict[str, "_Batcher"] = {}
_batchers_lock = threading.Lock()


def _batcher(store: Store) -> "_Batcher":
    b = _batchers.get(store.url)
    if b is None:
        with _batchers_lock:
            b = _batchers.get(store.url)
            if b is None:
                b = _batchers[store.url] = _Batcher(store)
    return b


class _Batcher:
    """One thread per process that writes candidate events: each transaction takes every
    event waiting (up to BATCH_MAX), so at 250 events/s a commit (SQLite's fsync, the write
    lock, the GIL handed back and forth five times) is paid once per batch, not per event.
    Rounds are locked in token order, so two processes' batches cannot deadlock. An event
    its round refuses (ended, expired, full) fails alone; a database error fails the batch
    and nothing of it is stored."""

    def __init__(self, store: Store):
        self.store = store
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="tracedojo-events", daemon=True).start()

    def submit(self, token: str, kind: str, data: dict) -> Future:
        fut: Future = Future()
        self.q.put((token_hash(token), kind, data, fut))
        return fut

    def _run(self) -> None:
        while True:
            items = [self.q.get()]
            while len(items) < BATCH_MAX:
                try:
                    items.append(self.q.get_nowait())
                except queue.Empty:
                    break
            items.sort(key=lambda it: it[0])  # stable: one round's events keep their order
            done = []
            try:
                with self.store.write() as db:
                    conn = db.connection()
                    for h, kind, data, fut in items:
                        try:
                            done.append((fut, *self._one(db, conn, h, kind, data)))
                        except InstanceError as e:
                            fut.set_exception(e)
            except Exception as e:  # nothing of this batch was stored
                for _h, _k, _d, fut in items:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            for fut, rid, kind, eid, prev, event in done:
                HUB.publish(rid, kind, eid, prev, event)
                fut.set_result(eid)

    @staticmethod
    def _one(db, conn, h: str, kind: str, data: dict) -> tuple:
        rounds, log = Round.__table__, RoundEvent.__table__
        r = conn.execute(select(rounds.c.id, rounds.c.token_expires_at, rounds.c.ended_at, rounds.c.event_count,
                                rounds.c.last_event_id)
                         .where(rounds.c.token_hash == h).with_for_update()).first()
        _check_open(r)
        if (r.event_count or 0) >= MAX_EVENTS:
            raise RoundClosed(f"this round's log holds its limit of {MAX_EVENTS:,} events")
        at, prev = now(), r.last_event_id or 0
        eid = conn.execute(insert(log).values(round_id=r.id, at=at, actor="candidate", kind=kind, data=data)
                           .returning(log.c.id)).scalar_one()
        conn.execute(update(rounds).where(rounds.c.id == r.id)
                     .values(last_event_id=eid, event_count=rounds.c.event_count + 1))
        event = {"id": eid, "at": _iso(at), "actor": "candidate", "kind": kind, "data": data}
        notify_sql(db, r.id, kind, eid, prev, event)
        return r.id, kind, eid, prev, event


def submit(store: Store, token: str) -> dict:
    """The candidate hands in the read: it locks, and the interviewer sees it."""
    with store.write() as db:
        r = _candidate_round(db, token, writing_read=True)
        r.submitted_at, r.locked = now(), True
        ev = _append(db, r, "candidate", "submit", {"chars": len(r.narration), "words": len(r.narration.split())})
        rid = r.id
    _published(rid, "submit", ev)
    return {"submitted": True}


# -- the interviewer's writes --------------------------------------------------------------

def _staff_write(db: Session, staff: Staff, r: Round, *, open_only: bool = True) -> Round:
    row = _lock(db, r.id)
    if open_only and row.ended_at is not None:
        raise RoundClosed("this round has ended")
    return row


def reveal_hint(store: Store, staff: Staff, public_id: str, index: int) -> dict:
    r = for_staff(store, staff, public_id, RUNNERS)
    ladder = guide.hints(instance_of(r))
    if not 0 <= index < len(ladder):
        raise InstanceError(f"hint index {index} out of range: this question has hints 0-{len(ladder) - 1}")
    hint = ladder[index]
    with store.write() as db:
        row = _staff_write(db, staff, r)
        shown = db.scalar(select(func.count()).select_from(RoundEvent).where(
            RoundEvent.round_id == row.id, RoundEvent.kind == "hint",
            RoundEvent.data["index"].as_integer() == index))
        if shown:
            return {"index": index, "already": True}
        ev = _append(db, row, "interviewer", "hint", {"index": index, "title": hint["title"], "text": hint["text"],
                                                      "by": staff.email})
    _published(r.id, "hint", ev)
    return {"index": index, "already": False}


def add_note(store: Store, staff: Staff, public_id: str, note: str) -> dict:
    note = note.strip()
    if not note:
        raise InstanceError("a note needs some text")
    if len(note) > MAX_NOTE_CHARS:
        raise InstanceError(f"a note holds at most {MAX_NOTE_CHARS:,} characters")
    r = for_staff(store, staff, public_id, RUNNERS)
    with store.write() as db:
        # notes stay open after the end: the interviewer writes up the round
        row = _staff_write(db, staff, r, open_only=False)
        ev = e = _append(db, row, "interviewer", "note", {"text": note, "by": staff.email})
        out = event_json(e)
    _published(r.id, "note", ev)
    return out


def set_phase(store: Store, staff: Staff, public_id: str, phase: str) -> dict:
    """Move to a phase of the round's plan ("next": the one after the current)."""
    r = for_staff(store, staff, public_id, RUNNERS)
    plan = [p["phase"] for p in r.time_plan]
    with store.write() as db:
        row = _staff_write(db, staff, r)
        if phase == "next":
            at = plan.index(row.phase) + 1 if row.phase in plan else 0
            if at >= len(plan):
                raise RoundClosed("the last phase is on: end the round instead")
            phase = plan[at]
        if phase not in plan:
            raise InstanceError(f"phase must be one of {', '.join(plan)} (or next)")
        row.phase, row.phase_started_at = phase, now()
        ev = _append(db, row, "interviewer", "phase", {"phase": phase, "minutes": _minutes(row, phase)})
        out = timer(row)
    _published(r.id, "phase", ev)
    return out


def set_lock(store: Store, staff: Staff, public_id: str, locked: bool) -> dict:
    r = for_staff(store, staff, public_id, RUNNERS)
    with store.write() as db:
        row = _staff_write(db, staff, r)
        row.locked = locked
        ev = _append(db, row, "interviewer", "lock", {"locked": locked})
    _published(r.id, "lock", ev)
    return {"locked": locked}


def end(store: Store, staff: Staff, public_id: str) -> dict:
    """The round is over: the candidate's page shows so, nothing more is recorded from it,
    and the automatic score is computed (shown to an interviewer after their scorecard)."""
    r = for_staff(store, staff, public_id, RUNNERS)
    inst = instance_of(r)  # built before the write lock is taken
    with store.write() as db:
        row = _staff_write(db, staff, r, open_only=False)
        if row.ended_at is not None:
            return {"ended_at": _iso(row.ended_at), "already": True}
        try:
            report = score(inst.key, inst.scenario.rubric, row.narration, row.runs)
            report["marks"] = score_marks(inst.key, row.marks)
            if second_opinion.wanted():
                report["second_opinion"] = second_opinion.pending()  # asked after the response (add_second_opinion)
        except NarrationError as e:  # nothing said (a no-show): the round still ends
            report = {"total": None, "skipped": f"no automatic score: {e}"}
        row.ended_at, row.phase, row.locked = now(), "ended", True
        row.auto_report, row.auto_total = report, report["total"]
        ev = _append(db, row, "interviewer", "end", {"by": staff.email})
        out = {"ended_at": _iso(row.ended_at), "already": False}
    _published(r.id, "end", ev)
    return out


def add_second_opinion(store: Store, public_id: str) -> dict | None:
    """Ask the configured endpoint about an ended round's stance and store its answer in the
    automatic report (run after the end's response; the call is made outside any
    transaction). None where no opinion is pending."""
    with store.read() as db:
        r = db.scalar(select(Round).where(Round.public_id == public_id))
    if r is None or not second_opinion.is_pending(r.auto_report):
        return None
    opinion = second_opinion.ask_configured(instance_of(r).key, r.narration)
    with store.write() as db:
        row = _lock(db, r.id)
        row.auto_report = second_opinion.merged(row.auto_report, opinion)
        return row.auto_report


def put_scorecard(store: Store, staff: Staff, public_id: str, criteria: dict[str, int], recommendation: int,
                  notes: str = "") -> dict:
    """This rater's scorecard, after the end (an interviewer on the console, a reviewer
    from the replay); sent again, it replaces their own."""
    r = for_staff(store, staff, public_id, SCORERS)
    missing = [c for c in CRITERIA if c not in criteria]
    extra = [c for c in criteria if c not in CRITERIA]
    if missing or extra:
        raise InstanceError(f"a scorecard gives a level for each of {', '.join(CRITERIA)}"
                            + (f"; missing {', '.join(missing)}" if missing else "")
                            + (f"; unknown {', '.join(instances.clip(c, 30) for c in extra[:3])}" if extra else ""))
    for c, level in criteria.items():
        if level not in LEVELS:
            raise InstanceError(f"{c}: a level is 1 (poor) to 4 (excellent)")
    if recommendation not in RECOMMENDATIONS:
        raise InstanceError("recommendation is 1 (strong no hire), 2 (no hire), 3 (hire) or 4 (strong hire)")
    if len(notes) > MAX_NOTE_CHARS * 4:
        raise InstanceError(f"scorecard notes hold at most {MAX_NOTE_CHARS * 4:,} characters")
    with store.write() as db:
        row = _lock(db, r.id)
        if row.ended_at is None:
            raise RoundClosed("score the round after it ends: end it first")
        card = db.scalar(select(Scorecard).where(Scorecard.round_id == row.id, Scorecard.user_id == staff.user_id))
        if card is None:
            card = Scorecard(round_id=row.id, user_id=staff.user_id, submitted_at=now())
            db.add(card)
        card.criteria, card.recommendation, card.notes, card.updated_at = dict(criteria), recommendation, notes, now()
        ev = _append(db, row, "interviewer", "scorecard", {"by": staff.email, "criteria": dict(criteria),
                                                      "recommendation": recommendation})
        out = scorecard_json(card, staff.email)
    _published(r.id, "scorecard", ev)
    return out


def scorecard_json(card: Scorecard, email: str) -> dict:
    return {"criteria": card.criteria, "recommendation": card.recommendation,
            "recommendation_label": RECOMMENDATIONS[card.recommendation], "notes": card.notes, "by": email,
            "submitted_at": _iso(card.submitted_at), "updated_at": _iso(card.updated_at)}


# -- views -------------------------------------------------------------------------------

def _minutes(r: Round, phase: str) -> float | None:
    return next((p["minutes"] for p in r.time_plan if p["phase"] == phase), None)


def timer(r: Round) -> dict:
    """The phase clock both sides show; `now` lets a browser correct its own clock."""
    return {"phase": r.phase, "phase_started_at": _iso(r.phase_started_at), "minutes": _minutes(r, r.phase),
            "plan": r.time_plan, "now": now().isoformat(), "locked": r.locked, "ended_at": _iso(r.ended_at)}


def hints_revealed(store: Store, r: Round) -> list[dict]:
    return [{"index": e["data"]["index"], "title": e["data"]["title"], "text": e["data"]["text"], "at": e["at"]}
            for e in events(store, r.id, kinds=frozenset({"hint"}))]


def candidate_view(store: Store, r: Round) -> dict:
    """All the candidate may know: no scenario, no seed, no key, no score."""
    return {"brief": instance_of(r).key["brief"], "narration": r.narration, "marks": r.marks, "runs": r.runs,
            "hints": hints_revealed(store, r), "timer": timer(r), "opened_at": _iso(r.opened_at),
            "submitted_at": _iso(r.submitted_at), "ended": r.ended_at is not None, "max_chars": MAX_CHARS,
            "last_event_id": r.last_event_id}


# What the console's page and fragments need from the log; the JSON twin has all of it.
CONSOLE_KINDS = frozenset({"hint", "note", "integrity", "practice", "query"})


def console_view(store: Store, staff: Staff, r: Round, whole_log: bool = True) -> dict:
    """The interviewer's console: the round, the key laid out for a live round, the rubric
    with anchored levels, the hint ladder, the log so far (`whole_log`; else only hints,
    notes and integrity events, which is what the page and its fragments show: a long
    round's log is tens of thousands of viewport and narration events) and the notes; the
    automatic score only once this interviewer's own scorecard is in."""
    inst = instance_of(r)
    log = events(store, r.id, kinds=None if whole_log else CONSOLE_KINDS, limit=MAX_EVENTS)
    revealed = {e["data"]["index"] for e in log if e["kind"] == "hint"}
    with store.read() as db:
        card = db.scalar(select(Scorecard).where(Scorecard.round_id == r.id, Scorecard.user_id == staff.user_id))
    return {
        "round": {"id": r.public_id, "team_id": r.team_id, "scenario": r.scenario, "title": inst.scenario.title,
                  "seed": r.seed, "seed_kind": r.seed_kind, "params": r.params, "version": r.version,
                  "rubric_version": r.rubric_version, "question_id": r.question_id,
                  "candidate_name": r.candidate_name, "created_at": _iso(r.created_at),
                  "opened_at": _iso(r.opened_at), "submitted_at": _iso(r.submitted_at),
                  "link_expires_at": _iso(r.token_expires_at)},
        "timer": timer(r),
        "state": {"narration": r.narration, "marks": r.marks, "runs": r.runs, "last_event_id": r.last_event_id},
        "key": guide.live_key(inst),
        "rubric": guide.anchored_rubric(inst),
        "hints": [{**h, "revealed": h["index"] in revealed} for h in guide.hints(inst)],
        "events": log,
        "notes": [e for e in log if e["kind"] == "note"],
        "integrity": [e for e in log if e["kind"] == "integrity"],
        "queries": [e["data"] for e in log if e["kind"] == "query"],  # the candidate's Query tab (add_query)
        # the practice history the candidate attached (app/rounds/consent.py), as it now stands
        "practice": next((e["data"] for e in reversed(log) if e["kind"] == "practice"), None),
        "scorecard": scorecard_json(card, staff.email) if card else None,
        "auto_score": (r.auto_report if card is not None else None),
        "auto_score_hidden": r.auto_report is not None and card is None,
        "levels": LEVELS, "recommendations": RECOMMENDATIONS, "criteria": [{"id": c, "label": LABELS[c]}
                                                                          for c in CRITERIA],
    }


def summary(r: Round) -> dict:
    """A round in a list."""
    return {"id": r.public_id, "scenario": r.scenario, "title": scenarios.get(r.scenario).title,
            "seed_kind": r.seed_kind, "candidate_name": r.candidate_name, "phase": r.phase,
            "created_at": _iso(r.created_at), "ended_at": _iso(r.ended_at),
            "console_url": f"/rounds/{r.public_id}"}
