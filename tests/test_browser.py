"""The viewer as a person uses it: a real server, Debian's Chromium driven by Playwright.

Skips with the reason when Chromium or Playwright is missing (./run test and .ci/run
install both).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import scenarios
from app import tools
from app.scenario import observation
from tests.browser import needs_chromium
from tests.server import wait_until

pytestmark = needs_chromium  # server, browser and page: tests/conftest.py


def measurements_tab(page):
    """The tools live in the drawer's Measurements tab: a selection may have switched away."""
    page.get_by_role("tab", name="Measurements").click()


def open_viewer(page, server, path: str):
    page.goto(f"{server}{path}{'&' if '?' in path else '?'}testing=1")
    try:
        wait_until(page, "window.timelineTest !== undefined", timeout=20000)
    except Exception:
        print("STATUS", page.locator("[data-status]").inner_text(), page.url)
        raise
    page.evaluate("window.timelineTest.idle()")


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_every_scenario_loads_and_draws(page, server, sid):
    open_viewer(page, server, f"/scenarios/{sid}/canonical")
    assert page.evaluate("window.timelineTest.visibleSliceCount()") > 50
    assert page.locator(".brief").inner_text().strip()


def test_keys_zoom_and_pan(page, server):
    open_viewer(page, server, "/scenarios/ddp/canonical")
    before = page.evaluate("window.timelineTest.window()")
    page.locator("canvas").focus()
    page.keyboard.down("w")
    page.wait_for_timeout(400)
    page.keyboard.up("w")
    page.evaluate("window.timelineTest.idle()")
    zoomed = page.evaluate("window.timelineTest.window()")
    assert zoomed["end_ns"] - zoomed["start_ns"] < 0.8 * (before["end_ns"] - before["start_ns"])
    page.keyboard.down("d")
    page.wait_for_timeout(300)
    page.keyboard.up("d")
    page.evaluate("window.timelineTest.idle()")
    assert page.evaluate("window.timelineTest.window()")["start_ns"] > zoomed["start_ns"]


def test_search_finds_a_kernel_and_a_click_shows_its_details(page, server):
    open_viewer(page, server, "/scenarios/ddp/canonical")
    page.keyboard.press("/")
    page.keyboard.type("ncclDevKernel_AllReduce")
    count = page.locator("[data-search-count]")
    assert count.inner_text() == "4 matches"  # one all-reduce per step, four steps
    page.keyboard.press("Enter")
    page.evaluate("window.timelineTest.idle()")
    assert page.evaluate("window.timelineTest.selectedSlice()").startswith("ncclDevKernel_AllReduce")
    box = page.evaluate("window.timelineTest.selectedBox()")
    page.locator("canvas").focus()
    page.keyboard.press("Escape")
    canvas = page.locator("canvas").bounding_box()
    page.mouse.click(canvas["x"] + box["x"] + min(box["w"], 200) / 2, canvas["y"] + box["y"] + box["h"] / 2)
    page.evaluate("window.timelineTest.idle()")
    details = page.locator("[data-details]").inner_text()
    assert "ncclDevKernel_AllReduce" in details and "stream" in details and "Launched by" in details
    page.locator("[data-details] h3", has_text="Arguments").wait_for(timeout=5000)
    assert "grid" in page.locator("[data-details]").inner_text()  # the kernel's launch config, from the server
    page.locator("canvas").focus()
    page.keyboard.press("BracketLeft")  # follow the flow back to the launch
    assert page.evaluate("window.timelineTest.selectedSlice()") == "cudaLaunchKernel"
    page.keyboard.press("BracketRight")
    assert page.evaluate("window.timelineTest.selectedSlice()").startswith("ncclDevKernel_AllReduce")
    page.keyboard.press("p")  # pin the NCCL stream above everything
    first = page.evaluate("window.timelineTest.view.layout.items[0]")
    assert first["kind"] == "track" and first["pinned"]
    assert page.evaluate(f"window.timelineTest.view.data.tracks[{first['track']}].label").endswith("NCCL")


@pytest.mark.parametrize("sid", ["dataloader", "launch-bound"])
def test_area_selecting_one_step_reads_the_step(page, server, sid):
    inst = scenarios.get(sid).instance("canonical")
    open_viewer(page, server, f"/scenarios/{sid}/canonical")
    steps = page.evaluate("window.timelineTest.steps")
    s = steps[1]
    pad = 0.05 * (s["end_ns"] - s["start_ns"])
    page.evaluate(f"window.timelineTest.setWindow({s['start_ns'] - pad}, {s['end_ns'] + pad})")
    page.evaluate("window.timelineTest.idle()")
    drag(page, s["start_ns"], steps[2]["start_ns"])
    sel = page.evaluate("window.timelineTest.selection()")
    # the selection reads this step's length; steps vary token to token by a few percent about the key's mean
    assert (sel["end_us"] - sel["start_us"]) * 1e3 == pytest.approx(steps[2]["start_ns"] - s["start_ns"], rel=0.01)
    assert (sel["end_us"] - sel["start_us"]) / 1e3 == pytest.approx(observation(inst.key, "step_ms"), rel=0.03)
    # the drawer's Area selection tab opens on the drag (it was the side panel's [data-details])
    assert page.evaluate("window.timelineTest.drawer().tab") == "area"
    panel = page.locator("[data-area]").inner_text()
    assert "Area selection" in panel and "Occurrences" in panel and "Idle" in panel


def test_a_measurement_runs_beside_the_timeline(page, server):
    open_viewer(page, server, "/scenarios/launch-bound/canonical")
    options = page.locator("#tool-select option").all_inner_texts()
    assert any(o.startswith("nsys-api-sum") for o in options) and len(options) == len(tools.TOOLS)
    measurements_tab(page)
    page.select_option("#tool-select", label=next(o for o in options if o.startswith("nsys-api-sum")))
    page.get_by_role("button", name="Run").click()
    out = page.locator("[data-tool-output]")
    out.filter(has_text="cudaLaunchKernel").wait_for(timeout=10000)
    assert "cuda_api_sum" in out.inner_text()
    runs = page.evaluate("window.tracedojoRuns()")
    assert [r["tool"] for r in runs] == ["nsys-api-sum"] and runs[0]["since_open_s"] >= 0
    page.reload()
    wait_until(page, "window.tracedojoRuns !== undefined")
    assert len(page.evaluate("window.tracedojoRuns()")) == 1, "runs survive a reload"
    assert "nsys-api-sum" in page.locator("[data-tool-runs]").inner_text()


FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kineto"


@pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"shared fixtures not found at {FIXTURES}")
def test_the_upload_page_shows_a_real_trace(page, server):
    page.goto(f"{server}/upload")
    page.set_input_files("input[type=file]", str(FIXTURES / "hta_nccl_data_rank0.json.gz"))
    with page.expect_navigation():
        page.locator("form.upload button").click()
    assert "/traces/" in page.url
    open_viewer(page, server, page.url.removeprefix(server))
    assert page.evaluate("window.timelineTest.visibleSliceCount()") > 100
    labels = page.evaluate("window.timelineTest.view.data.tracks.map(t => t.label)")
    assert "stream 7 · compute" in labels and "stream 40 · NCCL" in labels
    assert len(page.evaluate("window.timelineTest.steps")) == 3  # ProfilerStep#4-6
    assert "Step boundary" in page.locator("pre.read").inner_text()
    src = page.evaluate("window.timelineTest.view.data.cols.src[0]")
    ev = page.evaluate(f"fetch(document.getElementById('viewer').dataset.sliceUrl.replace('{{src}}', '{int(src)}')).then(r => r.json())")
    assert ev["ph"] == "X" and "name" in ev


def test_straggler_opens_on_the_briefs_rank_and_stacks_every_rank_on_request(page, server):
    """The brief hands over rank 0's trace: the viewer opens on it alone (stacked, the slow rank
    showed before the read began), and stacks every rank, each row named by its rank, on request."""
    open_viewer(page, server, "/scenarios/straggler/canonical")
    groups = page.evaluate("window.timelineTest.view.data.tracks.map(t => t.group)")
    assert groups and not any(g.startswith("rank ") for g in groups)
    assert page.get_by_role("link", name="all ranks").count() == 1
    open_viewer(page, server, "/scenarios/straggler/canonical?rank=all")
    labels = page.evaluate("window.timelineTest.view.data.tracks.map(t => t.group + ' / ' + t.label)")
    assert "rank 3 · GPU 3 / rank 3 · stream 7 · compute" in labels  # the row names its rank, not only its group
    assert any(t.startswith("rank 7 · GPU 7 / rank 7 · stream ") and t.endswith(" · NCCL") for t in labels)  # 40, 52 or 84
    measurements_tab(page)
    page.select_option("#tool-select", label=next(o for o in page.locator("#tool-select option").all_inner_texts()
                                                  if o.startswith("per-rank")))
    page.get_by_role("button", name="Run").click()
    page.locator("[data-tool-chart] .uplot").wait_for(timeout=10000)
    assert "slowest: rank 3" in page.locator("[data-tool-chart]").inner_text()


def test_prefill_shows_the_itl_series_and_ncu_draws_a_roofline(page, server):
    open_viewer(page, server, "/scenarios/prefill/canonical")
    page.locator(".views .uplot").wait_for(timeout=10000)
    assert "inter-token latency" in page.locator(".views").inner_text().lower()
    open_viewer(page, server, "/scenarios/skinny-gemm/canonical")
    measurements_tab(page)
    page.select_option("#tool-select", label=next(o for o in page.locator("#tool-select option").all_inner_texts()
                                                  if o.startswith("ncu")))
    page.get_by_role("button", name="Run").click()
    page.locator("[data-tool-chart] .uplot").wait_for(timeout=10000)
    assert "Roofline" in page.locator("[data-tool-chart]").inner_text()


# --- the practice round ------------------------------------------------------------------

def start_round(page, server, scenario="ddp", seed="canonical"):
    page.goto(f"{server}/practice")
    row = page.locator(".picker li", has=page.locator(f"input[name=scenario][value='{scenario}']"))
    row.locator("input[name=seed]").fill(seed)
    with page.expect_navigation():
        row.get_by_role("button", name="Practice").click()
    url = page.url
    open_viewer(page, server, url.removeprefix(server))
    return url


def drag(page, start_ns, end_ns, track="main thread"):
    canvas = page.locator("canvas").bounding_box()
    y = canvas["y"] + page.evaluate(f"window.timelineTest.trackY('{track}')") + 4
    x0 = canvas["x"] + page.evaluate(f"window.timelineTest.xOf({start_ns})")
    x1 = canvas["x"] + page.evaluate(f"window.timelineTest.xOf({end_ns})")
    page.mouse.move(x0, y)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, y + 30, steps=3)
    page.mouse.move(x1, y + 40, steps=3)
    page.mouse.up()


def test_a_whole_practice_round(page, server):
    from tests.calibration import READS

    key = scenarios.get("ddp").instance("canonical").key
    url = start_round(page, server)
    html = page.content()
    for secret in (key["model_answer"], key["root_cause"], key["fix"]):
        assert secret not in html, "the key stays on the server until submission"
    twin = page.evaluate(f"fetch('{url.removeprefix(server)}.json').then(r => r.text())")
    assert key["model_answer"] not in twin and key["root_cause"] not in twin
    # mark one step and the gap with the area selection
    steps = page.evaluate("window.timelineTest.steps")
    s = steps[1]
    page.evaluate(f"window.timelineTest.setWindow({s['start_ns'] - 2e7}, {steps[2]['start_ns'] + 2e7})")
    page.evaluate("window.timelineTest.idle()")
    drag(page, s["start_ns"], steps[2]["start_ns"])
    page.get_by_role("button", name="Mark one step").click()
    t0 = page.evaluate("window.timelineTest.t0_ns")
    g0, g1 = (key["marks"]["gap"][k] * 1e3 - t0 for k in ("start_us", "end_us"))
    page.evaluate(f"window.timelineTest.setWindow({g0 - (g1 - g0)}, {g1 + (g1 - g0)})")
    page.evaluate("window.timelineTest.idle()")
    drag(page, g0, g1, "stream 7")
    page.get_by_role("button", name="Mark the gap").click()
    wait_until(page, "Object.keys(window.tracedojoPractice.marks()).length === 2")
    # run a measurement, then narrate
    measurements_tab(page)
    page.select_option("#tool-select", label=next(o for o in page.locator("#tool-select option").all_inner_texts()
                                                  if o.startswith("nsys-kern-sum")))
    page.get_by_role("button", name="Run").click()
    page.locator("[data-tool-runs] li").first.wait_for(timeout=10000)
    page.fill("#narration", READS["ddp"]["strong"][0])
    page.evaluate("window.tracedojoPractice.save()")
    with page.expect_navigation():
        page.get_by_role("button", name="Submit for scoring").click()
    assert page.url.endswith("/report")
    assert int(page.locator("[data-total]").inner_text()) >= 80
    marks = page.locator(".marks-result").inner_text()
    assert marks.count("right") == 2, marks
    assert key["model_answer"] in page.content()
    assert page.locator("mark.ev").count() > 5, "evidence is highlighted in the narration"
    with page.expect_navigation():
        page.get_by_role("button", name="Same pathology, new numbers").click()
    assert "/practice/" in page.url and not page.url.endswith("/report")


def test_autosave_survives_a_reload_and_html_stays_text(page, server):
    start_round(page, server, "launch-bound", "7")
    text = "<script>window.pwned = 1</script><b>28 ms</b> per token & 1,100 kernels"
    page.fill("#narration", text)
    page.locator("[data-saved]", has_text="saved").wait_for(timeout=10000)
    page.reload()
    page.wait_for_selector("#narration")
    assert page.input_value("#narration") == text
    with page.expect_navigation():
        page.get_by_role("button", name="Submit for scoring").click()
    assert page.evaluate("window.pwned === undefined")
    assert "<script>window.pwned = 1</script>" in page.locator(".narration").inner_text()


def test_an_oversize_narration_is_refused_with_a_clear_message(page, server):
    start_round(page, server, "prefill", "2")
    page.evaluate("document.getElementById('narration').removeAttribute('maxlength')")
    page.fill("#narration", "x" * 200_000)
    page.get_by_role("button", name="Submit for scoring").click()
    err = page.locator("[data-error]")
    err.wait_for(state="visible", timeout=10000)
    assert "limit is 20,000" in err.inner_text()
    assert "/report" not in page.url


# --- layout and polish (issue 14, item 7) --------------------------------------------------

# What the canvas draws, recorded before the page's scripts run: every text with its box and
# colour, every straight line, cleared when a frame clears the canvas.
RECORD_CANVAS = """
(() => {
  const P = CanvasRenderingContext2D.prototype, fillText = P.fillText, clearRect = P.clearRect;
  const moveTo = P.moveTo, lineTo = P.lineTo;
  window.__texts = []; window.__lines = [];
  const at = (ctx, x, y) => { const t = ctx.getTransform(); return [x * t.a + t.e, y * t.d + t.f]; };
  P.clearRect = function (x, y, w) {
    if (x === 0 && y === 0 && w * (window.devicePixelRatio || 1) >= this.canvas.width - 1) { window.__texts = []; window.__lines = []; }
    return clearRect.apply(this, arguments);
  };
  P.fillText = function (text, x, y) {
    const m = this.measureText(text), [X, Y] = at(this, x, y);
    window.__texts.push({ text: String(text), x: X, y: Y, w: m.width, up: m.actualBoundingBoxAscent,
                          down: m.actualBoundingBoxDescent, font: this.font, fill: String(this.fillStyle) });
    return fillText.apply(this, arguments);
  };
  P.moveTo = function (x, y) { this.__at = at(this, x, y); return moveTo.apply(this, arguments); };
  P.lineTo = function (x, y) {
    const p = at(this, x, y);
    if (this.__at) window.__lines.push([this.__at[0], this.__at[1], p[0], p[1]]);
    this.__at = p;
    return lineTo.apply(this, arguments);
  };
})();
"""


@pytest.fixture
def traced(browser):
    """A page whose canvas drawing is recorded (RECORD_CANVAS), at 1440 x 900 unless resized."""
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    ctx.add_init_script(RECORD_CANVAS)
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    ctx.close()
    assert not errors, f"JavaScript errors: {errors}"


def box(t):
    return (t["x"], t["y"] - t["up"], t["x"] + t["w"], t["y"] + t["down"])


def overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def drawn_texts(page):
    page.evaluate("window.timelineTest.idle()")
    width = page.evaluate("window.timelineTest.view.width")
    return [t for t in page.evaluate("window.__texts") if t["w"] > 0 and -1 < t["x"] < width]


def test_one_spelling_practice_everywhere(page, server):
    for path in ("/", "/practice", "/attempts", "/scenarios/ddp/canonical"):
        page.goto(server + path)
        text = page.locator("body").inner_text()
        assert "practise" not in text.lower(), path
        assert page.locator("header nav a[href='/practice']").inner_text() == "Practice"
    page.goto(server + "/practice")
    assert page.locator(".picker button").first.inner_text() == "Practice"


def test_the_help_keeps_words_whole_fits_at_800_px_and_closes(page, server):
    page.set_viewport_size({"width": 800, "height": 900})
    open_viewer(page, server, "/scenarios/ddp/canonical")
    canvas = page.locator("canvas")
    canvas.focus()
    page.keyboard.press("?")
    help_ = page.locator("[data-help]")
    assert help_.is_visible()
    # no word broken across lines: each word's text is one box
    broken = page.evaluate("""(() => {
      const out = [], walk = document.createTreeWalker(document.querySelector('[data-help]'), NodeFilter.SHOW_TEXT);
      for (let n = walk.nextNode(); n; n = walk.nextNode()) {
        for (const m of n.data.matchAll(/\\S+/g)) {
          const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
          const tops = new Set([...r.getClientRects()].map(b => Math.round(b.top)));
          if (tops.size > 1) out.push(m[0]);
        }
      }
      return out; })()""")
    assert not broken, f"words broken mid-word: {broken}"
    # not clipped: inside the window and the viewer, nothing hidden inside it
    h = help_.bounding_box()
    v = page.locator("#viewer").bounding_box()
    assert h["x"] >= 0 and h["x"] + h["width"] <= 800 and h["x"] >= v["x"] and h["x"] + h["width"] <= v["x"] + v["width"]
    assert h["y"] + h["height"] <= v["y"] + v["height"]
    assert page.evaluate("(e => e.scrollWidth <= e.clientWidth + 1)(document.querySelector('[data-help]'))")
    # a visible close button, focused; closing returns the focus to the timeline
    close = help_.get_by_role("button", name="close")
    assert close.is_visible() and close.evaluate("e => e === document.activeElement")
    close.click()
    assert not help_.is_visible()
    assert canvas.evaluate("e => e === document.activeElement")
    page.keyboard.press("?")
    assert help_.is_visible()
    page.keyboard.press("Escape")
    assert not help_.is_visible()
    assert canvas.evaluate("e => e === document.activeElement")


def submitted_round(page, server, marks_offset_us=3000):
    """A ddp round with the reader's marks (its gap a little off the key's), submitted: the
    report's URL."""
    key = scenarios.get("ddp").instance("canonical").key
    page.goto(f"{server}/practice")
    aid = page.evaluate("""fetch('/api/attempts', {method: 'POST', headers: {'Content-Type': 'application/json'},
                           body: JSON.stringify({scenario: 'ddp', seed: 'canonical'})}).then(r => r.json()).then(a => a.id)""")
    gap = key["marks"]["gap"]
    marks = {"step": key["marks"]["step"], "gap": {"start_us": gap["start_us"] + marks_offset_us,
                                                    "end_us": gap["end_us"] + marks_offset_us}}
    assert page.evaluate("""([aid, marks]) => fetch(`/api/attempts/${aid}/marks`, {method: 'PUT',
        headers: {'Content-Type': 'application/json'}, body: JSON.stringify(marks)}).then(r => r.status)""", [aid, marks]) == 200
    return aid, key


MARK_LABELS = {"your step", "your gap", "key: one step", "key: the gap", "one step", "the gap"}


@pytest.mark.parametrize("where", ["round", "report"])
def test_mark_names_overprint_nothing(traced, server, where):
    """'the gap' on a round, and on the report 'your step' / 'key: one step' / 'your gap' /
    'key: the gap', each clear of the others and of every slice's and step's name, the key's
    set apart by more than colour."""
    page = traced
    aid, key = submitted_round(page, server)
    if where == "report":
        page.evaluate(f"""fetch('/api/attempts/{aid}/submit', {{method: 'POST', headers: {{'Content-Type': 'application/json'}},
                          body: JSON.stringify({{narration: 'the all-reduce is not overlapped', timed: false}})}})""")
        open_viewer(page, server, f"/practice/{aid}/report")
        wait_until(page, "window.__texts.some(t => t.text === 'key: the gap')")
    else:
        open_viewer(page, server, f"/practice/{aid}")
        wait_until(page, "window.__texts.some(t => t.text === 'the gap')")
    t0 = page.evaluate("window.timelineTest.t0_ns")
    s0 = key["marks"]["step"]["start_us"] * 1e3 - t0
    g1 = key["marks"]["gap"]["end_us"] * 1e3 - t0 + 3e6
    g0 = key["marks"]["gap"]["start_us"] * 1e3 - t0 + 3e6
    for window in ((s0 - 0.2 * (g1 - s0), g1 + 0.2 * (g1 - s0)), (g0 - 0.5 * (g1 - g0), g1 + 0.5 * (g1 - g0)),
                   (g0 - 3 * (g1 - g0), g1 + 3 * (g1 - g0)), None):
        if window:
            page.evaluate(f"window.timelineTest.setWindow({window[0]}, {window[1]})")
        texts = drawn_texts(page)
        marks = [t for t in texts if t["text"] in MARK_LABELS]
        assert len(marks) == (4 if where == "report" else 2), [t["text"] for t in marks]
        for m in marks:
            hit = [t["text"] for t in texts if t is not m and overlaps(box(m), box(t))]
            assert not hit, f"{m['text']!r} overprints {hit}"
    if where == "report":
        fonts = {t["text"]: t["font"] for t in marks}
        assert "italic" in fonts["key: the gap"] and "italic" not in fonts["your gap"]


def test_step_names_clear_of_the_ruler_ticks(traced, server):
    page = traced
    open_viewer(page, server, "/scenarios/ddp/canonical")
    for k in range(3):
        texts = drawn_texts(page)
        steps = [t for t in texts if t["text"].startswith("step ")]
        assert steps
        ticks = [ln for ln in page.evaluate("window.__lines") if abs(ln[0] - ln[2]) < 0.01 and max(ln[1], ln[3]) <= 40]
        for s in steps:
            x0, y0, x1, y1 = box(s)
            crossing = [ln for ln in ticks if x0 <= ln[0] <= x1 and min(ln[1], ln[3]) < y1 and max(ln[1], ln[3]) > y0]
            assert not crossing, f"{s['text']!r} is crossed by the ruler's tick at x={crossing[0][0]:.1f}"
            hit = [t["text"] for t in texts if t is not s and overlaps(box(s), box(t))]
            assert not hit, f"{s['text']!r} overprints {hit}"
        page.locator("canvas").focus()
        page.keyboard.down("w"); page.wait_for_timeout(150); page.keyboard.up("w")


def test_a_pinned_tracks_label_draws_no_missing_glyph(traced, server):
    page = traced
    open_viewer(page, server, "/scenarios/ddp/canonical")
    page.keyboard.press("/")
    page.keyboard.type("ncclDevKernel_AllReduce")
    page.keyboard.press("Enter")
    page.locator("canvas").focus()
    page.keyboard.press("p")
    assert page.evaluate("window.timelineTest.view.layout.items[0].pinned")
    texts = drawn_texts(page)
    label = [t["text"] for t in texts if t["text"].endswith("NCCL") and t["x"] < 230]
    assert label and label[0].startswith("stream"), label
    # every character drawn is one Debian's default fonts have: nothing from the emoji planes
    odd = {c for t in texts for c in t["text"] if ord(c) >= 0x2600}
    assert not odd, f"characters without a glyph in system-ui: {[hex(ord(c)) for c in odd]}"


@pytest.mark.parametrize("width", [800, 1440, 1920])
def test_the_timeline_is_usable_at_every_width(traced, server, width):
    page = traced
    page.set_viewport_size({"width": width, "height": 900})
    open_viewer(page, server, "/scenarios/ddp/canonical")
    drawing = page.evaluate("window.timelineTest.view.scale.width")
    assert drawing >= 500, f"{drawing:.0f} px of drawing width at {width} px"
    ticks = [t["text"] for t in drawn_texts(page) if t["y"] < 17 and t["x"] >= 230]
    assert len(ticks) >= 3 and ticks != ["0 ns"], ticks
    canvas = page.locator("#viewer canvas").bounding_box()
    drawer = page.locator("#viewer .drawer").bounding_box()
    # the drawer (it was a side panel) sits under the timeline at every width, as wide as it
    assert drawer["y"] >= canvas["y"] + canvas["height"] - 1, "the drawer stacks below the timeline"
    assert drawer["width"] >= canvas["width"] - 2
    assert canvas["height"] >= 0.6 * 900 - 1, "by default the timeline keeps 60% of the window's height"
