"""The declarative base, the engine, transactions that hold, and bringing the schema to the
migrations' head once, safely, whichever process starts first.

A write that answers 2xx is stored: every write runs in `Store.write()`, which commits
before the caller builds its response, and anything that stops the commit (a lock held
past the busy timeout, a read-only or vanished database file, a server gone) surfaces as
`StoreUnavailable` with a one-line reason (HTTP 503), never as a silent success.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import lru_cache
from urllib.parse import quote
from pathlib import Path

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Session
from sqlalchemy.pool import NullPool

from app.config import ROOT


class Base(DeclarativeBase):
    pass


class StoreUnavailable(RuntimeError):
    """The database cannot take the read or write now; the message says why (HTTP 503)."""


class DatabaseMissing(RuntimeError):
    """The database is empty where one existed before: refuse to start on it."""


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL, or None (another database, or in memory)."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


@lru_cache
def engine_for(url: str, busy_timeout_s: float = 5.0) -> Engine:
    path = sqlite_path(url)
    if path is None:
        # pre_ping: a PostgreSQL restart drops pooled connections; find out before using one.
        # Kept: as many connections as the threads that use them (anyio's limiter: 40, plus
        # the live rounds' event writer and a margin); at SQLAlchemy's 5 + 10 a burst of live
        # writes opened and closed a connection (a PostgreSQL process) per request past the
        # fifth: 5,277 in 60 s in `python -m bench live`.
        return create_engine(url, pool_pre_ping=True, pool_size=40, max_overflow=10)
    path.parent.mkdir(parents=True, exist_ok=True)

    def _open() -> sqlite3.Connection:
        # mode=rw: a connection never creates the file. sqlite3's default does, so after the
        # file was removed under a running server any new connection (the live log tail's
        # next read, a pool refill) silently made an empty database in its place, and the next
        # write failed on "no such table" instead of saying the file is gone. The database is
        # created by prepare_database's migration, with an engine of its own.
        if not path.exists():
            raise StoreUnavailable(f"the database file {path} is gone; restore it and restart the server")
        return sqlite3.connect(f"file:{quote(str(path))}?mode=rw", uri=True, timeout=busy_timeout_s,
                               check_same_thread=False)

    engine = create_engine(url, creator=_open)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, record) -> None:
        # SQLAlchemy emits BEGIN itself (below), so the driver's own transaction handling is off.
        dbapi_conn.isolation_level = None
        # WAL: readers never wait for the writer; FULL: a commit is on disk before it returns.
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute("PRAGMA synchronous=FULL")
        dbapi_conn.execute("PRAGMA foreign_keys=ON")
        # Which file this connection opened: a file removed or replaced under a running
        # server would otherwise keep taking writes into an unlinked inode.
        record.info["inode"] = _inode(path)

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:
        write = conn.get_execution_options().get("tracedojo_write", False)
        if write:
            _check_writable(path, conn.connection.info.get("inode"))
        # IMMEDIATE takes the write lock up front (waiting up to the busy timeout): a
        # deferred transaction that reads and then writes fails at once with "database is
        # locked" when another writer got in between, whatever the timeout.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _check_writable(path: Path, opened: tuple[int, int] | None) -> None:
    now = _inode(path)
    if now is None:
        raise StoreUnavailable(f"the database file {path} is gone; restore it and restart the server")
    if opened is not None and now != opened:
        raise StoreUnavailable(f"the database file {path} was replaced while the server ran; restart the server")
    # Permission bits, not os.access: root may write anything, but a file made read-only
    # on purpose (a backup in progress, a frozen copy) must not take writes.
    if not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(path, os.W_OK):
        raise StoreUnavailable(f"the database file {path} is read-only")


def _reason(e: BaseException) -> str:
    """One line a person can act on, from a driver error."""
    msg = str(getattr(e, "orig", None) or e).strip().splitlines()[0][:200]
    if "locked" in msg or "busy" in msg:
        return f"the database is busy (another writer holds its lock): {msg}"
    if "readonly" in msg or "read-only" in msg:
        return f"the database is read-only: {msg}"
    return f"the database is unavailable: {msg}"


_local_writers: dict[str, threading.Lock] = {}


class Store:
    """Sessions on one database: `read()` for pages, `write()` for changes."""

    def __init__(self, url: str, busy_timeout_s: float = 5.0):
        self.url = url
        self.busy_timeout_s = busy_timeout_s
        self.engine = engine_for(url, busy_timeout_s)
        self._writer = self.engine.execution_options(tracedojo_write=True)
        # SQLite takes one writer at a time: this process's writers queue on a lock of their
        # own instead of each holding a pooled connection while SQLite's busy handler sleeps
        # and retries (1-100 ms naps: a late-comer often wins, an unlucky one waits out the
        # timeout). Other processes still meet the busy handler.
        path = sqlite_path(url)
        self._local = _local_writers.setdefault(str(path), threading.Lock()) if path else None

    @contextmanager
    def read(self) -> Iterator[Session]:
        try:
            # closing (not rolling back) ends the transaction and leaves the loaded objects
            # usable after the block
            with Session(self.engine, expire_on_commit=False) as db:
                yield db
        except DBAPIError as e:
            raise StoreUnavailable(_reason(e)) from None

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A transaction that holds the write lock (SQLite) from its first statement and
        commits on leaving the block: the caller answers only after it is stored."""
        if self._local is not None and not self._local.acquire(timeout=self.busy_timeout_s):
            raise StoreUnavailable("the database is busy (this process's other writers held it past the busy "
                                   "timeout)")
        try:
            with Session(self._writer, expire_on_commit=False) as db:
                yield db
                db.commit()
        except DBAPIError as e:
            raise StoreUnavailable(_reason(e)) from None
        finally:
            if self._local is not None:
                self._local.release()

    def problem(self) -> str | None:
        """Why the database cannot take writes now (for /readyz), or None."""
        path = sqlite_path(self.url)
        try:
            if path is not None:
                if not path.exists():
                    return f"the database file {path} is gone"
                _check_writable(path, None)
            with self.engine.connect() as conn:
                have = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            if have != head_revision():
                return f"the schema is at {have}, not the migrations' head {head_revision()}"
            # takes the write lock and gives it back, waiting a quarter second, not the busy timeout
            with store_for(self.url, 0.25).write() as db:
                db.execute(text("SELECT 1"))
        except StoreUnavailable as e:
            return str(e)
        except SQLAlchemyError as e:
            return _reason(e)
        return None


@lru_cache
def store_for(url: str, busy_timeout_s: float = 5.0) -> Store:
    return Store(url, busy_timeout_s)


# -- the schema: migrations, once, and never onto a lost database ------------------------

def _alembic_config(url: str):
    from alembic.config import Config

    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.attributes["database_url"] = url
    return cfg


@lru_cache
def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_alembic_config("sqlite://")).get_current_head()


def upgrade_to_head(url: str) -> None:
    """Run Alembic's migrations programmatically, so `tracedojo serve` needs no extra step."""
    from alembic import command

    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(_alembic_config(url), "head")


def marker_path(url: str, data_dir: Path) -> Path:
    """Where the record that this database once held Trace Dojo's schema lives: beside a
    SQLite file (so deleting the file alone is noticed), else in the data folder."""
    path = sqlite_path(url)
    if path is not None:
        return path.with_name(path.name + ".created")
    u = make_url(url)
    ident = hashlib.sha256(u.render_as_string(hide_password=True).encode()).hexdigest()[:16]
    return Path(data_dir) / f"database-{ident}.created"


def _has_schema(url: str) -> bool:
    path = sqlite_path(url)
    if path is not None and not path.exists():
        return False  # and do not create the file by connecting to it
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return inspect(conn).has_table("alembic_version")
    finally:
        engine.dispose()


@contextmanager
def _migration_lock(url: str, data_dir: Path) -> Iterator[None]:
    """One process migrates at a time: a file lock among the workers of one host, and on
    PostgreSQL an advisory lock among hosts too (two fresh workers once raced to create
    alembic_version and one crashed)."""
    lock_dir = sqlite_path(url).parent if sqlite_path(url) else Path(data_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / ".tracedojo-migrate.lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            if make_url(url).get_backend_name() == "postgresql":
                engine = create_engine(url, poolclass=NullPool)
                try:
                    # the lock is the session's: it goes when this connection closes, even on a crash
                    with engine.connect() as conn:
                        conn.execute(text("SELECT pg_advisory_lock(7271)"))  # 7271: Trace Dojo's migration lock
                        yield
                finally:
                    engine.dispose()
            else:
                yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def prepare_database(url: str, data_dir: Path, create: bool = False) -> None:
    """Bring the database to the migrations' head, unless it is empty where one existed
    before (its marker is there): then DatabaseMissing, unless `create` says start anew."""
    with _migration_lock(url, data_dir):
        marker = marker_path(url, data_dir)
        if marker.exists() and not create and not _has_schema(url):
            where = sqlite_path(url) or make_url(url).render_as_string(hide_password=True)
            raise DatabaseMissing(
                f"the database {where} is empty or missing, but held Trace Dojo's data before "
                f"(created {marker.read_text().strip() or 'earlier'}); restore it, or start a new one "
                f"with `tracedojo serve --create-db` (TRACEDOJO_CREATE_DB=1)")
        upgrade_to_head(url)
        if not marker.exists() or create:
            marker.parent.mkdir(parents=True, exist_ok=True)
            tmp = marker.with_name(marker.name + f".{os.getpid()}.tmp")
            tmp.write_text(datetime.now(timezone.utc).isoformat(timespec="seconds") + "\n")
            os.replace(tmp, marker)
