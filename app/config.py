"""All configuration in one place; every field can be set from the environment (TRACEDOJO_*)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRACEDOJO_", extra="ignore")

    # PostgreSQL works through the same code: DATABASE_URL=postgresql+psycopg://...
    database_url: str = Field(default=f"sqlite:///{ROOT / 'data' / 'tracedojo.db'}",
                              validation_alias="DATABASE_URL")
    # Uploaded traces: the file as sent (gzip counts compressed) and, once decompressed,
    # the importer's own limit. Larger uploads get a 413.
    max_upload_bytes: int = 256 * 2**20
    max_trace_bytes: int = 2**30
    # How many uploads' reads each process keeps in memory; the store on disk holds them all.
    upload_cache_size: int = 8
    # Signs the anonymous practice identity cookie and draws practice rounds' secret seeds;
    # unset, a key is kept in secret_key_file (default data/secret_key) so restarts keep
    # everyone's attempts theirs.
    secret_key: str | None = None
    secret_key_file: str | None = None
    # Where the server keeps what it creates beside the database (the secret key, the
    # record that a database existed); default data/ in the checkout.
    data_dir: Path = ROOT / "data"
    # Start on an empty database even though one existed before (TRACEDOJO_CREATE_DB=1, or
    # `tracedojo serve --create-db`): otherwise a lost database file stops the server
    # instead of being silently replaced by an empty one.
    create_db: bool = False
    # SQLite waits this long for another writer's lock before a write answers 503.
    db_busy_timeout_s: float = 5.0
    # Cookies only over HTTPS (set behind a TLS-terminating proxy).
    secure_cookies: bool = False
    # Instances built for requests: the cache's size in bytes, and the most events one
    # instance may hold (every rank counted; the default instances hold 17k-210k, the
    # viewer's 1M-slice benchmark instance fits).
    instance_cache_bytes: int = 768 * 2**20
    max_instance_events: int = 1_500_000
    # Encoded timelines kept ready for the viewer (gzip bytes).
    timeline_cache_bytes: int = 256 * 2**20

    # Uploaded traces (app/uploads.py): a content-addressed store on disk that every worker
    # process serves from, kept under a byte budget by dropping the least recently used.
    uploads_dir: Path = ROOT / "data" / "uploads"
    max_upload_store_bytes: int = 20 * 2**30
    # Imports run in a pool of this many processes per server process; past that many
    # waiting as well, an upload gets a 503 with Retry-After.
    max_concurrent_imports: int = 1
    max_queued_imports: int = 4
    # DuckDB inside an import: 2 threads leave the other core to the server; past the memory
    # limit it spills to the upload's temporary directory.
    import_duckdb_threads: int = 2
    import_memory_limit_mb: int = 2048
    # The SQL console: each query on its own read-only connection with one thread. The time
    # limit covers execute, fetch and conversion; the byte limit counts the cells' JSON.
    sql_timeout_s: float = 5.0
    sql_max_rows: int = 10_000
    sql_max_bytes: int = 2**20
    sql_memory_limit_mb: int = 256
    max_concurrent_sql: int = 2  # per process; past that, 429

    # Live rounds: how long a candidate link opens its round, and how often each worker
    # reads the tail of the rounds' event log on SQLite (whose workers cannot notify each
    # other; PostgreSQL's LISTEN/NOTIFY needs no polling). 0 turns the tail off (one worker).
    candidate_link_hours: float = 72.0
    live_poll_s: float = 0.05

    # A second opinion on trap stance (app/scoring/second_opinion.py), off unless a URL is
    # set: an OpenAI-compatible base URL (".../v1"), the model to name, a bearer key. It only
    # sets needs_review; the score stays the deterministic scorer's. Asked after the
    # response, so a slow endpoint delays the opinion, never the page.
    second_opinion_url: str | None = None
    second_opinion_model: str = ""
    second_opinion_api_key: str | None = None
    second_opinion_timeout_s: float = 10.0


@lru_cache
def get_settings() -> Settings:
    return Settings()
