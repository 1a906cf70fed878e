"""The SQL console over HTTP, for uploads and generated instances alike: one read-only
DuckDB per trace with the tables app/analysis/sql.py builds, its refusals as 4xx with the
one-line reason. A generated instance's database is its Kineto export run through the
same importer an upload goes through, so both consoles answer the same queries; built on
first use and kept in a small on-disk cache. Only the trace goes in: nothing the key holds."""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from pathlib import Path

import orjson
from fastapi import HTTPException
from fastapi.responses import Response
from pydantic import BaseModel, Field

from app.analysis import sql
from app.config import Settings
from app.scenario import Instance
from app.trace import kineto
from app.web import instances as served

MAX_QUERY_CHARS = 100_000


class Query(BaseModel):
    query: str = Field(max_length=MAX_QUERY_CHARS)


CACHE_FILES = 12  # instance databases kept; each is a few MB for the default instances
_building = threading.Lock()


def limits(settings: Settings, max_rows: int | None = None) -> sql.Limits:
    return sql.Limits(timeout_s=settings.sql_timeout_s, max_rows=max_rows or settings.sql_max_rows,
                      max_bytes=settings.sql_max_bytes, memory_limit_mb=settings.sql_memory_limit_mb,
                      max_concurrent=settings.max_concurrent_sql)


def result(database: Path, query: str, settings: Settings) -> sql.Result:
    """Run `query` on `database`: 403 for a statement that is refused (a write), 400 for SQL
    DuckDB rejects, 429 when too many run at once."""
    try:
        return sql.run(database, query, limits(settings))
    except sql.QueryRefused as e:
        raise HTTPException(403, str(e)) from None
    except sql.QueryFailed as e:
        raise HTTPException(400, str(e)) from None
    except sql.QueryBusy as e:
        raise HTTPException(429, str(e), headers={"Retry-After": "5"}) from None


def response(res: sql.Result) -> Response:
    return Response(orjson.dumps(res.as_json()), media_type="application/json")


def respond(database: Path, query: str, settings: Settings) -> Response:
    return response(result(database, query, settings))


def instance_result(inst: Instance, rank: str, query: str, settings: Settings) -> sql.Result:
    """A query on one rank of a generated instance, whoever names it (the explorer's URL, a
    practice round's id, a live round's link): 400 for rank=all, as for a download."""
    r = served.parse_rank(rank, inst.ranks)
    if r == "all":
        raise HTTPException(400, "SQL runs on one rank at a time: rank=0 to rank=%d" % (inst.ranks - 1))
    return result(served.http(lambda: instance_database(inst, r, settings)), query, settings)


def instance_response(inst: Instance, rank: str, query: str, settings: Settings) -> Response:
    return response(instance_result(inst, rank, query, settings))


def url(urls: served.Urls, rank: int | str) -> str | None:
    """The Query tab's URL for the rank on screen (none for the stacked ranks)."""
    return None if rank == "all" else f"{urls.data}/sql?rank={rank}{urls.q(first=False)}"


def instance_database(inst: Instance, rank: int, settings: Settings) -> Path:
    """The database of one rank of `inst`, built from its export if not cached. The name
    hashes the instance's identity (scenario, version, seed, params, fixed build, rank)."""
    ident = repr((inst.scenario.id, inst.version, str(inst.seed), sorted(inst.overrides.items()), inst.fixed, rank))
    root = settings.data_dir / "sql-instances"
    path = root / (hashlib.sha256(ident.encode()).hexdigest()[:32] + ".duckdb")
    if path.exists():
        os.utime(path)  # recently used: the last to be evicted
        return path
    with _building:  # one build at a time: each holds a whole trace in memory
        if path.exists():
            return path
        root.mkdir(parents=True, exist_ok=True)
        body = kineto.dumps(inst.trace(rank), inst.trace_name(rank)).encode()
        fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".duckdb", dir=root)
        os.close(fd)
        os.unlink(tmp)  # DuckDB creates the file itself
        try:
            sql.database(body, Path(tmp))
            os.replace(tmp, path)
        finally:
            for leftover in (tmp, tmp + ".wal"):
                Path(leftover).unlink(missing_ok=True)
        _evict(root, keep=path)
    return path


def _evict(root: Path, keep: Path) -> None:
    files = sorted((p for p in root.glob("*.duckdb") if p != keep), key=lambda p: p.stat().st_mtime)
    for p in files[:max(0, len(files) + 1 - CACHE_FILES)]:
        p.unlink(missing_ok=True)
