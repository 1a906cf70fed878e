"""PostgreSQL for the tests: `fresh_database()` gives the SQLAlchemy URL of a new, empty database.

The server is the one named by TRACEDOJO_TEST_POSTGRES_URL (a role that may create databases;
the databases made here are dropped at exit), else a private throwaway cluster started on first
use and stopped at exit: initdb into a temporary directory, trust auth, listening on 127.0.0.1 on
a free port and on a unix socket in that directory (under pytest-xdist each worker is a session
of its own, with a cluster of its own). Its binaries come from
TRACEDOJO_TEST_POSTGRES_BIN if set, else PATH, else the newest /usr/lib/postgresql/N/bin (Debian
keeps them off PATH). Where no server can be had the calling test skips, saying what is missing;
under CI=true it fails instead, so a broken setup cannot pass as a row of skips.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, pool

from tests.server import free_port

URL_ENV = "TRACEDOJO_TEST_POSTGRES_URL"
BIN_ENV = "TRACEDOJO_TEST_POSTGRES_BIN"
HOW = f"apt-get install postgresql, or set {URL_ENV} to an existing server"
TOOLS = ("initdb", "pg_ctl", "postgres")


class Unavailable(Exception):
    """Why no PostgreSQL server can be had here."""


# The server's admin URL once there is one, or why there cannot be: decided once per session,
# so that after a failed start the other tests skip at once instead of retrying.
_server: str | Unavailable | None = None


def fresh_database() -> str:
    """A new empty database on the session's server, as a postgresql+psycopg:// URL."""
    admin = _admin_url()
    name = f"tracedojo_test_{uuid.uuid4().hex[:12]}"
    _execute(admin, f'CREATE DATABASE "{name}"')
    if os.environ.get(URL_ENV):  # someone's server: leave it as found. FORCE (PostgreSQL 13+)
        # closes the connections the app's cached engines still hold.
        atexit.register(_execute, admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return make_url(admin).set(database=name).render_as_string(hide_password=False)


def _admin_url() -> str:
    global _server
    if _server is None:
        if os.environ.get(URL_ENV):
            # Named by hand, so a server that cannot be reached is an error, not a skip.
            _server = make_url(os.environ[URL_ENV]).set(drivername="postgresql+psycopg") \
                .render_as_string(hide_password=False)
        else:
            try:
                _server = _start_private_cluster()
            except Unavailable as e:
                _server = e
    if isinstance(_server, Unavailable):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{_server} (CI installs PostgreSQL, so its tests must run there)", pytrace=False)
        pytest.skip(str(_server))
    return _server


def _execute(url: str, sql: str) -> None:
    # CREATE/DROP DATABASE cannot run inside a transaction.
    engine = create_engine(url, isolation_level="AUTOCOMMIT", poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(sql)
    finally:
        engine.dispose()


def _bin_dir() -> Path:
    if os.environ.get(BIN_ENV):
        candidates = [Path(os.environ[BIN_ENV])]
    else:
        on_path = shutil.which("pg_ctl")
        debian = sorted((d for d in Path("/usr/lib/postgresql").glob("*/bin") if d.parent.name.isdigit()),
                        key=lambda d: int(d.parent.name), reverse=True)
        candidates = ([Path(on_path).resolve().parent] if on_path else []) + debian
    for d in candidates:
        if all(os.access(d / tool, os.X_OK) for tool in TOOLS):
            return d
    where = os.environ.get(BIN_ENV) or "PATH or /usr/lib/postgresql/*/bin"
    raise Unavailable(f"PostgreSQL not found ({', '.join(TOOLS)} in {where}): {HOW}")


def _start_private_cluster() -> str:
    bin_dir = _bin_dir()
    run_as: list[str] = []
    owner = None
    if os.geteuid() == 0:
        # initdb and postgres refuse to run as root: the cluster belongs to the system user
        # that Debian's package creates.
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise Unavailable(f"running as root needs the 'postgres' system user to own the cluster: {HOW}") \
                from None
        run_as = ["runuser", "-u", "postgres", "--"]

    home = Path(tempfile.mkdtemp(prefix="tracedojo-pg-"))
    data, log = home / "data", home / "server.log"
    # Registered before anything starts, so that a server left half-started is stopped too.
    atexit.register(_stop, bin_dir, run_as, home)
    if owner:
        os.chown(home, owner.pw_uid, owner.pw_gid)

    def run(*args: str, what: str) -> None:
        # cwd: the postgres user may not be able to enter the caller's directory.
        done = subprocess.run([*run_as, *args], cwd=home, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (log.read_text(errors="replace") if log.exists() else done.stderr + done.stdout)[-2000:]
            raise Unavailable(f"{what} ({bin_dir}): {tail.strip()}")

    # --no-sync and the settings below trade durability for speed: the cluster dies with the session.
    run(str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=UTF8",
        "--locale=C", "--no-sync", what="PostgreSQL's initdb failed")
    # Free now, and outside the range outgoing connections take theirs from; under
    # pytest-xdist each worker starts its own cluster, on a port of its own stripe.
    port = free_port()
    with open(data / "postgresql.conf", "a") as conf:
        # The socket in our own directory: the default, /var/run/postgresql, may be another
        # server's or not writable by us.
        conf.write(f"listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{home}'\n"
                   "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
    run(str(bin_dir / "pg_ctl"), "start", "-w", "-t", "60", "-D", str(data), "-l", str(log),
        what="PostgreSQL did not start")
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"


def _stop(bin_dir: Path, run_as: list[str], home: Path) -> None:
    if (home / "data" / "postmaster.pid").exists():
        subprocess.run([*run_as, str(bin_dir / "pg_ctl"), "stop", "-m", "immediate", "-D", str(home / "data")],
                       cwd=home, capture_output=True)
    shutil.rmtree(home, ignore_errors=True)
