"""Before and after (issue 14 item 4): the trace after the fix over the trace as it is, on one
clock; the step difference the page shows is the key's (step_ms of the key and of the fixed
build's key); the per-name diff's totals are the sums over the two traces."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest
from fastapi.testclient import TestClient

import scenarios
from app import instances
from app.scenario import observation
from tests.conftest import sqlite_app

FIXABLE = [sid for sid, scn in scenarios.REGISTRY.items() if scn.version in scn.fixable]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with TestClient(sqlite_app(tmp_path_factory, "before-after")) as c:
        yield c


def test_every_scenario_but_none_can_fix():
    assert len(FIXABLE) >= 5  # the page is tested on each below; a scenario that cannot fix has no page


@pytest.mark.parametrize("sid", FIXABLE)
def test_the_step_difference_shown_is_the_keys(client, sid):
    body = client.get(f"/scenarios/{sid}/0/before-after.json").json()
    inst = instances.instance(sid, 0, fixed=True)
    before, after = observation(inst.key, "step_ms"), observation(inst.fixed_key, "step_ms")
    step = body["step"]
    assert (step["before_ms"], step["after_ms"]) == (before, after)
    assert step["delta_ms"] == pytest.approx(after - before, abs=1e-3)
    assert step["expected_ms"] == observation(inst.key, "expected_step_ms")
    page = client.get(f"/scenarios/{sid}/0/before-after")
    assert page.status_code == 200
    shown = re.search(r'data-step-delta data-before-ms="([^"]+)" data-after-ms="([^"]+)"', page.text)
    if step["serving"]:  # prefill: its own figures, ITL p99 before and after
        s = step["serving"]
        assert (s["before_itl_p99_ms"], s["itl_p99_ms"]) == (observation(inst.key, "itl_p99_ms"),
                                                             observation(inst.fixed_key, "itl_p99_ms"))
        assert tuple(map(float, shown.groups())) == (s["before_itl_p99_ms"], s["itl_p99_ms"])
        assert f"{s['itl_p99_ms'] - s['before_itl_p99_ms']:+.1f} ms" in page.text
    else:
        assert tuple(map(float, shown.groups())) == (before, after)
        assert f"{after - before:+.1f} ms" in page.text
    # a step measured per unit of work after the fix (skinny-gemm: per 256-token equivalent of
    # a micro-step that now holds 4x the tokens) says so; where the drawn steps are the figure, nothing
    per_unit = sid == "skinny-gemm"
    assert ("data-after-label" in page.text) == per_unit and ("after_label" in step) == per_unit
    if per_unit:
        assert step["after_label"] in page.text and step["after_drawn_ms"] == pytest.approx(4 * after, rel=0.05)


@pytest.mark.parametrize("sid", ["launch-bound", "straggler"])
def test_the_name_diff_totals_are_the_sums_over_both_traces(client, sid):
    rank = "1" if sid == "straggler" else "0"
    body = client.get(f"/scenarios/{sid}/0/before-after.json?rank={rank}").json()
    b = instances.instance(sid, 0).trace(int(rank))
    a = instances.instance(sid, 0, fixed=True).trace(int(rank))
    rows, totals = body["diff"]["rows"], body["diff"]["totals"]
    assert totals["before_ms"] == pytest.approx(float(b.dur_ns.sum()) / 1e6)
    assert totals["after_ms"] == pytest.approx(float(a.dur_ns.sum()) / 1e6)
    assert (totals["before_count"], totals["after_count"]) == (len(b), len(a))
    assert sum(r["before_ms"] for r in rows) == pytest.approx(totals["before_ms"])
    assert sum(r["after_ms"] for r in rows) == pytest.approx(totals["after_ms"])
    assert sum(r["before_count"] for r in rows) == len(b) and sum(r["after_count"] for r in rows) == len(a)
    # one name, counted independently; the steps' numbered names as one row
    assert [r["name"] for r in rows if r["name"].startswith("ProfilerStep#")] == ["ProfilerStep#*"]
    top = next(r for r in rows if r["name"] in b.names)
    ids = [i for i, n in enumerate(b.names) if n == top["name"]]
    m = np.isin(b.name, ids)
    assert top["before_count"] == int(m.sum()) and top["before_ms"] == pytest.approx(float(b.dur_ns[m].sum()) / 1e6)
    assert [abs(r["delta_ms"]) for r in rows] == sorted((abs(r["delta_ms"]) for r in rows), reverse=True)
    assert all(r["delta_ms"] == pytest.approx(r["after_ms"] - r["before_ms"]) for r in rows)


def _t0(client, url: str) -> int:
    body = client.get(url).content
    body = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
    return json.loads(body[4:4 + int.from_bytes(body[:4], "little")])["t0_ns"]


def test_both_timelines_start_on_one_clock(client):
    """The page shares one time scale between the two viewers: both traces' time 0 is one instant."""
    body = client.get("/scenarios/dataloader/3/before-after.json").json()
    assert _t0(client, body["timelines"]["before"]) == _t0(client, body["timelines"]["after"])
    assert "fixed=1" in body["timelines"]["after"] and "fixed=1" not in body["timelines"]["before"]


def test_bad_requests_get_a_one_line_reason(client):
    r = client.get("/scenarios/straggler/0/before-after.json?rank=all")
    assert r.status_code == 400 and "one rank" in r.json()["error"]
    assert client.get("/scenarios/straggler/0/before-after?rank=99").status_code == 400
    r = client.get("/scenarios/ddp/canonical/before-after.json?version=1")
    assert r.status_code == 400 and "no build with its fix applied" in r.json()["error"]
    assert client.get("/scenarios/nope/0/before-after").status_code == 404


def test_the_scenario_page_links_it_where_the_instance_can_fix(client):
    page = client.get("/scenarios/skinny-gemm/4?rank=0").text
    assert 'href="/scenarios/skinny-gemm/4/before-after?rank=0"' in page
    assert "before-after" not in client.get("/scenarios/ddp/canonical?version=1").text


def test_the_practice_report_links_it_after_submission_only(client):
    a = client.post("/api/attempts", json={"scenario": "launch-bound"}).json()
    assert client.get(f"/practice/{a['id']}/report.json").status_code == 409
    assert "before-after" not in client.get(f"/practice/{a['id']}").text
    client.put(f"/api/attempts/{a['id']}/narration", json={"narration": "Step is 28 ms."})
    client.post(f"/api/attempts/{a['id']}/submit")
    link = client.get(f"/practice/{a['id']}/report.json").json()["before_after_url"]
    assert link.startswith("/scenarios/launch-bound/") and "/before-after" in link
    assert client.get(link).status_code == 200
    assert f'href="{link.replace("&", "&amp;")}"' in client.get(f"/practice/{a['id']}/report").text
