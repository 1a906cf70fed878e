"""A team's whole record as files: rounds, scorecards, criterion levels (each rater's and
the automatic score's, with its evidence) and the event log, as CSV, Parquet or JSON.

The export is for the team's admins only (`team_for`): it holds every scorecard, past the
blind-scorecard rule of app/review/access.py, and every candidate's name.

Streamed, in bounded memory, without holding the database: rows are read in batches by
keyset (the last id seen, never OFFSET, so batch k costs what batch 1 did), each batch in a
read session of its own that is closed before the batch is encoded and handed on. A
download that takes minutes holds no connection, transaction or lock between batches
(SQLite's WAL would otherwise keep growing behind an open reader; PostgreSQL would keep a
snapshot). The price: an export of a team at work is not one snapshot. A round, scorecard
or event committed while it runs appears if the cursor has not passed its place yet.

Every table has one column list with a type per column, so the three formats carry the
same columns in the same order, and an empty export still says what its columns are (the
CSV header; the Parquet schema). Times are UTC: ISO 8601 text in CSV and JSON, Parquet
timestamps (µs, UTC). Nested values (an event's data, the evidence and misses of an
automatic score) are JSON text in every format, so each format reads back as one flat table.
"""

from __future__ import annotations

import csv
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Text, cast, func, select

from app.accounts import AccessDenied, Staff
from app.db.base import Store
from app.db.staff import Candidate, Membership, Round, RoundEvent, Scorecard, User
from app.review import levels
from app.rounds.live import CRITERIA
from app.scenario import InstanceError

FORMATS = ("csv", "parquet", "json")
# Rows per batch: each batch is one short read session, one Parquet row group and one chunk
# of the response. 5,000 events are ~1-2 MB as Python objects and ~0.5 MB of CSV; a batch of
# this size takes a few ms to read, so a long download holds no session for long.
BATCH_ROWS = 5000
ROUND_PAGE = 1000  # the team's rounds, listed ahead of their events, this many at a time

Row = tuple
Batches = Iterator[list[Row]]

# Column kinds and their Arrow types (Parquet's schema).
ARROW = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(),
         "time": pa.timestamp("us", tz="UTC"), "json": pa.string()}


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, kind), kind a key of ARROW
    read: Callable[[Store, int, int], Batches]  # (store, team id, rows per batch) -> batches of rows

    @property
    def names(self) -> list[str]:
        return [c for c, _ in self.columns]

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([(c, ARROW[k]) for c, k in self.columns])


def _utc(t: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes for what was stored in UTC; PostgreSQL aware ones."""
    if t is None:
        return None
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def _json(value) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


# -- who may export which team --------------------------------------------------------------

def team_for(staff: Staff, slug: str | None) -> tuple[int, str]:
    """(team id, slug) this person may export: the team named, else the only one they are
    an admin of. Admins only: the export holds every scorecard past the team's blind rule,
    so a reviewer or interviewer gets AccessDenied (reviewers see the team's aggregates on
    the calibration page). A team one is not in is refused in the same words as one where
    one is not an admin, so the answer says nothing of which slugs exist."""
    if slug:
        tid = staff.team_id(slug.strip().lower())
        if tid is None or not staff.is_(tid, "admin"):
            raise AccessDenied(f"only admins of team {slug[:64]!r} export its rounds and scorecards")
        return tid, staff.teams[tid]
    mine = sorted((staff.teams.get(t, str(t)), t) for t, role in staff.roles.items() if role == "admin")
    if not mine:
        raise AccessDenied("only a team's admins export its rounds and scorecards")
    if len(mine) > 1:
        raise InstanceError(f"you are an admin of several teams: say which with ?team= "
                            f"(one of {', '.join(s for s, _ in mine)})")
    return mine[0][1], mine[0][0]


# -- reading rows, batch by batch -----------------------------------------------------------

def _keyset(store: Store, n: int, page: Callable[[object, int, int], list], key: Callable[[object], int],
            rows: Callable[[list], list[Row]]) -> Batches:
    """Pages of `page(db, after, n)` (ordered by the id `key` gives, past `after`) until a
    short one, each read in its own session and turned into rows after it closed."""
    after = 0
    while True:
        with store.read() as db:
            got = page(db, after, n)
        if got:
            after = key(got[-1])
            yield rows(got)
        if len(got) < n:
            return


def _rounds(store: Store, team_id: int, n: int) -> Batches:
    def page(db, after, n):
        return db.execute(
            select(Round.id, Round.public_id, Round.question_id, Round.scenario, Round.version, Round.seed_kind,
                   Round.seed, Candidate.code, func.coalesce(Candidate.name, Round.candidate_name),
                   Candidate.synthetic, Round.gold, User.email, Round.created_at, Round.opened_at,
                   Round.submitted_at, Round.ended_at, Round.auto_total, Round.auto_report,
                   func.length(Round.narration), Round.event_count)
            .outerjoin(Candidate, Candidate.id == Round.candidate_id)
            .outerjoin(User, User.id == Round.created_by)
            .where(Round.team_id == team_id, Round.id > after).order_by(Round.id).limit(n)).all()

    def rows(got):
        return [(pid, qid, scn, ver, kind, seed, code, name,
                 bool(synthetic),  # no candidate record: a round made by hand, not `tracedojo demo`'s
                 bool(gold), by, _utc(created), _utc(opened), _utc(submitted), _utc(ended), total,
                 levels.auto_recommendation(report), chars or 0, events or 0)
                for (_pk, pid, qid, scn, ver, kind, seed, code, name, synthetic, gold, by, created, opened,
                     submitted, ended, total, report, chars, events) in got]

    return _keyset(store, n, page, lambda r: r[0], rows)


def _scorecards(store: Store, team_id: int, n: int) -> Batches:
    def page(db, after, n):
        return db.execute(
            select(Scorecard.id, Round.public_id, User.email, Membership.role, Scorecard.recommendation,
                   Scorecard.notes, Scorecard.submitted_at, Scorecard.updated_at, Round.ended_at)
            .join(Round, Round.id == Scorecard.round_id)
            .join(User, User.id == Scorecard.user_id)
            # the rater's role in the round's team now (None: they have left it)
            .outerjoin(Membership, (Membership.user_id == Scorecard.user_id) & (Membership.team_id == Round.team_id))
            .where(Round.team_id == team_id, Scorecard.id > after).order_by(Scorecard.id).limit(n)).all()

    def rows(got):
        out = []
        for _pk, pid, email, role, rec, notes, submitted, updated, ended in got:
            submitted, ended = _utc(submitted), _utc(ended)
            minutes = (submitted - ended).total_seconds() / 60 if submitted and ended else None
            out.append((pid, email, role, rec, notes, submitted, _utc(updated), minutes))
        return out

    return _keyset(store, n, page, lambda r: r[0], rows)


def _auto_criteria(report: dict) -> Iterator[tuple]:
    """(criterion, level, score, max, evidence, missed) of a score report (contract 4)."""
    for c in report.get("criteria", []):
        score, top = c.get("score"), c.get("max")
        level = levels.level_of_share(score / top) if top and score is not None else None
        yield c["id"], level, score, top, _json(c.get("evidence", [])), _json(c.get("missed", []))


def _criteria(store: Store, team_id: int, n: int) -> Batches:
    """The automatic score's rows (rater "auto", with score, max, evidence and misses), then
    every rater's; a page of rounds or scorecards is ~6 rows each (one per criterion)."""
    per_page = max(1, n // len(CRITERIA))

    def auto_page(db, after, k):
        return db.execute(select(Round.id, Round.public_id, Round.auto_report)
                          .where(Round.team_id == team_id, Round.id > after, Round.auto_total.is_not(None))
                          .order_by(Round.id).limit(k)).all()

    def auto_rows(got):
        return [(pid, "auto", *c) for _pk, pid, report in got for c in _auto_criteria(report or {})]

    def card_page(db, after, k):
        return db.execute(select(Scorecard.id, Round.public_id, User.email, Scorecard.criteria)
                          .join(Round, Round.id == Scorecard.round_id).join(User, User.id == Scorecard.user_id)
                          .where(Round.team_id == team_id, Scorecard.id > after)
                          .order_by(Scorecard.id).limit(k)).all()

    def card_rows(got):
        out = []
        for _pk, pid, email, given in got:
            # the rubric's order first, then anything an older rubric had
            for c in [*[c for c in CRITERIA if c in given], *[c for c in given if c not in CRITERIA]]:
                out.append((pid, email, c, given[c], None, None, None, None))
        return out

    yield from _keyset(store, per_page, auto_page, lambda r: r[0], auto_rows)
    yield from _keyset(store, per_page, card_page, lambda r: r[0], card_rows)


def _events(store: Store, team_id: int, n: int) -> Batches:
    """The log round by round, each round's in id order. A batch is filled from as many
    rounds as it takes, each by the log's (round_id, id) index: one range read per round,
    never a scan of other teams' events or a sort of this team's whole log."""
    pending: deque[tuple[int, str]] = deque()  # the team's rounds not yet read out: (pk, public id)
    after_round, after_event, more_rounds = 0, 0, True
    data = cast(RoundEvent.data, Text)  # the JSON as stored: no parse and dump per event
    while True:
        batch: list[Row] = []
        with store.read() as db:
            conn = db.connection()  # Core rows: the ORM's per-row bookkeeping doubles a batch's memory
            while len(batch) < n:
                if not pending:
                    if not more_rounds:
                        break
                    page = conn.execute(select(Round.id, Round.public_id).where(Round.team_id == team_id,
                                                                              Round.id > after_round)
                                      .order_by(Round.id).limit(ROUND_PAGE)).all()
                    more_rounds = len(page) == ROUND_PAGE
                    if not page:
                        break
                    pending.extend((pk, pid) for pk, pid in page)
                    after_round = page[-1][0]
                pk, pid = pending[0]
                want = n - len(batch)
                got = conn.execute(select(RoundEvent.id, RoundEvent.at, RoundEvent.actor, RoundEvent.kind, data)
                                 .where(RoundEvent.round_id == pk, RoundEvent.id > after_event)
                                 .order_by(RoundEvent.id).limit(want)).all()
                batch.extend((pid, eid, _utc(at), actor, kind, text) for eid, at, actor, kind, text in got)
                if len(got) < want:
                    pending.popleft()
                    after_event = 0
                else:
                    after_event = got[-1][0]
        if batch:
            yield batch
        if len(batch) < n:
            return


TABLES: dict[str, Table] = {t.name: t for t in (
    # One row per round: its instance, candidate, times, the automatic total (0-100) and that
    # total on the recommendation's 1-4.
    Table("rounds", (
        ("round_id", "str"), ("question_id", "int"), ("scenario", "str"), ("version", "int"), ("seed_kind", "str"),
        ("seed", "str"), ("candidate_code", "str"), ("candidate_name", "str"), ("synthetic", "bool"),
        ("gold", "bool"), ("created_by", "str"), ("created_at", "time"), ("opened_at", "time"),
        ("submitted_at", "time"), ("ended_at", "time"), ("auto_total", "float"), ("auto_recommendation", "int"),
        ("narration_chars", "int"), ("event_count", "int")), _rounds),
    # One row per rater's scorecard: recommendation 1-4, notes, and the minutes from the
    # round's end to the first submission.
    Table("scorecards", (
        ("round_id", "str"), ("rater", "str"), ("rater_role", "str"), ("recommendation", "int"), ("notes", "str"),
        ("submitted_at", "time"), ("updated_at", "time"), ("minutes_end_to_submit", "float")), _scorecards),
    # One row per (round, rater, criterion): the level 1-4; for rater "auto" also the
    # points, their maximum, the evidence spans and what was missed.
    Table("criteria", (
        ("round_id", "str"), ("rater", "str"), ("criterion", "str"), ("level", "int"), ("score", "float"),
        ("max_score", "float"), ("evidence", "json"), ("missed", "json")), _criteria),
    # The event log (contract 7's {id, at, actor, kind, data}), round by round, each in id order.
    Table("events", (
        ("round_id", "str"), ("event_id", "int"), ("at", "time"), ("actor", "str"), ("kind", "str"),
        ("data", "json")), _events),
)}


# -- encoding batches as bytes --------------------------------------------------------------

def _csv(table: Table, batches: Iterable[list[Row]]) -> Iterator[bytes]:
    """RFC 4180 CSV, header first. NULL is an empty field; booleans are true/false; times
    ISO 8601 with their +00:00."""
    kinds = [k for _, k in table.columns]
    conv = [(i, (lambda v: v.isoformat()) if k == "time" else (lambda v: "true" if v else "false"))
            for i, k in enumerate(kinds) if k in ("time", "bool")]

    def converted(batch):
        for row in batch:
            row = list(row)
            for i, f in conv:
                if row[i] is not None:
                    row[i] = f(row[i])
            yield row

    # Written to a list, not a StringIO: one reused by seek and truncate keeps its largest
    # buffer, at 4 bytes a character (1.8 MB for a 0.45 MB batch of events).
    parts: list[str] = []
    out = csv.writer(_Appender(parts))
    out.writerow(table.names)
    for batch in batches:
        out.writerows(converted(batch) if conv else batch)
        chunk, parts[:] = "".join(parts).encode(), []
        yield chunk
    if parts:
        yield "".join(parts).encode()  # the header alone: there were no rows


class _Appender:
    """A file for csv.writer that is a list of the strings written."""

    def __init__(self, parts: list[str]):
        self.write = parts.append


def _json_array(table: Table, batches: Iterable[list[Row]]) -> Iterator[bytes]:
    """One JSON array of objects, sent a batch at a time: each batch is dumped as one array
    (one buffer, not one per row: orjson's per-call buffer starts at kilobytes) and its
    brackets swapped for the separators of the whole."""
    names = table.names
    sep = b"["
    for batch in batches:
        if batch:
            body = orjson.dumps([dict(zip(names, row)) for row in batch])
            yield sep + body[1:-1]
            sep = b",\n"
    yield b"[]\n" if sep == b"[" else b"]\n"


class _Sink:
    """Where ParquetWriter writes: holds the bytes written since the last `take()`."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.pos = 0
        self.closed = False

    def write(self, b) -> int:
        self.parts.append(bytes(b))
        self.pos += len(b)
        return len(b)

    def tell(self) -> int:  # Parquet's footer records each column chunk's offset
        return self.pos

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


def _parquet(table: Table, batches: Iterable[list[Row]]) -> Iterator[bytes]:
    """One row group per batch, its bytes sent as soon as they are written; the footer (the
    schema and where each row group is) last. An export without rows is a file with the
    schema and no row group."""
    schema = table.schema
    sink = _Sink()
    writer = pq.ParquetWriter(sink, schema, compression="zstd")
    try:
        for batch in batches:
            if not batch:
                continue
            cols = list(zip(*batch))
            writer.write_batch(pa.record_batch([pa.array(c, type=f.type) for c, f in zip(cols, schema)],
                                               schema=schema))
            yield sink.take()
    finally:
        writer.close()  # on an abandoned download too: frees the writer's buffers
    yield sink.take()


ENCODERS = {"csv": _csv, "parquet": _parquet, "json": _json_array}


def stream(store: Store, team_id: int, table: str, fmt: str, batch_rows: int | None = None) -> Iterator[bytes]:
    """The export of `table` for team `team_id` in `fmt`, as byte chunks. The first batch is
    read here, before anything is sent, so a database that cannot answer fails the request
    (503) instead of cutting a download short after a 200; the rest is read as the chunks are
    taken, a batch per chunk, with no session held in between."""
    t = TABLES[table]
    batches = t.read(store, team_id, batch_rows or BATCH_ROWS)
    first = next(batches, None)
    return ENCODERS[fmt](t, itertools.chain([first], batches) if first is not None else iter(()))
