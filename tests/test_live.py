"""Live rounds as people run them, against real servers: an interviewer and a candidate in
two browser contexts (Debian's Chromium), the same round across two servers sharing one
PostgreSQL database (and one SQLite file), and a console that resumes from its
Last-Event-ID after the server restarts, missing nothing and repeating nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

import scenarios

from tests.browser import launch
from tests.server import Server, wait_until

PASSWORD = "correct horse battery staple"
ROOT = Path(__file__).resolve().parent.parent


def add_user(server: Server, email: str, role: str, team: str = "gpu") -> None:
    env = {**server.env, "TRACEDOJO_PASSWORD": PASSWORD}
    done = subprocess.run([sys.executable, "-m", "app", "user", "add", email, "--role", role, "--team", team],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def staff_client(base: str, email: str) -> httpx.Client:
    c = httpx.Client(base_url=base, timeout=30)
    r = c.post("/login", json={"email": email, "password": PASSWORD})
    assert r.status_code == 200, r.text
    return c


class Stream:
    """A console's event stream read in a thread, as EventSource reads it: events with
    their ids, reconnecting with Last-Event-ID when the connection drops."""

    def __init__(self, client: httpx.Client, path: str, after: int = 0):
        self.client, self.path, self.last = client, path, after
        self.events: list[dict] = []
        self.arrived: list[float] = []
        self.connects = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                headers = {"Last-Event-ID": str(self.last)} if self.last else {}
                with self.client.stream("GET", self.path, headers=headers, timeout=httpx.Timeout(30, read=None)) as r:
                    if r.status_code != 200:
                        time.sleep(0.2)
                        continue
                    self.connects += 1
                    data, eid = None, None
                    for line in r.iter_lines():
                        if self.stopping.is_set():
                            return
                        if line.startswith("id: "):
                            eid = int(line[4:])
                        elif line.startswith("data: "):
                            data = line[6:]
                        elif line == "" and data is not None:
                            e = json.loads(data)
                            assert e["id"] == eid
                            self.events.append(e)
                            self.arrived.append(time.monotonic())
                            self.last = eid
                            data = None
            except (httpx.HTTPError, OSError):
                time.sleep(0.2)

    def wait_for(self, pred, timeout_s: float = 5.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for e in self.events:
                if pred(e):
                    return e
            time.sleep(0.01)
        raise AssertionError(f"no such event within {timeout_s} s; got kinds {[e['kind'] for e in self.events][-20:]}")

    def stop(self) -> None:
        self.stopping.set()


@pytest.fixture
def servers(tmp_path):
    started: list[Server] = []

    def make(database_url: str | None = None, data_dir: Path | None = None) -> Server:
        s = Server(data_dir or tmp_path, 1, {"TRACEDOJO_SECRET_KEY": "live-test"}, database_url)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


# -- across servers -------------------------------------------------------------------------

@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_one_round_across_two_servers(servers, database_url, tmp_path):
    """The candidate writes to one server, the console listens on another (two hosts on
    one database): every event arrives, in order, each within a second."""
    a = servers(database_url)
    add_user(a, "iv@team.org", "interviewer")
    a.start()
    b = servers(database_url, tmp_path / "b") if database_url.startswith("postgresql") else \
        servers(database_url, tmp_path)
    b.data_dir.mkdir(exist_ok=True)
    b.start()
    iv = staff_client(b.base, "iv@team.org")
    made = iv.post("/api/rounds", json={"scenario": "ddp", "seed": "canonical"})
    assert made.status_code == 201, made.text
    r = made.json()
    assert set(r) >= {"id", "candidate_url", "console_url", "review_url"}
    stream = Stream(iv, f"/rounds/{r['id']}/events")
    cand = httpx.Client(base_url=a.base, timeout=30)
    token_api = "/api" + r["candidate_url"]
    stream.wait_for(lambda e: e["kind"] == "created")
    lag = []
    for i in range(20):
        t0 = time.monotonic()
        got = cand.post(f"{token_api}/events", json={"kind": "viewport", "start_ns": i, "end_ns": i + 10})
        assert got.status_code == 201, got.text
        e = stream.wait_for(lambda e, i=i: e["kind"] == "viewport" and e["data"]["start_ns"] == i, 2.0)
        lag.append(stream.arrived[stream.events.index(e)] - t0)
    assert cand.put(f"{token_api}/narration", json={"narration": "the step is 622 ms"}).status_code == 200
    stream.wait_for(lambda e: e["kind"] == "narration")
    stream.stop()
    ids = [e["id"] for e in stream.events]
    assert ids == sorted(ids) and len(ids) == len(set(ids)) == 22
    assert max(lag) < 1.0, lag


# -- a restart in the middle ------------------------------------------------------------------

def test_the_console_resumes_from_its_last_event_id_after_a_restart(servers):
    s = servers()
    add_user(s, "iv@team.org", "interviewer")
    s.start()
    iv = staff_client(s.base, "iv@team.org")
    r = iv.post("/api/rounds", json={"scenario": "prefill", "seed": "secret"}).json()
    cand = httpx.Client(base_url=s.base, timeout=30)
    api = "/api" + r["candidate_url"]
    stream = Stream(iv, f"/rounds/{r['id']}/events")
    for i in range(5):
        cand.post(f"{api}/events", json={"kind": "viewport", "start_ns": i, "end_ns": i + 1})
    stream.wait_for(lambda e: e["kind"] == "viewport" and e["data"]["start_ns"] == 4)
    started = time.monotonic()
    s.stop()
    assert time.monotonic() - started < 10, "a live stream held the shutdown"
    s.start()
    for i in range(5, 10):
        assert cand.post(f"{api}/events", json={"kind": "viewport", "start_ns": i, "end_ns": i + 1}).status_code == 201
    stream.wait_for(lambda e: e["kind"] == "viewport" and e["data"]["start_ns"] == 9, 10)
    stream.stop()
    views = [e["data"]["start_ns"] for e in stream.events if e["kind"] == "viewport"]
    assert views == list(range(10)) and stream.connects >= 2
    # resuming from any id by hand gives exactly the rest
    everything = [e["id"] for e in stream.events]
    with iv.stream("GET", f"/rounds/{r['id']}/events", headers={"Last-Event-ID": str(everything[3])}) as resp:
        seen = []
        for line in resp.iter_lines():
            if line.startswith("id: "):
                seen.append(int(line[4:]))
            if len(seen) == len(everything) - 4:
                break
    assert seen == everything[4:]


# -- two browsers --------------------------------------------------------------------------------

@pytest.fixture
def browser():
    """A Chromium of its own for each test (tests/browser.py)."""
    with launch() as b:
        yield b


def watch_errors(page, errors: list):
    page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
    page.on("console", lambda m: ("Content Security Policy" in m.text or m.type == "error")
            and "Failed to load resource" not in m.text and errors.append(f"{page.url}: {m.text}"))


def within(page, expression: str, seconds: float = 1.0) -> float:
    """How long until `expression` holds in `page`; fails past `seconds`."""
    t0 = time.monotonic()
    wait_until(page, expression, timeout=seconds * 1000)
    return time.monotonic() - t0


def test_an_interviewer_and_a_candidate_in_two_browsers(servers, browser):
    s = servers()
    add_user(s, "iv@team.org", "interviewer")
    s.start()
    errors: list[str] = []
    staff_ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    cand_ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    iv, cand = staff_ctx.new_page(), cand_ctx.new_page()
    watch_errors(iv, errors)
    watch_errors(cand, errors)

    # the interviewer signs in and creates a round from the rounds page
    iv.goto(f"{s.base}/rounds")
    assert "/login" in iv.url
    iv.fill("#email", "iv@team.org")
    iv.fill("#password", PASSWORD)
    iv.click("button[type=submit]")
    iv.wait_for_url(f"{s.base}/rounds")
    iv.select_option("select[name=scenario]", "ddp")
    iv.select_option("select[name=seed]", "canonical")
    iv.fill("input[name=candidate_name]", "Ada")
    iv.click("text=Create round")
    iv.wait_for_selector("[data-link-box]:not([hidden])")
    link = iv.input_value("[data-link]")
    assert "/r/" in link and "#" not in iv.url
    console_url = iv.url
    iv.goto(console_url + "?testing=1")
    wait_until(iv, "window.timelineTest !== undefined && window.tracedojoConsole !== undefined", 20000)

    # the candidate opens the link: no account, no key
    cand.goto(link + "?testing=1")
    wait_until(cand, "window.timelineTest !== undefined", 20000)
    body = cand.content()
    key = scenarios.get("ddp").instance("canonical").key
    for secret in (scenarios.get("ddp").title, key["model_answer"][:60], key["root_cause"][:60], key["fix"][:60],
                   *(t["claim"][:40] for t in key["traps"]), "/scenarios/"):
        assert secret not in body
    within(iv, "document.querySelector('[data-presence]').textContent.includes('opened')", 2.0)

    # the candidate drags an area: the console's viewer shows the same area
    box = cand.locator("canvas").bounding_box()
    cand.mouse.move(box["x"] + 400, box["y"] + 120)
    cand.mouse.down()
    cand.mouse.move(box["x"] + 600, box["y"] + 120, steps=5)
    cand.mouse.up()
    sel = cand.evaluate("window.timelineTest.selection()")
    # the drag's own steps arrive first (the console follows the drag); then where it ended
    within(iv, f"(s => s !== null && Math.abs(s.start_us - {sel['start_us']}) < 1 && "
               f"Math.abs(s.end_us - {sel['end_us']}) < 1)(window.timelineTest.selection())")

    # zooms: the console follows the window
    cand.locator("canvas").focus()
    cand.keyboard.down("w")
    cand.wait_for_timeout(300)
    cand.keyboard.up("w")
    cand.evaluate("window.timelineTest.idle()")
    win = cand.evaluate("window.timelineTest.window()")
    within(iv, f"Math.abs(window.timelineTest.window().start_ns - {win['start_ns']}) < 1")

    # marks the step
    cand.click("[data-mark=step]")
    within(iv, "document.querySelector('[data-marks]').textContent.includes('one step')")

    # runs a tool: the console lists it and shows its output
    cand.get_by_role("tab", name="Measurements").click()  # the drawer's tab (marking showed Area selection)
    cand.select_option("#tool-select", index=1)
    cand.click("[data-tool-form] button[type=submit]")
    within(iv, "window.tracedojoConsole.runs().length === 1", 2.0)
    within(iv, "document.querySelector('[data-run-output]').textContent.length > 40", 3.0)

    # asks the trace a question in the Query tab: the console lists it with its answer's size
    cand.get_by_role("tab", name="Query").click()
    cand.fill("#drawer-sql", "SELECT name, dur FROM slice WHERE name LIKE 'nccl%' ORDER BY dur DESC LIMIT 2")
    cand.locator("#drawer-sql").press("Control+Enter")
    within(iv, "window.tracedojoConsole.runs().length === 2", 3.0)
    assert "SQL: SELECT name, dur FROM slice" in iv.inner_text("[data-runs]") and "(2 rows)" in iv.inner_text("[data-runs]")
    assert "LIMIT 2" in iv.inner_text("[data-run-output]")

    # narrates: the console shows the words as typed
    cand.click("#narration")
    cand.keyboard.type("One step is 622 ms; the compute stream idles ~175 ms at the end.")
    within(iv, "window.tracedojoConsole.narration().endsWith('at the end.')", 1.5)
    assert iv.inner_text("[data-narration]").endswith("at the end.")

    # tab hidden: a neutral integrity line on the console
    cand.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    within(iv, "window.tracedojoConsole.integrity().length >= 1")

    # a hint reaches the candidate
    iv.click("#hints form button >> nth=0")
    within(cand, "document.querySelector('.hints-shown') !== null", 2.0)
    assert "Hint 1" in cand.inner_text("#round-status")

    # the interviewer starts the reading phase: the candidate's clock runs
    iv.click("#controls button:has-text('Start')")
    within(cand, "document.querySelector('#round-status').textContent.includes('brief')", 2.0)

    # a private note never reaches the candidate
    iv.fill("#note-text", "found the gap before the step: note it")
    iv.click("text=Add note")
    within(iv, "document.querySelector('#notes').textContent.includes('found the gap')")

    # the interviewer ends the round: the candidate sees the end, and can change nothing
    iv.on("dialog", lambda d: d.accept())
    iv.click("#controls button:has-text('End round')")
    within(cand, "document.querySelector('.ended-banner') !== null", 2.0)
    assert cand.evaluate("document.getElementById('narration').readOnly")
    after = httpx.put(f"{s.base}/api{link[len(s.base):]}/narration", json={"narration": "late"})
    assert after.status_code == 409
    assert "found the gap" not in cand.content()

    # the scorecard: submitted before the automatic score is shown
    iv.wait_for_selector("#scorecard form")
    assert iv.locator(".auto-score").count() == 0
    for cid in ("discipline_order", "findings", "trap", "root_cause", "measurement", "fix_win"):
        iv.check(f"input[name=criterion_{cid}][value='3']")
    iv.check("input[name=recommendation][value='3']")
    iv.click("#scorecard button[type=submit]")
    iv.wait_for_selector(".auto-score", timeout=5000)
    assert "Automatic score" in iv.inner_text(".auto-score")
    staff_ctx.close()
    cand_ctx.close()
    assert not errors, errors


def test_both_pages_carry_on_across_a_restart_and_a_reload(servers, browser):
    """The server restarts mid-round: the console's EventSource reconnects and resumes,
    the candidate's page keeps saving, and a reload of either page loses nothing."""
    s = servers()
    add_user(s, "iv@team.org", "interviewer")
    s.start()
    r = staff_client(s.base, "iv@team.org").post("/api/rounds", json={"scenario": "dataloader", "seed": "7"}).json()
    errors: list[str] = []
    staff_ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    staff_ctx.request.post(f"{s.base}/login", data={"email": "iv@team.org", "password": PASSWORD})
    iv = staff_ctx.new_page()
    cand = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    iv.goto(f"{s.base}{r['console_url']}?testing=1")
    cand.goto(f"{s.base}{r['candidate_url']}?testing=1")
    wait_until(iv, "window.tracedojoConsole !== undefined", 20000)
    wait_until(cand, "window.timelineTest !== undefined", 20000)
    cand.click("#narration")
    cand.keyboard.type("Before the restart.")
    within(iv, "window.tracedojoConsole.narration() === 'Before the restart.'", 2.0)

    s.stop()
    s.start()
    # fresh errors only: while the server was down, the pages' fetches failed by design
    watch_errors(iv, errors)
    watch_errors(cand, errors)
    cand.keyboard.type(" After it.")
    within(iv, "window.tracedojoConsole.narration() === 'Before the restart. After it.'", 8.0)

    cand.reload()
    wait_until(cand, "window.timelineTest !== undefined", 20000)
    assert cand.input_value("#narration") == "Before the restart. After it."
    iv.reload()
    wait_until(iv, "window.tracedojoConsole !== undefined", 20000)
    assert iv.inner_text("[data-narration]") == "Before the restart. After it."
    cand.click("#narration")
    cand.keyboard.press("End")
    cand.keyboard.type(" And after the reload.")
    within(iv, "window.tracedojoConsole.narration().endsWith('after the reload.')", 2.0)
    assert not [e for e in errors if "EventSource" not in e], errors


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_the_listener_reconnects_when_postgresql_drops_it(servers, database_url):
    """PostgreSQL ends the worker's LISTEN connection (a failover, an admin): the worker
    listens again, and wake-ups across servers resume."""
    import psycopg
    from sqlalchemy.engine import make_url

    a, b = servers(database_url), servers(database_url, None)
    add_user(a, "iv@team.org", "interviewer")
    a.start()
    b.data_dir = a.data_dir / "b"
    b.data_dir.mkdir()
    b.env["TRACEDOJO_DATA_DIR"] = str(b.data_dir)
    b.start()
    iv = staff_client(b.base, "iv@team.org")
    r = iv.post("/api/rounds", json={"scenario": "ddp", "seed": "canonical"}).json()
    stream = Stream(iv, f"/rounds/{r['id']}/events")
    stream.wait_for(lambda e: e["kind"] == "created")
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        killed = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE query LIKE 'LISTEN tracedojo_rounds%' AND pid <> pg_backend_pid() "
                              "AND datname = current_database()").fetchone()[0]
    assert killed >= 2  # one listener per server
    time.sleep(1.0)
    cand = httpx.Client(base_url=a.base, timeout=30)
    t0 = time.monotonic()
    cand.post(f"/api{r['candidate_url']}/events", json={"kind": "viewport", "start_ns": 1, "end_ns": 2})
    stream.wait_for(lambda e: e["kind"] == "viewport", 3.0)
    assert time.monotonic() - t0 < 1.0, "the wake-up came from the periodic re-read, not from a listener"
    stream.stop()
