"""python -m bench second_opinion [--url URL --model M]: what a second opinion on stance
(app/scoring/second_opinion.py) adds to the scorer, on the blind corpora's development reads.

The scorer's decisions are its held-out ones (bench/stance.py: each corpus judged by a
stance model fitted on the others). The opinion is, by default, the recorded answers in
second_opinion_recorded.jsonl: 300 development reads (150 the authors labelled endorse, 150
not, drawn at random) labelled on 2026-12-01 by two readers who saw only the key's brief,
true cause, fix and traps and the read, never the scorer, the authors' labels or the
corpora's kinds. With --url the opinion is asked of that endpoint for the same reads, so
a team can measure the model it would configure before turning it on.

Printed for those reads: the opinion's agreement with the authors on endorse, and the
scorer alone against the scorer with the opinion (missed endorsements neither capped nor
sent to a reader; reads sent to a reader; false endorsements, which the opinion cannot
change since it never caps).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from app.scoring import second_opinion, stance
from bench.corpus import instance_of
from bench.stance import development_reads, featurise, held_out

RECORDED = Path(__file__).with_name("second_opinion_recorded.jsonl")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench second_opinion")
    ap.add_argument("--url", help="an OpenAI-compatible base URL to ask instead of replaying the recorded answers")
    ap.add_argument("--model", default="")
    ap.add_argument("--api-key", default=None)
    args = ap.parse_args(argv)
    recorded = {r["id"]: r for r in map(json.loads, RECORDED.read_text().splitlines())}
    reads = development_reads()
    with stance.unfitted():
        corpora = {name: featurise(rs) for name, rs in reads.items()}
    judged = held_out(corpora)
    rows = []
    for name, feats in corpora.items():
        for src, f, j in zip(reads[name], feats, judged[name]):
            if src["id"] not in recorded:
                continue
            if args.url:
                key = instance_of(src).key
                op = second_opinion.ask(key, src["text"], url=args.url, model=args.model, api_key=args.api_key)
            else:
                op = {"status": "done", "stance": recorded[src["id"]]["stance"],
                      "confidence": recorded[src["id"]]["confidence"], "quote": "", "trap": None}
            capped = j.decision == "endorse"
            reviewed = stance.reviewed(j, f["rule_cap"], f["rule_review"])
            asks = second_opinion.review_reason({"trap_endorsed": capped}, op) is not None
            rows.append({"endorse": f["endorse"], "capped": capped, "reviewed": reviewed, "opinion": op,
                         "with_opinion": reviewed or asks})
    pos = [r for r in rows if r["endorse"]]
    neg = [r for r in rows if not r["endorse"]]
    answered = [r for r in rows if r["opinion"]["status"] == "done"]
    agree = round(sum((r["opinion"]["stance"] == "endorse") == r["endorse"] for r in answered) / len(answered), 3) \
        if answered else None

    def share(xs, pred):
        return round(sum(map(pred, xs)) / max(1, len(xs)), 3)

    figures = {
        "reads": len(rows), "endorse_labels": len(pos), "answered": len(answered),
        "opinion_agrees_with_authors": agree,
        "false_endorsement": share(neg, lambda r: r["capped"]),
        "missed_endorsement": share(pos, lambda r: not r["capped"]),
        "scorer_alone": {"missed_unreviewed": share(pos, lambda r: not r["capped"] and not r["reviewed"]),
                         "review_rate": share(rows, lambda r: not r["capped"] and r["reviewed"])},
        "with_opinion": {"missed_unreviewed": share(pos, lambda r: not r["capped"] and not r["with_opinion"]),
                         "review_rate": share(rows, lambda r: not r["capped"] and r["with_opinion"])},
        "source": args.url or str(RECORDED.name),
    }
    print(f"{len(rows)} development reads with an opinion ({len(pos)} labelled endorse), from {figures['source']}")
    print(f"  answered {len(answered)}; agrees with the authors on endorse: "
          f"{'-' if agree is None else f'{agree:.3f}'}")
    print(f"  false endorsement {figures['false_endorsement']:.3f}, missed {figures['missed_endorsement']:.3f} "
          f"(the cap is the scorer's either way)")
    print(f"  {'':16s} {'unreviewed':>11s} {'review':>7s}")
    for label in ("scorer_alone", "with_opinion"):
        x = figures[label]
        print(f"  {label:16s} {x['missed_unreviewed']:11.3f} {x['review_rate']:7.3f}")
    print(json.dumps({"bench": "second_opinion", **figures}))
    return 0
