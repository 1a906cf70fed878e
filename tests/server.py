"""A real Trace Dojo server in a subprocess on a free port, for the browser tests and
`python -m bench viewer`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def running_server(data_dir: Path):
    """Yields the base URL of a server whose SQLite database lives in `data_dir`."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{Path(data_dir) / 'tracedojo.db'}"}
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/index.json", timeout=2)
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("the server did not start within 20 s")
        yield base
    finally:
        proc.terminate()
        proc.wait(10)
