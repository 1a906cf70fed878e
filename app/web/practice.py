"""The practice round's pages: pick a case (or be surprised), read and narrate it, read the
report, go again with new numbers; and "my attempts". Each page has its JSON twin.

A round reaches its instance only through the attempt's id (/practice/{id}/timeline.bin,
/slices, /trace.json, /tools): no URL, page or download of a round names its scenario
or seed before the report.

A submitted report can be shared by its owner (app/sharing.py): /shared/{token} and its
twin show it read-only to whoever holds the link, on the open explorer's URLs.
"""

from __future__ import annotations

from collections import defaultdict
from urllib.parse import urlencode

from fastapi import APIRouter, Form, HTTPException, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse

import scenarios
from app import practice, sharing
from app.scoring import evidence
from app.scoring.read import LABELS
from app.scoring.score import MAX_CHARS
from app.config import get_settings
from app.scenario import DIFFICULTIES, FAMILIES
from app.web import instances as served
from app.web import sql_console
from app.web.deps import Owner, StoreDep
from app.web.templates import templates

router = APIRouter()


def _picker(family: str = "", difficulty: str = "") -> dict:
    """The bank on the shelf the filter names (blank: any), with what "Surprise me" draws from."""
    shown = served.http(lambda: scenarios.shelf(family or None, difficulty or None))
    return {"scenarios": [{"id": s.id, "title": s.title, "family": s.family, "family_label": FAMILIES[s.family],
                           "difficulty": s.difficulty} for s in shown],
            "families": [{"id": k, "label": v, "count": sum(s.family == k for s in scenarios.REGISTRY.values())}
                         for k, v in FAMILIES.items()],
            "difficulties": list(DIFFICULTIES), "family": family, "difficulty": difficulty,
            "of": len(scenarios.REGISTRY),
            "start": "POST /practice with scenario=<id>, or scenario=surprise and optional family=<family> and "
                     "difficulty=<difficulty> (a random case among those); optional seed=<public seed>"}


@router.get("/practice", include_in_schema=False)
def picker(request: Request, family: str = Query("", max_length=40), difficulty: str = Query("", max_length=20)):
    return templates.TemplateResponse(request, "practice.html", _picker(family, difficulty))


@router.get("/practice.json")
def picker_json(family: str = Query("", max_length=40), difficulty: str = Query("", max_length=20)):
    return _picker(family, difficulty)


@router.post("/practice", include_in_schema=False)
def start(store: StoreDep, who: Owner, scenario: str = Form(..., max_length=64),
          seed: str = Form("", max_length=32), family: str = Form("", max_length=40),
          difficulty: str = Form("", max_length=20)):
    """A new round: the named case (or a random one of the filter's shelf), on a secret seed
    unless one is given."""
    a = practice.create(store, who, scenario, seed.strip() or None, family=family or None,
                        difficulty=difficulty or None)
    return RedirectResponse(f"/practice/{a.public_id}", 303)


def _urls(a) -> served.Urls:
    return served.Urls(f"/practice/{a.public_id}", f"/practice/{a.public_id}")


def _round(a, rank: str | None = None) -> dict:
    """The round's data: the attempt as the browser may see it, and the viewer on the
    attempt's own URLs."""
    inst = practice.instance_of(a)
    ctx = served.viewer_context(inst, _urls(a), rank)
    return {**ctx, "sql_url": sql_console.url(_urls(a), ctx["rank"]), "attempt": practice.public(a), "max_chars": MAX_CHARS}


# Declared before the page: "/practice/x.json" also matches "/practice/{aid}".
@router.get("/practice/{aid}.json")
def round_json(aid: str, store: StoreDep, who: Owner, rank: str | None = None):
    return {k: v for k, v in _round(practice.get(store, who, aid), rank).items() if k != "views"}


@router.get("/practice/{aid}", include_in_schema=False)
def round_page(aid: str, request: Request, store: StoreDep, who: Owner, rank: str | None = None):
    a = practice.get(store, who, aid)
    if a.submitted_at is not None:
        return RedirectResponse(f"/practice/{aid}/report", 303)
    return templates.TemplateResponse(request, "practice_round.html", _round(a, rank))


# -- the round's instance, by the attempt's id alone ------------------------------------

def _instance(store, who, aid):
    a = practice.get(store, who, aid)
    return a, served.http(lambda: practice.instance_of(a))


@router.get("/practice/{aid}/timeline.bin")
def round_timeline(aid: str, request: Request, store: StoreDep, who: Owner, rank: str = "0"):
    a, inst = _instance(store, who, aid)
    r = served.parse_rank(rank, inst.ranks)
    title = f"practice round {a.public_id}" + (f" · rank {r}" if inst.ranks > 1 else "")
    return served.timeline_response(served.timeline_body(inst, r, title, counters=False), request)


@router.get("/practice/{aid}/slices/{src}")
def round_slice(aid: str, src: str, store: StoreDep, who: Owner, rank: str = "0"):
    _, inst = _instance(store, who, aid)
    return served.slice_args(inst, served.parse_rank(rank, inst.ranks), src)


@router.post("/practice/{aid}/sql")
def round_sql(aid: str, body: sql_console.Query, store: StoreDep, who: Owner, rank: str = "0"):
    """The Query tab: SQL over the round's trace (the trace only: nothing of the key)."""
    _, inst = _instance(store, who, aid)
    return sql_console.instance_response(inst, rank, body.query, get_settings())


@router.get("/practice/{aid}/trace.json")
def round_trace(aid: str, store: StoreDep, who: Owner, rank: str = "0"):
    a, inst = _instance(store, who, aid)
    return served.trace_download(inst, rank, f"practice-{a.public_id}", compress=False)


@router.get("/practice/{aid}/trace.json.gz")
def round_trace_gz(aid: str, store: StoreDep, who: Owner, rank: str = "0"):
    a, inst = _instance(store, who, aid)
    return served.trace_download(inst, rank, f"practice-{a.public_id}", compress=True)


@router.get("/practice/{aid}/tools/{tool_id}")
def round_tool(aid: str, tool_id: str, request: Request, store: StoreDep, who: Owner):
    _, inst = _instance(store, who, aid)
    return served.run_tool(inst, tool_id, request)


# -- the report ----------------------------------------------------------------------------

def _report(a, attempt: dict | None = None) -> dict:
    """The report's data; `attempt` is the attempt as this reader may see it (default: as
    its owner does, with the share link)."""
    inst = practice.instance_of(a)
    key = inst.key
    if attempt is None:
        attempt = {**practice.public(a), **sharing.state(a)}
    return {"attempt": attempt, "report": a.report, "labels": LABELS,
            "segments": evidence.segments(a.narration, a.report), "traps": key["traps"],
            "arithmetic": key["expected"].get("arithmetic", ""), "confirmation": key["confirmation"],
            "decisive": key["decisive_measurement"], "discipline": key["discipline"],
            "scenario": {"id": a.scenario, "title": inst.scenario.title}, "t0_marks": key["marks"],
            "after_fix_url": _after_fix_url(a, inst), "before_after_url": _before_after_url(a, inst)}


def _after_fix_url(a, inst) -> str | None:
    """The open explorer's trace of this instance after its fix, where its version builds one
    (the report then shows the expected win as a trace, not only as arithmetic)."""
    if inst.version not in inst.scenario.fixable:
        return None
    return f"/scenarios/{a.scenario}/{a.seed}?" + urlencode(practice.link_params(a) + [("fixed", "1")])


def _before_after_url(a, inst) -> str | None:
    """The open explorer's before/after page of this instance (after submission only, as the
    whole report is): the trace after the fix over the trace as it is, on one time scale."""
    if inst.version not in inst.scenario.fixable:
        return None
    q = urlencode(practice.link_params(a))
    return f"/scenarios/{a.scenario}/{a.seed}/before-after" + (f"?{q}" if q else "")


@router.get("/practice/{aid}/report.json")
def report_json(aid: str, store: StoreDep, who: Owner):
    a = practice.get(store, who, aid)
    if a.submitted_at is None:
        raise HTTPException(409, "this attempt is not submitted yet: the report (and the key) come after submission")
    return _report(a)


@router.get("/practice/{aid}/report", include_in_schema=False)
def report_page(aid: str, request: Request, store: StoreDep, who: Owner):
    a = practice.get(store, who, aid)
    if a.submitted_at is None:
        return RedirectResponse(f"/practice/{aid}", 303)
    return templates.TemplateResponse(request, "practice_report.html",
                                      {**served.viewer_context(practice.instance_of(a), _urls(a), None), **_report(a),
                                       "mine": True})


def read_only(a, *, json_url: str) -> dict:
    """A submitted report for a reader who is not its owner (a shared link, a round's
    reviewers): its instance is public once submitted, so the viewer reads the open
    explorer's URLs, and nothing on the page writes to the attempt or names its owner."""
    inst = practice.instance_of(a)
    urls = served.explorer_urls(a.scenario, a.seed, practice.link_params(a))
    return {**served.viewer_context(inst, urls, None), **_report(a, sharing.shown(a)), "mine": False,
            "json_url": json_url}


# -- a report shared by its owner: whoever holds the link reads it ------------------------

# The link is a credential in the URL: no cache keeps the page, no search engine lists it
# (Referrer-Policy: same-origin already keeps it from other sites' logs).
SHARED_HEADERS = {"Cache-Control": "private, no-store", "X-Robots-Tag": "noindex"}


def _shared(store, token: str):
    try:
        return sharing.opened(store, token)
    except sharing.NotShared as e:
        raise HTTPException(404, str(e), headers=SHARED_HEADERS) from None


# Declared before the page: "/shared/x.json" also matches "/shared/{token}".
@router.get("/shared/{token}.json")
def shared_json(token: str, store: StoreDep):
    a = _shared(store, token)
    body = {k: v for k, v in read_only(a, json_url=f"/shared/{token}.json").items() if k not in ("views", "mine")}
    return JSONResponse(body, headers=SHARED_HEADERS)


@router.get("/shared/{token}", include_in_schema=False)
def shared_page(token: str, request: Request, store: StoreDep):
    a = _shared(store, token)
    return templates.TemplateResponse(request, "shared_report.html", read_only(a, json_url=f"/shared/{token}.json"),
                                      headers=SHARED_HEADERS)


@router.post("/practice/{aid}/next", include_in_schema=False)
def next_round(aid: str, store: StoreDep, who: Owner):
    """Same pathology, new numbers: a new round of the same scenario on a fresh secret
    seed, stored before the redirect sends the browser to it."""
    a = practice.get(store, who, aid)
    if a.submitted_at is None:
        raise HTTPException(409, "finish this round first: its pathology is still hidden")
    b = practice.create(store, who, a.scenario, None, a.params)
    return RedirectResponse(f"/practice/{b.public_id}", 303)


# -- my attempts -------------------------------------------------------------------------

def _mine(store, who) -> dict:
    rounds = [practice.public(a) for a in practice.mine(store, who)]
    by: dict[str, list] = defaultdict(list)
    for r in rounds:
        if r["submitted_at"]:
            by[r["scenario"]].append({"at": r["submitted_at"], "total": r["total"], "id": r["id"], "seed": r["seed"]})
    titles = {s.id: s.title for s in scenarios.REGISTRY.values()}
    return {"attempts": rounds, "by_scenario": [{"scenario": sid, "title": titles.get(sid, sid), "scores": v}
                                                for sid, v in by.items()]}


@router.get("/attempts", include_in_schema=False)
def attempts_page(request: Request, store: StoreDep, who: Owner):
    return templates.TemplateResponse(request, "attempts.html", _mine(store, who))


@router.get("/attempts.json")
def attempts_json(store: StoreDep, who: Owner):
    return _mine(store, who)
