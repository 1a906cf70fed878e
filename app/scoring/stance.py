"""Does the read, taken whole, endorse a trap? A judgment with a confidence (issue 12).

The rules in trap.py say how each trap mention is said (rejected, endorsed, hedged,
checked, posed, named) and find the true cause, its fix and the decisive measurement. On
reads nobody tuned them to they decide stance alone poorly: they miss about a third of the
endorsements (a course in the trap's direction with no word the rules know as blame) and
cap 2-4% of the reads that do not endorse. Here their findings, and a few signals no single
rule can weigh (where in the read the trap's subject is and whether the read proposes to
act on it, whether the true cause or its fix closes the read), become one probability, a
logistic model fitted on the blind corpora's development parts (`python -m bench stance
--fit`, writing stance_model.json). It is linear in named features so every judgment can
say what it leaned on; it is deterministic and runs in microseconds.

The decision (trap.decide): at CAP_P or above the trap is endorsed and the total capped; from
REVIEW_P the read goes to a reviewer; below, nothing. The rules' own verdict is one feature
among the others, so a rule that caps a read the rest says is sound sends it to review.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

MODEL_PATH = Path(__file__).with_name("stance_model.json")

# Capping a strong read is far worse than missing a weak one (issue 12): the cap needs
# a probability well past even odds. At 0.70 the fit's leave-one-corpus-out estimate caps
# 1.4% of the development reads that do not endorse (0.7% of the good ones on blind9, which
# no rule was tuned on) and misses 17% of the endorsements; at 0.50 it would cap 3.2%.
CAP_P = 0.70
# Below the cap, a reader looks. From 0.25, with the rules' doubts below, 5.5% of the
# endorsements are neither capped nor reviewed, with 9.4% of reads reviewed (leave one
# corpus out; at 0.35: 6.1% and 10.6%).
REVIEW_P = 0.25
# The rules' own doubt (a hedged or checked mention, a trap named again beside the fix)
# sends a read to review unless the read taken whole is this sure it endorses nothing: of
# the development reads the rules doubted and the model put under 5%, none endorsed.
CLEAR_P = 0.05

# name -> what a reader is told the feature says (the model's reasons are these)
FEATURES = {
    "rule_cap": "the rules found a confident endorsement",
    "rule_review": "the rules could not decide",
    "endorsed": "trap mentions said as the cause or its course",
    "tentative": "trap mentions said softly",
    "retracted": "trap endorsements the read takes back",
    "rejected": "trap mentions rejected",
    "checking": "trap mentions to be measured",
    "posed": "trap mentions posed as a question",
    "named": "trap mentions without a position",
    "rejected_arith": "a rejection with the arithmetic that kills the trap",
    "last_endorse": "the read's last word on a trap endorses it",
    "root_cause": "the true cause said",
    "fix": "the true fix named",
    "measurement": "the decisive measurement named",
    "denies_cause": "the true cause denied",
    "other_cause": "a cause blamed that is no trap",
    "undecided": "the read says it has not decided",
    "parts_said": "how often the traps' subjects come up",
    "parts_course": "a course proposed on a trap's subject",
    "parts_tail": "a trap's subject in the read's last third",
    "tail_cause": "the true cause or fix in the read's last third",
    "verdicts": "verdicts said (\"doesn't explain\", \"red herring\")",
    "hedge": "hedges",
    "findings": "the findings stated",
    "words": "the read's length",
    "correction": "a correction (\"actually\", \"scratch that\")",
}


@dataclass(frozen=True)
class Judgment:
    p_endorse: float
    decision: str  # "endorse" | "review" | "none"
    leaning_on: tuple[str, ...]  # the features that pushed most towards endorsement, as words
    against: tuple[str, ...]  # ... and away from it

    def as_report(self, features: dict[str, float]) -> dict:
        return {"p_endorse": round(self.p_endorse, 3), "decision": self.decision, "cap_at": CAP_P,
                "review_from": REVIEW_P, "leaning_on": list(self.leaning_on), "against": list(self.against),
                "features": {k: round(v, 3) for k, v in features.items()}}


_fitting = False  # set by unfitted(): features are wanted, no judgment


@contextmanager
def unfitted():
    """Score without the stored model (every read judged "none"), as the fitter does: the
    features of a feature set the stored model does not know yet are what it fits on."""
    global _fitting
    _fitting = True
    try:
        yield
    finally:
        _fitting = False


def model() -> dict:
    return {"weights": dict.fromkeys(FEATURES, 0.0), "bias": -30.0} if _fitting else stored()


@lru_cache(maxsize=1)
def stored() -> dict:
    m = json.loads(MODEL_PATH.read_text())
    missing = set(FEATURES) ^ set(m["weights"])
    if missing:  # a feature added or dropped without refitting would silently weigh nothing
        raise RuntimeError(f"stance_model.json does not match stance.FEATURES ({sorted(missing)}): "
                           f"refit with python -m bench stance --fit")
    return m


def _has_the_story(f: dict[str, float]) -> bool:
    """A read that names the true fix and either the decisive measurement or the whole true
    cause has the story: an endorsement beside it is a slip, a follow-on ("then revisit NCCL
    for the last few points") or our misreading as often as a belief, and capping a strong
    read costs far more than missing a weak one. The rules' own confident endorsement is
    held to the fix and the measurement (score.score); the model's, to either."""
    if not f["fix"]:
        return False
    return bool(f["measurement"]) or (not f["rule_cap"] and f["root_cause"] >= 1)


def judge(features: dict[str, float], m: dict | None = None) -> Judgment:
    m = m or model()
    parts = {k: m["weights"][k] * features[k] for k in FEATURES}
    z = m["bias"] + sum(parts.values())
    p = 1 / (1 + math.exp(-max(-30.0, min(30.0, z))))
    decision = "endorse" if p >= CAP_P else "review" if p >= REVIEW_P else "none"
    if decision == "endorse" and _has_the_story(features):
        decision = "review"
    ranked = sorted(parts.items(), key=lambda kv: kv[1])
    pro = tuple(FEATURES[k] for k, v in reversed(ranked[-3:]) if v > 0.25)
    con = tuple(FEATURES[k] for k, v in ranked[:3] if v < -0.25)
    return Judgment(p, decision, pro, con)


def reviewed(j: Judgment, rule_cap: bool, rule_review: bool) -> bool:
    """Whether a reader is asked to look (trap.decide says why): the model unsure, the
    rules' cap overruled, or the rules' doubt where the model does not clear it."""
    return j.decision == "review" or (rule_cap and j.decision != "endorse") or (
        rule_review and j.decision == "none" and j.p_endorse >= CLEAR_P)


def fit(rows: list[tuple[dict[str, float], bool]], lam: float = 1.0, iterations: int = 50) -> dict:
    """L2-regularised logistic regression by Newton's method from zero: the same rows give
    the same weights on every machine. rows: (features, labelled endorse)."""
    import numpy as np

    names = list(FEATURES)
    x = np.array([[f[n] for n in names] + [1.0] for f, _ in rows])
    y = np.array([float(e) for _, e in rows])
    w = np.zeros(x.shape[1])
    reg = lam * np.eye(len(w))
    reg[-1, -1] = 0.0  # the bias is not shrunk
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-(x @ w)))
        step = np.linalg.solve(x.T @ (x * (p * (1 - p))[:, None]) + reg, x.T @ (p - y) + reg @ w)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return {"weights": {n: round(float(v), 6) for n, v in zip(names, w[:-1])}, "bias": round(float(w[-1]), 6),
            "lambda": lam}
