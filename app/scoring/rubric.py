"""What a scenario tells the scorer: how people say its root cause, its fix and each trap.

Patterns are regular expressions (case-insensitive), written as a practitioner would say
the idea in several ways; the scorer looks for them by sentence. Everything else (the
numbers, the discipline stages, rejection, the measurements' names) is generic and lives
in app/scoring/lexicon.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Rubric:
    # Each group is one idea the root cause needs (e.g. "overlap is broken" and "the
    # bucketing hooks do not fire"); a group is found when any of its patterns matches.
    root_cause: tuple[tuple[str, ...], ...]
    fix: tuple[str, ...]  # any of these names the fix
    traps: dict[str, tuple[str, ...]]  # trap id (as in the key) -> how the hypothesis is said
    # Other tool ids that confirm as well as the key's decisive one (half the points).
    also_confirms: tuple[str, ...] = ()
    # Extra words that say "this number is that observation" (observation id -> patterns),
    # beyond the words of its label.
    cues: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Discipline stages with nothing to find in this case (a single-GPU decode has no
    # communication to overlap); the others share the stage points.
    skip_stages: tuple[str, ...] = ()
    # Relative tolerance per observation where 10% is too tight for a spoken read (the
    # seed's own figures for this case differ from the model's by more).
    tolerance: dict[str, float] = field(default_factory=dict)
    # Trap id -> the words people use for the trap's subject ("the collective", "the
    # GEMVs", "the replica"): said with a word that blames it ("is the bottleneck", "my read
    # is", "is too slow") in a clause that is not the true cause's, the trap is endorsed.
    trap_parts: dict[str, str] = field(default_factory=dict)
