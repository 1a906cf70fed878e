// Painters: the ruler, step bands, tracks, selection and flows onto one canvas. Each
// track draws per pixel only what a pixel can show: after a sub-pixel slice it jumps, by
// binary search, to the first slice still visible past the next pixel.

import { paintCounter } from "./counters.js";
import { firstEndingAfter } from "./data.js";
import { formatDuration, ticks } from "./timescale.js";

const formatDurationShort = (ns) => formatDuration(ns, 3);

// Okabe-Ito: distinguishable with every common colour-vision deficiency. Each label colour
// reads at 4.5:1 or more on its fill (WCAG AA at 11 px; tests/test_a11y.py computes it):
// white on the NCCL orange was 3.87:1 and on the CPU-op green 3.42:1, black is 5.4 and 6.1.
export const PALETTE = {
  kernel: ["#0072B2", "#fff", "GPU kernel"],
  nccl: ["#D55E00", "#000", "NCCL kernel"],
  gpu_memcpy: ["#F0E442", "#222", "memcpy / memset"],
  cuda_runtime: ["#56B4E9", "#222", "CUDA API"],
  cpu_op: ["#009E73", "#000", "CPU op"],
  user_annotation: ["#CC79A7", "#222", "annotation"],
  other: ["#999999", "#222", "other"],
};

// ruler: two rows, the time ticks (0-17 px) above the step names (17-34 px), so a tick line
// never crosses a step's label. bandRow: one row per labelled mark ("one step", "the gap",
// the key's) in a band under the ruler, so a mark's name never overprints a slice's.
export const LAYOUT = { ruler: 34, tickRow: 17, labelW: 230, row: 18, trackPad: 4, groupH: 22, bandRow: 15 };

// The rows of the marks band: one per distinct `row` of a labelled mark (none without one).
export function bandHeight(marks) {
  const rows = marks.filter((m) => m.label).map((m) => m.row || 0);
  return rows.length ? (Math.max(...rows) + 1) * LAYOUT.bandRow + 2 : 0;
}
// Where the tracks start: under the ruler, the marks band and the notes' row (notes.js).
export const tracksTop = (view) => LAYOUT.ruler + bandHeight(view.marks) + (view.notesRowPx || 0);

export function categoryOf(data, row) {
  const cat = data.header.cats[data.cols.cat[row]];
  if (cat === "kernel") return data.header.names[data.cols.name[row]].toLowerCase().startsWith("nccl") ? "nccl" : "kernel";
  if (cat === "gpu_memset") return "gpu_memcpy";
  if (cat === "gpu_user_annotation") return "user_annotation";
  if (cat === "cuda_driver") return "cuda_runtime";
  return PALETTE[cat] ? cat : "other";
}

export function paint(ctx, view) {
  const { data, scale, layout, width, height } = view;
  const L = LAYOUT;
  ctx.clearRect(0, 0, width, height);
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  let drawn = 0;
  // step bands behind everything
  const x0 = L.labelW;
  const top = tracksTop(view);
  ctx.save();
  ctx.beginPath(); ctx.rect(x0, 0, width - x0, height); ctx.clip();
  data.header.steps.forEach((s, k) => {
    if (k % 2) return;
    const a = x0 + scale.x(s.start_ns), b = x0 + scale.x(s.end_ns);
    if (b < x0 || a > width) return;
    ctx.fillStyle = "rgba(0,0,0,0.045)";
    ctx.fillRect(a, top, b - a, height - top);
  });
  // Marks and the area selection are tinted behind the slices, not over them: a tint over a
  // slice darkens its fill under its label (black on the NCCL orange fell to 2.9:1 under the
  // report's gaps). Their edges are drawn over everything (paintOverlays).
  for (const m of view.marks) {
    const a = x0 + scale.x(m.start_ns), b = x0 + scale.x(m.end_ns);
    ctx.fillStyle = m.color || "rgba(230,159,0,0.18)"; ctx.fillRect(a, top, Math.max(1, b - a), height - top);
  }
  if (view.area) {
    const a = x0 + scale.x(view.area.start_ns), b = x0 + scale.x(view.area.end_ns);
    ctx.fillStyle = "rgba(0,114,178,0.12)"; ctx.fillRect(a, top, b - a, height - top);
  }
  ctx.restore();
  view.countersDrawn = [];
  for (const item of layout.items) {
    const y = item.y - view.scrollY;
    if (y + item.h < top || y > height) continue;
    if (item.kind === "counter") { paintCounter(ctx, view, item, y, top); continue; }
    if (item.kind === "group") {
      ctx.fillStyle = "#eef1f5"; ctx.fillRect(0, y, width, item.h);
      if (y < top) continue;  // under the ruler and the band
      ctx.fillStyle = "#222"; ctx.font = "600 12px system-ui, sans-serif";
      ctx.fillText(`${item.collapsed ? "▸" : "▾"} ${item.label}`, 6, y + item.h / 2);
      ctx.font = "11px system-ui, sans-serif";
      continue;
    }
    const t = data.tracks[item.track];
    ctx.save();
    ctx.beginPath(); ctx.rect(x0, Math.max(y, top), width - x0, item.h); ctx.clip();
    t.depths.forEach((d, depth) => { drawn += paintDepth(ctx, view, d, x0, y + L.trackPad / 2 + depth * L.row); });
    ctx.restore();
    ctx.fillStyle = item.pinned ? "#fff7e0" : "#fafafa";
    ctx.fillRect(0, Math.max(y, top), x0 - 1, item.h - (Math.max(y, top) - y));
    if (y + 9 >= top) {
      // a pin drawn, not a glyph: the pushpin emoji is missing from Debian's fonts (a box)
      if (item.pinned) paintPin(ctx, 7, y + 9);
      ctx.fillStyle = "#222";
      ctx.fillText(fit(ctx, t.label, x0 - 20), 14, y + 9);
    }
    ctx.strokeStyle = "#e3e3e3"; ctx.beginPath(); ctx.moveTo(0, y + item.h - 0.5); ctx.lineTo(width, y + item.h - 0.5); ctx.stroke();
  }
  paintOverlays(ctx, view);
  paintRuler(ctx, view);
  paintBand(ctx, view);
  return drawn;
}

// A map pin: a head and a needle, in the track label's margin.
function paintPin(ctx, cx, cy) {
  ctx.fillStyle = "#a40e26"; ctx.strokeStyle = "#a40e26"; ctx.lineWidth = 1.5;
  ctx.beginPath(); ctx.arc(cx, cy - 2, 3, 0, 2 * Math.PI); ctx.fill();
  ctx.beginPath(); ctx.moveTo(cx, cy + 1); ctx.lineTo(cx, cy + 6); ctx.stroke();
  ctx.lineWidth = 1;
}

function paintDepth(ctx, view, d, x0, y) {
  const { data, scale, width, selectedRow, matches } = view;
  const { ts, dur, name } = data.cols;
  const names = data.header.names;
  const H = LAYOUT.row - 2;
  const visEnd = scale.t(width - x0);
  let j = firstEndingAfter(d.ends, scale.start);
  let count = 0;
  while (j < d.rows.length) {
    const r = d.rows[j];
    if (ts[r] > visEnd) break;
    let a = scale.x(ts[r]), b = scale.x(ts[r] + dur[r]);
    const cat = categoryOf(data, r);
    const [bg, fg] = PALETTE[cat];
    ctx.fillStyle = r === selectedRow ? "#000" : bg;
    if (b - a < 1) b = a + 1; // every slice at least one pixel wide
    const ca = Math.max(a, 0), cb = Math.min(b, width - x0);
    ctx.fillRect(x0 + ca, y, cb - ca, H);
    if (matches && matches.has(r)) { ctx.strokeStyle = "#E69F00"; ctx.lineWidth = 2; ctx.strokeRect(x0 + ca, y, cb - ca, H); ctx.lineWidth = 1; }
    count++;
    if (cb - ca > 30) {
      const label = names[name[r]];
      ctx.fillStyle = r === selectedRow ? "#fff" : fg;
      const room = cb - ca - 6;
      const text = fit(ctx, label, room);
      if (text) ctx.fillText(text, x0 + ca + 3, y + H / 2 + 0.5);
    }
    if (b - a <= 1) {
      // jump to the first slice still visible past this pixel
      const next = scale.t(Math.floor(a) + 1);
      const k = firstEndingAfter(d.ends, next);
      j = k > j ? k : j + 1;
    } else j++;
  }
  return count;
}

const fitCache = new Map();
function fit(ctx, s, room) {
  if (room < 8) return "";
  const key = s + "|" + Math.round(room / 8);
  let v = fitCache.get(key);
  if (v !== undefined) return v;
  if (ctx.measureText(s).width <= room) v = s;
  else {
    let lo = 0, hi = s.length;
    while (lo < hi) { const m = (lo + hi + 1) >> 1; if (ctx.measureText(s.slice(0, m) + "…").width <= room) lo = m; else hi = m - 1; }
    v = lo > 2 ? s.slice(0, lo) + "…" : "";
  }
  if (fitCache.size > 20000) fitCache.clear();
  fitCache.set(key, v);
  return v;
}

function paintOverlays(ctx, view) {
  const { scale, width, height, area, marks, data, selectedRow } = view;
  const x0 = LAYOUT.labelW;
  ctx.save();
  const top = tracksTop(view);
  ctx.beginPath(); ctx.rect(x0, top, width - x0, height); ctx.clip();
  for (const m of marks) {
    // M marks are amber; labelled marks (a practice round's "one step" / "the gap", the
    // key's on the report) carry their own colour, and their names in the band above
    const a = x0 + scale.x(m.start_ns), b = x0 + scale.x(m.end_ns);
    markEdges(ctx, m, a, b, top, height);
  }
  if (area) {
    const a = x0 + scale.x(area.start_ns), b = x0 + scale.x(area.end_ns);
    ctx.strokeStyle = "#0072B2"; ctx.beginPath();
    ctx.moveTo(a + 0.5, top); ctx.lineTo(a + 0.5, height); ctx.moveTo(b - 0.5, top); ctx.lineTo(b - 0.5, height); ctx.stroke();
  }
  if (selectedRow >= 0) {
    const p = view.partnerRow;  // found once per selection (viewer.select)
    if (p >= 0) {
      const from = view.sliceBox(selectedRow), to = view.sliceBox(p);
      if (from && to) {
        const [a, b] = data.cols.ts[selectedRow] <= data.cols.ts[p] ? [from, to] : [to, from];
        ctx.strokeStyle = "#222"; ctx.lineWidth = 1.5; ctx.beginPath();
        ctx.moveTo(a.x, a.y + a.h / 2);
        ctx.bezierCurveTo(a.x + 30, a.y + a.h / 2, b.x - 30, b.y + b.h / 2, b.x, b.y + b.h / 2);
        ctx.stroke(); ctx.lineWidth = 1;
        ctx.beginPath(); ctx.moveTo(b.x, b.y + b.h / 2); ctx.lineTo(b.x - 7, b.y + b.h / 2 - 4); ctx.lineTo(b.x - 7, b.y + b.h / 2 + 4); ctx.fillStyle = "#222"; ctx.fill();
      }
    }
  }
  if (view.cursorX !== null && view.cursorX >= x0) {
    ctx.strokeStyle = "rgba(0,0,0,0.35)"; ctx.beginPath(); ctx.moveTo(view.cursorX + 0.5, top); ctx.lineTo(view.cursorX + 0.5, height); ctx.stroke();
  }
  ctx.restore();
}

function paintRuler(ctx, view) {
  const { scale, width, data } = view;
  const x0 = LAYOUT.labelW;
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, width, LAYOUT.ruler);
  ctx.strokeStyle = "#bbb"; ctx.beginPath(); ctx.moveTo(0, LAYOUT.ruler - 0.5); ctx.lineTo(width, LAYOUT.ruler - 0.5); ctx.stroke();
  ctx.save(); ctx.beginPath(); ctx.rect(x0, 0, width - x0, LAYOUT.ruler); ctx.clip();
  ctx.fillStyle = "#444"; ctx.font = "10px system-ui, sans-serif";
  const R = LAYOUT.tickRow;
  for (const t of ticks(scale, 100).ticks) {
    const x = Math.round(x0 + t.x);
    ctx.strokeStyle = "#999"; ctx.beginPath(); ctx.moveTo(x + 0.5, 2); ctx.lineTo(x + 0.5, R - 1); ctx.stroke();
    ctx.fillStyle = "#444"; ctx.fillText(t.label, x + 4, R / 2);
  }
  ctx.strokeStyle = "#e3e3e3"; ctx.beginPath(); ctx.moveTo(x0, R + 0.5); ctx.lineTo(width, R + 0.5); ctx.stroke();
  data.header.steps.forEach((s, k) => {
    const a = x0 + scale.x(s.start_ns), b = x0 + scale.x(s.end_ns);
    if (b < x0 || a > width) return;
    ctx.strokeStyle = "#6a3d9a"; ctx.beginPath(); ctx.moveTo(Math.round(a) + 0.5, R + 2); ctx.lineTo(Math.round(a) + 0.5, LAYOUT.ruler); ctx.stroke();
    const text = `step ${k} · ${formatDurationShort(s.end_ns - s.start_ns)}`;
    // only where the label fits its step's visible width
    if (Math.min(b, width) - Math.max(a, x0) < ctx.measureText(text).width + 8) return;
    ctx.fillStyle = "#6a3d9a";
    ctx.fillText(text, Math.max(a, x0) + 4, R + (LAYOUT.ruler - R) / 2);
  });
  ctx.restore();
  ctx.fillStyle = "#444"; ctx.font = "10px system-ui, sans-serif";
  if (view.cursorX !== null && view.cursorX >= x0) ctx.fillText(`cursor ${formatDurationShort(scale.t(view.cursorX - x0))}`, 6, LAYOUT.tickRow / 2);
}

// The dashed edge is the key's (style "key"), the solid one the reader's: told apart by more
// than colour.
function markEdges(ctx, m, a, b, top, height) {
  ctx.strokeStyle = m.textColor || "#b07800";
  ctx.setLineDash(m.style === "key" ? [5, 3] : []);
  ctx.lineWidth = m.style === "key" ? 1.5 : 1;
  ctx.beginPath(); ctx.moveTo(Math.round(a) + 0.5, top); ctx.lineTo(Math.round(a) + 0.5, height);
  ctx.moveTo(Math.round(b) - 0.5, top); ctx.lineTo(Math.round(b) - 0.5, height); ctx.stroke();
  ctx.setLineDash([]); ctx.lineWidth = 1;
}

// The marks band: each labelled mark a bar on its own row, named inside it (bold for the
// reader's, italic with a dashed outline for the key's).
function paintBand(ctx, view) {
  const h = bandHeight(view.marks);
  if (!h) return;
  const { scale, width, marks } = view;
  const x0 = LAYOUT.labelW, B = LAYOUT.bandRow;
  ctx.fillStyle = "#fff"; ctx.fillRect(0, LAYOUT.ruler, width, h);
  ctx.fillStyle = "#57606a"; ctx.font = "10px system-ui, sans-serif";
  ctx.fillText("marks", 14, LAYOUT.ruler + h / 2);
  ctx.save(); ctx.beginPath(); ctx.rect(x0, LAYOUT.ruler, width - x0, h); ctx.clip();
  for (const m of marks) {
    if (!m.label) continue;
    const y = LAYOUT.ruler + 1 + (m.row || 0) * B;
    const a = Math.max(x0 - 2, x0 + scale.x(m.start_ns)), b = Math.min(width + 2, x0 + scale.x(m.end_ns));
    if (b < x0 || a > width) continue;
    ctx.fillStyle = "#fff"; ctx.fillRect(a, y, Math.max(1, b - a), B - 2);
    ctx.fillStyle = m.color || "rgba(230,159,0,0.18)"; ctx.fillRect(a, y, Math.max(1, b - a), B - 2);
    ctx.strokeStyle = m.textColor || "#5a3d00"; ctx.setLineDash(m.style === "key" ? [4, 2] : []);
    ctx.strokeRect(Math.round(a) + 0.5, y + 0.5, Math.max(1, Math.round(b - a) - 1), B - 3);
    ctx.setLineDash([]);
    ctx.fillStyle = m.textColor || "#5a3d00";
    ctx.font = m.style === "key" ? "italic 600 11px system-ui, sans-serif" : "600 11px system-ui, sans-serif";
    ctx.fillText(m.label, Math.max(a, x0) + 4, y + (B - 2) / 2 + 0.5);
  }
  ctx.restore();
  ctx.font = "11px system-ui, sans-serif";
  ctx.strokeStyle = "#bbb"; ctx.beginPath(); ctx.moveTo(0, LAYOUT.ruler + h - 0.5); ctx.lineTo(width, LAYOUT.ruler + h - 0.5); ctx.stroke();
}
