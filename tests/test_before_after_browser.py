"""Counter tracks and the before/after page in Chromium (issue 14 items 4, 5 and their part of
item 9): the straggler's counters drawn on each rank with the throttled clock where the physics
puts it; the two timelines of before/after moving as one; the step difference shown is the key's."""

from __future__ import annotations

import pytest

from app import instances
from app.scenario import observation
from tests.browser import needs_chromium, watched_page
from tests.server import wait_until

pytestmark = needs_chromium


@pytest.fixture
def page(browser):
    with watched_page(browser, 1440, 900) as pg:  # the server and browser: tests/conftest.py
        yield pg


def open_viewer(page, url: str, hook: str = "window.timelineTest") -> None:
    page.goto(url)
    wait_until(page, f"{hook} !== undefined", timeout=60000)


def test_the_straggler_draws_its_counter_tracks(page, server):
    inst = instances.instance("straggler", "canonical")
    s = int(observation(inst.key, "straggler_rank"))
    open_viewer(page, f"{server}/scenarios/straggler/canonical?rank={s}&testing=1")
    page.evaluate("window.timelineTest.idle()")
    assert page.evaluate("window.timelineTest.counters()") == ["SM clock", "power"]
    # the value under the cursor: the throttled clock, read off the chart
    y = page.evaluate("window.timelineTest.view.layout.items.find((i) => i.kind === 'counter').y")
    box = page.locator("#viewer canvas").bounding_box()
    texts = []
    page.evaluate("""(() => { const P = CanvasRenderingContext2D.prototype, f = P.fillText;
                     window.__said = []; P.fillText = function (t, x, y) { window.__said.push(String(t)); return f.apply(this, arguments); }; })()""")
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + y + 20)
    page.evaluate("window.timelineTest.idle()")
    texts = page.evaluate("window.__said")
    assert f"{int(observation(inst.key, 'sm_clock_mhz')):,} MHz" in texts
    assert "SM clock (MHz)" in texts
    open_viewer(page, f"{server}/scenarios/straggler/canonical?rank=all&testing=1")
    page.evaluate("window.timelineTest.idle()")
    # every rank's counters start folded (16 tracks would push the GPUs off the screen): open them
    assert page.evaluate("window.timelineTest.counters()") == []
    y = page.evaluate("window.timelineTest.view.layout.items.find((i) => i.kind === 'group' && i.label === 'Counters').y")
    box = page.locator("#viewer canvas").bounding_box()
    page.mouse.click(box["x"] + 30, box["y"] + y + 8)
    page.evaluate("window.timelineTest.idle()")
    drawn = page.evaluate("window.timelineTest.counters()")
    assert f"rank {s} · SM clock" in drawn and "rank 0 · power" in drawn


def test_a_case_without_counters_draws_none(page, server):
    open_viewer(page, f"{server}/scenarios/ddp/canonical?testing=1")
    page.evaluate("window.timelineTest.idle()")
    assert page.evaluate("window.timelineTest.counters()") == []


@pytest.mark.parametrize("width", [800, 1440, 1920])
def test_before_and_after_move_as_one_and_show_the_keys_step_difference(page, server, width):
    page.set_viewport_size({"width": width, "height": 900})
    open_viewer(page, f"{server}/scenarios/launch-bound/canonical/before-after?testing=1", "window.beforeAfterTest")
    page.evaluate("Promise.all([window.beforeAfterTest.after.idle(), window.beforeAfterTest.before.idle()])")
    inst = instances.instance("launch-bound", "canonical", fixed=True)
    before, after = observation(inst.key, "step_ms"), observation(inst.fixed_key, "step_ms")
    shown = page.locator("[data-step-delta]")
    assert float(shown.get_attribute("data-before-ms")) == before
    assert float(shown.get_attribute("data-after-ms")) == after
    assert page.locator("[data-delta-ms]").inner_text() == f"{after - before:+.1f} ms"
    # zoom the lower one with the keyboard: the upper one shows the same window
    page.locator("#viewer-before canvas").focus()
    page.keyboard.down("w")
    page.wait_for_timeout(400)
    page.keyboard.up("w")
    page.evaluate("Promise.all([window.beforeAfterTest.after.idle(), window.beforeAfterTest.before.idle()])")
    a = page.evaluate("window.beforeAfterTest.after.window()")
    b = page.evaluate("window.beforeAfterTest.before.window()")
    assert a == b and a["end_ns"] - a["start_ns"] < page.evaluate("window.beforeAfterTest.before.view.data.endNs")
    page.evaluate("window.beforeAfterTest.after.setWindow(1e6, 5e6)")
    assert page.evaluate("window.beforeAfterTest.before.window()") == {"start_ns": 1e6, "end_ns": 5e6}
    # both canvases as wide as each other (one scale needs one width), and usable
    wa = page.locator("#viewer-after canvas").bounding_box()["width"]
    wb = page.locator("#viewer-before canvas").bounding_box()["width"]
    assert wa == wb and wa >= min(500, width - 60)
    assert page.locator("[data-name-diff] tbody tr").count() > 5
