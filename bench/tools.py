"""Each measurement on each scenario's default instance (built once, as the server caches
it). Target (issue 3): every run under 200 ms on this 2-core machine."""

from __future__ import annotations

import json
import time

import scenarios
from app import tools


def main(argv: list[str]) -> int:
    figures: dict = {"bench": "tools", "ms": {}}
    ids = list(tools.TOOLS)
    print(f"{'scenario':<14}" + "".join(f"{t:>15}" for t in ids))
    for scn in scenarios.REGISTRY.values():
        inst = scn.instance(0)
        inst.trace(0)
        row = {}
        for tid in ids:
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                try:
                    tools.run(tid, inst)
                except tools.ToolNotApplicable:
                    pass
                best = min(best, time.perf_counter() - t0)
            row[tid] = round(best * 1e3, 2)
        figures["ms"][scn.id] = row
        print(f"{scn.id:<14}" + "".join(f"{row[t]:>13.1f}ms" for t in ids))
    worst = max(v for r in figures["ms"].values() for v in r.values())
    figures["worst_ms"] = worst
    print(f"slowest run {worst:.1f} ms (target < 200 ms)")
    print(json.dumps(figures))
    return 0
