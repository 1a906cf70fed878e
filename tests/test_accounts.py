"""Staff accounts: Argon2id passwords, signing in by form and JSON, the sign-in limit held
in the database (so two workers share it), sessions that end on the server, invites used
once even when raced, who may invite, where a sign-in may send the browser, the cookie's
flags, and `tracedojo user add`. Tests that touch the database run on SQLite and PostgreSQL."""

from __future__ import annotations

import inspect
import os
import pty
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from app.accounts import (AccessDenied, AccountError, InviteUsed, LoginFailed, TooManyAttempts, passwords,
                          service)
from app.config import ROOT, get_settings
from app.db.base import store_for
from app.db.staff import Invite, LoginFailure, Membership, StaffSession, User
from app.identity import _signer
from app.web.main import create_app

PW = "correct horse battery"
SITE = "http://testserver"


def make_app(database_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("TRACEDOJO_SECRET_KEY", "test-secret")
    get_settings.cache_clear()
    _signer.cache_clear()
    return create_app()


@pytest.fixture(autouse=True)
def _forget_settings():
    yield
    # the caches would otherwise hand this test's database to whichever test asks next
    get_settings.cache_clear()
    _signer.cache_clear()


@pytest.fixture
def app(database_url, monkeypatch):
    return make_app(database_url, monkeypatch)


@pytest.fixture
def store(app, database_url):
    return store_for(database_url, get_settings().db_busy_timeout_s)


@pytest.fixture
def clock(monkeypatch):
    """Move the accounts' clock: clock.shift(hours=13)."""
    class Clock:
        offset = timedelta()

        def shift(self, **kw):
            self.offset += timedelta(**kw)

    c = Clock()
    real = service.now
    monkeypatch.setattr(service, "now", lambda: real() + c.offset)
    return c


def client(app, **kw) -> TestClient:
    return TestClient(app, follow_redirects=False, **kw)


def sign_in(app, email, password=PW) -> TestClient:
    c = client(app)
    r = c.post("/login", json={"email": email, "password": password})
    assert r.status_code == 200, r.text
    return c


def team(store, slug="acme", **people) -> None:
    """people: email=role."""
    for email, role in people.items():
        service.add_user(store, email.replace("_", "@") + ".org", PW, role, slug)


# -- passwords -------------------------------------------------------------------------------

def test_passwords_are_argon2id_with_a_length_rule():
    h = passwords.hash_password("0123456789")
    assert h.startswith("$argon2id$")
    assert passwords.verify(h, "0123456789") and not passwords.verify(h, "0123456788")
    assert not passwords.verify(None, "0123456789")  # no such user: still a verify, still False
    assert not passwords.verify(h, "x" * 5000)
    for bad in ("012345678", "x" * 1025, None):
        with pytest.raises(passwords.BadPassword):
            passwords.hash_password(bad)
    assert passwords.upgraded(h, "0123456789") is None


def test_a_hash_under_old_parameters_is_replaced_at_sign_in(app, store):
    from argon2 import PasswordHasher

    team(store, ann_x="admin")
    old = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash(PW)
    with store.write() as db:
        db.execute(update(User).values(password_hash=old))
    sign_in(app, "ann@x.org")
    with store.read() as db:
        now_hash = db.scalar(select(User.password_hash))
    assert now_hash != old and now_hash.startswith("$argon2id$v=19$m=19456,t=2,p=1$")
    assert passwords.verify(now_hash, PW)


def test_the_password_check_runs_off_the_event_loop():
    """Routes that verify a password are sync functions: FastAPI runs them in its threadpool."""
    from app.web import accounts

    for route in (accounts.login, accounts.accept_invite):
        assert not inspect.iscoroutinefunction(route)


# -- signing in ------------------------------------------------------------------------------

def test_sign_in_by_json_and_by_form(app, store):
    team(store, ann_x="admin")
    team(store, "beta", ann_x="reviewer")
    c = client(app)
    assert c.get("/me.json").status_code == 401
    r = c.post("/login", json={"email": " Ann@X.org ", "password": PW})
    assert r.status_code == 200
    assert r.json() == {"email": "ann@x.org", "teams": [{"slug": "acme", "role": "admin"},
                                                        {"slug": "beta", "role": "reviewer"}]}
    assert c.get("/me.json").json() == r.json()

    f = client(app)
    r = f.post("/login", data={"email": "ann@x.org", "password": PW, "next": "/teams/acme?tab=1"})
    assert r.status_code == 303 and r.headers["location"] == "/teams/acme?tab=1"
    assert f.get("/me.json").json()["email"] == "ann@x.org"
    r = client(app).post("/login", data={"email": "ann@x.org", "password": PW})
    assert r.headers["location"] == "/rounds"

    page = client(app).get("/login?next=/teams/acme")
    assert page.status_code == 200 and 'name="next" value="/teams/acme"' in page.text
    twin = client(app).get("/login.json?next=/teams/acme").json()
    assert [f["name"] for f in twin["fields"]] == ["email", "password", "next"] and twin["next"] == "/teams/acme"


def test_a_wrong_password_and_an_unknown_email_get_the_same_answer(app, store):
    team(store, ann_x="admin")
    wrong = client(app).post("/login", json={"email": "ann@x.org", "password": "not the password"})
    nobody = client(app).post("/login", json={"email": "zed@x.org", "password": "not the password"})
    assert wrong.status_code == nobody.status_code == 401
    assert wrong.json() == nobody.json() == {"error": "wrong email or password"}
    assert "tracedojo_staff" not in wrong.headers.get("set-cookie", "")
    form = client(app).post("/login", data={"email": "zed@x.org", "password": "nope", "next": "/x"})
    assert form.status_code == 401 and "wrong email or password" in form.text and 'value="zed@x.org"' in form.text
    missing = client(app).post("/login", json={"email": "ann@x.org"})
    assert missing.status_code == 400 and missing.json() == {"error": "password is required"}


def test_a_cross_site_sign_in_is_refused(app, store):
    team(store, ann_x="admin")
    r = client(app).post("/login", data={"email": "ann@x.org", "password": PW},
                         headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403 and "cross-site" in r.json()["error"]
    assert "tracedojo_staff" not in r.headers.get("set-cookie", "")
    r = client(app).post("/login", json={"email": "ann@x.org", "password": PW},
                         headers={"Origin": SITE, "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 200


def test_the_limit_holds_across_two_workers(app, store, clock):
    """Five failures for one email, spread over two app instances on the same database,
    and the sixth attempt is refused on either, even with the right password."""
    team(store, ann_x="admin", bob_x="admin")
    one, two = client(app), client(create_app())
    for i in range(5):
        r = (one, two)[i % 2].post("/login", json={"email": "ann@x.org", "password": f"guess number {i}"})
        assert r.status_code == 401
    for c in (one, two):
        r = c.post("/login", json={"email": "ann@x.org", "password": PW})
        assert r.status_code == 429 and "too many" in r.json()["error"]
        assert 0 < int(r.headers["retry-after"]) <= 15 * 60
    form = two.post("/login", data={"email": "ann@x.org", "password": PW})
    assert form.status_code == 429 and form.headers["retry-after"] and "too many" in form.text
    assert one.post("/login", json={"email": "bob@x.org", "password": PW}).status_code == 200  # another email
    clock.shift(minutes=15, seconds=1)
    assert two.post("/login", json={"email": "ann@x.org", "password": PW}).status_code == 200
    with store.read() as db:  # success clears the email's count; old rows were pruned
        assert db.scalar(select(func.count()).select_from(LoginFailure)) == 0


def test_an_unknown_email_is_limited_the_same_way(app, store):
    for i in range(5):
        with pytest.raises(LoginFailed):
            service.login(store, "ghost@x.org", f"guess number {i}", "10.0.0.1")
    with pytest.raises(TooManyAttempts) as e:
        service.login(store, "ghost@x.org", "guess number 6", "10.0.0.2")
    assert 0 < e.value.retry_after_s <= 900


def test_one_address_trying_many_emails_is_limited(app, store):
    with store.write() as db:  # 29 failures already, each for another email
        db.add_all(LoginFailure(email=f"u{i}@x.org", ip="10.9.9.9", at=service.now()) for i in range(29))
    with pytest.raises(LoginFailed):
        service.login(store, "u99@x.org", "guess number 1", "10.9.9.9")
    with pytest.raises(TooManyAttempts):
        service.login(store, "u100@x.org", "guess number 1", "10.9.9.9")
    with pytest.raises(LoginFailed):  # another address is not held up
        service.login(store, "u100@x.org", "guess number 1", "10.9.9.10")


# -- sessions --------------------------------------------------------------------------------

def test_logout_ends_the_session_on_the_server(app, store):
    team(store, ann_x="admin")
    c = sign_in(app, "ann@x.org")
    token = c.cookies["tracedojo_staff"]
    r = c.post("/logout", data={})
    assert r.status_code in (200, 303)
    assert 'tracedojo_staff=""' in r.headers["set-cookie"] and "Max-Age=0" in r.headers["set-cookie"]
    replay = client(app, cookies={"tracedojo_staff": token})  # the old value, replayed
    assert replay.get("/me.json").status_code == 401
    with store.read() as db:
        assert db.scalar(select(StaffSession.revoked_at)) is not None

    f = sign_in(app, "ann@x.org")
    r = f.post("/logout", data={"x": "1"})  # a form: back to the home page
    assert r.status_code == 303 and r.headers["location"] == "/"
    j = sign_in(app, "ann@x.org")
    r = j.post("/logout", json={})
    assert r.status_code == 200 and r.json() == {"signed_out": True}


def test_sessions_slide_when_used_and_end_idle_or_after_a_week(app, store, clock):
    team(store, ann_x="admin")
    c = sign_in(app, "ann@x.org")

    def last_seen():
        with store.read() as db:
            return service._utc(db.scalar(select(StaffSession.last_seen_at)))

    first = last_seen()
    clock.shift(minutes=4)
    assert c.get("/me.json").status_code == 200 and last_seen() == first  # a view within 5 min writes nothing
    clock.shift(minutes=2)
    assert c.get("/me.json").status_code == 200 and last_seen() > first
    for _ in range(15):  # used every 11 hours: alive for 7 days (165 h 6 min here)
        clock.shift(hours=11)
        assert c.get("/me.json").status_code == 200
    clock.shift(hours=11)  # 176 h 6 min: past 7 days since signing in, however recently used
    assert c.get("/me.json").status_code == 401

    idle = sign_in(app, "ann@x.org")
    clock.shift(hours=12, seconds=1)
    assert idle.get("/me.json").status_code == 401


def test_a_session_past_its_expiry_in_the_database_is_refused(app, store):
    team(store, ann_x="admin")
    c = sign_in(app, "ann@x.org")
    with store.write() as db:
        db.execute(update(StaffSession).values(expires_at=datetime.now(timezone.utc) - timedelta(seconds=1)))
    assert c.get("/me.json").status_code == 401


def test_a_disabled_user_is_signed_out_and_cannot_sign_in(app, store):
    team(store, ann_x="admin")
    c = sign_in(app, "ann@x.org")
    assert service.disable_user(store, "ann@x.org")
    assert c.get("/me.json").status_code == 401
    r = client(app).post("/login", json={"email": "ann@x.org", "password": PW})
    assert r.status_code == 401 and r.json()["error"] == "wrong email or password"


def test_revoke_sessions_signs_out_every_browser(app, store):
    team(store, ann_x="admin")
    a, b = sign_in(app, "ann@x.org"), sign_in(app, "ann@x.org")
    me = a.get("/me.json").json()
    uid = service.staff_for_token(store, a.cookies["tracedojo_staff"]).user_id
    assert service.revoke_sessions(store, uid) == 2
    assert a.get("/me.json").status_code == b.get("/me.json").status_code == 401
    assert me["email"] == "ann@x.org"


def test_a_staff_page_signed_out_goes_to_sign_in_and_comes_back(app, store):
    team(store, ann_x="admin")
    r = client(app).get("/teams/acme?x=1")
    assert r.status_code == 303 and r.headers["location"] == "/login?next=/teams/acme%3Fx%3D1"
    c = client(app)
    r = c.post("/login", data={"email": "ann@x.org", "password": PW, "next": "/teams/acme?x=1"})
    assert r.headers["location"] == "/teams/acme?x=1"
    assert c.get("/teams/acme?x=1").status_code == 200
    j = client(app).get("/teams/acme.json")
    assert j.status_code == 401 and j.json() == {"error": "sign in first"}


@pytest.mark.parametrize("target", ["//evil.com", "https://evil.com", "/\\evil.com", "\\\\evil.com", "http:evil.com",
                                    "/\t/evil.com", "javascript:alert(1)", " //evil.com", "evil.com", ""])
def test_sign_in_never_sends_the_browser_off_site(app, store, target):
    team(store, ann_x="admin")
    r = client(app).post("/login", data={"email": "ann@x.org", "password": PW, "next": target})
    assert r.status_code == 303 and r.headers["location"] == "/rounds"
    assert 'value="/rounds"' in client(app).get("/login", params={"next": target}).text


def test_the_cookie_is_httponly_lax_for_the_whole_site_and_secure_behind_the_setting(app, store, monkeypatch):
    team(store, ann_x="admin")
    r = client(app).post("/login", json={"email": "ann@x.org", "password": PW})
    cookie = next(c for c in r.headers.get_list("set-cookie") if c.startswith("tracedojo_staff="))
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie and "Secure" not in cookie
    assert f"Max-Age={7 * 86400}" in cookie
    value = cookie.split(";")[0].split("=", 1)[1]
    assert len(value) >= 43  # 32 random bytes, base64url
    with store.read() as db:  # the database keeps only its hash
        assert db.scalar(select(StaffSession.token_hash)) == service.token_hash(value) != value
    monkeypatch.setenv("TRACEDOJO_SECURE_COOKIES", "1")
    get_settings.cache_clear()
    r = client(app).post("/login", json={"email": "ann@x.org", "password": PW})
    assert "Secure" in next(c for c in r.headers.get_list("set-cookie") if c.startswith("tracedojo_staff="))


def test_anonymous_practice_is_untouched(app):
    r = client(app).get("/practice")
    assert r.status_code == 200 and "tracedojo_id=" in r.headers["set-cookie"]
    assert "tracedojo_staff" not in r.headers["set-cookie"] and 'href="/rounds">Staff</a>' in r.text


# -- teams and invites -----------------------------------------------------------------------

def test_only_the_teams_admins_may_invite(app, store):
    team(store, ann_x="admin", ivy_x="interviewer", rex_x="reviewer")
    team(store, "beta", bea_x="admin")
    body = {"email": "new@x.org", "role": "interviewer"}
    r = sign_in(app, "ann@x.org").post("/api/teams/acme/invites", json=body)
    assert r.status_code == 201 and r.json()["invite_url"].startswith(f"{SITE}/invite/") and r.json()["expires_at"]
    assert r.headers["cache-control"] == "no-store"
    for who in ("ivy@x.org", "rex@x.org", "bea@x.org"):
        c = sign_in(app, who)
        r = c.post("/api/teams/acme/invites", json=body)
        assert r.status_code == 403 and set(r.json()) == {"error"}, who
        assert c.get("/teams/acme.json").status_code == 403
    r = client(app).post("/api/teams/acme/invites", json=body)
    assert r.status_code == 401 and r.json() == {"error": "sign in first"}
    assert sign_in(app, "bea@x.org").post("/api/teams/nope/invites", json=body).status_code == 403
    ivy = service.staff_for_token(store, sign_in(app, "ivy@x.org").cookies["tracedojo_staff"])
    with pytest.raises(AccessDenied):  # the domain checks too, whatever the caller
        service.invite(store, ivy, ivy.team_id("acme"), "new@x.org", "admin")


def test_bad_invites_are_refused_with_a_reason(app, store):
    team(store, ann_x="admin", ivy_x="interviewer")
    c = sign_in(app, "ann@x.org")
    for body, word in [({"email": "nope", "role": "admin"}, "email"), ({"email": "a@x.org", "role": "boss"}, "role"),
                       ({"email": "ivy@x.org", "role": "admin"}, "already")]:
        r = c.post("/api/teams/acme/invites", json=body)
        assert r.status_code == 400 and word in r.json()["error"], r.json()


def test_the_team_page_lists_members_and_open_invites(app, store):
    team(store, ann_x="admin", ivy_x="interviewer")
    c = sign_in(app, "ann@x.org")
    c.post("/api/teams/acme/invites", json={"email": "new@x.org", "role": "reviewer"})
    data = c.get("/teams/acme.json").json()
    assert [(m["email"], m["role"]) for m in data["members"]] == [("ann@x.org", "admin"), ("ivy@x.org", "interviewer")]
    assert [(i["email"], i["role"], i["by"]) for i in data["invites"]] == [("new@x.org", "reviewer", "ann@x.org")]
    page = c.get("/teams/acme")
    assert page.status_code == 200 and "ivy@x.org" in page.text and "new@x.org" in page.text
    made = c.post("/api/teams/acme/invites", data={"email": "other@x.org", "role": "admin"})  # no script: a form
    assert made.status_code == 201 and "/invite/" in made.text and "other@x.org" in made.text


def invite_token(app, store, email="new@x.org", role="interviewer") -> str:
    team(store, ann_x="admin")
    r = sign_in(app, "ann@x.org").post("/api/teams/acme/invites", json={"email": email, "role": role})
    return r.json()["invite_url"].rsplit("/", 1)[1]


def test_an_invite_makes_one_account_and_signs_it_in(app, store):
    token = invite_token(app, store)
    info = client(app).get(f"/invite/{token}.json").json()
    assert (info["email"], info["role"], info["team"]["slug"], info["has_account"]) == \
        ("new@x.org", "interviewer", "acme", False)
    page = client(app).get(f"/invite/{token}")
    assert page.status_code == 200 and "acme" in page.text and "interviewer" in page.text
    c = client(app)
    short = c.post(f"/invite/{token}", data={"password": "short", "confirm": "short"})
    assert short.status_code == 400 and "at least 10" in short.text
    differ = c.post(f"/invite/{token}", data={"password": "0123456789", "confirm": "0123456789x"})
    assert differ.status_code == 400 and "differ" in differ.text
    r = c.post(f"/invite/{token}", data={"password": "0123456789", "confirm": "0123456789"})
    assert r.status_code == 303 and r.headers["location"] == "/rounds"
    assert c.get("/me.json").json() == {"email": "new@x.org", "teams": [{"slug": "acme", "role": "interviewer"}]}
    again = client(app).post(f"/invite/{token}", json={"password": "0123456789"})
    assert again.status_code == 409 and set(again.json()) == {"error"}
    assert client(app).get(f"/invite/{token}").status_code == 409
    assert client(app).get("/invite/not-a-token").status_code == 404
    assert sign_in(app, "new@x.org", "0123456789").get("/me.json").status_code == 200


def test_a_new_invite_replaces_the_open_one(app, store):
    old = invite_token(app, store, "new@x.org", "reviewer")
    admin = sign_in(app, "ann@x.org")
    new = admin.post("/api/teams/acme/invites", json={"email": "new@x.org", "role": "admin"}).json()["invite_url"]
    assert client(app).get(f"/invite/{old}.json").status_code == 404
    assert [i["role"] for i in admin.get("/teams/acme.json").json()["invites"]] == ["admin"]
    assert client(app).post(new.replace(SITE, ""), json={"password": "0123456789"}).status_code == 201
    assert admin.get("/teams/acme.json").json()["invites"] == []


def test_an_expired_invite_is_gone(app, store, clock):
    token = invite_token(app, store)
    clock.shift(days=7, seconds=1)
    r = client(app).post(f"/invite/{token}", json={"password": "0123456789"})
    assert r.status_code == 410 and "expired" in r.json()["error"]
    assert client(app).get(f"/invite/{token}.json").status_code == 410


def test_racing_accepts_of_one_invite_make_exactly_one_account(app, store):
    token = invite_token(app, store)
    results, start = [], threading.Barrier(6)

    def accept(i):
        start.wait()
        try:
            results.append(service.accept_invite(store, token, f"password number {i}")[1].email)
        except InviteUsed:
            results.append("used")

    threads = [threading.Thread(target=accept, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == ["new@x.org"] + ["used"] * 5
    with store.read() as db:
        assert db.scalar(select(func.count()).select_from(User).where(User.email == "new@x.org")) == 1
        assert db.scalar(select(func.count()).select_from(Membership).join(User).where(User.email == "new@x.org")) == 1
        assert db.scalar(select(func.count()).select_from(StaffSession).join(User)
                         .where(User.email == "new@x.org")) == 1
        assert db.scalar(select(Invite.used_at)) is not None


def test_an_invite_to_an_existing_account_needs_its_password(app, store):
    """An admin of one team must not take over someone's account by inviting their email."""
    team(store, "beta", bea_x="interviewer")
    token = invite_token(app, store, "bea@x.org", "admin")
    assert client(app).get(f"/invite/{token}.json").json()["has_account"] is True
    r = client(app).post(f"/invite/{token}", json={"password": "a new password of mine"})
    assert r.status_code == 401
    assert client(app).get(f"/invite/{token}.json").status_code == 200  # still open
    sign_in(app, "bea@x.org")  # the password is unchanged
    r = client(app).post(f"/invite/{token}", json={"password": PW})
    assert r.status_code == 201
    assert r.json()["teams"] == [{"slug": "acme", "role": "admin"}, {"slug": "beta", "role": "interviewer"}]


def test_add_user_validates_and_updates(app, store):
    for args, word in [(("bad", PW, "admin", "acme"), "email"), (("a@x.org", PW, "boss", "acme"), "role"),
                       (("a@x.org", PW, "admin", "-acme"), "team"), (("a@x.org", PW, "admin", "a" * 65), "team"),
                       (("a@x.org", "short", "admin", "acme"), "10"), (("a@x.org", None, "admin", "acme"), "password")]:
        with pytest.raises(AccountError, match=word):
            service.add_user(store, *args)
    made = service.add_user(store, "A@X.org", PW, "admin", "Acme")
    assert made.email == "a@x.org" and list(made.teams.values()) == ["acme"]
    assert made.role(made.team_id("acme")) == "admin" and made.changes == ("new team acme", "new user a@x.org",
                                                                         "joined acme")
    again = service.add_user(store, "a@x.org", None, "reviewer", "acme")  # no password: the old one stays
    assert again.changes == ("was admin",) and again.role(again.team_id("acme")) == "reviewer"
    sign_in(app, "a@x.org")


# -- the command line ------------------------------------------------------------------------

def cli(database_url, *args, password: str | None = "0123456789", **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRACEDOJO_PASSWORD"}
    env["DATABASE_URL"] = database_url
    if password is not None:
        env["TRACEDOJO_PASSWORD"] = password
    return subprocess.run([sys.executable, "-m", "app", "user", "add", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120, stdin=subprocess.DEVNULL, **kw)


def test_cli_user_add_on_a_fresh_database(database_url, monkeypatch):
    out = cli(database_url, "Ann@X.org", "--role", "admin", "--team", "Acme")  # no tables yet: it migrates
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1 and "ann@x.org" in out.stdout and "new team acme" in out.stdout
    app = make_app(database_url, monkeypatch)
    sign_in(app, "ann@x.org", "0123456789")
    out = cli(database_url, "ann@x.org", "--role", "reviewer", "--team", "beta", password=None)
    assert out.returncode == 0 and "joined beta" in out.stdout and "password" not in out.stdout, out.stderr
    sign_in(app, "ann@x.org", "0123456789")  # an existing account keeps its password unless given one
    out = cli(database_url, "ann@x.org", "--role", "admin", "--team", "beta", password="a new password")
    assert out.returncode == 0 and "password set, was reviewer" in out.stdout
    sign_in(app, "ann@x.org", "a new password")


@pytest.mark.parametrize("args,password,word", [
    (("ann@x.org", "--role", "boss", "--team", "acme"), "0123456789", "role"),
    (("ann.x.org", "--role", "admin", "--team", "acme"), "0123456789", "email"),
    (("ann@x.org", "--role", "admin", "--team", "a b"), "0123456789", "team"),
    (("ann@x.org", "--role", "admin", "--team", "acme"), "short", "10 characters"),
    (("ann@x.org", "--role", "admin", "--team", "acme"), None, "TRACEDOJO_PASSWORD"),  # no terminal to ask at
])
def test_cli_user_add_refuses_bad_input_in_one_line(tmp_path, args, password, word):
    out = cli(f"sqlite:///{tmp_path / 't.db'}", *args, password=password)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and word in out.stderr, out.stderr


def _at_a_terminal(database_url: str, answers: list[str]) -> tuple[int, str]:
    """`tracedojo user add` on a pseudo-terminal, typing `answers` at its prompts."""
    env = {k: v for k, v in os.environ.items() if k != "TRACEDOJO_PASSWORD"}
    env["DATABASE_URL"] = database_url
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own with the pty as its terminal
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "-m", "app", "user", "add", "ann@x.org", "--role", "admin",
                                   "--team", "acme"], env)
    seen, deadline = b"", time.monotonic() + 60
    for i, answer in enumerate(answers):
        while seen.count(b": ") <= i and time.monotonic() < deadline:
            seen += os.read(fd, 1024)
        os.write(fd, answer.encode() + b"\n")
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 1024)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), seen.decode(errors="replace")


def test_cli_user_add_asks_twice_at_a_terminal(tmp_path):
    url = f"sqlite:///{tmp_path / 't.db'}"
    code, said = _at_a_terminal(url, ["0123456789", "0123456780"])
    assert code == 2 and "differ" in said
    code, said = _at_a_terminal(url, ["0123456789", "0123456789"])
    assert code == 0 and "new user ann@x.org" in said and "0123456789" not in said  # never echoed
