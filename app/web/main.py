"""The FastAPI application: its routers, the security middleware, readiness, and one error
shape for every route: `{"error": "one line"}` with the status that fits."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app import __version__, instances, practice
from app.accounts import AccessDenied, AccountError, NotSignedIn
from app.config import ROOT, get_settings
from app.db.base import StoreUnavailable, prepare_database
from app.scenario import InstanceError
from app.scoring.score import NarrationError, NarrationTooLong
from app.rounds import candidates, live, questions, wakeup
from app.web import accounts as accounts_pages
from app.web import before_after
from app.web import attempts, calibration, candidate, explorer, exports, practice as practice_pages, review
from app.web import round_practice, rounds, traces
from app.web.deps import SignInFirst, store
from app.web.security import SecurityMiddleware

log = logging.getLogger("tracedojo")
MAX_ERROR_CHARS = 300  # an error may quote input; never kilobytes of it


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    message = " ".join(str(message).split())  # one line
    if len(message) > MAX_ERROR_CHARS:
        message = message[:MAX_ERROR_CHARS - 1] + "…"
    return JSONResponse({"error": message}, status_code=status, headers=headers)


# Domain errors and the status each one means, most specific first.
STATUS = [
    (practice.NoAttempt, 404), (instances.UnknownScenario, 404), (practice.AttemptClosed, 409),
    (practice.NotSubmitted, 409),
    (live.NoRound, 404), (questions.NoQuestion, 404), (candidates.NoCandidate, 404), (live.RoundClosed, 409),
    (live.LinkExpired, 410),
    (NarrationTooLong, 413), (NarrationError, 400), (InstanceError, 400),
    *accounts_pages.STATUS,
]


@asynccontextmanager
async def _live_feed(app: FastAPI):
    """Live rounds' wake-ups for this worker: its event loop, and the feed from other
    workers (PostgreSQL LISTEN, or SQLite's log tail), started with the app."""
    wakeup.HUB.bind(asyncio.get_running_loop())
    feed = wakeup.start_feed(store(), get_settings().live_poll_s)
    try:
        yield
    finally:
        if feed is not None:
            feed.stop()


def create_app(migrate: bool = True) -> FastAPI:
    settings = get_settings()
    if migrate:
        prepare_database(settings.database_url, settings.data_dir, settings.create_db)
    app = FastAPI(title="Trace Dojo", version=__version__, lifespan=_live_feed)
    app.mount("/static", StaticFiles(directory=str(ROOT / "static")), name="static")
    # the live round's routes first: a candidate's page posts several times a second, and
    # routes are matched in order (no other router has a path under /r/ or /api/r/)
    app.include_router(candidate.router)
    app.include_router(rounds.router)
    app.include_router(review.router)
    app.include_router(round_practice.router)
    app.include_router(before_after.router)
    app.include_router(explorer.router)
    app.include_router(traces.router)
    app.include_router(attempts.router)
    app.include_router(practice_pages.router)
    app.include_router(accounts_pages.router)
    app.include_router(calibration.router)
    app.include_router(exports.router)
    app.add_middleware(SecurityMiddleware, secure_cookies=settings.secure_cookies)

    @app.get("/healthz", include_in_schema=False)
    def healthz():
        """The process answers (liveness)."""
        return {"ok": True}

    @app.get("/readyz")
    def readyz():
        """Whether this worker can take writes now, and if not, why (a 503 with the reason:
        a read-only, locked, missing or unmigrated database)."""
        problem = store().problem()
        if problem:
            return error(503, problem, {"Retry-After": "5"})
        return {"ready": True, "database": settings.database_url.split("://")[0]}

    @app.exception_handler(StarletteHTTPException)
    def http_error(request: Request, exc: StarletteHTTPException):
        detail = exc.detail if exc.status_code != 404 or exc.detail != "Not Found" else \
            f"no such page: {request.url.path[:120]}"
        return error(exc.status_code, detail, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    def bad_body(request: Request, exc: RequestValidationError):
        """One line naming the field, like every other error here."""
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body") or "body"
        return error(422, f"{where}: {first.get('msg', 'invalid')}")

    def domain_error(request: Request, exc: Exception):
        return error(next(s for cls, s in STATUS if isinstance(exc, cls)), str(exc), getattr(exc, "headers", None))

    for domain in (InstanceError, NarrationError):  # two roots of the domain's one-line errors
        app.add_exception_handler(domain, domain_error)
    for domain in (AccountError, AccessDenied, NotSignedIn):  # and the accounts'
        app.add_exception_handler(domain, domain_error)
    app.add_exception_handler(SignInFirst, accounts_pages.sign_in_first)  # pages: 303 to /login, not a 401

    @app.exception_handler(StoreUnavailable)
    def unavailable(request: Request, exc: StoreUnavailable):
        """Nothing was stored; the page keeps its local draft and tries again."""
        return error(503, f"not saved: {exc}", {"Retry-After": "2"})

    @app.exception_handler(DBAPIError)
    def database_error(request: Request, exc: DBAPIError):
        return error(503, f"not saved: the database failed: {str(exc.orig).splitlines()[0][:160]}", {"Retry-After": "2"})

    @app.exception_handler(Exception)
    def crash(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error(500, f"internal error ({type(exc).__name__}); the server logged it")

    return app
