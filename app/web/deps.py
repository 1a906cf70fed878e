"""What routes take from the request: the database store, the browser identity, and the
signed-in staff member (if any)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Request

from app.accounts import NotSignedIn, Staff, service
from app.config import get_settings
from app.db.base import Store, store_for

STAFF_COOKIE = "tracedojo_staff"


def store() -> Store:
    s = get_settings()
    return store_for(s.database_url, s.db_busy_timeout_s)


def owner(request: Request) -> str:
    """The signed browser identity app.web.security put on the request."""
    return request.state.owner


def staff_or_none(request: Request, db: Annotated[Store, Depends(store)]) -> Staff | None:
    """Who is signed in (the session cookie's staff member), or None. A sync dependency:
    the lookup reads the database in the threadpool. Only routes that ask for it pay it."""
    return service.staff_for_token(db, request.cookies.get(STAFF_COOKIE))


def staff(who: Annotated[Staff | None, Depends(staff_or_none)]) -> Staff:
    """Staff only, for JSON and API routes: NotSignedIn (401) when nobody is signed in."""
    if who is None:
        raise NotSignedIn("sign in first")
    return who


class SignInFirst(NotSignedIn):
    """A staff page opened signed out: the app answers 303 to /login?next=<this page>."""

    def __init__(self, next_path: str):
        super().__init__("sign in first")
        self.location = f"/login?next={quote(next_path, safe='/')}"


def staff_page(request: Request, who: Annotated[Staff | None, Depends(staff_or_none)]) -> Staff:
    """Staff only, for pages: signed out, the browser is sent to the sign-in page, which
    brings it back here."""
    if who is None:
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInFirst(path)
    return who


StoreDep = Annotated[Store, Depends(store)]
Owner = Annotated[str, Depends(owner)]
StaffOrNone = Annotated[Staff | None, Depends(staff_or_none)]
StaffDep = Annotated[Staff, Depends(staff)]
StaffPage = Annotated[Staff, Depends(staff_page)]
