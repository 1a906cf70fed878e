"""Review through HTTP: the JSON twins as each role gets them (pseudonyms, the blind rule,
`?at=`), the team's rule set by its admin, candidates side by side, and bad input's
one-line 4xx. Who may call each route at all is tests/test_authz.py's table."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.accounts import service
from app.config import get_settings
from app.db.base import store_for
from app.identity import _signer
from tests.calibration import READS
from tests.conftest import sqlite_app

PW = "correct horse battery"
CARD = {"criteria": {c: 3 for c in ("discipline_order", "findings", "trap", "root_cause", "measurement", "fix_win")},
        "recommendation": 3, "notes": "steady"}


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    app = sqlite_app(tmp_path_factory, "review")
    store = store_for(get_settings().database_url)
    who = {"iv": "interviewer", "rv": "reviewer", "ad": "admin"}
    for name, role in who.items():
        service.add_user(store, f"{name}@a.org", PW, role, "a")
    clients = {}
    for name in who:
        c = TestClient(app, follow_redirects=False)
        assert c.post("/login", json={"email": f"{name}@a.org", "password": PW}).status_code == 200
        clients[name] = c
    iv, cand = clients["iv"], TestClient(app)
    made = iv.post("/api/rounds", json={"scenario": "ddp", "seed": "canonical", "candidate_name": "Quenby Ardwell"}).json()
    cand.get(made["candidate_url"])
    token = made["candidate_url"].removeprefix("/r/")
    assert cand.put(f"/api/r/{token}/narration", json={"narration": READS["ddp"]["strong"][0]}).status_code == 200
    assert iv.post(f"/api/rounds/{made['id']}/end").status_code == 200
    assert iv.put(f"/api/rounds/{made['id']}/scorecard", json=CARD).status_code == 200
    yield clients, made["id"]
    get_settings.cache_clear()
    _signer.cache_clear()


def test_a_reviewer_sees_the_pseudonym_everywhere(web):
    clients, rid = web
    rv, iv = clients["rv"], clients["iv"]
    for url in (f"/rounds/{rid}/review.json", "/rounds.json", "/candidates.json", f"/rounds/{rid}/review", "/rounds",
                "/candidates"):
        r = rv.get(url)
        assert r.status_code == 200 and "Quenby" not in r.text, url
    code = rv.get(f"/rounds/{rid}/review.json").json()["candidate"]["code"]
    assert "Quenby" not in rv.get(f"/candidates/{code}.json").text
    assert iv.get(f"/candidates/{code}.json").json()["candidate"]["name"] == "Quenby Ardwell"
    assert [r["candidate"] for r in iv.get("/rounds.json").json()["rounds"]] == ["Quenby Ardwell"]
    listed = rv.get("/rounds.json").json()["rounds"][0]
    assert listed["console_url"] is None and listed["review_url"] == f"/rounds/{rid}/review"


def test_review_json_follows_the_blind_rule_and_replays(web):
    clients, rid = web
    rv = clients["rv"]
    before = rv.get(f"/rounds/{rid}/review.json").json()
    assert before["scorecards"]["hidden"] == 1 and before["auto_score"] is None and "steady" not in str(before)
    assert before["axis"]["duration_ms"] >= 0 and len(before["axis"]["offsets_ms"]) == len(before["events"])
    narrated = next(e for e in before["events"] if e["kind"] == "narration")
    at = rv.get(f"/rounds/{rid}/review.json", params={"at": narrated["at"]}).json()["state_at"]
    assert at["narration"] == READS["ddp"]["strong"][0] and at["last_event_id"] == narrated["id"]
    bad = rv.get(f"/rounds/{rid}/review.json", params={"at": "yesterday"})
    assert bad.status_code == 400 and bad.json()["error"].startswith("at:")
    assert rv.put(f"/api/rounds/{rid}/scorecard", json={**CARD, "notes": "mine"}).status_code == 200
    after = rv.get(f"/rounds/{rid}/review.json").json()
    assert [c["by"] for c in after["scorecards"]["others"]] == ["iv@a.org"] and after["auto_score"]["total"] > 80
    fragment = rv.put(f"/api/rounds/{rid}/scorecard?part=review", data={**{f"criterion_{k}": v for k, v in
                                                                           CARD["criteria"].items()},
                                                                        "recommendation": 2},
                      headers={"HX-Request": "true"})
    assert fragment.status_code == 200 and "who-said" in fragment.text and "iv@a.org" in fragment.text


def test_the_admin_sets_the_teams_rule(web):
    clients, rid = web
    for name in ("iv", "rv"):
        r = clients[name].put("/api/teams/a/scorecard-visibility", json={"rule": "always"})
        assert r.status_code == 403, name
    bad = clients["ad"].put("/api/teams/a/scorecard-visibility", json={"rule": "sometimes"})
    assert bad.status_code == 400 and "never, always, after_own" in bad.json()["error"]
    assert clients["ad"].put("/api/teams/a/scorecard-visibility", json={"rule": "never"}).json() == {
        "team": "a", "scorecard_visibility": "never"}
    assert clients["ad"].get("/teams/a.json").json()["team"]["scorecard_visibility"] == "never"
    assert clients["ad"].get(f"/rounds/{rid}/review.json").json()["scorecards"]["others"] == []
    assert clients["ad"].put("/api/teams/a/scorecard-visibility", json={"rule": "after_own"}).status_code == 200


def test_anchors_gold_and_compare_through_http(web):
    clients, rid = web
    rv, iv = clients["rv"], clients["iv"]
    assert rv.put(f"/api/rounds/{rid}/anchors/findings", json={"level": 4, "note": "all the numbers"}).status_code == 200
    assert rv.put(f"/api/rounds/{rid}/anchors/charm", json={"level": 4}).status_code == 400
    assert rv.put(f"/api/rounds/{rid}/anchors/findings", json={"level": 9}).status_code == 422
    console = iv.get(f"/rounds/{rid}.json").json()
    level4 = next(c for c in console["rubric"] if c["id"] == "findings")["levels"][3]
    assert level4["anchors"][0]["note"] == "all the numbers"  # the console's rubric shows the anchor
    assert "all the numbers" in iv.get(f"/rounds/{rid}").text
    assert rv.post(f"/api/rounds/{rid}/gold", json={"gold": True}).json()["gold"] is True
    compared = rv.get("/compare.json", params={"scenario": "ddp"}).json()
    assert [r["round"] for r in compared["rounds"]] == [rid] and compared["rounds"][0]["gold"]
    assert rv.get("/compare.json").status_code == 400
    assert rv.get("/compare.json", params={"scenario": "nope"}).status_code == 404
    assert rv.get("/compare.json", params={"question": 987654}).status_code == 404
    assert rv.get("/compare.json", params={"question": 10**30}).status_code == 422  # not a 503 from the database
    assert iv.get("/compare.json", params={"scenario": "ddp"}).status_code == 403


def test_a_cross_site_page_cannot_write_review_data(web):
    """The review's writes (gold, anchors, a reviewer's scorecard, the team's rule) refused
    when a browser says another site sent them; nothing changes."""
    clients, rid = web
    rv, ad = clients["rv"], clients["ad"]
    before = rv.get(f"/rounds/{rid}/review.json").json()
    evil = {"origin": "https://evil.example", "sec-fetch-site": "cross-site"}
    for method, url, body in (("POST", f"/api/rounds/{rid}/gold", {"gold": False}),
                              ("PUT", f"/api/rounds/{rid}/anchors/trap", {"level": 1}),
                              ("DELETE", f"/api/rounds/{rid}/anchors/findings", None),
                              ("PUT", f"/api/rounds/{rid}/scorecard", CARD)):
        r = rv.request(method, url, json=body, headers=evil)
        assert r.status_code == 403 and "cross-site" in r.json()["error"], (method, url, r.text)
    assert ad.put("/api/teams/a/scorecard-visibility", json={"rule": "always"}, headers=evil).status_code == 403
    after = rv.get(f"/rounds/{rid}/review.json").json()
    assert after["round"]["gold"] == before["round"]["gold"] and after["anchors"] == before["anchors"]
    assert after["scorecards"]["rule"] == before["scorecards"]["rule"]
