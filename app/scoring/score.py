"""Score a narrated read against an instance's answer key (contract 4 of DESIGN.md).

Deterministic rules, no model: every point earned cites the characters that earned it,
and every point missed says what was expected, in the instance's numbers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from app.scoring import lexicon, stance
from app.scoring.numbers import Quantity, key_value, matches, quantities
from app.scoring.rubric import Rubric
from app.scoring.text import Span, clauses, find, rx, sentences

WEIGHTS = {"discipline_order": 20, "findings": 25, "trap": 15, "root_cause": 15, "measurement": 10, "fix_win": 15}
LABELS = {"discipline_order": "Discipline order", "findings": "Findings with numbers", "trap": "Trap considered and rejected",
          "root_cause": "Root cause", "measurement": "Decisive measurement", "fix_win": "Fix and expected win"}
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


@dataclass
class Read:
    """A narration split once for every criterion."""

    text: str  # the narration with typographic quotes as ASCII (same length: spans agree)
    sents: list[Span]
    qty: list[Quantity]
    original: str = ""  # as written: evidence quotes it
    positions: frozenset[int] = frozenset()  # starts of quantities that are places on the time axis

    def sentence_of(self, pos: int) -> int:
        for i, s in enumerate(self.sents):
            if s.start <= pos < s.end:
                return i
        return len(self.sents) - 1

    def clause_of(self, pos: int) -> Span:
        s = self.sents[self.sentence_of(pos)]
        return next((c for c in clauses(s) if c.start <= pos < c.end), s)


def _ev(text: str, start: int, end: int, reason: str) -> dict:
    return {"text": text[start:end], "start": start, "end": end, "reason": reason}


def _criterion(cid: str, score: float, evidence: list[dict], missed: list[str], weights: dict) -> dict:
    return {"id": cid, "label": LABELS[cid], "score": round(min(max(score, 0.0), weights[cid]), 1),
            "max": weights[cid], "evidence": evidence, "missed": missed}


def read_of(text: str) -> Read:
    # typographic quotes as ASCII, one character for one, so spans still index the original
    plain = text.translate(str.maketrans("’‘“”", "''\"\""))
    read = Read(plain, sentences(plain), quantities(plain), text)
    read.positions = _positions(read)
    return read


_SPAN_OPEN = re.compile(r"(?:\bfrom|\bbetween|\bt\s*=)\s*(?:~|about\s+|t\s*=\s*)?$", re.I)
_SPAN_JOIN = re.compile(r"^\s*(?:to|until|till|and|-|–|—)\s*(?:t\s*=\s*)?$", re.I)


def _positions(read: Read) -> frozenset[int]:
    """Times read off the ruler ("from 334 ms to 409 ms", "between 1.2 s and 1.6 s"): two
    places on the time axis, not durations, unless the clause says a change ("cuts the step
    from 622 ms to 415 ms"). Their difference said as a duration is a finding like any other."""
    out = set()
    for a, b in zip(read.qty, read.qty[1:]):
        if a.unit != "ms" or b.unit != "ms":  # times, whatever unit was said, are held in ms
            continue
        if not (_SPAN_OPEN.search(read.text[max(0, a.start - 12):a.start])
                and _SPAN_JOIN.match(read.text[a.end:b.start])):
            continue
        if _has(lexicon.CHANGE, read.clause_of(a.start).text):
            continue
        out.update((a.start, b.start))
    return frozenset(out)


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
        for o in observations:
            if not matches(q, o["value"], o["unit"], rubric.tolerance.get(o["id"], 0.10)):
                continue
            own = cues[o["id"]].search(context)
            if own or (cues[o["id"]].search(sent.text) and len(parts) == 1):
                pairs.append(((0 if own else 1, _closeness(q, o), n), q, o))
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
    ev = [_ev(read.original, q.start, q.end, f"{o['label']}: {o['value']:g} {o['unit']}".rstrip()) for q, o in got.values()]
    missed = [f"{o['label']}: {o['value']:g} {o['unit']}".rstrip() for o in obs if o["id"] in targets and o["id"] not in got]
    return _criterion("findings", w["findings"] * min(1.0, credit), ev, missed, w)


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
        ev.append(_ev(read.original, s.start + m.start(), s.start + m.end(), f"{lexicon.STAGE_LABELS[st]} (stage "
                                                                         f"{lexicon.STAGES.index(st) + 1})"))
    return _criterion("discipline_order", score, ev, missed, w)


# --- trap ------------------------------------------------------------------------------

def _has(patterns, text: str) -> re.Match | None:
    return find(list(patterns), text)


def negated(clause: str, start: int, end: int) -> bool:
    """A negation that governs the words at [start, end): up to four words before them or
    right after them ("it's not NCCL", "NCCL isn't the problem"), in the same clause."""
    before, after = clause[:start], clause[end:]
    # a negation past a comma is another predicate's: "it's the input pipeline, not comm",
    # "comm is serialized, the GPU isn't starving"
    after = re.split(r"[,;]", after, maxsplit=1)[0]
    return bool(re.match(r"\W*(\w+'s\s+)?\w*" + lexicon.NEGATION, clause[start:end], re.I)  # "not NCCL", "isn't NCCL"
                or re.search(lexicon.NEGATION + r"\W+(\w+\W+){0,4}$", before, re.I)
                # "ca"/"wo": can't and won't split as ca + n't, wo + n't
                or re.match(r"^\W*(\w+\W+){0,2}?(is|are|was|were|does|do|did|can|could|would|ca|wo)?\W*(not\b|n't\b)",
                            after, re.I)
                or re.match(r"^\W*n't\b", after, re.I)
                or re.match(r"^\W*(\w+\W+){0,2}?" + lexicon.BARE_NOT, after, re.I))


WINDOW_WORDS = (12, 25)  # words before and after a mention that decide its stance in a run-on sentence
RUN_ON_WORDS = 45  # a "sentence" longer than this is speech without punctuation, not one thought
FRAME_WORDS = 6  # "Fix:", "My bet -", "Then the fix is kernel-side:": a frame, not a claim of its own


# Where speech without stops starts its next thought: "... so i'd check the clocks", "... um
# and then", "... but". Only past the mention's first few words (", so it's not NCCL").
_SPOKEN_TURN = re.compile(r"\s(so|but|um+|uh+|and then|anyway|okay|right)\s", re.I)


def _window(read: Read, i: int, m_start: int, m_end: int) -> str:
    """In a run-on transcript with no stops, the words around a mention (an endorsing
    word 300 characters away in the same breath says nothing about it), up to where the
    speaker turns to the next thought."""
    s = read.sents[i]
    before = read.text[s.start:m_start].split()[-WINDOW_WORDS[0]:]
    rest = read.text[m_end:s.end]
    turn = next((t for t in _SPOKEN_TURN.finditer(rest) if len(rest[:t.start()].split()) >= 4), None)
    after = (rest[:turn.start()] if turn else rest).split()[:WINDOW_WORDS[1]]
    return " ".join(before + [read.text[m_start:m_end]] + after)


_CONTINUES = re.compile(r"^\s*,\s*(so|and|which)\b", re.I)


def _claim(read: Read, i: int, clause: Span, rubric: Rubric) -> str:
    """The claim a mention belongs to: its clause and the clauses that carry it on (", so
    ...", ", and ...", ", which ..."), up to a new claim (";", ":", ", but"). A clause that
    denies the true cause ("the data loading can't be it") says nothing of the trap."""
    parts = clauses(read.sents[i])
    k = next((j for j, c in enumerate(parts) if c.start == clause.start), 0)
    out = [clause.text]
    # "Fix: gc.freeze() ...", "I'd guess - the sharding ...": a short frame before a colon or
    # a dash announces the clause after it, and belongs to its claim
    if k and len(parts[k - 1].text.split()) <= FRAME_WORDS and re.search(
            r"[:—–]|\s-\s", read.text[parts[k - 1].end:clause.start]):
        out.insert(0, read.text[parts[k - 1].start:clause.start].strip())  # with its colon: "Action:" says what follows is
    for prev, nxt in zip(parts[k:], parts[k + 1:]):
        if not _CONTINUES.match(read.text[prev.end:nxt.start + 1] if nxt.start > prev.end else ""):
            break
        if not _clause_denies_cause(nxt.text, rubric):
            out.append(nxt.text)
    return " ".join(out)


def _denies(text: str, m: re.Match) -> bool:
    """The cause matched at m is denied in its clause: negated ("the loader isn't the
    problem"), the object of a denied "that" ("it can't be that the GPUs are waiting for
    images"), or ruled out ("I'd rule out the input pipeline"). A cause said in the
    negative ("not overlapped", "two workers can't keep up") is asserted, not denied."""
    if re.search(lexicon.NEGATION, m.group(0), re.I) or \
            _has(lexicon.SHORTFALL, text[max(0, m.start() - 30):m.end() + 40]):
        return False
    return (negated(text, m.start(), m.end())
            or re.search(lexicon.NEGATION + r"\s+(\w+\s+)?be\s+that\b(\W+\w+){0,8}\W*$", text[:m.start()], re.I) is not None
            # "rule out the input pipeline", "the loader is not the bottleneck": near the cause
            or _has(lexicon.DENIAL, text[max(0, m.start() - 40):m.end() + 50]) is not None)


def _clause_denies_cause(text: str, rubric: Rubric) -> bool:
    """The clause names the true cause only to deny it."""
    for group in rubric.root_cause:
        m = _has(group, text)
        if m and _denies(text, m):
            return True
    return False


def _classify(read: Read, i: int, clause: Span, m_start: int, m_end: int, rubric: Rubric) -> tuple[str, bool]:
    """One mention of a trap: "rejected", "endorsed", "tentative" (an endorsement hedged or
    on the side), "checking" (a course that only measures it), "posed" (asked, a check to
    make, or put off) or "named", and whether arithmetic backs the rejection (a number
    after the mention in its sentence or in the next one)."""
    s = read.sents[i]
    if clause.end - clause.start > CLAUSE_CHARS:
        # a clause of thousands of characters (speech with no stops): its checks look at the
        # words around the mention, as a listener would, and stay linear in the read's length
        lo, hi = max(clause.start, m_start - CLAUSE_CHARS // 2), min(clause.end, m_end + CLAUSE_CHARS // 2)
        clause = Span(lo, hi, read.text[lo:hi])
    run_on = len(s.text.split()) > RUN_ON_WORDS
    around = _window(read, i, m_start, m_end) if run_on else _claim(read, i, clause, rubric)
    follow = [read.sents[j].text for j in (i + 1, i + 2) if j < len(read.sents)]
    mention = read.text[m_start:m_end]
    after_mention = around[around.find(mention) + len(mention):] if run_on else read.text[m_end:s.end]
    arith = any(q.start >= m_end and read.sentence_of(q.start) in (i, i + 1) for q in read.qty)
    # a verdict in a clause that denies the true cause ("... and the data loading can't be it")
    # is about the cause, not about the trap
    verdict = None if _clause_denies_cause(clause.text, rubric) else _has(lexicon.VERDICT, around)
    # "the NVLink topology isn't being detected right": a negation that says something is
    # broken asserts the fault, it does not deny it
    fault = _has(lexicon.FAULT, after_mention[:80]) or _has(lexicon.FAULT, read.text[max(clause.start, m_start - 30):m_end])
    here = negated(clause.text, m_start - clause.start, m_end - clause.start) and not fault
    # "with nvidia-smi at 100% it can't be that the GPUs are waiting for images": the
    # negation is the true cause's, not the trap's (the read-level check below sees the denial)
    if here and _clause_denies_cause(clause.text, rubric):
        here = False
    posed = _has(lexicon.HYPOTHESIS, read.text[max(s.start, m_start - 200):m_end]) or _has(lexicon.HYPOTHESIS, clause.text)
    # the next sentence's verdict answers the trap, unless it is the true cause it rules out
    answered = any((re.match(lexicon.VERDICT_OPENING, f, re.I) or _has(lexicon.VERDICT, f))
                   and not _clause_denies_cause(f, rubric) for f in follow[:1])
    endorse = _has(lexicon.ENDORSE, around) or fault or (
        re.match(lexicon.CONCLUSION, clause.text, re.I) and re.search(lexicon.FAULT_WORDS, mention, re.I))
    # "X, I know that's what people point at, but that counter only asks ...": a concession
    # turned by a contrast, unless what follows the contrast proposes the trap's course
    turn = re.search(r"\b(but|however|though|yet)\b", after_mention, re.I)
    conceded = turn and not _has(lexicon.COMMIT, after_mention[turn.end():])
    if posed and not turn and run_on:
        # "youd think oh the mfu math is off ... but i did the math its right": in speech the
        # answer to a posed hypothesis can lie past the window's spoken turn
        tail = read.text[m_end:min(s.end, m_end + 200)]
        turn = re.search(r"\b(but|however)\b", tail, re.I)
        conceded = turn and not _has(lexicon.COMMIT, tail[turn.end():turn.end() + 100])
    # "make sure NVLink isn't falling back to PCIe": a negation under a check is the check's
    if re.search(r"\b(make sure|ensure|check that|verify that|confirm that)\b", read.text[clause.start:m_start], re.I):
        return "posed", False
    if here or verdict or conceded:
        return "rejected", arith
    if posed and (answered or arith or _has((lexicon.NEGATION,), after_mention)):
        return "rejected", arith
    if answered and not endorse:
        return "rejected", arith
    # a question ("are the GC pauses related?", "would a replica help?", "one question is
    # whether the MFU number is off") or a check to make ("I'd want to check whether NCCL
    # ...") poses the trap: that is not backing it
    checked = _has(lexicon.INVESTIGATE, around)
    if s.text.rstrip().endswith("?") or (checked and around.find(mention) > checked.start()) or \
            _has(lexicon.DEFER, around) or re.search(r"\bwhether\b", read.text[clause.start:m_start], re.I):
        return "posed", False
    # "it could possibly be the copy": an attribution, hedged
    leaning = re.search(r"\b(could|might|may)\b(\s+\w+){0,2}\s+be\b(\s+\w+){0,3}\s*$",
                        read.text[max(clause.start, m_start - 60):m_start], re.I)
    if endorse or leaning:
        side = _has(lexicon.SECONDARY, around)
        # "I'd probably start with the copy": a commitment hedged in the same breath is unsure too
        unsure = leaning or (_has(lexicon.HEDGE, around) and (not _has(lexicon.COMMIT, around) or re.search(
            r"\b(i'd|i would|we should|we'd|i will|i'll)\s+(probably|maybe|likely|perhaps)\b", around, re.I)))
        # "either the kernels are slow or the MFU math is off": one of several, unsure too
        if side or unsure or _has(lexicon.ALTERNATIVES, around):
            return "tentative", False
        # a course that only looks ("I'd compare against nccl-tests numbers", "we should look
        # at the memcpy rows") backs the trap only where the read also says it is the cause
        if (checked or _has(lexicon.LOOK, around)) and not _has(lexicon.FIXING, around):
            return "checking", False
        return "endorsed", False
    return "named", False


CLAIM_STOP = lexicon.STOP | {"are", "was", "were", "has", "have", "got", "gets", "must", "shows", "show", "means",
                              "makes", "make", "needs", "need", "run", "try", "look", "check", "time", "more", "left",
                              "end", "things", "row", "further", "another", "sizes", "small", "second"}


def _blames_part(read: Read, i: int, c: Span, parts: str | None, rubric: Rubric) -> tuple | None:
    """A clause that blames the trap's subject in words of its own ("the collective is the
    slow part", "my read is the GEMVs", "the replica is overloaded"), outside the true
    cause's clause: (start, end, kind, arith) as an endorsement, hedged or not; a subject
    named, asked about, measured or cleared is nothing here."""
    m = re.search(parts, c.text, re.I) if parts else None
    if not m or _says_cause_or_fix(c, rubric):
        return None
    reach = lexicon.BLAME_REACH
    if not (_has(lexicon.BLAME_AFTER, c.text[m.end():m.end() + reach])
            or _has(lexicon.BLAME_BEFORE, c.text[max(0, m.start() - reach):m.start()])):
        return None
    a, b = c.start + m.start(), c.start + m.end()
    kind, arith = _classify(read, i, c, a, b, rubric)
    if kind in ("rejected", "posed", "checking"):
        return None
    return a, b, ("tentative" if kind == "tentative" else "endorsed"), arith


def _claim_words(trap: dict, key: dict) -> set[str]:
    """The trap claim's own distinctive words (as 5-letter stems): in its claim, not in the
    key's root cause, fix or brief (which every read may say)."""
    def stems(t: str) -> set[str]:
        return {w[:5] for w in re.findall(r"[a-z][a-z0-9_+-]{3,}", t.lower()) if w not in CLAIM_STOP}
    return stems(trap["claim"]) - stems(key["root_cause"] + " " + key["fix"] + " " + key["brief"])


def _claim_hit(words: set[str], text: str) -> tuple[int, int] | None:
    """Where a clause says at least two of the claim's distinctive words: the span from the
    first to the last."""
    hits = [m for m in re.finditer(r"[A-Za-z][A-Za-z0-9_+-]{3,}", text) if m.group(0).lower()[:5] in words]
    if len({m.group(0).lower()[:5] for m in hits}) < 2:
        return None
    return hits[0].start(), hits[-1].end()


def _mentions(patterns, text: str) -> list[tuple[int, int]]:
    """Every place the patterns match in a clause, in order, overlaps kept once: a clause
    of a run-on transcript can name the trap three times, and the last may be the claim."""
    found = sorted((m.start(), m.end()) for p in patterns for m in re.finditer(p, text, re.I) if m.end() > m.start())
    out: list[tuple[int, int]] = []
    for a, b in found:
        if out and a < out[-1][1]:
            continue
        out.append((a, b))
    return out


def _corrects(read: Read, pos: int) -> bool:
    """A correction said where a later rejection stands: in its sentence or the one before."""
    i = read.sentence_of(pos)
    return any(_has(lexicon.CORRECTION, read.sents[j].text) for j in (i - 1, i) if j >= 0)


def _says_cause_or_fix(s: Span, rubric: Rubric) -> bool:
    """The sentence names the key's fix or asserts its true cause in one of its clauses."""
    if _has(rubric.fix, s.text):
        return True
    return any(m and not _denies(c.text, m) for c in clauses(s) for m in (_has(g, c.text) for g in rubric.root_cause))


def _other_cause(read: Read, key: dict, rubric: Rubric) -> bool:
    """The read blames something that is none of the traps ("the optimizer step is the real
    problem", "the model is too big for the batch"): a clause that claims a cause and names
    no trap. Then a trap it also names is one thing among others it saw, not its story."""
    pats = [p for t in key["traps"] for p in rubric.traps.get(t["id"], ())]
    return any(_has(lexicon.CAUSE_CLAIM, c.text) and not _mentions(pats, c.text)
               for s in read.sents for c in clauses(s))


def _proposes(read: Read) -> bool:
    """Somewhere the read commits to a course of its own ("I'd ...", "we should", an
    imperative "Remove ...", "take it out")."""
    return any(_has(lexicon.COMMIT, c.text) or re.match(lexicon.IMPERATIVE, c.text, re.I)
               for s in read.sents for c in clauses(s))


CORRECTION_REACH = 4  # sentences from a correction within which the true cause it turns to is said
CLAUSE_CHARS = 600  # the most of a clause a mention's checks read (a run-on transcript is one clause)


def _last_turn_to_cause(read: Read, rubric: Rubric) -> int:
    """Where the read last corrects itself ("actually", "wait", "looking again", a sentence
    opening with "But") and, in that sentence or the few after, asserts the true cause: "My
    first read was NCCL ... Actually the compute stream sits idle for the whole all-reduce;
    nothing overlaps." An endorsement before it is taken back (a correction need not name
    the trap again). The sentence's start, or -1; once per read, not per mention."""
    for k in range(len(read.sents) - 1, -1, -1):
        t = read.sents[k].text
        if not (_has(lexicon.CORRECTION, t) or re.match(lexicon.TURN_OPENING, t, re.I)):
            continue
        for sent in read.sents[k:k + CORRECTION_REACH]:
            for c in clauses(sent):
                for group in rubric.root_cause:
                    m = _has(group, c.text)
                    if m and not _denies(c.text, m) and not _has(lexicon.HYPOTHESIS, c.text):
                        return read.sents[k].start
    return -1


def trap_mentions(read: Read, key: dict, rubric: Rubric) -> dict[str, list[tuple]]:
    """Every place the read names each trap, in reading order, with how it is said: trap id
    -> [(start, end, kind, arith, sentence)], kind one of rejected / endorsed / tentative /
    checking / posed / named (`_classify`), arith whether the arithmetic that kills it is said."""
    out: dict[str, list[tuple]] = {}
    for trap in key["traps"]:
        pats = rubric.traps.get(trap["id"], ())
        mentions = out[trap["id"]] = []
        claim_words = _claim_words(trap, key)
        for i, s in enumerate(read.sents):
            found = False
            for c in clauses(s):
                for ma, mb in _mentions(pats, c.text):
                    a, b = c.start + ma, c.start + mb
                    mentions.append((a, b, *_classify(read, i, c, a, b, rubric), s))
                    found = True
            if found:
                continue
            # a sentence that says the trap in the words of its claim, not the rubric's
            # patterns: counted only as a course or a cause proposed (endorsed or hedged), never
            # as a rejection or a mere mention (those need the trap named plainly)
            for c in clauses(s):
                hit = _claim_hit(claim_words, c.text)
                if hit:
                    a, b = c.start + hit[0], c.start + hit[1]
                    kind, arith = _classify(read, i, c, a, b, rubric)
                    if kind in ("endorsed", "tentative"):
                        mentions.append((a, b, kind, arith, s))
                        break
                else:
                    blamed = _blames_part(read, i, c, rubric.trap_parts.get(trap["id"]), rubric)
                    if blamed:
                        mentions.append((*blamed, s))
                        break
    return out


def _retracted(read: Read, mentions: list[tuple], k: int, last_turn: int) -> bool:
    """Mention k of a trap (an endorsement, hedged or not) is taken back: a rejection of the
    same trap in a later sentence that says so ("actually, no"), does the arithmetic that
    kills it, or proposes nothing itself (not "I'd run nccl-tests and make sure NVLink isn't
    falling back": that negation is part of the course); or the read turns to the true cause
    after it (`last_turn`, from _last_turn_to_cause). The read's last word on the trap stands."""
    a, b, kind, arith, s = mentions[k]
    return kind in ("endorsed", "tentative") and (any(
        later[2] == "rejected" and later[4].start > s.start and (
            _corrects(read, later[0]) or later[3] or not _has(lexicon.COMMIT, later[4].text))
        for later in mentions[k + 1:]) or last_turn > s.start)


def _trap(read: Read, key: dict, rubric: Rubric, w: dict, own_cause: bool, by_trap: dict[str, list[tuple]],
          last_turn: int) -> tuple[dict, bool, str | None]:
    """The trap criterion, whether the read confidently endorses a trap (the cap), and why
    a reviewer should look when the scorer cannot tell (a hedged or side endorsement, or one
    the read takes back later)."""
    best, ev, endorsed_ev = 0.0, [], []
    review: str | None = None
    endorsed_ids: set[str] = set()  # traps endorsed outright
    leaning: list[dict] = []  # hedged endorsements of a trap the read never rejects
    stated: list[dict] = []  # the trap said as a plain fact ("the spikes are GC pauses"), never rejected
    looked: list[tuple[str, dict]] = []  # (trap id, evidence): courses that only measure a trap
    for trap in key["traps"]:
        mentions = by_trap[trap["id"]]
        rejected_anywhere = any(m[2] == "rejected" for m in mentions)
        for k, (a, b, kind, arith, s) in enumerate(mentions):
            retracted = _retracted(read, mentions, k, last_turn)
            if kind == "rejected":
                pts = w["trap"] if arith else w["trap"] * 2 / 3
                why = "rejected with arithmetic" if arith else "rejected, without the arithmetic"
                if pts > best:
                    best, ev = pts, [_ev(read.original, s.start, s.end, f"trap '{trap['claim']}' {why}")]
            # a trap rejected earlier and named again in the sentence that gives the true cause
            # or its fix ("... so the fix is bucketing, and NCCL then hides under backward"):
            # more likely the fix's own words than a change of mind; a reader decides
            beside_fix = kind == "endorsed" and any(m[2] == "rejected" for m in mentions[:k]) and \
                _says_cause_or_fix(s, rubric)
            if beside_fix:
                review = review or (f"the read rejects the trap '{trap['claim']}' and names it again beside the true "
                                    f"cause or fix ({read.original[a:b]!r}): is it endorsed?")
            elif kind == "endorsed" and not retracted:
                endorsed_ev.append(_ev(read.original, a, b, f"endorses the trap: {trap['claim']}"))
                endorsed_ids.add(trap["id"])
            elif kind == "checking":
                looked.append((trap["id"], _ev(read.original, a, b, f"proposes to measure the trap it says is the "
                                                                   f"cause: {trap['claim']}")))
                review = review or (f"the read proposes to measure the trap '{trap['claim']}' "
                                    f"({read.original[a:b]!r}): is that backing it or checking it?")
            elif kind in ("endorsed", "tentative"):
                # a belief said softly ("I suspect", "probably") or a course proposed, not
                # doubt ("it could possibly be ..., I'm not sure") or one of several alternatives
                if kind == "tentative" and not retracted and not rejected_anywhere and \
                        not _has(lexicon.ALTERNATIVES, s.text) and (
                        not _has(lexicon.DOUBT, s.text) or _has(lexicon.COMMIT, s.text)):
                    leaning.append(_ev(read.original, a, b, f"endorses the trap, hedged, and offers no other cause: "
                                                            f"{trap['claim']}"))
                review = review or (f"the read {'leans towards' if kind == 'tentative' else 'first takes'} the trap "
                                    f"'{trap['claim']}' ({read.original[a:b]!r})"
                                    + (", then takes it back" if retracted else ", hedged or as a side fix")
                                    + ": is it endorsed?")
            else:
                if kind == "named" and not rejected_anywhere and not _has(lexicon.ALTERNATIVES, s.text) \
                        and not _has(lexicon.HEDGE, s.text) and not _has(lexicon.LOOK, s.text):
                    stated.append(_ev(read.original, a, b, f"states the trap as its own story, proposes a course and "
                                                          f"offers no other cause: {trap['claim']}"))
                if w["trap"] / 5 > best:
                    best, ev = w["trap"] / 5, [_ev(read.original, a, b, f"names the trap '{trap['claim']}' without "
                                                                      f"rejecting it")]
    # A hedge is doubt only where the read weighs something else: a read whose one
    # hypothesis is the trap (never rejected; the true cause, its fix and any other blame
    # never said; not undecided) has committed to it however softly it says so. The same
    # for a trap stated as plain fact in a read that commits to a course.
    sole = not own_cause and not _has(lexicon.UNDECIDED, read.text) and not _other_cause(read, key, rubric)
    if not endorsed_ev and leaning and sole:
        endorsed_ev = leaning
    if not endorsed_ev and stated and sole and _proposes(read):
        endorsed_ev = stated
    # measuring a trap the read endorses outright is the trap's course ("something is off in
    # the NCCL configuration. I'd run nccl-tests and look at NCCL_ALGO")
    endorsed_ev += [e for tid, e in looked if tid in endorsed_ids]
    if endorsed_ev:
        t0 = key["traps"][0]
        return _criterion("trap", 0, endorsed_ev, [f"reject it: {t0['why_wrong']}"], w), True, None
    missed = [] if best >= w["trap"] else [
        f"consider and reject '{t['claim']}' out loud, with the arithmetic: {t['why_wrong']}" for t in key["traps"][:1]]
    return _criterion("trap", best, ev, missed, w), False, review


# --- the read's stance taken whole (app/scoring/stance.py) --------------------------------

_VERDICTS = re.compile("|".join(f"(?:{p})" for p in lexicon.VERDICT), re.I)  # counted in one pass
TAIL_SHARE = 1 / 3  # the close of a read: the sentences after its first that end in this share of it
# the order in which a mention's kind stands for the read's position on a trap
_ANCHOR_ORDER = ("endorsed", "tentative", "checking", "named", "posed")


def stance_features(read: Read, key: dict, rubric: Rubric, by_trap: dict[str, list[tuple]], last_turn: int,
                    root: dict, findings: dict, rule_endorsed: bool, rule_review: bool) -> tuple[dict[str, float], tuple]:
    """stance.FEATURES for this read, and the span a judgment of endorsement cites: the
    read's last mention of a trap that leans most towards it, else the last clause that
    proposes a course on a trap's subject (else the last sentence)."""
    # a mention's kind as it stands: an endorsement the read takes back is "retracted"
    mentions = sorted(((*m[:2], "retracted" if _retracted(read, ms, k, last_turn) else m[2], *m[3:])
                       for ms in by_trap.values() for k, m in enumerate(ms)), key=lambda m: m[0])
    kinds = [m[2] for m in mentions]
    words = max(1, word_count(read.text))
    parts = [p for t in key["traps"] for p in [rubric.trap_parts.get(t["id"])] if p]
    any_part = rx("|".join(f"(?:{p})" for p in parts)) if parts else None
    # the read's close: its sentences that end in its last TAIL_SHARE of characters, never its
    # first (a one-sentence read has an opening and no close)
    tail_from = next((s.start for s in read.sents[1:] if s.end > len(read.text) * (1 - TAIL_SHARE)), len(read.text))
    said = course = tail = 0
    course_span = None
    for s in read.sents:
        for c in clauses(s):
            hits = len(any_part.findall(c.text)) if any_part else 0
            if not hits:
                continue
            said += hits
            if any(c.start <= m[0] < c.end and m[2] == "rejected" for m in mentions):
                continue  # "I'd be tempted to blame NCCL, but ...": the rules read this clause already
            # a course acts on the subject ("retune NCCL", "I'd swap the card"); "let me check the
            # NVLink counters" measures it, which is no course (the mention's kind says so)
            if _has(lexicon.FIXING, c.text) or (
                    (_has(lexicon.COMMIT, c.text) or rx(lexicon.IMPERATIVE).match(c.text))
                    and not _has(lexicon.INVESTIGATE, c.text) and not _has(lexicon.LOOK, c.text)):
                course += 1
                course_span = (c.start, c.end)
            tail += c.start >= tail_from
    features = {
        "rule_cap": float(rule_endorsed),
        "rule_review": float(rule_review),
        **{k: math.log1p(kinds.count(k))
           for k in ("endorsed", "tentative", "retracted", "rejected", "checking", "posed", "named")},
        "rejected_arith": float(any(m[2] == "rejected" and m[3] for m in mentions)),
        "last_endorse": float(bool(kinds) and kinds[-1] in ("endorsed", "tentative")),
        "root_cause": root["score"] / root["max"],
        "fix": float(_proposes_fix(read, rubric)),
        "measurement": float(_names_measurement(read, key, rubric)),
        "denies_cause": float(_read_denies_cause(read, rubric) is not None),
        "other_cause": float(_other_cause(read, key, rubric)),
        "undecided": float(_has(lexicon.UNDECIDED, read.text) is not None),
        "parts_said": math.log1p(said),
        "parts_course": math.log1p(course),
        "parts_tail": math.log1p(tail),
        # asserted, not denied: "it isn't the loader, so more workers won't help" closes on the trap
        "tail_cause": float(any(m and not _denies(c.text, m) for s in read.sents if s.start >= tail_from
                                for c in clauses(s) for m in (_has(g, c.text) for g in (*rubric.root_cause, rubric.fix)))),
        "verdicts": math.log1p(len(_VERDICTS.findall(read.text))),
        "hedge": float(_has(lexicon.HEDGE, read.text) is not None),
        "findings": findings["score"] / findings["max"],
        "words": math.log(words) / 5,
        "correction": float(_has(lexicon.CORRECTION, read.text) is not None),
    }
    ranked = [m for k in _ANCHOR_ORDER for m in reversed(mentions) if m[2] == k]
    span = (ranked[0][0], ranked[0][1]) if ranked else course_span or (read.sents[-1].start, read.sents[-1].end)
    return features, span


def _decide(judgment: stance.Judgment, read: Read, key: dict, trap: dict, anchor: tuple,
            rule_endorsed: bool, review: str | None) -> tuple[bool, str | None]:
    """The cap and the reviewer's flag from the judgment: (endorsed, review reason)."""
    p = f"p={judgment.p_endorse:.2f}"
    leaning = "; ".join(judgment.leaning_on) or "nothing in particular"
    if judgment.decision == "endorse":
        if not rule_endorsed:
            t0 = key["traps"][0]
            trap.update(score=0, evidence=[_ev(read.original, *anchor, f"the read taken whole endorses a trap ({p}: "
                                                                       f"{leaning})")],
                        missed=[f"reject it: {t0['why_wrong']}"])
        return True, None
    if rule_endorsed:
        # the rules' cap, overruled: the trap keeps the 0 they gave it, and a reader decides
        against = "; ".join(judgment.against) or "nothing in particular"
        return False, (f"a trap mention reads as endorsed ({trap['evidence'][0]['text']!r}), but the read as a whole "
                       f"is not sure of it ({p}: {against}): is it endorsed?")
    if judgment.decision == "review":
        story = " but it names the true fix and cause or measurement: which does it stand on?" \
            if judgment.p_endorse >= stance.CAP_P else ": is it endorsed?"
        return False, review or f"the read as a whole leans to a trap ({p}: {leaning}){story}"
    return False, review


# --- root cause, measurement, fix -------------------------------------------------------

def _read_denies_cause(read: Read, rubric: Rubric) -> dict | None:
    """The read's last word on the true cause is to deny it ("I see DataLoader.__next__
    at the top of the step, but I don't think the loader is the bottleneck"; "so I'd rule
    out the input pipeline"): evidence, or None. Naming the cause's evidence first is
    seeing it, not asserting it; what the read concludes about it stands."""
    for group in rubric.root_cause:
        last = None
        for s in read.sents:
            for c in clauses(s):
                m = _has(group, c.text)
                # a hypothetical ("if the GPU were waiting on input", "a starved GPU would
                # show idle time") neither asserts nor denies
                if not m or re.search(r"\b(if|unless|whether|would)\b", c.text, re.I):
                    continue
                if _denies(c.text, m) and not _has(lexicon.HYPOTHESIS, c.text):
                    last = _ev(read.original, c.start, c.end, "denies the true cause")
                else:
                    last = None
        if last:
            return last
    return None


def _root_cause(read: Read, key: dict, rubric: Rubric, w: dict) -> dict:
    found, ev = 0, []
    for group in rubric.root_cause:
        hit = None
        for s in read.sents:
            for c in clauses(s):
                m = _has(group, c.text)
                if m and not _denies(c.text, m):
                    hit = (c, m)
                    break
            if hit:
                break
        if hit:
            c, m = hit
            found += 1
            ev.append(_ev(read.original, c.start + m.start(), c.start + m.end(), "root cause"))
    missed = [] if found == len(rubric.root_cause) else [key["root_cause"]]
    return _criterion("root_cause", w["root_cause"] * found / max(1, len(rubric.root_cause)), ev, missed, w)


def _proposes_fix(read: Read, rubric: Rubric) -> bool:
    """The read names the key's fix somewhere without denying it ("more workers won't help"
    names it only to deny it)."""
    return any(m and not _denies(c.text, m) for s in read.sents for c in clauses(s) for m in [_has(rubric.fix, c.text)])


def _names_measurement(read: Read, key: dict, rubric: Rubric) -> bool:
    """The read names the decisive measurement or its result (lexicon.MEASUREMENTS)."""
    return _has(lexicon.MEASUREMENTS.get(key["decisive_measurement"], ()), read.text) is not None


def _measurement(read: Read, key: dict, rubric: Rubric, runs: list[dict], w: dict) -> dict:
    """Credit where the read names the decisive measurement or its result (the patterns in
    lexicon.MEASUREMENTS say both), half for one that also confirms. Running a tool in the
    panel is a note beside the score, not points: the read has to say what it measured."""
    decisive = key["decisive_measurement"]
    for tool, pts in [(decisive, 1.0)] + [(t, 0.5) for t in rubric.also_confirms]:
        m = _has(lexicon.MEASUREMENTS.get(tool, ()), read.text)
        if m:
            return _criterion("measurement", w["measurement"] * pts, [_ev(read.original, m.start(), m.end(), f"names {tool}")],
                              [] if pts == 1 else [f"the decisive one: {key['confirmation']}"], w)
    ran = next((r for r in runs if r.get("tool") == decisive), None)
    note = []
    if ran:
        when = f" at {ran['since_open_s']:.0f} s" if ran.get("since_open_s") is not None else ""
        note = [{"text": "", "start": 0, "end": 0,
                 "reason": f"ran {decisive} in the measurements panel{when}, but the read does not say what it showed"}]
    return _criterion("measurement", 0, note, [f"name the decisive measurement ({decisive}) and what it shows: "
                                               f"{key['confirmation']}"], w)


def _fix_win(read: Read, key: dict, rubric: Rubric, w: dict) -> dict:
    part = w["fix_win"] / 3
    score, ev, missed = 0.0, [], []
    m = _has(rubric.fix, read.text)
    if m:
        score += part
        ev.append(_ev(read.original, m.start(), m.end(), "names the fix"))
    else:
        missed.append(f"the fix: {key['fix']}")
    exp = key["expected"]
    # the after-value, preferably where the read talks about the fix or the outcome
    said = [q for q in read.qty if matches(q, float(exp["after_ms"]), "ms") and q.start not in read.positions]
    outcome = [q for q in said if _has(lexicon.OUTCOME, read.clause_of(q.start).text)]
    after = (outcome or said or [None])[0]
    # the win can be said as the step after the fix or as any other figure the key expects
    # after it (MFU, ITL p99, arithmetic intensity), said of that quantity
    later = stated(read, [o for o in key["observations"] if o["id"].startswith("expected_")], rubric)
    if after:
        score += part
        ev.append(_ev(read.original, after.start, after.end, f"after the fix: {float(exp['after_ms']):g} {exp['unit']}"))
    elif later:
        q, o = next(iter(later.values()))
        score += part
        ev.append(_ev(read.original, q.start, q.end, f"after the fix: {o['label']} {o['value']:g} {o['unit']}"))
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
        return said_after or any(_has(p, read.sents[i].text)
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
        ev.append(_ev(read.original, gain.start, gain.end, f"speedup: {sp:.2f}x"))
    elif before:
        score += part
        ev.append(_ev(read.original, before.start, after.end, f"before -> after: {sp:.2f}x"))
    else:
        missed.append(f"the speedup: {float(exp['before_ms']):.0f} / {float(exp['after_ms']):.0f} = {sp:.2f}x")
    return _criterion("fix_win", score, ev, missed, w)


# --- the report ------------------------------------------------------------------------

def word_count(text: str) -> int:
    return len(re.findall(r"\b[\w'’.-]+\b", text))


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
    own_cause = root["score"] > 0 or _proposes_fix(read, rubric)
    by_trap = trap_mentions(read, key, rubric)
    last_turn = _last_turn_to_cause(read, rubric)
    trap, endorsed, review = _trap(read, key, rubric, w, own_cause, by_trap, last_turn)
    # only where the trap was named and not rejected outright (a third of its points or less)
    named_only = not endorsed and trap["evidence"] and trap["score"] < w["trap"] / 2
    denial = _read_denies_cause(read, rubric) if named_only else None
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
        if _proposes_fix(read, rubric) and _names_measurement(read, key, rubric):
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
    endorsed, review = _decide(judgment, read, key, trap, anchor, endorsed, review)
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
