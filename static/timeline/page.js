// The scenario page: mounts the timeline and wires the measurements panel.
import { mount } from "./viewer.js";
import { render } from "/static/charts/charts.js";

const root = document.getElementById("viewer");
const testing = new URLSearchParams(location.search).get("testing") === "1";

mount(root, root.dataset.url, { sliceUrl: root.dataset.sliceUrl }).then((api) => {
  if (testing) window.timelineTest = api;
  root.querySelector("canvas").focus({ preventScroll: true });
}).catch((err) => {
  root.querySelector("[data-status]").textContent = `could not load the trace: ${err.message}`;
});

// Every measurement run is recorded with its time, per instance, in this browser: the
// practice round (issue 5) submits them with the narration.
const opened = Date.now();
const runsKey = `tracedojo:runs:${location.pathname}${location.search.replace(/[?&]testing=1/, "")}`;
const runsList = root.querySelector("[data-tool-runs]");
function runs() { try { return JSON.parse(localStorage.getItem(runsKey) || "[]"); } catch { return []; } }
function showRuns() {
  if (!runsList) return;
  runsList.replaceChildren(...runs().map((r) => {
    const li = document.createElement("li");
    li.textContent = `${r.tool} · ${new Date(r.at).toLocaleTimeString()} · ${Math.round(r.since_open_s)} s into the session`;
    return li;
  }));
}
function record(tool) {
  const all = runs();
  all.push({ tool, at: new Date().toISOString(), since_open_s: (Date.now() - opened) / 1000 });
  localStorage.setItem(runsKey, JSON.stringify(all.slice(-200)));
  showRuns();
}
showRuns();
window.tracedojoRuns = runs;

const form = root.querySelector("[data-tool-form]");
const out = root.querySelector("[data-tool-output]");
if (form) form.addEventListener("submit", async (e) => {
  e.preventDefault();
  const url = form.tool.value;
  out.textContent = "running…";
  const res = await fetch(url);
  const body = await res.json();
  if (res.ok) record(body.tool);
  if (!res.ok) out.textContent = body.error || `HTTP ${res.status}`;
  else out.textContent = body.applicable ? body.output : `${body.tool} does not apply here: ${body.reason}`;
  const chart = root.querySelector("[data-tool-chart]");
  if (body.chart) render(chart, body.chart, chart.clientWidth || 380);
  else chart.replaceChildren();
});

const viewsData = document.getElementById("views-data");
if (viewsData) {
  JSON.parse(viewsData.textContent).forEach((v, i) => {
    const el = root.querySelector(`[data-view="${i}"]`);
    render(el, v, Math.min(1100, el.parentElement.clientWidth - 24), 260);
  });
}
