"""Exports against a real server: a team whose rounds hold N events (default 100,000, the
mix a live round writes: mostly viewports, then narration edits, marks and runs),
downloaded by its admin as `/api/export/events.{csv,parquet,json}` and the other tables,
while the server's resident memory is sampled. Prints time to first byte, MB/s, events/s
and the server's memory above its level before each download; a JSON line last.

`python -m bench export [--events N] [--rounds R]` (a server per format, so each first download
starts from a process that never exported)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx

PW = "bench export password"
FORMATS = ("csv", "parquet", "json")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def fill(url: str, n_events: int, n_rounds: int) -> None:
    """The team "bench": its admin, `n_rounds` rounds, and `n_events` events between them,
    inserted in bulk (writing them one by one through the app is `python -m bench live`)."""
    from sqlalchemy import insert, update

    from app.accounts import service
    from app.db.base import store_for, upgrade_to_head
    from app.db.staff import Round, RoundEvent
    from app.rounds import live

    upgrade_to_head(url)
    store = store_for(url)
    admin = service.add_user(store, "admin@bench.org", PW, "admin", "bench")
    rounds = [live.create(store, admin, scenario="ddp", seed="canonical", candidate_name=f"Candidate {i}")[0].id
              for i in range(n_rounds)]
    rng = random.Random(7)
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)

    def event(i: int) -> dict:
        u = rng.random()
        if u < 0.6:
            s = rng.randrange(10**9)
            kind, data = "viewport", {"start_ns": s, "end_ns": s + rng.randrange(10**8)}
        elif u < 0.9:
            kind, data = "narration", {"at": rng.randrange(2000), "del": rng.randrange(3),
                                       "ins": "".join(rng.choice("the step is 620 ms; gap ") for _ in range(12)),
                                       "len": rng.randrange(2000)}
        elif u < 0.97:
            kind, data = "marks", {"step": {"start_us": rng.random() * 1e6, "end_us": rng.random() * 1e6}}
        else:
            kind, data = "run", {"tool": "nsys-kern-sum", "options": {}, "since_open_s": rng.random() * 3600}
        return {"round_id": rounds[i % n_rounds], "at": t0 + timedelta(milliseconds=200 * i), "actor": "candidate",
                "kind": kind, "data": data}

    with store.write() as db:
        for start in range(0, n_events, 10_000):
            db.execute(insert(RoundEvent), [event(i) for i in range(start, min(n_events, start + 10_000))])
        db.execute(update(Round).values(event_count=n_events // n_rounds + 1))


def download(base: str, cookies: dict, path: str, pid: int) -> dict:
    """One streamed download: bytes, network reads, time to first byte, total time, and the
    server's peak RSS above its level just before (sampled every 10 ms)."""
    before = rss_mb(pid)
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb(pid))
            time.sleep(0.01)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    n, reads, first = 0, 0, None
    t0 = time.perf_counter()
    try:
        with httpx.stream("GET", base + path, cookies=cookies, timeout=120) as r:
            r.raise_for_status()
            for chunk in r.iter_raw():
                if first is None:
                    first = time.perf_counter() - t0
                n += len(chunk)
                reads += 1
    finally:
        done.set()
        th.join()
    dt = time.perf_counter() - t0
    return {"bytes": n, "reads": reads, "ttfb_ms": round((first or dt) * 1e3, 1), "s": round(dt, 3),
            "mb_s": round(n / 1e6 / dt, 1), "rss_before_mb": round(before, 1),
            "rss_peak_above_mb": round(peak[0] - before, 1)}


def main(argv: list[str]) -> int:
    from bench.load import launch, stop_server

    p = argparse.ArgumentParser(prog="python -m bench export")
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="tracedojo-bench-export-"))
    url = f"sqlite:///{tmp / 'tracedojo.db'}"
    t = time.perf_counter()
    fill(url, args.events, args.rounds)
    print(f"filled {args.events:,} events in {args.rounds} rounds in {time.perf_counter() - t:.1f} s")
    env = {**os.environ, "DATABASE_URL": url, "TRACEDOJO_DATA_DIR": str(tmp)}
    out = {}
    # A fresh server per format: the first download's growth in resident memory is the
    # export's footprint (a warm process keeps what it freed, so later ones show ~0); the
    # second download is timed.
    for fmt in FORMATS:
        proc, base, why = launch(tmp, env, 1)
        try:
            if why:
                print(why)
                return 1
            login = httpx.post(base + "/login", json={"email": "admin@bench.org", "password": PW})
            login.raise_for_status()
            cookies = dict(login.cookies)
            for table in ("events", "rounds", "scorecards", "criteria"):
                path = f"/api/export/{table}.{fmt}"
                cold = download(base, cookies, path, proc.pid)
                got = out[f"{table}.{fmt}"] = {**download(base, cookies, path, proc.pid),
                                               "rss_first_above_mb": cold["rss_peak_above_mb"]}
                rate = f"{args.events / got['s']:>9,.0f} events/s" if table == "events" else ""
                print(f"{path:<30} {got['bytes'] / 1e6:8.2f} MB in {got['s']:6.2f} s  {got['mb_s']:6.1f} MB/s "
                      f"{rate:<20} first byte {got['ttfb_ms']:7.1f} ms  {got['reads']:5d} reads  server RSS "
                      f"+{cold['rss_peak_above_mb']:.1f} MB over {cold['rss_before_mb']:.0f} MB at the first download")
        finally:
            stop_server(proc)
    print(json.dumps({"bench": "export", "events": args.events, "rounds": args.rounds, "downloads": out}))
    return 0
