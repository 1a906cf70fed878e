"""Scoring speed: every calibration read and the model answers of a few seeds, each scored
several times. Target (issue 5): median under 20 ms per narration on this 2-core machine.
Then the worst case: narrations at the length limit built to make the stance checks work
hardest (a run-on transcript naming the trap hundreds of times, hundreds of corrections),
which a request can send; they should stay around a second, not grow with the square of
the length."""

from __future__ import annotations

import json
import statistics
import time

import scenarios
from app.scoring.score import MAX_CHARS, score
from tests.calibration import READS


def main(argv: list[str]) -> int:
    cases = []
    for sid, scn in scenarios.REGISTRY.items():
        key = scn.instance("canonical").key
        cases += [(sid, key, scn.rubric, t) for texts in READS[sid].values() for t in texts]
        for seed in range(5):
            k = scn.instance(seed).key
            cases.append((sid, k, scn.rubric, k["model_answer"]))
    times = []
    per_sid: dict[str, list[float]] = {}
    for sid, key, rubric, text in cases:
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            score(key, rubric, text)
            best = min(best, time.perf_counter() - t0)
        times.append(best * 1e3)
        per_sid.setdefault(sid, []).append(best * 1e3)
    for sid, v in per_sid.items():
        print(f"{sid:<14} median {statistics.median(v):6.2f} ms   max {max(v):6.2f} ms   ({len(v)} narrations)")
    med = statistics.median(times)
    print(f"all: median {med:.2f} ms, p95 {sorted(times)[int(0.95 * len(times))]:.2f} ms over {len(times)} narrations "
          f"(target: median < 20 ms)")
    print(json.dumps({"bench": "score", "narrations": len(times), "median_ms": round(med, 2),
                      "p95_ms": round(sorted(times)[int(0.95 * len(times))], 2), "max_ms": round(max(times), 2),
                      "median_ms_by_scenario": {s: round(statistics.median(v), 2) for s, v in per_sid.items()},
                      "worst_case_ms": _worst_cases()}))
    return 0


WORST = {
    "run-on": "um so nccl is the bottleneck but wait the all reduce is not overlapped and i'd retune nccl maybe "
              "could be gc could be the prefill ",
    "corrections": "The culprit is NCCL. Actually, no. My read: the GEMVs are slow. Let me measure it. ",
    "commas": "nccl, ",
}


def _worst_cases() -> dict[str, float]:
    out = {}
    for sid, scn in scenarios.REGISTRY.items():
        key = scn.instance("canonical").key
        for name, unit in WORST.items():
            text = (unit * (MAX_CHARS // len(unit) + 1))[:MAX_CHARS]
            t0 = time.perf_counter()
            score(key, scn.rubric, text)
            out[f"{sid}/{name}"] = round((time.perf_counter() - t0) * 1e3, 1)
    worst = max(out, key=out.get)
    print(f"worst case at {MAX_CHARS:,} characters: {worst} {out[worst]:.0f} ms "
          f"(median of the {len(out)} cases {statistics.median(out.values()):.0f} ms)")
    return out
