// The candidate's side of a live round: the practice round's page without a score. What
// they do is sent as it happens (the interviewer's console mirrors it): the narration a
// moment after typing stops, marks, measurements, the timeline's window and selection
// (at most every 100 ms), and neutral integrity signals (tab hidden or shown, paste
// sizes). What the interviewer pushes (phase, hints, lock, end) arrives over the
// round's event stream (htmx hx-sse swaps the status; this page reacts to lock and end).
import { setupMarks } from "./marks.js";
import { setupViewerPage } from "./viewer-page.js";
import { readTimer, showHtmxErrors, tickClock, words } from "./live-common.js";

const page = JSON.parse(document.getElementById("round-data").textContent);
const root = document.getElementById("viewer");
const box = document.getElementById("narrate");
const status = document.getElementById("round-status");
const area = document.getElementById("narration");
const $ = (sel) => box.querySelector(sel);
const showError = (msg) => { const e = $("[data-error]"); e.textContent = msg; e.hidden = !msg; };
const opened = Date.now();
const state = { locked: false, ended: page.ended };  // as the interviewer set it (applyStatus)

async function api(path, method, body) {
  const res = await fetch(`${page.api}${path}`, {
    method, headers: { "Content-Type": "application/json" }, body: JSON.stringify(body ?? {}),
  });
  if (!res.ok) {
    let msg = `HTTP ${res.status}`;
    try { msg = (await res.json()).error || msg; } catch { /* not JSON */ }
    if (res.status !== 409) showError(msg);  // 409: locked or ended, which the status already says
    throw Object.assign(new Error(msg), { status: res.status });
  }
  return res.json();
}

// --- what the candidate looks at: sent at most every 100 ms per kind, the last one always --
const pending = {}, timers = {};
function send(kind, data) {
  pending[kind] = { kind, ...data, t: Date.now() };
  if (timers[kind]) return;
  timers[kind] = setTimeout(function flush() {
    const body = pending[kind];
    delete pending[kind];
    timers[kind] = null;
    if (body && !state.ended) api("/events", "POST", body).catch(() => {});
  }, 100);
}

// --- measurements and marks ----------------------------------------------------------------
let runs = page.runs || [];
const viewer = setupViewerPage(root, {
  runs: {
    list: () => runs,
    async record(tool, options) {
      try { runs = (await api("/runs", "POST", { tool, options, since_open_s: (Date.now() - opened) / 1000 })).runs; }
      catch (e) { /* shown */ }
      return runs;
    },
  },
  onChange: (kind, data) => send(kind, data),
  // a note joins the round's log at once (not throttled: each one is kept)
  onNote: (n) => { if (!state.ended) api("/events", "POST", { kind: "note", ...n, t: Date.now() }).catch(() => {}); },
});

let currentMarks = () => page.marks || {};
viewer.then((tl) => {
  currentMarks = setupMarks(box, tl, page.marks || {}, async (mark) => (await api("/marks", "PUT", mark)).marks, showError);
});

// --- the narration: sent 400 ms after typing stops, and every 3 s while it differs -----------
const draftKey = `tracedojo:round-draft:${page.api}`;
try {
  const draft = JSON.parse(localStorage.getItem(draftKey) || "null");
  if (draft && draft.text !== area.value && !page.ended) area.value = draft.text;
} catch { /* a broken draft is no draft */ }
let saved = page.narration, saving = false, debounce = null;
async function save() {
  if (saving || area.value === saved || state.locked || state.ended) return;
  saving = true;
  const text = area.value;
  try {
    await api("/narration", "PUT", { narration: text });
    saved = text;
    $("[data-saved]").textContent = `saved ${new Date().toLocaleTimeString()}`;
    showError("");
  } catch (e) {
    $("[data-saved]").textContent = e.status ? "" : "offline: kept in this browser, will save when the server is back";
  }
  saving = false;
  if (area.value !== saved) schedule();
}
function schedule() { clearTimeout(debounce); debounce = setTimeout(save, 400); }
function count() {
  const n = words(area.value);
  $("[data-words]").textContent = `${n} word${n === 1 ? "" : "s"} · ${area.value.length.toLocaleString()} / ${page.max_chars.toLocaleString()} characters`;
}
area.addEventListener("input", () => {
  localStorage.setItem(draftKey, JSON.stringify({ text: area.value, at: Date.now() }));
  $("[data-saved]").textContent = "editing…";
  count();
  schedule();
});
setInterval(save, 3000);
window.addEventListener("beforeunload", () => {
  if (area.value !== saved && !state.locked && !state.ended) navigator.sendBeacon?.(`${page.api}/narration-beacon`, area.value);
});
count();

// --- integrity: information for the interviewer, never a penalty --------------------------
document.addEventListener("visibilitychange", () => {
  api("/events", "POST", { kind: "integrity", what: document.hidden ? "hidden" : "visible", t: Date.now() }).catch(() => {});
});
area.addEventListener("paste", (e) => {
  const text = e.clipboardData ? e.clipboardData.getData("text") : "";
  api("/events", "POST", { kind: "integrity", what: "paste", chars: text.length, t: Date.now() }).catch(() => {});
});

// --- the round's state, as the interviewer sets it ------------------------------------------
function applyStatus() {
  const line = status.querySelector("[data-status-json]");
  const t = readTimer(line, "statusJson");
  if (!t) return;
  state.locked = t.locked; state.ended = t.ended;
  area.readOnly = state.locked || state.ended;
  box.querySelectorAll("button").forEach((b) => { b.disabled = state.locked || state.ended; });
  box.classList.toggle("locked", state.locked || state.ended);
  if (state.ended) { localStorage.removeItem(draftKey); root.classList.add("ended"); }
}
status.addEventListener("htmx:after:swap", applyStatus);
applyStatus();
setInterval(() => tickClock(status.querySelector("[data-phase-clock]"), readTimer(status.querySelector("[data-status-json]"), "statusJson")), 1000);

$("[data-submit]").addEventListener("click", async () => {
  if (!confirm("Hand in your read? You cannot change it afterwards unless your interviewer unlocks it.")) return;
  await save();
  try { await api("/submit", "POST", {}); } catch { /* shown */ }
});

// --- the practice history panel (htmx): a refusal (an attempt gone, not submitted) shows
// under it. It stays usable after the end: consent can be withdrawn any time. ---
const practicePanel = document.querySelector(".practice-consent");
if (practicePanel) showHtmxErrors(practicePanel.querySelector("[data-practice-error]"), practicePanel);

window.tracedojoRound = { save, marks: () => currentMarks(), state };
