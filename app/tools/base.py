"""What a tool is, and the fixed-width tables Nsight Systems prints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


class ToolNotApplicable(ValueError):
    """The measurement makes no physical sense on this instance; the message says why."""


@dataclass(frozen=True)
class Tool:
    id: str
    title: str
    command: str  # what the engineer would type
    run: Callable  # (instance, **options) -> str, as the real tool prints it
    # (instance, **options) -> dict: the same figures as data, for the tools whose natural
    # output is a chart (roofline, scatter, per-rank bars); None where text is the output.
    chart: Callable | None = None
    options: tuple[str, ...] = ()  # named options the tool accepts, e.g. ("kernel",) for ncu


def table(headers: list[str], rows: list[list], left: set[int] = frozenset()) -> str:
    """nsys stats' layout: right-aligned numbers, a dashed rule under the headers, the
    name column (left-aligned) last."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values):
        return " " + "  ".join(v.ljust(w) if i in left else v.rjust(w) for i, (v, w) in enumerate(zip(values, widths)))

    # The rule under a long last column (kernel names) stops at 80 dashes, not at 500.
    rule = ["-" * (min(w, 80) if i == len(widths) - 1 else w) for i, w in enumerate(widths)]
    out = [line(headers).rstrip(), line(rule).rstrip()]
    out += [line(r).rstrip() for r in cells]
    return "\n".join(out)


def ns(value: float) -> str:
    """Integer nanoseconds with thousands separators, as newer nsys prints them."""
    return f"{int(round(value)):,}"


def ns1(value: float) -> str:
    return f"{value:,.1f}"


def step_windows_ns(inst) -> list[tuple[int, int]]:
    """The instance's unit windows (training steps, decode tokens, serving iterations) in
    the trace's ns, from the answer key's windows that the read recovers (contract 3)."""
    return [(int(round(s["start_us"] * 1e3)), int(round(s["end_us"] * 1e3))) for s in inst.artifacts["steps"]]


def program(inst) -> str:
    """What the profiled program is launched as, for the tools' command lines."""
    a = inst.artifacts
    if "serving" in a:
        return "python -m vllm.entrypoints.openai.api_server"
    return "python decode.py" if "decode" in a else "python train.py"
