// The Area selection tab: the per-track busy / idle table first (the figure a gap question
// needs), one checkbox per track the drag covered to leave it out, then the per-name pivot
// (occurrences, wall, self, average), sortable by any column. Figures from summary.js.

import { areaSummary } from "./summary.js";
import { formatDuration } from "./timescale.js";

const COLUMNS = [
  { key: "name", label: "Name", num: false },
  { key: "count", label: "Occurrences", num: true },
  { key: "wall_ns", label: "Wall", num: true },
  { key: "self_ns", label: "Self", num: true },
  { key: "avg_ns", label: "Average", num: true },
];
const MAX_NAMES = 200;  // rows drawn; the rest are counted in a line under the table

export function createPivot(el, data) {
  let area = null, covered = [], included = new Set(), sort = { key: "wall_ns", desc: true };
  const fmt = (ns) => formatDuration(ns, 3);

  function show(a) {
    area = a;
    covered = a.tracks && a.tracks.length ? [...a.tracks] : data.tracks.map((t) => t.id);
    included = new Set(covered);
    render();
  }

  function render() {
    const byTrack = areaSummary(data, area, covered).tracks;
    const s = areaSummary(data, area, [...included]);
    const title = document.createElement("p");
    const strong = document.createElement("strong");
    strong.textContent = "Area selection";
    title.append(strong, ` · ${fmt(s.span_ns)} · ${included.size} of ${byTrack.length} track${byTrack.length === 1 ? "" : "s"}`);
    el.replaceChildren(title, trackTable(byTrack), nameTable(s.names));
  }

  function trackTable(rows) {
    const tbl = table(["", "Track", "Busy", "Idle"], "area tracks");
    tbl.querySelector("th").append(srOnly("include"));
    const body = tbl.tBodies[0];
    for (const t of rows) {
      const tr = body.insertRow();
      const box = document.createElement("input");
      box.type = "checkbox";
      box.checked = included.has(t.id);
      box.dataset.track = String(t.id);
      box.setAttribute("aria-label", `include ${t.group} / ${t.label}`);
      box.addEventListener("change", () => {
        box.checked ? included.add(t.id) : included.delete(t.id);
        render();
        el.querySelector(`input[data-track="${t.id}"]`)?.focus();
      });
      tr.insertCell().append(box);
      const name = tr.insertCell();
      const group = document.createElement("span");
      group.className = "track-group";
      group.textContent = `${t.group} / `;
      name.append(group, t.label);
      num(tr, fmt(t.busy_ns), t.busy_ns);
      num(tr, fmt(t.idle_ns), t.idle_ns);
    }
    return tbl;
  }

  function nameTable(names) {
    const rows = names.map((n) => ({ ...n, avg_ns: n.wall_ns / n.count }));
    const { key, desc } = sort;
    rows.sort((x, y) => {
      const c = key === "name" ? x.name.localeCompare(y.name) : x[key] - y[key];
      return desc ? -c : c;
    });
    const tbl = table([], "area names");
    const head = tbl.tHead.rows[0];
    for (const c of COLUMNS) {
      const th = document.createElement("th");
      th.scope = "col";
      if (c.key === key) th.setAttribute("aria-sort", desc ? "descending" : "ascending");
      const b = document.createElement("button");
      b.type = "button";
      b.className = "sort";
      b.dataset.sort = c.key;
      b.textContent = c.label + (c.key === key ? (desc ? " ▼" : " ▲") : "");
      b.addEventListener("click", () => {
        sort = { key: c.key, desc: c.key === key ? !desc : c.num };
        render();
        el.querySelector(`button[data-sort="${c.key}"]`)?.focus();
      });
      th.append(b);
      head.append(th);
    }
    const body = tbl.tBodies[0];
    for (const n of rows.slice(0, MAX_NAMES)) {
      const tr = body.insertRow();
      tr.insertCell().textContent = n.name;
      num(tr, n.count.toLocaleString(), n.count);
      num(tr, fmt(n.wall_ns), n.wall_ns);
      num(tr, fmt(n.self_ns), n.self_ns);
      num(tr, fmt(n.avg_ns), n.avg_ns);
    }
    const wrap = document.createElement("div");
    wrap.append(tbl);
    if (rows.length > MAX_NAMES) {
      const more = document.createElement("p");
      more.className = "note";
      more.textContent = `${rows.length - MAX_NAMES} more names not shown (sort to bring them up)`;
      wrap.append(more);
    }
    return wrap;
  }

  return { show };
}

// The exact figure rides along in data-value: tests compare it with summary.js and the SQL console.
function num(tr, text, value) {
  const td = tr.insertCell();
  td.className = "num";
  td.textContent = text;
  td.dataset.value = String(value);
}

function srOnly(text) {
  const s = document.createElement("span");
  s.className = "sr-only";
  s.textContent = text;
  return s;
}

function table(head, cls) {
  const tbl = document.createElement("table");
  tbl.className = cls;
  const tr = tbl.createTHead().insertRow();
  head.forEach((h) => { const th = document.createElement("th"); th.scope = "col"; th.textContent = h; tr.append(th); });
  tbl.createTBody();
  return tbl;
}
