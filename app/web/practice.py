"""The practice round's pages: pick a case (or be surprised), read and narrate it, read the
report, go again with new numbers; and "my attempts". Each page has its JSON twin."""

from __future__ import annotations

import secrets
from collections import defaultdict

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import RedirectResponse

import scenarios
from app import practice
from app.scenario import InstanceError
from app.scoring.score import LABELS, MAX_CHARS
from app.web.attempts import DB, Owner

router = APIRouter()
SEEDS = 100_000  # a new round draws its seed from [0, SEEDS)


def _templates():
    from app.web.main import templates

    return templates


def _attempt(db, who, aid):
    a = practice.get(db, who, aid)
    if a is None:
        raise HTTPException(404, f"no attempt {aid!r} in this browser")
    return a


@router.get("/practice", include_in_schema=False)
def picker(request: Request):
    rows = [{"id": s.id, "title": s.title} for s in scenarios.REGISTRY.values()]
    return _templates().TemplateResponse(request, "practice.html", {"scenarios": rows})


@router.get("/practice.json")
def picker_json():
    return {"scenarios": [{"id": s.id, "title": s.title} for s in scenarios.REGISTRY.values()],
            "start": "POST /practice with scenario=<id> or scenario=surprise"}


@router.post("/practice", include_in_schema=False)
def start(db: DB, who: Owner, scenario: str = Form(...), seed: str = Form("")):
    """A new round: the named case (or a random one), with the given seed or a random one."""
    rng = secrets.SystemRandom()
    sid = rng.choice(list(scenarios.REGISTRY)) if scenario == "surprise" else scenario
    seed = seed.strip() or str(rng.randrange(SEEDS))
    try:
        a = practice.create(db, who, sid, seed, {})
    except InstanceError as e:
        raise HTTPException(400, str(e)) from None
    # a surprise round keeps the pathology's name out of the page until the report
    return RedirectResponse(f"/practice/{a.public_id}" + ("?surprise=1" if scenario == "surprise" else ""), 303)


def _viewer(a) -> dict:
    """The attempt's instance in the viewer: brief, timeline, tools; nothing from the key."""
    from app.web.main import viewer_context

    return viewer_context(practice.instance_of(a), a.scenario, a.seed, sorted(a.params.items()), None)


def _round(a) -> dict:
    """The practice page's data: the attempt as the browser may see it, and the viewer."""
    return {**_viewer(a), "attempt": practice.public(a), "max_chars": MAX_CHARS}


@router.get("/practice/{aid}", include_in_schema=False)
def round_page(aid: str, request: Request, db: DB, who: Owner, surprise: str = ""):
    a = _attempt(db, who, aid)
    if a.submitted_at is not None:
        return RedirectResponse(f"/practice/{aid}/report", 303)
    return _templates().TemplateResponse(request, "practice_round.html", {**_round(a), "surprise": bool(surprise)})


@router.get("/practice/{aid}.json")
def round_json(aid: str, db: DB, who: Owner):
    ctx = _round(_attempt(db, who, aid))
    return {k: v for k, v in ctx.items() if k not in ("views",)}


def highlight(text: str, report: dict) -> list[dict]:
    """The narration cut into runs of plain text and evidence, each evidence run tagged with
    the criteria it earned (for the report's highlighting)."""
    marks: list[tuple[int, int, str, str]] = []
    for c in report["criteria"]:
        for e in c["evidence"]:
            if e["end"] > e["start"]:
                marks.append((e["start"], e["end"], c["id"], e.get("reason", "")))
    cuts = sorted({0, len(text), *[m[0] for m in marks], *[m[1] for m in marks]})
    out = []
    for a, b in zip(cuts, cuts[1:]):
        over = [m for m in marks if m[0] <= a and b <= m[1]]
        out.append({"text": text[a:b], "criteria": sorted({m[2] for m in over}),
                    "why": "; ".join(dict.fromkeys(m[3] for m in over))})
    return out


def _report(a) -> dict:
    inst = practice.instance_of(a)
    key = inst.key
    return {"attempt": practice.public(a), "report": a.report, "labels": LABELS,
            "segments": highlight(a.narration, a.report), "traps": key["traps"],
            "arithmetic": key["expected"].get("arithmetic", ""), "confirmation": key["confirmation"],
            "decisive": key["decisive_measurement"], "discipline": key["discipline"],
            "scenario": {"id": a.scenario, "title": inst.scenario.title}, "t0_marks": key["marks"]}


@router.get("/practice/{aid}/report", include_in_schema=False)
def report_page(aid: str, request: Request, db: DB, who: Owner):
    a = _attempt(db, who, aid)
    if a.submitted_at is None:
        return RedirectResponse(f"/practice/{aid}", 303)
    return _templates().TemplateResponse(request, "practice_report.html", {**_viewer(a), **_report(a)})


@router.get("/practice/{aid}/report.json")
def report_json(aid: str, db: DB, who: Owner):
    a = _attempt(db, who, aid)
    if a.submitted_at is None:
        raise HTTPException(409, "this attempt is not submitted yet: the report (and the key) come after submission")
    return _report(a)


@router.post("/practice/{aid}/next", include_in_schema=False)
def next_round(aid: str, db: DB, who: Owner):
    """Same pathology, new numbers: a new round of the same scenario with a fresh seed."""
    a = _attempt(db, who, aid)
    seed = str(secrets.SystemRandom().randrange(SEEDS))
    b = practice.create(db, who, a.scenario, seed, {})
    return RedirectResponse(f"/practice/{b.public_id}", 303)


def _mine(db, who) -> dict:
    rounds = [practice.public(a) for a in practice.mine(db, who)]
    by: dict[str, list] = defaultdict(list)
    for r in rounds:
        if r["submitted_at"]:
            by[r["scenario"]].append({"at": r["submitted_at"], "total": r["total"], "id": r["id"], "seed": r["seed"]})
    titles = {s.id: s.title for s in scenarios.REGISTRY.values()}
    return {"attempts": rounds, "by_scenario": [{"scenario": sid, "title": titles.get(sid, sid), "scores": v}
                                                for sid, v in by.items()]}


@router.get("/attempts", include_in_schema=False)
def attempts_page(request: Request, db: DB, who: Owner):
    return _templates().TemplateResponse(request, "attempts.html", _mine(db, who))


@router.get("/attempts.json")
def attempts_json(db: DB, who: Owner):
    return _mine(db, who)
