"""Calibration dashboard speed: a team of three raters with 200 and 1,000 ended rounds drawn
from the tests' model (tests/calib_data.py), on a throwaway SQLite file; the dashboard
(read, DuckDB, every bootstrap interval) timed five times each. Target: under a second for
200 rounds on this 2-core machine."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from app.db.base import store_for, upgrade_to_head
from app.review import calibration
from tests.calib_data import make_team


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [200, 1000]
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            url = f"sqlite:///{Path(d) / f'calib-{n}.db'}"
            upgrade_to_head(url)
            store = store_for(url)
            team = make_team(store, f"bench{n}", n)
            calibration.dashboard(store, team["team_id"])  # warm: imports, numpy, DuckDB
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                calibration.dashboard(store, team["team_id"])
                times.append((time.perf_counter() - t0) * 1e3)
            out[n] = {"median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1)}
            print(f"{n:>5} rounds: median {out[n]['median_ms']:7.1f} ms, max {out[n]['max_ms']:7.1f} ms "
                  f"({calibration.N_RESAMPLES} resamples per interval)")
    print(json.dumps({"bench": "calibration", "rounds": {str(k): v for k, v in out.items()},
                      "n_resamples": calibration.N_RESAMPLES}))
    return 0
