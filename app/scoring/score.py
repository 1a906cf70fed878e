"""Score a narrated read against an instance's answer key (contract 4 of DESIGN.md).

Deterministic: every point earned cites the characters that earned it, and every point
missed says what was expected, in the instance's numbers. The criteria are rules; the trap
stance (app/scoring/trap.py) is the rules' findings weighed by a fitted linear model
(app/scoring/stance.py), which says what it leaned on.
"""

from __future__ import annotations

import re

from app.scoring import lexicon, stance
from app.scoring.numbers import Quantity, key_value, matches
from app.scoring.read import Read, cite, criterion, has, read_of, word_count
from app.scoring.rubric import Rubric
from app.scoring.text import clauses, find, rx
from app.scoring.trap import (decide, denies, last_turn_to_cause, names_measurement, proposes_fix, read_denies_cause,
                              stance_features, trap_criterion, trap_mentions)

WEIGHTS = {"discipline_order": 20, "findings": 25, "trap": 15, "root_cause": 15, "measurement": 10, "fix_win": 15}
MAX_CHARS = 20_000  # a 60-second read is ~1,000 characters; a long written one ~5,000
TRAP_CAP = 40  # endorsing the trap caps the total here
FULL_FINDINGS = 0.7  # share of the model answer's numbers that earns full findings marks
FULL_FINDINGS_MAX = 7  # ... and at most this many: a spoken minute holds about seven numbers
INVERSION = 0.4  # each pair of stages said out of order costs this share of a stage's points
# Observations that belong to the fix, scored under fix_win rather than findings.
FIX_IDS = {"expected_step_ms", "speedup"}
# The 60-second mode: a spoken minute holds about 150-170 words (at ~160 words a minute).
# Past TIMED_WORDS the read ran over time: it loses discipline_order in proportion to the
# overrun, all of it at twice the length (the discipline is choosing what to say first).
TIMED_WORDS = 170
SPOKEN_WPM = 160


class NarrationError(ValueError):
    """The narration cannot be scored (empty, too long); the message says why."""


class NarrationTooLong(NarrationError):
    """Over MAX_CHARS (HTTP 413)."""


def check_text(text: str) -> None:
    """A narration a page may store: within MAX_CHARS, and text a database can hold."""
    if len(text) > MAX_CHARS:
        raise NarrationTooLong(f"the narration is {len(text):,} characters; the limit is {MAX_CHARS:,}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # JSON may carry "\ud800"; no database stores it
        raise NarrationError(f"the narration holds an unpaired surrogate (U+{ord(text[e.start]):04X}) at "
                             f"character {e.start}; send UTF-8 text") from None


# --- findings --------------------------------------------------------------------------

def _cue_rx(obs: dict, rubric: Rubric) -> re.Pattern:
    words = lexicon.words_of(obs) + list(rubric.cues.get(obs["id"], ()))
    return rx("|".join(f"(?:{w})" for w in words)) if words else rx(r"(?!x)x")


def _closeness(q: Quantity, o: dict) -> float:
    """How far a said quantity is from an observation's value, as a share of it (0: exact
    or inside a said range)."""
    v, _ = key_value(o["value"], o["unit"])
    if q.low <= v <= q.high:
        return 0.0
    return min(abs(v - q.low), abs(v - q.high)) / max(abs(v), 1e-9)


def _rounding(said: str) -> float:
    """Half a unit of the said number's last digit, as a share of it: "195 ms" stands for
    194.5-195.5, so a value 0.2% away is what the speaker said (0 where no digits are said)."""
    m = re.search(r"\d[\d,]*(?:\.(\d+))?", said)
    if not m:
        return 0.0
    value = float(m.group().replace(",", ""))
    return 0.5 * 10 ** -len(m.group(1) or "") / value if value else 0.0


def stated(read: Read, observations: list[dict], rubric: Rubric) -> dict[str, tuple[Quantity, dict]]:
    """Observation id -> the quantity that states it: the value within tolerance and the
    clause (or, failing that, the sentence) about that quantity. One said number states one
    observation, the one it fits best (its cue in the number's own clause first, then the
    closer value): "175 ms" is the idle or the all-reduce, not both, and a ratio said as
    the speedup is not also the gap's share."""
    cues = {o["id"]: _cue_rx(o, rubric) for o in observations}
    pairs: list[tuple[tuple, Quantity, dict]] = []
    for n, q in enumerate(read.qty):
        if q.start in read.positions:
            continue
        clause = read.clause_of(q.start)
        sent = read.sents[read.sentence_of(q.start)]
        parts = clauses(sent)
        k = next((j for j, c in enumerate(parts) if c.start == clause.start), 0)
        # "Step on rank 0: 612 ms": a clause with no subject of its own takes the one before it
        bare = not any(rx.search(clause.text) for rx in cues.values())
        context = clause.text if not (bare and k) else parts[k - 1].text + " " + clause.text
        at = len(context) - len(clause.text) + q.start - clause.start  # the number's place in the context
        for o in observations:
            if not matches(q, o["value"], o["unit"], rubric.tolerance.get(o["id"], 0.10)):
                continue
            own = list(cues[o["id"]].finditer(context))
            if own or (cues[o["id"]].search(sent.text) and len(parts) == 1):
                # Two observations a said number fits within its rounding ("195 ms" for a
                # 194.8 ms wait and a 194.9 ms excess) are told apart by the words nearest
                # the number ("waits 195 ms"), not by which value the rounding happens to favour.
                near = min((abs(m.start() - at) if m.start() >= at else max(0, at - m.end()) for m in own),
                           default=len(context))
                off = _closeness(q, o) > _rounding(read.original[q.start:q.end])
                pairs.append(((0 if own else 1, off, 0 if off else near, _closeness(q, o), n), q, o))
    out: dict[str, tuple[Quantity, dict]] = {}
    used: set[int] = set()
    for _rank, q, o in sorted(pairs, key=lambda p: p[0]):
        if o["id"] in out or q.start in used:
            continue
        out[o["id"]] = (q, o)
        used.add(q.start)
    # in the order the read says them
    return dict(sorted(out.items(), key=lambda kv: kv[1][0].start))


def findings_targets(key: dict, rubric: Rubric) -> list[str]:
    """The observation ids a read is expected to state: those the model answer states (the
    first six findings when it states none), in the order it states them."""
    obs = [o for o in key["observations"] if o["id"] not in FIX_IDS]
    return list(stated(read_of(key["model_answer"]), obs, rubric)) or [o["id"] for o in obs[:6]]


def _findings(read: Read, key: dict, rubric: Rubric, w: dict) -> dict:
    obs = [o for o in key["observations"] if o["id"] not in FIX_IDS]
    targets = set(findings_targets(key, rubric))
    got = stated(read, obs, rubric)
    on_target = [i for i in got if i in targets]
    extra = [i for i in got if i not in targets]
    # Full marks at 70% of what the model answer states, or seven numbers if it states more:
    # a spoken minute cannot say it all.
    credit = (len(on_target) + 0.5 * len(extra)) / min(FULL_FINDINGS * len(targets), FULL_FINDINGS_MAX)
    ev = [cite(read.original, q.start, q.end, f"{o['label']}: {o['value']:g} {o['unit']}".rstrip()) for q, o in got.values()]
    missed = [f"{o['label']}: {o['value']:g} {o['unit']}".rstrip() for o in obs if o["id"] in targets and o["id"] not in got]
    return criterion("findings", w["findings"] * min(1.0, credit), ev, missed, w)


# --- discipline order ------------------------------------------------------------------

def _discipline(read: Read, rubric: Rubric, w: dict) -> dict:
    stages = [st for st in lexicon.STAGES if st not in rubric.skip_stages]
    first: dict[str, tuple[int, re.Match]] = {}
    for i, s in enumerate(read.sents):
        for stage in stages:
            if stage not in first:
                m = find(list(lexicon.STAGE_PATTERNS[stage]), s.text)
                if m:
                    first[stage] = (i, m)
    per = w["discipline_order"] / len(stages)
    score = per * len(first)
    order = [st for st in stages if st in first]
    said = sorted(order, key=lambda st: (first[st][0], first[st][1].start()))
    inversions = [(a, b) for i, a in enumerate(order) for b in order[i + 1:] if said.index(a) > said.index(b)]
    score -= INVERSION * per * len(inversions)
    missed = [f"{lexicon.STAGE_LABELS[st]} never stated" for st in stages if st not in first]
    if ("gaps", "longest_kernel") in inversions:  # the kernels before the idle time: case 2's lesson
        score -= INVERSION * per
        missed.append("went to the longest kernel before accounting for the gaps (the idle time comes first)")
    for a, b in inversions:
        if (a, b) != ("gaps", "longest_kernel"):
            missed.append(f"{lexicon.STAGE_LABELS[b]} before {lexicon.STAGE_LABELS[a]}")
    ev = []
    for st in said:
        i, m = first[st]
        s = read.sents[i]
        ev.append(cite(read.original, s.start + m.start(), s.start + m.end(), f"{lexicon.STAGE_LABELS[st]} (stage "
                                                                         f"{lexicon.STAGES.index(st) + 1})"))
    return criterion("discipline_order", score, ev, missed, w)


# --- root cause, measurement, fix -------------------------------------------------------

def _root_cause(read: Read, key: dict, rubric: Rubric, w: dict) -> dict:
    found, ev = 0, []
    for group in rubric.root_cause:
        hit = None
        for s in read.sents:
            for c in clauses(s):
                m = has(group, c.text)
                if m and not denies(c.text, m):
                    hit = (c, m)
                    break
            if hit:
                break
        if hit:
            c, m = hit
            found += 1
            ev.append(cite(read.original, c.start + m.start(), c.start + m.end(), "root cause"))
    missed = [] if found == len(rubric.root_cause) else [key["root_cause"]]
    return criterion("root_cause", w["root_cause"] * found / max(1, len(rubric.root_cause)), ev, missed, w)


def _measurement(read: Read, key: dict, rubric: Rubric, runs: list[dict], w: dict) -> dict:
    """Credit where the read names the decisive measurement or its result (the patterns in
    lexicon.MEASUREMENTS say both), half for one that also confirms. Running a tool in the
    panel is a note beside the score, not points: the read has to say what it measured."""
    decisive = key["decisive_measurement"]
    for tool, pts in [(decisive, 1.0)] + [(t, 0.5) for t in rubric.also_confirms]:
        m = has(lexicon.MEASUREMENTS.get(tool, ()), read.text)
        if m:
            return criterion("measurement", w["measurement"] * pts, [cite(read.original, m.start(), m.end(), f"names {tool}")],
                              [] if pts == 1 else [f"the decisive one: {key['confirmation']}"], w)
    ran = next((r for r in runs if r.get("tool") == decisive), None)
    note = []
    if ran:
        when = f" at {ran['since_open_s']:.0f} s" if ran.get("since_open_s") is not None else ""
        note = [{"text": "", "start": 0, "end": 0,
                 "reason": f"ran {decisive} in the measurements panel{when}, but the read does not say what it showed"}]
    return criterion("measurement", 0, note, [f"name the decisive measurement ({decisive}) and what it shows: "
                                               f"{key['confirmation']}"], w)


def _fix_win(read: Read, key: dict, rubric: Rubric, w: dict) -> dict:
    part = w["fix_win"] / 3
    score, ev, missed = 0.0, [], []
    m = has(rubric.fix, read.text)
    if m:
        score += part
        ev.append(cite(read.original, m.start(), m.end(), "names the fix"))
    else:
        missed.append(f"the fix: {key['fix']}")
    exp = key["expected"]
    # the after-value, preferably where the read talks about the fix or the outcome
    said = [q for q in read.qty if matches(q, float(exp["after_ms"]), "ms") and q.start not in read.positions]
    outcome = [q for q in said if has(lexicon.OUTCOME, read.clause_of(q.start).text)]
    after = (outcome or said or [None])[0]
    # the win can be said as the step after the fix or as any other figure the key expects
    # after it (MFU, ITL p99, arithmetic intensity), said of that quantity
    later = stated(read, [o for o in key["observations"] if o["id"].startswith("expected_")], rubric)
    if after:
        score += part
        ev.append(cite(read.original, after.start, after.end, f"after the fix: {float(exp['after_ms']):g} {exp['unit']}"))
    elif later:
        q, o = next(iter(later.values()))
        score += part
        ev.append(cite(read.original, q.start, q.end, f"after the fix: {o['label']} {o['value']:g} {o['unit']}"))
    else:
        missed.append(f"the expected value after the fix: ~{float(exp['after_ms']):.0f} {exp['unit']} "
                      f"({exp.get('arithmetic', '')})".rstrip(" ()"))
    sp = float(exp["speedup"])
    # a ratio said of the win ("1.5x faster", "step ~324 ms, 1.57x" where the fix is said),
    # not any ratio that happens to equal it (a straggler's max/median)
    def of_the_win(q):
        i = read.sentence_of(q.start)
        said_after = any(x is not q and read.sentence_of(x.start) == i and matches(x, float(exp["after_ms"]), "ms")
                         for x in read.qty)
        return said_after or any(has(p, read.sents[i].text)
                                 for p in (lexicon.SYNONYMS["speedup"], lexicon.CHANGE, lexicon.OUTCOME, rubric.fix))

    gain = next((q for q in read.qty if of_the_win(q) and (
        (q.unit == "x" and matches(q, sp, "x"))
        or (q.unit == "%" and abs(q.value - (sp - 1) * 100) <= 0.1 * (sp - 1) * 100 + 1))), None)
    # "610 -> 415 ms" says the win as before and after in one breath: the ratio is implied
    before = next((q for q in read.qty if after and q.start < after.start
                   and read.clause_of(q.start) == read.clause_of(after.start)
                   and matches(q, float(exp["before_ms"]), "ms" if q.unit else "")), None)
    if gain:
        score += part
        ev.append(cite(read.original, gain.start, gain.end, f"speedup: {sp:.2f}x"))
    elif before:
        score += part
        ev.append(cite(read.original, before.start, after.end, f"before -> after: {sp:.2f}x"))
    else:
        missed.append(f"the speedup: {float(exp['before_ms']):.0f} / {float(exp['after_ms']):.0f} = {sp:.2f}x")
    return criterion("fix_win", score, ev, missed, w)


# --- the report ------------------------------------------------------------------------

def _over_time(discipline: dict, words: int) -> None:
    """A timed read past TIMED_WORDS: the stated penalty, taken from discipline_order."""
    over = words - TIMED_WORDS
    penalty = min(discipline["max"], discipline["max"] * over / TIMED_WORDS)
    discipline["score"] = round(max(0.0, discipline["score"] - penalty), 1)
    discipline["missed"].append(
        f"over time: {words} words in the 60-second mode is about {words / SPOKEN_WPM * 60:.0f} s spoken; a minute "
        f"holds about {TIMED_WORDS}. -{penalty:.1f} points: say the step, the gap, the cause and the fix first")


def score(key: dict, rubric: Rubric, narration: str, runs: list[dict] | None = None,
          weights: dict | None = None, timed: bool = False) -> dict:
    """Contract 4: total, trap_endorsed, needs_review, word_count, criteria with evidence
    and misses; `timed`: said in the 60-second mode, where running over time costs points."""
    if not narration or not narration.strip():
        raise NarrationError("the narration is empty: say what the trace shows")
    if len(narration) > MAX_CHARS:
        raise NarrationTooLong(f"the narration is {len(narration):,} characters; the limit is {MAX_CHARS:,} "
                             f"(a 60-second read is about 1,000)")
    w = {**WEIGHTS, **(weights or {})}
    read = read_of(narration)
    root = _root_cause(read, key, rubric, w)
    own_cause = root["score"] > 0 or proposes_fix(read, rubric)
    by_trap = trap_mentions(read, key, rubric)
    last_turn = last_turn_to_cause(read, rubric)
    trap, endorsed, review = trap_criterion(read, key, rubric, w, own_cause, by_trap, last_turn)
    # only where the trap was named and not rejected outright (a third of its points or less)
    named_only = not endorsed and trap["evidence"] and trap["score"] < w["trap"] / 2
    denial = read_denies_cause(read, rubric) if named_only else None
    if denial:
        # "nvidia-smi shows 100%, so the GPU is busy and the data loading can't be the problem":
        # the trap's evidence named and the true cause denied is the trap endorsed
        endorsed = True
        trap.update(score=0, evidence=trap["evidence"] + [denial],
                    missed=[f"reject it: {key['traps'][0]['why_wrong']}"])
    if endorsed:
        review = None
        # a read that names the true fix and the decisive measurement has the story; a trap
        # endorsement beside it is a slip or a misreading of ours as often as a belief, and
        # capping a strong read costs far more than missing a weak one: a reader decides
        if proposes_fix(read, rubric) and names_measurement(read, key, rubric):
            endorsed = False
            review = (f"the read endorses a trap ({trap['evidence'][0]['text']!r}) but also names the fix and the "
                      f"decisive measurement: which does it stand on?")
            trap.update(score=0, missed=[f"reject the trap out loud: {key['traps'][0]['why_wrong']}"])
    findings = _findings(read, key, rubric, w)
    criteria = [_discipline(read, rubric, w), findings, trap, root,
                _measurement(read, key, rubric, runs or [], w), _fix_win(read, key, rubric, w)]
    # the rules' verdict is one witness; the read taken whole decides (app/scoring/stance.py)
    features, anchor = stance_features(read, key, rubric, by_trap, last_turn, root, findings, endorsed,
                                       review is not None)
    judgment = stance.judge(features)
    endorsed, review = decide(judgment, read, key, trap, anchor, endorsed, review)
    words = word_count(narration)
    over_time = timed and words > TIMED_WORDS
    if over_time:
        _over_time(criteria[0], words)
    total = sum(c["score"] for c in criteria) * 100 / sum(w.values())
    if endorsed:
        total = min(total, TRAP_CAP)
    return {"scenario": key["scenario"], "seed": key["seed"], "total": round(total, 1), "trap_endorsed": endorsed,
            # contract 4: set when the scorer cannot decide something that matters (issue 12)
            "needs_review": review is not None, "review_reason": review,
            "timed": timed, "over_time": over_time, "word_count": words, "criteria": criteria,
            "stance": judgment.as_report(features)}
