"""Sentences and clauses of a narration, with their character spans."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    text: str


# A sentence ends at . ! ? followed by white space (or the end), or at a line break: not
# inside "1.33x", ".item()", "torch.compile" or "e.g.,".
_END = re.compile(r"(?<=[.!?])\s+|\n+")


def sentences(text: str) -> list[Span]:
    out, pos = [], 0
    for m in list(_END.finditer(text)) + [None]:
        stop = m.start() if m else len(text)
        chunk = text[pos:stop]
        if chunk.strip():
            lead = len(chunk) - len(chunk.lstrip())
            out.append(Span(pos + lead, pos + lead + len(chunk.strip()), chunk.strip()))
        if m:
            pos = m.end()
    return out


# Clauses: a sentence split at ; : — – and ", so"/", but"-style joints, where one claim
# ends and the next begins ("the step is 622 ms; the all-reduce is 175").
_JOINT = re.compile(r"\s*(?:;|:|—|–| - |,\s*(?:so|but|and|while|which|whereas)\b)\s*")


@functools.lru_cache(maxsize=4096)
def clauses(sentence: Span) -> tuple[Span, ...]:
    out, pos = [], 0
    for m in _JOINT.finditer(sentence.text):
        if m.start() > pos:
            out.append(Span(sentence.start + pos, sentence.start + m.start(), sentence.text[pos:m.start()]))
        pos = m.end()
    if pos < len(sentence.text):
        out.append(Span(sentence.start + pos, sentence.start + len(sentence.text), sentence.text[pos:]))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def rx(pattern: str) -> re.Pattern:
    """A pattern compiled case-insensitive, once per process: the lexicon and the six rubrics
    hold more patterns than the re module's own cache (512), which then recompiles them on
    every narration."""
    return re.compile(pattern, re.I)


def find(patterns: list[str], text: str, start: int = 0) -> re.Match | None:
    """The earliest match of any pattern (case-insensitive) at or after `start`."""
    best = None
    for p in patterns:
        m = rx(p).search(text, start)
        if m and (best is None or m.start() < best.start()):
            best = m
    return best
