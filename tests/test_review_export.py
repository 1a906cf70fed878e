"""Exports (app/review/export.py, GET /api/export/{table}.{fmt}): every table in every format,
through the app, read back by DuckDB and compared with the database; nothing of another
team; an empty team's files still name their columns; a large log streams in many chunks
in bounded memory, its reads off the event loop and no session held between chunks; and
only the team's admins get any of it."""

from __future__ import annotations

import asyncio
import json
import threading
import tracemalloc
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta, timezone

import duckdb
import orjson
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, insert, select, update

from app.accounts import service
from app.config import get_settings
from app.db.base import Store, store_for
from app.db.staff import Candidate, Membership, Round, RoundEvent, Scorecard, User
from app.identity import _signer
from app.review import export, levels
from app.rounds import live, wakeup
from tests.calibration import READS
from tests.conftest import sqlite_app

PW = "correct horse battery"
TABLES = tuple(export.TABLES)
FORMATS = export.FORMATS
MEDIA = {"csv": "text/csv; charset=utf-8", "parquet": "application/vnd.apache.parquet", "json": "application/json"}
# What a spreadsheet and a parser must survive in a text cell.
AWKWARD = 'went to the gap first, then "overlap";\nsecond line, tab\there — ✓ 620 ms'
DUCK = {"str": "VARCHAR", "int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "time": "TIMESTAMP WITH TIME ZONE",
        "json": "VARCHAR"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Team A: four rounds (two ended and scored, one running, one ended without a word
    and without a candidate record), three raters, a synthetic candidate in the gold set.
    Team B: one scored round of its own. Team "empty": an admin and nothing else. One
    person is an admin of A and of "empty"."""
    app = sqlite_app(tmp_path_factory, "export")
    store = store_for(get_settings().database_url)
    add = lambda email, role, team: service.add_user(store, email, PW, role, team)  # noqa: E731
    people = {"admin": add("admin@a.org", "admin", "a"), "iv": add("iv@a.org", "interviewer", "a"),
              "rv": add("rv@a.org", "reviewer", "a"), "iv_b": add("iv@b.org", "interviewer", "b"),
              "admin_b": add("admin@b.org", "admin", "b"), "empty": add("admin@empty.org", "admin", "empty")}
    add("both@a.org", "admin", "a")
    people["both"] = add("both@a.org", "admin", "empty")
    iv, rv, admin = people["iv"], people["rv"], people["admin"]

    r1, t1 = live.create(store, iv, scenario="ddp", seed="canonical", candidate_name="Ada Lovelace")
    live.opened(store, t1, "test")
    text = READS["ddp"]["strong"][0]
    for cut in (40, 160, len(text)):
        live.save_narration(store, t1, text[:cut])
    live.candidate_event(store, t1, "viewport", {"start_ns": 0, "end_ns": 5e8})
    live.reveal_hint(store, iv, r1.public_id, 0)
    live.add_note(store, iv, r1.public_id, AWKWARD)
    live.end(store, iv, r1.public_id)
    live.put_scorecard(store, iv, r1.public_id, {c: 3 for c in live.CRITERIA}, 3, AWKWARD)
    live.put_scorecard(store, rv, r1.public_id, {c: 1 + i % 4 for i, c in enumerate(live.CRITERIA)}, 2, "")
    live.put_scorecard(store, admin, r1.public_id, {c: 4 for c in live.CRITERIA}, 4, "=SUM(A1:A9)")

    r2, t2 = live.create(store, iv, scenario="dataloader", seed=3)
    live.save_narration(store, t2, READS["dataloader"]["vague"][0])
    live.end(store, admin, r2.public_id)
    live.put_scorecard(store, rv, r2.public_id, {c: 2 for c in live.CRITERIA}, 1, "no numbers at all")
    r3, t3 = live.create(store, admin, scenario="straggler", seed="secret")  # still running
    live.save_narration(store, t3, "The step is")
    r4, _ = live.create(store, iv, scenario="prefill", seed="canonical")  # a no-show: ended, nothing said
    live.end(store, iv, r4.public_id)
    with store.write() as db:
        team_a = db.scalar(select(Round.team_id).where(Round.id == r2.id))
        # r2's candidate as `tracedojo demo` makes them, and r2 in the gold set
        db.execute(update(Candidate).where(Candidate.id == r2.candidate_id).values(name="Grace Hopper", synthetic=True))
        db.execute(update(Round).where(Round.id == r2.id).values(gold=True))
        # r4 from before every round had a candidate record (migration 0005 left those without)
        db.execute(update(Round).where(Round.id == r4.id).values(candidate_id=None, candidate_name="Old Round"))
        code2 = db.scalar(select(Candidate.code).where(Candidate.id == r2.candidate_id))

    b, tb = live.create(store, people["iv_b"], scenario="ddp", seed="canonical", candidate_name="Bartholomew B")
    live.save_narration(store, tb, READS["ddp"]["trap"][0])
    live.end(store, people["iv_b"], b.public_id)
    live.put_scorecard(store, people["iv_b"], b.public_id, {c: 2 for c in live.CRITERIA}, 2, "team B's private note")

    with ExitStack() as stack:
        clients = {}
        for who, email in (("admin", "admin@a.org"), ("iv", "iv@a.org"), ("rv", "rv@a.org"), ("iv_b", "iv@b.org"),
                           ("admin_b", "admin@b.org"), ("empty", "admin@empty.org"), ("both", "both@a.org")):
            c = clients[who] = stack.enter_context(TestClient(app, follow_redirects=False))
            assert c.post("/login", json={"email": email, "password": PW}).status_code == 200
        clients["anon"] = stack.enter_context(TestClient(app, follow_redirects=False))
        clients["candidate"] = stack.enter_context(TestClient(app, follow_redirects=False))
        assert clients["candidate"].get(f"/r/{t3}.json").status_code == 200  # a browser holding a link, no account
        yield {"app": app, "store": store, "clients": clients, "people": people, "team_a": team_a,
               "a_rounds": [r.public_id for r in (r1, r2, r3, r4)], "b_round": b.public_id, "code2": code2}
    get_settings.cache_clear()
    _signer.cache_clear()


# -- what the database says each table holds (read here, independently of export.py) ---------

def _aware(t):
    return None if t is None else (t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t)


def expected(store: Store, team_id: int, table: str) -> list[tuple]:
    with store.read() as db:
        rounds = list(db.scalars(select(Round).where(Round.team_id == team_id)))
        emails = dict(db.execute(select(User.id, User.email)).all())
        pid = {r.id: r.public_id for r in rounds}
        cards = list(db.scalars(select(Scorecard).where(Scorecard.round_id.in_(list(pid)))))
        roles = dict(db.execute(select(Membership.user_id, Membership.role).where(Membership.team_id == team_id)).all())
        cands = {c.id: c for c in db.scalars(select(Candidate).where(Candidate.team_id == team_id))}
        counts = dict(db.execute(select(RoundEvent.round_id, func.count()).group_by(RoundEvent.round_id)).all())
        log = list(db.scalars(select(RoundEvent).where(RoundEvent.round_id.in_(list(pid)))))
    ended = {r.id: _aware(r.ended_at) for r in rounds}
    if table == "rounds":
        out = []
        for r in rounds:
            c = cands.get(r.candidate_id)
            out.append((r.public_id, r.question_id, r.scenario, r.version, r.seed_kind, r.seed, c and c.code,
                         (c and c.name) or r.candidate_name, bool(c and c.synthetic), r.gold, emails.get(r.created_by),
                         _aware(r.created_at), _aware(r.opened_at), _aware(r.submitted_at), _aware(r.ended_at),
                         r.auto_total, levels.auto_recommendation(r.auto_report), len(r.narration),
                         counts.get(r.id, 0)))
        return out
    if table == "scorecards":
        return [(pid[s.round_id], emails[s.user_id], roles.get(s.user_id), s.recommendation, s.notes,
                 _aware(s.submitted_at), _aware(s.updated_at),
                 (_aware(s.submitted_at) - ended[s.round_id]).total_seconds() / 60) for s in cards]
    if table == "criteria":
        out = []
        for r in rounds:
            if r.auto_report and r.auto_report.get("total") is not None:
                out += [(r.public_id, "auto", c["id"], levels.auto_levels(r.auto_report)[c["id"]], c["score"],
                         c["max"], c["evidence"], c["missed"]) for c in r.auto_report["criteria"]]
        for s in cards:
            out += [(pid[s.round_id], emails[s.user_id], c, lvl, None, None, None, None)
                    for c, lvl in s.criteria.items()]
        return out
    return [(pid[e.round_id], e.id, _aware(e.at), e.actor, e.kind, e.data) for e in log]


# -- reading an export back ---------------------------------------------------------------

@contextmanager
def duck():
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    try:
        yield con
    finally:
        con.close()


def _norm(kind: str, v):
    """A value as DuckDB hands it back, in the database's terms (JSON text parsed)."""
    if v is None:
        return None
    if kind == "json":
        return orjson.loads(v) if isinstance(v, str) else v
    if kind == "time":
        return datetime.fromisoformat(v) if isinstance(v, str) else v.astimezone(timezone.utc)
    if kind == "float":
        return float(v)
    if kind == "int":
        return int(v)
    return v


def read_back(content: bytes, table: str, fmt: str, tmp_path) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of an export, read by DuckDB: CSV with the declared types (the
    sniffer's reading checked too), Parquet as it is, JSON by read_json_auto."""
    t = export.TABLES[table]
    path = tmp_path / f"{table}.{fmt}"
    path.write_bytes(content)
    with duck() as con:
        if fmt == "csv":
            sniffed = con.sql(f"SELECT * FROM read_csv_auto('{path}')")
            sniffed_names, sniffed_n = sniffed.columns, len(sniffed.fetchall())
            cols = "{" + ", ".join(f"'{c}': '{DUCK[k]}'" for c, k in t.columns) + "}"
            rel = con.sql(f"SELECT * FROM read_csv('{path}', header=true, columns={cols})")
        elif fmt == "parquet":
            rel = con.sql(f"SELECT * FROM read_parquet('{path}')")
            assert [(c, str(ty)) for c, ty in zip(rel.columns, rel.types)] == \
                   [(c, DUCK[k]) for c, k in t.columns]
        else:
            rel = con.sql(f"SELECT * FROM read_json_auto('{path}')")
        names, rows = rel.columns, rel.fetchall()
    if fmt == "csv":  # DuckDB's sniffer finds the same header and rows as the declared types do
        assert (sniffed_names, sniffed_n) == (names, len(rows))
    kinds = [k for _, k in t.columns]
    out = []
    for row in rows:
        vals = [_norm(k, v) for k, v in zip(kinds, row)]
        if fmt == "csv":  # CSV has one empty: NULL and "" read back alike
            vals = [("" if v is None and k == "str" else v) for k, v in zip(kinds, vals)]
        out.append(tuple(vals))
    return names, out


def _key(row) -> str:
    return json.dumps(row, default=str, sort_keys=True)


def _csv_nulls(table: str, rows: list[tuple]) -> list[tuple]:
    kinds = [k for _, k in export.TABLES[table].columns]
    return [tuple("" if v is None and k == "str" else v for k, v in zip(kinds, r)) for r in rows]


def get_export(client, table: str, fmt: str, team: str | None = None):
    return client.get(f"/api/export/{table}.{fmt}", params={"team": team} if team else None)


# -- every table, every format -------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("table", TABLES)
def test_every_table_in_every_format_reads_back_as_the_database_holds_it(world, table, fmt, tmp_path):
    r = get_export(world["clients"]["admin"], table, fmt)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == MEDIA[fmt]
    assert r.headers["content-disposition"] == f'attachment; filename="tracedojo-a-{table}.{fmt}"'
    assert r.headers["cache-control"] == "no-store"
    names, got = read_back(r.content, table, fmt, tmp_path)
    assert names == export.TABLES[table].names
    kinds = [k for _, k in export.TABLES[table].columns]
    want = [tuple(_norm(k, v) for k, v in zip(kinds, row)) for row in expected(world["store"], world["team_a"], table)]
    if fmt == "csv":
        want = _csv_nulls(table, want)
    assert got and sorted(map(_key, got)) == sorted(map(_key, want))


def test_the_rows_say_what_the_rounds_were(world, tmp_path):
    """Spot checks on the fixture's own facts, so a bug shared by the export and the
    test's reading of the database cannot pass unseen."""
    a = world["clients"]["admin"]
    rounds = {row[0]: dict(zip(export.TABLES["rounds"].names, row))
              for row in read_back(get_export(a, "rounds", "parquet").content, "rounds", "parquet", tmp_path)[1]}
    r1, r2, r3, r4 = (rounds[p] for p in world["a_rounds"])
    assert r1["candidate_name"] == "Ada Lovelace" and len(r1["candidate_code"]) == 4 and not r1["synthetic"]
    assert (r2["candidate_code"], r2["candidate_name"], r2["synthetic"], r2["gold"]) == \
           (world["code2"], "Grace Hopper", True, True)
    assert (r4["candidate_code"], r4["candidate_name"], r4["synthetic"]) == (None, "Old Round", False)
    assert r1["auto_total"] >= 80 and r1["auto_recommendation"] == 4
    assert r1["narration_chars"] == len(READS["ddp"]["strong"][0])
    assert r3["ended_at"] is None and r3["auto_total"] is None and r3["seed_kind"] == "secret"
    assert r4["auto_total"] is None and r4["auto_recommendation"] is None and r4["ended_at"] is not None
    assert r1["created_by"] == "iv@a.org" and r3["created_by"] == "admin@a.org"
    assert r1["event_count"] == 1 + 1 + 3 + 1 + 1 + 1 + 1 + 3 # created, opened, 3 edits, view, hint, note, end, 3 cards
    cards = read_back(get_export(a, "scorecards", "json").content, "scorecards", "json", tmp_path)[1]
    by = {(c[0], c[1]): dict(zip(export.TABLES["scorecards"].names, c)) for c in cards}
    mine = by[(world["a_rounds"][0], "iv@a.org")]
    assert mine["notes"] == AWKWARD and mine["rater_role"] == "interviewer" and 0 <= mine["minutes_end_to_submit"] < 5
    assert by[(world["a_rounds"][0], "rv@a.org")]["rater_role"] == "reviewer"
    crit = read_back(get_export(a, "criteria", "csv").content, "criteria", "csv", tmp_path)[1]
    auto = [c for c in crit if c[1] == "auto"]
    assert {c[0] for c in auto} == {world["a_rounds"][0], world["a_rounds"][1]}  # r3 runs, r4 has no score
    assert all(1 <= c[3] <= 4 and 0 <= c[4] <= c[5] and isinstance(c[6], list) and isinstance(c[7], list) for c in auto)
    assert any(ev["text"] and ev["end"] > ev["start"] for c in auto for ev in c[6])  # evidence spans made it
    assert len([c for c in crit if c[1] != "auto"]) == 4 * len(live.CRITERIA)


def test_events_come_round_by_round_in_log_order(world, tmp_path):
    names, rows = read_back(get_export(world["clients"]["admin"], "events", "json").content, "events", "json", tmp_path)
    seen: dict[str, int] = {}
    order = []
    for pid, eid, *_ in rows:
        assert eid > seen.get(pid, 0)
        seen[pid] = eid
        if not order or order[-1] != pid:
            order.append(pid)
    assert len(order) == len(set(order)) == 4  # each round's events together
    narration = [r[5] for r in rows if r[0] == world["a_rounds"][0] and r[4] == "narration"]
    text = ""
    for d in narration:
        text = live.apply_splice(text, d)
    assert text == READS["ddp"]["strong"][0]  # the log replays from the export alone


@pytest.fixture
def fresh_store(database_url):
    from app.db.base import upgrade_to_head

    upgrade_to_head(database_url)
    return store_for(database_url)


def test_the_domain_exports_the_same_on_sqlite_and_postgresql(fresh_store, tmp_path):
    """export.stream on each backend (JSON text cast in SQL, times naive or aware, lengths
    counted by the database), small batches so every table takes several."""
    store = fresh_store
    admin = service.add_user(store, "admin@a.org", PW, "admin", "a")
    rv = service.add_user(store, "rv@a.org", PW, "reviewer", "a")
    other = service.add_user(store, "admin@b.org", PW, "admin", "b")
    for i, who in enumerate((admin, admin, other)):
        r, token = live.create(store, who, scenario="ddp", seed=i, candidate_name=f"Person {i}")
        live.save_narration(store, token, READS["ddp"]["strong"][0][:200 + 50 * i])
        live.add_note(store, who, r.public_id, AWKWARD)
        live.end(store, who, r.public_id)
        live.put_scorecard(store, who, r.public_id, {c: 1 + i for c in live.CRITERIA}, 1 + i, AWKWARD)
        if who is admin:
            live.put_scorecard(store, rv, r.public_id, {c: 4 for c in live.CRITERIA}, 4)
    tid = next(iter(admin.roles))
    for table in TABLES:
        kinds = [k for _, k in export.TABLES[table].columns]
        want = [tuple(_norm(k, v) for k, v in zip(kinds, row)) for row in expected(store, tid, table)]
        assert want, table
        for fmt in FORMATS:
            names, got = read_back(b"".join(export.stream(store, tid, table, fmt, batch_rows=3)), table, fmt, tmp_path)
            assert sorted(map(_key, got)) == sorted(map(_key, _csv_nulls(table, want) if fmt == "csv" else want)), \
                (table, fmt)


# -- teams: A's file holds A, and only A's admins get it --------------------------------------

def test_another_teams_rows_never_appear(world, tmp_path):
    b_marks = [world["b_round"], "iv@b.org", "Bartholomew", "team B's private note"]
    for table in TABLES:
        for fmt in FORMATS:
            r = get_export(world["clients"]["admin"], table, fmt)
            _, rows = read_back(r.content, table, fmt, tmp_path)
            assert {row[0] for row in rows} <= set(world["a_rounds"]), (table, fmt)
            if fmt != "parquet":  # compressed: its rows are checked above
                assert not [m for m in b_marks if m.encode() in r.content], (table, fmt)
            theirs = get_export(world["clients"]["admin_b"], table, fmt)
            _, rows = read_back(theirs.content, table, fmt, tmp_path)
            assert {row[0] for row in rows} == {world["b_round"]}, (table, fmt)
            assert theirs.headers["content-disposition"].endswith(f'"tracedojo-b-{table}.{fmt}"')


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("table", TABLES)
def test_an_empty_team_still_names_its_columns(world, table, fmt, tmp_path):
    r = get_export(world["clients"]["empty"], table, fmt)
    assert r.status_code == 200, r.text
    t = export.TABLES[table]
    if fmt == "csv":
        assert r.content.decode().splitlines() == [",".join(t.names)]
    elif fmt == "json":
        assert json.loads(r.content) == []
    else:
        path = tmp_path / "empty.parquet"
        path.write_bytes(r.content)
        assert pq.read_schema(path).remove_metadata() == t.schema
    if fmt != "json":  # JSON has no rows to name columns in; CSV's header and Parquet's schema do
        names, rows = read_back(r.content, table, fmt, tmp_path)
        assert names == t.names and rows == []


def test_an_admin_of_several_teams_says_which(world, tmp_path):
    both = world["clients"]["both"]
    r = get_export(both, "rounds", "csv")
    assert r.status_code == 400 and "a, empty" in r.json()["error"] and "?team=" in r.json()["error"]
    mine = get_export(both, "rounds", "csv", team="a")
    assert mine.status_code == 200 and mine.content == get_export(world["clients"]["admin"], "rounds", "csv").content
    assert get_export(both, "events", "json", team="EMPTY").json() == []
    theirs, nothing = get_export(both, "rounds", "csv", team="b"), get_export(both, "rounds", "csv", team="zz")
    assert theirs.status_code == nothing.status_code == 403
    assert theirs.json()["error"].replace("'b'", "X") == nothing.json()["error"].replace("'zz'", "X")


def test_only_the_teams_admins_export(world):
    """Signed out: 401; a candidate's browser: 401; A's interviewer and reviewer: 403 (the
    export is past the blind-scorecard rule); B's interviewer: 403; B's admin asking for A:
    403, in the words a made-up team gets."""
    c = world["clients"]
    for table in TABLES:
        for fmt in FORMATS:
            for who, want in (("anon", 401), ("candidate", 401), ("iv", 403), ("rv", 403), ("iv_b", 403)):
                r = get_export(c[who], table, fmt)
                assert r.status_code == want and list(r.json()) == ["error"], (who, table, fmt, r.text)
                assert get_export(c[who], table, fmt, team="a").status_code == want, (who, table, fmt)
            assert get_export(c["admin_b"], table, fmt, team="a").status_code == 403
    assert "admins" in get_export(c["rv"], "scorecards", "csv").json()["error"]


@pytest.mark.parametrize("path", ["users.csv", "rounds.xlsx", "rounds.csv.gz", "Rounds.csv", "events.JSON",
                                  "rounds..csv", "%3Cb%3E.csv", "x" * 300 + ".csv"])
def test_an_unknown_table_or_format_is_a_404_naming_the_valid_ones(world, path):
    r = world["clients"]["admin"].get(f"/api/export/{path}")
    assert r.status_code == 404, (path, r.status_code, r.text)
    msg = r.json()["error"]
    assert "\n" not in msg and "rounds, scorecards, criteria, events" in msg and "csv, parquet, json" in msg
    assert len(msg) < 200


def test_a_path_that_is_no_export_is_a_404(world):
    for path in ("/api/export/rounds", "/api/export/..%2Fetc.csv", "/api/export/rounds.csv/x"):
        assert world["clients"]["admin"].get(path).status_code == 404, path


# -- a long log: streamed, bounded, off the loop, holding nothing between chunks ---------------

def _big_team(store: Store, slug: str, n_events: int, payload_chars: int = 300) -> tuple[int, str]:
    """A team with one admin and two rounds holding `n_events` events between them,
    inserted in bulk (the log's own writers are tested in tests/test_rounds.py)."""
    admin = service.add_user(store, f"admin@{slug}.org", PW, "admin", slug)
    tid = next(iter(admin.roles))
    r1, _ = live.create(store, admin, scenario="ddp", seed="canonical")
    r2, _ = live.create(store, admin, scenario="ddp", seed=1)
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
    with store.write() as db:
        for start in range(0, n_events, 5000):
            db.execute(insert(RoundEvent), [
                {"round_id": (r1.id, r2.id)[i % 2], "at": t0 + timedelta(milliseconds=i), "actor": "candidate",
                 "kind": "narration", "data": {"at": i, "del": 0, "ins": f"{i:08d}" + "x" * payload_chars, "len": i}}
                for i in range(start, min(n_events, start + 5000))])
        db.execute(update(Round).where(Round.id.in_([r1.id, r2.id])).values(event_count=n_events // 2 + 1))
    return tid, slug


def asgi_get(app, path: str, cookie: str, on_chunk) -> tuple[int, dict, int]:
    """GET through the app's ASGI interface itself, as a server would: (status, headers,
    bytes), calling `on_chunk(body)` as each body message is sent (the TestClient gathers
    the whole body before handing it over, which would hide the streaming)."""
    path, _, query = path.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query.encode(),
             "root_path": "", "headers": [(b"host", b"testserver"), (b"cookie", cookie.encode())],
             "client": ("127.0.0.1", 5000), "server": ("testserver", 80)}
    out = {"status": 0, "headers": {}, "bytes": 0}

    async def receive():
        await asyncio.sleep(3600)  # the client has nothing more to say

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"], out["headers"] = message["status"], {k.decode(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body" and message.get("body"):
            out["bytes"] += len(message["body"])
            on_chunk(message["body"])

    asyncio.run(app(scope, receive, send))  # no lifespan: an export needs none of the live rounds' wake-ups
    return out["status"], out["headers"], out["bytes"]


@pytest.fixture(scope="module")
def big(world):
    """Team "big" with 20,000 events, team "small" with 2,000 of the same kind."""
    return _big_team(world["store"], "big", 20_000), _big_team(world["store"], "small", 2_000)


def _cookie(world, email: str) -> str:
    c = TestClient(world["app"])
    assert c.post("/login", json={"email": email, "password": PW}).status_code == 200
    return "; ".join(f"{k}={v}" for k, v in c.cookies.items())


def _download(world, path: str, email: str, dest, monkeypatch) -> dict:
    """One export through the ASGI app into `dest`, watched: the body messages, Python's
    peak allocation meanwhile (above what was allocated before), database reads made on
    the event loop's thread, and the export's read sessions open as each chunk went out."""
    reads_on_loop, open_at_send, chunks, open_reads = [], [], [], [0]
    real_read = Store.read

    @contextmanager
    def watched_read(self):
        if isinstance(threading.current_thread(), wakeup._Feed):  # the live rounds' log tail, not ours
            with real_read(self) as db:
                yield db
            return
        try:
            asyncio.get_running_loop()
            reads_on_loop.append(threading.current_thread().name)
        except RuntimeError:
            pass
        open_reads[0] += 1
        try:
            with real_read(self) as db:
                yield db
        finally:
            open_reads[0] -= 1

    cookie = _cookie(world, email)
    asgi_get(world["app"], path, cookie, lambda body: None)  # imports, caches, compiled statements: warm
    monkeypatch.setattr(Store, "read", watched_read)
    with open(dest, "wb") as out:
        def on_chunk(body):
            open_at_send.append(open_reads[0])
            chunks.append(len(body))
            out.write(body)

        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            status, headers, total = asgi_get(world["app"], path, cookie, on_chunk)
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
            monkeypatch.setattr(Store, "read", real_read)
    return {"status": status, "headers": headers, "bytes": total, "chunks": chunks, "peak": peak,
            "reads_on_loop": reads_on_loop, "open_at_send": open_at_send}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_long_log_streams_in_many_chunks_in_bounded_memory(world, big, fmt, monkeypatch, tmp_path):
    """20,000 events at 1,000 rows a batch: 20+ body messages, each sent before the next
    batch is read; Python's peak allocation is what 2,000 events take (it follows the
    batch, not the file) and under half the file; every database read runs in a worker
    thread, and while a chunk goes out no read session is open."""
    monkeypatch.setattr(export, "BATCH_ROWS", 1000)
    small = _download(world, f"/api/export/events.{fmt}", "admin@small.org", tmp_path / f"small.{fmt}", monkeypatch)
    got = _download(world, f"/api/export/events.{fmt}", "admin@big.org", tmp_path / f"big.{fmt}", monkeypatch)
    assert got["status"] == 200 and got["headers"]["content-type"] == MEDIA[fmt]
    assert len(got["chunks"]) >= 20, got["chunks"]
    assert not got["reads_on_loop"], f"database reads on the event loop: {got['reads_on_loop'][:3]}"
    assert set(got["open_at_send"]) == {0}, "a read session was open while a chunk went out"
    assert got["peak"] < 1.5 * small["peak"] + 500_000, (got["peak"], small["peak"])
    if fmt != "parquet":  # Parquet compresses the repeated x's to almost nothing
        assert got["bytes"] > 8_000_000 and got["peak"] < got["bytes"] / 2, (got["peak"], got["bytes"])
    _, rows = read_back((tmp_path / f"big.{fmt}").read_bytes(), "events", fmt, tmp_path)
    assert len(rows) == 20_000 + 2  # and the two rounds' "created"
    assert len({r[1] for r in rows}) == len(rows)


def test_no_connection_is_held_while_the_consumer_waits(world, big):
    """The domain's generator taken a chunk at a time by hand, on a store of its own (its
    own engine and pool, which nothing else uses): between chunks, every connection is
    back in the pool, for every table and format."""
    own = store_for(world["store"].url, 4.5)
    assert own.engine is not world["store"].engine
    tid = _team_id(own, "big")
    for table in TABLES:
        for fmt in FORMATS:
            n = 0
            for _chunk in export.stream(own, tid, table, fmt, batch_rows=500):
                assert own.engine.pool.checkedout() == 0, (table, fmt, n)
                n += 1
            assert n >= (40 if table == "events" else 1), (table, fmt, n)


def _team_id(store: Store, slug: str) -> int:
    from app.db.staff import Team

    with store.read() as db:
        return db.scalar(select(Team.id).where(Team.slug == slug))


def test_the_first_batch_is_read_before_anything_is_sent(world, monkeypatch):
    """A database that cannot answer fails the request with a 503 and its reason, not a
    200 cut short."""
    from app.db.base import StoreUnavailable

    def broken(store, team_id, n):
        raise StoreUnavailable("the database is busy (another writer holds its lock): test")
        yield  # a generator, as the tables' readers are: nothing runs until its first batch is asked for

    monkeypatch.setitem(export.TABLES, "rounds", export.Table("rounds", export.TABLES["rounds"].columns, broken))
    r = get_export(world["clients"]["admin"], "rounds", "csv")
    assert r.status_code == 503 and "busy" in r.json()["error"]
