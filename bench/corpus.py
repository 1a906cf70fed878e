"""python -m bench corpus [--corpus blind|blind2|...|blind10] [--part dev|test] [--misses]: the scorer
against a blind corpus (tests/corpus/blind/, blind2/ ... blind10/), as aggregate figures.

Each read is scored on its own instance (no measurements run: the reads only narrate).
The scorer's total maps to the authors' bands as an interviewer's grades would: 85-100
excellent (4), 65-84 good (3), 40-64 mixed (2), below 40 poor (1). Printed: false
endorsement (a read that does not endorse the trap, flagged as endorsing it), of those the
good reads capped (band 3-4: the costly error), missed endorsement (an endorsing read not
flagged), quadratic weighted kappa against the bands,
Spearman between band and total, and per kind the agreement. The test part is only ever
seen this way: `--misses` (single reads) works on the development part alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

import scenarios
from app.scoring.score import score

CORPORA = Path(__file__).resolve().parent.parent / "tests" / "corpus"
# The blind corpora were written against version 1 of every scenario: their reads quote
# those instances' numbers, so they are scored against them whatever the current version
# (a read that names its own "version" is scored against that one).
CORPUS_VERSION = 1


def instance_of(read: dict):
    """The instance a corpus read was written about (contract 1: scenario, version, seed)."""
    return scenarios.get(read["scenario"]).instance(read["seed"], version=read.get("version", CORPUS_VERSION))
# Totals at or above each floor: bands 4, 3, 2; below: 1. Where a total of the scorer's
# scale falls in an interviewer's four bands is a cut-score choice, made on the development
# parts alone: the floors that maximise the smaller of the two corpora's kappas on their dev
# parts (a 5-point grid; was 85/65/40, set by hand before the corpora existed). The test
# parts are then scored with it as with any other rule.
BAND_FLOORS = (70, 60, 40)
TARGETS = {"false_endorsement": 0.02, "missed_endorsement": 0.10, "qwk": 0.80}


def band_of(total: float) -> int:
    return 4 - next((i for i, floor in enumerate(BAND_FLOORS) if total >= floor), 3)


def qwk(a: list[int], b: list[int], k: int = 4) -> float:
    """Quadratic weighted kappa between two gradings on 1..k (Cohen 1968)."""
    observed = np.zeros((k, k))
    for x, y in zip(a, b):
        observed[x - 1, y - 1] += 1
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    w = np.array([[(i - j) ** 2 for j in range(k)] for i in range(k)]) / (k - 1) ** 2
    return float(1 - (w * observed).sum() / (w * expected).sum())


def spearman(a: list[float], b: list[float]) -> float:
    """Rank correlation, ties given their mean rank."""
    def ranks(x):
        x = np.asarray(x, float)
        order = x.argsort(kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x))
        for v in np.unique(x):
            r[x == v] = r[x == v].mean()
        return r
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def evaluate(reads: list[dict]) -> tuple[dict, list[dict]]:
    keys: dict = {}
    rows, times = [], []
    for r in reads:
        k = (r["scenario"], r["seed"], r.get("version"))
        if k not in keys:
            inst = instance_of(r)
            keys[k] = (inst.key, inst.scenario.rubric)
        key, rubric = keys[k]
        t = time.perf_counter()
        rep = score(key, rubric, r["text"], [], timed=r["timed"])
        times.append((time.perf_counter() - t) * 1e3)
        rows.append({**r, "total": rep["total"], "flagged": rep["trap_endorsed"],
                     "review": rep.get("needs_review", False), "predicted": band_of(rep["total"])})
    endorse = [x for x in rows if x["stance"] == "endorse"]
    others = [x for x in rows if x["stance"] != "endorse"]
    strong = [x for x in others if x["band"] >= 3]
    kinds: dict[str, list] = defaultdict(list)
    for x in rows:
        kinds[x["kind"]].append(x)
    figures = {
        "reads": len(rows),
        "false_endorsement": round(sum(x["flagged"] for x in others) / max(1, len(others)), 3),
        # the costly error: a good read (band 3-4) that does not endorse the trap, capped at 40
        "strong_capped": round(sum(x["flagged"] for x in strong) / max(1, len(strong)), 3),
        "missed_endorsement": round(sum(not x["flagged"] for x in endorse) / max(1, len(endorse)), 3),
        # an endorsement the scorer did not cap but sent to a reviewer is caught, not missed
        "missed_unreviewed": round(sum(not x["flagged"] and not x["review"] for x in endorse) / max(1, len(endorse)), 3),
        "review_rate": round(sum(x["review"] for x in rows) / len(rows), 3),
        "qwk": round(qwk([x["band"] for x in rows], [x["predicted"] for x in rows]), 3),
        "spearman": round(spearman([x["band"] for x in rows], [x["total"] for x in rows]), 3),
        "exact_band_agreement": round(sum(x["band"] == x["predicted"] for x in rows) / len(rows), 3),
        "median_ms": round(statistics.median(times), 2),
        "by_kind": {kind: {"n": len(xs), "band_mean": round(statistics.mean(x["band"] for x in xs), 2),
                           "predicted_mean": round(statistics.mean(x["predicted"] for x in xs), 2),
                           "exact": round(sum(x["band"] == x["predicted"] for x in xs) / len(xs), 2),
                           "flagged": sum(x["flagged"] for x in xs),
                           "endorse_labels": sum(x["stance"] == "endorse" for x in xs)}
                    for kind, xs in sorted(kinds.items())},
    }
    return figures, rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench corpus")
    ap.add_argument("--corpus", choices=sorted(d.name for d in CORPORA.iterdir() if (d / "dev.jsonl").exists()),
                    default="blind",
                    help="blind: the first corpus (13 kinds); blind2: the second, weighted to endorsements; "
                         "blind3-8: written after the stance rules, mostly held out; blind9: written to fit the "
                         "stance model on, all development; blind10: the current versions, the issue's kinds in full (READMEs)")
    ap.add_argument("--part", choices=("dev", "test"), default="dev")
    ap.add_argument("--misses", action="store_true", help="list the development part's misses, read by read")
    args = ap.parse_args(argv)
    if args.misses and args.part == "test":
        print("the test part is seen only as aggregate figures", flush=True)
        return 2
    path = CORPORA / args.corpus / f"{args.part}.jsonl"
    if not path.exists():
        print(f"no {path}: the corpus is not split yet (tests/corpus/{args.corpus}/README.md)")
        return 2
    reads = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not reads:
        print(f"the {args.part} part of {args.corpus} is empty (tests/corpus/split.py)")
        return 2
    figures, rows = evaluate(reads)
    print(f"{args.part} part: {figures['reads']} reads")
    for name in ("false_endorsement", "strong_capped", "missed_endorsement", "missed_unreviewed", "review_rate", "qwk",
                 "spearman",
                 "exact_band_agreement", "median_ms"):
        target = TARGETS.get(name)
        note = ""
        if target is not None:
            met = figures[name] >= target if name == "qwk" else figures[name] <= target
            note = f"   (target {'>=' if name == 'qwk' else '<='} {target}: {'met' if met else 'missed'})"
        print(f"  {name:22s} {figures[name]}{note}")
    print(f"  {'kind':28s} {'n':>3s} {'band':>5s} {'pred':>5s} {'exact':>6s} {'flagged':>8s} {'endorse':>8s}")
    for kind, f in figures["by_kind"].items():
        print(f"  {kind:28s} {f['n']:3d} {f['band_mean']:5.2f} {f['predicted_mean']:5.2f} {f['exact']:6.2f} "
              f"{f['flagged']:8d} {f['endorse_labels']:8d}")
    if args.misses:
        for x in rows:
            wrong_flag = x["flagged"] != (x["stance"] == "endorse")
            if wrong_flag or abs(x["band"] - x["predicted"]) >= 2:
                print(f"  MISS {x['id']}: band {x['band']} -> {x['total']:.0f} ({x['predicted']}), stance {x['stance']}, "
                      f"flagged {x['flagged']}")
    print(json.dumps({"bench": "corpus", "corpus": args.corpus, "part": args.part, **figures}))
    return 0
