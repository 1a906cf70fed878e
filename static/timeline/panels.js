// The drawer's selection tabs: a slice (its fields, self time, parent and children, its
// args fetched from the server, the linked launch or kernel) in Current selection, an area
// selection (pivot.js) in Area selection. DOM only; the figures come from summary.js,
// slicetree.js and the viewer's state.

import { PALETTE, categoryOf } from "./paint.js";
import { createPivot } from "./pivot.js";
import { childrenOf, parentOf, selfTimeNs } from "./slicetree.js";
import { formatDuration } from "./timescale.js";

const MAX_CHILDREN = 50;  // listed; the rest counted

export function createPanels(el, data, view, sliceUrl, onSelect, areaEl) {
  const { names } = data.header;

  function describe(row) {
    if (row < 0) {
      el.innerHTML = '<p class="note">Click a slice for its details; drag across the tracks to select an area.</p>';
      return;
    }
    const { ts, dur, name, track } = data.cols;
    const t = data.tracks[track[row]];
    const kids = childrenOf(data, row);
    el.replaceChildren(table([
      ["Name", names[name[row]]], ["Category", PALETTE[categoryOf(data, row)][2]],
      ["Start", formatDuration(ts[row], 3)], ["Duration", formatDuration(dur[row], 3)],
      ["Self time", formatDuration(selfTimeNs(data, row, kids), 3)],
      ...(t.rank !== undefined ? [["Rank", String(t.rank)]] : []),
      [t.gpu ? "Stream" : "Thread", t.label], ["Process", t.group],
    ]));
    el.append(related(parentOf(data, row), kids));
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

  // Parent and children as buttons that select (and reveal) them.
  function related(parent, kids) {
    const box = document.createElement("div");
    box.className = "related";
    const link = (r) => {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "linkish";
      b.dataset.row = String(r);
      b.textContent = `${names[data.cols.name[r]].slice(0, 80)} · ${formatDuration(data.cols.dur[r], 3)}`;
      b.addEventListener("click", () => onSelect(r));
      return b;
    };
    const h = (text) => { const x = document.createElement("h3"); x.textContent = text; return x; };
    box.append(h("Parent"));
    if (parent >= 0) box.append(link(parent));
    else { const p = document.createElement("p"); p.className = "note"; p.textContent = "none: a top-level slice"; box.append(p); }
    box.append(h(`Children (${kids.length.toLocaleString()})`));
    if (kids.length) {
      const ol = document.createElement("ol");
      ol.className = "children";
      kids.slice(0, MAX_CHILDREN).forEach((r) => { const li = document.createElement("li"); li.append(link(r)); ol.append(li); });
      box.append(ol);
      if (kids.length > MAX_CHILDREN) { const p = document.createElement("p"); p.className = "note"; p.textContent = `and ${kids.length - MAX_CHILDREN} more`; box.append(p); }
    }
    return box;
  }

  const pivot = createPivot(areaEl, data);
  const showArea = (area) => pivot.show(area);

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
