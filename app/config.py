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
    # Uploaded traces are kept in memory (the database stores instances, never traces).
    upload_cache_size: int = 8
    # Signs the anonymous practice identity cookie; unset, a key is kept in secret_key_file
    # (default data/secret_key) so restarts keep everyone's attempts theirs.
    secret_key: str | None = None
    secret_key_file: str | None = None


@lru_cache
def get_settings() -> Settings:
    return Settings()
