"""The demo's reads (app/review/demo.py): a narration of each quality built from an
instance's own key, and the drafts a person would have saved while typing it. Excellent:
the discipline in order with the numbers, the trap rejected with its arithmetic, the
decisive measurement, the fix and its win; good: most of that, less arithmetic; mixed:
findings, but the trap endorsed or no arithmetic; poor: vague; no-show: nothing. Wording
is drawn per round so no two reads are the same string."""

from __future__ import annotations

import random
import re

def _lc(s: str) -> str:
    """First letter lower case, unless the word is an acronym ("NCCL", "DDP's")."""
    return s[:1].lower() + s[1:] if s[:2] != s[:2].upper() else s


def _bare(s: str) -> str:
    return s.strip().rstrip(".").strip()


def _gist(claim: str) -> str:
    """A trap's claim without its proposed course: "NCCL is slow; run nccl-tests" -> "NCCL is slow"."""
    return _bare(re.split(r";|: ", claim, maxsplit=1)[0])


def _course(claim: str) -> str:
    parts = re.split(r";|: ", claim, maxsplit=1)
    return _bare(parts[1]) if len(parts) > 1 else ""


def _fmt(v: float) -> str:
    v = float(v)
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}".rstrip("0").rstrip(".")


def _obs(key: dict, oid: str) -> float | None:
    return next((o["value"] for o in key["observations"] if o["id"] == oid), None)


def _win(key: dict) -> str:
    e = key["expected"]
    return f"{_fmt(e['before_ms'])} to {_fmt(e['after_ms'])} {e['unit']}, {float(e['speedup']):.2f}x"


def narration(quality: str, key: dict, rng: random.Random) -> str:
    """A read of this quality of the instance whose key this is, in words drawn from `rng`."""
    d, trap = key["discipline"], key["traps"][0]
    pick = rng.choice
    if quality == "excellent":
        other = key["traps"][1] if len(key["traps"]) > 1 and rng.random() < 0.3 else trap
        parts = [pick(["First the step boundary.", "Let me find one full iteration first.",
                       "I'll go in order: the step, the gaps, overlap, then the kernels."]),
                 d["step_boundary"],
                 pick(["Then the idle time.", "Next, where the compute stream is idle.", "Now the gaps."]),
                 d["gaps"], d["overlap"],
                 pick(["Only now the kernels.", "Then the longest kernel.", "Last, inside the busy time."]),
                 d["longest_kernel"],
                 pick([f"I considered that {_lc(_gist(other['claim']))}, and rejected it: {other['why_wrong']}",
                       f"The tempting story is that {_lc(_gist(other['claim']))}. The arithmetic says otherwise: "
                       f"{other['why_wrong']}",
                       f"Someone will say {_lc(_gist(other['claim']))}; I don't buy it. {other['why_wrong']}"]),
                 pick(["So the root cause:", "What is really going on:", "The cause, then:"]) + " "
                 + _lc(key["root_cause"]),
                 pick(["I'd confirm it before changing anything:", "The check that settles it:",
                       "To confirm:"]) + " " + _lc(key["confirmation"]),
                 pick(["The fix:", "Fix:", "What I'd change:"]) + " " + _lc(key["fix"]),
                 pick(["Expected win:", "The arithmetic for the win:", "What it buys:"]) + " "
                 + _bare(key["expected"]["arithmetic"]) + f"; that is {_win(key)}."]
    elif quality == "good":
        parts = [d["step_boundary"], d["gaps"]]
        if rng.random() < 0.6:
            parts.append(d["overlap"])
        parts += [pick([f"I considered whether {_lc(_gist(trap['claim']))}, but that doesn't fit the timeline.",
                        f"I'd set aside the idea that {_lc(_gist(trap['claim']))}; that is not the bug.",
                        f"I ruled out that {_lc(_gist(trap['claim']))}."]),
                  _bare(key["root_cause"]) + ".",
                  pick(["I'd confirm with", "To check it I'd look at", "Confirm with"]) + " "
                  + _bare(key["confirmation"].split(":")[0]) + ".",
                  pick(["Fix:", "The fix:"]) + " " + _lc(_bare(key["fix"].split(". ")[0])) + ".",
                  pick(["That should be a clear win.", "That should bring the step down a good deal.",
                        "It should be noticeably faster after that."])]
    elif quality == "mixed":
        if rng.random() < 0.6:  # the findings, then the trap bought as the cause
            course = _course(trap["claim"])
            parts = [d["step_boundary"], d["gaps"],
                     pick([f"My read: {_lc(_gist(trap['claim']))}, and that is the bottleneck.",
                           f"So the problem is clear to me: {_lc(_gist(trap['claim']))}."]),
                     (f"I would {_lc(course)} first." if course else "That is what I would fix first."),
                     pick(["That should give most of the time back.", "That's where the time goes."])]
        else:  # the right story, without a number in it past the step
            parts = [d["step_boundary"],
                     pick(["There is a big idle stretch in every step.", "The GPU waits a lot in each step."]),
                     pick(["My guess at the cause:", "Probably this:"]) + " "
                     + _lc(_bare(key["root_cause"].split(":")[0])) + ".",
                     pick([f"Maybe also: {_lc(_gist(trap['claim']))}.", "Hard to be sure without more data."]),
                     pick(["I'd try the fix and see.", "I'd change the setup and measure again."])]
    elif quality == "poor":
        step = _obs(key, "step_ms")
        parts = [pick([
            "The GPU looks busy most of the time but some parts seem slow. I would look at the biggest kernels "
            "and see if something can be optimized, maybe try a newer version of the library.",
            f"There is a lot going on in this trace. The step is around {_fmt(step)} ms, which seems slow. "
            f"Probably {_lc(_gist(trap['claim']))}. I'd tune some settings.",
            "Hard to say from this view. Some kernels take long and there are some empty spaces. I'd profile "
            "again with more detail and ask the team what changed.",
            "It's probably the model being too big for this hardware. More GPUs or a newer GPU would help, and "
            "mixed precision if it's not on already."])]
    elif quality == "no-show":
        return ""
    else:
        raise ValueError(f"unknown quality {quality!r}")
    return " ".join(p.strip() for p in parts if p.strip())


def typing(final: str, rng: random.Random) -> list[str]:
    """The narration as the page autosaved it while it was typed: a few words at a time,
    now and then a typo fixed at the next save, once a word left out and put back later.
    The last state is `final`; each state's edit from the one before is `live.splice`."""
    if not final:
        return []
    words = re.findall(r"\S+\s*", final)
    omit = rng.randrange(len(words) // 2) if len(words) > 12 and rng.random() < 0.5 else None
    cuts, c = [], 0
    while c < len(words):
        c = min(len(words), c + rng.randint(2, 9))
        cuts.append(c)
    back = None  # the cut at which the omitted word is put back: a few saves later, before the end
    if omit is not None:
        later = [k for k, c in enumerate(cuts) if c > omit + 1 and k < len(cuts) - 1]
        back = later[min(len(later) - 1, 2)] if later else None
        if back is None:
            omit = None
    states = []
    for k, c in enumerate(cuts):
        text = "".join(w for i, w in enumerate(words[:c]) if not (omit is not None and i == omit and k < back))
        nxt = words[c] if c < len(words) else ""
        if nxt.strip() and len(nxt.strip()) > 3 and rng.random() < 0.12:  # a typo in the next word
            w = nxt.strip()
            states.append(text + w[:len(w) // 2] + w[len(w) // 2 + 1:len(w) // 2 + 2] + w[len(w) // 2])
        states.append(text)
    if states[-1] != final:  # the generator's own invariant, not an input check
        raise AssertionError("typing() must end on the final narration")
    return states


