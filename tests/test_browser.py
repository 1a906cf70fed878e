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
from tests.server import running_server, wait_until

CHROMIUM = Path("/usr/bin/chromium")
pw = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[test])")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("db")) as base:
        yield base


@pytest.fixture(scope="module")
def browser():
    with pw.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    pg = browser.new_page(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    # the server's CSP is enforced here as in any browser: a violation is a broken page
    pg.on("console", lambda m: "Content Security Policy" in m.text and errors.append(m.text))
    yield pg
    pg.close()
    assert not errors, f"JavaScript errors: {errors}"


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
    panel = page.locator("[data-details]").inner_text()
    assert "Area selection" in panel and "Count" in panel and "Idle" in panel


def test_a_measurement_runs_beside_the_timeline(page, server):
    open_viewer(page, server, "/scenarios/launch-bound/canonical")
    options = page.locator("#tool-select option").all_inner_texts()
    assert any(o.startswith("nsys-api-sum") for o in options) and len(options) == len(tools.TOOLS)
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


def test_straggler_stacks_every_rank_and_charts_the_per_rank_run(page, server):
    open_viewer(page, server, "/scenarios/straggler/canonical")
    labels = page.evaluate("window.timelineTest.view.data.tracks.map(t => t.group + ' / ' + t.label)")
    assert "rank 3 · GPU 3 / stream 7 · compute" in labels
    assert any(t.startswith("rank 7 · GPU 7 / stream ") and t.endswith(" · NCCL") for t in labels)  # 40, 52 or 84
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
