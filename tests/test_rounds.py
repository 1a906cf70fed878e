"""Live rounds in the domain (app/rounds/live.py), on SQLite and PostgreSQL: a whole round,
the event log's order under concurrent writers, what a lock and an end refuse, the hint
ladder, scorecards and the automatic score's timing, the narration as edits."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings, strategies as st

import scenarios
from app.accounts import AccessDenied, Staff
from app.db.base import store_for, upgrade_to_head
from app.db.staff import Membership, Team, User
from app.rounds import live, questions
from tests.calibration import READS


def staff_in(store, email: str, role: str, team: str = "gpu") -> Staff:
    """A user with a role in a team, made directly in the tables (accounts are tested in
    tests/test_accounts.py)."""
    with store.write() as db:
        t = db.query(Team).filter_by(slug=team).one_or_none()
        if t is None:
            t = Team(slug=team, name=team)
            db.add(t)
            db.flush()
        u = User(email=email, password_hash="x")
        db.add(u)
        db.flush()
        db.add(Membership(user_id=u.id, team_id=t.id, role=role))
        return Staff(user_id=u.id, email=email, roles={t.id: role}, teams={t.id: team})


@pytest.fixture
def store(database_url):
    upgrade_to_head(database_url)
    return store_for(database_url)


@pytest.fixture
def people(store):
    return {"iv": staff_in(store, "iv@x.org", "interviewer"), "rv": staff_in(store, "rv@x.org", "reviewer"),
            "other": staff_in(store, "iv@y.org", "interviewer", "other-team")}


@given(st.text(max_size=40), st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_a_narration_is_one_edit_of_the_last(old, new):
    d = live.splice(old, new)
    assert live.apply_splice(old, d) == new and d["len"] == len(new)
    assert d["del"] + len(d["ins"]) <= len(old) + len(new)


def test_a_whole_round(store, people):
    iv = people["iv"]
    r, token = live.create(store, iv, scenario="ddp", seed="canonical", candidate_name="Ada")
    assert live.by_token(store, token).id == r.id and len(token) >= 40 and r.token_hash != token
    live.opened(store, token, "test")
    text = READS["ddp"]["strong"][0]
    for cut in (40, 120, len(text)):
        live.save_narration(store, token, text[:cut])
    live.set_marks(store, token, {"step": {"start_us": 1.0, "end_us": 2.0}})
    live.add_run(store, token, "nsys-kern-sum", {"bogus": "dropped"}, 12.0)
    live.candidate_event(store, token, "viewport", {"start_ns": 0, "end_ns": 5e8})
    live.candidate_event(store, token, "integrity", {"what": "paste", "chars": 120})
    live.reveal_hint(store, iv, r.public_id, 0)
    assert live.reveal_hint(store, iv, r.public_id, 0)["already"]
    live.add_note(store, iv, r.public_id, "went to the gap first")
    live.set_phase(store, iv, r.public_id, "next")
    log = live.events(store, r.id)
    ids = [e["id"] for e in log]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert [e["kind"] for e in log] == ["created", "opened", "narration", "narration", "narration", "marks", "run",
                                        "viewport", "integrity", "hint", "note", "phase"]
    replayed = ""
    for e in log:
        if e["kind"] == "narration":
            replayed = live.apply_splice(replayed, e["data"])
    assert replayed == text
    assert log[6]["data"]["options"] == {}

    view = live.candidate_view(store, live.by_token(store, token))
    assert view["hints"][0]["index"] == 0 and view["timer"]["phase"] == "brief"
    key = live.instance_of(r).key
    assert key["model_answer"] not in str(view) and r.seed not in str(view) and "ddp" not in str(view)

    console = live.console_view(store, iv, live.for_staff(store, iv, r.public_id))
    assert console["state"]["narration"] == text and console["auto_score"] is None
    assert [n["data"]["text"] for n in console["notes"]] == ["went to the gap first"]

    with pytest.raises(live.RoundClosed, match="end it first"):
        live.put_scorecard(store, iv, r.public_id, {c: 3 for c in live.CRITERIA}, 3)
    live.end(store, iv, r.public_id)
    with pytest.raises(live.RoundClosed, match="ended"):
        live.save_narration(store, token, text + " more")
    with pytest.raises(live.RoundClosed):
        live.candidate_event(store, token, "viewport", {"start_ns": 0, "end_ns": 1})
    hidden = live.console_view(store, iv, live.for_staff(store, iv, r.public_id))
    assert hidden["auto_score"] is None and hidden["auto_score_hidden"]
    live.put_scorecard(store, iv, r.public_id, {c: 3 for c in live.CRITERIA}, 4, "solid")
    shown = live.console_view(store, iv, live.for_staff(store, iv, r.public_id))
    assert shown["auto_score"]["total"] >= 60 and shown["scorecard"]["recommendation"] == 4
    assert "model_answer" not in str(live.candidate_view(store, live.by_token(store, token)))


def test_who_may_do_what(store, people):
    r, token = live.create(store, people["iv"], scenario="straggler", seed="secret")
    with pytest.raises(live.NoRound):
        live.for_staff(store, people["other"], r.public_id)
    with pytest.raises(AccessDenied):
        live.for_staff(store, people["rv"], r.public_id, live.RUNNERS)
    with pytest.raises(AccessDenied):
        live.create(store, people["rv"], scenario="ddp")
    with pytest.raises(live.NoRound):
        live.reveal_hint(store, people["other"], r.public_id, 0)
    with pytest.raises(live.NoRound):
        live.by_token(store, token[:-2] + "xx")


def test_a_lock_stops_the_read_not_the_looking(store, people):
    iv = people["iv"]
    r, token = live.create(store, iv, scenario="prefill", seed="3")
    live.save_narration(store, token, "p99 ITL")
    live.set_lock(store, iv, r.public_id, True)
    with pytest.raises(live.RoundClosed, match="locked"):
        live.save_narration(store, token, "p99 ITL is 500 ms")
    with pytest.raises(live.RoundClosed, match="locked"):
        live.set_marks(store, token, {"gap": {"start_us": 1, "end_us": 2}})
    live.candidate_event(store, token, "selection", {"row": 12, "name": "x"})
    live.add_run(store, token, "itl-scatter", {}, 3.0)
    live.set_lock(store, iv, r.public_id, False)
    live.save_narration(store, token, "p99 ITL is 500 ms")
    live.submit(store, token)
    with pytest.raises(live.RoundClosed, match="locked"):
        live.save_narration(store, token, "changed my mind")


def test_a_round_with_no_narration_still_ends(store, people):
    """A candidate who never showed up: the round ends, with no automatic score and why
    (ending once answered 400 "the narration is empty")."""
    r, _ = live.create(store, people["iv"], scenario="ddp", seed="secret")
    live.end(store, people["iv"], r.public_id)
    live.put_scorecard(store, people["iv"], r.public_id, {c: 1 for c in live.CRITERIA}, 1)
    view = live.console_view(store, people["iv"], live.for_staff(store, people["iv"], r.public_id))
    assert view["auto_score"]["total"] is None and "empty" in view["auto_score"]["skipped"]


def test_a_new_link_retires_the_old(store, people):
    r, token = live.create(store, people["iv"], scenario="ddp", seed="canonical")
    fresh = live.new_link(store, people["iv"], r.public_id)
    with pytest.raises(live.NoRound):
        live.by_token(store, token)
    assert live.by_token(store, fresh).id == r.id


def test_an_expired_link_is_410(store, people):
    r, token = live.create(store, people["iv"], scenario="ddp", seed="canonical", link_hours=-1)
    with pytest.raises(live.LinkExpired):
        live.by_token(store, token)
    with pytest.raises(live.LinkExpired):
        live.save_narration(store, token, "x")


def test_concurrent_writers_to_one_round_keep_the_log_in_order(store, people):
    """Candidate and interviewer writing at once: every event lands, ids grow, and the
    narration replayed from its edits is the stored text."""
    iv = people["iv"]
    r, token = live.create(store, iv, scenario="ddp", seed="canonical")
    errors = []

    def candidate():
        try:
            for i in range(40):
                live.save_narration(store, token, "word " * (i + 1))
                live.candidate_event(store, token, "viewport", {"start_ns": i, "end_ns": i + 1})
        except Exception as e:  # pragma: no cover - the assertion below names it
            errors.append(e)

    def interviewer():
        try:
            for i in range(20):
                live.add_note(store, iv, r.public_id, f"note {i}")
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=candidate), threading.Thread(target=interviewer)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    log = live.events(store, r.id, limit=10_000)
    assert len(log) == 1 + 40 + 40 + 20
    text = ""
    for e in log:
        if e["kind"] == "narration":
            text = live.apply_splice(text, e["data"])
    assert text == "word " * 40
    # a reader that resumes from any id gets exactly the rest
    mid = log[50]["id"]
    assert [e["id"] for e in live.events(store, r.id, after=mid, limit=10_000)] == [e["id"] for e in log[51:]]


def test_the_question_bank_starts_with_every_case_and_makes_rounds(store, people):
    iv = people["iv"]
    team = next(iter(iv.roles))
    qs = questions.for_team(store, iv, team)
    assert sorted(q.scenario for q in qs) == sorted(scenarios.REGISTRY)
    assert len(questions.for_team(store, iv, team)) == len(scenarios.REGISTRY)  # seeded once
    ddp_q = next(q for q in qs if q.scenario == "ddp")  # shelved as the practice bank shelves it
    assert ddp_q.difficulty == scenarios.get("ddp").difficulty and "Communication exposed" in ddp_q.tags
    q = questions.create(store, iv, team, title="Straggler on A100", scenario="straggler", instance="seed", seed="11",
                         params={"gpu": "A100"}, time_plan=[{"phase": "reading", "minutes": 20}], tags=["multi-node"],
                         difficulty="hard")
    r, _ = live.create(store, iv, question_id=q.id)
    assert (r.scenario, r.seed, r.seed_kind, r.params) == ("straggler", "11", "seed", {"gpu": "A100"})
    assert r.time_plan == [{"phase": "reading", "minutes": 20}]
    secret = next(x for x in qs if x.scenario == "ddp")
    assert {x.instance for x in qs} == {"secret"}  # the canonical key is open in the explorer
    a, _ = live.create(store, iv, question_id=secret.id)
    b, _ = live.create(store, iv, question_id=secret.id)
    assert a.seed != b.seed and a.seed_kind == "secret"
    with pytest.raises(questions.QuestionError, match="phases once each"):
        questions.create(store, iv, team, title="x", scenario="ddp", time_plan=[
            {"phase": "reading", "minutes": 5}, {"phase": "brief", "minutes": 5}])
    with pytest.raises(AccessDenied):
        questions.create(store, people["rv"], next(iter(people["rv"].roles)), title="x", scenario="ddp")
    with pytest.raises(questions.NoQuestion):
        live.create(store, people["other"], question_id=q.id)


def test_tracedojo_demo_makes_a_team_to_try(tmp_path):
    """`tracedojo demo --team T` (contract 7): three accounts, the bank, one round whose
    candidate link opens it; run again, it keeps the accounts' passwords."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'd.db'}", "TRACEDOJO_DATA_DIR": str(tmp_path)}
    env.pop("TRACEDOJO_PASSWORD", None)
    run = lambda *a: subprocess.run([sys.executable, "-m", "app", "demo", *a], env=env, capture_output=True, text=True,
                                    timeout=120)
    first = run("--team", "acme", "--url", "http://example.test:9000", "--no-data")  # demo data: test_review_demo.py
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert set(out["accounts"]) == {"admin", "interviewer", "reviewer"}
    assert out["candidate_url"].startswith("http://example.test:9000/r/")
    store = store_for(env["DATABASE_URL"])
    r = live.by_token(store, out["candidate_url"].rsplit("/", 1)[1])
    assert r.public_id == out["console_url"].rsplit("/", 1)[1]
    again = json.loads(run("--team", "acme").stdout)
    assert again["accounts"]["admin"]["password"].startswith("unchanged")
    bad = run("--team", "No Such Team!")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_a_case_registered_after_a_team_was_seeded_joins_its_bank(store, people, monkeypatch):
    """A team seeded when the registry held fewer cases gains the newcomer on its next read,
    once, beside the questions it has."""
    iv = people["iv"]
    team = next(iter(iv.roles))
    newcomer = dict(scenarios.REGISTRY)
    last = list(newcomer)[-1]
    del newcomer[last]
    monkeypatch.setattr(scenarios, "REGISTRY", newcomer)
    assert last not in {q.scenario for q in questions.for_team(store, iv, team)}
    monkeypatch.undo()
    assert sorted(q.scenario for q in questions.for_team(store, iv, team)) == sorted(scenarios.REGISTRY)
    assert len(questions.for_team(store, iv, team)) == len(scenarios.REGISTRY)
