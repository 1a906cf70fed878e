// What every page with a timeline shares: mount the viewer, the measurements panel (each
// run recorded with its time), and the case's charts. The scenario, practice and report
// pages build on it.
import { mount } from "/static/timeline/viewer.js";
import { render } from "/static/charts/charts.js";
import { enhanceSwitch, rankLinks } from "/static/timeline/ranks.js";

const testing = new URLSearchParams(location.search).get("testing") === "1";

// Runs are recorded by `record(tool)`: by default in this browser per page; a practice
// round passes its own (to the attempt on the server).
function localRuns() {
  const opened = Date.now();
  const key = `tracedojo:runs:${location.pathname}${location.search.replace(/[?&]testing=1/, "")}`;
  const list = () => { try { return JSON.parse(localStorage.getItem(key) || "[]"); } catch { return []; } };
  return {
    list,
    async record(tool) {
      const all = list();
      all.push({ tool, at: new Date().toISOString(), since_open_s: (Date.now() - opened) / 1000 });
      localStorage.setItem(key, JSON.stringify(all.slice(-200)));
      return all;
    },
  };
}

export function showRuns(root, runs) {
  const el = root.querySelector("[data-tool-runs]");
  if (!el) return;
  el.replaceChildren(...runs.map((r) => {
    const li = document.createElement("li");
    const when = r.at ? new Date(r.at).toLocaleTimeString() : "";
    li.textContent = `${r.tool} · ${when}` + (r.since_open_s != null ? ` · ${Math.round(r.since_open_s)} s into the session` : "");
    return li;
  }));
}

export function setupViewerPage(root, opts = {}) {
  const runs = opts.runs || localRuns();
  Promise.resolve(runs.list()).then((all) => showRuns(root, all));
  window.tracedojoRuns = runs.list;

  const form = root.querySelector("[data-tool-form]");
  const out = root.querySelector("[data-tool-output]");
  if (form) form.addEventListener("submit", async (e) => {
    e.preventDefault();
    out.textContent = "running…";
    const res = await fetch(form.tool.value);
    const body = await res.json();
    if (res.ok) showRuns(root, await runs.record(body.tool, Object.fromEntries(new URL(form.tool.value, location.href).searchParams)));
    if (!res.ok) out.textContent = body.error || `HTTP ${res.status}`;
    else out.textContent = body.applicable ? body.output : `${body.tool} does not apply here: ${body.reason}`;
    const chart = root.querySelector("[data-tool-chart]");
    if (body.chart) render(chart, body.chart, chart.clientWidth || 380);
    else chart.replaceChildren();
    out.parentElement.querySelector(".rank-links")?.remove();
    if (body.chart && body.chart.x_label === "rank") {  // the per-rank measurement: each rank one click from its view
      chart.after(rankLinks(body.chart, new URL(root.dataset.url, location.href).searchParams.get("rank")));
    }
  });

  enhanceSwitch(root);

  const viewsData = document.getElementById("views-data");
  if (viewsData) {
    JSON.parse(viewsData.textContent).forEach((v, i) => {
      const el = root.querySelector(`[data-view="${i}"]`);
      render(el, v, Math.min(1100, el.parentElement.clientWidth - 24), 260);
    });
  }

  return mount(root, root.dataset.url, { sliceUrl: root.dataset.sliceUrl, marks: opts.marks, onChange: opts.onChange, onNote: opts.onNote }).then((api) => {
    if (testing) window.timelineTest = api;
    root.querySelector("canvas").focus({ preventScroll: true });
    return api;
  }).catch((err) => {
    root.querySelector("[data-status]").textContent = `could not load the trace: ${err.message}`;
    throw err;
  });
}
