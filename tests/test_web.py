"""The home page, its JSON twin and the instance downloads, through a real ASGI client."""

from __future__ import annotations

import gzip
import json

import pytest
from fastapi.testclient import TestClient

import scenarios
from app.web.main import create_app


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    import os

    os.environ["DATABASE_URL"] = f"sqlite:///{tmp_path_factory.mktemp('db') / 'test.db'}"
    from app.config import get_settings

    get_settings.cache_clear()
    with TestClient(create_app()) as c:
        yield c


def test_home_lists_every_scenario_with_brief_and_links(client):
    page = client.get("/")
    assert page.status_code == 200
    twin = client.get("/index.json").json()
    assert [s["id"] for s in twin["scenarios"]] == list(scenarios.REGISTRY)
    for s in twin["scenarios"]:
        assert s["brief"] in page.text.replace("&#39;", "'").replace("&amp;", "&")
        assert s["trace_url"] in page.text and s["key_url"] in page.text


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_download_trace_and_key(client, sid):
    r = client.get(f"/scenarios/{sid}/3/trace.json")
    assert r.status_code == 200 and "attachment" in r.headers["content-disposition"]
    doc = json.loads(r.content)
    assert doc["traceEvents"]
    key = client.get(f"/scenarios/{sid}/3/key.json").json()
    assert key["scenario"] == sid and key["seed"] == 3
    gz = client.get(f"/scenarios/{sid}/3/trace.json.gz")
    assert gzip.decompress(gz.content) == r.content


def test_seed_form_redirects_to_the_instance(client):
    r = client.get("/scenarios/ddp/download?seed=5", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/scenarios/ddp/5/trace.json"


def test_query_string_overrides_params(client):
    key = client.get("/scenarios/ddp/1/key.json?steps=5&gpu=A100").json()
    assert key["params"]["steps"] == 5 and key["params"]["gpu"] == "A100"


@pytest.mark.parametrize("url,status,needle", [
    ("/scenarios/nope/1/key.json", 404, "valid scenarios: ddp"),
    ("/scenarios/ddp/-4/key.json", 400, "non-negative integer"),
    ("/scenarios/ddp/abc/trace.json", 400, "non-negative integer"),
    ("/scenarios/ddp/1/key.json?steps=1", 400, "steps"),
    ("/scenarios/ddp/1/key.json?warp=9", 400, "unknown param 'warp'"),
    ("/scenarios/ddp/1/trace.json?rank=9", 400, "valid ranks"),
])
def test_bad_requests_get_a_clear_error(client, url, status, needle):
    r = client.get(url)
    assert r.status_code == status
    assert needle in r.json()["error"]
