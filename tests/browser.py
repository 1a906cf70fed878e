"""Debian's Chromium, driven by Playwright, for the browser tests: one place for where it is,
how it starts, and what counts as a broken page.

`tests/conftest.py` turns these into the fixtures `browser` (one Chromium per test file) and
`server` (one Trace Dojo per test file); a file that needs another setup defines its own.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")  # `playwright install` cannot download browsers here
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}")


@contextmanager
def launch():
    """A headless Chromium; skips the test, with the reason, where Playwright or Chromium is missing."""
    pw = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[test])")
    if not CHROMIUM.exists():
        pytest.skip(f"Debian's chromium is not installed at {CHROMIUM}")
    with pw.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@contextmanager
def watched_page(browser, width: int = 1280, height: int = 800):
    """A page in its own context (its own storage) that fails the test on a JavaScript error or
    a Content Security Policy violation: the server's CSP holds here as in any browser, and a
    refused script or style is a broken page."""
    ctx = browser.new_context(viewport={"width": width, "height": height})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: "Content Security Policy" in m.text and errors.append(m.text))
    try:
        yield pg
    finally:
        ctx.close()
    assert not errors, f"JavaScript errors: {errors}"
