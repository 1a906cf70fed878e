"""Authorization, route by route: every route of the app (enumerated from create_app(), so a
route added without a row below fails), walked with every role, against a table of what
each role should be able to do. The table says what the policy is, not what the code
happens to do: where they differ, the test fails.

The roles: anonymous (no cookies at all; on its own practice attempt's routes, only the
identity cookie the app hands every browser, which owns the attempt), the candidate (a browser holding the link of round R1 and
nothing else), team A's interviewer, reviewer and admin, and team B's interviewer. Every
fixture is made through the app's own paths: users with `service.add_user`, sign-in with
POST /login, rounds with POST /api/rounds as team A's interviewer, questions, invites and
practice attempts through their routes. A write that changes what later requests see
(end, lock, submit, a new link, archive, accepting an invite, signing out) runs on a
throwaway object or session of its own, so the walk's order changes no outcome.

A cell is OK (2xx, or a 3xx anywhere but the sign-in page), LOGIN (303 to /login?next=
this page: a staff page opened signed out) or the exact refusal status.
"""

from __future__ import annotations

import gzip
import html
import itertools
import json
from contextlib import ExitStack
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from starlette.routing import Mount

import scenarios
from app.accounts import service
from app.config import get_settings
from app.db.base import store_for
from app.identity import _signer
from app.rounds import live
from tests.conftest import sqlite_app

try:  # FastAPI keeps included routers lazily; this flattens them
    from fastapi.routing import iter_route_contexts
except ImportError:  # an older FastAPI: app.routes is flat already
    def iter_route_contexts(routes):
        return iter(routes)

ANON, CAND, IV_A, IV_B, RV_A, AD_A = "anonymous", "candidate", "interviewer-a", "interviewer-b", "reviewer-a", "admin-a"
ROLES = (ANON, CAND, IV_A, IV_B, RV_A, AD_A)
OK = "ok"  # 2xx, or a 3xx that is not to the sign-in page
LOGIN = "login"  # 303 to /login?next=<this page>


def policy(anonymous, candidate, interviewer_a, interviewer_b, reviewer_a, admin_a) -> dict:
    return dict(zip(ROLES, (anonymous, candidate, interviewer_a, interviewer_b, reviewer_a, admin_a)))


#                        anonymous candidate iv A  iv B  rev A admin A
OPEN = policy(           OK,       OK,       OK,   OK,   OK,   OK)  # no account needed
LINK = policy(           OK,       OK,       OK,   OK,   OK,   OK)  # whoever holds the link's token (OPEN's
#                                                                    twin: the secrecy tests skip OPEN rows only)
STAFF = policy(          401,      401,      OK,   OK,   OK,   OK)  # any staff; each sees their own teams only
STAFF_PAGE = policy(     LOGIN,    LOGIN,    OK,   OK,   OK,   OK)
RUN = policy(            401,      401,      OK,   OK,   403,  OK)  # interviewers and admins, in their own team
RUN_A = policy(          401,      401,      OK,   404,  403,  OK)  # team A's runners; team B cannot tell it exists
RUN_A_PAGE = policy(     LOGIN,    LOGIN,    OK,   404,  403,  OK)
SCORE_A = policy(        401,      401,      OK,   404,  OK,   OK)  # team A's raters: runners and reviewers
# Review: R1 is still running, so a reviewer is told to wait for its end (409); its
# interviewer and the team's admins review it as it goes; team B cannot tell it exists.
REVIEW_LIVE_A = policy(  401,      401,      OK,   404,  409,  OK)
REVIEW_LIVE_A_PAGE = policy(LOGIN, LOGIN,    OK,   404,  409,  OK)
MEMBER_A = policy(       401,      401,      OK,   404,  OK,   OK)  # any member of team A (a candidate record)
MEMBER_A_PAGE = policy(  LOGIN,    LOGIN,    OK,   404,  OK,   OK)
CURATE_A = policy(       401,      401,      403,  404,  OK,   OK)  # team A's reviewers and admins (gold, anchors)
COMPARE_A = policy(      401,      401,      403,  404,  OK,   OK)
COMPARE_A_PAGE = policy( LOGIN,    LOGIN,    403,  404,  OK,   OK)
REVIEW_A = policy(       401,      401,      OK,   404,  OK,   OK)  # who may review team A's ended round (its
REVIEW_A_PAGE = policy(  LOGIN,    LOGIN,    OK,   404,  OK,   OK)  # interviewer, reviewers, admins: for_review)
CALIBRATE = policy(      401,      401,      403,  403,  OK,   OK)  # a team's reviewers and admins (B's interviewer
CALIBRATE_PAGE = policy( LOGIN,    LOGIN,    403,  403,  OK,   OK)  # is refused in B: the page rates interviewers)
ADMIN_A = policy(        401,      401,      403,  403,  403,  OK)  # team A's admins (a team not yours: 403,
ADMIN_A_PAGE = policy(   LOGIN,    LOGIN,    403,  403,  403,  OK)  # the same answer as for no such team)

# "METHOD path" -> who may. Path parameters are filled per role by `_request` below:
# {rid} = R1 (team A's live round; the ended round for a scorecard; an ended round with the
# candidate's practice attached for its practice pages; a fresh one for other writes),
# {token} = R1's candidate token (a fresh round's for writes), an open invite's or a shared
# report's link, {aid} = the role's own practice attempt (its submitted one for a report; a
# fresh submitted one to share; under a round, the attempt the candidate attached),
# {slug} = team A, {qid} = a team A question,
# {sid}/{seed} = ddp/0, {src} = 0, {tool_id} = nsys-kern-sum, {part} = hints, {tid} = an upload,
# {table}.{fmt} = scorecards.csv.
TABLE: dict[str, dict] = {
    # The site's public face and the open explorer: public seeds, their keys public by design.
    "GET /openapi.json": OPEN, "GET /docs": OPEN, "GET /docs/oauth2-redirect": OPEN, "GET /redoc": OPEN,
    "GET /static/{path}": OPEN, "GET /healthz": OPEN, "GET /readyz": OPEN,
    "GET /": OPEN, "GET /index.json": OPEN, "GET /surprise": OPEN,
    "GET /scenarios/{sid}/download": OPEN,
    "GET /scenarios/{sid}/{seed}.json": OPEN, "GET /scenarios/{sid}/{seed}": OPEN,
    "GET /api/scenarios/{sid}/{seed}/timeline.bin": OPEN, "GET /api/scenarios/{sid}/{seed}/slices/{src}": OPEN,
    "GET /scenarios/{sid}/{seed}/trace.json": OPEN, "GET /scenarios/{sid}/{seed}/trace.json.gz": OPEN,
    "GET /scenarios/{sid}/{seed}/key.json": OPEN, "GET /api/scenarios/{sid}/{seed}/tools/{tool_id}": OPEN,
    "POST /api/scenarios/{sid}/{seed}/score": OPEN, "POST /api/scenarios/{sid}/{seed}/sql": OPEN,
    "GET /scenarios/{sid}/{seed}/fidelity": OPEN, "GET /scenarios/{sid}/{seed}/fidelity.json": OPEN,
    # the trace after the fix over the trace as it is: the explorer's own fixed build, as open as it
    "GET /scenarios/{sid}/{seed}/before-after": OPEN, "GET /scenarios/{sid}/{seed}/before-after.json": OPEN,

    # Uploads: anonymous practice, open to all; an upload is reached by its id (its content's hash).
    "GET /upload": OPEN, "POST /upload": OPEN, "POST /api/traces": OPEN,
    "GET /traces/{tid}.json": OPEN, "GET /traces/{tid}": OPEN, "GET /api/traces/{tid}/timeline.bin": OPEN,
    "GET /api/traces/{tid}/slices/{src}": OPEN, "POST /api/traces/{tid}/sql": OPEN,

    # Practice: open to all; a browser reaches its own attempts only (test_attempts_are_their_browsers_own).
    "GET /practice": OPEN, "GET /practice.json": OPEN, "POST /practice": OPEN,
    "GET /practice/{aid}.json": OPEN, "GET /practice/{aid}": OPEN,
    "GET /practice/{aid}/timeline.bin": OPEN, "GET /practice/{aid}/slices/{src}": OPEN,
    "GET /practice/{aid}/trace.json": OPEN, "GET /practice/{aid}/trace.json.gz": OPEN,
    "GET /practice/{aid}/tools/{tool_id}": OPEN, "POST /practice/{aid}/sql": OPEN, "GET /practice/{aid}/report.json": OPEN,
    "GET /practice/{aid}/report": OPEN, "POST /practice/{aid}/next": OPEN,
    "GET /attempts": OPEN, "GET /attempts.json": OPEN,
    "POST /api/attempts": OPEN, "GET /api/attempts": OPEN, "GET /api/attempts/{aid}": OPEN,
    "PUT /api/attempts/{aid}/narration": OPEN, "POST /api/attempts/{aid}/narration-beacon": OPEN,
    "PUT /api/attempts/{aid}/marks": OPEN, "POST /api/attempts/{aid}/runs": OPEN,
    "POST /api/attempts/{aid}/submit": OPEN,
    # Sharing a report: its owner's browser only, like every route of an attempt.
    "POST /api/attempts/{aid}/share": OPEN, "DELETE /api/attempts/{aid}/share": OPEN,
    # A shared report: whoever holds its link (the link is the credential, as for LINK rows).
    # OPEN, not LINK: a practice report names its own case and key by design, and the walks
    # below look for R1's key, which a report of the same case on another seed partly shares.
    "GET /shared/{token}.json": OPEN, "GET /shared/{token}": OPEN,

    # Signing in and out: open to all.
    "GET /login": OPEN, "GET /login.json": OPEN, "POST /login": OPEN, "POST /logout": OPEN,
    "GET /me.json": STAFF,

    # A team's admin page and its invites: that team's admins only.
    "GET /teams/{slug}.json": ADMIN_A, "GET /teams/{slug}": ADMIN_A_PAGE, "POST /api/teams/{slug}/invites": ADMIN_A,
    # An invite link: whoever holds it (it is the credential; accepting it signs that browser in).
    "GET /invite/{token}.json": LINK, "GET /invite/{token}": LINK, "POST /invite/{token}": LINK,

    # Lists: any staff member, of their own teams' rounds and questions (reviewers included).
    "GET /rounds.json": STAFF, "GET /rounds": STAFF_PAGE, "GET /questions.json": STAFF, "GET /questions": STAFF_PAGE,
    # Creating rounds and questions: interviewers and admins, in a team of their own (B's in B).
    "POST /api/rounds": RUN, "POST /api/questions": RUN,
    # Team A's question and round R1: team A's interviewers and admins. Not a reviewer: the
    # console holds the key, the hint ladder and the live read; nor team B, to whom R1 is
    # as absent as a round that does not exist.
    "POST /api/questions/{qid}/archive": RUN_A,
    "POST /api/rounds/{rid}/link": RUN_A,
    "GET /rounds/{rid}.json": RUN_A, "GET /rounds/{rid}": RUN_A_PAGE, "GET /rounds/{rid}/events": RUN_A,
    "GET /rounds/{rid}/timeline.bin": RUN_A, "GET /rounds/{rid}/slices/{src}": RUN_A,
    "GET /rounds/{rid}/trace.json": RUN_A, "GET /rounds/{rid}/tools/{tool_id}": RUN_A,
    "GET /rounds/{rid}/parts/{part}": RUN_A,
    "POST /api/rounds/{rid}/hints": RUN_A, "POST /api/rounds/{rid}/notes": RUN_A,
    "POST /api/rounds/{rid}/phase": RUN_A, "POST /api/rounds/{rid}/lock": RUN_A,
    "POST /api/rounds/{rid}/end": RUN_A,
    # A practice report the candidate attached to the round: whoever may review the round.
    "GET /rounds/{rid}/practice/{aid}.json": REVIEW_A, "GET /rounds/{rid}/practice/{aid}": REVIEW_A_PAGE,
    # A scorecard on an ended round: anyone who rates for team A (reviewers from the replay).
    "PUT /api/rounds/{rid}/scorecard": SCORE_A,
    # The team's calibration: its reviewers and admins; not its interviewers, whom it rates.
    "GET /calibration.json": CALIBRATE, "GET /calibration": CALIBRATE_PAGE,

    # Review of R1 (app/review/access.py): its interviewer and team A's admins; reviewers once it ends.
    "GET /rounds/{rid}/review.json": REVIEW_LIVE_A, "GET /rounds/{rid}/review": REVIEW_LIVE_A_PAGE,
    "GET /rounds/{rid}/review/timeline.bin": REVIEW_LIVE_A, "GET /rounds/{rid}/review/slices/{src}": REVIEW_LIVE_A,
    "GET /rounds/{rid}/review/tools/{tool_id}": REVIEW_LIVE_A,
    "GET /rounds/{rid}/review/parts/scorecards": REVIEW_LIVE_A,
    # The gold set and anchors, on the ended round: team A's reviewers and admins.
    "POST /api/rounds/{rid}/gold": CURATE_A, "PUT /api/rounds/{rid}/anchors/{criterion}": CURATE_A,
    "DELETE /api/rounds/{rid}/anchors/{criterion}": CURATE_A,
    # Candidates: any staff member lists their own teams'; R1's candidate is team A's.
    "GET /candidates.json": STAFF, "GET /candidates": STAFF_PAGE,
    "GET /candidates/{code}.json": MEMBER_A, "GET /candidates/{code}": MEMBER_A_PAGE,
    # Candidates side by side on team A's question: its reviewers and admins.
    "GET /compare.json": COMPARE_A, "GET /compare": COMPARE_A_PAGE,
    # The team's blind rule for scorecards: its admins.
    "PUT /api/teams/{slug}/scorecard-visibility": ADMIN_A,

    # The candidate's side: the link's token is the credential, whoever's browser holds it
    # (staff who open the link see what the candidate sees, nothing more).
    "GET /r/{token}.json": LINK, "GET /r/{token}": LINK, "GET /r/{token}/events": LINK,
    "GET /r/{token}/status": LINK, "GET /r/{token}/timeline.bin": LINK, "GET /r/{token}/slices/{src}": LINK,
    "GET /r/{token}/trace.json": LINK, "GET /r/{token}/trace.json.gz": LINK, "GET /r/{token}/tools/{tool_id}": LINK,
    "POST /r/{token}/sql": LINK,
    "PUT /api/r/{token}/narration": LINK, "POST /api/r/{token}/narration-beacon": LINK,
    "PUT /api/r/{token}/marks": LINK, "POST /api/r/{token}/runs": LINK, "POST /api/r/{token}/events": LINK,
    "POST /api/r/{token}/submit": LINK,
    # The candidate's practice history shown to the round's team: the link's holder, with
    # their own browser's attempts (test_practice_share.py: another browser's are refused).
    "GET /api/r/{token}/practice": LINK, "PUT /api/r/{token}/practice": LINK, "DELETE /api/r/{token}/practice": LINK,

    # A team's whole record as files: its admins only. It holds every scorecard, past the
    # team's blind-scorecard rule (app/review/access.py), and every candidate's name;
    # reviewers see the team's agreement as aggregates on the calibration page.
    "GET /api/export/{table}.{fmt}": ADMIN_A,
}

PW = "correct horse battery"
EMAILS = {IV_A: "iv@a.org", RV_A: "rv@a.org", AD_A: "admin@a.org", IV_B: "iv@b.org"}
STAFF_ROLES = tuple(EMAILS)
STREAMS = {"GET /rounds/{rid}/events", "GET /r/{token}/events"}  # text/event-stream: status and type, then close
# Routes whose call replaces or ends the browser's own session: run in a browser of their own.
OWN_SESSION = {"POST /login", "POST /logout", "POST /invite/{token}"}
SMALL_TRACE = json.dumps({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]})
NEW_ROUND = {"scenario": "ddp", "seed": "canonical"}
_serial = itertools.count()


def _unique_email() -> str:
    return f"new{next(_serial)}@a.org"


# Valid bodies: a refusal is about who asks, not what they sent.
BODIES = {
    "POST /api/scenarios/{sid}/{seed}/score": {"json": {"narration": "One step is 620 ms; the GPU idles 180 ms."}},
    "POST /upload": {"files": {"trace": ("small.json", SMALL_TRACE, "application/json")}},
    "POST /api/traces": {"files": {"trace": ("small.json", SMALL_TRACE, "application/json")}},
    "POST /api/traces/{tid}/sql": {"json": {"query": "SELECT count(*) AS n FROM slice"}},
    "POST /api/scenarios/{sid}/{seed}/sql": {"json": {"query": "SELECT count(*) AS n FROM slice"}},
    "POST /practice/{aid}/sql": {"json": {"query": "SELECT count(*) AS n FROM slice"}},
    "POST /r/{token}/sql": {"json": {"query": "SELECT count(*) AS n FROM slice"}},
    "POST /practice": {"data": {"scenario": "ddp", "seed": "0"}},
    "POST /api/attempts": {"json": {"scenario": "ddp", "seed": "0"}},
    "PUT /api/attempts/{aid}/narration": {"json": {"narration": "The step is"}},
    "POST /api/attempts/{aid}/narration-beacon": {"content": "The step is 6", "headers": {"content-type": "text/plain"}},
    "PUT /api/attempts/{aid}/marks": {"json": {"step": {"start_us": 1, "end_us": 2}}},
    "POST /api/attempts/{aid}/runs": {"json": {"tool": "nsys-kern-sum"}},
    "POST /api/attempts/{aid}/submit": {"json": {"narration": "One step is 620 ms."}},
    "POST /login": {"json": {"email": "door@c.org", "password": PW}},
    "POST /logout": {"json": {}},
    "POST /api/teams/{slug}/invites": lambda: {"json": {"email": _unique_email(), "role": "reviewer"}},
    "POST /invite/{token}": {"json": {"password": PW}},
    "POST /api/rounds": {"json": NEW_ROUND},
    "POST /api/questions": {"json": {"title": "A question", "scenario": "ddp", "instance": "canonical"}},
    "POST /api/rounds/{rid}/hints": {"json": {"index": 0}},
    "POST /api/rounds/{rid}/notes": {"json": {"text": "went to the gap first"}},
    "POST /api/rounds/{rid}/phase": {"json": {"phase": "reading"}},
    "POST /api/rounds/{rid}/lock": {"json": {"locked": True}},
    "PUT /api/rounds/{rid}/scorecard": {"json": {"criteria": {c: 3 for c in live.CRITERIA}, "recommendation": 3}},
    "POST /api/rounds/{rid}/gold": {"json": {"gold": True}},
    "PUT /api/rounds/{rid}/anchors/{criterion}": {"json": {"level": 3, "note": "names the gap with its size"}},
    "PUT /api/teams/{slug}/scorecard-visibility": {"json": {"rule": "after_own"}},
    "PUT /api/r/{token}/narration": {"json": {"narration": "One step is"}},
    "POST /api/r/{token}/narration-beacon": {"content": "One step is 6", "headers": {"content-type": "text/plain"}},
    "PUT /api/r/{token}/marks": {"json": {"step": {"start_us": 1, "end_us": 2}}},
    "POST /api/r/{token}/runs": {"json": {"tool": "nsys-kern-sum"}},
    "POST /api/r/{token}/events": {"json": {"kind": "viewport", "start_ns": 0, "end_ns": 1000}},
    "PUT /api/r/{token}/practice": {"json": {"attempt_ids": []}},
}


def app_routes(app) -> list[str]:
    """Every route as "METHOD path" (HEAD goes with GET; a mount is its path + /{path})."""
    out = []
    for rc in iter_route_contexts(app.routes):
        if isinstance(getattr(rc, "original_route", rc), Mount):
            out.append(f"GET {rc.path}/{{path}}")
            continue
        out += [f"{m} {rc.path}" for m in sorted((rc.methods or set()) - {"HEAD"})]
    return out


class World:
    """The app, one browser per role, and the objects the walk opens."""

    def __init__(self, app, clients: dict[str, TestClient]):
        self.app, self.clients = app, clients
        self.store = store_for(get_settings().database_url)

    def new_client(self, role: str | None = None) -> TestClient:
        """A browser of its own; for a staff role, signed in with a session of its own."""
        c = TestClient(self.app, follow_redirects=False)
        if role in EMAILS:
            r = c.post("/login", json={"email": EMAILS[role], "password": PW})
            assert r.status_code == 200, r.text
        return c

    def new_round(self, narrated: bool = False, **body) -> tuple[str, str]:
        """A round of team A made by its interviewer: (public id, candidate token); `narrated`:
        the candidate has said something (an end scores the read, and refuses an empty one)."""
        r = self.clients[IV_A].post("/api/rounds", json={**NEW_ROUND, **body})
        assert r.status_code == 201, r.text
        rid, token = r.json()["id"], r.json()["candidate_url"].removeprefix("/r/")
        if narrated:
            said = self.clients[CAND].put(f"/api/r/{token}/narration", json={"narration": "One step is"})
            assert said.status_code == 200, said.text
        return rid, token

    def ended_round(self) -> str:
        """A round the candidate said something in (the end scores the read), then ended."""
        rid, _ = self.new_round(narrated=True)
        r = self.clients[IV_A].post(f"/api/rounds/{rid}/end")
        assert r.status_code == 200, r.text
        return rid

    def new_question(self) -> int:
        r = self.clients[IV_A].post("/api/questions", json=BODIES["POST /api/questions"]["json"])
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def new_invite(self) -> str:
        r = self.clients[AD_A].post("/api/teams/a/invites", json={"email": _unique_email(), "role": "reviewer"})
        assert r.status_code == 201, r.text
        return r.json()["invite_url"].rsplit("/", 1)[1]

    def new_attempt(self, role: str, submitted: bool = False, scenario: str = "ddp") -> str:
        c = self.clients[role]
        r = c.post("/api/attempts", json={"scenario": scenario, "seed": "0"})
        assert r.status_code == 201, r.text
        aid = r.json()["id"]
        if submitted:
            assert c.post(f"/api/attempts/{aid}/submit", json={"narration": "One step is 620 ms."}).status_code == 200
        return aid

    def round_with_practice(self) -> tuple[str, str]:
        """An ended round of team A to which the candidate attached a submitted practice
        attempt: (round id, attempt id). The attempt is not ddp, R1's case: a ddp report
        holds ddp's seed-independent texts (root cause, fix, trap claims), which the key
        walk below would take for R1's."""
        rid, token = self.new_round(narrated=True)
        aid = self.new_attempt(CAND, submitted=True, scenario="launch-bound")
        r = self.clients[CAND].put(f"/api/r/{token}/practice", json={"attempt_ids": [aid]})
        assert r.status_code == 200 and r.json()["count"] == 1, r.text
        assert self.clients[IV_A].post(f"/api/rounds/{rid}/end").status_code == 200
        return rid, aid

    def shared_link(self) -> str:
        """The token of a shared practice report, from a browser of its own (the walk's
        shares and revokes happen on other attempts)."""
        c = self.new_client()
        aid = c.post("/api/attempts", json={"scenario": "ddp", "seed": "0"}).json()["id"]
        assert c.post(f"/api/attempts/{aid}/submit", json={"narration": "One step is 620 ms."}).status_code == 200
        r = c.post(f"/api/attempts/{aid}/share")
        assert r.status_code == 200, r.text
        return r.json()["url"].removeprefix("/shared/")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    app = sqlite_app(tmp_path_factory, "authz")
    store = store_for(get_settings().database_url)
    for role, email in EMAILS.items():
        service.add_user(store, email, PW, role.split("-")[0], role.split("-")[1])
    service.add_user(store, "door@c.org", PW, "reviewer", "c")  # whose sign-in POST /login tries
    with ExitStack() as stack:
        clients = {role: stack.enter_context(TestClient(app, follow_redirects=False)) for role in ROLES}
        bare = stack.enter_context(TestClient(app, follow_redirects=False))  # anonymous, its jar emptied per call
        for role, email in EMAILS.items():
            assert clients[role].post("/login", json={"email": email, "password": PW}).status_code == 200
        w = World(app, clients)
        w.bare = bare
        w.r1, w.r1_token = w.new_round(scenario="ddp", seed="secret", candidate_name="Ada")
        w.code = clients[IV_A].get(f"/rounds/{w.r1}/review.json").json()["candidate"]["code"]
        w.r2, w.r2_token = w.new_round(scenario="dataloader", seed="canonical")  # the candidate never holds this
        w.ended = w.ended_round()
        w.qid = w.new_question()
        w.invite = w.new_invite()
        w.attempts = {role: (w.new_attempt(role), w.new_attempt(role, submitted=True)) for role in ROLES}
        w.practice_round, w.practice_aid = w.round_with_practice()
        w.shared = w.shared_link()
        up = clients[ANON].post("/api/traces", files={"trace": ("small.json", SMALL_TRACE, "application/json")})
        assert up.status_code == 200, up.text
        w.tid = up.json()["id"]
        yield w
    get_settings.cache_clear()
    _signer.cache_clear()


def _request(w: World, key: str, role: str, **override) -> tuple[TestClient, str, str, dict]:
    """(browser, method, URL, request kwargs) for one cell, on throwaway objects where the
    call would change what later cells see. `override` replaces path values."""
    method, path = key.split(" ", 1)
    write = method != "GET"
    open_aid, done_aid = w.attempts[role]
    values = {"sid": "ddp", "seed": "0", "src": "0", "tool_id": "nsys-kern-sum", "part": "hints", "slug": "a",
              "tid": w.tid, "path": "css/site.css", "criterion": "findings", "code": w.code, "table": "scorecards",
              "fmt": "csv", **override}
    if "{rid}" in path and "rid" not in values:
        ended = path.endswith(("/scorecard", "/gold")) or "/anchors/" in path  # writes that need an ended round
        values["rid"] = (w.ended if ended else w.practice_round if "/practice/" in path
                         else w.new_round(narrated=True)[0] if write else w.r1)
    if "{token}" in path and "token" not in values:
        if path.startswith("/invite/"):
            values["token"] = w.new_invite() if write else w.invite
        elif path.startswith("/shared/"):
            values["token"] = w.shared
        else:
            values["token"] = w.new_round()[1] if write else w.r1_token
    if "{aid}" in path and "aid" not in values:
        values["aid"] = (w.practice_aid if path.startswith("/rounds/") else
                         w.new_attempt(role) if path.endswith("/submit") else
                         w.new_attempt(role, submitted=True) if path.endswith("/share") else
                         done_aid if "/report" in path or path.endswith("/next") else open_aid)
    if "{qid}" in path and "qid" not in values:
        values["qid"] = w.new_question()
    body = BODIES.get(key, {})
    body = body() if callable(body) else body
    client = w.new_client(role) if key in OWN_SESSION else w.clients[role]
    if role == ANON and "{aid}" not in path:
        client = w.bare
        client.cookies.clear()
    url = path.format(**values)
    if path in ("/compare", "/compare.json"):
        url += f"?question={values.get('qid', w.qid)}"
    return client, method, url, body


def outcome(r) -> str | int:
    if 200 <= r.status_code < 300:
        return OK
    if 300 <= r.status_code < 400:
        return LOGIN if r.headers.get("location", "").startswith("/login") else OK
    return r.status_code


def _call(client: TestClient, method: str, url: str, body: dict, stream: bool = False):
    """The response (its body read, unless it is an event stream: then status and headers only)."""
    if stream:
        with client.stream(method, url, **body) as r:
            if r.status_code != 200:
                r.read()
            return r
    return client.request(method, url, **body)


def test_every_route_has_a_row_and_every_row_a_route(world):
    routes = app_routes(world.app)
    missing = [f"route {k} has no row in the authorization table" for k in routes if k not in TABLE]
    stale = [f"row {k} names no route of the app" for k in TABLE if k not in routes]
    assert not missing + stale, "\n".join(missing + stale)
    assert all(set(TABLE[k]) == set(ROLES) for k in TABLE)


@pytest.mark.parametrize("role", ROLES)
def test_every_route_with_every_role(world, role):
    wrong = []
    for key in app_routes(world.app):
        want = TABLE.get(key, {}).get(role)
        if want is None:
            wrong.append(f"{key}: route {key} has no row in the authorization table")
            continue
        client, method, url, body = _request(world, key, role)
        r = _call(client, method, url, body, stream=key in STREAMS)
        got = outcome(r)
        if got != want:
            kind = r.headers.get("content-type", "")
            detail = r.text[:160] if kind.startswith(("application/json", "text/html")) else kind
            wrong.append(f"{key} as {role}: expected {want}, got {got} ({r.status_code} {detail})")
            continue
        if want == LOGIN:
            back = urlsplit(url).path + (f"?{urlsplit(url).query}" if urlsplit(url).query else "")
            assert parse_qs(urlsplit(r.headers["location"]).query)["next"] == [back], (key, r.headers)
        if key in STREAMS and want == OK:
            assert r.headers["content-type"].startswith("text/event-stream"), (key, role, r.headers)
    assert not wrong, f"{len(wrong)} cells differ from the table:\n" + "\n".join(wrong)


# -- the link, the teams and the browsers: each opens its own and nothing else ------------------

LINK_ROUTES = [k for k in TABLE if k.split(" ", 1)[1].startswith(("/r/", "/api/r/"))]
RID_ROUTES = [k for k in TABLE if "{rid}" in k]


def test_a_wrong_retired_or_expired_link_opens_nothing(world):
    """Every route of the link with a token that is not a live round's: 404; an expired
    link: 410. The link's replacement works, R2's public id is no token."""
    from datetime import datetime, timedelta, timezone

    from sqlalchemy import update

    from app.db.staff import Round

    rid, retired = world.new_round(narrated=True)
    fresh = world.clients[IV_A].post(f"/api/rounds/{rid}/link").json()["candidate_url"].removeprefix("/r/")
    old_rid, expired = world.new_round(narrated=True)
    with world.store.write() as db:
        db.execute(update(Round).where(Round.public_id == old_rid)
                   .values(token_expires_at=datetime.now(timezone.utc) - timedelta(minutes=1)))
    tampered = world.r1_token[:-1] + ("A" if world.r1_token[-1] != "A" else "B")
    wrong = []
    for key in LINK_ROUTES:
        for token, want in ((tampered, 404), (retired, 404), (world.r2, 404), (world.r1, 404), ("x" * 43, 404),
                            (expired, 410)):
            client, method, url, body = _request(world, key, CAND, token=token)
            r = _call(client, method, url, body, stream=key in STREAMS)
            if r.status_code != want:
                wrong.append(f"{key} with token {token[:12]}…: expected {want}, got {r.status_code} {r.text[:120]}")
    assert not wrong, "\n".join(wrong)
    assert world.clients[CAND].get(f"/r/{fresh}.json").status_code == 200


def test_the_candidates_token_opens_r1_only(world):
    """The link shows and records R1, not R2 of the same team; as a staff session or a
    round's id it is nothing."""
    c = world.clients[CAND]
    mine, other = c.get(f"/r/{world.r1_token}.json").json(), c.get(f"/r/{world.r2_token}.json").json()
    assert mine["brief"] != other["brief"]
    said = f"marker {next(_serial)}: the step is 620 ms"
    assert c.put(f"/api/r/{world.r1_token}/narration", json={"narration": said}).status_code == 200
    iv = world.clients[IV_A]
    assert iv.get(f"/rounds/{world.r1}.json").json()["state"]["narration"] == said
    assert said not in iv.get(f"/rounds/{world.r2}.json").text
    for key in RID_ROUTES:  # R2's console and actions, asked by the candidate's browser
        _, method, url, body = _request(world, key, CAND, rid=world.r2)
        assert outcome(_call(c, method, url, body, stream=key in STREAMS)) == TABLE[key][CAND], key
    forged = TestClient(world.app, follow_redirects=False, cookies={"tracedojo_staff": world.r1_token})
    for url in ("/me.json", "/rounds.json", f"/rounds/{world.r1}.json", f"/rounds/{world.r2}.json"):
        assert forged.get(url).status_code == 401, url
    assert c.get(f"/rounds/{world.r1_token}.json").status_code == 401


def _same_answer(a, b, *names: str) -> bool:
    """Two refusals that say the same thing once the names asked for are blanked out."""
    def text(r):
        t = r.text
        for n in names:
            t = t.replace(str(n), "X")
        return r.status_code, t
    return text(a) == text(b)


def test_team_b_cannot_tell_that_team_a_has_a_round_or_a_question(world):
    """Team B's interviewer gets for R1 exactly what a made-up id gets, lists none of team
    A's rounds or questions, and cannot make a round in team A or from A's question."""
    b = world.clients[IV_B]
    nobody = "0123456789abcdef"
    for key in RID_ROUTES:
        client, method, url, body = _request(world, key, IV_B)
        rid = url.split("/")[3] if url.startswith("/api/") else url.split("/")[2].removesuffix(".json")
        real = _call(client, method, url, body, stream=key in STREAMS)
        _, method, url, body = _request(world, key, IV_B, rid=nobody)
        made_up = _call(client, method, url, body, stream=key in STREAMS)
        assert real.status_code == 404 and _same_answer(real, made_up, rid, nobody), (key, real.text, made_up.text)
    real = b.post(f"/api/questions/{world.qid}/archive")
    assert real.status_code == 404 and _same_answer(real, b.post("/api/questions/987654/archive"), world.qid, 987654)
    for page in ("/teams/{}.json", "/teams/{}"):
        real, made_up = b.get(page.format("a")), b.get(page.format("no-such-team"))
        assert _same_answer(real, made_up, "'a'", "'no-such-team'"), (page, real.text, made_up.text)
    listed = b.get("/rounds.json").json()["rounds"]
    assert not {r["id"] for r in listed} & {world.r1, world.r2, world.ended}
    bank = b.get("/questions.json").json()
    assert [t["slug"] for t in bank["teams"]] == ["b"] and world.qid not in {q["id"] for q in bank["teams"][0]["questions"]}
    assert b.post("/api/rounds", json={**NEW_ROUND, "team": "a"}).status_code == 404
    assert b.post("/api/rounds", json={"question_id": world.qid}).status_code == 404
    assert b.post("/api/questions", json={**BODIES["POST /api/questions"]["json"], "team": "a"}).status_code == 404


def test_only_a_teams_own_admins_invite_to_it(world):
    """Team A's admin is no admin of team B; an interviewer is no admin of their own team."""
    for role, slug, want in ((AD_A, "b", 403), (IV_B, "b", 403), (AD_A, "a", 201)):
        r = world.clients[role].post(f"/api/teams/{slug}/invites", json={"email": _unique_email(), "role": "admin"})
        assert r.status_code == want, (role, slug, r.text)


def test_a_change_of_role_holds_from_the_next_request(world):
    """Roles are read per request, not kept in the session: an interviewer made a reviewer
    loses the console at once, and gets it back when made an interviewer again."""
    service.add_user(world.store, "flip@a.org", PW, "interviewer", "a")
    c = TestClient(world.app, follow_redirects=False)
    assert c.post("/login", json={"email": "flip@a.org", "password": PW}).status_code == 200
    assert c.get(f"/rounds/{world.r1}.json").status_code == 200
    service.add_user(world.store, "flip@a.org", None, "reviewer", "a")
    assert c.get(f"/rounds/{world.r1}.json").status_code == 403
    assert c.post(f"/api/rounds/{world.new_round()[0]}/end").status_code == 403
    service.add_user(world.store, "flip@a.org", None, "interviewer", "a")
    assert c.get(f"/rounds/{world.r1}.json").status_code == 200


def test_attempts_are_their_browsers_own(world):
    """Every route of a practice attempt, asked by another browser: 404 (an attempt is
    owned by the browser identity that made it; staff accounts change nothing). Staff
    reach an attempt only through a round it is attached to (test_practice_share.py)."""
    wrong = []
    for role, other in zip(ROLES, ROLES[1:] + ROLES[:1]):
        theirs_open, theirs_done = world.attempts[other]
        for key in [k for k in TABLE if "{aid}" in k and "{rid}" not in k]:
            aid = theirs_done if "/report" in key or key.endswith(("/next", "/share")) else theirs_open
            client, method, url, body = _request(world, key, role, aid=aid)
            r = _call(client, method, url, body)
            if r.status_code != 404:
                wrong.append(f"{key} as {role} on {other}'s attempt: expected 404, got {r.status_code}")
    assert not wrong, "\n".join(wrong)


# -- what a browser refused the console can fetch holds no key and no link --------------------

def _text(r) -> str:
    body = r.content
    if body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    return body.decode("utf-8", errors="replace") + " " + r.headers.get("location", "")


def _fetch_all(w: World, role: str, keys: list[str], monkeypatch, every_tool: bool = False) -> dict[str, str]:
    """Every GET of `keys` as `role` sees it, by URL (`every_tool`: each tool's run, not one);
    an event stream read up to its first keep-alive (sent after REREAD_S without news: made
    short here)."""
    from app.web import sse

    monkeypatch.setattr(sse, "REREAD_S", 0.05)
    seen = {}
    for key in keys:
        tools = [{"tool_id": t} for t in _tool_ids()] if "{tool_id}" in key and every_tool else [{}]
        for extra in tools:
            client, method, url, body = _request(w, key, role, **extra)
            if key in STREAMS:
                with client.stream(method, url) as r:
                    buf = b""
                    for chunk in r.iter_bytes():
                        buf += chunk
                        if r.status_code != 200 or b"keep-alive" in buf:
                            break
                seen[url] = buf.decode("utf-8", errors="replace")
            else:
                seen[url] = _text(client.request(method, url, **body))
    return seen


def _forms(secret: str) -> set[str]:
    """A text as a page or a JSON body would carry it."""
    return {secret, html.escape(secret), json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}


def _tool_ids() -> list[str]:
    from app import tools

    return list(tools.TOOLS)


def test_nothing_a_browser_refused_the_console_can_fetch_holds_the_key(world, monkeypatch):
    """The candidate (and anyone else the console refuses: a stranger, a reviewer, another
    team) fetches every GET route that is not the open explorer's, with R1's link where a
    route takes one (the candidate: every tool's run), after a hint went out: R1's model answer, root
    cause, fix, traps and seed never appear, nor, to the candidate and a stranger, the
    scenario's title (staff lists name scenarios: they are no secret to staff)."""
    iv = world.clients[IV_A]
    assert iv.post(f"/api/rounds/{world.r1}/hints", json={"index": 0}).status_code == 200
    seed = iv.get(f"/rounds/{world.r1}.json").json()["round"]["seed"]
    scn = scenarios.get("ddp")
    key = scn.instance(int(seed)).key
    secrets = {"model answer": key["model_answer"], "root cause": key["root_cause"], "fix": key["fix"],
               "confirmation": key["confirmation"], "seed": seed,
               **{f"trap claim {i}": t["claim"] for i, t in enumerate(key["traps"])},
               **{f"trap reason {i}": t["why_wrong"] for i, t in enumerate(key["traps"])}}
    gets = [k for k in TABLE if k.startswith("GET ") and TABLE[k] is not OPEN]
    # The candidate's own practice history names the cases that browser practised (here ddp,
    # R1's case too): its own, not R1's. Only the title is let through, only there; the
    # stranger, who has no practice, is still held to it on that route.
    own_history = f"/api/r/{world.r1_token}/practice"
    leaks = []
    for role in (CAND, ANON, RV_A, IV_B):
        hidden = {**secrets, "scenario title": scn.title} if role in (CAND, ANON) else secrets
        seen = _fetch_all(world, role, gets, monkeypatch, every_tool=role == CAND)
        assert key["brief"] in seen[f"/r/{world.r1_token}.json"] and "hint" in seen[f"/r/{world.r1_token}/events"]
        leaks += [f"{role} {url}: {what}" for url, text in seen.items() for what, s in hidden.items()
                  if any(form in text for form in _forms(s))
                  and not (role == CAND and url == own_history and what == "scenario title")]
    assert not leaks, "\n".join(leaks)


def test_a_round_on_a_built_in_question_keeps_its_key_from_the_candidate(world):
    """The six questions every team starts with must not hand the candidate the key: a
    round on one runs its instance, and if that is the public canonical case, its brief is
    on /index.json and its key at /scenarios/<id>/canonical/key.json, open to all: two GETs
    from the model answer. (A question on a fixed public seed is public by the staff's own
    choice; a built-in one is the default every team is given.)"""
    iv, c = world.clients[IV_A], world.clients[CAND]
    public = {s["brief"]: s["key_url"] for s in c.get("/index.json").json()["scenarios"]}
    found = []
    for q in iv.get("/questions.json").json()["teams"][0]["questions"]:
        if not q["builtin"]:
            continue
        made = iv.post("/api/rounds", json={"question_id": q["id"]})
        assert made.status_code == 201, made.text
        brief = c.get(made.json()["candidate_url"] + ".json").json()["brief"]
        if brief in public:
            answer = c.get(public[brief]).json()["model_answer"]
            found.append(f"built-in question {q['title']!r}: the candidate matches the brief on /index.json and "
                         f"reads {public[brief]}: {answer[:60]!r}…")
    assert not found, "\n".join(found)


def test_no_page_but_the_links_own_shows_the_candidates_token(world, monkeypatch):
    """The token travels once, in POST /api/rounds' answer: no staff page, JSON, stream or
    redirect, for any role, ever carries it (the database keeps only its hash; the open
    explorer and practice know nothing of rounds)."""
    gets = [k for k in TABLE if k.startswith("GET ") and TABLE[k] is not OPEN and k not in LINK_ROUTES]
    leaks = [f"{role} {url}" for role in ROLES for url, text in _fetch_all(world, role, gets, monkeypatch).items()
             if world.r1_token in text]
    assert not leaks, "\n".join(leaks)
