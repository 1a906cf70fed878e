"""The optional second opinion on trap stance (app/scoring/second_opinion.py), against a
local stub of an OpenAI-compatible endpoint that answers with recorded completions: it is
off unless configured, it only ever sets needs_review, a bad or slow endpoint changes
nothing but its own line in the report, and nobody's request waits for it."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import scenarios
from app.config import get_settings
from app.db.base import store_for, upgrade_to_head
from app.scoring import second_opinion
from app.scoring.score import TRAP_CAP, score

# A read that endorses a trap the way the scorer alone lets pass: it sees the true cause,
# then dismisses it for the interconnect and commits to retuning it. Written for this test.
DISMISSES_THE_CAUSE = (
    "The step is 622 ms and the compute stream sits idle for ~175 ms after backward while one all-reduce runs. "
    "Restoring the bucketed overlap is the textbook answer, but with eight GPUs on one node I would not expect "
    "overlap to buy much once the buckets contend with backward GEMMs for SMs. What stands out is ~160 GB/s of bus "
    "bandwidth on links that do 370: that shortfall is measurable and isolated. I'd go after the transport first, "
    "get the collective to ~76 ms, and revisit bucketing later if MFU is still short.")
STRONG = ("The step is 622 ms. After backward the compute stream idles ~182 ms while one 175 ms all-reduce runs, "
          "and kern_sum shows one NCCL kernel per step where the reducer should fire ~612 buckets: the hooks are "
          "bypassed, nothing overlaps. NCCL itself is fine, ~160 GB/s for 28 GB of ring traffic is not what costs "
          "the step. Remove the wrapper so the buckets overlap backward: ~473 ms, 1.3x.")


def completion(content: str) -> bytes:
    """An OpenAI chat completion as such servers send it."""
    return json.dumps({"id": "chatcmpl-rec", "object": "chat.completion", "model": "recorded",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content}}]}).encode()


# Recorded answers, chosen by words of the read in the request.
RECORDED = {
    "revisit bucketing later": completion(
        "```json\n" + json.dumps({"stance": "endorse", "trap": 1, "confidence": "high",
                                  "quote": "I'd go after the transport first",
                                  "why": "It dismisses the overlap fix and commits to tuning the interconnect."})
        + "\n```"),
    "Remove the wrapper": completion(json.dumps({"stance": "reject", "trap": 1, "confidence": "high",
                                                 "quote": "NCCL itself is fine", "why": "Rejects NCCL."})),
}


class Stub:
    def __init__(self, mode: str = "recorded", delay_s: float = 0.0):
        self.mode, self.delay_s, self.requests = mode, delay_s, []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                time.sleep(stub.delay_s)
                if stub.mode == "error":
                    self.send_response(500)
                    self.end_headers()
                    return
                read = body["messages"][-1]["content"]
                out = completion("I think the candidate is probably fine.") if stub.mode == "garbage" else next(
                    (v for k, v in RECORDED.items() if k in read), completion("{}"))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    s = Stub()
    yield s
    s.close()


@pytest.fixture
def configured(stub, monkeypatch):
    monkeypatch.setenv("TRACEDOJO_SECOND_OPINION_URL", stub.url)
    monkeypatch.setenv("TRACEDOJO_SECOND_OPINION_MODEL", "judge-1")
    monkeypatch.setenv("TRACEDOJO_SECOND_OPINION_API_KEY", "k-123")
    get_settings.cache_clear()
    yield stub
    get_settings.cache_clear()


def ddp():
    scn = scenarios.get("ddp")
    return scn.instance("canonical").key, scn.rubric


def test_the_read_the_scorer_lets_pass_is_one_the_opinion_flags():
    key, rubric = ddp()
    report = score(key, rubric, DISMISSES_THE_CAUSE)
    assert not report["trap_endorsed"] and not report["needs_review"]  # what the scorer alone does


def test_a_confident_disagreement_asks_a_reader_and_changes_no_score(stub):
    key, rubric = ddp()
    report = score(key, rubric, DISMISSES_THE_CAUSE)
    opinion = second_opinion.ask(key, DISMISSES_THE_CAUSE, url=stub.url, model="judge-1", api_key="k-123")
    assert opinion["status"] == "done" and opinion["stance"] == "endorse" and opinion["confidence"] == "high"
    assert opinion["trap"] == key["traps"][0]["claim"]
    assert DISMISSES_THE_CAUSE[opinion["start"]:opinion["end"]] == opinion["quote"]  # evidence in the read's words
    out = second_opinion.merged(report, opinion)
    assert out["needs_review"] and "second opinion" in out["review_reason"] and opinion["quote"] in out["review_reason"]
    assert out["total"] == report["total"] and out["trap_endorsed"] == report["trap_endorsed"]
    assert out["criteria"] == report["criteria"]
    # what was sent: the key's words and the read, to the chat completions route, with the key
    req = stub.requests[-1]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer k-123"
    assert req["body"]["model"] == "judge-1" and DISMISSES_THE_CAUSE in req["body"]["messages"][-1]["content"]
    assert key["root_cause"] in req["body"]["messages"][-1]["content"]


def test_agreement_and_low_confidence_ask_nobody(stub):
    key, rubric = ddp()
    report = score(key, rubric, STRONG)
    agrees = second_opinion.ask(key, STRONG, url=stub.url)
    assert agrees["stance"] == "reject" and second_opinion.review_reason(report, agrees) is None
    unsure = {**agrees, "stance": "endorse", "confidence": "low"}
    assert second_opinion.review_reason(report, unsure) is None
    assert second_opinion.merged(report, unsure)["needs_review"] == report["needs_review"]
    # a cap the opinion disputes goes to a reader too, and keeps the cap
    capped = {**report, "trap_endorsed": True, "total": TRAP_CAP}
    out = second_opinion.merged(capped, agrees)
    assert out["needs_review"] and out["trap_endorsed"] and out["total"] == TRAP_CAP


@pytest.mark.parametrize("mode,error", [("garbage", "does not give one of the stances"),
                                        ("error", "answered 500")])
def test_a_bad_endpoint_changes_nothing_but_its_own_line(mode, error):
    s = Stub(mode)
    try:
        key, rubric = ddp()
        report = score(key, rubric, DISMISSES_THE_CAUSE)
        opinion = second_opinion.ask(key, DISMISSES_THE_CAUSE, url=s.url)
        assert opinion["status"] == "failed" and error in opinion["error"]
        out = second_opinion.merged(report, opinion)
        assert {k: v for k, v in out.items() if k != "second_opinion"} == report
    finally:
        s.close()


def test_a_slow_endpoint_is_given_up_on_and_an_absent_one_said(unused_port):
    s = Stub(delay_s=3.0)
    try:
        key, _ = ddp()
        t0 = time.monotonic()
        opinion = second_opinion.ask(key, STRONG, url=s.url, timeout_s=0.5)
        assert opinion["status"] == "failed" and "within 0.5 s" in opinion["error"]
        assert time.monotonic() - t0 < 2.5
    finally:
        s.close()
    gone = second_opinion.ask(key, STRONG, url=f"http://127.0.0.1:{unused_port}/v1", timeout_s=1)
    assert gone["status"] == "failed" and "could not be reached" in gone["error"]


@pytest.fixture
def unused_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_quotes_not_in_the_read_are_shown_as_such():
    key, _ = ddp()
    o = second_opinion.parse('{"stance": "endorse", "trap": 9, "quote": "words nobody said", "confidence": "high"}',
                             STRONG, key)
    assert o["status"] == "done" and o["trap"] is None and o["start"] is None and o["quote"] == "words nobody said"


def test_off_by_default_nothing_is_asked(stub, tmp_path, monkeypatch):
    monkeypatch.delenv("TRACEDOJO_SECOND_OPINION_URL", raising=False)
    get_settings.cache_clear()
    from app import practice

    url = f"sqlite:///{tmp_path / 'so.db'}"
    upgrade_to_head(url)
    store = store_for(url)
    a = practice.create(store, "owner-1", "ddp", seed="canonical")
    _, report = practice.submit(store, "owner-1", a.public_id, DISMISSES_THE_CAUSE)
    assert "second_opinion" not in report and practice.add_second_opinion(store, a.public_id) is None
    assert stub.requests == []


def test_a_practice_submit_answers_first_and_the_opinion_joins_the_stored_report(configured, tmp_path):
    from app import practice

    url = f"sqlite:///{tmp_path / 'so.db'}"
    upgrade_to_head(url)
    store = store_for(url)
    a = practice.create(store, "owner-1", "ddp", seed="canonical")
    _, report = practice.submit(store, "owner-1", a.public_id, DISMISSES_THE_CAUSE)
    # the submit itself asks nothing: its answer carries the score and a pending opinion
    assert report["second_opinion"]["status"] == "pending" and configured.requests == []
    assert not report["needs_review"]
    stored = practice.add_second_opinion(store, a.public_id)
    assert stored["second_opinion"]["status"] == "done" and stored["needs_review"]
    assert stored["total"] == report["total"] and not stored["trap_endorsed"]
    assert practice.get(store, "owner-1", a.public_id).report == stored
    # asked once: a second run finds nothing pending
    assert practice.add_second_opinion(store, a.public_id) is None and len(configured.requests) == 1


def test_the_http_submit_answers_with_a_pending_opinion_and_the_report_page_then_shows_it(configured,
                                                                                          tmp_path_factory):
    from fastapi.testclient import TestClient

    from tests.conftest import sqlite_app

    with TestClient(sqlite_app(tmp_path_factory, "second_opinion")) as client:
        aid = client.post("/api/attempts", json={"scenario": "ddp", "seed": "canonical"}).json()["id"]
        # (TestClient runs the background task before it returns; the answer was built before it)
        r = client.post(f"/api/attempts/{aid}/submit", json={"narration": DISMISSES_THE_CAUSE})
        assert r.status_code == 200 and r.json()["second_opinion"]["status"] == "pending"
        assert not r.json()["needs_review"]
        page = client.get(f"/practice/{aid}/report")
        assert page.status_code == 200 and "Second opinion on the trap" in page.text
        assert "judge-1 reads the stance as" in page.text and "go after the transport first" in page.text
        twin = client.get(f"/practice/{aid}/report.json").json()
        report = twin.get("report", twin)
        assert report["second_opinion"]["stance"] == "endorse" and report["needs_review"]
        assert report["total"] == r.json()["total"]


def test_an_ended_round_gets_its_opinion_after_the_end(configured, tmp_path):
    from app.rounds import live
    from tests.test_rounds import staff_in

    url = f"sqlite:///{tmp_path / 'so.db'}"
    upgrade_to_head(url)
    store = store_for(url)
    iv = staff_in(store, "iv@x.org", "interviewer")
    r, token = live.create(store, iv, scenario="ddp", seed="canonical", candidate_name="Ada")
    live.opened(store, token, "test")
    live.save_narration(store, token, DISMISSES_THE_CAUSE)
    assert not live.end(store, iv, r.public_id)["already"]
    assert configured.requests == []  # the end asked nothing
    stored = live.add_second_opinion(store, r.public_id)
    assert stored["second_opinion"]["stance"] == "endorse" and stored["needs_review"]
    assert "second opinion" in stored["review_reason"] and not stored["trap_endorsed"]
    assert live.add_second_opinion(store, r.public_id) is None and len(configured.requests) == 1
