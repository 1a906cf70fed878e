"""A team's record as a download (contract 7): `GET /api/export/{table}.{fmt}`, with
table one of rounds, scorecards, criteria, events and fmt one of csv, parquet, json;
`?team=slug` for an admin of several teams. The rows and their encoding are
app/review/export.py's; this only checks the URL and streams the bytes.

Team admins only. The export holds every scorecard of every round, past the team's
blind-scorecard rule (app/review/access.py: a rater sees colleagues' cards only as the
rule allows), and every candidate's name; reviewers see the team's agreement as
aggregates on the calibration page, interviewers the rounds they ran.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import StreamingResponse

from app.review import export
from app.web.deps import StaffDep, StoreDep

router = APIRouter()

MEDIA_TYPES = {"csv": "text/csv; charset=utf-8", "parquet": "application/vnd.apache.parquet",
               "json": "application/json"}


@router.get("/api/export/{table}.{fmt}")
def export_table(table: str, fmt: str, store: StoreDep, staff: StaffDep,
                 team: Annotated[str | None, Query(max_length=64, description="team slug, if you admin several")]
                 = None):
    """The team's `table` as a `fmt` file, streamed: 401 signed out, 403 for anyone but the
    team's admins, 404 for a table or format that does not exist (naming those that do).

    A sync route, so FastAPI runs it in the threadpool (the first batch is read here, and a
    database that cannot answer is a 503 before any byte goes out); the body is a sync
    generator, which Starlette's StreamingResponse iterates in the threadpool too, a batch
    per step: no database read runs on the event loop, and none holds a session across the
    wait for the client to take a chunk."""
    if table not in export.TABLES or fmt not in MEDIA_TYPES:
        raise HTTPException(404, f"no export {table[:40]!r}.{fmt[:20]!r}: the tables are {', '.join(export.TABLES)} "
                                 f"and the formats {', '.join(MEDIA_TYPES)}")
    team_id, slug = export.team_for(staff, team)
    chunks = export.stream(store, team_id, table, fmt)
    return StreamingResponse(chunks, media_type=MEDIA_TYPES[fmt], headers={
        # slugs are [a-z0-9-]: nothing in the name needs quoting beyond the quotes
        "Content-Disposition": f'attachment; filename="tracedojo-{slug}-{table}.{fmt}"',
        # every scorecard and candidate name of a team: no shared or browser cache keeps a copy
        "Cache-Control": "no-store"})
