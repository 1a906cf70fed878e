"""What every response carries and every request is checked for, as one ASGI middleware
(plain ASGI, so streamed responses pass through untouched):

- state-changing requests from another site (or a sibling site: another port or
  subdomain) are refused with 403 before anything runs, the identity cookie untouched:
  a cross-site form used to get a fresh identity that replaced the victim's;
- the anonymous browser identity (request.state.owner), issued in an HttpOnly,
  SameSite=Lax cookie (Secure behind the `secure_cookies` setting) when a browser has none;
- headers that keep pages out of frames, scripts to our own files, and responses from
  being sniffed into something else.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse, Response

from app.identity import COOKIE, identity_of, new_identity

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
# A write's body, read whole into memory by the routes that take JSON or forms: the
# largest honest one is a 20,000-character narration (~240 KB escaped at worst). Uploads
# stream to disk under their own limits (max_upload_bytes).
MAX_BODY_BYTES = 2**20
STREAMED = ("/api/traces", "/upload")
IDENTITY_MAX_AGE_S = 5 * 365 * 86400

# No inline script anywhere (data travels in <script type="application/json"> blocks,
# which CSP does not run), styles only from files and the CSSOM.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",  # frame-ancestors for browsers that predate it
    "cross-origin-opener-policy": "same-origin",
    # another site cannot load our JSON, timelines or traces as a script, image or media
    "cross-origin-resource-policy": "same-origin",
}


def cross_site(headers: Headers) -> str | None:
    """Why a state-changing request is refused, or None. Browsers send Sec-Fetch-Site
    (and Origin) on every POST/PUT; scripts and curl send neither and are not a browser
    being abused, so they pass."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"cross-site request refused: a {site} page may not change anything here"
    origin = headers.get("origin")
    if origin is not None:
        if origin == "null" or urlsplit(origin).netloc.lower() != headers.get("host", "").lower():
            return "cross-site request refused: the Origin is not this site"
    return None


async def _read_capped(receive) -> list[dict] | None:
    """A body sent without Content-Length (chunked), read here up to MAX_BODY_BYTES: its
    messages to hand on, or None past the limit."""
    messages, seen = [], 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages
        seen += len(message.get("body", b""))
        if seen > MAX_BODY_BYTES:
            return None
        if not message.get("more_body", False):
            return messages


def _replay(messages: list[dict], receive):
    """The body's messages as read, then the connection's own (a disconnect, later)."""
    async def replay():
        return messages.pop(0) if messages else await receive()
    return replay


class SecurityMiddleware:
    def __init__(self, app, secure_cookies: bool = False):
        self.app = app
        self.secure_cookies = secure_cookies

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        if scope["method"] not in SAFE_METHODS and (why := cross_site(headers)):
            return await JSONResponse({"error": why}, 403, headers=HEADERS)(scope, receive, send)
        if scope["method"] not in SAFE_METHODS and not scope["path"].startswith(STREAMED):
            length = headers.get("content-length")
            if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
                return await JSONResponse({"error": f"the body is over {MAX_BODY_BYTES // 1024} KiB"}, 413,
                                          headers=HEADERS)(scope, receive, send)
            if length is None:
                messages = await _read_capped(receive)
                if messages is None:
                    return await JSONResponse({"error": f"the body is over {MAX_BODY_BYTES // 1024} KiB"}, 413,
                                              headers=HEADERS)(scope, receive, send)
                receive = _replay(messages, receive)
        owner = identity_of(cookie_parser(headers.get("cookie", "")).get(COOKIE))
        fresh = None
        if owner is None:
            owner, fresh = new_identity()
            # no cookie for static files, nor for a request another site made (it carries no
            # SameSite=Lax cookie, so a browser that has one would be handed a new identity)
            if scope["path"].startswith("/static/") or headers.get("sec-fetch-site") in ("cross-site", "same-site"):
                fresh = None
        scope.setdefault("state", {})["owner"] = owner

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                for k, v in HEADERS.items():
                    if k not in out:
                        out[k] = v
                if fresh:
                    out.append("set-cookie", self._cookie(fresh))
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _cookie(self, value: str) -> str:
        r = Response()
        r.set_cookie(COOKIE, value, max_age=IDENTITY_MAX_AGE_S, httponly=True, samesite="lax",
                     secure=self.secure_cookies)
        return r.headers["set-cookie"]
