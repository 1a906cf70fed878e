"""Rank honesty in the browser (issue 14 item 3): the straggler opens on the rank its brief
hands over; the toolbar's switcher (by keyboard) stacks every rank, and then every track
label, every area-selection row and the slice details name the rank; the per-rank
measurement links each rank to its view."""

from __future__ import annotations

import re

import scenarios
from tests.server import wait_until
from tests.browser import needs_chromium
from tests.test_browser import measurements_tab, open_viewer

pytestmark = needs_chromium


def _stack_by_keyboard(page):
    """Choose "all ranks stacked" in the switcher with keys only, and wait for the new view."""
    page.locator("#rank-select").focus()
    page.keyboard.press("End")  # a closed select moves to its last option; the page stays put
    assert page.locator("#rank-select").input_value() == "all"
    with page.expect_navigation():
        page.keyboard.press("Enter")
    wait_until(page, "window.timelineTest !== undefined", timeout=30000)
    page.evaluate("window.timelineTest.idle()")


def test_straggler_opens_on_the_briefs_rank_and_the_switcher_stacks_every_rank(page, server):  # noqa: F811
    inst = scenarios.get("straggler").instance("canonical")
    brief_rank = int(re.search(r"rank (\d+)'s trace", inst.key["brief"]).group(1))
    open_viewer(page, server, "/scenarios/straggler/canonical")
    assert page.evaluate("window.timelineTest.ranks()") == [brief_rank]
    assert page.locator("#rank-select").input_value() == str(brief_rank)
    assert page.get_by_label("Rank", exact=True).count() == 1  # the select is labelled

    _stack_by_keyboard(page)
    assert "rank=all" in page.url and "testing=1" in page.url  # the other keys ride along
    assert page.evaluate("window.timelineTest.ranks()") == list(range(inst.ranks))
    unnamed = page.evaluate("window.timelineTest.view.data.tracks.filter(t => !t.label.startsWith(`rank ${t.rank} · `))"
                            ".map(t => t.label)")
    assert not unnamed, unnamed

    # an area selection across the GPUs: every per-track row says whose stream it is
    steps = page.evaluate("window.timelineTest.steps")
    s = steps[1]
    page.evaluate(f"window.timelineTest.setWindow({s['start_ns']}, {s['end_ns']})")
    page.evaluate("window.timelineTest.idle()")
    # an area over every track (the mirror's way in: a drag covers only the tracks under it)
    page.evaluate(f"window.timelineTest.mirror({{selection: {{area: {{start_ns: {s['start_ns']}, end_ns: {s['end_ns']}}}}}}})")
    rows = page.locator("[data-area] table.area.tracks tbody tr td:nth-child(2)").all_inner_texts()
    rows = [r.split(" / ", 1)[1] for r in rows]  # "rank 3 · GPU 3 / rank 3 · stream 7 · compute": the track's own label
    assert len(rows) >= inst.ranks, rows
    assert all(re.match(r"rank \d+ · ", r) for r in rows), rows
    assert len({r.split(" · ")[0] for r in rows}) == inst.ranks, rows  # every rank's rows, each named

    # a slice's details name its rank
    row = page.evaluate("window.timelineTest.view.data.tracks.find(t => t.rank === 3 && t.gpu).lo")
    page.evaluate(f"window.timelineTest.mirror({{selection: {{row: {row}}}}})")
    details = page.locator("[data-details]").inner_text()
    assert re.search(r"Rank\s+3", details) and "rank 3 · stream" in details and "rank 3 · GPU 3" in details


def test_the_per_rank_measurement_links_each_rank_to_its_view(page, server):  # noqa: F811
    inst = scenarios.get("straggler").instance("canonical")
    open_viewer(page, server, "/scenarios/straggler/canonical")
    measurements_tab(page)
    page.select_option("#tool-select", label=next(o for o in page.locator("#tool-select option").all_inner_texts()
                                                  if o.startswith("per-rank")))
    page.get_by_role("button", name="Run").click()
    nav = page.get_by_role("navigation", name="open a rank's trace")
    nav.wait_for(timeout=10000)
    links = nav.get_by_role("link").all_inner_texts()
    assert links == [f"rank {r}" + (" (slowest)" if r == 3 else "") for r in range(inst.ranks)] + ["all ranks stacked"]
    with page.expect_navigation():
        nav.get_by_role("link", name="rank 3 (slowest)").click()
    wait_until(page, "window.timelineTest !== undefined", timeout=30000)
    assert page.evaluate("window.timelineTest.ranks()") == [3]
    assert "testing=1" in page.url
