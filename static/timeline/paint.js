// Painters: the ruler, step bands, tracks, selection and flows onto one canvas. Each
// track draws per pixel only what a pixel can show: after a sub-pixel slice it jumps, by
// binary search, to the first slice still visible past the next pixel.

import { firstEndingAfter } from "./data.js";
import { formatDuration, ticks } from "./timescale.js";

const formatDurationShort = (ns) => formatDuration(ns, 3);

// Okabe-Ito: distinguishable with every common colour-vision deficiency.
export const PALETTE = {
  kernel: ["#0072B2", "#fff", "GPU kernel"],
  nccl: ["#D55E00", "#fff", "NCCL kernel"],
  gpu_memcpy: ["#F0E442", "#222", "memcpy / memset"],
  cuda_runtime: ["#56B4E9", "#222", "CUDA API"],
  cpu_op: ["#009E73", "#fff", "CPU op"],
  user_annotation: ["#CC79A7", "#222", "annotation"],
  other: ["#999999", "#222", "other"],
};

export const LAYOUT = { ruler: 28, labelW: 230, row: 18, trackPad: 4, groupH: 22 };

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
  ctx.save();
  ctx.beginPath(); ctx.rect(x0, 0, width - x0, height); ctx.clip();
  data.header.steps.forEach((s, k) => {
    if (k % 2) return;
    const a = x0 + scale.x(s.start_ns), b = x0 + scale.x(s.end_ns);
    if (b < x0 || a > width) return;
    ctx.fillStyle = "rgba(0,0,0,0.045)";
    ctx.fillRect(a, L.ruler, b - a, height - L.ruler);
  });
  ctx.restore();
  for (const item of layout.items) {
    const y = item.y - view.scrollY;
    if (y + item.h < L.ruler || y > height) continue;
    if (item.kind === "group") {
      ctx.fillStyle = "#eef1f5"; ctx.fillRect(0, y, width, item.h);
      ctx.fillStyle = "#222"; ctx.font = "600 12px system-ui, sans-serif";
      ctx.fillText(`${item.collapsed ? "▸" : "▾"} ${item.label}`, 6, y + item.h / 2);
      ctx.font = "11px system-ui, sans-serif";
      continue;
    }
    const t = data.tracks[item.track];
    ctx.save();
    ctx.beginPath(); ctx.rect(x0, Math.max(y, L.ruler), width - x0, item.h); ctx.clip();
    t.depths.forEach((d, depth) => { drawn += paintDepth(ctx, view, d, x0, y + L.trackPad / 2 + depth * L.row); });
    ctx.restore();
    ctx.fillStyle = item.pinned ? "#fff7e0" : "#fafafa";
    ctx.fillRect(0, Math.max(y, L.ruler), x0 - 1, item.h - (Math.max(y, L.ruler) - y));
    ctx.fillStyle = "#222";
    if (y + 9 >= L.ruler) ctx.fillText((item.pinned ? "📌 " : "") + t.label, 14, y + 9);
    ctx.strokeStyle = "#e3e3e3"; ctx.beginPath(); ctx.moveTo(0, y + item.h - 0.5); ctx.lineTo(width, y + item.h - 0.5); ctx.stroke();
  }
  paintOverlays(ctx, view);
  paintRuler(ctx, view);
  return drawn;
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
  ctx.beginPath(); ctx.rect(x0, LAYOUT.ruler, width - x0, height); ctx.clip();
  for (const m of marks) {
    // M marks are amber; labelled marks (a practice round's "one step" / "the gap", the
    // key's on the report) carry their own colour and name
    const a = x0 + scale.x(m.start_ns), b = x0 + scale.x(m.end_ns);
    ctx.fillStyle = m.color || "rgba(230,159,0,0.18)"; ctx.fillRect(a, LAYOUT.ruler, Math.max(1, b - a), height);
    if (m.label) {
      ctx.fillStyle = m.textColor || "#5a3d00"; ctx.font = "600 11px system-ui, sans-serif";
      ctx.fillText(m.label, Math.max(a, x0) + 4, LAYOUT.ruler + 10 + (m.row || 0) * 13);
      ctx.font = "11px system-ui, sans-serif";
    }
  }
  if (area) {
    const a = x0 + scale.x(area.start_ns), b = x0 + scale.x(area.end_ns);
    ctx.fillStyle = "rgba(0,114,178,0.12)"; ctx.fillRect(a, LAYOUT.ruler, b - a, height);
    ctx.strokeStyle = "#0072B2"; ctx.beginPath();
    ctx.moveTo(a + 0.5, LAYOUT.ruler); ctx.lineTo(a + 0.5, height); ctx.moveTo(b - 0.5, LAYOUT.ruler); ctx.lineTo(b - 0.5, height); ctx.stroke();
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
    ctx.strokeStyle = "rgba(0,0,0,0.35)"; ctx.beginPath(); ctx.moveTo(view.cursorX + 0.5, LAYOUT.ruler); ctx.lineTo(view.cursorX + 0.5, height); ctx.stroke();
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
  for (const t of ticks(scale, 100).ticks) {
    const x = x0 + t.x;
    ctx.strokeStyle = "#999"; ctx.beginPath(); ctx.moveTo(x + 0.5, LAYOUT.ruler - 8); ctx.lineTo(x + 0.5, LAYOUT.ruler); ctx.stroke();
    ctx.fillText(t.label, x + 3, 9);
  }
  data.header.steps.forEach((s, k) => {
    const a = x0 + scale.x(s.start_ns), b = x0 + scale.x(s.end_ns);
    if (Math.min(b, width) - Math.max(a, x0) < 110) return;  // only where the label fits its band
    ctx.fillStyle = "#6a3d9a";
    ctx.fillText(`step ${k} · ${formatDurationShort(s.end_ns - s.start_ns)}`, Math.max(a, x0) + 3, 21);
  });
  ctx.restore();
  ctx.fillStyle = "#444"; ctx.font = "10px system-ui, sans-serif";
  if (view.cursorX !== null && view.cursorX >= x0) ctx.fillText(`cursor ${formatDurationShort(scale.t(view.cursorX - x0))}`, 6, 14);
}
