"""Demo data for a team (`tracedojo demo --team T`): synthetic candidates, ended rounds with
their whole event logs, the automatic score and scorecards from simulated raters, so that a
new install can open the review and calibration pages and see them work.

What is simulated, and how (the parameters are returned by `fill`, so tests and the command
line can compare what the calibration figures recover with what went in):

- Raters: three interviewers and two reviewers, real accounts of the team
  (`sim-<name>@<team>.demo.invalid`, RFC 2606: never a mailbox; random passwords nobody
  is told). Each has a leniency in levels (added to the level a criterion deserves), a
  noise (the standard deviation of their level around it), for one of them a drift in
  levels per week (centred on the middle of the period, so their mean leniency is the
  stated one), and a typical delay between a round's end and their scorecard.
- Reads (the texts: app/review/demo_reads.py): five qualities, each with the level every
  criterion truly deserves (TRUE_LEVELS):
  excellent (the discipline in order, the numbers, the trap rejected with arithmetic, the
  decisive measurement, the fix and its win), good, mixed (findings, but the trap endorsed
  or no arithmetic), poor (vague) and no-show (the candidate never opens the link). Each
  narration is built from the instance's own key, with wording drawn per round, and
  scored by the real scorer exactly as `live.end` does.
- Rounds: on real instances of every scenario (a few secret-sized seeds per scenario, so
  each instance is built once and cached), on the team's built-in questions, spread over
  the past ten weeks in working hours. Their logs are what the live round would have
  written, backdated: created, opened, the phases of the question's time plan, the
  narration as edits (`live.splice`) typed over the reading phase, area selections and
  marks, measurement runs (the decisive one for good reads), viewport moves, hints,
  notes, now and then an integrity event, submit, end, then the scorecards.
- Scorecards: every round by its interviewer; the gold set (about 40% of the rounds) also
  by the other two interviewers and the first reviewer; 40% of the other rounds,
  evenly across interviewers, by the second reviewer. Level = clip(round(deserved + leniency + noise), 1, 4) per criterion,
  the recommendation likewise.
- Anchors: a few exemplars on rounds whose every scorecard agrees on the level.

The rounds, candidates, logs, scorecards and anchors are written in one transaction (the
accounts before it, each in its own): a fill that fails leaves no half of itself behind.
Run twice on one team, `fill` adds nothing and says so (`already`), since the team already
holds synthetic candidates; `replace=True` deletes the synthetic candidates and their
rounds (events, scorecards, anchors go with them) and fills again. Nothing else of the team
is touched: a round is demo data exactly when its candidate is synthetic.

Deterministic for a given seed and `now`: the designs, texts, levels and times; ids, the
rounds' public ids, the candidates' codes and the (unusable) link hashes are drawn like
any others.
"""

from __future__ import annotations

import math
import random
import secrets
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone

from sqlalchemy import delete, func, insert, select

import scenarios
from app import instances, tools
from app.accounts import AccountError, service
from app.db.base import Store
from app.db.staff import Anchor, Candidate, Question, Round, RoundEvent, RoundPractice, Scorecard, Team
from app.rounds import candidates, guide, live, questions
from app.scenario import Instance
from app.scoring.marks import score_marks
from app.scoring.score import NarrationError, score
from app.review.demo_reads import narration, typing

VERSION = 1  # of the simulation; bump when what fill writes changes shape
DEFAULT_ROUNDS = 60
MAX_ROUNDS = 500
SEEDS_PER_SCENARIO = 3  # each instance is built once and reused by several rounds
WEEKS = 10  # how far back the rounds go: enough for a drift chart
# About 40% of the rounds: 24 of the default 60, past the 20 double-scored rounds the
# calibration page wants before it shows agreement on the gold set.
GOLD_SHARE = 0.4
# Non-gold rounds the second reviewer also scores, the same number for each interviewer so
# that the reviewer's difference from the interviewers is their own leniency (~12 rounds of
# the default 60: past the 10 shared rounds the page wants for a leniency).
EXTRA_REVIEW_SHARE = 0.4
CRITERIA = live.CRITERIA


@dataclass(frozen=True)
class Rater:
    """A simulated staff member and how they score."""

    name: str
    role: str  # interviewer | reviewer
    leniency_levels: float  # added to the deserved level, before rounding
    noise_sd_levels: float  # standard deviation of their level around deserved + leniency
    drift_levels_per_week: float  # leniency change per week, centred on the period's middle
    submit_delay_h: float  # median time from a round's end to their scorecard (log-normal)

    def email(self, team: str) -> str:
        return f"sim-{self.name}@{team}.demo.invalid"  # .invalid: never a real mailbox (RFC 2606)


RATERS = (
    Rater("avery", "interviewer", +0.6, 0.35, 0.0, 0.75),
    Rater("blake", "interviewer", 0.0, 0.5, +0.06, 20.0),
    Rater("casey", "interviewer", -0.6, 0.3, 0.0, 60.0),
    Rater("drew", "reviewer", 0.0, 0.25, 0.0, 30.0),  # scores the whole gold set: the reference
    Rater("emery", "reviewer", +0.3, 0.45, 0.0, 96.0),
)
INTERVIEWERS = tuple(r for r in RATERS if r.role == "interviewer")
GOLD_RATERS = INTERVIEWERS + (RATERS[3],)

QUALITIES = ("excellent", "good", "mixed", "poor", "no-show")
QUALITY_SHARE = {"excellent": 0.2, "good": 0.25, "mixed": 0.25, "poor": 0.2, "no-show": 0.1}
# The level each criterion of a read of this quality deserves (what a rater with no
# leniency and no noise would give), in the order of live.CRITERIA; between integers so
# that leniency and noise move the rounded level both ways.
TRUE_LEVELS = {
    "excellent": (3.9, 3.8, 3.7, 3.9, 3.8, 3.7),
    "good": (3.3, 3.1, 2.8, 3.3, 3.0, 2.7),
    "mixed": (2.6, 2.5, 1.3, 1.9, 1.5, 1.9),
    "poor": (1.5, 1.3, 1.1, 1.4, 1.1, 1.2),
    "no-show": (1.0, 1.0, 1.0, 1.0, 1.0, 1.0),
}
TRUE_RECOMMENDATION = {"excellent": 3.8, "good": 3.1, "mixed": 2.0, "poor": 1.3, "no-show": 1.0}
ROUND_SD_LEVELS = 0.2  # one candidate's read differs from another's of the same quality


# -- the plan ------------------------------------------------------------------------------------

@dataclass
class RoundPlan:
    sim_seed: int  # fill's seed: every draw for this round derives from it and the index
    index: int
    scenario: str
    seed: int
    quality: str
    interviewer: Rater
    start: datetime  # when the candidate's slot begins
    gold: bool = False
    extra_reviewer: bool = False
    true_levels: dict[str, float] = field(default_factory=dict)
    true_recommendation: float = 1.0


def _spread(rng: random.Random, items: dict[str, float], n: int) -> list[str]:
    """n items in the given shares (largest remainder), shuffled."""
    raw = {k: v * n for k, v in items.items()}
    counts = {k: int(v) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: raw[k] - counts[k], reverse=True)[:n - sum(counts.values())]:
        counts[k] += 1
    out = [k for k in items for _ in range(counts[k])]
    rng.shuffle(out)
    return out


def _slots(rng: random.Random, n: int, now: datetime) -> list[datetime]:
    """n interview slots on weekdays, 09:00-17:00 UTC, over the WEEKS before `now` (the
    last ending at least a day ago, so its scorecards have time to come in), oldest first."""
    first = (now - timedelta(weeks=WEEKS)).replace(hour=0, minute=0, second=0, microsecond=0)
    days = [first + timedelta(days=i) for i in range(WEEKS * 7) if (first + timedelta(days=i)).weekday() < 5
            and first + timedelta(days=i, hours=18) < now - timedelta(days=1)]
    out = []
    for _ in range(n):
        day = rng.choice(days)
        out.append(day + timedelta(hours=9, minutes=15 * rng.randrange(8 * 4 - 3)))
    return sorted(out)


def plan(n: int, seed: int, now: datetime) -> list[RoundPlan]:
    """What each round will be: scenario, instance, quality, interviewer, slot, gold."""
    rng = random.Random(f"tracedojo-demo:{seed}:plan")
    sids = list(scenarios.REGISTRY)
    seeds = {s: [rng.randrange(10**6, instances.MAX_SEED) for _ in range(SEEDS_PER_SCENARIO)] for s in sids}
    order = [sids[i % len(sids)] for i in range(n)]
    rng.shuffle(order)
    quality = _spread(rng, QUALITY_SHARE, n)
    runs_by = [INTERVIEWERS[i % len(INTERVIEWERS)] for i in range(n)]  # each interviewer a third of the rounds
    rng.shuffle(runs_by)
    slots = _slots(rng, n, now)
    out = []
    for i in range(n):
        r = random.Random(f"tracedojo-demo:{seed}:round:{i}")
        p = RoundPlan(seed, i, order[i], r.choice(seeds[order[i]]), quality[i], runs_by[i], slots[i])
        p.true_levels = {c: min(4.0, max(1.0, t + r.gauss(0, ROUND_SD_LEVELS))) if p.quality != "no-show" else 1.0
                         for c, t in zip(CRITERIA, TRUE_LEVELS[p.quality])}
        p.true_recommendation = min(4.0, max(1.0, TRUE_RECOMMENDATION[p.quality] + r.gauss(0, ROUND_SD_LEVELS)))
        out.append(p)
    # the gold set: about GOLD_SHARE of the rounds, in every quality (drawn per quality)
    by_quality: dict[str, list[RoundPlan]] = {}
    for p in out:
        by_quality.setdefault(p.quality, []).append(p)
    for group in by_quality.values():
        for p in rng.sample(group, max(1, round(GOLD_SHARE * len(group)))):
            p.gold = True
    plain = {iv.name: [p for p in out if not p.gold and p.interviewer is iv] for iv in INTERVIEWERS}
    fewest = min(len(v) for v in plain.values())
    k = min(fewest, max(4, round(EXTRA_REVIEW_SHARE * fewest)))  # 4 each at least: 12 shared rounds
    for group in plain.values():
        for p in rng.sample(group, k):
            p.extra_reviewer = True
    return out


# -- one round -----------------------------------------------------------------------------------

def _at(t: datetime) -> str:
    return t.isoformat()


def _ms(t: datetime) -> float:
    return round(t.timestamp() * 1000.0, 1)


@dataclass
class Built:
    round: dict  # Round columns
    events: list[tuple[datetime, str, str, dict]]  # (at, actor, kind, data), in time order
    cards: list[tuple[Rater, dict, int, str, datetime]]  # (rater, criteria, recommendation, notes, at)


class _Log:
    """A round's events as they happen; `add` keeps them in time order even when the
    simulation writes them out of order (a paste's integrity event just before its edit)."""

    def __init__(self):
        self.items: list[tuple[datetime, int, str, str, dict]] = []

    def add(self, at: datetime, actor: str, kind: str, data: dict) -> None:
        self.items.append((at, len(self.items), actor, kind, data))

    def sorted(self) -> list[tuple[datetime, str, str, dict]]:
        return [(at, actor, kind, data) for at, _, actor, kind, data in sorted(self.items, key=lambda e: e[:2])]


def _level(rng: random.Random, rater: Rater, deserved: float, at: datetime, mid: datetime) -> int:
    weeks = (at - mid).total_seconds() / (7 * 86400)
    lenient = rater.leniency_levels + rater.drift_levels_per_week * weeks
    return int(min(4, max(1, round(deserved + lenient + rng.gauss(0, rater.noise_sd_levels)))))


NOTES = {
    "excellent": ["Went to the step period first, unprompted.", "Did the arithmetic before naming a cause.",
                  "Named the decisive measurement before proposing a fix."],
    "good": ["Solid order; the win was not quantified.", "Found the gap quickly; trap dismissed without numbers."],
    "mixed": ["Found the idle time but reached for the trap.", "Needed the hint about the idle time.",
              "Numbers at the start, then none."],
    "poor": ["Stayed on the kernels; no period, no gap.", "Vague throughout; did not use the measurements.",
             "Did not settle on a cause."],
}
CARD_NOTES = {
    "excellent": ["Strong, disciplined read.", "Would be a strong hire on this signal.", "Textbook order and numbers."],
    "good": ["Good read; missing the expected win.", "Solid; trap rejected without arithmetic."],
    "mixed": ["Findings fine, conclusion wrong.", "Mixed: took the trap.", "Partial read."],
    "poor": ["No structure.", "Vague; no numbers.", "Did not find the gap."],
    "no-show": ["Candidate did not join.", "No-show."],
}


def build_round(p: RoundPlan, inst: Instance, emails: dict[str, str], now: datetime, mid: datetime,
                plan_phases: list[dict]) -> Built:
    """The round's row, its log and its scorecards, as the live round would have left them."""
    rng = random.Random(f"tracedojo-demo:{p.sim_seed}:build:{p.index}")
    key = inst.key
    by = emails[p.interviewer.name]
    log = _Log()
    created = p.start - timedelta(minutes=rng.uniform(20, 24 * 60))
    log.add(created, "system", "created", {"by": by, "phase": "waiting"})
    final = narration(p.quality, key, rng)
    runs: list[dict] = []
    marks: dict = {}
    phase_started = None
    opened = submitted = None
    minutes = {ph["phase"]: ph["minutes"] for ph in plan_phases}
    work = "reading" if "reading" in minutes else plan_phases[-1]["phase"]

    if p.quality == "no-show":
        # the link is never opened; the interviewer waits, says so, and ends the round
        ended = p.start + timedelta(minutes=rng.uniform(10, 16))
        log.add(ended - timedelta(seconds=40), "interviewer", "note",
                {"text": f"Candidate did not join; waited {int((ended - p.start).total_seconds() // 60)} minutes.",
                 "by": by})
    else:
        opened = p.start + timedelta(seconds=rng.uniform(-120, 240))
        log.add(opened, "candidate", "opened", {"user_agent": "Mozilla/5.0 (X11; Linux x86_64) synthetic demo "
                                                              "candidate"})
        t = opened + timedelta(seconds=rng.uniform(30, 120))
        starts: dict[str, datetime] = {}
        for ph in plan_phases:  # the interviewer moves through the plan, give or take
            starts[ph["phase"]] = t
            log.add(t, "interviewer", "phase", {"phase": ph["phase"], "minutes": ph["minutes"]})
            phase_started = t
            t += timedelta(minutes=ph["minutes"] * rng.uniform(0.85, 1.1))
        ended = t
        w0 = starts[work]
        w1 = w0 + timedelta(minutes=minutes[work] * rng.uniform(0.8, 0.95))
        span_s = (w1 - w0).total_seconds()

        def during(a: float, b: float) -> datetime:  # a moment in [a, b] of the work phase
            return w0 + timedelta(seconds=span_s * rng.uniform(a, b))

        trace = inst.trace(0)
        t0_ns = float(trace.ts_ns.min())
        end_ns = float(trace.ts_ns.max()) - t0_ns
        km = key["marks"]
        step_ns = ((km["step"]["start_us"] * 1e3 - t0_ns), (km["step"]["end_us"] * 1e3 - t0_ns))
        gap_ns = ((km["gap"]["start_us"] * 1e3 - t0_ns), (km["gap"]["end_us"] * 1e3 - t0_ns))

        # where they look: a zoom or pan is a burst of viewport events 100-300 ms apart
        view = (0.0, end_ns)
        targets = [(0.0, end_ns), step_ns, gap_ns, step_ns] if p.quality in ("excellent", "good") else \
            [(0.0, end_ns), (0.0, end_ns * rng.uniform(0.2, 0.6)), step_ns]
        targets += [(0.0, end_ns), step_ns] * rng.randint(0, 2)  # back to the whole trace while writing
        # the first moves early in the phase, the later ones while they write; one after another
        begins = sorted(during(0.02, 0.3) for _ in targets[:3]) + sorted(during(0.35, 0.95) for _ in targets[3:])
        for target, at in zip(targets, begins):
            pad = (target[1] - target[0]) * rng.uniform(0.05, 0.4)
            goal = (max(0.0, target[0] - pad), min(end_ns, target[1] + pad))
            steps = rng.randint(3, 6)
            for s in range(1, steps + 1):
                f = s / steps
                cur = (view[0] + (goal[0] - view[0]) * f, view[1] + (goal[1] - view[1]) * f)
                at += timedelta(milliseconds=rng.uniform(100, 300))
                log.add(at, "candidate", "viewport", {"start_ns": round(cur[0], 1), "end_ns": round(cur[1], 1),
                                                      "scroll_y": float(rng.choice([0, 0, 0, 120, 240])),
                                                      "rank": "0", "t": _ms(at)})
            view = goal

        # marks: an area selection, then the mark stored from it (absolute µs, as marks.js sends)
        def mark(kind: str, span: tuple[float, float], at: datetime) -> None:
            log.add(at, "candidate", "selection", {"area": {"start_ns": round(span[0], 1),
                                                            "end_ns": round(span[1], 1)}, "t": _ms(at)})
            at += timedelta(seconds=rng.uniform(1.5, 6))
            marks[kind] = {"start_us": round((t0_ns + span[0]) / 1e3, 3), "end_us": round((t0_ns + span[1]) / 1e3, 3)}
            log.add(at, "candidate", "marks", dict(marks))

        def jitter(span: tuple[float, float], share: float) -> tuple[float, float]:
            w = span[1] - span[0]
            return (span[0] + w * rng.uniform(-share, share), span[1] + w * rng.uniform(-share, share))

        if p.quality in ("excellent", "good"):
            mark("step", jitter(step_ns, 0.015), during(0.2, 0.3))
            mark("gap", jitter(gap_ns, 0.08), during(0.3, 0.4))
        elif p.quality == "mixed":
            mark("step", jitter(step_ns, 0.02), during(0.2, 0.35))
            if rng.random() < 0.5:  # the gap marked loosely
                g = gap_ns[1] - gap_ns[0]
                mark("gap", (gap_ns[0] + g * rng.uniform(0.5, 0.8), gap_ns[1] + g * rng.uniform(0.8, 1.5)),
                     during(0.35, 0.5))
        elif rng.random() < 0.5:  # poor: half a step, if anything
            mark("step", (step_ns[0], step_ns[0] + (step_ns[1] - step_ns[0]) * rng.uniform(0.4, 0.6)),
                 during(0.3, 0.6))

        # measurements: the decisive one for good reads; others by taste
        decisive = key["decisive_measurement"]
        others = [t for t in tools.TOOLS if t != decisive]
        chosen = {"excellent": [rng.choice(others), decisive] + rng.sample(others, rng.randint(0, 1)),
                  "good": [decisive] + rng.sample(others, rng.randint(0, 1)),
                  "mixed": rng.sample(others, rng.randint(1, 2)),
                  "poor": rng.sample(others, rng.randint(0, 1))}[p.quality]
        for j, tool in enumerate(chosen):
            at = during(0.15 + 0.5 * j / len(chosen), 0.2 + 0.5 * (j + 1) / len(chosen))
            run = {"tool": tool, "options": {}, "at": _at(at), "since_open_s": round((at - opened).total_seconds(), 1)}
            runs.append(run)
            log.add(at, "candidate", "run", run)
        runs.sort(key=lambda r: r["at"])

        # hints: weaker reads get more of the ladder, in its order
        ladder = guide.hints(inst)
        n_hints = {"excellent": 0, "good": rng.randint(0, 1), "mixed": rng.randint(1, 2), "poor": 2}[p.quality]
        for j in range(min(n_hints, len(ladder))):
            h = ladder[j]
            log.add(during(0.25 + 0.3 * j, 0.5 + 0.3 * j), "interviewer", "hint",
                    {"index": h["index"], "title": h["title"], "text": h["text"], "by": by})
        for text in rng.sample(NOTES[p.quality], rng.randint(1, 2)):
            log.add(during(0.3, 0.98), "interviewer", "note", {"text": text, "by": by})

        # integrity, now and then: a tab switch; more rarely a paste (into the narration, below)
        if rng.random() < 0.25:
            at = during(0.2, 0.8)
            log.add(at, "candidate", "integrity", {"what": "hidden", "t": _ms(at)})
            at += timedelta(seconds=rng.uniform(8, 90))
            log.add(at, "candidate", "integrity", {"what": "visible", "t": _ms(at)})

        # the narration, typed from about a third of the phase to its end
        states = typing(final, rng)
        paste_at = rng.randrange(1, len(states)) if len(states) > 3 and rng.random() < 0.1 else None
        times = sorted(during(0.32, 0.97) for _ in states)
        prev = ""
        for j, (state, at) in enumerate(zip(states, times)):
            if j == paste_at and len(state) > len(prev):
                pa = at - timedelta(milliseconds=rng.uniform(50, 400))
                log.add(pa, "candidate", "integrity", {"what": "paste", "chars": len(state) - len(prev), "t": _ms(pa)})
            log.add(at, "candidate", "narration", live.splice(prev, state))
            prev = state

        if p.quality != "poor" or rng.random() < 0.6:  # some weak reads run out of time unsubmitted
            submitted = max(times[-1] if times else w1, w1) + timedelta(seconds=rng.uniform(5, 60))
            log.add(submitted, "candidate", "submit", {"chars": len(final), "words": len(final.split())})
        if submitted is not None and submitted >= ended:
            ended = submitted + timedelta(seconds=rng.uniform(30, 120))

    # the end, and the automatic score exactly as live.end computes it
    try:
        report = score(key, inst.scenario.rubric, final, runs)
        report["marks"] = score_marks(key, marks)
    except NarrationError as e:  # nothing said (a no-show): the round still ends
        report = {"total": None, "skipped": f"no automatic score: {e}"}
    log.add(ended, "interviewer", "end", {"by": by})

    # scorecards: this round's raters, each after their own typical delay
    raters = [p.interviewer]
    if p.gold:
        raters = [p.interviewer] + [r for r in GOLD_RATERS if r is not p.interviewer]
    elif p.extra_reviewer:
        raters.append(RATERS[4])
    latest = now - timedelta(minutes=5)
    cards = []
    for rater in raters:
        delay_h = rater.submit_delay_h * math.exp(rng.gauss(0, 0.6))
        at = min(ended + timedelta(hours=delay_h), latest)
        if at <= ended:
            at = ended + (latest - ended) / 2
        if rater is p.interviewer and rng.random() < 0.7:  # a write-up note before the scorecard
            log.add(ended + (at - ended) * rng.uniform(0.1, 0.9), "interviewer", "note",
                    {"text": rng.choice(CARD_NOTES[p.quality]), "by": emails[rater.name]})
        criteria = {c: _level(rng, rater, p.true_levels[c], at, mid) for c in CRITERIA}
        rec = _level(rng, rater, p.true_recommendation, at, mid)
        note = rng.choice(CARD_NOTES[p.quality])
        cards.append((rater, criteria, rec, note, at))
        log.add(at, "interviewer", "scorecard", {"by": emails[rater.name], "criteria": dict(criteria),
                                                 "recommendation": rec})

    row = dict(scenario=p.scenario, version=inst.version, seed=str(p.seed), seed_kind="secret", params={},
               rubric_version=inst.version, time_plan=[dict(ph) for ph in plan_phases],
               phase="ended", phase_started_at=phase_started, locked=True, narration=final, marks=marks, runs=runs,
               opened_at=opened, submitted_at=submitted, ended_at=ended, auto_report=report,
               auto_total=report["total"], gold=p.gold, created_at=created,
               token_expires_at=created + timedelta(hours=72))
    return Built(row, log.sorted(), cards)


# -- the team ------------------------------------------------------------------------------------

class DemoError(AccountError):
    """The demo cannot be filled as asked (no such team, a bad count). An AccountError, so
    the command line reports it as one line, as it does a bad team slug."""


def _team(store: Store, team: str | int) -> tuple[int | None, str]:
    """(id or None if the slug has no team yet, slug)."""
    with store.read() as db:
        row = db.scalar(select(Team).where(Team.id == team) if isinstance(team, int)
                        else select(Team).where(Team.slug == service.check_slug(team)))
    if row is None:
        if isinstance(team, int):
            raise DemoError(f"no team {team}")
        return None, service.check_slug(team)
    return row.id, row.slug


def existing(store: Store, team_id: int, limit: int = 6) -> dict:
    """The team's synthetic data: how many candidates, rounds, events, scorecards, and the
    public ids of a few rounds (newest first)."""
    with store.read() as db:
        cands = select(Candidate.id).where(Candidate.team_id == team_id, Candidate.synthetic)
        rounds = db.execute(select(Round.id, Round.public_id, Round.gold, Round.event_count)
                            .where(Round.candidate_id.in_(cands)).order_by(Round.created_at.desc())).all()
        ids = select(Round.id).where(Round.candidate_id.in_(cands))
        n_cards = db.scalar(select(func.count()).select_from(Scorecard).where(Scorecard.round_id.in_(ids)))
        n_anchors = db.scalar(select(func.count()).select_from(Anchor).where(Anchor.round_id.in_(ids)))
        n_cands = db.scalar(select(func.count()).select_from(Candidate).where(Candidate.id.in_(cands)))
    return {"candidates": n_cands, "rounds": len(rounds), "gold": sum(1 for r in rounds if r.gold),
            "events": sum(r.event_count or 0 for r in rounds), "scorecards": n_cards, "anchors": n_anchors,
            "review_round_ids": [r.public_id for r in rounds[:limit]]}


def _clear(db, team_id: int) -> None:
    """The team's synthetic candidates and everything hanging from their rounds; explicit
    deletes rather than the foreign keys' cascades, so it does not depend on them."""
    cands = select(Candidate.id).where(Candidate.team_id == team_id, Candidate.synthetic)
    rounds = select(Round.id).where(Round.candidate_id.in_(cands))
    for model in (Anchor, Scorecard, RoundEvent, RoundPractice):
        db.execute(delete(model).where(model.round_id.in_(rounds)).execution_options(synchronize_session=False))
    db.execute(delete(Round).where(Round.candidate_id.in_(cands)).execution_options(synchronize_session=False))
    db.execute(delete(Candidate).where(Candidate.team_id == team_id, Candidate.synthetic)
               .execution_options(synchronize_session=False))


def raters_json(team: str) -> list[dict]:
    return [{"email": r.email(team), **{k: v for k, v in asdict(r).items() if k != "name"}} for r in RATERS]


def fill(store: Store, team: str | int, *, rounds: int = DEFAULT_ROUNDS, seed: int = 1,
         now: datetime | None = None, replace: bool = False) -> dict:
    """Fill the team with demo data (the module's docstring says what). The team is a slug
    (made if missing) or an id. Returns what was simulated and written: the raters'
    parameters, counts, the rounds' designs, the time taken."""
    if not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
        raise DemoError(f"rounds must be 1-{MAX_ROUNDS}")
    started = time.perf_counter()
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    team_id, slug = _team(store, team)
    out = {"team": slug, "version": VERSION, "seed": seed, "raters": raters_json(slug),
           "true_levels": {q: dict(zip(CRITERIA, v)) for q, v in TRUE_LEVELS.items()},
           "true_recommendation": dict(TRUE_RECOMMENDATION)}
    if team_id is not None and not replace:
        have = existing(store, team_id)
        if have["candidates"]:
            return {**out, "already": True, **have, "seconds": round(time.perf_counter() - started, 2),
                    "note": f"team {slug} already holds demo data ({have['rounds']} rounds of synthetic "
                            "candidates); nothing added (replace=True, or --replace-data, makes it anew)"}

    # the simulated staff: real accounts, random passwords nobody is told (one Argon2 hash each)
    users: dict[str, int] = {}
    for r in RATERS:
        email = r.email(slug)
        password = None if service.has_account(store, email) else secrets.token_urlsafe(24)
        users[r.name] = service.add_user(store, email, password, r.role, slug).user_id
    emails = {r.name: r.email(slug) for r in RATERS}
    team_id, _ = _team(store, slug)

    with store.write() as db:
        questions.ensure_builtin(db, team_id)
    with store.read() as db:
        bank = {q.scenario: q for q in db.scalars(select(Question).where(Question.team_id == team_id,
                                                                         Question.builtin).order_by(Question.id))}

    plans = plan(rounds, seed, now)
    mid = now - timedelta(weeks=WEEKS / 2)
    built = []
    for p in plans:  # outside the write lock: the instances and the scorer are the slow part
        inst = instances.instance(p.scenario, p.seed)
        built.append((p, build_round(p, inst, emails, now, mid, questions.check_plan(bank[p.scenario].time_plan))))

    n_events = n_cards = 0
    designs = []
    with store.write() as db:
        if replace:
            _clear(db, team_id)
        width = max(2, len(str(len(built))))
        round_rows: list[tuple[RoundPlan, Built, Round]] = []
        for p, b in built:
            # a record like any candidate's (a random code, unique in the team), flagged synthetic
            name = f"Synthetic candidate {p.index + 1:0{width}d}"
            cand = candidates.create(db, team_id, name, created_by=users[p.interviewer.name], synthetic=True)
            cand.created_at = b.round["created_at"]
            r = Round(public_id=secrets.token_hex(8), team_id=team_id, question_id=bank[p.scenario].id,
                      created_by=users[p.interviewer.name], candidate_name=name, candidate_id=cand.id,
                      token_hash=live.token_hash(secrets.token_urlsafe(32)), last_event_id=0, event_count=0,
                      **b.round)
            db.add(r)
            db.flush()
            # the log, in time order: ids only grow, so id order is time order
            ids = db.scalars(insert(RoundEvent).returning(RoundEvent.id, sort_by_parameter_order=True),
                             [{"round_id": r.id, "at": at, "actor": actor, "kind": kind, "data": data}
                              for at, actor, kind, data in b.events]).all()
            if ids != sorted(ids):
                raise AssertionError("the database gave a round's events ids out of order")
            r.last_event_id, r.event_count = ids[-1], len(ids)
            for rater, criteria, rec, notes, at in b.cards:
                db.add(Scorecard(round_id=r.id, user_id=users[rater.name], criteria=criteria, recommendation=rec,
                                 notes=notes, submitted_at=at, updated_at=at))
            n_events += len(ids)
            n_cards += len(b.cards)
            round_rows.append((p, b, r))
            designs.append({"id": r.public_id, "scenario": p.scenario, "seed": p.seed, "quality": p.quality,
                            "interviewer": emails[p.interviewer.name], "gold": p.gold,
                            "true_levels": {c: round(v, 2) for c, v in p.true_levels.items()},
                            "true_recommendation": round(p.true_recommendation, 2),
                            "auto_total": b.round["auto_total"]})
        anchors = _anchors(db, team_id, round_rows, users["drew"], now)

    sample = {}  # one round of each quality to open first, gold where there is one
    for d in sorted(designs, key=lambda d: not d["gold"]):
        sample.setdefault(d["quality"], d["id"])
    return {**out, "already": False, "candidates": len(built), "rounds": len(built),
            "gold": sum(p.gold for p in plans), "events": n_events, "scorecards": n_cards, "anchors": anchors,
            "review_round_ids": [sample[q] for q in QUALITIES if q in sample], "designs": designs,
            "seconds": round(time.perf_counter() - started, 2)}


ANCHOR_PLAN = (  # (quality of the round, criterion, level, note): what a clear example shows
    ("excellent", "trap", 4, "Rejects the trap out loud, with the arithmetic that rules it out."),
    ("excellent", "fix_win", 4, "The fix and its win, before and after, in this instance's numbers."),
    ("excellent", "discipline_order", 4, "Step, gaps, overlap, then kernels: the order, unprompted."),
    ("poor", "findings", 1, "No period, no gap, no number: what a level 1 on findings sounds like."),
    ("mixed", "trap", 1, "States the findings, then buys the trap as the cause."),
)


def _anchors(db, team_id: int, rows: list, reviewer_id: int, now: datetime) -> int:
    """A few exemplars, each on a gold round of the planned quality whose raters' median
    level for the criterion is the anchor's (one anchor per scenario and criterion at most)."""
    made, used = 0, set()
    for quality, criterion, level, note in ANCHOR_PLAN:
        for p, b, r in rows:
            if p.quality != quality or (p.scenario, criterion) in used or (r.id, criterion) in used:
                continue
            if len(b.cards) < 3 or statistics.median_low(c[1][criterion] for c in b.cards) != level:
                continue
            at = min(now - timedelta(minutes=1), max(c[4] for c in b.cards) + timedelta(hours=2))
            db.add(Anchor(team_id=team_id, round_id=r.id, scenario=p.scenario, criterion=criterion, level=level,
                          note=note, created_by=reviewer_id, created_at=at))
            used |= {(p.scenario, criterion), (r.id, criterion)}
            made += 1
            break
    return made
