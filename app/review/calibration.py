"""A team's calibration: how its raters score, how well they agree with each other, and how
well the automatic score agrees with them (issue 11; contract 7's GET /calibration).

The rows come from the application's tables through SQLAlchemy (so SQLite and PostgreSQL
alike), become Arrow tables, and DuckDB computes the per-rater figures and the weekly drift
in SQL over them, in an in-process connection that lives for one call (DuckDB's scanner
extensions for SQLite or PostgreSQL cannot be downloaded here, and would bypass the Store's
transactions). The agreement figures and their bootstrap intervals are numpy (stats.py).

What counts:
- a *round* is an ended round of the team (scorecards are only taken after the end);
- a *level* is one scorecard's 1-4 for one criterion (contract 4's six ids), and the
  recommendation (1-4) is the *overall* item;
- the automatic score's levels are levels.auto_levels and levels.auto_recommendation of
  the round's report, a fixed mapping not tuned to anyone.

Where a figure rests on too few rounds it is not printed: it is
`{"value": None, "needs": N, "why": "needs N more double-scored rounds"}`, and the minimum
is a named constant below, with the reason for it. Rounds of synthetic candidates (the
demo team's) are counted like any other; `rounds.synthetic` says how many there are.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from datetime import date, datetime, timezone

import duckdb
import numpy as np
import pyarrow as pa
from sqlalchemy import select

from app.accounts import AccessDenied, Staff
from app.db.base import Store
from app.db.staff import Candidate, Membership, Round, Scorecard, Team, User
from app.review import levels as auto
from app.review import stats
from app.review.access import REVIEWERS
from app.rounds.live import CRITERIA
from app.scenario import InstanceError
from app.scoring.read import LABELS

OVERALL = "recommendation"  # the overall item: the scorecard's recommendation, the report's total
ITEMS = (*CRITERIA, OVERALL)

# -- minimum counts ------------------------------------------------------------------------
# Agreement (kappa, ICC, r, SMD) on fewer rounds than this is not shown. Measured with
# stats.bootstrap_ci on simulated raters whose kappa is near 0.7: the 95% interval is about
# 0.82 wide at 10 rounds, 0.50 at 20, 0.38 at 30 and 0.31 at 50. Below 20 the interval runs
# from "fails the 0.70 bar badly" to "excellent", which tells a team nothing.
MIN_AGREEMENT_ROUNDS = 20
# The gold set is the human-human base once it holds this many double-scored rounds (the
# same reason); until then every double-scored round is, and the answer says which.
MIN_GOLD_ROUNDS = MIN_AGREEMENT_ROUNDS
# A rater's mean and spread of levels over fewer rounds describe those few candidates more
# than the rater.
MIN_RATER_ROUNDS = 5
# Leniency needs rounds scored alongside someone else. Per-round differences from the other
# raters spread about half a level, so 10 rounds give a standard error near 0.15 level:
# enough to tell a half-level lean from none.
MIN_SHARED_ROUNDS = 10
# A point of the drift chart: a rater's (or the machine's) mean in one ISO week from fewer
# rounds than this is noise, and is left as a gap.
MIN_WEEK_ROUNDS = 3
# Raters considered for the ICC's complete block: every subset of up to this many is tried
# (2^12 = 4,096 subsets, a few milliseconds); past it the most prolific ones are kept.
MAX_BLOCK_RATERS = 12
# Bootstrap resamples per interval: ~60 intervals on a page. At 1,000 an interval's ends
# move between seeds by a standard deviation of 0.004 (kappa on 50 rounds) to 0.011 (on 20),
# below the two decimals the page prints.
N_RESAMPLES = 1000
SEED = 20240611  # fixed: the same data give the same intervals on every load


def _utc(t: datetime | None) -> datetime | None:
    """Naive UTC, as Arrow's timestamp('us') without a zone (SQLite hands back naive UTC,
    PostgreSQL aware)."""
    if t is None:
        return None
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo is not None else t


def _plural(n: int, noun: str) -> str:
    return f"{n} more {noun}" if n == 1 else f"{n} more {noun.replace('round', 'rounds', 1)}"


def _too_few(n: int, need: int, noun: str) -> dict:
    return {"value": None, "n": n, "needs": need - n, "why": f"needs {_plural(need - n, noun)}"}


def _r3(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 3)


# -- who may see it ------------------------------------------------------------------------

def team_for(staff: Staff, slug: str | None) -> int:
    """The team whose calibration this person asks for: the one named, else their only team
    (or the only one where they review). Reviewers and admins only: the page rates the
    interviewers, who are refused (AccessDenied, 403). A team not theirs is refused the same
    way as one that does not exist."""
    if slug is not None:
        tid = staff.team_id(slug.strip().lower())
        if tid is None:
            raise AccessDenied(f"no team {slug[:64]!r} among yours")
    else:
        mine = [t for t, role in staff.roles.items() if role in REVIEWERS]
        if len(staff.roles) == 1:
            tid = next(iter(staff.roles))
        elif len(mine) == 1:
            tid = mine[0]
        elif not staff.roles:
            raise AccessDenied("calibration is for a team's reviewers and admins; you are in no team")
        else:
            choices = ", ".join(sorted(staff.teams[t] for t in (mine or staff.roles)))
            raise InstanceError(f"you are in several teams: say which with ?team= ({choices})")
    if not staff.is_(tid, *REVIEWERS):
        raise AccessDenied(f"calibration is for the reviewers and admins of {staff.teams.get(tid, 'the team')}: "
                           "it rates the interviewers")
    return tid


# -- the rows, as Arrow --------------------------------------------------------------------

def load(store: Store, team_id: int) -> dict[str, pa.Table]:
    """The team's ended rounds, their levels (one row per scorecard and item), the automatic
    levels, and the raters, as Arrow tables."""
    with store.read() as db:
        team = db.get(Team, team_id)
        if team is None:
            raise AccessDenied("no such team among yours")
        rounds = db.execute(
            select(Round.id, Round.public_id, Round.scenario, Round.gold, Round.ended_at, Round.auto_report,
                   Candidate.synthetic)
            .outerjoin(Candidate, Candidate.id == Round.candidate_id)
            .where(Round.team_id == team_id, Round.ended_at.is_not(None))).all()
        cards = db.execute(
            select(Scorecard.round_id, Scorecard.user_id, Scorecard.criteria, Scorecard.recommendation,
                   Scorecard.submitted_at)
            .join(Round, Round.id == Scorecard.round_id)
            .where(Round.team_id == team_id, Round.ended_at.is_not(None))).all()
        user_ids = sorted({c.user_id for c in cards})
        people = db.execute(
            select(User.id, User.email, Membership.role)
            .outerjoin(Membership, (Membership.user_id == User.id) & (Membership.team_id == team_id))
            .where(User.id.in_(user_ids))).all() if user_ids else []
    lv: dict[str, list] = {"round_id": [], "user_id": [], "item": [], "level": [], "submitted_at": []}
    for c in cards:
        for item, level in [*((k, (c.criteria or {}).get(k)) for k in CRITERIA), (OVERALL, c.recommendation)]:
            if isinstance(level, int) and 1 <= level <= 4:
                lv["round_id"].append(c.round_id)
                lv["user_id"].append(c.user_id)
                lv["item"].append(item)
                lv["level"].append(level)
                lv["submitted_at"].append(_utc(c.submitted_at))
    au: dict[str, list] = {"round_id": [], "item": [], "level": []}
    for r in rounds:
        got = auto.auto_levels(r.auto_report)
        rec = auto.auto_recommendation(r.auto_report)
        for item, level in [*((k, got.get(k)) for k in CRITERIA), (OVERALL, rec)]:
            if level is not None:
                au["round_id"].append(r.id)
                au["item"].append(item)
                au["level"].append(level)
    return {
        "team": team.slug,
        "rounds": pa.table({
            "round_id": pa.array([r.id for r in rounds], pa.int64()),
            "public_id": pa.array([r.public_id for r in rounds], pa.string()),
            "scenario": pa.array([r.scenario for r in rounds], pa.string()),
            "gold": pa.array([bool(r.gold) for r in rounds], pa.bool_()),
            "synthetic": pa.array([bool(r.synthetic) for r in rounds], pa.bool_()),
            "ended_at": pa.array([_utc(r.ended_at) for r in rounds], pa.timestamp("us")),
        }),
        "levels": pa.table({
            "round_id": pa.array(lv["round_id"], pa.int64()), "user_id": pa.array(lv["user_id"], pa.int64()),
            "item": pa.array(lv["item"], pa.string()), "level": pa.array(lv["level"], pa.int8()),
            "submitted_at": pa.array(lv["submitted_at"], pa.timestamp("us")),
        }),
        "auto": pa.table({
            "round_id": pa.array(au["round_id"], pa.int64()), "item": pa.array(au["item"], pa.string()),
            "level": pa.array(au["level"], pa.int8()),
        }),
        "raters": pa.table({
            "user_id": pa.array([p.id for p in people], pa.int64()),
            "email": pa.array([p.email for p in people], pa.string()),
            "role": pa.array([p.role for p in people], pa.string()),
        }),
    }


def _connect(tables: dict[str, pa.Table]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    # a few thousand rows: one thread answers in microseconds, and the host's cores are the
    # web workers'
    con.execute("SET threads = 1")
    for name in ("rounds", "levels", "auto", "raters"):
        con.register(name, tables[name])
    return con


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


# -- per rater, in SQL ---------------------------------------------------------------------

# Each level beside the mean of the OTHER raters' levels of the same round and criterion
# (NULL when the rater was alone on it). The recommendation is left out: it is a different
# scale of judgement, and leniency is about the rubric's criteria.
_BESIDE_OTHERS = """
    SELECT l.round_id, l.user_id, l.item, l.level,
           (sum(l.level) OVER w - l.level)::DOUBLE / NULLIF(count(*) OVER w - 1, 0) AS others_mean
    FROM levels l
    WHERE l.item <> 'recommendation'
    WINDOW w AS (PARTITION BY l.round_id, l.item)
"""

PER_RATER_SQL = f"""
WITH beside AS ({_BESIDE_OTHERS}),
own AS (
    SELECT user_id, count(DISTINCT round_id) AS rounds_scored, avg(level) AS mean_level,
           stddev_samp(level) AS sd_level
    FROM levels WHERE item <> 'recommendation' GROUP BY user_id
),
rec AS (
    SELECT user_id, avg(level) AS mean_recommendation FROM levels WHERE item = 'recommendation' GROUP BY user_id
),
lean AS (
    SELECT user_id, avg(level - others_mean) AS leniency, count(DISTINCT round_id) AS shared_rounds
    FROM beside WHERE others_mean IS NOT NULL GROUP BY user_id
),
cards AS (
    SELECT DISTINCT l.user_id, l.round_id, l.submitted_at, r.ended_at FROM levels l JOIN rounds r USING (round_id)
),
speed AS (
    SELECT user_id, median((epoch(submitted_at) - epoch(ended_at)) / 60.0) AS median_submit_minutes
    FROM cards GROUP BY user_id
)
SELECT own.user_id, coalesce(ra.email, 'user ' || own.user_id) AS email, coalesce(ra.role, 'former member') AS role,
       own.rounds_scored, own.mean_level, own.sd_level, rec.mean_recommendation,
       coalesce(lean.shared_rounds, 0) AS shared_rounds, lean.leniency, speed.median_submit_minutes
FROM own LEFT JOIN rec USING (user_id) LEFT JOIN lean USING (user_id) LEFT JOIN speed USING (user_id)
LEFT JOIN raters ra USING (user_id)
ORDER BY own.rounds_scored DESC, email
"""

# A rater's difference from the others, averaged per round: the units the leniency's
# interval resamples.
LENIENCY_BY_ROUND_SQL = f"""
WITH beside AS ({_BESIDE_OTHERS})
SELECT user_id, round_id, avg(level - others_mean) AS diff
FROM beside WHERE others_mean IS NOT NULL GROUP BY user_id, round_id ORDER BY user_id, round_id
"""

DRIFT_RATERS_SQL = """
SELECT date_trunc('week', r.ended_at)::DATE AS week, l.user_id, avg(l.level) AS mean_level,
       count(DISTINCT l.round_id) AS rounds
FROM levels l JOIN rounds r USING (round_id)
WHERE l.item <> 'recommendation'
GROUP BY ALL ORDER BY week, l.user_id
"""

DRIFT_AUTO_SQL = """
WITH human AS (SELECT round_id, item, avg(level) AS human_mean FROM levels GROUP BY ALL)
SELECT date_trunc('week', r.ended_at)::DATE AS week, avg(a.level - h.human_mean) AS auto_minus_human,
       count(DISTINCT a.round_id) AS rounds
FROM auto a JOIN human h USING (round_id, item) JOIN rounds r USING (round_id)
WHERE a.item <> 'recommendation'
GROUP BY ALL ORDER BY week
"""

# Per round and item: the automatic level beside the mean human level.
AUTO_HUMAN_SQL = """
SELECT a.round_id, a.item, r.scenario, a.level AS auto_level, avg(l.level) AS human_mean, count(*) AS raters
FROM auto a JOIN levels l USING (round_id, item) JOIN rounds r USING (round_id)
GROUP BY ALL ORDER BY a.round_id, a.item
"""

# Per round and item, the first and second scorecards in the order they came in (H1 and
# H2 of the automated-scoring literature), for the rounds scored at least twice.
PAIRS_SQL = """
WITH ordered AS (
    SELECT l.round_id, l.item, l.user_id, l.level,
           row_number() OVER (PARTITION BY l.round_id, l.item ORDER BY l.submitted_at, l.user_id) AS nth
    FROM levels l
)
SELECT o.round_id, r.scenario, r.gold, o.item,
       max(o.level) FILTER (WHERE nth = 1) AS h1, max(o.level) FILTER (WHERE nth = 2) AS h2
FROM ordered o JOIN rounds r USING (round_id)
GROUP BY ALL HAVING count(*) >= 2 ORDER BY o.round_id, o.item
"""


def _raters(con, n_resamples: int) -> list[dict]:
    by_round = defaultdict(list)
    for row in _rows(con, LENIENCY_BY_ROUND_SQL):
        by_round[row["user_id"]].append(row["diff"])
    out = []
    for row in _rows(con, PER_RATER_SQL):
        n, shared = row["rounds_scored"], row["shared_rounds"]
        rater = {"user_id": row["user_id"], "email": row["email"], "role": row["role"], "rounds_scored": n,
                 "median_submit_minutes": _r3(row["median_submit_minutes"])}
        if n >= MIN_RATER_ROUNDS:
            rater["mean_level"] = {"value": _r3(row["mean_level"]), "n": n, "needs": 0}
            rater["sd_level"] = {"value": _r3(row["sd_level"]), "n": n, "needs": 0}
            rater["mean_recommendation"] = {"value": _r3(row["mean_recommendation"]), "n": n, "needs": 0}
        else:
            for k in ("mean_level", "sd_level", "mean_recommendation"):
                rater[k] = _too_few(n, MIN_RATER_ROUNDS, "scored round")
        if shared >= MIN_SHARED_ROUNDS:
            # the interval resamples rounds, each with its mean difference over the criteria
            # (a scorecard has all six, so the mean of these is the leniency itself)
            diffs = np.asarray(by_round[row["user_id"]])
            ci = stats.bootstrap_ci(stats.mean, diffs, n_resamples=n_resamples, seed=SEED)
            rater["leniency"] = {"value": _r3(row["leniency"]), "n": shared, "needs": 0,
                                 "sd_by_round": _r3(float(diffs.std(ddof=1))) if diffs.size > 1 else None,
                                 "ci95": [_r3(ci.lo), _r3(ci.hi)] if ci.lo is not None else None}
        else:
            rater["leniency"] = _too_few(shared, MIN_SHARED_ROUNDS, "round scored alongside another rater")
        out.append(rater)
    return out


# -- agreement, in numpy ---------------------------------------------------------------------

def _figure(stat, samples: list[np.ndarray], n: int, need: int, noun: str, n_resamples: int,
            rule: tuple[str, float] | None = None) -> dict:
    """One agreement figure: the value, its bootstrap 95% interval over rounds, and pass or
    fail against `rule` (">=", bar) or ("|x|<=", bar); or what is missing."""
    if n < need:
        return _too_few(n, need, noun)
    value = float(stat(*samples))
    if not math.isfinite(value):
        return {"value": None, "n": n, "needs": 0,
                "why": "undefined: every level is the same on one side, so agreement cannot be told from chance"}
    ci = stats.bootstrap_ci(stat, *samples, n_resamples=n_resamples, seed=SEED)
    out = {"value": _r3(value), "ci95": [_r3(ci.lo), _r3(ci.hi)] if ci.lo is not None else None, "n": n, "needs": 0}
    if rule is not None:
        out.update(_judge(value, rule))
    return out


def _judge(value: float, rule: tuple[str, float]) -> dict:
    op, bar = rule
    ok = value >= bar if op == ">=" else value <= bar if op == "<=" else abs(value) <= bar
    said = {">=": f">= {bar:.2f}", "<=": f"<= {bar:.2f}", "|x|<=": f"|x| <= {bar:.2f}"}[op]
    return {"threshold": bar, "rule": said, "pass": bool(ok)}


def _half_up(x: np.ndarray) -> np.ndarray:
    """The human mean rounded to a level for kappa: 2.5 is 3 (numpy's round would say 2)."""
    return np.floor(x + 0.5)


def choose_block(raters_by_round: dict[int, frozenset[int]], need: int) -> tuple[tuple[int, ...], list[int]]:
    """The complete rounds x raters block for ICC(2,1): among sets of at least two raters,
    the one whose common rounds hold the most ratings (rounds x raters), counting only sets
    with at least `need` common rounds if any has that many; ties go to more rounds. Returns
    (raters, rounds), or the best pair's when no set reaches `need` (its count says how many
    more are needed)."""
    counts = defaultdict(int)
    for who in raters_by_round.values():
        for u in who:
            counts[u] += 1
    people = sorted(counts, key=lambda u: (-counts[u], u))[:MAX_BLOCK_RATERS]
    if len(people) < 2:
        return (), []
    bit = {u: 1 << i for i, u in enumerate(people)}
    ids = list(raters_by_round)
    masks = np.array([sum(bit[u] for u in raters_by_round[r] if u in bit) for r in ids], dtype=np.int64)
    subsets = np.array([s for s in range(1, 1 << len(people)) if bin(s).count("1") >= 2], dtype=np.int64)
    common = ((masks[None, :] & subsets[:, None]) == subsets[:, None]).sum(axis=1)
    k = np.array([bin(int(s)).count("1") for s in subsets])
    cells = common * k
    eligible = common >= need
    score = np.where(eligible, cells, -1) if eligible.any() else common
    best = max(range(len(subsets)), key=lambda i: (score[i], common[i], -k[i]))
    chosen = tuple(u for u in people if int(subsets[best]) & bit[u])
    rounds = [r for r, m in zip(ids, masks) if int(m) & int(subsets[best]) == int(subsets[best])]
    return chosen, rounds


def _human_human(pairs: list[dict], cards: dict[int, dict[int, dict[str, int]]], scenario_of: dict[int, str],
                 gold: set[int], n_resamples: int) -> dict:
    """Human-human agreement: QWK between each round's first two scorecards and ICC(2,1) on
    a complete block, per item and per scenario (recommendation), on the gold set if it is
    big enough, else on every double-scored round."""
    double = {p["round_id"] for p in pairs}
    gold_double = double & gold
    if len(gold_double) >= MIN_GOLD_ROUNDS:
        base, rounds = "gold", gold_double
        why = f"the gold set: {len(gold_double)} double-scored rounds"
    else:
        base, rounds = "double-scored", double
        why = (f"every double-scored round ({len(double)}): the gold set has {len(gold_double)} double-scored "
               f"rounds, {MIN_GOLD_ROUNDS - len(gold_double)} short of the {MIN_GOLD_ROUNDS} it needs to be the base")
    noun = "gold double-scored round" if base == "gold" else "double-scored round"
    by_item = defaultdict(list)
    for p in pairs:
        if p["round_id"] in rounds:
            by_item[p["item"]].append(p)

    def block_figures(subset: set[int], items: tuple[str, ...], label_noun: str) -> dict:
        raters_by_round = {r: frozenset(cards[r]) for r in sorted(subset)}
        who, block_rounds = choose_block(raters_by_round, MIN_AGREEMENT_ROUNDS)
        out = {}
        for item in items:
            ps = [p for p in by_item[item] if p["round_id"] in subset]
            h1 = np.array([p["h1"] for p in ps], dtype=float)
            h2 = np.array([p["h2"] for p in ps], dtype=float)
            qwk = _figure(stats.qwk, [h1, h2], len(ps), MIN_AGREEMENT_ROUNDS, label_noun, n_resamples,
                          (">=", stats.THRESHOLDS["qwk_min"]))
            if len(who) >= 2:
                m = np.array([[cards[r][u][item] for u in who] for r in block_rounds], dtype=float).reshape(-1, len(who))
                icc = _figure(stats.icc_2_1, [m], len(block_rounds), MIN_AGREEMENT_ROUNDS,
                              f"round scored by the same {len(who)} raters", n_resamples,
                              (">=", stats.THRESHOLDS["qwk_min"]))
            else:
                icc = _too_few(0, MIN_AGREEMENT_ROUNDS, "round scored by the same 2 raters")
            icc["raters"] = len(who)
            out[item] = {"qwk": qwk, "icc": icc}
        return out

    per_item = block_figures(rounds, ITEMS, noun)
    per_scenario = {}
    for scn in sorted(set(scenario_of.values())):  # every scenario played: one with none says what it needs
        subset = {r for r in rounds if scenario_of[r] == scn}
        per_scenario[scn] = block_figures(subset, (OVERALL,), f"{noun} of this scenario")[OVERALL]
    return {"base": base, "base_why": why, "n_rounds": len(rounds), "gold_double_scored": len(gold_double),
            "double_scored": len(double), "overall": per_item[OVERALL],
            "criteria": {c: per_item[c] for c in CRITERIA}, "scenarios": per_scenario}


def _auto_human(rows: list[dict], hh: dict, n_resamples: int) -> dict:
    """The automatic level against the mean human level of the same round and item: QWK (the
    human mean rounded half up), Pearson r and SMD (on the mean as it is), and the drop from
    human-human QWK."""
    noun = "round with an automatic score and a scorecard"
    t = stats.THRESHOLDS

    def figures(sel: list[dict], hh_qwk: dict, label_noun: str) -> dict:
        a = np.array([x["auto_level"] for x in sel], dtype=float)
        h = np.array([x["human_mean"] for x in sel], dtype=float)
        n = len(sel)
        out = {"qwk": _figure(stats.qwk, [a, _half_up(h)], n, MIN_AGREEMENT_ROUNDS, label_noun, n_resamples,
                              (">=", t["qwk_min"])),
               "r": _figure(stats.pearson_r, [a, h], n, MIN_AGREEMENT_ROUNDS, label_noun, n_resamples,
                            (">=", t["r_min"])),
               "smd": _figure(stats.smd, [a, h], n, MIN_AGREEMENT_ROUNDS, label_noun, n_resamples,
                              ("|x|<=", t["smd_abs_max"]))}
        out["mean_auto"] = _r3(float(a.mean())) if n else None
        out["mean_human"] = _r3(float(h.mean())) if n else None
        out["drop"] = _drop(hh_qwk, out["qwk"])
        return out

    by_item = defaultdict(list)
    for x in rows:
        by_item[x["item"]].append(x)
    per_item = {item: figures(by_item[item], (hh["overall"] if item == OVERALL else hh["criteria"][item])["qwk"], noun)
                for item in ITEMS}
    per_scenario = {}
    for scn in sorted({x["scenario"] for x in by_item[OVERALL]}):
        sel = [x for x in by_item[OVERALL] if x["scenario"] == scn]
        hh_qwk = hh["scenarios"].get(scn, {}).get("qwk") or _too_few(0, MIN_AGREEMENT_ROUNDS, "double-scored round")
        per_scenario[scn] = figures(sel, hh_qwk, f"{noun} of this scenario")
    return {"n_rounds": len({x["round_id"] for x in rows}), "overall": per_item[OVERALL],
            "criteria": {c: per_item[c] for c in CRITERIA}, "scenarios": per_scenario}


def _drop(hh_qwk: dict, ah_qwk: dict) -> dict:
    """Human-human QWK minus automatic-human QWK: at most 0.10 passes."""
    missing = next((f for f in (hh_qwk, ah_qwk) if f.get("value") is None), None)
    if missing is not None:
        which = "human-human" if missing is hh_qwk else "automatic-human"
        return {"value": None, "needs": missing.get("needs", 0), "why": f"the {which} kappa: {missing['why']}"}
    value = hh_qwk["value"] - ah_qwk["value"]
    return {"value": _r3(value), "needs": 0, **_judge(value, ("<=", stats.THRESHOLDS["drop_max"]))}


# -- drift -----------------------------------------------------------------------------------

def _iso_week(d: date) -> str:
    y, w, _ = d.isocalendar()
    return f"{y}-W{w:02d}"


def _drift(con, raters: list[dict]) -> dict:
    weeks = sorted({row["week"] for row in _rows(con, "SELECT DISTINCT date_trunc('week', ended_at)::DATE AS week "
                                                      "FROM rounds")})
    index = {w: i for i, w in enumerate(weeks)}
    series = []
    by_user = defaultdict(lambda: [None] * len(weeks))
    counts = defaultdict(lambda: [0] * len(weeks))
    for row in _rows(con, DRIFT_RATERS_SQL):
        i = index[row["week"]]
        counts[row["user_id"]][i] = row["rounds"]
        if row["rounds"] >= MIN_WEEK_ROUNDS:
            by_user[row["user_id"]][i] = _r3(row["mean_level"])
    for r in raters:
        series.append({"user_id": r["user_id"], "email": r["email"], "mean_level": by_user[r["user_id"]],
                       "rounds": counts[r["user_id"]]})
    diff, diff_n = [None] * len(weeks), [0] * len(weeks)
    for row in _rows(con, DRIFT_AUTO_SQL):
        i = index[row["week"]]
        diff_n[i] = row["rounds"]
        if row["rounds"] >= MIN_WEEK_ROUNDS:
            diff[i] = _r3(row["auto_minus_human"])
    return {"weeks": [_iso_week(w) for w in weeks], "week_starts": [w.isoformat() for w in weeks],
            "min_rounds": MIN_WEEK_ROUNDS, "raters": series,
            "auto_minus_human": {"value": diff, "rounds": diff_n}}


# -- the dashboard -----------------------------------------------------------------------------

def dashboard(store: Store, team_id: int, *, n_resamples: int = N_RESAMPLES) -> dict:
    """Everything the calibration page shows, as one JSON-able dict."""
    t0 = time.perf_counter()
    tables = load(store, team_id)
    con = _connect(tables)
    try:
        summary = _rows(con, """
            SELECT count(*) AS ended,
                   count(*) FILTER (WHERE round_id IN (SELECT round_id FROM levels)) AS scored,
                   count(*) FILTER (WHERE synthetic) AS synthetic,
                   count(*) FILTER (WHERE gold) AS gold,
                   count(*) FILTER (WHERE round_id IN (SELECT round_id FROM auto)) AS auto_scored
            FROM rounds""")[0]
        raters = _raters(con, n_resamples)
        pairs = _rows(con, PAIRS_SQL)
        rounds = tables["rounds"].to_pydict()
        scenario_of = dict(zip(rounds["round_id"], rounds["scenario"]))
        gold = {r for r, g in zip(rounds["round_id"], rounds["gold"]) if g}
        cards: dict[int, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
        lv = tables["levels"].to_pydict()
        for r, u, item, level in zip(lv["round_id"], lv["user_id"], lv["item"], lv["level"]):
            cards[r][u][item] = level
        hh = _human_human(pairs, cards, scenario_of, gold, n_resamples)
        ah = _auto_human(_rows(con, AUTO_HUMAN_SQL), hh, n_resamples)
        drift = _drift(con, raters)
    finally:
        con.close()
    return {
        "team": tables["team"],
        "rounds": {**summary, "double_scored": hh["double_scored"], "gold_double_scored": hh["gold_double_scored"]},
        "criteria": [{"id": c, "label": LABELS[c]} for c in CRITERIA] + [{"id": OVERALL, "label": "Recommendation"}],
        "raters": raters,
        "agreement": {"human_human": hh, "auto_human": ah},
        "drift": drift,
        "thresholds": stats.THRESHOLDS,
        "minimums": {"agreement_rounds": MIN_AGREEMENT_ROUNDS, "gold_rounds": MIN_GOLD_ROUNDS,
                     "rater_rounds": MIN_RATER_ROUNDS, "shared_rounds": MIN_SHARED_ROUNDS,
                     "week_rounds": MIN_WEEK_ROUNDS},
        "method": {"n_resamples": n_resamples, "seed": SEED, "interval": "bootstrap percentile 95%, resampling rounds",
                   "icc": "ICC(2,1), Shrout & Fleiss 1979", "qwk": "quadratic weighted kappa, Cohen 1968",
                   "smd": "(mean auto - mean human) / sqrt((var auto + var human) / 2), Williamson, Xi & Breyer 2012",
                   "pairs": "human-human kappa: each round's first two scorecards, in the order submitted",
                   "auto_vs": "the mean human level of the round (rounded half up for kappa)"},
        "computed_ms": round((time.perf_counter() - t0) * 1000, 1),
    }
