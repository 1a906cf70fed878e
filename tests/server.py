"""A real Trace Dojo server in a subprocess on a free port, for the browser tests, the
fault tests and `python -m bench viewer`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
