"""Practice attempts over HTTP: create, autosave, marks, runs, submit; owned by a signed
browser identity; the key absent until submission; bad input refused with a reason."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

import scenarios
from tests.calibration import READS
from tests.conftest import sqlite_app


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    return sqlite_app(tmp_path_factory, "practice")


@pytest.fixture
def client(app):
    with TestClient(app) as c:
        yield c


def new(client, sid="ddp", seed="canonical", **params):
    r = client.post("/api/attempts", json={"scenario": sid, "seed": seed, "params": params})
    assert r.status_code == 201, r.text
    return r.json()


def test_a_whole_round(client):
    a = new(client)
    key = scenarios.get("ddp").instance("canonical").key
    assert "tracedojo_id" in client.cookies
    text = READS["ddp"]["strong"][0]
    assert client.put(f"/api/attempts/{a['id']}/narration", json={"narration": text[:100]}).json()["saves"] == 1
    assert client.put(f"/api/attempts/{a['id']}/narration", json={"narration": text}).json()["saves"] == 2
    assert client.put(f"/api/attempts/{a['id']}/narration", json={"narration": text}).json()["saves"] == 2  # unchanged
    step, gap = key["marks"]["step"], key["marks"]["gap"]
    client.put(f"/api/attempts/{a['id']}/marks", json={"step": step, "gap": {"start_us": gap["start_us"] + 5_000,
                                                                          "end_us": gap["end_us"]}})
    client.post(f"/api/attempts/{a['id']}/runs", json={"tool": "nsys-kern-sum", "since_open_s": 31.5})
    before = client.get(f"/api/attempts/{a['id']}").json()
    assert before["narration"] == text and before["runs"][0]["tool"] == "nsys-kern-sum"
    assert "report" not in before and key["model_answer"] not in str(before)
    report = client.post(f"/api/attempts/{a['id']}/submit").json()
    assert report["total"] >= 80 and report["marks"]["step"]["ok"] and report["marks"]["gap"]["ok"]
    assert report["model_answer"] == key["model_answer"]
    after = client.get(f"/api/attempts/{a['id']}").json()
    assert after["total"] == report["total"] and after["submitted_at"]
    again = client.post(f"/api/attempts/{a['id']}/submit")
    assert again.status_code == 409 and "submitted" in again.json()["error"]
    mine = client.get("/api/attempts").json()["attempts"]
    assert [m["id"] for m in mine] == [a["id"]]


def test_autosave_survives_a_new_client_with_the_same_cookie(app):
    with TestClient(app) as first:
        a = new(first, "prefill", "4")
        first.put(f"/api/attempts/{a['id']}/narration", json={"narration": "p50 ITL is 22 ms"})
        cookie = first.cookies["tracedojo_id"]
    with TestClient(app, cookies={"tracedojo_id": cookie}) as second:  # a reload, a restarted browser
        assert second.get(f"/api/attempts/{a['id']}").json()["narration"] == "p50 ITL is 22 ms"
    with TestClient(app) as stranger:
        assert stranger.get(f"/api/attempts/{a['id']}").status_code == 404
    with TestClient(app, cookies={"tracedojo_id": cookie[:-2] + "xx"}) as forged:
        assert forged.get(f"/api/attempts/{a['id']}").status_code == 404


def test_bad_input_is_refused_with_a_reason(client):
    assert client.post("/api/attempts", json={"scenario": "nope"}).status_code == 400
    assert "seed" in client.post("/api/attempts", json={"scenario": "ddp", "seed": "-3"}).json()["error"]
    assert client.post("/api/attempts", json={"scenario": "ddp", "params": {"steps": "9999"}}).status_code == 400
    a = new(client)
    big = client.put(f"/api/attempts/{a['id']}/narration", json={"narration": "x" * 200_000})
    assert big.status_code == 413 and "limit" in big.json()["error"]
    assert client.get(f"/api/attempts/{a['id']}").json()["narration"] == "", "a refused save loses nothing"
    assert client.post(f"/api/attempts/{a['id']}/runs", json={"tool": "perf-magic"}).status_code == 400
    empty = client.post(f"/api/attempts/{a['id']}/submit")
    assert empty.status_code == 400 and "empty" in empty.json()["error"]
    html = "<script>alert(1)</script> Step is 622 ms."
    client.put(f"/api/attempts/{a['id']}/narration", json={"narration": html})
    assert client.get(f"/api/attempts/{a['id']}").json()["narration"] == html  # stored as text, shown escaped


def test_migrations_from_empty_to_head(tmp_path):
    import sqlalchemy as sa

    from app.db.base import engine_for, upgrade_to_head

    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    upgrade_to_head(url)
    names = set(sa.inspect(engine_for(url)).get_table_names())
    assert {"attempts", "narration_saves", "alembic_version"} <= names
    upgrade_to_head(url)  # idempotent


def test_a_server_restart_loses_nothing(app, tmp_path):
    """Two app instances on one database file: what the first saved, the second serves."""
    from app.web.main import create_app

    with TestClient(app) as before:
        a = new(before, "skinny-gemm", "5")
        before.put(f"/api/attempts/{a['id']}/narration", json={"narration": "3% gaps, comm hidden"})
        before.put(f"/api/attempts/{a['id']}/narration", json={"narration": "3% gaps, comm hidden, 22% MFU"})
        cookie = before.cookies["tracedojo_id"]
    with TestClient(create_app(), cookies={"tracedojo_id": cookie}) as after:
        got = after.get(f"/api/attempts/{a['id']}").json()
        assert got["narration"] == "3% gaps, comm hidden, 22% MFU" and got["saves"] == 2


def test_the_unload_beacon_saves_the_last_words(client):
    a = new(client, "dataloader", "1")
    r = client.post(f"/api/attempts/{a['id']}/narration-beacon", content="Step is 509 ms".encode(),
                    headers={"Content-Type": "text/plain"})
    assert r.status_code == 204
    assert client.get(f"/api/attempts/{a['id']}").json()["narration"] == "Step is 509 ms"


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_a_round_with_both_marks_submits_on_every_scenario(client, sid):
    """Straggler and prefill keys held numpy floats: the report's "ok" became a numpy bool
    and the submit was a 500 (found by python -m bench load)."""
    a = client.post("/api/attempts", json={"scenario": sid}).json()
    gap = {"start_us": 1.0, "end_us": 2.0}
    assert client.put(f"/api/attempts/{a['id']}/marks", json={"step": gap, "gap": gap}).status_code == 200
    client.put(f"/api/attempts/{a['id']}/narration", json={"narration": "Step is 600 ms."})
    r = client.post(f"/api/attempts/{a['id']}/submit")
    assert r.status_code == 200, r.text
    assert client.get(f"/api/attempts/{a['id']}").json()["report"]["marks"]["gap"]["ok"] is False


def test_a_round_said_in_the_60_second_mode_is_scored_as_timed(client):
    a = new(client)
    long_read = " ".join([scenarios.get("ddp").instance("canonical").key["model_answer"]] * 3)
    client.put(f"/api/attempts/{a['id']}/narration", json={"narration": long_read})
    r = client.post(f"/api/attempts/{a['id']}/submit", json={"timed": True}).json()
    assert r["timed"] and r["over_time"]
    assert client.get(f"/practice/{a['id']}/report").text.count("Over time:") == 1


def test_the_report_says_when_the_scorer_could_not_decide(client):
    a = client.post("/api/attempts", json={"scenario": "dataloader"}).json()
    client.put(f"/api/attempts/{a['id']}/narration",
               json={"narration": "The step has a gap at its start. It could possibly be the host-to-device copy."})
    r = client.post(f"/api/attempts/{a['id']}/submit").json()
    assert r["needs_review"] and not r["trap_endorsed"]
    assert "For a reader to decide" in client.get(f"/practice/{a['id']}/report").text


def test_the_report_links_the_trace_after_the_fix_where_the_version_builds_one(client):
    """The expected win as a trace: launch-bound's current version builds the fixed instance."""
    a = client.post("/api/attempts", json={"scenario": "launch-bound"}).json()
    client.put(f"/api/attempts/{a['id']}/narration", json={"narration": "Step is 28 ms."})
    client.post(f"/api/attempts/{a['id']}/submit")
    link = client.get(f"/practice/{a['id']}/report.json").json()["after_fix_url"]
    assert link.startswith("/scenarios/launch-bound/") and link.endswith("fixed=1")
    page = client.get(link)
    assert page.status_code == 200 and "After the fix:" in page.text
    assert f'href="{link.replace("&", "&amp;")}"' in client.get(f"/practice/{a['id']}/report").text
    from types import SimpleNamespace

    from app.web.practice import _after_fix_url
    old = SimpleNamespace(scenario="ddp", seed="canonical", params={}, version=1)  # ddp v1 builds no fixed trace
    assert _after_fix_url(old, scenarios.get("ddp").instance("canonical", version=1)) is None


# -- the bank's shelves: family and difficulty ------------------------------------------------

def test_the_picker_filters_by_family_and_difficulty(client):
    every = client.get("/practice.json").json()
    assert [s["id"] for s in every["scenarios"]] == list(scenarios.REGISTRY) and every["of"] == len(scenarios.REGISTRY)
    assert sum(f["count"] for f in every["families"]) == len(scenarios.REGISTRY)
    fam = scenarios.get("ddp").family
    shelf = client.get(f"/practice.json?family={fam}").json()["scenarios"]
    assert "ddp" in [s["id"] for s in shelf] and all(s["family"] == fam for s in shelf)
    assert len(shelf) < len(scenarios.REGISTRY)
    hard = client.get("/practice.json?difficulty=hard").json()["scenarios"]
    assert hard and all(scenarios.get(s["id"]).difficulty == "hard" for s in hard)
    page = client.get(f"/practice?family={fam}").text
    assert 'name="family" value="%s"' % fam in page  # "Surprise me" draws from the shelf shown
    assert f"these {len(shelf)} pathologies" in page
    r = client.get("/practice.json?family=gpu-magic")
    assert r.status_code == 400 and "unknown family 'gpu-magic'" in r.json()["error"]


def test_surprise_me_draws_only_from_the_filters_shelf(client):
    fam, diff = scenarios.get("straggler").family, scenarios.get("straggler").difficulty
    shelf = {s.id for s in scenarios.shelf(fam, diff)}
    drawn = set()
    for _ in range(12):
        a = client.post("/api/attempts", json={"scenario": "surprise", "family": fam, "difficulty": diff}).json()
        report = client.get(f"/api/attempts/{a['id']}")
        assert report.status_code == 200 and a["surprise"]
        drawn.add(client.post(f"/api/attempts/{a['id']}/submit", json={"narration": "the step is 600 ms"})
                  .json()["scenario"])
    assert drawn <= shelf and "straggler" in shelf
    # an empty shelf is the asker's mistake, said as such, and nothing is created
    empty = next((f, d) for f in scenarios.FAMILIES for d in scenarios.DIFFICULTIES if not scenarios.shelf(f, d))
    r = client.post("/practice", data={"scenario": "surprise", "family": empty[0], "difficulty": empty[1]},
                    follow_redirects=False)
    assert r.status_code == 400 and "widen the filter" in r.text
