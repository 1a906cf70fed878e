// The practice round: the viewer (runs recorded on the attempt), marks from the area
// selection, and the narration: autosaved every few seconds to the server and kept as a
// local draft, so neither a reload nor a server restart loses a word.
import { setupMarks } from "./marks.js";
import { setupViewerPage } from "./viewer-page.js";

const root = document.getElementById("viewer");
const box = document.getElementById("narrate");
const { attempt, max_chars: maxChars } = JSON.parse(document.getElementById("round-data").textContent);
const api = (path, method = "GET", body) => fetch(`/api/attempts/${attempt.id}${path}`, {
  method, headers: body ? { "Content-Type": "application/json" } : {}, body: body ? JSON.stringify(body) : undefined,
});
const opened = Date.now();
const $ = (sel) => box.querySelector(sel);
const showError = (msg) => { const e = $("[data-error]"); e.textContent = msg; e.hidden = !msg; };

// --- measurements: recorded on the attempt --------------------------------------------
let runs = attempt.runs || [];
const viewer = setupViewerPage(root, {
  runs: {
    list: () => runs,
    async record(tool) {
      const res = await api("/runs", "POST", { tool, since_open_s: (Date.now() - opened) / 1000 });
      if (res.ok) runs = (await res.json()).runs;
      else showError(`this run was not recorded: ${(await res.json()).error}`);
      return runs;
    },
  },
});

// --- marks ----------------------------------------------------------------------------
let currentMarks = () => attempt.marks || {};
viewer.then((tl) => {
  currentMarks = setupMarks(box, tl, attempt.marks || {}, async (mark) => {
    const res = await api("/marks", "PUT", mark);
    if (!res.ok) { const why = (await res.json()).error; showError(why); throw new Error(why); }
    return (await res.json()).marks;
  }, showError);
});

// --- narration: words, the 60-second mode, autosave -----------------------------------
const area = document.getElementById("narration");
const draftKey = `tracedojo:draft:${attempt.id}`;
const words = () => (area.value.match(/\S+/g) || []).length;
function count() {
  const n = words();
  $("[data-words]").textContent = `${n} word${n === 1 ? "" : "s"} · ${area.value.length.toLocaleString()} / ${maxChars.toLocaleString()} characters`;
  $("[data-nudge]").hidden = !(timer && n > 170);
}
// A local draft newer than the server's text wins (the server may have been down).
try {
  const draft = JSON.parse(localStorage.getItem(draftKey) || "null");
  if (draft && draft.text !== area.value && (!attempt.updated_at || draft.at > Date.parse(attempt.updated_at))) area.value = draft.text;
} catch { /* a broken draft is no draft */ }
let saved = attempt.narration, saving = false;
async function save() {
  if (saving || area.value === saved) return;
  saving = true;
  const text = area.value;
  try {
    const res = await api("/narration", "PUT", { narration: text });
    if (res.ok) { saved = text; $("[data-saved]").textContent = `saved ${new Date().toLocaleTimeString()}`; showError(""); }
    else {
      // 503: the server could not store it; the local draft holds it and the next tick retries
      $("[data-saved]").textContent = res.status === 503 ? "not saved yet: kept in this browser, retrying" : "";
      showError((await res.json()).error);
    }
  } catch { $("[data-saved]").textContent = "offline: kept in this browser, will save when the server is back"; }
  saving = false;
}
area.addEventListener("input", () => {
  localStorage.setItem(draftKey, JSON.stringify({ text: area.value, at: Date.now() }));
  $("[data-saved]").textContent = "editing…";
  count();
});
setInterval(save, 3000);
window.addEventListener("beforeunload", () => { if (area.value !== saved) navigator.sendBeacon?.(`/api/attempts/${attempt.id}/narration-beacon`, area.value); });

let timer = null, timed = false;  // timed: the 60-second mode was used in this round
$("[data-timer]").addEventListener("click", () => {
  if (timer) { clearInterval(timer); timer = null; $("[data-clock]").textContent = ""; count(); return; }
  timed = true;
  const end = Date.now() + 60_000;
  area.focus();
  timer = setInterval(() => {
    const left = Math.max(0, Math.ceil((end - Date.now()) / 1000));
    $("[data-clock]").textContent = left ? `0:${String(left).padStart(2, "0")}` : "time";
    if (!left) { clearInterval(timer); timer = null; }
    count();
  }, 250);
});
count();

$("[data-submit]").addEventListener("click", async () => {
  await save();
  const res = await api("/submit", "POST", { narration: area.value, timed });
  if (!res.ok) { showError((await res.json()).error); return; }
  localStorage.removeItem(draftKey);
  location.href = `/practice/${attempt.id}/report`;
});

window.tracedojoPractice = { save, words, marks: () => currentMarks() };
