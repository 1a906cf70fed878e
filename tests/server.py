"""A real Trace Dojo server in a subprocess on a free port, for the browser tests, the
fault tests and `python -m bench viewer`."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path


_LOWEST_PORT = 10000
_handed_out: set[int] = set()


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A port on 127.0.0.1 that nothing holds, for a server about to be started on it.

    Not one the kernel picks (port 0): those come from its ephemeral range, from which every
    outgoing connection (a test's client, the PostgreSQL driver, Chromium) also takes its
    local port, so one could take it between this check and the server's bind. Below that
    range only servers started on purpose bind. Under pytest-xdist each worker picks from
    its own stripe of it (port % workers == its number), so two workers never pick the same
    port; at random within the stripe, so that two test runs at once rarely try the same
    one (the bind below says when one is taken). A process hands a port out once."""
    lo, hi = _LOWEST_PORT, _ephemeral_start()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    if hi - lo < 100 * count:  # no room below the ephemeral range here: let the kernel choose
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    stripe = range(lo + (index - lo) % count, hi, count)
    for _ in range(200):
        port = random.choice(stripe)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port found in {lo}-{hi} (worker {index} of {count})")


class Server:
    """`tracedojo serve` on a SQLite file in `data_dir` (or `database_url`), started and
    stopped (gently or with kill -9) by the test."""

    def __init__(self, data_dir: Path, workers: int = 1, env: dict | None = None, database_url: str | None = None,
                 args: tuple[str, ...] = ()):
        self.data_dir = Path(data_dir)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.database_url = database_url or f"sqlite:///{self.data_dir / 'tracedojo.db'}"
        self.env = {**os.environ, "DATABASE_URL": self.database_url, "TRACEDOJO_DATA_DIR": str(self.data_dir),
                    **(env or {})}
        self.cmd = [sys.executable, "-m", "app", "serve", "--port", str(self.port), "--workers", str(workers),
                    "--quiet", *args]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 30) -> "Server":
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)  # its own group: kill -9 reaches every worker
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: "
                                   f"{self.proc.stderr.read().decode()[-2000:]}")
            try:
                urllib.request.urlopen(self.base + "/healthz", timeout=2)
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the server did not start within {timeout_s:.0f} s")

    def kill9(self) -> None:
        """SIGKILL to the whole process group: no shutdown code runs anywhere."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill9()


@contextmanager
def running_server(data_dir: Path, workers: int = 1, env: dict | None = None):
    """Yields the base URL of a server whose SQLite database lives in `data_dir`."""
    server = Server(data_dir, workers, env).start()
    try:
        yield server.base
    finally:
        server.stop()


def wait_until(page, expression: str, timeout: float = 30000) -> None:
    """Playwright's wait_for_function, polled with evaluate: its own polling evaluates a
    string in the page, which the server's CSP (no 'unsafe-eval') refuses."""
    deadline = time.monotonic() + timeout / 1000
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not true within {timeout / 1000:g} s: {expression}")
        time.sleep(0.02)
