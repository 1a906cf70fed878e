"""Rank honesty (issue 14 item 3): a multi-rank case opens on the rank its brief hands
over, the timeline's header says which ranks it draws, every stacked row names its rank,
and the toolbar switches ranks keeping the page's other query keys."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

import scenarios
from app.scenario import Instance
from tests.conftest import sqlite_app


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    import os

    os.environ["TRACEDOJO_UPLOADS_DIR"] = str(tmp_path_factory.mktemp("uploads"))
    with TestClient(sqlite_app(tmp_path_factory, "ranks")) as c:
        yield c


def _header(client, url: str) -> dict:
    body = client.get(url, headers={"Accept-Encoding": "identity"}).content
    n = int.from_bytes(body[:4], "little")
    return json.loads(body[4:4 + n])


@pytest.mark.parametrize("brief, ranks, rank", [
    ("Here is rank 0's trace (every rank's trace is available).", 8, 0),
    ("Here is rank 5's trace; the team blames NCCL.", 8, 5),
    ("Rank 2's profile is attached.", 4, 2),
    ("Here is rank 9's trace.", 4, 0),  # out of range: the first rank
    ("One GPU, one trace.", 1, 0),
])
def test_the_brief_names_the_rank_a_case_opens_on(brief, ranks, rank):
    stub = SimpleNamespace(key={"brief": brief}, ranks=ranks)
    assert Instance.brief_rank.fget(stub) == rank


def test_every_multi_rank_scenario_opens_on_its_briefs_rank(client):
    for sid, scn in scenarios.REGISTRY.items():
        inst = scn.instance("canonical")
        if inst.ranks < 2:
            continue
        m = re.search(r"rank (\d+)'s trace", inst.key["brief"])
        assert m, f"{sid}'s brief names the rank it hands over"
        page = client.get(f"/scenarios/{sid}/canonical.json").json()
        assert page["rank"] == int(m.group(1)) == inst.brief_rank
        assert page["timeline_url"].endswith(f"rank={page['rank']}")


def test_a_brief_naming_another_rank_opens_that_rank(client, monkeypatch):
    monkeypatch.setattr(Instance, "brief_rank", property(lambda self: 2 if self.ranks > 2 else 0))
    page = client.get("/scenarios/straggler/canonical.json").json()
    assert page["rank"] == 2 and page["timeline_url"].endswith("rank=2")
    html = client.get("/scenarios/straggler/canonical").text
    assert '<option value="2" selected>rank 2 (the brief\'s)</option>' in html


def test_the_header_names_the_ranks_drawn(client):
    inst = scenarios.get("straggler").instance("canonical")
    base = "/api/scenarios/straggler/canonical/timeline.bin"
    assert _header(client, base + "?rank=0")["ranks"] == [0]
    assert _header(client, base + "?rank=3")["ranks"] == [3]
    assert _header(client, "/api/scenarios/ddp/canonical/timeline.bin?rank=0")["ranks"] == [0]
    head = _header(client, base + "?rank=all")
    assert head["ranks"] == list(range(inst.ranks))
    for t in head["tracks"]:  # every row says its rank, folded group or not
        assert t["label"].startswith(f"rank {t['rank']} · ") and t["group"].startswith(f"rank {t['rank']} · "), t
    assert {t["rank"] for t in head["tracks"]} == set(range(inst.ranks))
    assert "rank 3 · stream 7 · compute" in [t["label"] for t in head["tracks"]]
    assert not any("rank" in t for t in _header(client, base + "?rank=3")["tracks"])


def test_the_rank_switcher_keeps_the_other_query_keys(client):
    html = client.get("/scenarios/straggler/canonical?rank_jitter_pct=0.4&rank=1&testing=1").text
    form = re.search(r'<form class="rank-switch".*?</form>', html, re.S).group(0)
    assert '<input type="hidden" name="rank_jitter_pct" value="0.4">' in form
    assert '<input type="hidden" name="testing" value="1">' in form
    assert 'name="rank" value' not in form  # the select carries the rank
    assert re.findall(r"<option value=\"(\w+)\"", form) == [str(r) for r in range(8)] + ["all"]
    assert '<option value="1" selected>' in form
    assert '<label for="rank-select">Rank</label>' in form
    assert "rank-switch" not in client.get("/scenarios/ddp/canonical").text  # one rank: no switcher


def test_a_practice_round_on_a_multi_rank_case_opens_on_the_briefs_rank_and_switches(client):
    r = client.post("/api/attempts", json={"scenario": "straggler", "seed": "canonical"})
    assert r.status_code == 201, r.text
    aid = r.json()["id"]
    inst = scenarios.get("straggler").instance("canonical")
    page = client.get(f"/practice/{aid}.json").json()
    assert page["rank"] == inst.brief_rank and page["timeline_url"].endswith(f"?rank={inst.brief_rank}")
    html = client.get(f"/practice/{aid}?rank=all").text
    form = re.search(r'<form class="rank-switch".*?</form>', html, re.S).group(0)
    assert '<option value="all" selected>' in form and "straggler" not in form and "canonical" not in form
    assert inst.key["root_cause"] not in html
    assert _header(client, client.get(f"/practice/{aid}.json?rank=all").json()["timeline_url"])["ranks"] == \
        list(range(inst.ranks))


def test_a_practice_round_draws_no_counter_tracks_where_the_explorer_does(client):
    """The straggler's SM-clock counter is the reading its decisive measurement is for: the
    candidate's own timeline leaves it out (the explorer, the console and the review keep it)."""
    aid = client.post("/api/attempts", json={"scenario": "straggler", "seed": "canonical"}).json()["id"]
    for rank in ("0", "all"):
        url = client.get(f"/practice/{aid}.json?rank={rank}").json()["timeline_url"]
        assert _header(client, url)["counters"] == []
        assert _header(client, f"/api/scenarios/straggler/canonical/timeline.bin?rank={rank}")["counters"]


def test_an_uploaded_rank_says_which_it_is_and_a_rocm_upload_gets_htas_block(client):
    """One uploaded file draws its distributedInfo.rank; the MI250-shaped trace (tests/rocm_trace.py)
    gets HTA's block, not None of 0 µs."""
    from tests import rocm_trace
    from tests.test_rocm_hta import HTA_TEMPORAL

    doc = rocm_trace.trace()
    doc["distributedInfo"]["rank"] = 5
    r = client.post("/api/traces", files={"trace": ("mi250.json", json.dumps(doc).encode())})
    assert r.status_code == 200, r.text
    up = r.json()
    assert _header(client, f"/api/traces/{up['id']}/timeline.bin")["ranks"] == [5]
    block = up["hta"]
    assert {k: block[k] for k in HTA_TEMPORAL} == HTA_TEMPORAL
