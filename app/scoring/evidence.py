"""A narration with its score report's evidence laid over it, for highlighting: the
practice report, a shared report and a round's review show it alike."""

from __future__ import annotations


def segments(text: str, report: dict) -> list[dict]:
    """The narration cut into runs of plain text and evidence, each evidence run tagged with
    the criteria it earned and why."""
    marks: list[tuple[int, int, str, str]] = []
    for c in report.get("criteria", []):
        for e in c["evidence"]:
            if e["end"] > e["start"]:
                marks.append((e["start"], e["end"], c["id"], e.get("reason", "")))
    cuts = sorted({0, len(text), *[m[0] for m in marks], *[m[1] for m in marks]})
    out = []
    for a, b in zip(cuts, cuts[1:]):
        over = [m for m in marks if m[0] <= a and b <= m[1]]
        out.append({"text": text[a:b], "criteria": sorted({m[2] for m in over}),
                    "why": "; ".join(dict.fromkeys(m[3] for m in over))})
    return out
