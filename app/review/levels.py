"""The automatic score on the scorecard's scale, so the two can be compared.

A scorecard gives each criterion a level 1-4 (poor, mixed, good, excellent) and the round
a recommendation 1-4; the automatic score (contract 4) gives each criterion points out of
its maximum and the round a total out of 100. The mapping is fixed and plain, by quarters
of the maximum: under a quarter is 1, under half 2, under three quarters 3, else 4. It is
not tuned to agree with anyone: the calibration figures measure how well it does.
"""

from __future__ import annotations

CUTS = (0.25, 0.5, 0.75)  # shares of the maximum where a level starts: 2, 3, 4


def level_of_share(share: float) -> int:
    return 1 + sum(share >= c for c in CUTS)


def auto_levels(report: dict | None) -> dict[str, int]:
    """{criterion id: level 1-4} of a score report; {} for a round without a score (no
    narration) or a criterion without a maximum."""
    if not report or report.get("total") is None:
        return {}
    return {c["id"]: level_of_share(c["score"] / c["max"]) for c in report.get("criteria", []) if c.get("max")}


def auto_recommendation(report: dict | None) -> int | None:
    """The total (0-100) on the recommendation's four points; None without a score."""
    if not report or report.get("total") is None:
        return None
    return level_of_share(report["total"] / 100.0)
