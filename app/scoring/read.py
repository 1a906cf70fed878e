"""A narration split once for every criterion (sentences, clauses, quantities, the places on
the time axis), and the shapes a criterion's result takes (contract 4)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.scoring import lexicon
from app.scoring.numbers import Quantity, quantities
from app.scoring.text import Span, clauses, find, sentences

LABELS = {"discipline_order": "Discipline order", "findings": "Findings with numbers", "trap": "Trap considered and rejected",
          "root_cause": "Root cause", "measurement": "Decisive measurement", "fix_win": "Fix and expected win"}


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


def cite(text: str, start: int, end: int, reason: str) -> dict:
    """Evidence: the characters [start, end) of the narration and why they earned or cost points."""
    return {"text": text[start:end], "start": start, "end": end, "reason": reason}


def criterion(cid: str, score: float, evidence: list[dict], missed: list[str], weights: dict) -> dict:
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
        if has(lexicon.CHANGE, read.clause_of(a.start).text):
            continue
        out.update((a.start, b.start))
    return frozenset(out)


def has(patterns, text: str) -> re.Match | None:
    return find(list(patterns), text)


def word_count(text: str) -> int:
    return len(re.findall(r"\b[\w'’.-]+\b", text))
