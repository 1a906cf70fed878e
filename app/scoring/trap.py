"""The read's stance toward each trap: where it names one, how each mention is said (the
clause and the discourse around it), whether it takes an endorsement back, the trap
criterion, and the features the stance model weighs to judge the read whole
(app/scoring/stance.py) with the decision they lead to.

The true cause's side lives here too, as far as stance needs it: whether the read asserts
or denies the cause, names the fix, names the decisive measurement.
"""

from __future__ import annotations

import math
import re

from app.scoring import lexicon, stance
from app.scoring.read import Read, cite, criterion, has, word_count
from app.scoring.rubric import Rubric
from app.scoring.text import Span, clauses, rx


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


def denies(text: str, m: re.Match) -> bool:
    """The cause matched at m is denied in its clause: negated ("the loader isn't the
    problem"), the object of a denied "that" ("it can't be that the GPUs are waiting for
    images"), or ruled out ("I'd rule out the input pipeline"). A cause said in the
    negative ("not overlapped", "two workers can't keep up") is asserted, not denied."""
    if re.search(lexicon.NEGATION, m.group(0), re.I) or \
            has(lexicon.SHORTFALL, text[max(0, m.start() - 30):m.end() + 40]):
        return False
    return (negated(text, m.start(), m.end())
            or re.search(lexicon.NEGATION + r"\s+(\w+\s+)?be\s+that\b(\W+\w+){0,8}\W*$", text[:m.start()], re.I) is not None
            # "rule out the input pipeline", "the loader is not the bottleneck": near the cause
            or has(lexicon.DENIAL, text[max(0, m.start() - 40):m.end() + 50]) is not None)


def _clause_denies_cause(text: str, rubric: Rubric) -> bool:
    """The clause names the true cause only to deny it."""
    for group in rubric.root_cause:
        m = has(group, text)
        if m and denies(text, m):
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
    verdict = None if _clause_denies_cause(clause.text, rubric) else has(lexicon.VERDICT, around)
    # "the NVLink topology isn't being detected right": a negation that says something is
    # broken asserts the fault, it does not deny it
    fault = has(lexicon.FAULT, after_mention[:80]) or has(lexicon.FAULT, read.text[max(clause.start, m_start - 30):m_end])
    here = negated(clause.text, m_start - clause.start, m_end - clause.start) and not fault
    # "with nvidia-smi at 100% it can't be that the GPUs are waiting for images": the
    # negation is the true cause's, not the trap's (the read-level check below sees the denial)
    if here and _clause_denies_cause(clause.text, rubric):
        here = False
    posed = has(lexicon.HYPOTHESIS, read.text[max(s.start, m_start - 200):m_end]) or has(lexicon.HYPOTHESIS, clause.text)
    # the next sentence's verdict answers the trap, unless it is the true cause it rules out
    answered = any((re.match(lexicon.VERDICT_OPENING, f, re.I) or has(lexicon.VERDICT, f))
                   and not _clause_denies_cause(f, rubric) for f in follow[:1])
    endorse = has(lexicon.ENDORSE, around) or fault or (
        re.match(lexicon.CONCLUSION, clause.text, re.I) and re.search(lexicon.FAULT_WORDS, mention, re.I))
    # "X, I know that's what people point at, but that counter only asks ...": a concession
    # turned by a contrast, unless what follows the contrast proposes the trap's course
    turn = re.search(r"\b(but|however|though|yet)\b", after_mention, re.I)
    conceded = turn and not has(lexicon.COMMIT, after_mention[turn.end():])
    if posed and not turn and run_on:
        # "youd think oh the mfu math is off ... but i did the math its right": in speech the
        # answer to a posed hypothesis can lie past the window's spoken turn
        tail = read.text[m_end:min(s.end, m_end + 200)]
        turn = re.search(r"\b(but|however)\b", tail, re.I)
        conceded = turn and not has(lexicon.COMMIT, tail[turn.end():turn.end() + 100])
    # "make sure NVLink isn't falling back to PCIe": a negation under a check is the check's
    if re.search(r"\b(make sure|ensure|check that|verify that|confirm that)\b", read.text[clause.start:m_start], re.I):
        return "posed", False
    if here or verdict or conceded:
        return "rejected", arith
    if posed and (answered or arith or has((lexicon.NEGATION,), after_mention)):
        return "rejected", arith
    if answered and not endorse:
        return "rejected", arith
    # a question ("are the GC pauses related?", "would a replica help?", "one question is
    # whether the MFU number is off") or a check to make ("I'd want to check whether NCCL
    # ...") poses the trap: that is not backing it
    checked = has(lexicon.INVESTIGATE, around)
    if s.text.rstrip().endswith("?") or (checked and around.find(mention) > checked.start()) or \
            has(lexicon.DEFER, around) or re.search(r"\bwhether\b", read.text[clause.start:m_start], re.I):
        return "posed", False
    # "it could possibly be the copy": an attribution, hedged
    leaning = re.search(r"\b(could|might|may)\b(\s+\w+){0,2}\s+be\b(\s+\w+){0,3}\s*$",
                        read.text[max(clause.start, m_start - 60):m_start], re.I)
    if endorse or leaning:
        side = has(lexicon.SECONDARY, around)
        # "I'd probably start with the copy": a commitment hedged in the same breath is unsure too
        unsure = leaning or (has(lexicon.HEDGE, around) and (not has(lexicon.COMMIT, around) or re.search(
            r"\b(i'd|i would|we should|we'd|i will|i'll)\s+(probably|maybe|likely|perhaps)\b", around, re.I)))
        # "either the kernels are slow or the MFU math is off": one of several, unsure too
        if side or unsure or has(lexicon.ALTERNATIVES, around):
            return "tentative", False
        # a course that only looks ("I'd compare against nccl-tests numbers", "we should look
        # at the memcpy rows") backs the trap only where the read also says it is the cause
        if (checked or has(lexicon.LOOK, around)) and not has(lexicon.FIXING, around):
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
    if not (has(lexicon.BLAME_AFTER, c.text[m.end():m.end() + reach])
            or has(lexicon.BLAME_BEFORE, c.text[max(0, m.start() - reach):m.start()])):
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
    return any(has(lexicon.CORRECTION, read.sents[j].text) for j in (i - 1, i) if j >= 0)


def _says_cause_or_fix(s: Span, rubric: Rubric) -> bool:
    """The sentence names the key's fix or asserts its true cause in one of its clauses."""
    if has(rubric.fix, s.text):
        return True
    return any(m and not denies(c.text, m) for c in clauses(s) for m in (has(g, c.text) for g in rubric.root_cause))


def _other_cause(read: Read, key: dict, rubric: Rubric) -> bool:
    """The read blames something that is none of the traps ("the optimizer step is the real
    problem", "the model is too big for the batch"): a clause that claims a cause and names
    no trap. Then a trap it also names is one thing among others it saw, not its story."""
    pats = [p for t in key["traps"] for p in rubric.traps.get(t["id"], ())]
    return any(has(lexicon.CAUSE_CLAIM, c.text) and not _mentions(pats, c.text)
               for s in read.sents for c in clauses(s))


def _proposes(read: Read) -> bool:
    """Somewhere the read commits to a course of its own ("I'd ...", "we should", an
    imperative "Remove ...", "take it out")."""
    return any(has(lexicon.COMMIT, c.text) or re.match(lexicon.IMPERATIVE, c.text, re.I)
               for s in read.sents for c in clauses(s))


CORRECTION_REACH = 4  # sentences from a correction within which the true cause it turns to is said
CLAUSE_CHARS = 600  # the most of a clause a mention's checks read (a run-on transcript is one clause)


def last_turn_to_cause(read: Read, rubric: Rubric) -> int:
    """Where the read last corrects itself ("actually", "wait", "looking again", a sentence
    opening with "But") and, in that sentence or the few after, asserts the true cause: "My
    first read was NCCL ... Actually the compute stream sits idle for the whole all-reduce;
    nothing overlaps." An endorsement before it is taken back (a correction need not name
    the trap again). The sentence's start, or -1; once per read, not per mention."""
    for k in range(len(read.sents) - 1, -1, -1):
        t = read.sents[k].text
        if not (has(lexicon.CORRECTION, t) or re.match(lexicon.TURN_OPENING, t, re.I)):
            continue
        for sent in read.sents[k:k + CORRECTION_REACH]:
            for c in clauses(sent):
                for group in rubric.root_cause:
                    m = has(group, c.text)
                    if m and not denies(c.text, m) and not has(lexicon.HYPOTHESIS, c.text):
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
    after it (`last_turn`, from last_turn_to_cause). The read's last word on the trap stands."""
    a, b, kind, arith, s = mentions[k]
    return kind in ("endorsed", "tentative") and (any(
        later[2] == "rejected" and later[4].start > s.start and (
            _corrects(read, later[0]) or later[3] or not has(lexicon.COMMIT, later[4].text))
        for later in mentions[k + 1:]) or last_turn > s.start)


def trap_criterion(read: Read, key: dict, rubric: Rubric, w: dict, own_cause: bool, by_trap: dict[str, list[tuple]],
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
                    best, ev = pts, [cite(read.original, s.start, s.end, f"trap '{trap['claim']}' {why}")]
            # a trap rejected earlier and named again in the sentence that gives the true cause
            # or its fix ("... so the fix is bucketing, and NCCL then hides under backward"):
            # more likely the fix's own words than a change of mind; a reader decides
            beside_fix = kind == "endorsed" and any(m[2] == "rejected" for m in mentions[:k]) and \
                _says_cause_or_fix(s, rubric)
            if beside_fix:
                review = review or (f"the read rejects the trap '{trap['claim']}' and names it again beside the true "
                                    f"cause or fix ({read.original[a:b]!r}): is it endorsed?")
            elif kind == "endorsed" and not retracted:
                endorsed_ev.append(cite(read.original, a, b, f"endorses the trap: {trap['claim']}"))
                endorsed_ids.add(trap["id"])
            elif kind == "checking":
                looked.append((trap["id"], cite(read.original, a, b, f"proposes to measure the trap it says is the "
                                                                   f"cause: {trap['claim']}")))
                review = review or (f"the read proposes to measure the trap '{trap['claim']}' "
                                    f"({read.original[a:b]!r}): is that backing it or checking it?")
            elif kind in ("endorsed", "tentative"):
                # a belief said softly ("I suspect", "probably") or a course proposed, not
                # doubt ("it could possibly be ..., I'm not sure") or one of several alternatives
                if kind == "tentative" and not retracted and not rejected_anywhere and \
                        not has(lexicon.ALTERNATIVES, s.text) and (
                        not has(lexicon.DOUBT, s.text) or has(lexicon.COMMIT, s.text)):
                    leaning.append(cite(read.original, a, b, f"endorses the trap, hedged, and offers no other cause: "
                                                            f"{trap['claim']}"))
                review = review or (f"the read {'leans towards' if kind == 'tentative' else 'first takes'} the trap "
                                    f"'{trap['claim']}' ({read.original[a:b]!r})"
                                    + (", then takes it back" if retracted else ", hedged or as a side fix")
                                    + ": is it endorsed?")
            else:
                if kind == "named" and not rejected_anywhere and not has(lexicon.ALTERNATIVES, s.text) \
                        and not has(lexicon.HEDGE, s.text) and not has(lexicon.LOOK, s.text):
                    stated.append(cite(read.original, a, b, f"states the trap as its own story, proposes a course and "
                                                          f"offers no other cause: {trap['claim']}"))
                if w["trap"] / 5 > best:
                    best, ev = w["trap"] / 5, [cite(read.original, a, b, f"names the trap '{trap['claim']}' without "
                                                                      f"rejecting it")]
    # A hedge is doubt only where the read weighs something else: a read whose one
    # hypothesis is the trap (never rejected; the true cause, its fix and any other blame
    # never said; not undecided) has committed to it however softly it says so. The same
    # for a trap stated as plain fact in a read that commits to a course.
    sole = not own_cause and not has(lexicon.UNDECIDED, read.text) and not _other_cause(read, key, rubric)
    if not endorsed_ev and leaning and sole:
        endorsed_ev = leaning
    if not endorsed_ev and stated and sole and _proposes(read):
        endorsed_ev = stated
    # measuring a trap the read endorses outright is the trap's course ("something is off in
    # the NCCL configuration. I'd run nccl-tests and look at NCCL_ALGO")
    endorsed_ev += [e for tid, e in looked if tid in endorsed_ids]
    if endorsed_ev:
        t0 = key["traps"][0]
        return criterion("trap", 0, endorsed_ev, [f"reject it: {t0['why_wrong']}"], w), True, None
    missed = [] if best >= w["trap"] else [
        f"consider and reject '{t['claim']}' out loud, with the arithmetic: {t['why_wrong']}" for t in key["traps"][:1]]
    return criterion("trap", best, ev, missed, w), False, review


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
            if has(lexicon.FIXING, c.text) or (
                    (has(lexicon.COMMIT, c.text) or rx(lexicon.IMPERATIVE).match(c.text))
                    and not has(lexicon.INVESTIGATE, c.text) and not has(lexicon.LOOK, c.text)):
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
        "fix": float(proposes_fix(read, rubric)),
        "measurement": float(names_measurement(read, key, rubric)),
        "denies_cause": float(read_denies_cause(read, rubric) is not None),
        "other_cause": float(_other_cause(read, key, rubric)),
        "undecided": float(has(lexicon.UNDECIDED, read.text) is not None),
        "parts_said": math.log1p(said),
        "parts_course": math.log1p(course),
        "parts_tail": math.log1p(tail),
        # asserted, not denied: "it isn't the loader, so more workers won't help" closes on the trap
        "tail_cause": float(any(m and not denies(c.text, m) for s in read.sents if s.start >= tail_from
                                for c in clauses(s) for m in (has(g, c.text) for g in (*rubric.root_cause, rubric.fix)))),
        "verdicts": math.log1p(len(_VERDICTS.findall(read.text))),
        "hedge": float(has(lexicon.HEDGE, read.text) is not None),
        "findings": findings["score"] / findings["max"],
        "words": math.log(words) / 5,
        "correction": float(has(lexicon.CORRECTION, read.text) is not None),
    }
    ranked = [m for k in _ANCHOR_ORDER for m in reversed(mentions) if m[2] == k]
    span = (ranked[0][0], ranked[0][1]) if ranked else course_span or (read.sents[-1].start, read.sents[-1].end)
    return features, span


def decide(judgment: stance.Judgment, read: Read, key: dict, trap: dict, anchor: tuple,
            rule_endorsed: bool, review: str | None) -> tuple[bool, str | None]:
    """The cap and the reviewer's flag from the judgment: (endorsed, review reason)."""
    p = f"p={judgment.p_endorse:.2f}"
    leaning = "; ".join(judgment.leaning_on) or "nothing in particular"
    if judgment.decision == "endorse":
        if not rule_endorsed:
            t0 = key["traps"][0]
            trap.update(score=0, evidence=[cite(read.original, *anchor, f"the read taken whole endorses a trap ({p}: "
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
    # the rules' doubt, unless the read taken whole clears it (stance.reviewed)
    return False, review if stance.reviewed(judgment, False, review is not None) else None


# --- the true cause's side, as far as stance needs it ------------------------------------

def read_denies_cause(read: Read, rubric: Rubric) -> dict | None:
    """The read's last word on the true cause is to deny it ("I see DataLoader.__next__
    at the top of the step, but I don't think the loader is the bottleneck"; "so I'd rule
    out the input pipeline"): evidence, or None. Naming the cause's evidence first is
    seeing it, not asserting it; what the read concludes about it stands."""
    for group in rubric.root_cause:
        last = None
        for s in read.sents:
            for c in clauses(s):
                m = has(group, c.text)
                # a hypothetical ("if the GPU were waiting on input", "a starved GPU would
                # show idle time") neither asserts nor denies
                if not m or re.search(r"\b(if|unless|whether|would)\b", c.text, re.I):
                    continue
                if denies(c.text, m) and not has(lexicon.HYPOTHESIS, c.text):
                    last = cite(read.original, c.start, c.end, "denies the true cause")
                else:
                    last = None
        if last:
            return last
    return None


def proposes_fix(read: Read, rubric: Rubric) -> bool:
    """The read names the key's fix somewhere without denying it ("more workers won't help"
    names it only to deny it)."""
    return any(m and not denies(c.text, m) for s in read.sents for c in clauses(s) for m in [has(rubric.fix, c.text)])


def names_measurement(read: Read, key: dict, rubric: Rubric) -> bool:
    """The read names the decisive measurement or its result (lexicon.MEASUREMENTS)."""
    return has(lexicon.MEASUREMENTS.get(key["decisive_measurement"], ()), read.text) is not None
