// The details panel: a slice (its fields, its args fetched from the server, the linked
// launch or kernel) or an area selection (per-name and per-track figures). DOM only; the
// figures come from summary.js and the viewer's state.

import { PALETTE, categoryOf } from "./paint.js";
import { areaSummary } from "./summary.js";
import { formatDuration } from "./timescale.js";

export function createPanels(el, data, view, sliceUrl, onSelect) {
  const { names } = data.header;

  function describe(row) {
    if (row < 0) {
      el.innerHTML = '<p class="note">Click a slice for its details; drag across the tracks to select an area.</p>';
      return;
    }
    const { ts, dur, name, track } = data.cols;
    const t = data.tracks[track[row]];
    el.replaceChildren(table([
      ["Name", names[name[row]]], ["Category", PALETTE[categoryOf(data, row)][2]],
      ["Start", formatDuration(ts[row], 3)], ["Duration", formatDuration(dur[row], 3)],
      ...(t.rank !== undefined ? [["Rank", String(t.rank)]] : []),
      [t.gpu ? "Stream" : "Thread", t.label], ["Process", t.group],
    ]));
    const p = view.partnerRow;
    if (p >= 0) {
      const btn = document.createElement("button");
      btn.type = "button";
      btn.textContent = `${t.gpu ? "Launched by" : "Runs as"}: ${names[name[p]].slice(0, 80)} (${formatDuration(dur[p], 3)})`;
      btn.addEventListener("click", () => onSelect(p));
      el.append(btn);
    }
    if (sliceUrl) showArgs(row);
  }

  // A slice's args live on the server: a million of them would not fit the columns.
  async function showArgs(row) {
    const res = await fetch(sliceUrl.replace("{src}", String(data.cols.src[row])));
    if (!res.ok || view.selectedRow !== row) return;
    const ev = await res.json();
    const args = Object.entries(ev.args || {}).map(([k, v]) => [k, typeof v === "object" ? JSON.stringify(v) : String(v)]);
    if (!args.length) return;
    const h = document.createElement("h3");
    h.textContent = "Arguments";
    el.append(h, table(args));
  }

  function showArea(area) {
    const s = areaSummary(data, area);
    const title = document.createElement("p");
    const strong = document.createElement("strong");
    strong.textContent = "Area selection";
    title.append(strong, ` · ${formatDuration(s.span_ns, 3)}`);
    el.replaceChildren(
      title,
      table(s.names.slice(0, 25).map((n) => [n.name.slice(0, 70), n.count.toLocaleString(), formatDuration(n.wall_ns, 3),
                                             formatDuration(n.wall_ns / n.count, 3)]),
            ["Name", "Count", "Wall", "Avg"], "area"),
      table(s.tracks.map((t) => [t.label, formatDuration(t.busy_ns, 3), formatDuration(t.idle_ns, 3)]),
            ["Track", "Busy", "Idle"], "area"));
  }

  return { describe, showArea };
}

function table(rows, head, cls) {
  const tbl = document.createElement("table");
  if (cls) tbl.className = cls;
  if (head) {
    const tr = tbl.createTHead().insertRow();
    head.forEach((h) => { const th = document.createElement("th"); th.textContent = h; tr.append(th); });
  }
  const body = tbl.createTBody();
  for (const r of rows) { const tr = body.insertRow(); r.forEach((c) => { tr.insertCell().textContent = c; }); }
  return tbl;
}
