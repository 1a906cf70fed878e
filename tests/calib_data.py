"""A team with scored rounds drawn from a known model, for the calibration tests and for
looking at the calibration page: each round has a true level per criterion; each rater
scores it as that level plus their leniency plus noise, rounded and kept within 1-4; the
automatic report gives each criterion the share of its maximum that maps back to the
true level (plus its own noise and bias). Rows go in through the ORM, with controlled
times, as `live.end` and `live.put_scorecard` would leave them."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta, timezone

import numpy as np

from app.accounts import service
from app.db.staff import Candidate, Round, Scorecard, Team, User
from app.rounds.live import CRITERIA
from app.scoring.read import LABELS

# points per criterion in the synthetic report (contract 4's shape; they sum to 100)
MAX_POINTS = {"discipline_order": 15, "findings": 25, "trap": 15, "root_cause": 20, "measurement": 10, "fix_win": 15}
SCENARIOS = ("ddp", "dataloader", "launch-bound", "straggler", "prefill", "skinny-gemm")
PW = "correct horse battery"
START = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)  # a Monday: week 2025-W10


def level(x: np.ndarray) -> np.ndarray:
    return np.clip(np.floor(x + 0.5), 1, 4).astype(int)


def report(true_levels: dict[str, float], rng: np.random.Generator, noise: float, bias: float) -> dict:
    """A contract-4 report whose criterion c lands on level ~ true + bias + noise."""
    crit = []
    for c in CRITERIA:
        # level L covers shares [(L-1)/4, L/4): a continuous level x sits at share (x - 0.5)/4
        x = true_levels[c] + bias + rng.normal(0, noise)
        share = float(np.clip((x - 0.5) / 4, 0, 1))
        crit.append({"id": c, "label": LABELS[c], "score": round(share * MAX_POINTS[c], 1), "max": MAX_POINTS[c],
                     "evidence": [], "missed": []})
    total = round(sum(x["score"] for x in crit), 1)
    return {"total": total, "trap_endorsed": False, "needs_review": False, "word_count": 150, "criteria": crit}


def add_round(db, team_id: int, ended: datetime, cards: dict[int, tuple[dict[str, int], int, datetime]], *,
              scenario: str = "ddp", auto_report: dict | None = None, gold: bool = False,
              candidate_id: int | None = None) -> Round:
    """One ended round with its scorecards: `cards` maps a user id to (criterion levels,
    recommendation, submitted at)."""
    r = Round(public_id=secrets.token_hex(8), team_id=team_id, scenario=scenario, version=1, seed="0",
              seed_kind="seed", params={}, rubric_version=1, time_plan=[], token_hash=secrets.token_hex(32),
              token_expires_at=ended + timedelta(days=3), phase="ended", locked=True, narration="", marks={}, runs=[],
              last_event_id=0, event_count=0, candidate_id=candidate_id, gold=gold,
              created_at=ended - timedelta(hours=1), ended_at=ended, auto_report=auto_report,
              auto_total=(auto_report or {}).get("total"))
    db.add(r)
    db.flush()
    for user_id, (levels, recommendation, at) in cards.items():
        db.add(Scorecard(round_id=r.id, user_id=user_id, criteria=levels, recommendation=recommendation, notes="",
                         submitted_at=at, updated_at=at))
    return r


def make_team(store, slug: str, n_rounds: int, *, raters: dict[str, float] | None = None, noise: float = 0.4,
              per_round: int = 2, gold_every: int = 4, synthetic_every: int = 5, auto_noise: float = 0.35,
              auto_bias: float = 0.0, weeks: int = 8, submit_minutes: dict[str, float] | None = None,
              seed: int = 1) -> dict:
    """`n_rounds` ended rounds of team `slug`, each scored by `per_round` of `raters`
    (email -> leniency in levels), every `gold_every`-th in the gold set and scored by all
    of them; every `synthetic_every`-th a synthetic candidate's. Returns the team's id,
    the raters' leniencies and user ids, and its reviewer's and admin's emails."""
    raters = raters or {f"lenient@{slug}.org": 0.6, f"middle@{slug}.org": 0.0, f"strict@{slug}.org": -0.6}
    submit_minutes = submit_minutes or {e: 15.0 * (i + 1) for i, e in enumerate(raters)}
    rng = np.random.default_rng(seed)
    for email in raters:
        service.add_user(store, email, PW, "interviewer", slug)
    reviewer, admin = f"reviewer@{slug}.org", f"admin@{slug}.org"
    service.add_user(store, reviewer, PW, "reviewer", slug)
    service.add_user(store, admin, PW, "admin", slug)
    with store.read() as db:
        team = db.query(Team).filter_by(slug=slug).one()
        ids = {u.email: u.id for u in db.query(User).filter(User.email.in_(list(raters)))}
    emails = list(raters)
    span_s = weeks * 7 * 86400
    with store.write() as db:
        for i in range(n_rounds):
            ended = START + timedelta(seconds=span_s * i / max(1, n_rounds))
            ability = rng.normal(0, 0.6)
            truth = {c: 2.5 + ability + rng.normal(0, 0.4) for c in CRITERIA}
            cand = None
            if synthetic_every and i % synthetic_every == 0:
                cand = Candidate(team_id=team.id, code=f"{i:04X}", synthetic=True)
                db.add(cand)
                db.flush()
            gold = bool(gold_every) and i % gold_every == 0
            rep = report(truth, rng, auto_noise, auto_bias)
            who = emails if gold else list(rng.choice(emails, size=min(per_round, len(emails)), replace=False))
            cards = {}
            for email in who:
                lean = raters[email]
                levels = {c: int(level(np.array(truth[c] + lean + rng.normal(0, noise)))) for c in CRITERIA}
                overall = np.mean(list(truth.values())) + lean + rng.normal(0, noise)
                t = ended + timedelta(minutes=float(rng.exponential(submit_minutes[email])))
                cards[ids[email]] = (levels, int(level(np.array(overall))), t)
            add_round(db, team.id, ended, cards, scenario=SCENARIOS[i % len(SCENARIOS)], auto_report=rep, gold=gold,
                      candidate_id=cand.id if cand else None)
    return {"team_id": team.id, "raters": raters, "reviewer": reviewer, "admin": admin, "ids": ids}
