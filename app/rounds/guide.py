"""The answer key, the rubric and the hint ladder, laid out for an interviewer running a live round.

Three pure functions of an instance (contract 1), for the interviewer's console:

- `live_key`: the key (contract 3) arranged to be glanced at while the candidate talks:
  the headline numbers first, the four discipline stages, each trap with its arithmetic,
  the decisive measurement with what it prints for this instance, the cause, the fix, the win.
- `anchored_rubric`: per criterion of the score report (contract 4), what an answer at each
  of the scorecard's four levels sounds like for this instance, in its own numbers.
- `hints`: four or five hints from gentle to pointed. The first two are the discipline's
  own nudges; the rest are the scenario's (`Scenario.hints`, in its module) or, where a
  scenario defines none, a default built from its key. No hint says the cause, the fix, the
  win or a number the candidate should read off the trace.

Everything said here comes from the key; nothing is invented. Numbers are written the way a
person says them ("~622 ms", "28%", "1.31x") in the rubric, and to one decimal in the key.
"""

from __future__ import annotations

import math
import re

from app import tools
from app.scenario import Hint, Instance, InstanceError
from app.tools import ToolNotApplicable
from app.scoring import lexicon
from app.scoring.rubric import Rubric
from app.scoring.read import LABELS
from app.scoring.score import FIX_IDS, FULL_FINDINGS, TRAP_CAP, findings_targets, read_of, stated

# Contract 4's criteria, in its order (LABELS is written in it).
CRITERIA = tuple(LABELS)
LEVELS = ((1, "poor"), (2, "mixed"), (3, "good"), (4, "excellent"))
# Units that count things: the label already says what ("NCCL kernels per step: 1").
COUNT_UNITS = {"kernels", "calls", "workers", "images", "tokens", "samples", "requests", "iterations", "streams",
               "GPUs", ""}
GAP_MARK_TOLERANCE = 0.02  # an observation within 2% of the key's gap mark is the gap it marks
EXCELLENT_FINDINGS = 5  # findings the excellent anchor lists: a glance, not the whole key
GLANCE_WORDS = 30  # a quoted sentence longer than this is cut to its clause with the most numbers

# The gentle end of every ladder: the discipline order, before anything about this case.
DISCIPLINE_HINTS = (
    Hint("One step first",
         "Before anything else, find one full step (or iteration, or token) on the timeline and measure its "
         "period. Every other number you give is easier to judge as a share of that period."),
    Hint("Then the idle time",
         "Within that one period, where is the GPU's compute stream idle, and for how long? For each stretch of "
         "idle, which other row (a CPU thread, another stream, another process) is busy at the same time? If "
         "nothing is idle, that is a finding too: say so."),
)
# A scenario that defines no hints of its own gets the rest of the discipline, then its
# decisive measurement by name.
DEFAULT_HINTS = (
    Hint("Overlap",
         "Is communication (or any second stream) running at the same time as compute, or after it? Say which, "
         "and how much of it is exposed."),
    Hint("Only then the kernels",
         "Once the idle time is explained, look inside the busy time: which kernel or kernel family dominates, "
         "and is it anywhere near what the hardware can do for its shape?"),
)


# -- numbers ----------------------------------------------------------------------

def _with_unit(num: str, unit: str) -> str:
    if not unit:
        return num
    if unit in ("%", "x"):
        return num + unit
    if unit == "rank":
        return f"rank {num}"
    return f"{num} {unit}"


def fmt(value: float, unit: str) -> str:
    """An observation as the console shows it: "622.4 ms", "1,100 kernels", "1.31x", "9.84 µs", "0.049 ms"."""
    v = float(value)
    if v.is_integer():
        num = f"{v:,.0f}"
    elif abs(v) >= 10:
        num = f"{v:,.1f}"
    elif abs(v) >= 1:
        num = f"{v:.2f}".rstrip("0").rstrip(".")
    else:
        num = f"{v:.3g}"
    return _with_unit(num, unit)


def say(value: float, unit: str, approx: bool = True) -> str:
    """A number as a person says it: whole above ten, one decimal below, two significant
    figures under one, "~" where rounding moved it ("~622 ms", "28%", "~9.8 µs", "1.31x")."""
    v = float(value)
    if unit == "x":
        return f"{v:.2f}".rstrip("0").rstrip(".") + "x" if abs(v) < 10 else f"{v:.0f}x"
    if abs(v) >= 10 or v.is_integer():
        num, r = f"{v:,.0f}", float(round(v))
    elif abs(v) >= 1:
        num = f"{v:.1f}".removesuffix(".0") if unit == "%" else f"{v:.1f}"
        r = float(num)
    else:
        num = f"{v:.2g}"
        r = float(num)
    tilde = "~" if approx and unit not in ("rank", "x") and not math.isclose(r, v, rel_tol=1e-9, abs_tol=1e-12) else ""
    return tilde + _with_unit(num, unit)


# -- text from the key -------------------------------------------------------------

_ASIDE = re.compile(r"\s+\([^()]*\)")  # " (SW Thermal Slowdown, ...)", but not "2(N-1)/N"


def _sentences(text: str) -> list[str]:
    """Sentences; a full stop inside a number ("11.9 ms") or a name ("torch.randn") is not an end."""
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z0-9(~'\"])", text.strip()) if s]


def _clauses(sentence: str) -> list[str]:
    """A sentence's clauses at its semicolons, leaving those inside parentheses alone."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(sentence):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == ";" and depth == 0:
            out.append(sentence[start:i])
            start = i + 1
    return [c.strip() for c in out + [sentence[start:]] if c.strip()]


def _plain(text: str) -> str:
    """Asides in parentheses removed: what is said in one breath."""
    prev = None
    while prev != text:
        prev, text = text, _ASIDE.sub("", text)
    return re.sub(r"\s+([,.;:])", r"\1", text).strip()


def _gist(text: str) -> str:
    """The first sentence without its asides, up to its first semicolon."""
    return _clauses(_plain(_sentences(text)[0]))[0].rstrip(".")


def _head(text: str) -> str:
    """What the sentence is about, before its colon, semicolon or ", so"."""
    return re.split(r": |; |, so ", _gist(text))[0]


def _claim(text: str) -> str:
    """A trap's hypothesis without the course of action it proposes."""
    return re.split(r": |; ", text.strip())[0].rstrip(".")


def _action(text: str) -> str | None:
    """The course of action a trap's claim proposes ("run nccl-tests and retune NCCL"), if it says one."""
    parts = re.split(r": |; ", text.strip(), maxsplit=1)
    return parts[1].rstrip(".") if len(parts) > 1 else None


def _has_digit(text: str) -> bool:
    return bool(re.search(r"\d", text))


def _arithmetic(text: str) -> list[str]:
    """The clauses of a why-it-is-wrong that carry numbers."""
    return [c.rstrip(".") for s in _sentences(text) for c in _clauses(s) if _has_digit(c)]


def _label(o: dict) -> str:
    """An observation's label; its id's words where the label is a formula ("2MNK / 2(MK+KN+MN)")."""
    label = _plain(o["label"])
    if len(re.findall(r"[A-Za-z]{3,}", label)) < 2:
        return " ".join(w for w in o["id"].split("_") if w not in ("ms", "us", "pct", "gbps", "mhz", "gb", "mb"))
    return label


def phrase(o: dict) -> str:
    """An observation in a sentence, its label then its value as said: "the step period
    (~622 ms)", "the NCCL kernels per step (1)", "the slow rank (rank 3)"."""
    label = _label(o)
    first = [w.lower() for w in label.split()[:2]]
    if first and first[0] not in ("the", "a", "an") and not any(w.endswith("'s") for w in first):
        label = "the " + label
    return f"{label} ({say(o['value'], '' if o['unit'] in COUNT_UNITS else o['unit'])})"


# -- what the key holds, ordered for a glance ------------------------------------------------

def _rubric(inst: Instance) -> Rubric:
    return inst.scenario.rubric or Rubric(root_cause=(), fix=(), traps={})


def _fix_like(oid: str) -> bool:
    return oid in FIX_IDS or oid.startswith("expected_")


def _as_ms(o: dict) -> float | None:
    scale = {"ms": 1.0, "µs": 1e-3, "us": 1e-3, "s": 1e3}.get(o["unit"])
    return None if scale is None else float(o["value"]) * scale


def _declared(inst: Instance) -> list[str]:
    """The scenario's own headline observations: the seed's headline numbers, then the ones
    contract 3 asks of it, without step_ms and what belongs to the fix."""
    ids = {o["id"] for o in inst.key["observations"]}
    scn = inst.scenario
    out = [i for i in [*scn.seed_headlines, *scn.observations] if i in ids and i != "step_ms" and not _fix_like(i)]
    return list(dict.fromkeys(out))


def gap_observation(inst: Instance) -> dict | None:
    """The observation that is this case's gap (or stall): the headline one the key's gap mark
    measures, else the first the discipline's gaps stage states."""
    key, by_id = inst.key, {o["id"]: o for o in inst.key["observations"]}
    declared = _declared(inst)
    mark = key.get("marks", {}).get("gap")
    if mark:
        dur_ms = (mark["end_us"] - mark["start_us"]) / 1e3
        for i in declared:
            ms = _as_ms(by_id[i])
            if ms is not None and dur_ms > 0 and abs(ms - dur_ms) <= GAP_MARK_TOLERANCE * dur_ms:
                return by_id[i]
    obs = [o for o in key["observations"] if o["id"] != "step_ms" and not _fix_like(o["id"])]
    said = list(stated(read_of(key["discipline"]["gaps"]), obs, _rubric(inst)))
    pick = next((i for i in said if i in declared), said[0] if said else None)
    return by_id[pick] if pick else None


def ordered_observations(inst: Instance) -> list[tuple[dict, bool]]:
    """(observation, headline?) in the order an interviewer wants them: step_ms, the gap, the
    scenario's headline numbers, the rest the model answer states, what belongs to the fix,
    then everything else in the key's order."""
    key = inst.key
    by_id = {o["id"]: o for o in key["observations"]}
    gap = gap_observation(inst)
    head = list(dict.fromkeys(["step_ms", *([gap["id"]] if gap else []), *_declared(inst)]))
    targets = [i for i in findings_targets(key, _rubric(inst)) if not _fix_like(i)]
    fixes = [i for i in by_id if _fix_like(i)]
    order = list(dict.fromkeys([*head, *targets, *fixes, *by_id]))
    return [(by_id[i], i in head) for i in order if i in by_id]


# -- 1. the key, for a live round ------------------------------------------------------------

def live_key(inst: Instance) -> dict:
    """The answer key laid out for the interviewer's console. Shape:

    {scenario: {id, title, version}, seed, brief,
     observations: [{id, label, value, unit, text, headline}],
     discipline: [{stage, label, finds, scored}],            # the four stages, in order
     traps: [{id, hypothesis, why_wrong, arithmetic: [str]}],
     decisive: {tool, title, command, output, confirmation, also_confirms: [{tool, title}]},
     root_cause, fix,
     win: {before, after, unit, speedup, text, arithmetic, also: [{id, label, before, after}]},
     model_answer}
    """
    key, scn, rubric = inst.key, inst.scenario, _rubric(inst)
    by_id = {o["id"]: o for o in key["observations"]}
    observations = [{"id": o["id"], "label": o["label"], "value": o["value"], "unit": o["unit"],
                     "text": fmt(o["value"], o["unit"]), "headline": head}
                    for o, head in ordered_observations(inst)]
    discipline = [{"stage": st, "label": lexicon.STAGE_LABELS[st].capitalize(), "finds": key["discipline"][st],
                   "scored": st not in rubric.skip_stages} for st in lexicon.STAGES]
    traps = [{"id": t["id"], "hypothesis": t["claim"], "why_wrong": t["why_wrong"],
              "arithmetic": _arithmetic(t["why_wrong"])} for t in key["traps"]]
    exp = key["expected"]
    also = []
    for o in key["observations"]:
        if o["id"].startswith("expected_") and o["id"] != "expected_step_ms":
            base = by_id.get(o["id"].removeprefix("expected_"))
            also.append({"id": o["id"], "label": o["label"],
                         "before": fmt(base["value"], base["unit"]) if base else None,
                         "after": fmt(o["value"], o["unit"])})
    win = {"before": exp["before_ms"], "after": exp["after_ms"], "unit": exp["unit"], "speedup": exp["speedup"],
           "text": (f"{say(exp['before_ms'], '', approx=False)} → {say(exp['after_ms'], '', approx=False)} "
                    f"{exp['unit']}, {say(exp['speedup'], 'x')}"),
           "arithmetic": exp.get("arithmetic", ""), "also": also}
    return {"scenario": {"id": scn.id, "title": scn.title, "version": key["version"]}, "seed": key["seed"],
            "brief": key["brief"], "observations": observations, "discipline": discipline, "traps": traps,
            "decisive": decisive(inst), "root_cause": key["root_cause"], "fix": key["fix"], "win": win,
            "model_answer": key["model_answer"]}


def decisive(inst: Instance) -> dict:
    """The decisive measurement: the tool, what it prints for this instance (None where it
    cannot run here), the key's confirmation, and the tools that confirm it in part."""
    key, rubric = inst.key, _rubric(inst)
    tool_id = key["decisive_measurement"]
    tool = tools.TOOLS.get(tool_id)
    try:
        output = tools.run(tool_id, inst) if tool else None
    except (ToolNotApplicable, InstanceError):  # or a trace past the request's event budget
        output = None
    return {"tool": tool_id, "title": tool.title if tool else tool_id, "command": tool.command if tool else "",
            "output": output, "confirmation": key["confirmation"],
            "also_confirms": [{"tool": t, "title": tools.TOOLS[t].title} for t in rubric.also_confirms
                              if t in tools.TOOLS]}


# -- 2. the rubric, anchored in this instance ----------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def numbers_in(text: str) -> list[float]:
    """The numbers a text says ("1,100" is one number; "bf16" and "H100" are names)."""
    return [float(m.group().replace(",", "")) for m in _NUMBER.finditer(text)]


def _grounded(text: str, observations: list[dict]) -> int:
    """How many numbers of this instance's observations a text says (each within 1% or its
    own rounding of a value in the key)."""
    said = [n for n in numbers_in(text) if n >= 10 or (n >= 1 and not n.is_integer())]  # not "2(N-1)/N"
    return sum(any(math.isclose(n, float(o["value"]), rel_tol=0.01) or abs(n - float(o["value"])) <= 0.5
                   for o in observations) for n in said)


def _most_grounded(parts: list[str], observations: list[dict]) -> str:
    return max(parts, key=lambda p: (_grounded(p, observations), -parts.index(p)))


def _trap_arithmetic(inst: Instance, trap: dict) -> str:
    """The sentence of a trap's why-it-is-wrong that says the most of this instance's numbers,
    or its clause that does, where the sentence is too long to glance at."""
    obs = inst.key["observations"]
    best = _most_grounded(_sentences(trap["why_wrong"]), obs)
    if len(best.split()) > GLANCE_WORDS:
        best = _most_grounded(_clauses(best), obs)
    return best.rstrip(".")


def _confirmation_result(inst: Instance) -> tuple[str, bool]:
    """The sentence of the key's confirmation about the decisive tool, with its numbers, and
    whether it is about that tool (else: the confirmation's first sentence)."""
    key = inst.key
    pats = lexicon.MEASUREMENTS.get(key["decisive_measurement"], ())
    sents = [re.sub(r"^\(\d+\)\s*", "", s) for s in _sentences(key["confirmation"])]
    i = next((j for j, s in enumerate(sents) if any(re.search(p, s, re.I) for p in pats)), None)
    out = sents[i or 0]
    if not _has_digit(out) and (i or 0) + 1 < len(sents):
        out += " " + sents[(i or 0) + 1]
    return out.rstrip("."), i is not None


def _win_arithmetic(inst: Instance) -> str:
    """The clause of the key's win arithmetic that lands on the after value."""
    exp = inst.key["expected"]
    clauses = [c.rstrip(".") for c in _clauses(exp.get("arithmetic", ""))]
    after = say(exp["after_ms"], "", approx=False)
    lands = [c for c in clauses if re.search(rf"(?<![\d.]){re.escape(after)}(?![\d])", c)]
    clause = _plain(next((c for c in lands if "=" in c), None)
                    or (lands or [c for c in clauses if "=" in c] or clauses or [""])[0])
    # "rank 3 rejoins ..., 194 ms earlier: 612 - 194 = 418 ms": the sum, not its preamble
    return next((part for part in reversed(clause.split(": ")) if "=" in part), clause)


def _levels(poor: str, mixed: str, good: str, excellent: str) -> list[dict]:
    return [{"level": n, "name": name, "says": text} for (n, name), text in zip(LEVELS, (poor, mixed, good, excellent))]


def anchored_rubric(inst: Instance) -> list[dict]:
    """Per criterion of contract 4, in its order: {id, label, levels: [{level: 1..4, name:
    poor|mixed|good|excellent, says}]}, where `says` is what an answer at that level sounds
    like for this instance, in its numbers."""
    key, rubric = inst.key, _rubric(inst)
    by_id = {o["id"]: o for o in key["observations"]}
    gap = gap_observation(inst)
    step_p = phrase(by_id["step_ms"])
    gap_p = phrase(gap) if gap else "where the compute stream is idle"
    traps = key["traps"]
    action = next((a for a in (_action(t["claim"]) for t in traps) if a), None)
    trap_course = f"one aimed at a trap ({action})" if action else "one aimed at a trap"
    tool_id = key["decisive_measurement"]
    tool = tools.TOOLS.get(tool_id)
    tool_p = f"{tool.title} ({tool_id})" if tool else tool_id
    exp = key["expected"]
    win = (f"{say(exp['before_ms'], '', approx=False)} → {say(exp['after_ms'], '', approx=False)} "
           f"{_plain(exp['unit'])}, {say(exp['speedup'], 'x')}")

    skipped = [lexicon.STAGE_LABELS[s] for s in lexicon.STAGES if s in rubric.skip_stages]
    nothing = f" ({' and '.join(skipped)} has nothing to find here: a word is enough)" if skipped else ""
    discipline = _levels(
        f"No order: starts from a kernel name or a guess and never pins {step_p}.",
        f"Goes to the longest kernel before accounting for {gap_p}, or skips two stages.",
        "All four stages in order, but one is named without its finding here (says 'overlap' without saying "
        "whether there is any), or one is skipped.",
        f"All four stages in order, each with its finding: {step_p} first, then {gap_p} and who is busy "
        f"during it, then overlap, and only then the longest kernel{nothing}.")

    rank = {o["id"]: k for k, (o, _) in enumerate(ordered_observations(inst))}
    targets = sorted(findings_targets(key, rubric), key=lambda i: rank.get(i, len(rank)))
    firsts = ["step_ms", *([gap["id"]] if gap else [])]
    listed = list(dict.fromkeys([*firsts, *targets]))[:EXCELLENT_FINDINGS]
    more = next((by_id[i] for i in targets if i not in firsts), None)
    full = max(1, math.ceil(FULL_FINDINGS * len(targets)))
    findings = _levels(
        f"Reads kernel and row names without numbers; never states {step_p} or {gap_p}.",
        f"Gives {step_p} but not {gap_p}, or the reverse; or numbers without saying what they measure.",
        f"States {step_p} and {gap_p} with what owns it, and a few more" + (f", e.g. {phrase(more)}" if more else "")
        + ".",
        "States the model answer's numbers, each with what it measures: "
        + "; ".join(phrase(by_id[i]) for i in listed) + f" (full marks at about {full} of its {len(targets)}).")

    if traps:
        first = f"'{_claim(traps[0]['claim'])}'"
        others = "; ".join(f"'{_claim(t['claim'])}'" for t in traps[1:])
        trap = _levels(
            f"Endorses {first} as the cause" + (f", or proposes to {action}" if action else "")
            + f"; the automatic score caps the whole read at {TRAP_CAP}.",
            f"Names {first} but never decides it, or leans towards it with a hedge (a reviewer should look).",
            f"Rejects {first}" + (f" (or another trap: {others})" if others else "")
            + " out loud, with a reason but not the arithmetic.",
            f"Raises {first} and rejects it with this instance's arithmetic: {_trap_arithmetic(inst, traps[0])}.")
    else:  # a key without traps: the criterion in general terms
        trap = _levels("Endorses a tempting cause without checking it.", "Names a hypothesis but never decides it.",
                       "Rejects a tempting hypothesis with a reason.", "Rejects a tempting hypothesis with arithmetic.")

    root = _levels(
        "No cause, or a trap's story given as the cause.",
        f"Describes the symptom, {gap_p}, without a mechanism, or lists causes without choosing one.",
        f"The cause in outline ('{_head(key['root_cause'])}'), but not its mechanism or not the numbers that "
        f"pin it down.",
        f"The whole cause, as the key has it: {_gist(key['root_cause'])}.")

    also = [tools.TOOLS[t].title for t in rubric.also_confirms if t in tools.TOOLS]
    result, about_tool = _confirmation_result(inst)
    measurement = _levels(
        f"No measurement, or {trap_course}.",
        (f"Names one that supports but does not settle it ({'; '.join(also)}), or a vague 'profile more'."
         if also else "Proposes a generic next step (profile more, add logging) that could not settle it."),
        f"Names {tool_p} but not what it would show here.",
        f"Names {tool_p} and what it shows here" + (": " if about_tool else ", then confirms: ") + f"{result}.")

    fix_win = _levels(
        f"No fix, or {trap_course}.",
        f"Names the fix ('{_head(key['fix'])}') with no number, or a win with no fix.",
        f"Names the fix and one number of the win (~{say(exp['after_ms'], '', approx=False)} after, or "
        f"{say(exp['speedup'], 'x')}), but not how it follows.",
        f"Names the fix ({_gist(key['fix'])}) and the win with its arithmetic: {win} ({_win_arithmetic(inst)}).")

    by_criterion = {"discipline_order": discipline, "findings": findings, "trap": trap, "root_cause": root,
                    "measurement": measurement, "fix_win": fix_win}
    return [{"id": c, "label": LABELS[c], "levels": by_criterion[c]} for c in CRITERIA]


# -- 3. the hint ladder ------------------------------------------------------------------

def hints(inst: Instance) -> list[dict]:
    """Four or five hints, gentle to pointed: [{index, title, text}], `index` being the hint's
    position in the list (0 first), as a round reveals it. The discipline's
    nudges, then the scenario's own (or, where it defines none, the rest of the discipline
    and its decisive measurement by name)."""
    own = tuple(inst.scenario.hints)
    if not own:
        tool_id = inst.key["decisive_measurement"]
        tool = tools.TOOLS.get(tool_id)
        named = f"{tool.title} ({tool_id})" if tool else tool_id
        own = DEFAULT_HINTS + (Hint("The measurement that settles it",
                                    f"Run {named} and say what it shows before proposing any change."),)
    return [{"index": n, "title": h.title, "text": h.text} for n, h in enumerate(DISCIPLINE_HINTS + own)]
