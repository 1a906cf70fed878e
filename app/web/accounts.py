"""Staff sign-in and teams: /login and /logout (form fields or JSON), /me.json, a team's
admin page with its invites, and the invite link's page. Each page has its JSON twin.

The session lives in the `tracedojo_staff` cookie (HttpOnly, SameSite=Lax, Secure behind
`secure_cookies`), whose value is a random token the server holds only as a hash. Routes
that check a password are sync functions: FastAPI runs them in its threadpool, so the
~50 ms Argon2 verify never holds the event loop (the body is read by an async
dependency first).
"""

from __future__ import annotations

import json
from typing import Annotated, NamedTuple
from urllib.parse import parse_qsl, urlsplit

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from app.accounts import (AccessDenied, AccountError, InviteExpired, InviteUsed, LoginFailed, NoInvite,
                          NotSignedIn, TooManyAttempts, service)
from app.config import get_settings
from app.web.deps import STAFF_COOKIE, SignInFirst, StaffDep, StaffOrNone, StaffPage, StoreDep
from app.web.templates import templates

router = APIRouter()

# The accounts' errors and their statuses, most specific first (app.web.main's STATUS takes them).
STATUS = [
    (LoginFailed, 401), (TooManyAttempts, 429), (NoInvite, 404), (InviteUsed, 409), (InviteExpired, 410),
    (AccountError, 400), (AccessDenied, 403), (NotSignedIn, 401),
]
DEFAULT_NEXT = "/rounds"
MAX_BODY_BYTES = 16 * 1024  # an email, a password of at most 1024 characters, a path
NO_STORE = {"Cache-Control": "no-store"}  # pages and answers that carry a token or a password form


def status_of(exc: Exception) -> int:
    return next(s for cls, s in STATUS if isinstance(exc, cls))


def sign_in_first(request: Request, exc: SignInFirst) -> Response:
    """A staff page opened signed out: to the sign-in page, and back after."""
    return RedirectResponse(exc.location, 303)


# -- request bodies: form fields or JSON -----------------------------------------------------

class Body(NamedTuple):
    data: dict
    form: bool  # sent by an HTML form: answer with a redirect or a page, not JSON


async def read_body(request: Request) -> Body:
    """The fields of a form post or a JSON object, read (at most 16 KiB) before the sync
    route runs in the threadpool."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise HTTPException(413, f"the body is over {MAX_BODY_BYTES} bytes")
    if ctype == "application/x-www-form-urlencoded":
        try:
            data = dict(parse_qsl(raw.decode(), keep_blank_values=True, max_num_fields=20))
        except (UnicodeDecodeError, ValueError):
            raise HTTPException(400, "the form's fields could not be read") from None
        return Body(data, True)
    if ctype == "application/json" or (not ctype and not raw):
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            raise HTTPException(400, "the body is not valid JSON") from None
        if not isinstance(data, dict):
            raise HTTPException(400, "the body must be a JSON object")
        for k, v in data.items():
            if isinstance(v, str):
                try:
                    v.encode()
                except UnicodeEncodeError:
                    raise HTTPException(400, f"{k[:40]}: not valid Unicode (a lone surrogate)") from None
        return Body(data, False)
    raise HTTPException(415, "send form fields (application/x-www-form-urlencoded) or JSON")


BodyDep = Annotated[Body, Depends(read_body)]


def _field(body: Body, name: str) -> str:
    value = body.data.get(name)
    if value is None or value == "":
        raise AccountError(f"{name} is required")
    if not isinstance(value, str):
        raise AccountError(f"{name} must be a string")
    return value


def _ip(request: Request) -> str:
    return request.client.host if request.client else ""


def safe_next(value) -> str:
    """Where to go after signing in: a path on this site, or /rounds. Never another site:
    not `//host` or `/\\host` (browsers read both as a host), nor a scheme or control
    characters."""
    if (not isinstance(value, str) or not value.startswith("/") or value.startswith("//") or "\\" in value
            or len(value) > 2000 or any(ord(c) <= 32 or ord(c) == 127 for c in value)):
        return DEFAULT_NEXT
    parts = urlsplit(value)
    return DEFAULT_NEXT if parts.scheme or parts.netloc else value


def _set_cookie(response: Response, token: str) -> None:
    response.set_cookie(STAFF_COOKIE, token, max_age=int(service.SESSION_ABSOLUTE.total_seconds()), path="/",
                        httponly=True, samesite="lax", secure=get_settings().secure_cookies)


def _clear_cookie(response: Response) -> None:
    response.delete_cookie(STAFF_COOKIE, path="/", httponly=True, samesite="lax",
                           secure=get_settings().secure_cookies)


def _signed_in(request: Request, db, token: str, response: Response) -> Response:
    """The new session's cookie on `response`; the browser's previous session, if any, ends."""
    old = request.cookies.get(STAFF_COOKIE)
    if old and old != token:
        service.logout(db, old)
    _set_cookie(response, token)
    response.headers.update(NO_STORE)
    return response


# -- signing in and out ------------------------------------------------------------------------

def _login(next_path: str, who=None, email: str = "", error: str | None = None) -> dict:
    return {"action": "POST /login (form fields, or JSON {email, password}; next: where to go after)",
            "fields": [{"name": "email", "type": "email", "label": "Email", "required": True},
                       {"name": "password", "type": "password", "label": "Password", "required": True},
                       {"name": "next", "type": "hidden", "value": next_path}],
            "next": next_path, "signed_in": service.describe(who) if who else None,
            "email": email, "error": error}


@router.get("/login.json")
def login_json(who: StaffOrNone, next: str | None = None):
    return _login(safe_next(next), who)


@router.get("/login", include_in_schema=False)
def login_page(request: Request, who: StaffOrNone, next: str | None = None):
    return templates.TemplateResponse(request, "login.html", _login(safe_next(next), who), headers=NO_STORE)


@router.post("/login")
def login(request: Request, db: StoreDep, body: BodyDep):
    """Sign in: form fields (303 to `next`) or JSON `{email, password}` (200 `{email, teams}`);
    both set the session cookie."""
    next_path = safe_next(body.data.get("next"))
    try:
        token, who = service.login(db, _field(body, "email"), _field(body, "password"), _ip(request))
    except AccountError as e:
        if not body.form:
            raise
        email = body.data.get("email") if isinstance(body.data.get("email"), str) else ""
        return templates.TemplateResponse(request, "login.html", _login(next_path, None, email[:254], str(e)),
                                          status_code=status_of(e), headers={**NO_STORE, **getattr(e, "headers", {})})
    response = RedirectResponse(next_path, 303) if body.form else JSONResponse(service.describe(who))
    return _signed_in(request, db, token, response)


@router.post("/logout")
def logout(request: Request, db: StoreDep, body: BodyDep):
    """End this browser's session on the server and drop the cookie: 303 to / for a form,
    200 JSON otherwise."""
    service.logout(db, request.cookies.get(STAFF_COOKIE))
    response = RedirectResponse("/", 303) if body.form else JSONResponse({"signed_out": True})
    _clear_cookie(response)
    return response


@router.get("/me.json")
def me(who: StaffDep):
    return service.describe(who)


# -- a team's admin page and its invites -----------------------------------------------------

def _team(db, who, slug: str) -> dict:
    team_id = service.require(who, slug, "admin")
    return {**service.members(db, team_id),
            "invite": {"action": f"POST /api/teams/{slug}/invites",
                       "fields": [{"name": "email", "type": "email", "required": True},
                                  {"name": "role", "type": "select", "options": list(service.ROLES)}]}}


def _invite_url(request: Request, token: str) -> str:
    return str(request.base_url).rstrip("/") + f"/invite/{token}"


# Declared before the page: "/teams/x.json" also matches "/teams/{slug}".
@router.get("/teams/{slug}.json")
def team_json(slug: str, db: StoreDep, who: StaffDep):
    return _team(db, who, slug)


@router.get("/teams/{slug}", include_in_schema=False)
def team_page(slug: str, request: Request, db: StoreDep, who: StaffPage):
    return templates.TemplateResponse(request, "team.html", {**_team(db, who, slug), "me": service.describe(who)})


@router.post("/api/teams/{slug}/invites", status_code=201)
def create_invite(slug: str, request: Request, db: StoreDep, who: StaffDep, body: BodyDep):
    """An invite to the team (admins of that team only): 201 `{invite_url, expires_at}`. The
    link is shown this once; the server keeps only its hash. A form post gets the team's
    page back with the link on it."""
    team_id = service.require(who, slug, "admin")
    try:
        token = service.invite(db, who, team_id, _field(body, "email"), _field(body, "role"))
    except AccountError as e:
        if not body.form:
            raise
        return templates.TemplateResponse(request, "team.html", {**_team(db, who, slug), "me": service.describe(who),
                                                                 "error": str(e), "draft": body.data},
                                          status_code=status_of(e))
    info = service.invite_info(db, token)
    made = {"invite_url": _invite_url(request, token), "expires_at": info["expires_at"], "email": info["email"],
            "role": info["role"], "team": info["team"]["slug"]}
    if body.form:
        return templates.TemplateResponse(request, "team.html", {**_team(db, who, slug), "me": service.describe(who),
                                                                 "made": made}, status_code=201, headers=NO_STORE)
    return JSONResponse(made, 201, headers=NO_STORE)


# -- the invite link ---------------------------------------------------------------------------

def _invite(db, token: str) -> dict:
    info = service.invite_info(db, token)
    return {**info, "action": "POST this URL (form field, or JSON {password})",
            "fields": [{"name": "password", "type": "password", "required": True,
                        "minlength": service.passwords.MIN_CHARS, "maxlength": service.passwords.MAX_CHARS,
                        "label": "Your password" if info["has_account"] else "Choose a password"}]}


@router.get("/invite/{token}.json")
def invite_json(token: str, db: StoreDep):
    return JSONResponse(_invite(db, token), headers=NO_STORE)


@router.get("/invite/{token}", include_in_schema=False)
def invite_page(token: str, request: Request, db: StoreDep):
    return templates.TemplateResponse(request, "invite.html", _invite(db, token), headers=NO_STORE)


@router.post("/invite/{token}")
def accept_invite(token: str, request: Request, db: StoreDep, body: BodyDep):
    """Accept: the account is made (or, for an email with one, joins the team), signed in;
    303 to /rounds for a form, 201 `{email, teams}` for JSON."""
    try:
        password = _field(body, "password")
        if body.form and "confirm" in body.data and body.data["confirm"] != password:
            raise AccountError("the two passwords differ")
        session, who = service.accept_invite(db, token, password, _ip(request))
    except (AccountError, AccessDenied) as e:
        if not body.form or isinstance(e, (NoInvite, InviteUsed, InviteExpired)):
            raise
        return templates.TemplateResponse(request, "invite.html", {**_invite(db, token), "error": str(e)},
                                          status_code=status_of(e), headers={**NO_STORE, **getattr(e, "headers", {})})
    response = RedirectResponse(DEFAULT_NEXT, 303) if body.form else JSONResponse(service.describe(who), 201)
    return _signed_in(request, db, session, response)
