"""A review as a reviewer does it, in Debian's Chromium against a real server: a round
played out by an interviewer and a candidate (with pauses, so the replay has a time axis
and idle stretches), then the reviewer opens its review: scrubbing to a moment shows the
narration as it was saved by then, and the candidate's view on the timeline; play at 16×
runs to the end; the others' scorecards stay hidden until the reviewer submits their own
through the page, then appear beside it."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from app.review import replay
from tests.calibration import READS
from tests.server import Server, wait_until
from tests.browser import CHROMIUM
from tests.test_live import PASSWORD, add_user, staff_client

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """A server with an ended round: (server, round id, drafts with the times they were saved)."""
    s = Server(tmp_path_factory.mktemp("review"), 1, {"TRACEDOJO_SECRET_KEY": "review-test"})
    for email, role in (("iv@team.org", "interviewer"), ("rv@team.org", "reviewer")):
        add_user(s, email, role)
    s.start()
    try:
        iv = staff_client(s.base, "iv@team.org")
        made = iv.post("/api/rounds", json={"scenario": "ddp", "seed": "canonical", "candidate_name": "Grace"}).json()
        cand = iv.__class__(base_url=s.base, timeout=30)
        cand.get(made["candidate_url"])
        token = made["candidate_url"].removeprefix("/r/")
        text = READS["ddp"]["strong"][0]
        drafts, saved = [text[:40], text[:120], text[:200], text], []
        for n, d in enumerate(drafts):
            assert cand.put(f"/api/r/{token}/narration", json={"narration": d}).status_code == 200
            assert cand.post(f"/api/r/{token}/events", json={"kind": "viewport", "start_ns": 1e6 * n,
                                                            "end_ns": 1e6 * (n + 50)}).status_code == 201
            # stamped once both are stored: a loaded machine may take longer than the test's
            # 300 ms margin between the narration's save and the viewport's
            saved.append((datetime.now().astimezone(), d))
            time.sleep(0.6 if n != 1 else 5.0)  # one stretch past the idle skip (4 s)
        assert cand.post(f"/api/r/{token}/runs", json={"tool": "nsys-kern-sum"}).status_code == 200
        assert iv.post(f"/api/rounds/{made['id']}/notes", json={"text": "went to the gap first"}).status_code == 200
        assert iv.post(f"/api/rounds/{made['id']}/end").status_code == 200
        card = {"criteria": {c: 4 for c in ("discipline_order", "findings", "trap", "root_cause", "measurement",
                                            "fix_win")}, "recommendation": 4, "notes": "crisp and in order"}
        assert iv.put(f"/api/rounds/{made['id']}/scorecard", json=card).status_code == 200
        yield s, made["id"], saved
    finally:
        s.stop()


@pytest.fixture
def reviewer_page(played):
    from playwright.sync_api import sync_playwright

    s, rid, _ = played
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM))
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(f"{s.base}/login?next=/rounds/{rid}/review")
        page.fill("input[name=email]", "rv@team.org")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"**/rounds/{rid}/review")
        wait_until(page, "!!(window.tracedojoReview && window.tracedojoReview.ready && window.tracedojoReview.viewer)")
        yield page
        browser.close()


def test_scrubbing_shows_the_narration_as_saved_then(played, reviewer_page):
    s, rid, saved = played
    page = reviewer_page
    assert "Grace" not in page.content(), "a reviewer sees the candidate's pseudonym, not the name"
    start = datetime.fromisoformat(page.evaluate("window.tracedojoReview.start"))
    for at, draft in saved:
        moment = at + timedelta(milliseconds=300)  # after its save, before the next one
        page.evaluate("(ms) => window.tracedojoReview.seek(ms)", (moment - start).total_seconds() * 1000)
        shown = page.locator("[data-narration]").text_content()
        events = page.evaluate("window.tracedojoReview.events()")
        assert shown == draft == replay.narration_at(events, moment)
    # the candidate's view of that moment is the timeline's window
    win = page.evaluate("window.tracedojoReview.viewer.window()")
    assert win["start_ns"] == pytest.approx(3e6) and win["end_ns"] == pytest.approx(53e6)
    page.evaluate("window.tracedojoReview.seek(0)")
    assert page.locator("[data-narration]").text_content() == ""
    # play at 16×: the 5 s of nothing is skipped, and it reaches the end
    page.select_option("[data-speed]", "16")
    page.click("[data-play]")
    wait_until(page, "!window.tracedojoReview.playing()", 15000)
    assert page.locator("[data-skipped]").text_content().startswith("skipped")
    assert page.locator("[data-narration]").text_content() == saved[-1][1]
    assert page.locator("[data-runs] li").count() == 1 and page.locator("[data-round-notes] li").count() == 1


def test_the_others_scorecards_appear_once_yours_is_in(reviewer_page):
    page = reviewer_page
    assert page.locator("[data-hidden-cards]").is_visible()
    assert "crisp and in order" not in page.content()
    for cid in ("discipline_order", "findings", "trap", "root_cause", "measurement", "fix_win"):
        page.check(f"[data-review-scorecard] input[name=criterion_{cid}][value='3']")
    page.check("[data-review-scorecard] input[name=recommendation][value='3']")
    page.click("[data-review-scorecard] button[type=submit]")
    page.wait_for_selector("table.who-said")
    assert page.locator("[data-hidden-cards]").count() == 0
    assert "crisp and in order" in page.content()
    heads = page.locator("table.who-said thead th").all_text_contents()
    assert heads[1:] == ["you", "iv", "auto"]
