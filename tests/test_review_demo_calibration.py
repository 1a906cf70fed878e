"""The check the issue names, end to end: a team filled with simulated raters of known
leniency and noise (app/review/demo.py, through the database as real rounds and
scorecards) and the calibration dashboard (app/review/calibration.py, DuckDB) finding
them. Leniency is read back per rater; agreement is compared with what the simulation's
own model implies, worked out here by Monte Carlo on the model alone (no database, no
dashboard): ICC(2,1) of the gold raters, per criterion."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from sqlalchemy import select

from app.db.base import store_for, upgrade_to_head
from app.db.staff import Team
from app.review import calibration, demo, stats
from app.rounds import live

NOW = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('demo-calib') / 'x.db'}"
    upgrade_to_head(url)
    store = store_for(url)
    out = demo.fill(store, "acme", rounds=150, seed=2, now=NOW)
    with store.read() as db:
        team_id = db.scalar(select(Team.id).where(Team.slug == "acme"))
    return out, calibration.dashboard(store, team_id)


def test_the_dashboard_finds_each_raters_leniency(filled):
    """Each simulated rater's leniency (levels) within 0.2 of what was put in, in order.
    (Leniency is measured against the other raters of the same rounds, and clipping to
    1-4 pulls a lenient rater's excess in at the top: 0.2 holds both, across seeds.)"""
    out, dash = filled
    put_in = {f"sim-{r.name}@acme.demo.invalid": r.leniency_levels for r in demo.RATERS}
    found = {r["email"]: r["leniency"]["value"] for r in dash["raters"] if r["email"] in put_in}
    assert set(found) == set(put_in)
    for email, want in put_in.items():
        assert found[email] == pytest.approx(want, abs=0.2), (email, found[email], want)
    order = sorted(put_in, key=put_in.get)
    assert sorted(found, key=found.get) == order
    # and the slowest to submit is the one simulated slowest
    delays = {r["email"]: r["median_submit_minutes"] for r in dash["raters"] if r["email"] in put_in}
    assert max(delays, key=delays.get) == "sim-emery@acme.demo.invalid"


def _model_icc(criterion_index: int, n_rounds: int = 20000, seed: int = 7) -> float:
    """ICC(2,1) of the gold raters as the simulation's model implies it: rounds of each
    quality in the model's shares, a deserved level per round, each rater's level by the
    model's own rule (demo._level), over the ten weeks the rounds span."""
    rng = random.Random(seed)
    qualities = rng.choices(list(demo.QUALITY_SHARE), weights=list(demo.QUALITY_SHARE.values()), k=n_rounds)
    mid = NOW - timedelta(weeks=demo.WEEKS / 2)
    m = np.empty((n_rounds, len(demo.GOLD_RATERS)))
    for i, q in enumerate(qualities):
        t = demo.TRUE_LEVELS[q][criterion_index]
        deserved = 1.0 if q == "no-show" else min(4.0, max(1.0, t + rng.gauss(0, demo.ROUND_SD_LEVELS)))
        at = NOW - timedelta(weeks=rng.uniform(0, demo.WEEKS))
        m[i] = [demo._level(rng, r, deserved, at, mid) for r in demo.GOLD_RATERS]
    return float(stats.icc_2_1(m))


@pytest.mark.parametrize("criterion", ["discipline_order", "trap", "fix_win"])
def test_the_dashboard_finds_the_agreement_the_model_builds_in(filled, criterion):
    """The gold set's ICC(2,1) on the dashboard against the model's: within the
    dashboard's own 95% interval (widened by 0.05 for the interval's own sampling error)."""
    out, dash = filled
    icc = dash["agreement"]["human_human"]["criteria"][criterion]["icc"]
    assert dash["agreement"]["human_human"]["base"] == "gold" and icc["raters"] == len(demo.GOLD_RATERS)
    want = _model_icc(live.CRITERIA.index(criterion))
    lo, hi = icc["ci95"]
    assert lo - 0.05 <= want <= hi + 0.05, (criterion, icc, want)
