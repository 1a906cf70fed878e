"""What routes take from the request: the database store and the browser identity."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.config import get_settings
from app.db.base import Store, store_for


def store() -> Store:
    s = get_settings()
    return store_for(s.database_url, s.db_busy_timeout_s)


def owner(request: Request) -> str:
    """The signed browser identity app.web.security put on the request."""
    return request.state.owner


StoreDep = Annotated[Store, Depends(store)]
Owner = Annotated[str, Depends(owner)]
