"""Live rounds under load: N candidates each reporting their viewport every `interval` ms
while N interviewers' consoles mirror it over Server-Sent Events, against a real server.

    python -m bench live [--rounds 50] [--seconds 60] [--interval-ms 200] [--workers 1|2]
                         [--database sqlite|postgresql] [--database-url URL] [--url BASE]

With no --workers, --database, --database-url or --url it runs the two configurations the
issue asks for, one after the other: (a) one worker on SQLite, (b) `tracedojo serve
--workers 2` on PostgreSQL (the URL given, else a private throwaway cluster from
tests/postgres.py). Each server is started on a free port with a fresh database; an
interviewer is added, signs in and creates the rounds through the API.

The load runs in two client processes so that neither side's CPU delays the other's
clock: one holds the consoles (one EventSource-like stream per round, the staff cookie),
the other the candidates (one httpx.AsyncClient each, as each candidate is its own
browser). A candidate sends on a timer without waiting for the last answer, as the page
does (static/pages/candidate.js), over at most 6 connections as a browser would; past
that a send waits for a connection, and the wait counts in its latency. `--closed-loop`
waits for each answer instead (then a slow server sees less than the offered load).

Every viewport event carries a unique sequence number (`start_ns`) and its send time
(`t`, the epoch ms a browser would send); latencies use
each event's own monotonic times on this machine, which both processes share (Linux's
CLOCK_MONOTONIC), matched by sequence number:

- mirror latency: the console's receipt of the event minus the candidate's send time;
- POST latency: the candidate's POST /api/r/{token}/events, to its answer.

After the candidates stop, the consoles wait for the stragglers (until every acknowledged
event has arrived, or `--grace-s`), and then: lost = acknowledged (2xx) but never received
by the console; duplicated = received more than once; out of order = received after a
later sequence number of the same round; and from the database (the console's JSON twin,
`GET /rounds/{id}.json`, `events`), acknowledged events that are not stored.

Targets: mirror latency p95 < 100 ms and p99 < 250 ms, nothing lost. Each client process
measures its own event loop's lag (a ticker that sleeps 50 ms and records how late it
wakes) and CPU: a client that is short of CPU inflates the figures, and the report says so.

Exit code 0 whatever the figures (a benchmark, not a test); 1 if a server did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import queue
import random
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from bench import load
from bench.load import stop_server, tree_rss_mb

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "bench-live correct horse battery"
SCENARIO = ("ddp", "canonical")  # the instance is built once per worker and cached
TARGETS = {"mirror_p95_ms": 100, "mirror_p99_ms": 250, "lost": 0}
TICK_S = 0.05  # the lag probe's sleep
LAG_SATURATED_MS = 10.0  # a client loop this late at p99 is adding to the figures
CPU_SATURATED = 0.8  # of one core: a client process this busy is near its limit
POST_TIMEOUT_S = 30.0
BROWSER_CONNECTIONS = 6  # what a browser opens to one host over HTTP/1.1
SERVER_START_S = 90.0


# -- the server and its database ------------------------------------------------------------

@dataclass
class Config:
    name: str
    database: str  # sqlite | postgresql | given (--url)
    workers: int
    database_url: str | None = None
    notes: list[str] = field(default_factory=list)


def postgres_url(cfg: Config) -> str | None:
    """A fresh database from tests/postgres.py (TRACEDOJO_TEST_POSTGRES_URL's server, else a
    private cluster stopped at exit), or None with the reason in cfg.notes."""
    import pytest

    from tests import postgres

    try:
        url = postgres.fresh_database()
    except pytest.skip.Exception as e:  # no server can be had: the module says why
        cfg.notes.append(f"no PostgreSQL: {e}")
        return None
    if not os.environ.get(postgres.URL_ENV):
        cfg.notes.append("PostgreSQL: tests/postgres.py's private cluster, which runs with fsync=off, "
                         "synchronous_commit=off and full_page_writes=off (a commit is not flushed to disk, "
                         "unlike SQLite's synchronous=FULL here)")
    return url


def server_env(tmp: Path, database_url: str) -> dict:
    return {**os.environ, "DATABASE_URL": database_url, "TRACEDOJO_DATA_DIR": str(tmp),
            "TRACEDOJO_SECRET_KEY": "bench-live", "TRACEDOJO_PASSWORD": PASSWORD}


def add_interviewer(env: dict, email: str, root: Path = ROOT) -> str:
    """`tracedojo user add` (migrates a fresh database too); "" or why it failed."""
    done = subprocess.run([sys.executable, "-m", "app", "user", "add", email, "--role", "interviewer",
                           "--team", "bench"], env=env, cwd=root, capture_output=True, text=True, timeout=120)
    return "" if done.returncode == 0 else f"tracedojo user add failed: {(done.stderr or done.stdout).strip()[-500:]}"


def set_nice(nice: int) -> None:
    """This process (and the threads and processes it starts from now on) at `nice`."""
    if nice:
        os.setpriority(os.PRIO_PROCESS, 0, nice)


def start_server(tmp: Path, env: dict, workers: int, nice: int = 0,
                 root: Path = ROOT) -> tuple[subprocess.Popen, str, str]:
    """(process, base URL, why it failed or ""); the app as checked out in `root`."""
    return load.launch(tmp, env, workers, root, (lambda: set_nice(nice)) if nice else None, SERVER_START_S)


def tree_pids(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo and len(out) < 64:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split() if int(c) not in out]
        except (OSError, ValueError):
            pass
    return out


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of these processes (each one's own, not its children's)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


def is_worker(pid: int) -> bool:
    """A process that serves requests: the server itself with --workers 1, else uvicorn's
    spawned workers (not its supervisor nor multiprocessing's resource tracker)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if b"spawn_main" in b" ".join(cmd):
        return True
    return b"serve" in cmd and b"--workers" in cmd and cmd[cmd.index(b"--workers") + 1] == b"1"


def proc_stat(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def postmaster_of(dbname: str | None) -> int | None:
    """The local PostgreSQL server serving `dbname`: the parent of a backend whose process
    title names the database; None if there is none on this machine."""
    if not dbname:
        return None
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                title = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if title.startswith("postgres: ") and f" {dbname} " in title:
                st = proc_stat(int(d.name))
                return int(st[1]) if st else None
    return None


def cluster_cpu_s(postmaster: int | None) -> float:
    """CPU seconds of a PostgreSQL server and every process it ever started: the backends
    that ended are in the postmaster's reaped-children time, the others counted live.
    Connections that come and go (a pool's overflow) are counted too."""
    if postmaster is None:
        return 0.0
    st = proc_stat(postmaster)
    if not st:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    total = sum(int(x) for x in st[11:15]) / tick  # utime, stime, cutime, cstime
    try:
        kids = [int(c) for t in Path(f"/proc/{postmaster}/task").iterdir()
                for c in (t / "children").read_text().split()]
    except OSError:
        kids = []
    return total + cpu_s(kids)


def pg_sessions(url: str | None) -> int | None:
    """Connections ever opened to this database (pg_stat_database.sessions, PostgreSQL 14+)."""
    if not url:
        return None
    try:
        import psycopg
        from sqlalchemy.engine import make_url

        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT pg_stat_force_next_flush()")
            return conn.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()") \
                .fetchone()[0]
    except Exception:  # an older server, no rights: the figure is left out
        return None


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return sum(vals) - idle, sum(vals)


# -- the setup over HTTP ----------------------------------------------------------------------

def browserish(base: str) -> dict:
    """What a browser sends on a same-origin fetch (the security middleware checks writes)."""
    return {"Origin": base, "Sec-Fetch-Site": "same-origin"}


def sign_in(base: str, email: str, password: str) -> dict:
    with httpx.Client(base_url=base, timeout=30, headers=browserish(base)) as c:
        r = c.post("/login", json={"email": email, "password": password})
        if r.status_code != 200:
            raise RuntimeError(f"POST /login answered {r.status_code}: {r.text[:200]}")
        return dict(c.cookies)


def create_rounds(base: str, cookies: dict, n: int) -> list[dict]:
    with httpx.Client(base_url=base, timeout=60, headers=browserish(base), cookies=cookies) as c:
        out = []
        for i in range(n):
            r = c.post("/api/rounds", json={"scenario": SCENARIO[0], "seed": SCENARIO[1],
                                            "candidate_name": f"bench candidate {i}"})
            if r.status_code != 201:
                raise RuntimeError(f"POST /api/rounds answered {r.status_code}: {r.text[:200]}")
            out.append(r.json())
        return out


def stored_viewports(base: str, cookies: dict, rounds: list[dict]) -> tuple[dict[int, set[int]], list[str]]:
    """Each round's stored viewport sequence numbers, read back through the console's JSON twin."""
    stored, unread = {}, []
    with httpx.Client(base_url=base, timeout=120, cookies=cookies) as c:
        for i, r in enumerate(rounds):
            got = c.get(f"/rounds/{r['id']}.json")
            if got.status_code != 200:
                unread.append(f"{r['id']}: {got.status_code} {got.text[:120]}")
                continue
            stored[i] = {int(e["data"]["start_ns"]) for e in got.json()["events"] if e["kind"] == "viewport"}
    return stored, unread


# -- the client processes --------------------------------------------------------------------

async def lag_probe(lags: list[float], stop: asyncio.Event) -> None:
    """How late a TICK_S sleep wakes: the loop's own delay in serving a ready callback."""
    while not stop.is_set():
        t = time.monotonic()
        await asyncio.sleep(TICK_S)
        lags.append(time.monotonic() - t - TICK_S)


def run_queue_s() -> float:
    """How long this process's main thread (the event loop's) has waited, runnable, for a
    CPU (Linux schedstat): what a loaded machine, not the client's own work, costs it."""
    try:
        return int(Path("/proc/self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def proc_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Console:
    """One interviewer's stream of one round, read as EventSource reads it: resuming from
    the last id with Last-Event-ID when the connection drops."""

    def __init__(self, idx: int, base: str, cookies: dict, rid: str, out: list):
        self.idx, self.path, self.out = idx, f"/rounds/{rid}/events", out
        self.client = httpx.AsyncClient(base_url=base, cookies=cookies, timeout=httpx.Timeout(30, read=None))
        self.last = 0
        self.live = asyncio.Event()  # the first event (the round's "created") has arrived
        self.connects = self.errors = 0

    async def run(self) -> None:
        while True:
            try:
                headers = {"Last-Event-ID": str(self.last)} if self.last else {}
                async with self.client.stream("GET", self.path, headers=headers) as r:
                    if r.status_code != 200:
                        self.errors += 1
                        await asyncio.sleep(0.5)
                        continue
                    self.connects += 1
                    eid, kind, data = None, None, None
                    async for line in r.aiter_lines():
                        if line.startswith("data: "):
                            data = line[6:]
                        elif line.startswith("id: "):
                            eid = int(line[4:])
                        elif line.startswith("event: "):
                            kind = line[7:]
                        elif line == "" and data is not None:
                            t = time.monotonic()
                            seq = None
                            if kind == "viewport":
                                seq = int(json.loads(data)["data"]["start_ns"])
                            self.out.append((self.idx, eid, seq, t))
                            self.last = eid
                            self.live.set()
                            eid, kind, data = None, None, None
            except (httpx.HTTPError, OSError):
                self.errors += 1
                await asyncio.sleep(0.5)


async def consoles_main(base: str, cookies: dict, rids: list[str], ready, expect_q, out_q, grace_s: float) -> None:
    got: list[tuple] = []
    lags: list[float] = []
    stop = asyncio.Event()
    cons = [Console(i, base, cookies, rid, got) for i, rid in enumerate(rids)]
    tasks = [asyncio.create_task(c.run()) for c in cons]
    try:
        await asyncio.wait_for(asyncio.gather(*(c.live.wait() for c in cons)), 60)
    except asyncio.TimeoutError:
        pass
    opened = sum(c.live.is_set() for c in cons)
    ready.set()
    probe = asyncio.create_task(lag_probe(lags, stop))
    cpu0, t0, rq0 = proc_cpu(), time.monotonic(), run_queue_s()
    # until the candidates are done: their acknowledged sequence numbers, per round
    while True:
        try:
            expected = expect_q.get_nowait()
            break
        except queue.Empty:
            await asyncio.sleep(0.05)
    waited0 = time.monotonic()
    want = {(i, s) for i, seqs in expected.items() for s in seqs}
    while time.monotonic() - waited0 < grace_s:
        if want <= {(i, s) for i, _, s, _ in got if s is not None}:
            break
        await asyncio.sleep(0.1)
    waited = time.monotonic() - waited0
    cpu, wall, rq = proc_cpu() - cpu0, time.monotonic() - t0, run_queue_s() - rq0
    stop.set()
    for t in tasks + [probe]:
        t.cancel()
    await asyncio.gather(*tasks, probe, return_exceptions=True)
    for c in cons:
        await c.client.aclose()
    out_q.put({"received": got, "lags": lags, "cpu_s": cpu, "wall_s": wall, "run_queue_s": rq, "opened": opened,
               "connects": sum(c.connects for c in cons), "stream_errors": sum(c.errors for c in cons),
               "waited_s": waited})


def consoles_proc(base, cookies, rids, ready, expect_q, out_q, grace_s, nice):
    set_nice(nice)
    asyncio.run(consoles_main(base, cookies, rids, ready, expect_q, out_q, grace_s))


async def candidates_main(base: str, apis: list[str], start_at: float, seconds: float, interval_s: float,
                          closed_loop: bool, out_q) -> None:
    recs: list[tuple] = []  # (round, seq, t0, t1, status, event id)
    errors: dict[str, str] = {}
    lags: list[float] = []
    late = [0]  # open loop: sends that waited for one of the candidate's connections; closed: sends behind pace
    in_flight = [0, 0]  # sent and not answered (waiting for a connection too): now, most at once
    stop = asyncio.Event()
    deadline = start_at + seconds

    async def post(i: int, api: str, c: httpx.AsyncClient, seq: int) -> None:
        body = {"kind": "viewport", "start_ns": seq, "end_ns": seq + 1_000_000, "t": time.time() * 1e3}
        t0 = time.monotonic()
        status, eid = 0, None
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        try:
            # the browser's queue for its connections: here, not in httpx's pool, whose
            # waiting requests cost the client CPU in proportion to their number
            async with conns[i]:
                r = await c.post(f"{api}/events", json=body)
            status = r.status_code
            if r.is_success:
                eid = r.json().get("id")
            else:
                errors.setdefault(str(status), r.text[:200])
        except httpx.HTTPError as e:
            errors.setdefault("transport", f"{type(e).__name__}: {e}"[:200])
        except asyncio.CancelledError:  # still unanswered when the run ended: recorded as no answer
            errors.setdefault("transport", f"no answer within {POST_TIMEOUT_S + 5:g} s after the end")
            raise
        finally:
            in_flight[0] -= 1
            recs.append((i, seq, t0, time.monotonic(), status, eid))

    async def candidate(i: int, api: str, c: httpx.AsyncClient) -> None:
        next_t = start_at + random.uniform(0, interval_s)  # spread: candidates do not march in step
        mine: set[asyncio.Task] = set()
        k = 0
        while True:
            wait = next_t - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if time.monotonic() >= deadline:
                break
            k += 1
            seq = i * 1_000_000 + k
            if closed_loop:
                await post(i, api, c, seq)
            else:
                # as the page sends: on a timer, not waiting for the last answer (fetch over
                # at most BROWSER_CONNECTIONS connections; past that a send waits for one)
                if len(mine) >= BROWSER_CONNECTIONS:
                    late[0] += 1
                t = asyncio.create_task(post(i, api, c, seq))
                mine.add(t)
                t.add_done_callback(mine.discard)
            next_t += interval_s
            if closed_loop and next_t < time.monotonic():  # behind: send at once, no burst to catch up
                late[0] += 1
                next_t = time.monotonic()
        if mine:
            await asyncio.wait(mine, timeout=POST_TIMEOUT_S + 5)
        for t in list(mine):
            t.cancel()
        await asyncio.gather(*mine, return_exceptions=True)

    # every client made before the clock starts (each builds an SSL context: ~10 ms of CPU)
    limits = httpx.Limits(max_connections=BROWSER_CONNECTIONS, max_keepalive_connections=BROWSER_CONNECTIONS)
    conns = [asyncio.Semaphore(BROWSER_CONNECTIONS) for _ in apis]
    clients = [httpx.AsyncClient(base_url=base, timeout=POST_TIMEOUT_S, headers=browserish(base), limits=limits)
               for _ in apis]
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    probe = asyncio.create_task(lag_probe(lags, stop))
    cpu0, t0, rq0 = proc_cpu(), time.monotonic(), run_queue_s()
    await asyncio.gather(*(candidate(i, api, c) for (i, api), c in zip(enumerate(apis), clients)))
    cpu, wall, rq = proc_cpu() - cpu0, time.monotonic() - t0, run_queue_s() - rq0
    stop.set()
    await probe
    for c in clients:
        await c.aclose()
    out_q.put({"sent": recs, "errors": errors, "lags": lags, "cpu_s": cpu, "wall_s": wall, "run_queue_s": rq,
               "late": late[0], "max_in_flight": in_flight[1]})


def candidates_proc(base, apis, start_at, seconds, interval_s, closed_loop, out_q, nice):
    set_nice(nice)
    asyncio.run(candidates_main(base, apis, start_at, seconds, interval_s, closed_loop, out_q))


# -- one configuration ---------------------------------------------------------------------------

def pct(values, scale: float = 1e3) -> dict:
    if len(values) == 0:
        return {"n": 0}
    v = np.asarray(values, dtype=float) * scale
    return {"n": int(len(v)), "p50_ms": round(float(np.percentile(v, 50)), 1),
            "p95_ms": round(float(np.percentile(v, 95)), 1), "p99_ms": round(float(np.percentile(v, 99)), 1),
            "max_ms": round(float(v.max()), 1)}


def get_result(q, proc, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return q.get(timeout=1)
        except queue.Empty:
            if not proc.is_alive():
                raise RuntimeError(f"the {what} process exited with {proc.exitcode} without its figures")
    raise RuntimeError(f"the {what} process gave no figures within {timeout_s:.0f} s")


def drive(base: str, cookies: dict, rounds: list[dict], args, server_pids: list[int],
          db_url: str | None) -> dict:
    """The load itself, in two client processes; the raw timings and CPU figures."""
    ctx = mp.get_context("spawn")  # clean processes: no state or threads inherited from this one
    ready, expect_q, cons_q, cand_q = ctx.Event(), ctx.Queue(), ctx.Queue(), ctx.Queue()
    cons = ctx.Process(target=consoles_proc, name="bench-consoles", daemon=True,
                       args=(base, cookies, [r["id"] for r in rounds], ready, expect_q, cons_q, args.grace_s,
                             args.nice))
    cons.start()
    cand = None
    try:
        if not ready.wait(90):
            raise RuntimeError("the consoles' streams did not open within 90 s")
        start_at = time.monotonic() + 2.0  # the candidates' process starts meanwhile
        cand = ctx.Process(target=candidates_proc, name="bench-candidates", daemon=True,
                           args=(base, ["/api" + r["candidate_url"] for r in rounds], start_at, args.seconds,
                                 args.interval_ms / 1e3, args.closed_loop, cand_q, args.nice))
        cand.start()
        time.sleep(max(0.0, start_at - time.monotonic()))
        dbname = db_url.rsplit("/", 1)[-1].split("?")[0] if db_url else None
        pm = postmaster_of(dbname)
        n0 = pg_sessions(db_url)
        m0, s0, b0 = machine_cpu(), cpu_s(server_pids), cluster_cpu_s(pm)
        workers = [p for p in server_pids if is_worker(p)] or server_pids
        w0 = [cpu_s([p]) for p in workers]
        t0 = time.monotonic()
        peak_rss = 0.0
        while cand.is_alive() and time.monotonic() - t0 < args.seconds + 0.5:
            peak_rss = max(peak_rss, tree_rss_mb(server_pids[0]))
            time.sleep(1)
        sent = get_result(cand_q, cand, args.seconds + POST_TIMEOUT_S + 60, "candidates")
        m1, s1, b1 = machine_cpu(), cpu_s(server_pids), cluster_cpu_s(pm)
        n1 = pg_sessions(db_url)
        w1 = [cpu_s([p]) for p in workers]
        window = time.monotonic() - t0
        acked: dict[int, list[int]] = {}
        for i, seq, _t0, _t1, status, _eid in sent["sent"]:
            if 200 <= status < 300:
                acked.setdefault(i, []).append(seq)
        expect_q.put(acked)
        got = get_result(cons_q, cons, args.grace_s + 60, "consoles")
    finally:
        for p in (cand, cons):
            if p is not None:
                p.join(10)
                if p.is_alive():
                    p.terminate()
                    p.join(5)
    ncpu = os.cpu_count() or 1
    return {"sent": sent, "got": got, "window_s": window, "peak_rss_mb": peak_rss,
            "server_cores": (s1 - s0) / window, "worker_cores": [(b - a) / window for a, b in zip(w0, w1)],
            "db_cores": (b1 - b0) / window,
            "db_sessions": (n1 - n0 - 1) if n0 is not None and n1 is not None else None,  # less our own look
            "machine_busy": (m1[0] - m0[0]) / max(1, m1[1] - m0[1]) * ncpu}


def analyse(raw: dict, rounds: list[dict], stored: dict[int, set[int]], unread: list[str]) -> dict:
    sent, got = raw["sent"], raw["got"]
    recs = sent["sent"]
    send_t = {(i, seq): t0 for i, seq, t0, _t1, _s, _e in recs}
    acked = {(i, seq) for i, seq, _t0, _t1, s, _e in recs if 200 <= s < 300}
    unanswered = {(i, seq) for i, seq, _t0, _t1, s, _e in recs if s == 0}
    non2xx: dict[str, int] = {}
    for *_, s, _e in recs:
        if not 200 <= s < 300:
            k = str(s) if s else "transport"
            non2xx[k] = non2xx.get(k, 0) + 1
    first: dict[tuple[int, int], float] = {}
    dup = ooo = 0
    last_seq: dict[int, int] = {}
    last_id: dict[int, int] = {}
    ids_backwards = 0
    for i, eid, seq, t in got["received"]:
        if eid is not None:
            if eid <= last_id.get(i, 0):
                ids_backwards += 1
            last_id[i] = max(eid, last_id.get(i, 0))
        if seq is None:
            continue
        if (i, seq) in first:
            dup += 1
            continue
        first[(i, seq)] = t
        if seq < last_seq.get(i, -1):
            ooo += 1
        last_seq[i] = max(seq, last_seq.get(i, -1))
    mirror = [first[k] - send_t[k] for k in acked if k in first]
    lost = sorted(k for k in acked if k not in first)
    post = [t1 - t0 for _i, _seq, t0, t1, s, _e in recs if s]
    post_ok = [t1 - t0 for _i, _seq, t0, t1, s, _e in recs if 200 <= s < 300]
    not_stored = sorted(k for k in acked if k[0] in stored and k[1] not in stored[k[0]])
    unread_rounds = len(rounds) - len(stored)
    mirror_st = pct(mirror)
    out = {
        "sent": len(recs), "acknowledged": len(acked), "received": len(first),
        "received_unacknowledged": sum(1 for k in first if k not in acked),
        "lost": len(lost), "lost_examples": [f"round {i} seq {s}" for i, s in lost[:5]],
        "duplicated": dup, "out_of_order": ooo, "ids_not_increasing": ids_backwards,
        "non_2xx": sum(non2xx.values()), "non_2xx_by_status": non2xx, "error_examples": sent["errors"],
        "unanswered": len(unanswered),
        "mirror": mirror_st, "post": pct(post_ok), "post_all": pct(post),
        "stored_missing": len(not_stored), "stored_unreadable_rounds": unread_rounds, "unread": unread[:3],
        "stored_extra": sum(1 for i, seqs in stored.items() for s in seqs if (i, s) not in acked),
        "rate_per_s": round(len(recs) / max(1e-9, sent["wall_s"]), 1), "late_sends": sent["late"],
        "max_in_flight": sent["max_in_flight"],
        "server_cores": round(raw["server_cores"], 2),
        # each worker's share: keep-alive
        # connections stay on the worker that accepted them, so the load need not be even
        "worker_cores": [round(x, 2) for x in raw["worker_cores"]],
        "server_cpu_ms_per_event": round(raw["server_cores"] * raw["window_s"] * 1e3 / max(1, len(recs)), 2),
        "postgres_cores": round(raw["db_cores"], 2), "postgres_connections_opened": raw["db_sessions"],
        "machine_cores_busy": round(raw["machine_busy"], 2),
        "server_peak_rss_mb": round(raw["peak_rss_mb"]),
        "streams_opened": got["opened"], "stream_connects": got["connects"], "stream_errors": got["stream_errors"],
        "straggler_wait_s": round(got["waited_s"], 1),
    }
    for who, part in (("candidates", sent), ("consoles", got)):
        lag = pct(part["lags"])
        cores = part["cpu_s"] / max(1e-9, part["wall_s"])
        waiting = part["run_queue_s"] / max(1e-9, part["wall_s"])
        out[f"client_{who}"] = {"loop_lag": lag, "cpu_cores": round(cores, 2), "run_queue_share": round(waiting, 3),
                                "saturated": bool(lag.get("p99_ms", 0) >= LAG_SATURATED_MS or cores >= CPU_SATURATED)}
    out["client_saturated"] = out["client_candidates"]["saturated"] or out["client_consoles"]["saturated"]
    ours = raw["server_cores"] + raw["db_cores"] + sum(out[f"client_{w}"]["cpu_cores"]
                                                       for w in ("candidates", "consoles"))
    # what else ran on the machine meanwhile (another session's tests, a browser): it takes
    # CPU from the server and the clients alike
    out["other_cores"] = round(max(0.0, raw["machine_busy"] - ours), 2)
    out["targets_met"] = {
        "mirror_p95": mirror_st.get("p95_ms") is not None and mirror_st["p95_ms"] < TARGETS["mirror_p95_ms"],
        "mirror_p99": mirror_st.get("p99_ms") is not None and mirror_st["p99_ms"] < TARGETS["mirror_p99_ms"],
        "nothing_lost": len(lost) == 0 and len(not_stored) == 0 and unread_rounds == 0,
    }
    return out


def run_config(cfg: Config, args) -> dict:
    """One configuration end to end: its figures, or {"error": why}."""
    print(f"\n== {cfg.name}: {args.rounds} rounds, {args.seconds:g} s, a viewport every {args.interval_ms:g} ms "
          f"per candidate ({args.rounds * 1000 / args.interval_ms:.0f} events/s offered)", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-live-"))
    proc = None
    try:
        email = args.email or f"bench-{secrets.token_hex(4)}@bench.example"
        password = args.password or PASSWORD
        if args.url:
            base = args.url.rstrip("/")
            pids: list[int] = []
        else:
            if cfg.database == "postgresql":
                url = cfg.database_url or postgres_url(cfg)
                if url is None:
                    return {"config": cfg.name, "error": cfg.notes[-1], "server_failed": True}
            else:
                url = cfg.database_url or f"sqlite:///{tmp / 'tracedojo.db'}"
            env = server_env(tmp, url)
            root = Path(args.app_root).resolve() if args.app_root else ROOT
            why = add_interviewer(env, email, root)
            if not why:
                proc, base, why = start_server(tmp, env, cfg.workers, args.nice, root)
            if why:
                log = (tmp / "server.log").read_text(errors="replace")[-2000:] if (tmp / "server.log").exists() else ""
                print(f"the server did not start: {why}\n{log}", file=sys.stderr)
                return {"config": cfg.name, "error": why, "server_failed": True}
            time.sleep(1.0)  # every worker up, not only the one that answered /readyz
            pids = tree_pids(proc.pid)
            print(f"server: {base}, {cfg.workers} worker(s), {url.split('://')[0]} "
                  f"({len(pids)} processes)", flush=True)
        if args.app_root:
            cfg.notes.append(f"the server ran the app checked out in {args.app_root} (--app-root)")
        if args.nice:
            cfg.notes.append(f"the server and the clients ran at nice {args.nice} (--nice), ahead of other work on the "
                             f"machine; PostgreSQL's processes did not")
        for n in cfg.notes:
            print(f"note: {n}")
        cookies = sign_in(base, email, password)
        t0 = time.monotonic()
        rounds = create_rounds(base, cookies, args.rounds)
        print(f"{len(rounds)} rounds created in {time.monotonic() - t0:.1f} s; consoles opening...", flush=True)
        if args.profile and pids:
            profile_start(args, cfg, pids)
        db_url = url if not args.url and cfg.database == "postgresql" else None
        raw = drive(base, cookies, rounds, args, pids or [os.getpid()], db_url)
        if args.profile and pids:
            profile_stop(args)
        stored, unread = stored_viewports(base, cookies, rounds)
        fig = analyse(raw, rounds, stored, unread)
        if not pids:
            fig["server_cores"] = None
        return {"config": cfg.name, "database": cfg.database, "workers": cfg.workers, "notes": cfg.notes, **fig}
    except RuntimeError as e:
        print(f"{cfg.name}: {e}", file=sys.stderr)
        return {"config": cfg.name, "error": str(e)}
    finally:
        if proc is not None:
            stop_server(proc)
        shutil.rmtree(tmp, ignore_errors=True)


# -- profiling (optional): py-spy on every server process during the load ------------------------

_spies: list[subprocess.Popen] = []


def profile_start(args, cfg: Config, pids: list[int]) -> None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("--profile: py-spy is not installed (pip install py-spy)", file=sys.stderr)
        return
    out = Path(args.profile)
    out.mkdir(parents=True, exist_ok=True)
    for pid in [p for p in pids if is_worker(p)]:
        f = out / f"{cfg.name.split(':')[0].strip()}-{pid}.txt"
        # gil: only the thread holding the GIL, i.e. what the worker's one Python core is doing;
        # wait: every thread, idle or not, i.e. where requests spend their time
        mode = ["--gil"] if args.profile_mode == "gil" else ["--idle", "--threads"]
        _spies.append(subprocess.Popen([spy, "record", "-p", str(pid), "-r", "100", "-f", "raw", "-o", str(f),
                                        "-d", str(int(args.seconds + 3)), "--nonblocking", *mode],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    print(f"profiling {len(_spies)} server process(es) into {out}/")


def profile_stop(args) -> None:
    for p in _spies:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.terminate()
    _spies.clear()


# -- the report -------------------------------------------------------------------------------------

def met(ok: bool | None) -> str:
    return "met" if ok else "NOT met"


def report(figs: list[dict], args) -> None:
    print("\n" + "=" * 100)
    print(f"live rounds: {args.rounds} rounds, {args.seconds:g} s, a viewport every {args.interval_ms:g} ms per "
          f"candidate ({'closed loop' if args.closed_loop else 'open loop, as the page sends'})")
    ok = [f for f in figs if "error" not in f]
    for f in figs:
        if "error" in f:
            print(f"\n{f['config']}: no figures: {f['error']}")
    if not ok:
        return
    width = 28
    cols = [f["config"].split(":")[0] for f in ok]
    print(f"\n{'':<{width}}" + "".join(f"{c:>22}" for c in cols))

    def row(label: str, cells: list[str]) -> None:
        print(f"{label:<{width}}" + "".join(f"{c:>22}" for c in cells))

    row("events sent", [f"{f['sent']:,} ({f['rate_per_s']:g}/s)" for f in ok])
    row("acknowledged (2xx)", [f"{f['acknowledged']:,}" for f in ok])
    row("received by the consoles", [f"{f['received']:,}" for f in ok])
    row("lost", [f"{f['lost']:,}" for f in ok])
    row("duplicated", [f"{f['duplicated']:,}" for f in ok])
    row("out of send order", [f"{f['out_of_order']:,}" for f in ok])
    row("ids out of order (stream)", [f"{f['ids_not_increasing']:,}" for f in ok])
    row("acked, not stored", [f"{f['stored_missing']:,}" for f in ok])
    row("non-2xx answers", [f"{f['non_2xx']:,}" for f in ok])
    for k, lab in (("p50_ms", "p50"), ("p95_ms", "p95"), ("p99_ms", "p99"), ("max_ms", "max")):
        row(f"mirror latency {lab} (ms)", [f"{f['mirror'].get(k, float('nan')):.1f}" for f in ok])
    for k, lab in (("p50_ms", "p50"), ("p99_ms", "p99")):
        row(f"POST latency {lab} (ms)", [f"{f['post'].get(k, float('nan')):.1f}" for f in ok])
    row("server CPU (cores)", [f"{f['server_cores']}" for f in ok])
    row("  per worker", ["/".join(f"{x:g}" for x in f["worker_cores"]) for f in ok])
    row("  per event (ms)", [f"{f['server_cpu_ms_per_event']}" for f in ok])
    row("PostgreSQL server (cores)", [f"{f['postgres_cores']}" if f["database"] == "postgresql" else "-"
                                      for f in ok])
    row("  connections opened", [f"{f['postgres_connections_opened']}" if f["database"] == "postgresql" else "-"
                                 for f in ok])
    row("machine CPU busy (cores)", [f"{f['machine_cores_busy']}" for f in ok])
    row("  of it other processes", [f"{f['other_cores']}" for f in ok])
    for who in ("candidates", "consoles"):
        row(f"{who}: loop lag p99/max", [f"{f[f'client_{who}']['loop_lag'].get('p99_ms', 0):.0f}/"
                                         f"{f[f'client_{who}']['loop_lag'].get('max_ms', 0):.0f} ms" for f in ok])
        row(f"{who}: CPU (cores)", [f"{f[f'client_{who}']['cpu_core' + 's']}" for f in ok])
        row(f"{who}: waiting for a CPU",
            [f"{f[f'client_{who}']['run_queue_share'] * 100:.0f}% of the time" for f in ok])
    row("sends behind pace" if args.closed_loop else "sends waiting for a conn.",
        [f"{f['late_sends']:,}" for f in ok])
    row("most POSTs unanswered", [f"{f['max_in_flight']:,}" for f in ok])
    row("stream (re)connects/errors", [f"{f['stream_connects']}/{f['stream_errors']}" for f in ok])
    print()
    row(f"mirror p95 < {TARGETS['mirror_p95_ms']} ms", [met(f["targets_met"]["mirror_p95"]) for f in ok])
    row(f"mirror p99 < {TARGETS['mirror_p99_ms']} ms", [met(f["targets_met"]["mirror_p99"]) for f in ok])
    row("nothing lost", [met(f["targets_met"]["nothing_lost"]) for f in ok])
    for f in ok:
        extra = []
        for w in ("candidates", "consoles"):
            c = f[f"client_{w}"]
            lag = c["loop_lag"].get("p99_ms", 0)
            if c["cpu_cores"] >= CPU_SATURATED:
                extra.append(f"the {w}' client process was saturated: {c['cpu_cores']} cores of its own work, loop lag "
                             f"p99 {lag:.0f} ms; the latencies include the client's own delay")
            elif lag >= LAG_SATURATED_MS:
                extra.append(f"the {w}' client loop ran late (p99 {lag:.0f} ms) with only {c['cpu_cores']} cores of "
                             f"its "
                             f"own work, runnable but waiting for a CPU {c['run_queue_share'] * 100:.0f}% of the time: "
                             f"the machine was short of CPU, and the latencies include up to that delay")
        if not f["client_saturated"]:
            extra.append("the load client was not saturated (its loop lag and CPU under their limits)")
        if f["other_cores"] >= 0.2:
            extra.append(f"other processes on this machine used {f['other_cores']} cores during the run: "
                         f"the server and the clients had that much less")
        if f["non_2xx"]:
            extra.append(f"non-2xx by status {f['non_2xx_by_status']}; e.g. {f['error_examples']}")
        if f["lost"]:
            extra.append(f"lost e.g. {', '.join(f['lost_examples'])}")
        if f["stored_unreadable_rounds"]:
            extra.append(f"{f['stored_unreadable_rounds']} rounds could not be read back: {f['unread']}")
        if f["received_unacknowledged"] or f["stored_extra"]:
            extra.append(f"{f['received_unacknowledged']} received and {f['stored_extra']} stored without a 2xx "
                         f"(POSTs with no answer may have landed)")
        print(f"\n{f['config']}:")
        for e in extra + [f"note: {n}" for n in f["notes"]]:
            print(f"  {e}")


def configs(args) -> list[Config]:
    if args.url:
        return [Config(f"given server: {args.url}", "given", args.workers or 0)]
    if args.workers is None and args.database is None and args.database_url is None:
        return [Config("a: 1 worker, SQLite", "sqlite", 1), Config("b: 2 workers, PostgreSQL", "postgresql", 2)]
    db = args.database or ("postgresql" if args.database_url and args.database_url.startswith("postgresql")
                           else "sqlite")
    workers = args.workers or (1 if db == "sqlite" else 2)
    return [Config(f"{workers} worker{'s' * (workers > 1)}, {'SQLite' if db == 'sqlite' else 'PostgreSQL'}", db,
                   workers, args.database_url)]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench live")
    ap.add_argument("--rounds", type=int, default=50, help="rounds: one candidate and one console each (default 50)")
    ap.add_argument("--seconds", type=float, default=60, help="how long the candidates send (default 60)")
    ap.add_argument("--interval-ms", type=float, default=200, help="a viewport event per candidate this often")
    ap.add_argument("--workers", type=int, choices=(1, 2), help="server workers (one configuration only)")
    ap.add_argument("--database", choices=("sqlite", "postgresql"), help="one configuration on this database")
    ap.add_argument("--database-url", help="use this (empty or Trace Dojo's) database instead of a fresh one")
    ap.add_argument("--url", help="an already running loopback server (needs --email/--password of an interviewer)")
    ap.add_argument("--email", help="with --url: an interviewer's email")
    ap.add_argument("--password", default=os.environ.get("TRACEDOJO_PASSWORD"),
                    help="with --url (or TRACEDOJO_PASSWORD)")
    ap.add_argument("--closed-loop", action="store_true",
                    help="each candidate waits for its last POST's answer before the next (default: on a timer, "
                         "as the page sends, over at most 6 connections)")
    ap.add_argument("--app-root", metavar="DIR",
                    help="serve the app from this checkout (e.g. a worktree of another commit): the same load on "
                         "two versions of the app")
    ap.add_argument("--grace-s", type=float, default=5.0, help="how long the consoles wait for stragglers")
    ap.add_argument("--nice", type=int, default=0,
                    help="run the server and the clients at this niceness (negative needs root): shields the "
                         "figures from other work on a shared machine (default 0: as they come)")
    ap.add_argument("--profile", metavar="DIR", help="py-spy every server worker during the load (raw stacks)")
    ap.add_argument("--profile-mode", choices=("gil", "wait"), default="gil",
                    help="gil: what holds the GIL (CPU); wait: every thread, idle too (where time goes)")
    args = ap.parse_args(argv)
    if args.url and not args.url.startswith(("http://127.0.0.1", "http://localhost", "http://[::1]")):
        print("--url must be a loopback server", file=sys.stderr)
        return 2
    if args.url and not (args.email and args.password):
        print("--url needs --email and --password (or TRACEDOJO_PASSWORD) of an interviewer", file=sys.stderr)
        return 2
    figs = []
    for cfg in configs(args):
        figs.append(run_config(cfg, args))
    report(figs, args)
    print(json.dumps({"bench": "live", "rounds": args.rounds, "seconds": args.seconds, "interval_ms": args.interval_ms,
                      "pace": "closed loop" if args.closed_loop else "open loop",
                      "targets": TARGETS, "configs": figs}))
    return 1 if any(f.get("server_failed") for f in figs) else 0
