"""The viewer's bottom drawer (issue 14 item 1) as a person uses it, in Debian's Chromium:
its tabs and handle by keyboard, its height kept across a reload, the area pivot's figures
against summary.js and the SQL console, Query rows that select the slice, slice details with
parent, children and self time, and the timeline's width at 800 px."""

from __future__ import annotations

import pytest

from tests.server import wait_until
from tests.browser import needs_chromium
from tests.test_browser import open_viewer

pytestmark = needs_chromium

DDP = "/scenarios/ddp/canonical"


def drawer(page) -> dict:
    return page.evaluate("window.timelineTest.drawer()")


def sql(page, query: str) -> dict:
    url = page.evaluate("document.querySelector('[data-query-form]').dataset.sqlUrl")
    return page.evaluate("([u, q]) => fetch(u, {method: 'POST', headers: {'Content-Type': 'application/json'},"
                         " body: JSON.stringify({query: q})}).then(r => r.json())", [url, query])


def test_the_drawer_opens_under_the_timeline_and_keeps_its_height_across_a_reload(page, server):
    open_viewer(page, server, DDP)
    first = drawer(page)
    assert first["open"] and first["tab"] == "measurements"  # nothing is selected yet: the tools
    canvas = page.locator("#viewer canvas").bounding_box()
    assert canvas["height"] >= 0.6 * 800 - 1, "by default the timeline keeps 60% of the window's height"
    # drag the handle up 120 px
    page.locator("[data-drawer-handle]").scroll_into_view_if_needed()
    canvas = page.locator("#viewer canvas").bounding_box()
    h = page.locator("[data-drawer-handle]").bounding_box()
    page.mouse.move(h["x"] + 200, h["y"] + 3)
    page.mouse.down()
    page.mouse.move(h["x"] + 200, h["y"] - 60, steps=4)
    page.mouse.move(h["x"] + 200, h["y"] - 117, steps=4)
    page.mouse.up()
    dragged = drawer(page)["height_px"]
    assert dragged == pytest.approx(first["height_px"] + 120, abs=3)
    page.evaluate("window.timelineTest.idle()")
    assert page.locator("#viewer canvas").bounding_box()["height"] == pytest.approx(canvas["height"] - 120, abs=3)
    page.reload()
    wait_until(page, "window.timelineTest !== undefined")
    assert drawer(page)["height_px"] == dragged, "the height persists per browser"


def test_the_keyboard_reaches_the_handle_and_the_tabs(page, server):
    open_viewer(page, server, DDP)
    page.locator("canvas").focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.matches('[data-drawer-handle]')")
    before = drawer(page)["height_px"]
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowDown")
    assert drawer(page)["height_px"] == before + 24
    page.keyboard.press("Enter")  # folds the drawer away
    assert not drawer(page)["open"]
    page.keyboard.press("Enter")
    assert drawer(page)["open"]
    page.keyboard.press("Tab")  # the chosen tab (a roving tabindex), then arrows between tabs
    assert page.evaluate("document.activeElement.getAttribute('role')") == "tab"
    assert page.evaluate("document.activeElement.dataset.tab") == "measurements"
    page.keyboard.press("ArrowRight")
    assert drawer(page)["tab"] == "query"
    assert page.evaluate("document.activeElement.getAttribute('aria-selected')") == "true"
    page.keyboard.press("End")
    assert drawer(page)["tab"] == "notes"
    assert page.locator("#panel-notes [data-notes]").count() == 1
    page.keyboard.press("Home")
    assert drawer(page)["tab"] == "current"
    assert page.locator("[role=tab][aria-selected=true]").count() == 1


def area_of(page):
    return page.evaluate("(() => { const a = window.timelineTest.view.area; return {...a, tracks: [...a.tracks]}; })()")


def pivot(page) -> dict[str, dict[str, float]]:
    """The names table as numbers (each cell's exact figure rides in data-value)."""
    rows = page.evaluate("""[...document.querySelectorAll('[data-area] table.names tbody tr')].map(tr =>
        [tr.cells[0].textContent, ...[...tr.querySelectorAll('td.num')].map(td => Number(td.dataset.value))])""")
    return {r[0]: dict(zip(["count", "wall_ns", "self_ns", "avg_ns"], r[1:])) for r in rows}


def test_the_area_pivot_reads_the_dragged_tracks_and_equals_summary_and_sql(page, server):
    open_viewer(page, server, DDP)
    steps = page.evaluate("window.timelineTest.steps")
    a, b = steps[1]["start_ns"], steps[2]["start_ns"]
    # from the main thread down to its CUDA API track (the timeline splits the runtime calls out)
    canvas = page.locator("canvas").bounding_box()
    y0 = canvas["y"] + page.evaluate("window.timelineTest.trackY('main thread')") + 4
    y1 = canvas["y"] + page.evaluate("window.timelineTest.trackY('CUDA API · main thread')") + 4
    x0 = canvas["x"] + page.evaluate(f"window.timelineTest.xOf({a})")
    x1 = canvas["x"] + page.evaluate(f"window.timelineTest.xOf({b})")
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, y1, steps=3)
    page.mouse.move(x1, y1, steps=3)
    page.mouse.up()
    assert drawer(page)["tab"] == "area"
    area = area_of(page)
    labels = page.evaluate(f"{area['tracks']}.map(i => window.timelineTest.view.data.tracks[i].label)")
    assert [x.split(" · ")[0] for x in labels] == ["main thread", "CUDA API"], labels
    assert len(labels) < page.evaluate("window.timelineTest.view.data.tracks.length")
    shown = page.locator("[data-area] table.tracks tbody tr").count()
    assert shown == len(labels), "the track table lists the tracks the drag covered"
    # the pivot's figures are summary.js's for those tracks
    want = page.evaluate("""(a) => import('/static/timeline/summary.js').then(m =>
        m.areaSummary(window.timelineTest.view.data, a, a.tracks).names)""", area)
    got = pivot(page)
    assert len(got) == len(want)
    for n in want:
        assert got[n["name"]]["count"] == n["count"]
        assert got[n["name"]]["wall_ns"] == n["wall_ns"] and got[n["name"]]["self_ns"] == n["self_ns"]
    # ... and the SQL console's over the same window (absolute ns there)
    t0 = page.evaluate("window.timelineTest.t0_ns")
    lo, hi = area["start_ns"] + t0, area["end_ns"] + t0
    r = sql(page, f"SELECT count(*), sum(least(ts + dur, {hi}) - greatest(ts, {lo})) FROM slice "
                  f"WHERE name = 'cudaLaunchKernel' AND ts < {hi} AND ts + dur > {lo} AND track_id IN "
                  f"(SELECT id FROM track WHERE name LIKE '%(pt_main_thread)')")  # the main thread's tid
    count, wall = r["rows"][0]
    launches = got["cudaLaunchKernel"]
    assert launches["count"] == int(count) > 0
    assert launches["wall_ns"] == pytest.approx(float(wall), rel=1e-6)  # a sum of BIGINTs: a string in JSON
    # a track left out leaves the pivot
    cuda = next(i for i, x in zip(area["tracks"], labels) if x.startswith("CUDA API"))
    page.locator(f"[data-area] input[data-track='{cuda}']").uncheck()
    assert "cudaLaunchKernel" not in pivot(page)
    assert "1 of 2 tracks" in page.locator("[data-area]").inner_text()
    page.locator(f"[data-area] input[data-track='{cuda}']").check()
    # sortable: occurrences, most first, then fewest first
    page.locator("button[data-sort=count]").click()
    counts = [v["count"] for v in pivot(page).values()]
    assert counts == sorted(counts, reverse=True)
    assert page.locator("th[aria-sort=descending] button[data-sort=count]").count() == 1
    page.locator("button[data-sort=count]").click()
    counts = [v["count"] for v in pivot(page).values()]
    assert counts == sorted(counts)


def test_current_selection_shows_self_time_parent_and_children(page, server):
    open_viewer(page, server, DDP)
    page.keyboard.press("/")
    page.keyboard.type("ProfilerStep#35")
    page.keyboard.press("Enter")
    page.evaluate("window.timelineTest.idle()")
    assert drawer(page)["tab"] == "current"
    details = page.locator("[data-details]")
    assert "Self time" in details.inner_text() and "none: a top-level slice" in details.inner_text()
    children = details.locator("ol.children button")
    assert children.count() >= 2
    child = children.first.inner_text().split(" · ")[0]
    children.first.click()
    assert page.evaluate("window.timelineTest.selectedSlice()") == child
    details.locator(".related button").first.click()  # its parent
    assert page.evaluate("window.timelineTest.selectedSlice()") == "ProfilerStep#35"
    # self time = duration less the direct children's
    row = page.evaluate("window.timelineTest.view.selectedRow")
    dur, kids = page.evaluate(f"""import('/static/timeline/slicetree.js').then(m => {{
        const d = window.timelineTest.view.data;
        return [d.cols.dur[{row}], m.childrenOf(d, {row}).reduce((s, c) => s + d.cols.dur[c], 0)]; }})""")
    want = page.evaluate(f"import('/static/timeline/timescale.js').then(m => m.formatDuration({dur - kids}, 3))")
    assert details.locator("tr", has_text="Self time").locator("td").nth(1).inner_text() == want


def test_a_query_row_selects_and_reveals_its_slice(page, server):
    open_viewer(page, server, DDP)
    page.evaluate("window.timelineTest.setWindow(0, 2e6)")  # 2 ms at the start: the kernels are off-screen
    page.get_by_role("tab", name="Query").click()
    page.fill("#drawer-sql", "SELECT ts, dur, name FROM slice WHERE name LIKE 'ncclDevKernel%' ORDER BY ts")
    page.get_by_role("button", name="Run query").click()
    rows = page.locator("table.query-result tr.linked")
    rows.first.wait_for(timeout=20000)
    assert rows.count() == 4
    rows.nth(2).click()
    page.evaluate("window.timelineTest.idle()")
    assert page.evaluate("window.timelineTest.selectedSlice()").startswith("ncclDevKernel_AllReduce")
    assert drawer(page)["tab"] == "query", "the results stay in view to step through"
    box = page.evaluate("window.timelineTest.selectedBox()")
    width = page.evaluate("window.timelineTest.view.width")
    assert 230 <= box["x"] + box["w"] and box["x"] <= width, "revealed: the slice is on screen"
    t0 = page.evaluate("window.timelineTest.t0_ns")
    ts = float(rows.nth(2).locator("td").first.inner_text())
    row = page.evaluate("window.timelineTest.view.selectedRow")
    assert page.evaluate(f"window.timelineTest.view.data.cols.ts[{row}]") + t0 == pytest.approx(ts, abs=2)
    # a row with only a slice_id: the console finds where it is
    page.fill("#drawer-sql", "SELECT id AS slice_id FROM slice WHERE name = 'ProfilerStep#34'")
    page.locator("#drawer-sql").press("Control+Enter")  # runs it from the editor, as Perfetto's does
    page.locator("table.query-result tr.linked").first.wait_for(timeout=20000)
    page.locator("table.query-result tr.linked").first.focus()
    page.keyboard.press("Enter")
    wait_until(page, "window.timelineTest.selectedSlice() === 'ProfilerStep#34'", timeout=10000)
    # bad SQL and a write: one line in the status, nothing selected changes
    page.fill("#drawer-sql", "DELETE FROM slice")
    page.get_by_role("button", name="Run query").click()
    page.locator("[data-query-status]", has_text="only SELECT").wait_for(timeout=10000)
    assert page.evaluate("window.timelineTest.selectedSlice()") == "ProfilerStep#34"


def test_at_800_px_the_timeline_keeps_500_px(browser, server, tmp_path):  # noqa: F811
    pg = browser.new_page(viewport={"width": 800, "height": 900})
    try:
        open_viewer(pg, server, DDP)
        canvas = pg.locator("#viewer canvas").bounding_box()
        assert canvas["width"] >= 500
        assert pg.evaluate("window.timelineTest.view.scale.width") >= 500, "the drawing area, past the labels"
        drawer_box = pg.locator("#viewer .drawer").bounding_box()
        assert drawer_box["y"] >= canvas["y"] + canvas["height"] - 1
        shot = tmp_path / "viewer-800.png"
        pg.locator("#viewer").screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        pg.close()
