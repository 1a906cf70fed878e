"""Many candidates practising at once while someone uploads a 1M-event trace and someone
else runs heavy SQL, all on loopback against a real multi-worker server.

Targets: 0 lost writes, 0 5xx, autosave p99 < 300 ms, and GETs of a round's page (and its
JSON twin) p99 < 250 ms while an upload is being parsed. After the load stops, every
acknowledged (2xx) write is looked up again, through the API with the candidate's own
cookie and, when this bench started the server, straight in its SQLite file.

    python -m bench load [--workers 2] [--candidates 100] [--seconds 60] [--think-ms MS]
                         [--url http://127.0.0.1:8000] [--no-upload] [--no-sql]

Exit code 0 whatever the figures (a benchmark, not a test); 1 if the server did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent

# One round: create, page, twin, timeline, marks, 10 autosaves, 5 x (tool + run), submit.
AUTOSAVES, RUNS = 10, 5
REQUESTS_PER_ROUND = 4 + 1 + AUTOSAVES + 2 * RUNS + 1
# The load: each candidate runs one whole round over the run's 60 s (a real round
# is 25 minutes of reading; 60 s is already 25x faster). --round-s compresses it further.
REQUEST_TIMEOUT_S = 60.0  # a browser waits far longer; past this we count a transport error
UPLOAD_TIMEOUT_S = 300.0
DRAIN_S = 120.0  # after the clock: how long in-flight requests may take before they are cancelled

TARGETS = {"lost_writes": 0, "5xx": 0, "autosave_p99_ms": 300, "page_get_p99_during_upload_ms": 250}
PAGE_LABELS = ("GET /practice/{id}", "GET /practice/{id}.json")
AUTOSAVE = "PUT /api/attempts/{id}/narration"
BIG_UPLOAD = "POST /api/traces (1M events)"
SQL_QUERIES = {
    # the console's first question about any trace
    "group-by": "SELECT name, count(*), sum(dur) FROM slice GROUP BY name ORDER BY 3 DESC",
    # which ops contain which work: an interval self-join, ~2 s in DuckDB on the 90k-event trace
    "self-join": "SELECT a.name, count(*) AS n, sum(b.dur) AS inner_dur FROM slice a JOIN slice b "
                 "ON b.track_id = a.track_id AND b.depth = a.depth + 1 AND b.ts >= a.ts AND b.ts < a.ts + a.dur "
                 "GROUP BY a.name ORDER BY n DESC LIMIT 20",
}
# A read, sentence by sentence, as a candidate would type it between autosaves.
SENTENCES = [
    "One step runs from the first forward kernel to the optimizer's last kernel.",
    "Inside the step the compute stream is busy most of the time but there is a clear gap.",
    "The gap lines up with the CPU thread waiting rather than with any GPU work.",
    "Kernels are short and launch-sized gaps separate them, so the GPU waits on the host.",
    "The NCCL kernel does not overlap with backward compute on this timeline.",
    "Before blaming the model I would rule out the input pipeline with a synthetic-data run.",
    "The arithmetic: busy time over step time gives the utilization the trace shows.",
    "A fix would overlap the communication or batch the launches with a CUDA graph.",
    "I would confirm with nsys kernel and API summaries before changing anything.",
    "In short the step is bound by the gap, not by the kernels' own speed.",
]


# -- the trace files, built before the clock starts ---------------------------------------

def make_trace(tokens: int) -> bytes:
    """A launch-bound trace exported as torch.profiler would write it, gzipped."""
    import scenarios
    from app.trace import kineto

    inst = scenarios.get("launch-bound").instance(0, {"tokens": str(tokens)})
    return gzip.compress(kineto.dumps(inst.trace(0), inst.trace_name(0)).encode(), compresslevel=6, mtime=0)


def variant(gz: bytes, n: int) -> bytes:
    """The same gzip with another header mtime: the server keys uploads by content hash and
    skips parsing one it holds, so each upload must differ to be parsed again. The mtime is
    outside the CRC, so the file stays valid."""
    return gz[:4] + (n + 1).to_bytes(4, "little") + gz[8:]


# -- the server, when the bench starts it -------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp: Path, workers: int) -> tuple[subprocess.Popen | None, str, str]:
    """(process, base URL, why it failed or "")."""
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp / 'tracedojo.db'}", "TRACEDOJO_DATA_DIR": str(tmp),
           "TRACEDOJO_SECRET_KEY": "bench"}
    return launch(tmp, env, workers)


def launch(tmp: Path, env: dict, workers: int, root: Path = ROOT, preexec_fn=None,
           timeout_s: float = 60) -> tuple[subprocess.Popen, str, str]:
    """`tracedojo serve` from the checkout `root` on a free port, its log in tmp/server.log,
    waited for until /readyz answers: (process, base URL, why it failed or "")."""
    port = free_port()
    log = open(tmp / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--workers", str(workers), "--port", str(port),
                             "--quiet"], env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=preexec_fn)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # bounded: timeout_s of polls at most
        if proc.poll() is not None:
            return proc, base, f"the server exited with {proc.returncode}"
        try:
            if httpx.get(base + "/readyz", timeout=2).status_code == 200:
                return proc, base, ""
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    return proc, base, f"GET /readyz did not answer 200 within {timeout_s:.0f} s"


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def tree_rss_mb(pid: int) -> float:
    """Resident memory of the server and its workers (each worker caches its uploads)."""
    total, todo, seen = 0, [pid], set()
    while todo and len(seen) < 64:
        p = todo.pop()
        seen.add(p)
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split() if int(c) not in seen]
        except (OSError, ValueError):
            pass
    return total / 1024


# -- the load ------------------------------------------------------------------------------

@dataclass
class Rec:
    label: str
    status: int  # 0: transport error (no response)
    t0: float
    t1: float


@dataclass
class Attempt:
    """What one round sent and which of it the server acknowledged."""
    id: str
    client: httpx.AsyncClient
    texts: list[tuple[str, bool]] = field(default_factory=list)  # narrations in order sent (autosaves, then submit)
    marks: dict | None = None
    marks_acked: bool = False
    runs_sent: int = 0
    runs_acked: int = 0
    submitted: bool = False


class Load:
    def __init__(self, base: str, args):
        self.base, self.args = base, args
        self.t_start = time.perf_counter()
        self.deadline = self.t_start + args.seconds
        self.recs: list[Rec] = []
        self.examples: dict[tuple[str, int], str] = {}  # first error body per (route, status)
        self.attempts: list[Attempt] = []
        self.rounds_started = self.rounds_done = 0
        self.uploads: list[tuple[float, float, int]] = []  # big uploads: (t0, t1, status)
        self.loop_lag: list[float] = []
        self.clients: list[httpx.AsyncClient] = []  # kept open for the read-back after the load

    def now(self) -> float:
        return time.perf_counter() - self.t_start

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def client(self, timeout: float = REQUEST_TIMEOUT_S, **kw) -> httpx.AsyncClient:
        # What a browser sends on a same-origin fetch: the security middleware refuses
        # state-changing requests whose Origin or Sec-Fetch-Site say another site.
        return httpx.AsyncClient(base_url=self.base, timeout=timeout,
                                 headers={"Origin": self.base, "Sec-Fetch-Site": "same-origin"}, **kw)

    async def call(self, c: httpx.AsyncClient, label: str, method: str, url: str, stream: bool = False,
                   **kw) -> httpx.Response | None:
        """One request, timed to its last body byte; None on a transport error."""
        t0 = self.now()
        r = None
        try:
            if stream:  # the timeline: read the gzip as sent, without spending our CPU inflating it
                async with c.stream(method, url, **kw) as r:
                    async for _ in r.aiter_raw():
                        pass
            else:
                r = await c.request(method, url, **kw)
            status = r.status_code
        except (httpx.HTTPError, OSError) as e:
            status, r = 0, None
            self.examples.setdefault((label, 0), f"{type(e).__name__}: {e}"[:200])
        self.recs.append(Rec(label, status, t0, self.now()))
        if r is not None and status >= 400 and not stream:
            self.examples.setdefault((label, status), r.text[:200])
        return r

    async def think(self) -> bool:
        """A pause between requests, jittered so candidates do not march in step; False once time is up."""
        pause = min(self.args.think_ms / 1000 * random.uniform(0.5, 1.5), self.left())
        if pause > 0:
            await asyncio.sleep(pause)
        return self.left() > 0

    async def candidate(self, n: int, scenario_ids: list[str]) -> None:
        c = self.client()  # its own cookie jar: its own browser identity
        self.clients.append(c)
        # Arrivals spread over the first round, not all at t=0.
        await asyncio.sleep(random.uniform(0, min(self.args.round_s, self.args.seconds) / 10))
        k = 0
        while self.left() > 0:
            k += 1
            self.rounds_started += 1
            if await self.round(c, f"c{n}r{k}", random.choice(scenario_ids)):
                self.rounds_done += 1

    async def round(self, c: httpx.AsyncClient, tag: str, sid: str) -> bool:
        """One practice round as the page plays it; False if it stopped early (time up or an error)."""
        r = await self.call(c, "POST /api/attempts", "POST", "/api/attempts", json={"scenario": sid})
        if r is None or r.status_code != 201:
            await self.think()
            return False
        a = Attempt(r.json()["id"], c)
        self.attempts.append(a)
        if not await self.think():
            return False
        await self.call(c, "GET /practice/{id}", "GET", f"/practice/{a.id}")
        if not await self.think():
            return False
        r = await self.call(c, "GET /practice/{id}.json", "GET", f"/practice/{a.id}.json")
        if r is None or r.status_code != 200:
            return False
        twin = r.json()
        if not await self.think():
            return False
        await self.call(c, "GET /practice/{id}/timeline.bin", "GET", twin["timeline_url"], stream=True,
                        headers={"Accept-Encoding": "gzip"})
        if not await self.think():
            return False
        start = random.randrange(1_000, 50_000) * 1.0
        a.marks = {"step": {"start_us": start, "end_us": start + 4_000.0},
                   "gap": {"start_us": start + 1_000.0, "end_us": start + 1_500.0}}
        r = await self.call(c, "PUT /api/attempts/{id}/marks", "PUT", f"/api/attempts/{a.id}/marks", json=a.marks)
        a.marks_acked = r is not None and r.is_success
        opened = time.perf_counter()
        text = f"[{tag}]"
        for i in range(AUTOSAVES):
            if not await self.think():
                return False
            text += " " + SENTENCES[i]
            r = await self.call(c, AUTOSAVE, "PUT", f"/api/attempts/{a.id}/narration", json={"narration": text})
            a.texts.append((text, r is not None and r.is_success))
            if i % 2 == 1:  # a measurement after every second sentence: 5 in all
                tool = random.choice(twin["tools"])
                if not await self.think():
                    return False
                await self.call(c, "GET /practice/{id}/tools/{tool}", "GET", tool["url"])
                if not await self.think():
                    return False
                a.runs_sent += 1
                r = await self.call(c, "POST /api/attempts/{id}/runs", "POST", f"/api/attempts/{a.id}/runs",
                                    json={"tool": tool["id"], "since_open_s": round(time.perf_counter() - opened, 3)})
                a.runs_acked += r is not None and r.is_success
        if not await self.think():
            return False
        text += " That is my read."
        r = await self.call(c, "POST /api/attempts/{id}/submit", "POST", f"/api/attempts/{a.id}/submit",
                            json={"narration": text})
        a.submitted = r is not None and r.status_code == 200
        a.texts.append((text, a.submitted))
        await self.think()
        return a.submitted

    async def uploader(self, gz: bytes) -> None:
        """The same 1M-event trace again and again, each time with new bytes so it is parsed again."""
        async with self.client(UPLOAD_TIMEOUT_S) as c:
            n = 0
            while self.left() > 0:
                t0 = self.now()
                r = await self.call(c, BIG_UPLOAD, "POST", "/api/traces",
                                    files={"trace": (f"launch-bound-{n}.json.gz", variant(gz, n), "application/gzip")})
                self.uploads.append((t0, self.now(), r.status_code if r is not None else 0))
                n += 1

    async def sql_client(self, gz: bytes) -> None:
        """Heavy queries in a loop on a trace this client uploaded itself: uploads live in one
        worker's memory, and its one keep-alive connection keeps it on that worker."""
        async with self.client(limits=httpx.Limits(max_connections=1)) as c:
            tid, n = None, 0
            while self.left() > 0:
                if tid is None:
                    r = await self.call(c, "POST /api/traces (90k events, for SQL)", "POST", "/api/traces",
                                        files={"trace": ("launch-bound-15.json.gz", gz, "application/gzip")})
                    if r is None or r.status_code != 200:
                        await asyncio.sleep(min(1.0, max(self.left(), 0)))
                        continue
                    tid = r.json()["id"]
                name = list(SQL_QUERIES)[n % len(SQL_QUERIES)]
                n += 1
                r = await self.call(c, f"POST /api/traces/{{tid}}/sql ({name})", "POST", f"/api/traces/{tid}/sql",
                                    json={"query": SQL_QUERIES[name]})
                if r is not None and r.status_code == 404:  # evicted by the big uploads, or another worker
                    tid = None

    async def lag_probe(self) -> None:
        """How late our own event loop wakes: if this is large, the client, not the server, is slow."""
        while self.left() > 0:
            t = time.perf_counter()
            await asyncio.sleep(0.1)
            self.loop_lag.append((time.perf_counter() - t - 0.1) * 1e3)

    async def rss_probe(self, pid: int, peak: list[float]) -> None:
        while self.left() > 0:
            peak[0] = max(peak[0], tree_rss_mb(pid))
            await asyncio.sleep(1)

    async def run(self, big_gz: bytes | None, sql_gz: bytes | None, server_pid: int | None) -> dict:
        async with self.client() as c:
            ids = [s["id"] for s in (await c.get("/practice.json")).json()["scenarios"]]
        self.t_start = time.perf_counter()
        self.deadline = self.t_start + self.args.seconds
        peak = [0.0]
        tasks = [asyncio.create_task(self.candidate(n, ids)) for n in range(self.args.candidates)]
        tasks.append(asyncio.create_task(self.lag_probe()))
        if server_pid:
            tasks.append(asyncio.create_task(self.rss_probe(server_pid, peak)))
        if big_gz:
            tasks.append(asyncio.create_task(self.uploader(big_gz)))
        if sql_gz:
            tasks.append(asyncio.create_task(self.sql_client(sql_gz)))
        # Everything stops starting requests at the deadline; in-flight ones get DRAIN_S.
        done, pending = await asyncio.wait(tasks, timeout=self.args.seconds + DRAIN_S)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for t in done:
            if t.exception():
                print(f"(a load task failed: {t.exception()!r})")
        self.elapsed = self.now()
        self.unfinished = len(pending)
        self.peak_rss_mb = peak[0]
        api = await self.check_api()
        for c in self.clients:
            await c.aclose()
        return api

    async def check_api(self) -> dict:
        """Every attempt read back with its own candidate's cookie."""
        sem = asyncio.Semaphore(8)
        found: dict[str, dict] = {}
        unread = []

        async def one(a: Attempt):
            async with sem:
                try:
                    r = await a.client.get(f"/api/attempts/{a.id}")
                    if r.status_code == 200:
                        found[a.id] = r.json()
                        return
                    unread.append(f"{a.id}: {r.status_code} {r.text[:120]}")
                except httpx.HTTPError as e:
                    unread.append(f"{a.id}: {type(e).__name__}")

        await asyncio.wait_for(asyncio.gather(*(one(a) for a in self.attempts)), 300)
        return {"rows": found, "unread": unread}


# -- the data check ----------------------------------------------------------------------

def lost_writes(attempts: list[Attempt], rows: dict[str, dict]) -> tuple[int, list[str]]:
    """Acknowledged writes the stored rows do not show. A write that got no answer (time-out,
    cut connection) may or may not have landed, so a value sent after the last acknowledged
    one is accepted too; nothing older is."""
    lost, examples = 0, []

    def miss(n: int, what: str):
        nonlocal lost
        lost += n
        if len(examples) < 8:
            examples.append(what)

    for a in attempts:
        row = rows.get(a.id)
        acked = [i for i, (_, ok) in enumerate(a.texts) if ok]
        if row is None:
            if acked or a.marks_acked or a.runs_acked:
                miss(len(acked) + a.marks_acked + a.runs_acked, f"{a.id}: attempt not found")
            continue
        if acked and row["narration"] not in [t for t, _ in a.texts[acked[-1]:]]:
            miss(1, f"{a.id}: narration is {len(row['narration'])} chars, the last acknowledged save "
                    f"{len(a.texts[acked[-1]][0])} chars")
        if a.marks_acked and row["marks"] != a.marks:
            miss(1, f"{a.id}: marks {row['marks']} != acknowledged {a.marks}")
        n_runs = len(row["runs"])
        if n_runs < a.runs_acked:
            miss(a.runs_acked - n_runs, f"{a.id}: {n_runs} runs stored, {a.runs_acked} acknowledged")
        elif n_runs > a.runs_sent:
            miss(0, f"{a.id}: {n_runs} runs stored but only {a.runs_sent} sent")
        if a.submitted and not row["submitted_at"]:
            miss(1, f"{a.id}: submit acknowledged, submitted_at empty")
    return lost, examples


def db_rows(db: Path, ids: list[str]) -> dict[str, dict]:
    """The attempts as the SQLite file holds them (read-only, beside the running server)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        rows = {}
        for pid, narration, marks, runs, submitted_at in con.execute(
                "SELECT public_id, narration, marks, runs, submitted_at FROM attempts"):
            rows[pid] = {"narration": narration, "marks": json.loads(marks) if marks else {},
                         "runs": json.loads(runs) if runs else [], "submitted_at": submitted_at}
        return {i: rows[i] for i in ids if i in rows}
    finally:
        con.close()


# -- the report ------------------------------------------------------------------------------

def pct(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    v = np.array(values) * 1e3
    return {"n": len(v), "p50_ms": round(float(np.percentile(v, 50)), 1), "p95_ms": round(float(np.percentile(v, 95)), 1),
            "p99_ms": round(float(np.percentile(v, 99)), 1), "max_ms": round(float(v.max()), 1)}


def overlaps(r: Rec, spans: list[tuple[float, float, int]]) -> bool:
    return any(r.t0 < b and r.t1 > a for a, b, _ in spans)


def log_errors(lines: list[str]) -> Counter:
    """The server's unhandled errors by the exception each ended in (a chained exception
    prints several tracebacks; only the last one's is counted)."""
    out: Counter = Counter()
    for i, ln in enumerate(lines):
        if ln.startswith("Traceback"):
            j = next((k for k in range(i + 1, len(lines)) if lines[k] and not lines[k][0].isspace()), None)
            if j is None:
                continue
            after = next((x for x in lines[j + 1:] if x.strip()), "")
            if not after.startswith(("The above exception", "During handling")):
                out[lines[j]] += 1
    return out


def report(load: Load, args, api: dict, db: dict | None, server_log: Path | None) -> dict:
    recs = load.recs
    labels = list(dict.fromkeys(r.label for r in sorted(recs, key=lambda r: r.label)))
    routes = {}
    print(f"\n{'route':<44}{'n':>7}{'p50':>9}{'p95':>9}{'p99':>9}{'max':>9}  errors")
    for lab in labels:
        mine = [r for r in recs if r.label == lab]
        st = pct([r.t1 - r.t0 for r in mine if r.status])
        errs = {}
        for r in mine:
            if r.status == 0 or r.status >= 400:
                errs[str(r.status or "transport")] = errs.get(str(r.status or "transport"), 0) + 1
        routes[lab] = {**st, "count": len(mine), "errors": errs}
        cells = "".join(f"{st.get(k, float('nan')):>9.1f}" for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms"))
        print(f"{lab:<44}{len(mine):>7}{cells}  {' '.join(f'{k}x{v}' for k, v in errs.items())}")
    print("(latencies in ms, to the last byte of the body)")

    by_status: dict[str, int] = {}
    for r in recs:
        if r.status == 0 or r.status >= 400:
            k = "transport" if r.status == 0 else str(r.status)
            by_status[k] = by_status.get(k, 0) + 1
    n5xx = sum(v for k, v in by_status.items() if k.startswith("5"))
    print(f"\nerrors by status: {by_status or 'none'}")
    for (lab, status), body in list(load.examples.items())[:10]:
        print(f"  {lab} -> {status or 'transport error'}: {body}")

    spans = load.uploads
    pages = [r for r in recs if r.label in PAGE_LABELS and r.status]
    during = [r.t1 - r.t0 for r in pages if overlaps(r, spans)]
    outside = [r.t1 - r.t0 for r in pages if not overlaps(r, spans)]
    pd, po = pct(during), pct(outside)
    autosave = pct([r.t1 - r.t0 for r in recs if r.label == AUTOSAVE and r.status])
    ups = [(b - a, s) for a, b, s in spans]
    each = ", ".join(f"{d:.1f} s ({s or 'transport error'})" for d, s in ups) or "-"
    print(f"\nbig uploads: {len(ups)} ({sum(1 for _, s in ups if s == 200)} answered 200), each {each}; "
          f"in flight {sum(d for d, _ in ups):.0f} s of the {args.seconds:g} s")

    def show(st):
        return f"{st['p99_ms']:.0f} ms (n={st['n']})" if st["n"] else "n/a (none)"

    print(f"page GET p99 while an upload parses: {show(pd)}   (target < {TARGETS['page_get_p99_during_upload_ms']} ms;"
          f" otherwise p99 {show(po)})")
    print(f"autosave p99: {show(autosave)}   (target < {TARGETS['autosave_p99_ms']} ms)")
    print(f"5xx: {n5xx}   (target {TARGETS['5xx']})")

    lost_api, ex_api = lost_writes(load.attempts, api["rows"])
    print(f"\ndata check over {len(load.attempts)} attempts "
          f"({sum(a.submitted for a in load.attempts)} submitted; acknowledged writes: "
          f"{sum(sum(ok for _, ok in a.texts) + a.marks_acked + a.runs_acked for a in load.attempts)}):")
    print(f"  through GET /api/attempts/{{id}}: {lost_api} lost writes   (target 0)"
          + (f"; {len(api['unread'])} attempts could not be read, e.g. {api['unread'][:3]}" if api["unread"] else ""))
    for e in ex_api[:5]:
        print(f"    {e}")
    lost_db = None
    if db is not None:
        lost_db, ex_db = lost_writes(load.attempts, db)
        print(f"  in the SQLite file:               {lost_db} lost writes   (target 0)")
        for e in ex_db[:5]:
            print(f"    {e}")
    else:
        print("  in the database: not checked (--url: the bench did not start the server)")

    tracebacks = 0
    if server_log and server_log.exists():
        crashes = log_errors(server_log.read_text(errors="replace").splitlines())
        tracebacks = sum(crashes.values())
        print(f"\nserver log: {tracebacks} unhandled errors" + (", by exception:" if crashes else ""))
        for what, n in crashes.most_common(5):
            print(f"  {n} x {what[:220]}")
        print(f"server memory (all workers) peak {load.peak_rss_mb:,.0f} MB")
    lag = pct([x / 1e3 for x in load.loop_lag])
    print(f"client event loop lag p99 {lag.get('p99_ms', 0):.0f} ms, max {lag.get('max_ms', 0):.0f} ms "
          f"(large values mean the load generator itself was short of CPU)")

    lost = max(lost_api, lost_db or 0)
    figures = {
        "bench": "load", "workers": args.workers, "candidates": args.candidates, "seconds": args.seconds,
        "think_ms": args.think_ms, "elapsed_s": round(load.elapsed, 1), "requests": len(recs),
        "rps": round(len(recs) / load.elapsed, 1), "rounds_started": load.rounds_started,
        "rounds_submitted": load.rounds_done, "attempts": len(load.attempts), "routes": routes,
        "errors": by_status, "5xx": n5xx,
        "big_uploads": {"n": len(ups), "ok": sum(1 for _, s in ups if s == 200),
                        "seconds": [round(d, 1) for d, _ in ups]},
        "page_get_during_upload": pd, "page_get_otherwise": po,
        "page_get_p99_during_upload_ms": pd.get("p99_ms"), "autosave_p99_ms": autosave.get("p99_ms"),
        "lost_writes": lost, "lost_writes_api": lost_api, "lost_writes_db": lost_db,
        "unreadable_attempts": len(api["unread"]), "server_unhandled_errors": tracebacks,
        "server_peak_rss_mb": round(load.peak_rss_mb) or None, "client_loop_lag_p99_ms": lag.get("p99_ms"),
        "unfinished_tasks": load.unfinished,
    }
    figures["targets_met"] = {
        "lost_writes": lost == 0, "5xx": n5xx == 0,
        "autosave_p99": autosave.get("p99_ms") is not None and autosave["p99_ms"] < TARGETS["autosave_p99_ms"],
        "page_get_p99_during_upload": (pd.get("p99_ms") < TARGETS["page_get_p99_during_upload_ms"]
                                       if pd.get("p99_ms") is not None else None),
    }
    return figures


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench load")
    ap.add_argument("--workers", type=int, default=2, help="server worker processes (default 2)")
    ap.add_argument("--candidates", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--round-s", type=float, default=None,
                    help="how long one candidate's round takes (default: --seconds, one round each)")
    ap.add_argument("--think-ms", type=float, default=None,
                    help="pause between a candidate's requests (default: from --round-s)")
    ap.add_argument("--url", help="an already running server (no direct database check then)")
    ap.add_argument("--no-upload", action="store_true", help="no 1M-event uploads")
    ap.add_argument("--no-sql", action="store_true", help="no SQL client")
    args = ap.parse_args(argv)
    args.round_s = args.round_s or args.seconds
    if args.think_ms is None:
        # 80%: the pauses plus the staggered start and the requests' own time fit the round
        args.think_ms = round(0.8 * args.round_s * 1000 / REQUESTS_PER_ROUND)
    if args.url and not args.url.startswith(("http://127.0.0.1", "http://localhost", "http://[::1]")):
        print("--url must be a loopback server", file=sys.stderr)
        return 2

    print(f"pace: {args.think_ms:g} ms think between a candidate's requests (x0.5-1.5 at random), "
          f"{REQUESTS_PER_ROUND} requests per round: ~{args.think_ms * (REQUESTS_PER_ROUND - 1) / 1000:.0f} s "
          f"per round plus latency; {args.candidates} candidates for {args.seconds:g} s")
    big_gz = sql_gz = None
    t0 = time.perf_counter()
    if not args.no_upload:
        big_gz = make_trace(303)
    if not args.no_sql:
        sql_gz = make_trace(15)
    if big_gz or sql_gz:
        print(f"traces built in {time.perf_counter() - t0:.1f} s (before the clock): "
              + ", ".join(f"{what} {len(gz) / 1e6:.1f} MB gzipped" for what, gz in
                          (("upload", big_gz), ("for SQL", sql_gz)) if gz))

    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp_name:
        tmp = Path(tmp_name)
        proc = None
        if args.url:
            base = args.url.rstrip("/")
        else:
            proc, base, why = start_server(tmp, args.workers)
            if why:
                print(f"the server did not start: {why}", file=sys.stderr)
                print((tmp / "server.log").read_text(errors="replace")[-2000:], file=sys.stderr)
                stop_server(proc)
                print(json.dumps({"bench": "load", "error": why}))
                return 1
            print(f"server: {base}, {args.workers} workers, SQLite in {tmp}")
        try:
            load = Load(base, args)
            api = asyncio.run(load.run(big_gz, sql_gz, proc.pid if proc else None))
            db = db_rows(tmp / "tracedojo.db", [a.id for a in load.attempts]) if proc else None
        finally:
            if proc:
                stop_server(proc)
        figures = report(load, args, api, db, tmp / "server.log" if proc else None)
    print(json.dumps(figures))
    return 0
