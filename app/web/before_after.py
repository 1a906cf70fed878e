"""The before/after page of an open-explorer instance: its trace after the fix stacked over the
trace as it is, on one time scale, the step difference and the per-name diff (app/before_after.py).
Its JSON twin carries the same figures. A practice report links here after submission, never
before; a live round's candidate page never does."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from fastapi import APIRouter, HTTPException, Request

import scenarios
from app import before_after
from app.web import instances as served
from app.web.templates import templates

router = APIRouter()

TABLE_ROWS = 40  # rows the page's table shows; the JSON twin carries every name


def _page(sid: str, seed: str, request: Request, rank: str) -> dict:
    before = served.resolve(sid, seed, request, fixed=False)
    scn = scenarios.get(sid)
    if before.version not in scn.fixable:
        raise HTTPException(400, f"{sid} version {before.version} has no build with its fix applied, so no before and "
                                 f"after" + (f" (versions {', '.join(map(str, scn.fixable))} do)" if scn.fixable else ""))
    after = served.resolve(sid, seed, request, fixed=True)
    r = served.parse_rank(rank, before.ranks)
    if r == "all":
        raise HTTPException(400, f"before and after compare one rank's trace: rank=0 to rank={before.ranks - 1}")
    params = [(k, v) for k, v in request.query_params.multi_items() if k not in ("rank", "testing", "fixed")]
    urls = served.explorer_urls(sid, seed, params)
    amp = urls.q(first=False)
    page = f"/scenarios/{quote(sid)}/{quote(seed)}"
    query = urlencode([*params, ("rank", str(r))])
    return {
        "scenario": {"id": scn.id, "title": scn.title, "version": before.version}, "seed": seed,
        "rank": r, "ranks": before.ranks, "brief": before.key["brief"], "fix": before.key["fix"],
        "step": before_after.step_figures(before, after),
        "timelines": {"before": f"{urls.data}/timeline.bin?rank={r}{amp}",
                      "after": f"{urls.data}/timeline.bin?rank={r}&fixed=1{amp}"},
        "slices": {"before": f"{urls.data}/slices/{{src}}?rank={r}{amp}",
                   "after": f"{urls.data}/slices/{{src}}?rank={r}&fixed=1{amp}"},
        "links": {"scenario": page + urls.q(), "fixed": page + "?" + urlencode([*params, ("fixed", "1")]),
                  "json": f"{page}/before-after.json?{query}"},
        "diff": before_after.name_diff(before.trace(r), after.trace(r)),
    }


# Declared before the page, as the scenario page's twin is (a path ending ".json" also matches).
@router.get("/scenarios/{sid}/{seed}/before-after.json")
def before_after_json(sid: str, seed: str, request: Request, rank: str = "0"):
    """The before/after page's JSON twin: the step before and after the fix, the key's expected
    figure, both timelines' URLs, and the per-name diff of the two traces (every name)."""
    return _page(sid, seed, request, rank)


@router.get("/scenarios/{sid}/{seed}/before-after", include_in_schema=False)
def before_after_page(sid: str, seed: str, request: Request, rank: str = "0"):
    ctx = _page(sid, seed, request, rank)
    # the names the fix moved (by a µs or more at the table's three decimals), largest first
    shown = [r for r in ctx["diff"]["rows"] if abs(r["delta_ms"]) >= 5e-4][:TABLE_ROWS]
    return templates.TemplateResponse(request, "before_after.html", {**ctx, "shown": shown})
