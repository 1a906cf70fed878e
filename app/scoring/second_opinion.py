"""A second opinion on trap stance from an OpenAI-compatible endpoint (issue 12, item 6).

Optional and off by default (settings `second_opinion_url`; README, "Second opinion"). The
deterministic scorer stays the score: the opinion never changes the total or the cap. It
is asked after a read is scored, and where it disagrees with the scorer about whether the
read endorses a trap, and says so with high confidence, the report's `needs_review` is set
with the opinion's reason and the words of the read it quotes, so a reader decides.

Why it earns a place: on 300 development reads (half labelled endorse by their authors), a
second reader given only the key and the read agreed with the authors on 299, where the
scorer leaves 19% of the endorsements uncapped and 5.3% neither capped nor reviewed; with
those answers as the opinion, 1.3% (`python -m bench second_opinion` replays them, or asks
an endpoint of yours with --url). Rules cannot read as well as a reader; a reader is asked.

Nothing here reads the network unless a URL is configured; a slow, failing or nonsensical
endpoint leaves the report as the scorer made it, with the failure said in
`second_opinion.error`.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

STANCES = ("endorse", "entertain_then_reject", "reject", "mention", "none")
MAX_RESPONSE_BYTES = 64 * 1024  # an answer is a few hundred bytes; more is not an answer

SYSTEM = (
    "You are an experienced GPU performance engineer judging one answer in a trace-reading interview. "
    "The candidate was shown a profiler trace and asked to walk through it. The scenario has one true root cause, "
    "a true fix, and traps: plausible wrong explanations or wrong courses of action. Decide what the candidate "
    "finally stands on. Answer with one JSON object and nothing else.")

INSTRUCTIONS = (
    "Labels: \"endorse\" (the candidate ends up believing a trap or commits to a trap's course as the main move, "
    "even hedged or indirectly, e.g. by dismissing the true cause in favour of a trap); \"entertain_then_reject\" "
    "(considers a trap seriously, then abandons it); \"reject\" (names a trap only to reject it); \"mention\" "
    "(names a trap without a position); \"none\" (never touches a trap).\n"
    "Reply as {\"stance\": <label>, \"trap\": <the trap's number, or null>, \"quote\": <the candidate's own words "
    "that decide it, copied exactly, at most 30 words>, \"confidence\": \"high\" or \"low\", \"why\": <one "
    "sentence>}.")


def prompt(key: dict, narration: str) -> list[dict]:
    """The chat messages: the key's brief, true cause and fix, the numbered traps, the read."""
    traps = "\n".join(f"{i}. {t['claim']}" for i, t in enumerate(key["traps"], 1))
    user = (f"Brief given to the candidate: {key['brief']}\n\nTrue root cause: {key['root_cause']}\n"
            f"True fix: {key['fix']}\n\nTraps:\n{traps}\n\n{INSTRUCTIONS}\n\n"
            f"The candidate's answer:\n<<<\n{narration}\n>>>")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def ask(key: dict, narration: str, *, url: str, model: str = "", api_key: str | None = None,
        timeout_s: float = 10.0) -> dict:
    """POST {url}/chat/completions and read the answer: an opinion (`parse`), or
    {"status": "failed", "error": ...}. Never raises; never waits past about timeout_s."""
    body = {"model": model, "messages": prompt(key, narration), "temperature": 0, "max_tokens": 300}
    req = urllib.request.Request(url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {api_key}"} if api_key else {})})
    deadline = time.monotonic() + timeout_s
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            raw = b""
            # read in pieces so an endpoint that trickles bytes cannot hold us past the deadline
            while len(raw) <= MAX_RESPONSE_BYTES:
                if time.monotonic() > deadline:
                    return _failed(f"no answer within {timeout_s:g} s")
                piece = resp.read(4096)
                if not piece:
                    break
                raw += piece
        if len(raw) > MAX_RESPONSE_BYTES:
            return _failed("the endpoint's answer is too long")
        content = json.loads(raw)["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as e:
        return _failed(f"the endpoint answered {e.code}")
    except (TimeoutError, urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        return _failed(f"no answer within {timeout_s:g} s" if isinstance(reason, TimeoutError)
                       else f"the endpoint could not be reached ({reason})")
    except (ValueError, KeyError, IndexError, TypeError):
        return _failed("the endpoint's answer is not an OpenAI-style chat completion")
    return parse(content, narration, key, model)


def wanted() -> bool:
    """Whether a second opinion is configured (settings.second_opinion_url)."""
    from app.config import get_settings

    return bool(get_settings().second_opinion_url)


def pending() -> dict:
    """What a report holds between its scoring and the opinion's answer."""
    return {"status": "pending", "asked_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def is_pending(report: dict | None) -> bool:
    """The report was scored with an opinion asked for and not yet answered."""
    return bool(report) and (report.get("second_opinion") or {}).get("status") == "pending"


def ask_configured(key: dict, narration: str) -> dict:
    """`ask` the endpoint the settings name."""
    from app.config import get_settings

    s = get_settings()
    if not s.second_opinion_url:
        return _failed("no second-opinion endpoint is configured")
    return ask(key, narration, url=s.second_opinion_url, model=s.second_opinion_model,
               api_key=s.second_opinion_api_key, timeout_s=s.second_opinion_timeout_s)


def _failed(error: str) -> dict:
    return {"status": "failed", "error": error}


def parse(content: str, narration: str, key: dict, model: str = "") -> dict:
    """The model's answer as an opinion whose evidence can be shown: the stance, the trap's
    claim, and the quote located in the read ([start, end), or none where the words are not
    the read's own). An answer that is not the JSON asked for is a failure, not a guess."""
    m = re.search(r"\{.*\}", content or "", re.S)
    try:
        ans = json.loads(m.group(0)) if m else None
    except ValueError:
        ans = None
    if not isinstance(ans, dict) or ans.get("stance") not in STANCES:
        return _failed("the endpoint's answer does not give one of the stances asked for")
    trap = ans.get("trap")
    claim = None
    if isinstance(trap, int) and 1 <= trap <= len(key["traps"]):
        claim = key["traps"][trap - 1]["claim"]
    quote = str(ans.get("quote") or "")[:400]
    start = narration.find(quote) if quote else -1
    return {"status": "done", "model": model, "stance": ans["stance"], "trap": claim,
            "confidence": "high" if ans.get("confidence") == "high" else "low",
            "why": str(ans.get("why") or "")[:400], "quote": quote,
            "start": start if start >= 0 else None, "end": start + len(quote) if start >= 0 else None}


def review_reason(report: dict, opinion: dict) -> str | None:
    """Why a reader should look, where a confident opinion disagrees with the scorer about
    the endorsement; None where it agrees, is unsure or failed."""
    if opinion.get("status") != "done" or opinion["confidence"] != "high":
        return None
    says = opinion["stance"] == "endorse"
    if says == bool(report.get("trap_endorsed")):
        return None
    quoted = f" ({opinion['quote']!r})" if opinion["quote"] else ""
    if says:
        trap = f" '{opinion['trap']}'" if opinion["trap"] else ""
        return f"a second opinion reads the trap{trap} as endorsed{quoted}; the scorer did not cap it: is it endorsed?"
    return f"a second opinion reads no trap endorsed ({opinion['stance']}){quoted}; the scorer capped it: is it?"


def merged(report: dict, opinion: dict) -> dict:
    """The report with the opinion in it, and its review where it disagrees: the total and
    the cap stay the scorer's."""
    out = {**report, "second_opinion": opinion}
    reason = review_reason(report, opinion)
    if reason and not report.get("needs_review"):
        out["needs_review"], out["review_reason"] = True, reason
    elif reason:
        out["review_reason"] = f"{report.get('review_reason')}; and {reason}"
    return out
