"""Requests from elsewhere, the headers every response carries, one error shape for every
route, and bad input answered with a clear 4xx (never a 500, never kilobytes echoed)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import ROOT
from tests.conftest import sqlite_app

SITE = "http://testserver"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    return sqlite_app(tmp_path_factory, "security")


@pytest.fixture
def client(app):
    with TestClient(app) as c:
        yield c


def new(client) -> str:
    return client.post("/api/attempts", json={"scenario": "ddp"}).json()["id"]


# -- requests from elsewhere ---------------------------------------------------------------

@pytest.mark.parametrize("headers", [
    {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
    {"Origin": "http://testserver:8001", "Sec-Fetch-Site": "same-site"},  # a sibling port or subdomain
    {"Origin": "https://evil.example"},  # an older browser without Fetch Metadata
    {"Origin": "null"},  # a sandboxed frame or a data: page
])
def test_a_cross_site_write_is_refused_and_the_identity_kept(client, headers):
    aid = new(client)
    cookie = client.cookies["tracedojo_id"]
    client.put(f"/api/attempts/{aid}/narration", json={"narration": "mine"})
    for method, path, kw in [
        ("post", "/practice", {"data": {"scenario": "ddp"}}),
        ("post", f"/api/attempts/{aid}/narration-beacon", {"content": b"overwritten",
                                                            "headers": {"Content-Type": "text/plain"}}),
        ("put", f"/api/attempts/{aid}/narration", {"json": {"narration": "overwritten"}}),
        ("post", f"/api/attempts/{aid}/submit", {}),
    ]:
        kw = {**kw, "headers": {**kw.get("headers", {}), **headers}}
        # a cross-site request carries no SameSite=Lax cookie: the server must not hand out a new one
        r = TestClient(client.app).request(method.upper(), path, **kw)
        assert r.status_code == 403 and "cross-site" in r.json()["error"], (path, r.status_code)
        assert "set-cookie" not in r.headers
    assert client.cookies["tracedojo_id"] == cookie
    got = client.get(f"/api/attempts/{aid}").json()
    assert got["narration"] == "mine" and not got["submitted_at"]


def test_a_cross_site_read_hands_out_no_identity(app):
    r = TestClient(app).get("/practice", headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 200 and "set-cookie" not in r.headers
    assert "set-cookie" in TestClient(app).get("/practice", headers={"Sec-Fetch-Site": "none"}).headers


def test_same_origin_browsers_and_scripts_may_write(client):
    aid = new(client)
    browser = {"Origin": SITE, "Sec-Fetch-Site": "same-origin"}
    assert client.put(f"/api/attempts/{aid}/narration", json={"narration": "a"}, headers=browser).status_code == 200
    assert client.post(f"/api/attempts/{aid}/narration-beacon", content=b"b",
                       headers={**browser, "Content-Type": "text/plain"}).status_code == 204
    assert client.put(f"/api/attempts/{aid}/narration", json={"narration": "c"}).status_code == 200  # curl


def test_cookies_are_httponly_lax_and_secure_behind_the_setting(app, monkeypatch):
    r = TestClient(app).get("/practice")
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Secure" not in cookie
    from app.web.security import SecurityMiddleware

    secure = SecurityMiddleware(app, secure_cookies=True)._cookie("v")
    assert "Secure" in secure and "HttpOnly" in secure


@pytest.mark.parametrize("path", ["/", "/practice", "/index.json", "/static/css/site.css", "/no/such/page",
                                  "/scenarios/ddp/canonical"])
def test_every_response_carries_the_security_headers(client, path):
    h = client.get(path).headers
    assert "frame-ancestors 'none'" in h["content-security-policy"]
    assert "script-src 'self'" in h["content-security-policy"] and "unsafe-inline" not in h["content-security-policy"]
    assert h["x-content-type-options"] == "nosniff" and h["referrer-policy"] == "same-origin"


def test_no_template_holds_an_inline_script_or_style():
    """The CSP refuses them; a page that relied on one would break in the browser."""
    for path in Path(ROOT / "templates").glob("*.html"):
        html = path.read_text()
        for tag in re.findall(r"<script\b[^>]*>", html):
            assert "src=" in tag or 'type="application/json"' in tag, (path.name, tag)
        assert not re.search(r"\son\w+=", html), path.name
        assert " style=" not in html, path.name


# -- one error shape, clear 4xx ----------------------------------------------------------------

@pytest.mark.parametrize("method,path,status", [
    ("get", "/no/such/page", 404), ("get", "/api/nothing", 404), ("delete", "/practice", 405),
    ("get", "/scenarios/nope/1", 404), ("get", "/practice/0123456789abcdef", 404),
])
def test_every_error_is_one_json_shape(client, method, path, status):
    r = client.request(method.upper(), path)
    assert r.status_code == status and set(r.json()) == {"error"} and "\n" not in r.json()["error"]


def test_errors_echo_at_most_a_few_hundred_characters(client):
    for r in (client.get("/scenarios/ddp/" + "9" * 10_000 + ".json"),
              client.get("/scenarios/" + "x" * 10_000 + "/1"),
              client.post("/api/attempts", json={"scenario": "ddp", "params": {"steps": "9" * 10_000}}),
              client.get("/api/scenarios/ddp/1/tools/" + "t" * 10_000)):
        assert 400 <= r.status_code < 500 and len(r.text) < 400, (r.status_code, len(r.text))


@pytest.mark.parametrize("seed", ["5_000", "+7", " 5", "\u0665", "1e3", "0x10", "9" * 17, "-0"])
def test_seeds_are_ascii_digits_only(client, seed):
    from urllib.parse import quote

    r = client.get(f"/scenarios/ddp/{quote(seed)}.json")
    assert r.status_code == 400 and "digits" in r.json()["error"]
    assert client.post("/api/attempts", json={"scenario": "ddp", "seed": seed}).status_code == 400


def test_a_lone_surrogate_in_a_narration_is_a_400(client):
    aid = new(client)
    r = client.put(f"/api/attempts/{aid}/narration", content=b'{"narration": "step \\ud800 ms"}',
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "surrogate" in r.json()["error"]
    r = client.post(f"/api/attempts/{aid}/submit", content=b'{"narration": "\\udfff"}',
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert client.get(f"/api/attempts/{aid}").json()["narration"] == ""


@pytest.mark.parametrize("raw", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_non_finite_numbers_in_marks_and_runs_are_a_422(client, raw):
    aid = new(client)
    body = b'{"step": {"start_us": 1, "end_us": ' + raw + b"}}"
    r = client.put(f"/api/attempts/{aid}/marks", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "step.end_us" in r.json()["error"]
    r = client.post(f"/api/attempts/{aid}/runs", content=b'{"tool": "ncu", "since_open_s": ' + raw + b"}",
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    assert client.get(f"/api/attempts/{aid}").json()["marks"] == {}


def test_a_catastrophic_kernel_pattern_answers_at_once(client):
    start = time.monotonic()
    r = client.get("/api/scenarios/skinny-gemm/canonical/tools/ncu", params={"kernel": r"(\w|\w)*!"})
    assert time.monotonic() - start < 2 and r.status_code == 400 and "no profiled kernel" in r.json()["error"]
    r = client.get("/api/scenarios/skinny-gemm/canonical/tools/ncu", params={"kernel": r"(a)\1"})
    assert r.status_code == 400 and "bad kernel regex" in r.json()["error"]


def test_an_instance_past_the_event_budget_is_refused_before_it_is_built(client):
    """key.json?tokens=2000 built 6.6M events per request (8 requests: 5 GB of RSS)."""
    start = time.monotonic()
    r = client.get("/scenarios/launch-bound/1/key.json?tokens=2000")
    assert r.status_code == 400 and "event" in r.json()["error"] and time.monotonic() - start < 10
    assert client.get("/scenarios/launch-bound/1/key.json?tokens=20").status_code == 200


def test_pages_that_were_500s(client):
    aid = new(client)  # an unsubmitted round made /attempts a 500
    assert client.get("/attempts").status_code == 200
    twin = client.get(f"/practice/{aid}.json")  # the page route caught the twin
    assert twin.status_code == 200 and twin.json()["attempt"]["id"] == aid


@pytest.mark.parametrize("path", ["/api/attempts", "/api/r/no-such-token/events", "/api/rounds", "/login"])
def test_a_huge_body_is_refused_before_it_is_read(client, path):
    """Routes that read their body whole took any size into memory; past 1 MiB they answer
    413 with one line, whether the size is announced or the body comes in chunks."""
    big = b'{"narration": "' + b"x" * (2 * 2**20) + b'"}'
    r = client.post(path, content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "KiB" in r.json()["error"]

    def chunks():
        for _ in range(3):
            yield b"x" * 2**20

    r = client.post(path, content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "KiB" in r.json()["error"]
