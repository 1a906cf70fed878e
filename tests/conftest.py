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
import os
import shutil
import tempfile

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
