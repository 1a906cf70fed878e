"""Practice reports shared by their owner (app/sharing.py), and a candidate's practice
attached to a round with their consent (app/rounds/consent.py, app/review/practice.py):
over HTTP, each browser a TestClient of its own (its own identity cookie), staff signed in
through POST /login."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from urllib.parse import unquote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

import scenarios
from app.accounts import service
from app.config import get_settings
from app.db.base import store_for
from app.db.models import Attempt
from app.db.staff import Round
from app.identity import COOKIE, _signer, identity_of
from app.review import practice as attached
from app.rounds import consent
from app import sharing
from tests.conftest import sqlite_app

PW = "correct horse battery"
CONSENT = "The team running this round will see these reports: scores, your narration and the evidence"
READ = ("The step is 620 ms; the compute stream idles for the all-reduce at the end of backward, "
        "so NCCL is not overlapped. I would run nsys-kern-sum and bucket the gradients.")


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    app = sqlite_app(tmp_path_factory, "share")
    store = store_for(get_settings().database_url)
    for email, role, team in (("iv@a.org", "interviewer", "a"), ("iv2@a.org", "interviewer", "a"),
                              ("rv@a.org", "reviewer", "a"), ("admin@a.org", "admin", "a"),
                              ("iv@b.org", "interviewer", "b")):
        service.add_user(store, email, PW, role, team)
    yield app
    get_settings.cache_clear()
    _signer.cache_clear()


@pytest.fixture(scope="module")
def store(app):
    return store_for(get_settings().database_url)


def browser(app, email: str | None = None) -> TestClient:
    """A browser of its own (its own identity cookie), signed in as `email` if given."""
    c = TestClient(app, follow_redirects=False)
    if email:
        assert c.post("/login", json={"email": email, "password": PW}).status_code == 200
    return c


def attempt(c: TestClient, scenario: str = "ddp", seed: str = "0", submitted: bool = True) -> str:
    r = c.post("/api/attempts", json={"scenario": scenario, "seed": seed})
    assert r.status_code == 201, r.text
    aid = r.json()["id"]
    if submitted:
        assert c.post(f"/api/attempts/{aid}/submit", json={"narration": READ}).status_code == 200
    return aid


def one_line(r, status: int) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    msg = r.json()["error"]
    assert msg and "\n" not in msg
    return msg


# -- sharing a report ----------------------------------------------------------------------

def test_share_copy_revoke(app):
    owner, stranger = browser(app), browser(app)
    aid = attempt(owner, submitted=False)
    assert "not submitted" in one_line(owner.post(f"/api/attempts/{aid}/share"), 409)
    owner.post(f"/api/attempts/{aid}/submit", json={"narration": READ})
    assert owner.get(f"/api/attempts/{aid}").json()["share_url"] is None
    page = owner.get(f"/practice/{aid}/report").text
    assert 'hx-post="/api/attempts/%s/share"' % aid in page and "data-share-link" not in page

    made = owner.post(f"/api/attempts/{aid}/share")
    assert made.status_code == 200, made.text
    url = made.json()["url"]
    assert re.fullmatch(rf"/shared/{aid}\.[A-Za-z0-9_-]{{43}}", url)
    # the owner sees the same link again, on the attempt, its report and its page (Copy link)
    assert owner.get(f"/api/attempts/{aid}").json()["share_url"] == url
    assert owner.get(f"/practice/{aid}/report.json").json()["attempt"]["share_url"] == url
    page = owner.get(f"/practice/{aid}/report").text
    assert f'value="http://testserver{url}"' in page and "data-copy-share" in page
    assert f'hx-delete="/api/attempts/{aid}/share"' in page

    for u in (url, url + ".json"):
        r = stranger.get(u)
        assert r.status_code == 200, r.text
        assert r.headers["cache-control"] == "private, no-store" and r.headers["x-robots-tag"] == "noindex"
    shown = stranger.get(url + ".json").json()
    key = scenarios.get("ddp").instance(0).key
    assert shown["report"]["model_answer"] == key["model_answer"] and shown["attempt"]["narration"] == READ
    assert shown["report"]["criteria"][0]["evidence"] is not None and "missed" in shown["report"]["criteria"][0]

    revoked = owner.delete(f"/api/attempts/{aid}/share")
    assert revoked.status_code == 200 and revoked.json()["url"] is None
    assert owner.get(f"/api/attempts/{aid}").json()["share_url"] is None
    for u in (url, url + ".json"):
        r = stranger.get(u)
        assert "no shared report" in one_line(r, 404)
        assert r.headers["cache-control"] == "private, no-store" and r.headers["x-robots-tag"] == "noindex"
    again = owner.post(f"/api/attempts/{aid}/share").json()["url"]
    assert again != url and stranger.get(again).status_code == 200 and stranger.get(url).status_code == 404


def test_a_new_link_kills_every_earlier_one(app):
    owner, stranger = browser(app), browser(app)
    aid = attempt(owner)
    links = [owner.post(f"/api/attempts/{aid}/share").json()["url"] for _ in range(3)]
    assert len(set(links)) == 3
    assert [stranger.get(u + ".json").status_code for u in links] == [404, 404, 200]


def test_forged_and_tampered_links_are_404_with_one_line(app, store):
    owner, stranger = browser(app), browser(app)
    aid, other = attempt(owner), attempt(owner)
    url = owner.post(f"/api/attempts/{aid}/share").json()["url"]
    token = url.removeprefix("/shared/")
    pid, mac = token.split(".")
    flipped = mac[:-1] + ("A" if mac[-1] != "A" else "B")
    with store.read() as db:
        nonce = db.scalar(select(Attempt.share_nonce).where(Attempt.public_id == aid))
    # what a copy of the database gives: the nonce, with any key but the server's
    copied = base64.urlsafe_b64encode(hmac.new(b"not-the-key", b"\0".join((sharing.PURPOSE, aid.encode(),
                                                                          nonce.encode())),
                                               hashlib.sha256).digest()).rstrip(b"=").decode()
    forged = [f"{pid}.{flipped}", f"{other}.{mac}", f"{pid}.{copied}", f"{pid}.{mac[:-1]}", pid, f"{pid}.",
              f"{pid}.{mac}.x", f".{mac}", "x" * 60, f"{pid}.{mac}"[::-1], f"{pid.upper()}.{mac}"]
    answers = set()
    for t in forged:
        for suffix in ("", ".json"):
            r = stranger.get(f"/shared/{t}{suffix}")
            if r.status_code == 404 and r.headers.get("content-type", "").startswith("application/json"):
                answers.add(r.json()["error"])
            else:
                pytest.fail(f"/shared/{t}{suffix}: {r.status_code} {r.text[:100]}")
    assert answers == {sharing.GONE}  # forged, revoked or replaced: one answer, no hint which
    assert stranger.get(url).status_code == 200  # and the real one still opens


def test_another_browser_can_neither_share_nor_see_your_attempt(app):
    owner, stranger = browser(app), browser(app)
    aid = attempt(owner)
    for method in ("post", "delete"):
        assert "in this browser" in one_line(getattr(stranger, method)(f"/api/attempts/{aid}/share"), 404)
    assert owner.get(f"/api/attempts/{aid}").json()["share_url"] is None  # the stranger's POST made nothing
    for u in (f"/practice/{aid}/report", f"/practice/{aid}/report.json", f"/api/attempts/{aid}"):
        assert stranger.get(u).status_code == 404, u
    url = owner.post(f"/api/attempts/{aid}/share").json()["url"]
    assert stranger.delete(f"/api/attempts/{aid}/share").status_code == 404
    assert stranger.get(url).status_code == 200  # a stranger's revoke revoked nothing
    assert browser(app).post("/api/attempts/0123456789abcdef/share").status_code == 404


def test_the_shared_page_names_no_owner_and_writes_nothing(app):
    owner, stranger = browser(app), browser(app)
    aid = attempt(owner)
    ident = identity_of(unquote(owner.cookies[COOKIE]))
    url = owner.post(f"/api/attempts/{aid}/share").json()["url"]
    page, twin = stranger.get(url).text, stranger.get(url + ".json")
    for text in (page, twin.text):
        assert ident not in text and owner.cookies[COOKIE] not in text
    assert "/api/attempts" not in page and f"/practice/{aid}" not in page
    # the viewer's measurement form runs a tool on the open explorer's instance (a GET); nothing posts
    assert not re.search(r"<form[^>]*method=|hx-(post|put|delete|patch)", page) and "Same pathology" not in page
    assert "data-share-link" not in page and "My attempts" in page  # the site's own menu, not the owner's list
    assert '<meta name="robots" content="noindex">' in page
    assert "The read" in page and "Your read" not in page
    attempt_view = twin.json()["attempt"]
    assert not {"id", "owner", "share_url", "shared_at"} & set(attempt_view)
    assert attempt_view["explorer_url"] == "/scenarios/ddp/0" and twin.json()["timeline_url"].startswith(
        "/api/scenarios/ddp/0/timeline.bin")
    # the timeline the page draws is the open explorer's: public once the attempt is submitted
    assert stranger.get(twin.json()["timeline_url"]).status_code == 200


# -- consent: practice attached to a round ---------------------------------------------------

@pytest.fixture
def staff(app):
    return {who: browser(app, f"{who.replace('-', '@')}.org") for who in ("iv-a", "iv2-a", "rv-a", "admin-a", "iv-b")}


def new_round(staff) -> tuple[str, str]:
    r = staff["iv-a"].post("/api/rounds", json={"scenario": "dataloader", "seed": "canonical"})
    assert r.status_code == 201, r.text
    return r.json()["id"], r.json()["candidate_url"].removeprefix("/r/")


def practice_events(staff, rid: str) -> list[dict]:
    return [e for e in staff["iv-a"].get(f"/rounds/{rid}.json").json()["events"] if e["kind"] == "practice"]


def test_attach_what_you_choose_then_withdraw(app, staff):
    cand = browser(app)
    rid, token = new_round(staff)
    api = f"/api/r/{token}/practice"
    mine = [attempt(cand, "ddp"), attempt(cand, "launch-bound")]
    first = cand.get(api).json()
    assert first["attached"] == 0 and first["attached_elsewhere"] == 0 and first["max"] == consent.MAX_ATTACHED
    listed = first["attempts"]
    assert {a["id"] for a in listed} == set(mine) and not any(a["attached"] for a in listed)
    assert {a["title"] for a in listed} == {scenarios.get("ddp").title, scenarios.get("launch-bound").title}

    r = cand.put(api, json={"attempt_ids": mine})
    assert r.status_code == 200 and r.json()["changed"] and r.json()["count"] == 2
    assert all(a["attached"] for a in cand.get(api).json()["attempts"])
    assert not cand.put(api, json={"attempt_ids": mine[::-1]}).json()["changed"]  # the same set: no event
    # replace with one: the other is no longer shown
    assert cand.put(api, json={"attempt_ids": [mine[1]]}).json()["count"] == 1
    rv = staff["iv-a"]
    # the console says so (its page from the log; live from the stream, static/pages/console.js)
    assert rv.get(f"/rounds/{rid}.json").json()["practice"] == {"count": 1, "attempt_ids": [mine[1]]}
    assert "attached 1 practice report " in rv.get(f"/rounds/{rid}").text
    assert rv.get(f"/rounds/{rid}/practice/{mine[0]}.json").status_code == 404
    view = rv.get(f"/rounds/{rid}/practice/{mine[1]}.json")
    assert view.status_code == 200 and view.json()["attempt"]["narration"] == READ
    assert view.headers["cache-control"] == "private, no-store"
    page = rv.get(f"/rounds/{rid}/practice/{mine[1]}")
    assert page.status_code == 200 and scenarios.get("launch-bound").title in page.text
    assert not re.search(r"<form[^>]*method=|hx-(post|put|delete|patch)", page.text)
    assert f"/rounds/{rid}/review" in page.text
    listed = rv.get(f"/rounds/{rid}/review.json").json()["practice"]  # the review lists what was shared
    assert [a["id"] for a in listed] == [mine[1]] and listed[0]["url"] == f"/rounds/{rid}/practice/{mine[1]}"
    assert listed[0]["url"] in rv.get(f"/rounds/{rid}/review").text

    gone = cand.delete(api).json()
    assert gone["changed"] and gone["count"] == 0 and gone["event_id"] == practice_events(staff, rid)[-1]["id"]
    assert rv.get(f"/rounds/{rid}/practice/{mine[1]}.json").status_code == 404
    assert rv.get(f"/rounds/{rid}/review.json").json()["practice"] == []
    assert not cand.delete(api).json()["changed"]  # nothing left to withdraw: no event

    log = practice_events(staff, rid)
    assert [(e["actor"], e["data"]["count"], e["data"]["attempt_ids"]) for e in log] == [
        ("candidate", 2, mine), ("candidate", 1, [mine[1]]), ("candidate", 0, [])]


def test_only_this_browsers_submitted_attempts_can_be_attached(app, staff):
    cand, other = browser(app), browser(app)
    rid, token = new_round(staff)
    api = f"/api/r/{token}/practice"
    done, still_open, theirs = attempt(cand), attempt(cand, submitted=False), attempt(other)
    assert "in this browser" in one_line(cand.put(api, json={"attempt_ids": [done, theirs]}), 404)
    assert "not submitted" in one_line(cand.put(api, json={"attempt_ids": [still_open]}), 409)
    assert "in this browser" in one_line(cand.put(api, json={"attempt_ids": ["0123456789abcdef"]}), 404)
    assert one_line(cand.put(api, json={"attempt_ids": ["x" * 33]}), 422)
    assert "50" in one_line(cand.put(api, json={"attempt_ids": [f"{i:016x}" for i in range(51)]}), 422)
    assert one_line(cand.put(api, json={"attempt_ids": "not-mine"}), 404)  # one string is one id (a form's one box)
    assert one_line(cand.put(api, content=b"{", headers={"content-type": "application/json"}), 400)
    assert cand.get(api).json()["attached"] == 0 and practice_events(staff, rid) == []  # a refusal changed nothing
    # the unsubmitted attempt is not even listed; the other browser's attempts are not this one's to see
    assert [a["id"] for a in cand.get(api).json()["attempts"]] == [done]
    # the other browser's own attachment is theirs: this browser's PUT leaves it, DELETE withdraws all
    assert other.put(api, json={"attempt_ids": [theirs]}).json()["count"] == 1
    assert cand.put(api, json={"attempt_ids": [done]}).json()["count"] == 2
    assert cand.get(api).json()["attached_elsewhere"] == 1
    assert cand.put(api, json={"attempt_ids": []}).json()["count"] == 1
    assert cand.delete(api).json()["count"] == 0 and other.get(api).json()["attached"] == 0


def test_the_panel_is_an_htmx_form(app, staff):
    """The round's page loads the panel after itself (hx-get) and never names a case;
    the panel has the consent sentence, and a form's ticked boxes attach."""
    cand = browser(app)
    rid, token = new_round(staff)
    aid = attempt(cand, "ddp")
    page = cand.get(f"/r/{token}").text
    assert f'hx-get="/api/r/{token}/practice"' in page and scenarios.get("ddp").title not in page
    hx = {"HX-Request": "true"}
    panel = cand.get(f"/api/r/{token}/practice", headers=hx)
    assert panel.headers["content-type"].startswith("text/html") and CONSENT in panel.text
    assert scenarios.get("ddp").title in panel.text and f'value="{aid}"' in panel.text
    done = cand.put(f"/api/r/{token}/practice", data={"attempt_ids": aid}, headers=hx)  # one box ticked
    assert done.status_code == 200 and "checked" in done.text and "Withdraw all" in done.text
    assert cand.get(f"/api/r/{token}/practice").json()["attached"] == 1
    gone = cand.delete(f"/api/r/{token}/practice", headers=hx)
    assert gone.status_code == 200 and "checked" not in gone.text


def test_who_on_the_staff_reads_an_attached_report(app, staff, store):
    cand = browser(app)
    rid, token = new_round(staff)
    aid = attempt(cand)
    unattached = attempt(cand)
    cand.put(f"/api/r/{token}/practice", json={"attempt_ids": [aid]})
    url = f"/rounds/{rid}/practice/{aid}.json"
    # while the round runs: its interviewer yes; a reviewer waits for the end; another
    # interviewer of the team, who took no part, no; another team cannot tell it exists
    got = {who: c.get(url).status_code for who, c in staff.items()}
    assert got == {"iv-a": 200, "iv2-a": 403, "rv-a": 409, "admin-a": 200, "iv-b": 404}
    assert staff["iv-b"].get(url).text == staff["iv-b"].get(f"/rounds/0123456789abcdef/practice/{aid}.json").text \
        .replace("0123456789abcdef", rid)
    assert browser(app).get(url).status_code == 401
    assert browser(app).get(url.removesuffix(".json")).headers["location"].startswith("/login?next=")
    # never an attempt that was not attached to this round, whoever owns it
    for a in (unattached, "0123456789abcdef"):
        assert "attached to this round" in one_line(staff["admin-a"].get(f"/rounds/{rid}/practice/{a}.json"), 404)
    other_rid, _ = new_round(staff)
    assert staff["admin-a"].get(f"/rounds/{other_rid}/practice/{aid}.json").status_code == 404

    assert staff["iv-a"].post(f"/api/rounds/{rid}/end").status_code == 200
    assert staff["rv-a"].get(url).status_code == 200  # the reviewer, once the round ended
    with store.read() as db:
        r = db.scalar(select(Round).where(Round.public_id == rid))
    listed = attached.attached(store, r)
    assert [a["id"] for a in listed] == [aid] and listed[0]["scenario"] == "ddp"
    assert listed[0]["title"] == scenarios.get("ddp").title and listed[0]["total"] is not None
    assert {c["id"] for c in listed[0]["criteria"]} >= {"discipline_order", "findings", "trap"}
    assert listed[0]["url"] == url.removesuffix(".json") and listed[0]["submitted_at"]

    # after the end the link still withdraws (consent outlives the round); then nobody reads it
    assert cand.delete(f"/api/r/{token}/practice").json()["count"] == 0
    assert staff["rv-a"].get(url).status_code == 404 and attached.attached(store, r) == []
    assert practice_events(staff, rid)[-1]["data"] == {"count": 0, "attempt_ids": []}


def test_an_expired_or_wrong_link_attaches_nothing(app, staff, store):
    from datetime import datetime, timedelta, timezone

    from sqlalchemy import update

    cand = browser(app)
    aid = attempt(cand)
    rid, token = new_round(staff)
    with store.write() as db:
        db.execute(update(Round).where(Round.public_id == rid)
                   .values(token_expires_at=datetime.now(timezone.utc) - timedelta(minutes=1)))
    for method, kw in (("get", {}), ("put", {"json": {"attempt_ids": [aid]}}), ("delete", {})):
        assert "expired" in one_line(getattr(cand, method)(f"/api/r/{token}/practice", **kw), 410)
        assert one_line(getattr(cand, method)(f"/api/r/{token[:-2]}xx/practice", **kw), 404)
    with pytest.raises(consent.live.NoRound):
        consent.attach(store, "y" * 200, "someone", [aid])


def test_the_domain_on_both_databases(database_url):
    """Share, open, revoke; attach, list for review, withdraw: the same on SQLite and
    PostgreSQL (row locks, IN lists, deletes), straight through the domain."""
    from app.db.base import upgrade_to_head
    from app.practice import NoAttempt, NotSubmitted, create, submit
    from app.review.access import NotYet
    from app.rounds import live
    from tests.test_rounds import staff_in

    upgrade_to_head(database_url)
    store = store_for(database_url)
    iv, rv = staff_in(store, "iv@x.org", "interviewer"), staff_in(store, "rv@x.org", "reviewer")
    mine, theirs = create(store, "me", "ddp", "0"), create(store, "them", "ddp", "0")
    with pytest.raises(NotSubmitted):
        sharing.share(store, "me", mine.public_id)
    submit(store, "me", mine.public_id, READ)
    submit(store, "them", theirs.public_id, READ)
    first = sharing.token(sharing.share(store, "me", mine.public_id))
    second = sharing.token(sharing.share(store, "me", mine.public_id))
    assert sharing.opened(store, second).id == mine.id
    with pytest.raises(sharing.NotShared):
        sharing.opened(store, first)
    sharing.revoke(store, "me", mine.public_id)
    with pytest.raises(sharing.NotShared):
        sharing.opened(store, second)

    r, token = live.create(store, iv, scenario="ddp", seed="canonical")
    with pytest.raises(NoAttempt):
        consent.attach(store, token, "me", [mine.public_id, theirs.public_id])
    assert consent.attach(store, token, "me", [mine.public_id])["count"] == 1
    assert consent.attach(store, token, "them", [theirs.public_id])["count"] == 2
    assert consent.listing(store, token, "me")["attached_elsewhere"] == 1
    assert [a["id"] for a in attached.attached(store, r)] == [mine.public_id, theirs.public_id]
    with pytest.raises(NotYet):
        attached.attached_attempt(store, rv, r.public_id, mine.public_id)
    assert attached.attached_attempt(store, iv, r.public_id, mine.public_id)[1].id == mine.id
    assert consent.withdraw(store, token)["count"] == 0 and attached.attached(store, r) == []
    with pytest.raises(NoAttempt):
        attached.attached_attempt(store, iv, r.public_id, mine.public_id)
    log = [e for e in live.events(store, r.id) if e["kind"] == "practice"]
    assert [e["data"]["count"] for e in log] == [1, 2, 0] and {e["actor"] for e in log} == {"candidate"}
