"""Serving an instance to the viewer, whoever names it: the open explorer by (scenario,
seed, params) in the URL, a practice round by its attempt id alone. Both get the same
page context, timeline columns, slice args, downloads and tool runs from here, under
their own URLs (`Urls`), so nothing in a practice round's URLs names its instance."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi import HTTPException, Request
from fastapi.responses import Response

from app import instances
from app.config import get_settings
from app.lru import ByteLRU
from app.scenario import Instance, InstanceError
from app.trace import kineto
from app.web import timeline

# Query keys that are not scenario params. version: an older version of the scenario, as a
# stored attempt's link names it (the current one without it).
# fixed: the trace after the key's fix (the explorer's before/after; never a practice round's).
RESERVED = {"rank", "format", "kernel", "testing", "version", "fixed"}  # kernel: ncu's -k; testing: the viewer's test hook


def resolve(sid: str, seed: str, request: Request, fixed: bool | None = None) -> Instance:
    """An open-explorer instance from its URL: 404 for an unknown scenario, 400 naming the
    problem for a bad seed, version or param or one past the event budget. `fixed` given: that
    build, whatever the query's `fixed` says (the before/after page asks for both)."""
    overrides = {k: v for k, v in request.query_params.items() if k not in RESERVED}
    raw = request.query_params.get("version")
    if raw is not None and not raw.isdigit():
        raise HTTPException(400, f"version is a whole number, not {instances.clip(raw)!r}")
    if fixed is None:
        asked = request.query_params.get("fixed", "0")
        if asked not in ("0", "1"):
            raise HTTPException(400, f"fixed is 1 (the trace after the fix) or 0, not {instances.clip(asked)!r}")
        fixed = asked == "1"
    return http(lambda: instances.instance(sid, instances.parse_seed(seed), overrides, int(raw) if raw else None,
                                           fixed))


def http(fn):
    """Domain errors about instances as HTTP errors with their one-line message."""
    try:
        return fn()
    except instances.UnknownScenario as e:
        raise HTTPException(404, str(e)) from None
    except InstanceError as e:  # a bad seed or param, or past the event budget
        raise HTTPException(400, str(e)) from None


@dataclass(frozen=True)
class Urls:
    """Where one instance's data lives: `data` for the timeline, slices and tools, `files`
    for the downloads, each followed by the same query string (params, if any)."""

    data: str
    files: str
    query: str = ""  # urlencoded params, without "?"

    def q(self, first: bool = True) -> str:
        return (("?" if first else "&") + self.query) if self.query else ""


def explorer_urls(sid: str, seed: str, params: list[tuple[str, str]]) -> Urls:
    return Urls(f"/api/scenarios/{sid}/{seed}", f"/scenarios/{sid}/{seed}", urlencode(params))


def parse_rank(raw: str | None, ranks: int, default: int = 0) -> int | str:
    """A rank in range written in ASCII digits, or "all" (every rank stacked) on a
    multi-rank instance. A page opens on `default`, the rank its brief hands over
    (`Instance.brief_rank`): opening the straggler with every rank stacked showed the slow
    rank before the read began (issue 14); the other ranks and the stack are one switch away."""
    raw = raw if raw is not None else str(default)
    if raw == "all" and ranks > 1:
        return "all"
    if raw.isascii() and raw.isdigit() and len(raw) < 6 and int(raw) < ranks:
        return int(raw)
    more = ' or "all"' if ranks > 1 else ""
    raise HTTPException(400, f"rank {instances.clip(raw, 20)!r} out of range: this instance has {ranks} rank(s) "
                             f"(0-{ranks - 1}{more})")


def viewer_context(inst: Instance, urls: Urls, rank: str | None) -> dict:
    """What a page with the viewer needs: the brief, the timeline, slice, download and tool
    URLs, and the case's charts. Nothing from the answer key but the brief, and nothing
    that names the scenario or seed beyond what `urls` already say."""
    from app import tools

    r = parse_rank(rank, inst.ranks, inst.brief_rank)
    amp = urls.q(first=False)
    return {
        "rank": r, "ranks": inst.ranks, "brief_rank": inst.brief_rank, "brief": inst.key["brief"],
        "timeline_url": f"{urls.data}/timeline.bin?rank={r}{amp}",
        "slice_url": f"{urls.data}/slices/{{src}}?rank={r}{amp}",
        "trace_urls": [f"{urls.files}/trace.json?rank={k}{amp}" for k in range(inst.ranks)],
        "download_url": f"{urls.files}/trace.json?rank={0 if r == 'all' else r}{amp}",
        "tools": [{"id": t.id, "title": t.title, "url": f"{urls.data}/tools/{t.id}{urls.q()}"}
                  for t in tools.TOOLS.values()],
        "views": views(inst),
    }


def views(inst: Instance) -> list[dict]:
    """Charts a case shows beside its timeline: the symptom, never the decisive
    measurement (that one appears when the candidate runs its tool)."""
    from app.tools import ToolNotApplicable
    from app.tools.serving import itl_series

    try:
        return [itl_series(inst)]
    except ToolNotApplicable:
        return []


# -- the data behind the viewer ----------------------------------------------------------

_BODIES: ByteLRU | None = None


def _bodies() -> ByteLRU:
    """Encoded timelines: a 1M-slice body is ~30 MB and ~0.5 s to encode. Keyed by the
    instance's identity, and holding the instance keeps that identity from being reused."""
    global _BODIES
    if _BODIES is None:
        _BODIES = ByteLRU(get_settings().timeline_cache_bytes, lambda v: len(v[1]))
    return _BODIES


def timeline_body(inst: Instance, rank: int | str, title: str, counters: bool = True) -> bytes:
    """The timeline binary, gzipped, cached per instance, rank and `counters`.

    `counters=False` for the candidate's own views (a practice round, a live round): a
    counter can be the very reading the case's decisive measurement is for (the straggler's
    SM clock is what DCGM shows), so there the candidate has to think to measure it."""
    def build():
        steps = [(st["start_us"] * 1e3, st["end_us"] * 1e3) for st in inst.artifacts.get("steps", [])]
        if not steps:  # a build that lists none (the fixed builds): the steps its trace marks
            steps = inst.trace(0 if rank == "all" else rank).profiler_steps_ns()
        if rank == "all":
            slices = timeline.stack([timeline.from_trace(inst.trace(r)) for r in range(inst.ranks)])
            drawn = [{**c, "name": f"rank {r} · {c['name']}"} for r in range(inst.ranks) for c in inst.counters(r)]
        else:
            slices = timeline.from_trace(inst.trace(rank))
            slices.ranks = [rank]
            drawn = inst.counters(rank)
        return inst, gzip.compress(timeline.encode(slices, title, steps, drawn if counters else []), compresslevel=1)

    return http(lambda: _bodies().get((id(inst), rank, counters), build))[1]


def timeline_response(gz: bytes, request: Request) -> Response:
    """The viewer's columns, gzip-compressed once when built (level 1: ~4x smaller in a
    fifth of a second for a million slices); inflated here for a client that cannot."""
    headers = {"Cache-Control": "private, max-age=3600", "Vary": "Accept-Encoding"}
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(gz, media_type="application/octet-stream", headers={**headers, "Content-Encoding": "gzip"})
    return Response(gzip.decompress(gz), media_type="application/octet-stream", headers=headers)


def slice_args(inst: Instance, rank: int | str, src: str) -> dict:
    """One slice as the Kineto export writes it (its args), by the viewer's `src` id."""
    if not (src.isascii() and src.isdigit() and len(src) < 19):
        raise HTTPException(400, f"slice id {instances.clip(src, 24)!r} is not a non-negative integer")
    sub_rank, row = timeline.source_ref(int(src)) if rank == "all" else (rank, int(src))
    if not 0 <= sub_rank < inst.ranks:
        raise HTTPException(404, f"no slice {src} in this instance")
    t = http(lambda: inst.trace(sub_rank))
    if not 0 <= row < len(t):
        raise HTTPException(404, f"no slice {src} in this instance")
    return kineto.event(t, row)


def trace_download(inst: Instance, rank_raw: str | None, filename: str, compress: bool) -> Response:
    """One rank's trace as torch.profiler exports it; `filename` without its extension."""
    rank = parse_rank(rank_raw or "0", inst.ranks)
    if rank == "all":
        raise HTTPException(400, "download one rank at a time: rank=0 to rank=%d" % (inst.ranks - 1))
    trace = http(lambda: inst.trace(rank))
    body = kineto.dumps(trace, inst.trace_name(rank)).encode()
    name = filename + (f"-rank{rank}" if inst.ranks > 1 else "") + ".json"
    if compress:
        body = gzip.compress(body, compresslevel=3, mtime=0)
        name += ".gz"
    return Response(body, media_type="application/gzip" if compress else "application/json",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


def run_tool(inst: Instance, tool_id: str, request: Request) -> dict:
    """A measurement on an instance, as the real tool prints it (or why it does not
    apply), with its figures as chart data where the tool's natural output is a chart."""
    from app import tools

    if tool_id not in tools.TOOLS:
        raise HTTPException(404, f"unknown tool {instances.clip(tool_id, 64)!r}; valid tools: {', '.join(tools.TOOLS)}")
    tool = tools.TOOLS[tool_id]
    options = {k: v for k, v in request.query_params.items() if k in tool.options and v}
    head = {"tool": tool_id, "title": tool.title, "command": tool.command}
    try:
        return {**head, "applicable": True, "output": tools.run(tool_id, inst, **options),
                "chart": tools.chart(tool_id, inst, **options)}
    except tools.ToolNotApplicable as e:
        return {**head, "applicable": False, "reason": str(e)}
    except InstanceError as e:  # a bad option, e.g. an ncu kernel pattern that matches nothing
        raise HTTPException(400, str(e)) from None
