"""Alembic environment. The URL: the app's settings when the app runs the migrations
(app.db.base.upgrade_to_head), else DATABASE_URL, else alembic.ini's SQLite default."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import engine_from_config, pool

import app.db.models  # noqa: F401  (the models register their tables on Base.metadata)
import app.db.staff  # noqa: F401
from app.db.base import Base

config = context.config
url = config.attributes.get("database_url") or os.environ.get("DATABASE_URL") or config.get_main_option("sqlalchemy.url")
target_metadata = Base.metadata


def run_offline() -> None:
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    section = config.get_section(config.config_ini_section) or {}
    section["sqlalchemy.url"] = url
    engine = engine_from_config(section, prefix="sqlalchemy.", poolclass=pool.NullPool)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
