// A round's review: the round replayed from its event log. The state at a moment is the
// log's events up to that moment applied in id order, the same fold the console does live
// and app/review/replay.py does on the server (the tests hold the two to each other).
// Going forward applies the next events; going back folds again from the start (a long
// round's log is a few thousand events: a fold is well under a frame).
import { drawMarks, marksText } from "./marks.js";
import { setupViewerPage } from "./viewer-page.js";
import { runLabel, showHtmxErrors, showRunOutput } from "./live-common.js";

const page = JSON.parse(document.getElementById("review-data").textContent);
const $ = (sel) => document.querySelector(sel);
showHtmxErrors($("[data-error]"));

const LANES = ["narration", "view", "marks", "run", "hint", "note", "integrity", "phase"];
const LANE_OF = { narration: "narration", viewport: "view", selection: "view", marks: "marks", run: "run", query: "run", hint: "hint",
  note: "note", integrity: "integrity", phase: "phase", lock: "phase", submit: "phase", end: "phase", opened: "phase",
  practice: "phase" };
const LANE_H = 9;

const fresh = () => ({ narration: "", marks: {}, runs: [], hints: [], notes: [], integrity: [], viewport: null,
  selection: null, phase: "waiting", locked: false, submitted: false, ended: false, last_event_id: 0 });

function apply(st, e) {
  const d = e.data || {};
  switch (e.kind) {
    case "narration": st.narration = st.narration.slice(0, d.at) + d.ins + st.narration.slice(d.at + d.del); break;
    case "marks": st.marks = { ...d }; break;
    case "run": case "query": st.runs.push({ ...d, at: e.at }); break;
    case "hint": st.hints.push({ index: d.index, title: d.title, at: e.at }); break;
    case "note": st.notes.push({ text: d.text, by: d.by, at: e.at }); break;
    case "integrity": st.integrity.push({ ...d, at: e.at }); break;
    case "viewport": st.viewport = d; break;
    case "selection": st.selection = d; break;
    case "phase": st.phase = d.phase || st.phase; break;
    case "lock": st.locked = !!d.locked; break;
    case "submit": st.submitted = true; st.locked = true; break;
    case "end": st.ended = true; st.phase = "ended"; st.locked = true; break;
    default: break;
  }
  st.last_event_id = e.id;
}

const mmss = (ms) => { const s = Math.max(0, Math.round(ms / 1000)); return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`; };
const hhmmss = (iso) => (iso ? iso.slice(11, 19) : "");

async function main() {
  const res = await fetch(page.json_url);
  if (!res.ok) { $("[data-error]").textContent = `could not load the round: HTTP ${res.status}`; $("[data-error]").hidden = false; return; }
  const data = await res.json();
  const events = data.events;
  const offs = data.axis.offsets_ms;
  const dur = data.axis.duration_ms || 0;
  const idleMs = data.axis.idle_skip_s * 1000;
  const start = data.axis.start ? Date.parse(data.axis.start) : 0;

  let st = fresh(), cursor = 0, t = dur, playing = false, speed = 4, lastFrame = 0, tl = null, shownView = null, shownSel = null;
  const scrub = $("[data-scrub]");
  const playBtn = $("[data-play]");

  function seek(ms) {
    ms = Math.max(0, Math.min(dur, ms));
    if (ms < t || cursor === 0) { st = fresh(); cursor = 0; }
    while (cursor < events.length && offs[cursor] <= ms) apply(st, events[cursor++]);
    t = ms;
    render();
  }

  function list(sel, items, text) {
    $(sel).replaceChildren(...items.map((it) => { const li = document.createElement("li"); li.textContent = text(it); return li; }));
  }

  const showRun = (run) => showRunOutput($("[data-run-output]"), page.tool_base, run);

  function render() {
    scrub.value = String(Math.round(t));
    $("[data-clock]").textContent = `${mmss(t)} / ${mmss(dur)}`;
    $("[data-at]").textContent = t >= dur ? "the end" : `${mmss(t)} (${hhmmss(new Date(start + t).toISOString())} UTC)`;
    $("[data-phase]").textContent = `${st.phase}${st.locked && !st.ended ? " · locked" : ""}${st.submitted ? " · submitted" : ""}`;
    $("[data-narration]").textContent = st.narration;
    $("[data-marks]").textContent = marksText(st.marks) || "none yet";
    $("[data-runs]").replaceChildren(...st.runs.map((r) => {
      const li = document.createElement("li");
      const b = document.createElement("button");
      b.type = "button"; b.className = "linkish";
      b.textContent = runLabel(r);
      b.addEventListener("click", () => showRun(r));
      li.append(b, ` · ${hhmmss(r.at)}`);
      return li;
    }));
    list("[data-hints]", st.hints, (h) => `${hhmmss(h.at)} ${h.title}`);
    list("[data-round-notes]", st.notes, (n) => `${hhmmss(n.at)} ${n.text} (${(n.by || "").split("@")[0]})`);
    list("[data-integrity]", st.integrity.slice(-50), (i) => `${hhmmss(i.at)} ${{ hidden: "tab hidden", visible: "tab shown again",
      paste: `pasted ${i.chars ?? "?"} characters`, blur: "window left", focus: "window back" }[i.what] || i.what}`);
    if (tl) {
      drawMarks(tl, st.marks);
      if (st.viewport !== shownView || st.selection !== shownSel) {
        shownView = st.viewport; shownSel = st.selection;
        tl.mirror({ viewport: st.viewport, selection: st.selection || { area: null, row: null } });
      }
    }
    drawHead();
  }

  // --- the lanes: every event as a tick on its lane, one time axis; a click goes there ---
  const svg = $("[data-lanes]");
  const NS = "http://www.w3.org/2000/svg";
  let head = null;
  function drawLanes() {
    const w = svg.clientWidth || 800;
    svg.setAttribute("viewBox", `0 0 ${w} ${LANES.length * LANE_H}`);
    svg.setAttribute("height", String(LANES.length * LANE_H));
    const cols = Object.fromEntries(LANES.map((l) => [l, new Set()]));
    events.forEach((e, i) => { const lane = LANE_OF[e.kind]; if (lane) cols[lane].add(Math.round(dur ? (offs[i] / dur) * (w - 1) : 0)); });
    const nodes = [];
    for (const [n, start] of (data.axis.idle || []).entries()) {
      const r = document.createElementNS(NS, "rect");
      const x0 = (start[0] / dur) * w, x1 = (start[1] / dur) * w;
      r.setAttribute("x", String(x0)); r.setAttribute("width", String(Math.max(0.5, x1 - x0)));
      r.setAttribute("y", "0"); r.setAttribute("height", String(LANES.length * LANE_H)); r.setAttribute("class", "idle");
      r.dataset.n = String(n);
      nodes.push(r);
    }
    LANES.forEach((lane, k) => {
      const d = [...cols[lane]].map((x) => `M${x + 0.5} ${k * LANE_H + 1}v${LANE_H - 2}`).join("");
      const p = document.createElementNS(NS, "path");
      p.setAttribute("d", d); p.setAttribute("class", `tick lane-${lane}`);
      nodes.push(p);
    });
    head = document.createElementNS(NS, "line");
    head.setAttribute("class", "playhead"); head.setAttribute("y1", "0"); head.setAttribute("y2", String(LANES.length * LANE_H));
    nodes.push(head);
    svg.replaceChildren(...nodes);
    drawHead();
  }
  function drawHead() {
    if (!head) return;
    const x = dur ? (t / dur) * ((svg.clientWidth || 800) - 1) + 0.5 : 0.5;
    head.setAttribute("x1", String(x)); head.setAttribute("x2", String(x));
  }
  svg.addEventListener("click", (e) => { const box = svg.getBoundingClientRect(); pause(); seek(((e.clientX - box.left) / box.width) * dur); });
  new ResizeObserver(drawLanes).observe(svg);

  // --- play: round time runs at `speed`, and a stretch with nothing in it is skipped ---
  function frame(now) {
    if (!playing) return;
    const dt = lastFrame ? now - lastFrame : 0;
    lastFrame = now;
    let next = t + dt * speed;
    if (cursor < events.length && offs[cursor] - next > idleMs) {
      $("[data-skipped]").textContent = `skipped ${mmss(offs[cursor] - 500 - next)} with nothing happening`;
      next = offs[cursor] - 500;
    }
    seek(next);
    if (t >= dur) { pause(); return; }
    requestAnimationFrame(frame);
  }
  function play() {
    if (t >= dur) seek(0);
    playing = true; lastFrame = 0; playBtn.textContent = "❚❚ Pause"; playBtn.setAttribute("aria-label", "pause");
    requestAnimationFrame(frame);
  }
  function pause() { playing = false; playBtn.textContent = "▶ Play"; playBtn.setAttribute("aria-label", "play"); }
  playBtn.addEventListener("click", () => (playing ? pause() : play()));
  $("[data-speed]").addEventListener("change", (e) => { speed = Number(e.target.value); });
  speed = Number($("[data-speed]").value);
  scrub.addEventListener("input", () => { pause(); seek(Number(scrub.value)); });

  seek(dur);
  drawLanes();
  window.tracedojoReview = { seek, offset: () => t, state: () => st, duration: dur, start: data.axis.start, events: () => events,
    offsets: offs, play, pause, playing: () => playing, ready: true, viewer: null };

  setupViewerPage(document.getElementById("viewer"), { runs: { list: () => [], record: async () => [] } }).then((api) => {
    tl = api; window.tracedojoReview.viewer = api; shownView = shownSel = null; render();
  });
}

main();
