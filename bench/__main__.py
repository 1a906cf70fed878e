"""python -m bench NAME: run one benchmark; each prints a table and a JSON line last."""

from __future__ import annotations

import sys

from bench import (analyze, calibration, corpus, export, generate, live, load, realism, score, second_opinion, stance,
                   tools, viewer)

BENCHES = {"generate": generate.main, "analyze": analyze.main, "tools": tools.main, "viewer": viewer.main, "score": score.main,
           "load": load.main, "corpus": corpus.main, "live": live.main, "calibration": calibration.main,
           "export": export.main, "stance": stance.main, "second_opinion": second_opinion.main,
           "realism": realism.main}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHES:
        print(f"usage: python -m bench {{{'|'.join(BENCHES)}}}", file=sys.stderr)
        return 2
    return BENCHES[argv[0]](argv[1:]) or 0


# Guarded: a benchmark's client processes (multiprocessing's spawn) import this module again.
if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
