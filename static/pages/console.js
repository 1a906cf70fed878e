// The interviewer's console: the candidate's view mirrored as it changes (window, area,
// selected slice, marks), their narration as typed, the measurements they ran with the
// output they saw, integrity signals, and the round's own events (hints, phase, lock,
// notes, end) from every interviewer watching. The round's event log is the truth: the
// page starts from the state up to `after` and follows /rounds/{id}/events from there;
// EventSource reconnects by itself and resumes from the last id it saw.
import { drawMarks, marksText } from "./marks.js";
import { setupViewerPage } from "./viewer-page.js";
import { readTimer, runLabel, showHtmxErrors, showRunOutput, tickClock, words } from "./live-common.js";

const page = JSON.parse(document.getElementById("console-data").textContent);
const root = document.getElementById("viewer");
const $ = (sel) => document.querySelector(sel);
showHtmxErrors($("[data-error]"));

// --- the candidate link: shown once after creation (it travels in the URL's fragment, which
// never reaches a server), or when a new one is made ---
function showLink(path) {
  const url = new URL(path, location.href).href;
  $("[data-link-box]").hidden = false;
  $("[data-link]").value = url;
}
if (location.hash.startsWith("#link=")) {
  showLink(`/r/${decodeURIComponent(location.hash.slice(6))}`);
  history.replaceState(null, "", location.pathname + location.search);
}
$("[data-copy]").addEventListener("click", () => { $("[data-link]").select(); navigator.clipboard?.writeText($("[data-link]").value); });
document.addEventListener("htmx:after:request", (e) => {
  const ctx = e.detail && e.detail.ctx;
  if (!ctx || !ctx.response || ctx.response.status >= 400) return;
  const form = e.target.closest && e.target.closest("form");
  if (form && form.matches("[data-new-link]")) { try { showLink(JSON.parse(ctx.text).candidate_url); } catch { /* not JSON */ } }
  if (form && form.matches("[data-note-form]")) form.reset();
});

// --- state, from the page and then the log ---
let narration = page.narration || "";
let marks = page.marks || {};
let runs = page.runs || [];
const integrity = [];
let received = 0, last = page.after, lastView = null, lastSel = null;
const follow = $("[data-follow]");
const mirrorStatus = $("[data-mirror-status]");

const viewer = setupViewerPage(root, {});
let tl = null;
viewer.then((api) => { tl = api; showMarks(); if (lastView || lastSel) mirror(); });

function mirror() {
  if (!tl || !follow.checked) return;
  tl.mirror({ viewport: lastView, selection: lastSel });
}
follow.addEventListener("change", mirror);

function showMarks() {
  $("[data-marks]").textContent = marksText(marks) || "none yet";
  if (tl) drawMarks(tl, marks);
}

function showNarration() {
  $("[data-narration]").textContent = narration;
  const n = words(narration);
  $("[data-words]").textContent = `${n} word${n === 1 ? "" : "s"}`;
}

const showRun = (run) => showRunOutput($("[data-run-output]"), page.tool_base, run);
function showRuns() {
  $("[data-runs]").replaceChildren(...runs.map((r) => {
    const li = document.createElement("li");
    const b = document.createElement("button");
    b.type = "button";
    b.className = "linkish";
    b.textContent = runLabel(r);
    b.addEventListener("click", () => showRun(r));
    li.append(b, ` · ${r.since_open_s != null ? `${Math.round(r.since_open_s)} s in` : ""}`);
    return li;
  }));
}

function showIntegrity() {
  $("[data-integrity]").replaceChildren(...integrity.slice(-50).map((e) => {
    const li = document.createElement("li");
    const what = { hidden: "tab hidden", visible: "tab shown again", paste: `pasted ${e.data.chars ?? "?"} characters`,
      blur: "window left", focus: "window back" }[e.data.what] || e.data.what;
    li.textContent = `${e.at.slice(11, 19)} ${what}`;
    return li;
  }));
}

// Fragments that another interviewer's action (or the round itself) changed.
const PARTS = { hint: ["hints"], phase: ["controls"], lock: ["controls"], link: ["controls"], end: ["controls", "scorecard"],
  note: ["notes"], submit: ["controls"] };
function refresh(kind) {
  for (const part of PARTS[kind] || []) {
    if (part === "notes" && document.activeElement && document.activeElement.closest("#notes")) continue;
    window.htmx.ajax("GET", `/rounds/${page.id}/parts/${part}`, { target: `#${part}`, swap: "innerHTML" });
  }
}

function apply(e) {
  received += 1;
  last = e.id;
  const d = e.data || {};
  switch (e.kind) {
    case "narration":
      narration = narration.slice(0, d.at) + d.ins + narration.slice(d.at + d.del);
      if (narration.length !== d.len) console.warn("narration out of step", narration.length, d.len);
      showNarration();
      break;
    case "marks": marks = d; showMarks(); break;
    case "run": case "query": runs.push(d); showRuns(); showRun(d); break;
    case "viewport":
      // overlapping posts can commit out of send order: an older view never replaces a newer one
      if (lastView && d.t != null && lastView.t != null && d.t < lastView.t) break;
      lastView = d; mirror(); mirrorStatus.textContent = `candidate viewing ${(d.start_ns / 1e6).toFixed(2)}–${(d.end_ns / 1e6).toFixed(2)} ms`; break;
    case "selection":
      lastSel = d; mirror();
      if (d.name) mirrorStatus.textContent = `candidate selected ${d.name}`;
      else if (d.area) mirrorStatus.textContent = `candidate selected ${((d.area.end_ns - d.area.start_ns) / 1e6).toFixed(2)} ms`;
      break;
    case "integrity": integrity.push(e); showIntegrity(); break;
    case "opened": $("[data-presence]").textContent = `opened the link ${e.at.slice(11, 19)} UTC`; break;
    case "practice":  // the candidate attached (or withdrew) practice reports: readable on the review
      $("[data-practice]").textContent = d.count ? `attached ${d.count} practice report${d.count === 1 ? "" : "s"} (on the review) · ` : "";
      break;
    default: break;
  }
  if (e.actor !== "candidate" || e.kind === "submit" || e.kind === "note") refresh(e.kind);
  window.tracedojoConsole.lastEvent = e;
}

integrity.push(...(page.integrity || []));
showNarration(); showRuns(); showIntegrity();

const source = new EventSource(`${page.events_url}?after=${page.after}`);
const KINDS = ["narration", "marks", "run", "query", "viewport", "selection", "integrity", "hint", "note", "phase", "lock", "submit",
  "end", "opened", "link", "scorecard", "created", "practice"];
KINDS.forEach((k) => source.addEventListener(k, (m) => { try { apply(JSON.parse(m.data)); } catch (err) { console.error(err); } }));
source.addEventListener("open", () => { mirrorStatus.dataset.connected = "1"; });
source.addEventListener("error", () => { mirrorStatus.dataset.connected = "0"; });

setInterval(() => tickClock($("[data-phase-clock]"), readTimer($("#controls [data-timer-json]"), "timerJson")), 1000);

window.tracedojoConsole = { received: () => received, last: () => last, narration: () => narration, marks: () => marks,
  runs: () => runs, integrity: () => integrity, view: () => lastView, selection: () => lastSel, lastEvent: null, viewer };
