"""A candidate's note on the timeline (Shift+M) in a live round: posted to the round's
event log as a `note` event, listed on the interviewer's console among the notes, kept by
the replay; bad notes get a 4xx."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.accounts import service
from app.config import get_settings
from app.db.base import store_for
from app.identity import _signer
from app.review.replay import state_at
from tests.conftest import sqlite_app

PW = "correct horse battery"


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    app = sqlite_app(tmp_path_factory, "notes")
    store = store_for(get_settings().database_url)
    service.add_user(store, "iv@a.org", PW, "interviewer", "a")
    iv = TestClient(app, follow_redirects=False)
    assert iv.post("/login", json={"email": "iv@a.org", "password": PW}).status_code == 200
    cand = TestClient(app)
    made = iv.post("/api/rounds", json={"scenario": "ddp", "seed": "canonical", "candidate_name": "Quenby Ardwell"}).json()
    cand.get(made["candidate_url"])
    yield iv, cand, made["id"], f"/api{made['candidate_url']}"
    get_settings.cache_clear()
    _signer.cache_clear()


def test_a_candidates_note_joins_the_log_and_the_console(web):
    iv, cand, rid, api = web
    span = {"kind": "note", "text": "  the all-reduce waits here  ", "start_ns": 1.5e8, "end_ns": 1.9e8, "id": "n1"}
    assert cand.post(f"{api}/events", json=span).status_code == 201
    point = {"kind": "note", "text": "launch gap", "start_ns": 2.2e8, "end_ns": None}
    assert cand.post(f"{api}/events", json=point).status_code == 201
    notes = iv.get(f"/rounds/{rid}.json").json()["notes"]
    mine = [n for n in notes if n["actor"] == "candidate"]
    assert [n["data"]["text"] for n in mine] == ["the all-reduce waits here", "launch gap"]
    assert mine[0]["data"]["start_ns"] == 1.5e8 and mine[0]["data"]["end_ns"] == 1.9e8
    assert "end_ns" not in mine[1]["data"]
    part = iv.get(f"/rounds/{rid}/parts/notes").text
    assert "the all-reduce waits here" in part and "candidate" in part and "150.000 ms + 40.000 ms" in part
    # the review's replay keeps them, by the candidate
    log = iv.get(f"/rounds/{rid}.json").json()["events"]
    assert [n["by"] for n in state_at(log)["notes"]] == ["candidate", "candidate"]


@pytest.mark.parametrize("body", [
    {"kind": "note", "text": "   ", "start_ns": 1},
    {"kind": "note", "text": "", "start_ns": 1},
    {"kind": "note", "text": "x" * 501, "start_ns": 1},
    {"kind": "note", "text": "no place"},
    {"kind": "note", "text": "nan", "start_ns": "nan"},
], ids=["blank", "empty", "too-long", "no-start", "nan"])
def test_a_bad_note_is_refused(web, body):
    _, cand, _, api = web
    res = cand.post(f"{api}/events", json=body)
    assert res.status_code == 422, res.text


def test_a_candidates_queries_join_the_log_and_the_consoles_runs_list(web):
    """The Query tab in a live round: each query, answered or refused, is a `query` event the
    console lists among the runs (with its row count or refusal); it is not a scored run."""
    iv, cand, rid, api = web
    token = api.removeprefix("/api/r/")
    ok = cand.post(f"/r/{token}/sql", json={"query": "SELECT name, dur FROM slice ORDER BY dur DESC LIMIT 3"})
    assert ok.status_code == 200 and len(ok.json()["rows"]) == 3
    refused = cand.post(f"/r/{token}/sql", json={"query": "DELETE FROM slice"})
    assert refused.status_code == 403
    view = iv.get(f"/rounds/{rid}.json").json()
    queries = [e["data"] for e in view["events"] if e["kind"] == "query"]
    assert [q.get("rows") for q in queries] == [3, None] and queries[1]["error"] == refused.json()["error"]
    assert queries[0]["query"].startswith("SELECT name, dur") and view["queries"] == queries
    assert view["state"]["runs"] == []  # the scorer's runs are the tools'
    page = iv.get(f"/rounds/{rid}").text
    assert "SELECT name, dur FROM slice" in page  # the console's first paint lists them
