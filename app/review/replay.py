"""A round replayed from its event log: the state at any moment is the log's events up to
that moment applied in id order, the same fold the console does live (app/rounds/live.py
writes the narration as splices, so the text at time t is the splices up to t applied to
""). The review page's player (static/pages/review.js) does this fold in the browser; this
module is the reference it is tested against, and the JSON twin's `?at=` answer.

Times are the server's commit times (`at`), the one clock every event shares; the
candidate's own clock (`data.t`) only orders a view's overlapping posts.
"""

from __future__ import annotations

from datetime import datetime, timezone

from app.rounds.live import apply_splice

# Kinds the player draws, each on its own lane of the one time axis (the rest, such as
# `created`, `link` or `scorecard`, are listed but not drawn).
LANES = ("narration", "view", "marks", "run", "hint", "note", "integrity", "phase")
LANE_OF = {"narration": "narration", "viewport": "view", "selection": "view", "marks": "marks", "run": "run",
           "query": "run", "hint": "hint", "note": "note", "integrity": "integrity", "phase": "phase", "lock": "phase",
           "submit": "phase", "end": "phase", "opened": "phase", "practice": "phase"}
# Play skips a stretch with no event longer than this (seconds of round time): a
# candidate reading for three minutes without touching anything is three minutes of
# nothing to watch.
IDLE_SKIP_S = 4.0


def parse_time(value: str | datetime) -> datetime:
    t = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def state_at(events: list[dict], at: str | datetime | None = None) -> dict:
    """The round as it stood at `at` (None: the end of the log): narration, marks, runs,
    hints, notes, integrity signals, the candidate's last viewport and selection, the
    phase, and the id of the last event applied. `events` in id order, as
    live.events gives them."""
    until = parse_time(at) if at is not None else None
    st = {"narration": "", "marks": {}, "runs": [], "hints": [], "notes": [], "integrity": [], "viewport": None,
          "selection": None, "phase": "waiting", "locked": False, "submitted": False, "ended": False,
          "last_event_id": 0, "at": until.isoformat() if until else None}
    for e in events:
        if until is not None and parse_time(e["at"]) > until:
            break
        d, kind = e.get("data") or {}, e["kind"]
        if kind == "narration":
            st["narration"] = apply_splice(st["narration"], d)
        elif kind == "marks":
            st["marks"] = dict(d)
        elif kind == "run":
            st["runs"].append(d)
        elif kind == "hint":
            st["hints"].append({"index": d.get("index"), "title": d.get("title"), "at": e["at"]})
        elif kind == "note":
            st["notes"].append({"text": d.get("text"), "by": d.get("by") or e.get("actor"), "at": e["at"]})
        elif kind == "integrity":
            st["integrity"].append({**d, "at": e["at"]})
        elif kind == "viewport":
            st["viewport"] = d
        elif kind == "selection":
            st["selection"] = d
        elif kind == "phase":
            st["phase"] = d.get("phase", st["phase"])
        elif kind == "lock":
            st["locked"] = bool(d.get("locked"))
        elif kind == "submit":
            st["submitted"], st["locked"] = True, True
        elif kind == "end":
            st["ended"], st["phase"], st["locked"] = True, "ended", True
        st["last_event_id"] = e["id"]
    return st


def narration_at(events: list[dict], at: str | datetime | None = None) -> str:
    return state_at(events, at)["narration"]


def axis(events: list[dict]) -> dict:
    """The replay's time axis: from the candidate opening the link (the round's first
    event if they never did) to its end (its last event if it has not ended), each event's
    offset on it (ms), and the idle stretches play skips. Events before the start (the
    round's creation, maybe a day before) sit at 0 and events after the end (scorecards,
    a note written up later) at the end: the axis is the round as it was played, not a
    week of review after it."""
    if not events:
        return {"start": None, "end": None, "duration_ms": 0, "offsets_ms": [], "idle": [], "idle_skip_s": IDLE_SKIP_S}
    times = [parse_time(e["at"]) for e in events]
    t0 = next((t for e, t in zip(events, times) if e["kind"] == "opened"), times[0])
    t1 = next((t for e, t in zip(events, times) if e["kind"] == "end"), times[-1])
    span_ms = max(0.0, (t1 - t0).total_seconds() * 1000.0)
    offsets = [round(min(max((t - t0).total_seconds() * 1000.0, 0.0), span_ms), 1) for t in times]
    idle = [[a, b] for a, b in zip(offsets, offsets[1:]) if b - a > IDLE_SKIP_S * 1000.0]
    return {"start": t0.isoformat(), "end": t1.isoformat(), "duration_ms": round(span_ms, 1),
            "offsets_ms": offsets, "idle": idle, "idle_skip_s": IDLE_SKIP_S}


def lanes(events: list[dict]) -> dict[str, int]:
    """How many events each lane holds (the page's legend)."""
    out = {lane: 0 for lane in LANES}
    for e in events:
        lane = LANE_OF.get(e["kind"])
        if lane:
            out[lane] += 1
    return out
