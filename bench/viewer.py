"""The timeline in Debian's Chromium (headless, Playwright) against a real server.

Figures (issue 4): navigation to the first complete paint for each scenario's default
instance (target < 500 ms) and for a 1,000,000-slice launch-bound instance (target
< 2.5 s, warm server: the instance is generated once before), and the 95th-percentile
frame time over a scripted 5-second W/A/S/D sequence on that instance (target < 16 ms;
the painter's work per frame, since headless rAF intervals are pinned to 60 Hz).
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

import scenarios
from tests.server import running_server, wait_until

# 1,088,250 slices (seed 0, version 3): its op trees put ~7,260 rows in a token, so 303 tokens
# (1.09M slices in version 2) now pass the request's 1.5M-event budget and are refused (400)
BIG = "/scenarios/launch-bound/0?tokens=150"


def _first_paint(browser, url: str):
    """A fresh context on `url`: (context, page, ms from navigation to first complete paint, slices drawn)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.goto(url + ("&" if "?" in url else "?") + "testing=1")
    wait_until(page, "window.timelineTest && window.timelineTest.stats.firstPaintMs !== null", timeout=60000)
    ms = page.evaluate("window.timelineTest.stats.firstPaintMs")
    count = page.evaluate("window.timelineTest.visibleSliceCount()")
    return ctx, page, ms, count


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    figures: dict = {"bench": "viewer", "first_paint_ms": {}}
    with tempfile.TemporaryDirectory() as data, running_server(Path(data)) as base:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            for sid in scenarios.REGISTRY:
                url = f"{base}/scenarios/{sid}/0"
                urllib.request.urlopen(f"{base}/api/scenarios/{sid}/0/timeline.bin").read()  # warm the instance
                best = float("inf")
                for _ in range(3):
                    ctx, _page, ms, _n = _first_paint(browser, url)
                    ctx.close()
                    best = min(best, ms)
                figures["first_paint_ms"][sid] = round(best, 1)
                print(f"{sid:<14} first paint {best:7.1f} ms")
            t0 = time.perf_counter()
            urllib.request.urlopen(f"{base}/api{BIG.replace('/0?', '/0/timeline.bin?')}").read()
            print(f"1M-slice instance generated in {time.perf_counter() - t0:.1f} s (not timed below)")
            ctx, page, ms, n = _first_paint(browser, base + BIG)
            slices = page.evaluate("window.timelineTest.view.data.count")
            figures["big"] = {"slices": slices, "first_paint_ms": round(ms, 1)}
            print(f"{slices:,} slices: first paint {ms:.0f} ms, {n:,} drawn")
            page.evaluate("window.timelineTest.stats.frames.length = 0")
            page.locator("canvas").focus()
            canvas = page.locator("canvas").bounding_box()
            page.mouse.move(canvas["x"] + canvas["width"] * 0.6, canvas["y"] + 200)
            for key in "wasd":
                page.keyboard.down(key)
                page.wait_for_timeout(1250)
                page.keyboard.up(key)
            frames = page.evaluate("window.timelineTest.stats.frames")
            ctx.close()
            browser.close()
    f = np.array(frames)
    figures["big"].update({"frames": len(f), "frame_p50_ms": round(float(np.percentile(f, 50)), 2),
                           "frame_p95_ms": round(float(np.percentile(f, 95)), 2),
                           "frame_max_ms": round(float(f.max()), 2)})
    print(f"W/A/S/D 5 s: {len(f)} frames, p50 {figures['big']['frame_p50_ms']} ms, "
          f"p95 {figures['big']['frame_p95_ms']} ms (target < 16 ms)")
    worst = max(figures["first_paint_ms"].values())
    print(f"slowest default first paint {worst:.0f} ms (target < 500 ms); 1M first paint "
          f"{figures['big']['first_paint_ms']:.0f} ms (target < 2500 ms)")
    print(json.dumps(figures))
    return 0
