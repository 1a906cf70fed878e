"""Shared fixtures.

`database_url`: the URL of a new, empty database, once on SQLite (a file in tmp_path) and once
on PostgreSQL (tests/postgres.py), with ids `sqlite` and `postgresql`. A test opts in by taking
it as an argument, and then runs on both:

    def test_attempts_survive_a_restart(database_url, monkeypatch):
        monkeypatch.setenv("DATABASE_URL", database_url)
        get_settings.cache_clear()
        ...

`-k sqlite` or `-k postgresql` picks one backend. A test about one backend only is marked
`@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)` (a whole module:
`pytestmark = ` that mark). The database is per test and starts without tables
(`app.db.base.upgrade_to_head(url)` makes them).
Without PostgreSQL the postgresql runs skip, saying how to get it; under CI=true they fail.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests import postgres

# What the app keeps beside its database (the secret key, the marker that a database
# existed) goes to a folder of the test session's, not the checkout's data/; so do uploads
# where a test names no store of its own (otherwise they went to the checkout's data/uploads,
# shared by every run and every pytest-xdist worker, and found there by the next run).
# Under pytest-xdist each worker is a session of its own, with folders of its own.
os.environ["TRACEDOJO_DATA_DIR"] = tempfile.mkdtemp(prefix="tracedojo-test-data-")
os.environ["TRACEDOJO_UPLOADS_DIR"] = os.path.join(os.environ["TRACEDOJO_DATA_DIR"], "uploads")
atexit.register(shutil.rmtree, os.environ["TRACEDOJO_DATA_DIR"], True)


# -- tests that time themselves ------------------------------------------------------------
# A test marked `timed` asserts on the wall clock: a time budget, a latency, or a time limit
# that plain slowness can reach. Its bounds are set for this suite's 2-core machine with the
# test running alone, as it did before the suite ran in parallel. Under pytest-xdist it still
# runs alone: no other worker starts a test while it runs, and it waits for the ones running
# to finish (a lock every test takes, shared by the other tests and held alone by a timed
# one), so what it times is the code and not another worker's load. Consecutive timed tests
# keep the lock between them. Without xdist there is nothing to wait for.

class _RunAlone:
    """A readers-writer lock over files (flock) shared by the workers of one run: `gate`
    makes a waiting timed test go next, ahead of tests that ask after it."""

    def __init__(self, where: Path):
        self.gate = os.open(where / "timed-gate.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self.rw = os.open(where / "timed-rw.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self.held: str | None = None  # "alone" or "shared"

    def take(self, alone: bool) -> None:
        want = "alone" if alone else "shared"
        if self.held == want:
            return
        self.give_back()
        fcntl.flock(self.gate, fcntl.LOCK_EX)
        fcntl.flock(self.rw, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
        self.held = want

    def give_back(self) -> None:
        # LOCK_UN, never close: a child forked meanwhile shares these descriptors, and a
        # close would leave the lock to it.
        if self.held is not None:
            fcntl.flock(self.rw, fcntl.LOCK_UN)
            if self.held == "alone":
                fcntl.flock(self.gate, fcntl.LOCK_UN)
            self.held = None


_run_alone: _RunAlone | None = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _run_alone
    if not hasattr(item.config, "workerinput"):  # not an xdist worker: nothing runs beside us
        yield
        return
    if _run_alone is None:
        # the run's own temporary root, beside every worker's basetemp (popen-gwN)
        _run_alone = _RunAlone(item.config._tmp_path_factory.getbasetemp().parent)
    timed = item.get_closest_marker("timed") is not None
    _run_alone.take(alone=timed)  # before setup: module fixtures set up here are inside too
    try:
        yield
    finally:
        if not (timed and nextitem is not None and nextitem.get_closest_marker("timed") is not None):
            _run_alone.give_back()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tracedojo.db'}"
    return postgres.fresh_database()


def sqlite_app(tmp_path_factory, name: str):
    """The app on a fresh SQLite file, with a fixed identity key, for a module's tests
    through TestClient (settings and the signer are cached per process: cleared here)."""
    import os

    from app.config import get_settings
    from app.identity import _signer
    from app.web.main import create_app

    os.environ["DATABASE_URL"] = f"sqlite:///{tmp_path_factory.mktemp('db') / f'{name}.db'}"
    os.environ["TRACEDOJO_SECRET_KEY"] = "test-secret"
    get_settings.cache_clear()
    _signer.cache_clear()
    return create_app()


# -- the order files go to pytest-xdist's workers ---------------------------------------------
# `./run test` runs --dist loadfile --no-loadscope-reorder: a worker takes a whole file at a
# time (its module fixtures are built once, its tests run in their order), the files in the
# order collected, which this sets:
# - first the longest file, test_scenarios.py: hundreds of short tests, so that the other
#   worker's timed tests (above) wait little for it to finish its current one;
# - then the files that hold timed tests, run meanwhile by the other worker;
# - then the other long files, longest first, so that no worker is left running one of them
#   at the end while the other has nothing to do; then the rest, in their order.
# The list is only about time: a file missing from it, or one that got faster, costs time at
# worst. Seconds each took on the 2-core machine with two workers: 190, 100, 76, 77, 58, 55,
# 43, 41 and 31 of about 930 in all.
SLOW_FILES_FIRST = ("test_scenarios.py", "test_durability.py", "test_live.py", "test_accounts.py",
                    "test_analysis_read.py", "test_cli.py", "test_hta.py", "test_browser.py", "test_authz.py")


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):
        return
    timed_files = {item.path.name for item in items if item.get_closest_marker("timed")}

    def rank(item) -> tuple[int, int]:
        name = item.path.name
        if name == SLOW_FILES_FIRST[0]:
            return 0, 0
        if name in timed_files:
            return 1, 0
        return (2, SLOW_FILES_FIRST.index(name)) if name in SLOW_FILES_FIRST else (3, 0)

    items.sort(key=rank)  # every worker sorts alike, as xdist requires; stable: a file keeps its order


# -- the browser tests' shared fixtures (tests/browser.py) ------------------------------------
@pytest.fixture(scope="module")
def browser():
    """One Chromium per test file."""
    from tests.browser import launch

    with launch() as b:
        yield b


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One Trace Dojo per test file, on SQLite in its own folder, in a subprocess."""
    from tests.server import running_server

    with running_server(tmp_path_factory.mktemp("db")) as base:
        yield base


@pytest.fixture
def page(browser):
    """A 1280 x 800 page that fails its test on a JavaScript error or a CSP violation."""
    from tests.browser import watched_page

    with watched_page(browser, 1280, 800) as pg:
        yield pg

