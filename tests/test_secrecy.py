"""A practice round never tells the candidate its instance: every route a candidate can
reach during a round is walked, and no key field, model answer, seed or (in a surprise
round) the pathology's name appears in any of them, page, JSON, timeline or download."""

from __future__ import annotations

import gzip
import json

import pytest
from fastapi.testclient import TestClient

import scenarios
from tests.conftest import sqlite_app


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with TestClient(sqlite_app(tmp_path_factory, "secrecy")) as c:
        yield c


def _secrets(a: dict) -> tuple[list[str], list[str]]:
    """(texts that must never appear, names that must not appear in a surprise round)."""
    from app.db.base import store_for
    from app.config import get_settings
    from app.db.models import Attempt
    from sqlalchemy import select

    with store_for(get_settings().database_url).read() as db:
        row = db.scalar(select(Attempt).where(Attempt.public_id == a["id"]))
    key = scenarios.get(row.scenario).instance(int(row.seed)).key
    texts = [key["model_answer"], key["root_cause"], key["fix"], key["confirmation"], row.seed,
             *[t["claim"] for t in key["traps"]], *[t["why_wrong"] for t in key["traps"]],
             "key.json", "/scenarios/", "model_answer", '"seed":']
    scn = scenarios.get(row.scenario)
    return texts, [scn.title, f'"{scn.id}"', f"/{scn.id}/"]


def _walk(client, a: dict) -> dict[str, str]:
    """Every response a candidate can get during the round, by URL, as text."""
    aid = a["id"]
    seen: dict[str, str] = {}

    def get(url):
        r = client.get(url)
        assert r.status_code in (200, 400), (url, r.status_code, r.text[:200])
        body = r.content
        if body[:2] == b"\x1f\x8b":
            body = gzip.decompress(body)
        seen[url] = body.decode("utf-8", errors="replace")
        return r

    page = get(f"/practice/{aid}")
    assert page.status_code == 200
    twin = get(f"/practice/{aid}.json").json()
    get("/practice")
    get("/practice.json")
    get("/attempts")
    get("/attempts.json")
    get("/api/attempts")
    get(f"/api/attempts/{aid}")
    get(twin["timeline_url"])
    for r in range(twin["ranks"]):
        get(f"/practice/{aid}/timeline.bin?rank={r}")
        get(f"/practice/{aid}/trace.json?rank={r}")
        get(f"/practice/{aid}/trace.json.gz?rank={r}")
    for src in (0, 1, 50):
        get(twin["slice_url"].replace("{src}", str(src)))
    for t in twin["tools"]:
        get(t["url"])
    get(f"/practice/{aid}/tools/ncu?kernel=gemm")
    seen["PUT narration"] = client.put(f"/api/attempts/{aid}/narration", json={"narration": "the step is"}).text
    seen["PUT marks"] = client.put(f"/api/attempts/{aid}/marks", json={"step": {"start_us": 1, "end_us": 2}}).text
    seen["POST runs"] = client.post(f"/api/attempts/{aid}/runs", json={"tool": "nsys-kern-sum"}).text
    report = client.get(f"/practice/{aid}/report.json")
    assert report.status_code == 409
    seen["report.json"] = report.text
    return seen


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_a_chosen_round_never_shows_its_seed_or_key(client, sid):
    r = client.post("/practice", data={"scenario": sid}, follow_redirects=False)
    assert r.status_code == 303
    a = {"id": r.headers["location"].rsplit("/", 1)[1]}
    never, _ = _secrets(a)
    for url, body in _walk(client, a).items():
        for secret in never:
            assert secret not in body, f"{url} shows {secret[:60]!r}"


def test_a_surprise_round_hides_the_pathology_too(client):
    client = TestClient(client.app)  # a browser of its own: /attempts lists only these rounds
    for _ in range(4):
        r = client.post("/practice", data={"scenario": "surprise"}, follow_redirects=False)
        a = {"id": r.headers["location"].rsplit("/", 1)[1]}
        never, names = _secrets(a)
        for url, body in _walk(client, a).items():
            for secret in never:
                assert secret not in body, f"{url} shows {secret[:60]!r}"
            if url in ("/practice", "/practice.json"):
                continue  # the picker lists every pathology, as a menu
            if url.endswith((".bin", ".gz")) or "trace.json" in url or "/tools/" in url or "/slices/" in url:
                continue  # the trace itself is the evidence the candidate reads
            for name in names:
                assert name not in body, f"{url} names the pathology: {name!r}"
    # the home page's Surprise me is the same round
    assert 'name="scenario" value="surprise"' in client.get("/").text


def test_the_report_shows_the_seed_and_the_explorer_after_submission(client):
    r = client.post("/api/attempts", json={"scenario": "surprise"})
    a = r.json()
    assert "seed" not in a and "scenario" not in a and a["surprise"]
    client.put(f"/api/attempts/{a['id']}/narration", json={"narration": "Step is 600 ms; NCCL is not the cause."})
    report = client.post(f"/api/attempts/{a['id']}/submit").json()
    after = client.get(f"/api/attempts/{a['id']}").json()
    assert after["seed"] and after["scenario"] in scenarios.REGISTRY and report["model_answer"]
    assert after["explorer_url"] == f"/scenarios/{after['scenario']}/{after['seed']}"
    assert client.get(after["explorer_url"] + ".json").status_code == 200


def test_secret_seeds_come_from_a_space_nobody_can_search(client):
    from app.instances import MAX_SEED

    seeds = set()
    for _ in range(6):
        a = client.post("/api/attempts", json={"scenario": "ddp"}).json()
        client.put(f"/api/attempts/{a['id']}/narration", json={"narration": "Step is 620 ms."})
        seeds.add(int(client.post(f"/api/attempts/{a['id']}/submit").json() and
                      client.get(f"/api/attempts/{a['id']}").json()["seed"]))
    assert len(seeds) == 6 and max(seeds) > 2**40 and max(seeds) <= MAX_SEED


def test_the_trace_name_says_nothing_of_the_instance(client):
    a = client.post("/api/attempts", json={"scenario": "prefill"}).json()
    doc = json.loads(client.get(f"/practice/{a['id']}/trace.json").content)
    assert doc["traceName"].endswith(".pt.trace.json") and "prefill" not in doc["traceName"]
    assert "tracedojo" not in json.dumps({k: v for k, v in doc.items() if k != "traceEvents"})


def test_only_the_owner_reaches_a_rounds_instance(client):
    a = client.post("/api/attempts", json={"scenario": "ddp"}).json()
    with TestClient(client.app) as stranger:
        for path in ("", ".json", "/timeline.bin", "/trace.json", "/tools/ncu", "/slices/1"):
            assert stranger.get(f"/practice/{a['id']}{path}").status_code == 404, path
