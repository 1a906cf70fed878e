"""The declarative base, the engine, and bringing the schema to the migrations' head."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase

from app.config import ROOT


class Base(DeclarativeBase):
    pass


def _ensure_sqlite_dir(url: str) -> None:
    """SQLite creates the file but not its folder (data/ on a fresh clone)."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)


@lru_cache
def engine_for(url: str) -> Engine:
    _ensure_sqlite_dir(url)
    return create_engine(url, future=True)


def upgrade_to_head(url: str) -> None:
    """Run Alembic's migrations programmatically, so `tracedojo serve` needs no extra step."""
    from alembic import command
    from alembic.config import Config

    _ensure_sqlite_dir(url)
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.attributes["database_url"] = url
    command.upgrade(cfg, "head")
