"""Accessibility in Debian's Chromium against a real server: axe-core (vendored under
static/vendor/, loaded here by the tests and never by a page) on every page a candidate, an
interviewer and a reviewer can open, with no serious or critical violation; and the
timeline's labels, which axe cannot see on a canvas, at 4.5:1 (WCAG AA for 11 px text)
against the fills the page actually paints them on."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.calibration import READS
from tests.server import Server, wait_until
from tests.browser import CHROMIUM
from tests.test_live import PASSWORD, add_user, staff_client

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
pw = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[test])")

ROOT = Path(__file__).resolve().parent.parent
AXE = sorted((ROOT / "static" / "vendor").glob("axe-core-4.*.min.js"))
FIXTURES = ROOT.parent / "shared" / "fixtures" / "kineto"


# --- WCAG relative luminance and contrast ratio --------------------------------------------

def _rgb(colour: str) -> tuple[float, float, float]:
    c = colour.strip().lower()
    if c.startswith("#"):
        h = c[1:]
        if len(h) == 3:
            h = "".join(ch * 2 for ch in h)
        return tuple(int(h[i:i + 2], 16) for i in (0, 2, 4))
    if c.startswith("rgb"):
        return tuple(float(v) for v in c[c.index("(") + 1:c.index(")")].split(",")[:3])
    raise ValueError(f"not a colour: {colour}")


def luminance(colour) -> float:
    def lin(v: float) -> float:
        v /= 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4
    r, g, b = colour if isinstance(colour, tuple) else _rgb(colour)
    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)


def contrast(a, b) -> float:
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def test_the_ratio_is_wcags():
    assert contrast("#fff", "#000") == pytest.approx(21)
    assert contrast("#fff", "#D55E00") == pytest.approx(3.87, abs=0.01)  # the NCCL figure
    assert contrast("#fff", "#009E73") == pytest.approx(3.42, abs=0.01)  # and its CPU-op one


# --- the browser -------------------------------------------------------------------------

# Every text the canvas draws, with its colour and box: recorded by wrapping fillText before
# the page's scripts run, cleared when a frame clears the canvas.
RECORD_TEXT = """
(() => {
  const P = CanvasRenderingContext2D.prototype, fillText = P.fillText, clearRect = P.clearRect;
  window.__texts = [];
  P.clearRect = function (x, y, w, h) {
    if (x === 0 && y === 0 && w * (window.devicePixelRatio || 1) >= this.canvas.width - 1) window.__texts = [];
    return clearRect.apply(this, arguments);
  };
  P.fillText = function (text, x, y) {
    const m = this.measureText(text);
    const t = this.getTransform();
    window.__texts.push({ text: String(text), x: x * t.a + t.e, y: y * t.d + t.f, w: m.width,
                          up: m.actualBoundingBoxAscent, down: m.actualBoundingBoxDescent,
                          fill: String(this.fillStyle), font: this.font });
    return fillText.apply(this, arguments);
  };
})();
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A server with staff (an admin, an interviewer, a reviewer), one ended round with a
    scorecard and one still open: (server, {name: value})."""
    s = Server(tmp_path_factory.mktemp("a11y"), 1, {"TRACEDOJO_SECRET_KEY": "a11y-test"})
    for email, role in (("ad@team.org", "admin"), ("iv@team.org", "interviewer"), ("rv@team.org", "reviewer")):
        add_user(s, email, role)
    s.start()
    try:
        iv = staff_client(s.base, "iv@team.org")
        ended = iv.post("/api/rounds", json={"scenario": "ddp", "seed": "canonical", "candidate_name": "Ada"}).json()
        cand = httpx.Client(base_url=s.base, timeout=30)
        cand.get(ended["candidate_url"])
        token = ended["candidate_url"].removeprefix("/r/")
        assert cand.put(f"/api/r/{token}/narration", json={"narration": READS["ddp"]["strong"][0]}).status_code == 200
        assert iv.post(f"/api/rounds/{ended['id']}/notes", json={"text": "went to the gap first"}).status_code == 200
        assert iv.post(f"/api/rounds/{ended['id']}/end").status_code == 200
        card = {"criteria": {c: 3 for c in ("discipline_order", "findings", "trap", "root_cause", "measurement",
                                            "fix_win")}, "recommendation": 3, "notes": "fine"}
        assert iv.put(f"/api/rounds/{ended['id']}/scorecard", json=card).status_code == 200
        live = iv.post("/api/rounds", json={"scenario": "launch-bound", "seed": "7", "candidate_name": "Bo"}).json()
        code = iv.get("/candidates.json").json()
        codes = [c.get("code") for c in (code.get("candidates") or [])] if isinstance(code, dict) else []
        invite = staff_client(s.base, "ad@team.org").post("/api/teams/gpu/invites",
                                                          json={"email": "new@team.org", "role": "interviewer"})
        assert invite.status_code == 201, invite.text
        yield s, {"ended": ended, "live": live, "candidate_code": codes[0] if codes else None,
                  "invite": invite.json()["invite_url"].removeprefix(s.base)}
    finally:
        s.stop()


def new_page(browser, width=1440, height=900):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    ctx.add_init_script(RECORD_TEXT)
    return ctx, ctx.new_page()


def login(page, base: str, email: str) -> None:
    page.goto(f"{base}/login")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", PASSWORD)
    with page.expect_navigation():
        page.click("button[type=submit]")


def settle(page) -> None:
    """Wait for a page's timeline (if it has one) to load and paint."""
    if page.locator(".viewer").count():  # every viewer on the page (before/after has two)
        wait_until(page, "[...document.querySelectorAll('[data-status]')].every((e) => /slices|could not/.test(e.textContent))",
                   30000)
        page.wait_for_timeout(150)


def axe_violations(page) -> list[str]:
    page.add_script_tag(url="/static/vendor/" + AXE[-1].name)
    # label-content-name-mismatch is experimental in axe 4 (off by default): it is the rule
    # that finds an accessible name not containing the visible text (the fit button)
    found = page.evaluate("""axe.run(document, { rules: { 'label-content-name-mismatch': { enabled: true } },
                                                 resultTypes: ['violations'] })
                             .then(r => r.violations.map(v => ({ id: v.id, impact: v.impact, help: v.help,
                                 nodes: v.nodes.slice(0, 4).map(n => n.target.join(' ') + ' :: ' + n.failureSummary) })))""")
    bad = [v for v in found if v["impact"] in ("serious", "critical")
           or (v["id"] == "label-content-name-mismatch")]
    return [f"{v['id']} ({v['impact']}): {v['help']}: {v['nodes']}" for v in bad]


def test_axe_core_is_vendored_with_its_licence():
    assert AXE, "static/vendor/axe-core-4.x.min.js is missing"
    version = AXE[-1].name.removeprefix("axe-core-").removesuffix(".min.js")
    assert (AXE[-1].parent / f"axe-core-{version}.LICENSE").is_file()
    assert f"axe v{version}" in AXE[-1].read_text(encoding="utf-8")[:300]
    # only tests load it: no page refers to it
    for t in (ROOT / "templates").glob("*.html"):
        assert "axe-core" not in t.read_text(encoding="utf-8"), t.name


def candidate_pages(page, base: str) -> list[str]:
    """The pages a candidate (an anonymous browser) can open, made as they would make them."""
    page.goto(f"{base}/practice")
    made = page.evaluate("""fetch('/api/attempts', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                                     body: JSON.stringify({scenario: 'ddp', seed: 'canonical'})}).then(r => r.json())""")
    open_round = page.evaluate("""fetch('/api/attempts', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                                     body: JSON.stringify({scenario: 'prefill', seed: '2'})}).then(r => r.json())""")
    aid = made["id"]
    page.evaluate(f"""fetch('/api/attempts/{aid}/submit', {{method: 'POST', headers: {{'Content-Type': 'application/json'}},
                       body: JSON.stringify({{narration: 'one step is 626 ms; the all-reduce is not overlapped', timed: false}})}})
                       .then(r => r.status)""")
    shared = page.evaluate(f"fetch('/api/attempts/{aid}/share', {{method: 'POST'}}).then(r => r.json())")
    pages = ["/", "/practice", f"/practice/{open_round['id']}", f"/practice/{aid}/report", "/attempts",
             shared["url"].removeprefix(base), "/scenarios/ddp/canonical", "/scenarios/straggler/canonical",
             "/scenarios/straggler/canonical/before-after", "/scenarios/skinny-gemm/canonical/fidelity", "/upload", "/login"]
    if FIXTURES.is_dir():
        up = httpx.post(f"{base}/api/traces", timeout=60,
                        files={"trace": ("rank0.json.gz", (FIXTURES / "hta_nccl_data_rank0.json.gz").read_bytes())})
        if up.status_code == 200:
            pages.append(up.json()["url"])
    return pages


def test_no_serious_violation_on_a_candidates_pages(site, browser):
    s, made = site
    ctx, page = new_page(browser)
    try:
        pages = candidate_pages(page, s.base) + [made["live"]["candidate_url"], made["invite"]]
        found = {}
        for path in pages:
            page.goto(s.base + path)
            settle(page)
            if bad := axe_violations(page):
                found[path] = bad
        assert not found, "\n".join(f"{p}:\n  " + "\n  ".join(v) for p, v in found.items())
    finally:
        ctx.close()


@pytest.mark.parametrize("who", ["iv@team.org", "rv@team.org", "ad@team.org"])
def test_no_serious_violation_on_the_staffs_pages(site, browser, who):
    s, made = site
    ctx, page = new_page(browser)
    try:
        login(page, s.base, who)
        rid = made["ended"]["id"]
        pages = ["/rounds", "/questions", "/candidates", "/compare?scenario=ddp", "/calibration", f"/rounds/{rid}/review"]
        if who != "rv@team.org":
            pages += [f"/rounds/{made['live']['id']}", f"/rounds/{rid}"]
        if who == "ad@team.org":
            pages += ["/teams/gpu"]
        if made["candidate_code"]:
            pages.append(f"/candidates/{made['candidate_code']}")
        found, checked = {}, []
        for path in pages:
            res = page.goto(s.base + path)
            if res is None or res.status >= 400:
                continue  # not this role's page
            settle(page)
            checked.append(path)
            if bad := axe_violations(page):
                found[path] = bad
        print(who, "checked", checked)
        assert len(checked) >= 6, checked
        assert not found, "\n".join(f"{p}:\n  " + "\n  ".join(v) for p, v in found.items())
    finally:
        ctx.close()


# --- the canvas's labels ------------------------------------------------------------------

def test_every_slice_colour_labels_at_4_5_to_1(site, browser):
    """The palette the painter uses (imported from the page's own module), for every slice
    colour it can produce, the selected slice's included."""
    s, _ = site
    ctx, page = new_page(browser)
    try:
        page.goto(f"{s.base}/scenarios/ddp/canonical")
        palette = page.evaluate("import('/static/timeline/paint.js').then(m => m.PALETTE)")
        assert len(palette) >= 7
        low = {cat: round(contrast(bg, fg), 2) for cat, (bg, fg, _) in palette.items() if contrast(bg, fg) < 4.5}
        assert not low, f"slice labels under 4.5:1: {low}"
        assert contrast("#000", "#fff") >= 4.5  # a selected slice: white on black
    finally:
        ctx.close()


def background_at(page, t: dict) -> tuple[int, int, int]:
    """The colour most painted in a label's box: its background (the glyphs' pixels are
    fewer and, antialiased, of many shades)."""
    px = page.evaluate("""(t) => {
        const c = document.querySelector('#viewer canvas'), d = window.devicePixelRatio || 1;
        const g = c.getContext('2d').getImageData(Math.round(t.x * d), Math.round((t.y - t.up) * d),
                                                  Math.max(1, Math.round(t.w * d)), Math.max(1, Math.round((t.up + t.down) * d))).data;
        const out = []; for (let i = 0; i < g.length; i += 4) out.push([g[i], g[i + 1], g[i + 2], g[i + 3]]); return out; }""", t)
    # a transparent pixel is the page's white behind the canvas
    cols = [tuple(p[:3]) if p[3] == 255 else (255, 255, 255) for p in px]
    return Counter(cols).most_common(1)[0][0]


@pytest.mark.parametrize("where", ["scenario", "report"])
def test_every_label_drawn_reads_at_4_5_to_1_on_what_it_is_drawn_on(site, browser, where):
    """Every text the timeline paints, its colour against the pixels painted beside it: the
    slices' names (NCCL and CPU ops among them), the ruler's, the tracks' and, on a report,
    the marks' names."""
    s, _ = site
    ctx, page = new_page(browser)
    try:
        if where == "scenario":
            page.goto(f"{s.base}/scenarios/ddp/canonical?testing=1")
        else:
            page.goto(f"{s.base}/practice")
            aid = page.evaluate("""fetch('/api/attempts', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                   body: JSON.stringify({scenario: 'ddp', seed: 'canonical'})}).then(r => r.json()).then(a => a.id)""")
            key = page.evaluate("fetch('/scenarios/ddp/canonical/key.json').then(r => r.json())")
            marks = {"step": key["marks"]["step"], "gap": {"start_us": key["marks"]["gap"]["start_us"] + 3000,
                                                            "end_us": key["marks"]["gap"]["end_us"] + 3000}}
            assert page.evaluate("""([aid, marks]) => fetch(`/api/attempts/${aid}/marks`, {method: 'PUT',
                headers: {'Content-Type': 'application/json'}, body: JSON.stringify(marks)}).then(r => r.status)""",
                                 [aid, marks]) == 200
            page.evaluate(f"""fetch('/api/attempts/{aid}/submit', {{method: 'POST', headers: {{'Content-Type': 'application/json'}},
                              body: JSON.stringify({{narration: 'the all-reduce is not overlapped', timed: false}})}})""")
            page.goto(f"{s.base}/practice/{aid}/report?testing=1")
        wait_until(page, "window.timelineTest !== undefined", 30000)
        page.evaluate("window.timelineTest.idle()")
        if where == "report":
            wait_until(page, "window.__texts.some(t => t.text === 'key: the gap')")
        texts = page.evaluate("window.__texts")
        labels = {t["text"] for t in texts}
        if where == "scenario":
            assert any(t.startswith("nccl") for t in labels) and any(t.startswith("aten::") for t in labels)
        width = page.evaluate("window.timelineTest.view.width")
        low = []
        for t in texts:
            if t["x"] < 2 or t["x"] > width - 4 or t["w"] < 1:
                continue
            bg = background_at(page, t)
            ratio = contrast(t["fill"], bg)
            if ratio < 4.5:
                low.append((t["text"], t["fill"], bg, round(ratio, 2)))
        assert not low, f"labels under 4.5:1: {sorted(set(low))[:20]}"
    finally:
        ctx.close()
