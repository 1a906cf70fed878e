"""Quantities said in a narration: numbers with their units, normalized, with where they
were said.

Handles "~175 ms", "about 28%", "0.6 s", "175-180 ms", "1,100 kernels", "1.33x" / "1.33×" /
"1.33 times", "x1.3", and numbers said in words ("twenty-eight percent", "one point three
three x", "a hundred and seventy-five milliseconds").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# unit as written (lowercase) -> (canonical unit, factor to it)
UNITS: dict[str, tuple[str, float]] = {
    "ms": ("ms", 1.0), "msec": ("ms", 1.0), "millisecond": ("ms", 1.0), "milliseconds": ("ms", 1.0),
    "µs": ("ms", 1e-3), "us": ("ms", 1e-3), "μs": ("ms", 1e-3), "microsecond": ("ms", 1e-3),
    "microseconds": ("ms", 1e-3), "ns": ("ms", 1e-6), "nanoseconds": ("ms", 1e-6),
    "s": ("ms", 1e3), "sec": ("ms", 1e3), "second": ("ms", 1e3), "seconds": ("ms", 1e3),
    "%": ("%", 1.0), "percent": ("%", 1.0), "per cent": ("%", 1.0), "pct": ("%", 1.0),
    "x": ("x", 1.0), "×": ("x", 1.0), "times": ("x", 1.0), "fold": ("x", 1.0),
    "gb": ("GB", 1.0), "gib": ("GB", 1.073741824), "mb": ("MB", 1.0), "mib": ("MB", 1.048576), "tb": ("GB", 1e3),
    "gb/s": ("GB/s", 1.0), "gbps": ("GB/s", 1.0), "tb/s": ("GB/s", 1e3), "tbps": ("GB/s", 1e3),
    "tflop/s": ("TFLOP/s", 1.0), "tflops": ("TFLOP/s", 1.0), "pflop/s": ("TFLOP/s", 1e3), "tflop": ("TFLOP/s", 1.0),
    "gflop": ("GFLOP", 1.0), "gflops": ("GFLOP", 1.0),
    "flop/b": ("FLOP/B", 1.0), "flop/byte": ("FLOP/B", 1.0), "flops/byte": ("FLOP/B", 1.0), "flop per byte": ("FLOP/B", 1.0),
    "mhz": ("MHz", 1.0), "ghz": ("MHz", 1e3),
    "tokens": ("tokens", 1.0), "token": ("tokens", 1.0), "kernels": ("kernels", 1.0), "kernel": ("kernels", 1.0),
    "launches": ("kernels", 1.0), "img/s": ("img/s", 1.0), "images/s": ("img/s", 1.0), "images per second": ("img/s", 1.0),
    "°c": ("°C", 1.0), "c": ("°C", 1.0), "degrees": ("°C", 1.0),
    "b": ("B", 1.0), "billion": ("B", 1.0),
    "buckets": ("kernels", 1.0), "all-reduces": ("kernels", 1.0), "workers": ("workers", 1.0),
    "iterations": ("iterations", 1.0), "samples": ("samples", 1.0), "requests": ("requests", 1.0),
    "streams": ("streams", 1.0), "gpus": ("GPUs", 1.0), "calls": ("calls", 1.0),
}
# Key units that the narration may say differently
KEY_UNIT = {"µs": ("ms", 1e-3), "s": ("ms", 1e3), "MB": ("MB", 1.0), "images": ("images", 1.0),
            "rank": ("rank", 1.0), "": ("", 1.0)}

_UNIT_RX = "|".join(sorted((re.escape(u) for u in UNITS), key=len, reverse=True))
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
_APPROX = r"(?:~|≈|about|around|roughly|approximately|approx\.?|nearly|almost|some|circa|ca\.)"
QTY = re.compile(
    rf"(?P<approx>{_APPROX}\s*)?(?P<x1>[x×](?=\d))?(?P<a>{_NUM})"
    rf"(?:\s*(?P<sep>-|–|—|to|→|->|=>)\s*~?(?P<b>{_NUM}))?"
    rf"(?:\s*(?P<unit>{_UNIT_RX})(?![a-z0-9]))?", re.I)


@dataclass(frozen=True)
class Quantity:
    value: float  # in `unit`; the midpoint of a range
    unit: str  # canonical ("ms", "%", "x", ...); "" when none was said
    start: int
    end: int
    low: float
    high: float
    approx: bool

    def text(self, narration: str) -> str:
        return narration[self.start:self.end]


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def quantities(text: str) -> list[Quantity]:
    """Every number in `text` with its unit, digits and words alike, in order."""
    words = _word_numbers(text)
    taken = [(q.start, q.end) for q in words]
    out = list(words)
    for m in QTY.finditer(text):
        if any(a < m.end() and m.start() < b for a, b in taken):
            continue
        # a number glued to letters is a name (sm90, bf16, H100), not a quantity
        if m.start("a") > 0 and text[m.start("a") - 1].isalpha() and not m.group("x1"):
            continue
        if m.end("a") < len(text) and text[m.end("a")].isalpha() and not m.group("unit"):
            continue
        a = _num(m.group("a"))
        b = _num(m.group("b")) if m.group("b") else a
        unit_raw = (m.group("unit") or "").lower()
        unit, factor = UNITS.get(unit_raw, ("", 1.0))
        if m.group("x1"):
            unit, factor = "x", 1.0
        approx = bool(m.group("approx"))
        if m.group("sep") in ("→", "->", "=>"):
            # "31 → 41%", "622 -> 473 ms": before and after, both in the unit said last
            out.append(Quantity(a * factor, unit, m.start(), m.start("sep"), a * factor, a * factor, approx))
            out.append(Quantity(b * factor, unit, m.start("b"), m.end(), b * factor, b * factor, approx))
            continue
        lo, hi = sorted((a * factor, b * factor))
        out.append(Quantity((lo + hi) / 2, unit, m.start(), m.end(), lo, hi, approx))
    out.sort(key=lambda q: q.start)
    return out


# --- numbers said in words -------------------------------------------------------------

_SMALL = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_SCALE = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
_WORD = rf"(?:{'|'.join(list(_SMALL) + list(_TENS) + list(_SCALE))}|a|and|point|-)"
WORDS = re.compile(
    rf"(?P<approx>{_APPROX}\s+)?(?P<n>\b(?:{'|'.join(list(_SMALL) + list(_TENS))}|a hundred)\b"
    rf"(?:[\s-]+{_WORD}\b)*)(?:\s+(?P<unit>{_UNIT_RX})(?![a-z0-9]))?", re.I)


def _parse_words(tokens: list[str]) -> float | None:
    total, current, frac, in_frac = 0, 0, "", False
    for t in tokens:
        if t in ("and", "a") and not in_frac:
            if t == "a":
                current = max(current, 1)
            continue
        if t == "point":
            in_frac = True
            continue
        if in_frac:
            if t in _SMALL and _SMALL[t] < 10:
                frac += str(_SMALL[t])
                continue
            return None
        if t in _SMALL:
            current += _SMALL[t]
        elif t in _TENS:
            current += _TENS[t]
        elif t == "hundred":
            current = max(current, 1) * 100
        elif t in ("thousand", "million"):
            total += max(current, 1) * _SCALE[t]
            current = 0
        else:
            return None
    value = total + current
    return float(f"{value}.{frac}") if frac else float(value)


def _word_numbers(text: str) -> list[Quantity]:
    out = []
    for m in WORDS.finditer(text):
        tokens = [t for t in re.split(r"[\s-]+", m.group("n").lower()) if t]
        while tokens and tokens[-1] in ("and", "a", "point"):
            tokens.pop()
        value = _parse_words(tokens)
        if value is None:
            continue
        unit_raw = (m.group("unit") or "").lower()
        if not unit_raw and value < 20 and "point" not in tokens:
            continue  # "one big kernel", "two workers" without a unit: not a measurement
        unit, factor = UNITS.get(unit_raw, ("", 1.0))
        v = value * factor
        out.append(Quantity(v, unit, m.start(), m.end(), v, v, bool(m.group("approx"))))
    return out


def key_value(value: float, unit: str) -> tuple[float, str]:
    """An observation's value in the narration's canonical unit (µs and s become ms)."""
    if unit in KEY_UNIT:
        u, f = KEY_UNIT[unit]
        return value * f, u
    u, f = UNITS.get(unit.lower(), (unit, 1.0))
    return value * f, u


def matches(q: Quantity, value: float, unit: str, rel: float = 0.10) -> bool:
    """A said quantity states an observation: compatible unit, and the value (or a said
    range) within the tolerance."""
    v, u = key_value(value, unit)
    if q.unit and u and q.unit != u:
        return False
    if not q.unit and (u in ("ms", "%", "x", "GB", "MB") or v < 10):
        # a bare "175" can state a count or an intensity, not a duration or a share; and a
        # bare small number ("rank 3", "(1)") is too common to be a finding without its unit
        return False
    tol = abs(v) * rel
    return q.low - tol <= v <= q.high + tol
