"""The open explorer: every scenario's public instances by seed, for self-study. Its pages,
downloads, answer keys, tools and the stateless scorer name the instance in the URL; a
practice round never uses them (its instance is secret: app/web/practice.py)."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, Field, FiniteFloat

import scenarios
from app import instances
from app.scenario import FAMILIES, observation
from app.analysis import fidelity
from app.config import Settings, get_settings
from app.web import instances as served
from app.web import sql_console
from app.web.templates import templates

router = APIRouter()


def scenario_rows() -> list[dict]:
    """Every registered scenario with its canonical brief and download links."""
    rows = []
    for scn in scenarios.REGISTRY.values():
        inst = instances.instance(scn.id, "canonical")
        base = f"/scenarios/{scn.id}/canonical"
        rows.append({
            "id": scn.id, "version": scn.version, "title": scn.title, "signature": scn.signature,
            "family": scn.family, "difficulty": scn.difficulty,
            "brief": inst.key["brief"], "ranks": inst.ranks,
            "trace_url": f"{base}/trace.json", "key_url": f"{base}/key.json",
            "params": scn.Params.describe(),
        })
    return rows


@router.get("/", include_in_schema=False)
def index(request: Request):
    rows = scenario_rows()
    shelves = [{"id": f, "label": label, "scenarios": [r for r in rows if r["family"] == f]}
               for f, label in FAMILIES.items()]
    return templates.TemplateResponse(request, "index.html", {"scenarios": rows,
                                                              "shelves": [s for s in shelves if s["scenarios"]]})


@router.get("/index.json")
def index_json():
    return {"scenarios": scenario_rows()}


@router.get("/surprise", include_in_schema=False)
def surprise():
    """A surprise is a practice round now (POST /practice scenario=surprise), whose
    pathology stays hidden until its report; an old link lands on the picker."""
    return RedirectResponse("/practice", 303)


@router.get("/scenarios/{sid}/download", include_in_schema=False)
def download(sid: str, seed: str = "0", rank: str = "0", view: str = ""):
    """The home page's seed form: redirect to the instance's viewer page or trace."""
    seed = str(served.http(lambda: instances.parse_seed(seed.strip() or "0")))
    if view:
        return RedirectResponse(f"/scenarios/{quote(sid)}/{seed}", 303)
    query = f"?rank={quote(rank)}" if rank not in ("", "0") else ""
    return RedirectResponse(f"/scenarios/{quote(sid)}/{seed}/trace.json{query}", 303)


def _page(sid: str, seed: str, request: Request, rank: str | None) -> dict:
    inst = served.resolve(sid, seed, request)
    # the instance's params, without the page's own keys (rank, testing)
    params = [(k, v) for k, v in request.query_params.multi_items() if k not in ("rank", "testing")]
    scn = scenarios.get(sid)
    # before and after: the same instance with its fix applied, where the scenario builds it
    toggle = [(k, v) for k, v in params if k != "fixed"] + ([] if inst.fixed else [("fixed", "1")])
    fix = {"fixed": inst.fixed, "can_fix": inst.version in scn.fixable,
           "toggle_url": f"/scenarios/{quote(sid)}/{quote(seed)}" + (f"?{urlencode(toggle)}" if toggle else ""),
           "before_after_url": (f"/scenarios/{quote(sid)}/{quote(seed)}/before-after?"
                                + urlencode([(k, v) for k, v in params if k != "fixed"]
                                            + [("rank", str(0 if rank in (None, "all") else rank))])
                                if inst.version in scn.fixable else None),
           "fixed_step_ms": observation(inst.fixed_key, "step_ms") if inst.fixed else None,
           "expected_step_ms": observation(inst.key, "expected_step_ms"), "step_ms": observation(inst.key, "step_ms")}
    # serving (prefill): the fix leaves the median iteration a decode batch; what it changes is ITL p99 and
    # the iterations that carry prefill (mixed chunk + decode iterations instead of whole prefills)
    if inst.fixed and any(o["id"] == "mixed_iteration_ms" for o in inst.fixed_key["observations"]):
        fix["serving"] = {"itl_p99_ms": observation(inst.fixed_key, "itl_p99_ms"),
                          "before_itl_p99_ms": observation(inst.key, "itl_p99_ms"),
                          "expected_itl_p99_ms": observation(inst.key, "expected_itl_p99_ms"),
                          "mixed_iteration_ms": observation(inst.fixed_key, "mixed_iteration_ms")}
    urls = served.explorer_urls(sid, seed, params)
    viewer = served.viewer_context(inst, urls, rank)
    viewer["sql_url"] = sql_console.url(urls, viewer["rank"])  # the Query tab: the rank on screen
    return {"scenario": {"id": scn.id, "title": scn.title, "version": inst.version}, "seed": seed,
            "params": inst.params.model_dump(), "fix": fix, **viewer}


# Declared before the page: "/scenarios/x/5.json" also matches "/scenarios/{sid}/{seed}".
@router.get("/scenarios/{sid}/{seed}.json")
def scenario_page_json(sid: str, seed: str, request: Request, rank: str | None = None):
    """The scenario page's JSON twin: the brief and what the page loads, never the key."""
    return _page(sid, seed, request, rank)


@router.get("/scenarios/{sid}/{seed}", include_in_schema=False)
def scenario_page(sid: str, seed: str, request: Request, rank: str | None = None):
    return templates.TemplateResponse(request, "scenario.html", _page(sid, seed, request, rank))


def _fidelity(sid: str, seed: str, request: Request, rank: str) -> dict:
    inst = served.resolve(sid, seed, request)
    r = served.parse_rank(rank, inst.ranks)
    if r == "all":
        raise HTTPException(400, f"the fidelity page measures one rank's trace: rank=0 to rank={inst.ranks - 1}")
    return fidelity.report(inst, r)


@router.get("/scenarios/{sid}/{seed}/fidelity.json")
def fidelity_json(sid: str, seed: str, request: Request, rank: str = "0"):
    """The fidelity page's JSON twin: the instance's timing distributions beside real traces'."""
    return _fidelity(sid, seed, request, rank)


@router.get("/scenarios/{sid}/{seed}/fidelity", include_in_schema=False)
def fidelity_page(sid: str, seed: str, request: Request, rank: str = "0"):
    rep = _fidelity(sid, seed, request, rank)
    charts = {q: _chart(v, rep["hist_edges_us"]) for q, v in rep["quantities"].items() if "label" in v}
    return templates.TemplateResponse(request, "fidelity.html", {**rep, "charts": charts,
                                                                 "title": scenarios.get(sid).title})


def _chart(q: dict, edges: list[float], w: int = 560, h: int = 140) -> dict:
    """One quantity's histograms as SVG polylines on a log time axis: the share of values per
    bin, the instance's and each real trace's, on one scale."""
    series = [("this instance", q["instance"]), *q["real"].items()]
    shares = [[c / max(s["n"], 1) for c in s.get("hist", [])] for _, s in series]
    top = max((x for sh in shares for x in sh), default=0) or 1
    nb = len(edges) - 1
    pts = lambda sh: " ".join(f"{(i + .5) / nb * w:.1f},{h - x / top * (h - 8):.1f}" for i, x in enumerate(sh))  # noqa: E731
    ticks = [(f"{e:g} µs", (i / nb) * w) for i, e in enumerate(edges) if i % 10 == 0]
    return {"w": w, "h": h, "lines": [{"name": n, "points": pts(sh)} for (n, _), sh in zip(series, shares) if sh],
            "ticks": ticks}


@router.get("/api/scenarios/{sid}/{seed}/timeline.bin")
def timeline_bin(sid: str, seed: str, request: Request, rank: str = "0"):
    """One rank's trace (or every rank's, stacked on one clock, with rank=all) as the
    viewer's compact columns (app/web/timeline.py)."""
    inst = served.resolve(sid, seed, request)
    r = served.parse_rank(rank, inst.ranks)
    return served.timeline_response(served.timeline_body(inst, r, f"{sid} · {seed} · rank {rank}"), request)


@router.get("/api/scenarios/{sid}/{seed}/slices/{src}")
def slice_args(sid: str, seed: str, src: str, request: Request, rank: str = "0"):
    inst = served.resolve(sid, seed, request)
    return served.slice_args(inst, served.parse_rank(rank, inst.ranks), src)


@router.get("/scenarios/{sid}/{seed}/trace.json")
def trace_json(sid: str, seed: str, request: Request, rank: str = "0"):
    return served.trace_download(served.resolve(sid, seed, request), rank, f"{sid}-{seed}", compress=False)


@router.get("/scenarios/{sid}/{seed}/trace.json.gz")
def trace_json_gz(sid: str, seed: str, request: Request, rank: str = "0"):
    return served.trace_download(served.resolve(sid, seed, request), rank, f"{sid}-{seed}", compress=True)


@router.get("/scenarios/{sid}/{seed}/key.json")
def key_json(sid: str, seed: str, request: Request):
    return served.resolve(sid, seed, request).key


@router.get("/api/scenarios/{sid}/{seed}/tools/{tool_id}")
def run_tool(sid: str, seed: str, tool_id: str, request: Request):
    return served.run_tool(served.resolve(sid, seed, request), tool_id, request)


@router.post("/api/scenarios/{sid}/{seed}/sql")
def instance_sql(sid: str, seed: str, body: sql_console.Query, request: Request,
                 settings: Annotated[Settings, Depends(get_settings)], rank: str = "0"):
    """The upload console's SQL (app/analysis/sql.py's tables) over one rank of the instance."""
    return sql_console.instance_response(served.resolve(sid, seed, request), rank, body.query, settings)


class Run(BaseModel):
    """A measurement the candidate ran, as the viewer records it."""

    tool: str = Field(max_length=64)
    at: str | None = Field(default=None, max_length=64)
    since_open_s: FiniteFloat | None = None


class Narration(BaseModel):
    narration: str
    runs: list[Run] = Field(default_factory=list, max_length=500)
    timed: bool = False  # said in the 60-second mode


@router.post("/api/scenarios/{sid}/{seed}/score")
def score_read(sid: str, seed: str, body: Narration, request: Request):
    """Score a narrated read of a public instance: contract 4, with evidence and misses."""
    from app.scoring.score import NarrationError, NarrationTooLong, score

    inst = served.resolve(sid, seed, request)
    try:
        return score(inst.key, inst.scenario.rubric, body.narration, [r.model_dump() for r in body.runs],
                     timed=body.timed)
    except NarrationError as e:
        raise HTTPException(413 if isinstance(e, NarrationTooLong) else 400, str(e)) from None
