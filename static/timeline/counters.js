// Counter tracks (SM clock, power, queue depth), as Perfetto draws them: one track per
// counter, a filled step chart scaled to the track's maximum, its name and unit in the
// label column, the value under the cursor. The samples ride in the timeline's header
// (app/web/timeline.py `encode`): each value holds from its time until the next sample.

import { LAYOUT } from "./paint.js";

export const COUNTER_H = 40;  // px: room for the chart and the value label over it
export const COUNTERS_GROUP = "Counters";
const FILL = "rgba(0,114,178,0.28)", LINE = "#005a8c", TEXT = "#222";

// Each chart's scale, once per load: the maximum over the counters of one metric (a name and
// unit, whichever rank: "rank 3 · SM clock" beside "rank 0 · SM clock"), so stacked ranks
// compare by height, as Perfetto's shared y-axis does.
const metric = (c) => `${c.name.replace(/^rank \d+ · /, "")}|${c.unit}`;
function prepared(data) {
  if (!data.counterMax) {
    const list = data.header.counters || [], top = new Map();
    for (const c of list) top.set(metric(c), Math.max(top.get(metric(c)) || 0, ...c.values));
    data.counterMax = list.map((c) => top.get(metric(c)));
  }
  return data.counterMax;
}

// Lay the counters out as one group above the tracks; returns the next free y.
export function layoutCounters(data, collapsed, items, y) {
  const list = data.header.counters || [];
  if (!list.length) return y;
  const folded = collapsed.has(COUNTERS_GROUP);
  items.push({ kind: "group", label: COUNTERS_GROUP, y, h: LAYOUT.groupH, collapsed: folded });
  y += LAYOUT.groupH;
  if (folded) return y;
  list.forEach((c, i) => { items.push({ kind: "counter", counter: i, y, h: COUNTER_H }); y += COUNTER_H; });
  return y;
}

export const counterLabel = (c) => `${c.name} (${c.unit})`;

// The index of the sample holding at `t` (the last one at or before it), or -1 before the first.
export function sampleAt(ts, t) {
  let lo = 0, hi = ts.length;
  while (lo < hi) { const m = (lo + hi) >> 1; if (ts[m] <= t) lo = m + 1; else hi = m; }
  return lo - 1;
}

const fmt = (v) => (Math.abs(v) >= 100 || Number.isInteger(v) ? Math.round(v).toLocaleString() : v.toFixed(1));

export function paintCounter(ctx, view, item, y, top) {
  const { data, scale, width } = view;
  const c = data.header.counters[item.counter];
  const max = prepared(data)[item.counter] || 1;
  const x0 = LAYOUT.labelW, pad = 4, h = item.h - 2 * pad;
  const base = y + pad + h;
  const yOf = (v) => base - (v / max) * h;
  const endNs = Math.max(data.endNs, c.ts_ns[c.ts_ns.length - 1]);
  // only the samples in view (and the one holding at its left edge)
  const first = Math.max(0, sampleAt(c.ts_ns, scale.start));
  paintCounterPath(ctx, view, c, item, y, top, first, endNs, yOf, base);
  // the label column: name and unit, the scale's top
  ctx.fillStyle = "#fafafa"; ctx.fillRect(0, Math.max(y, top), x0 - 1, item.h - (Math.max(y, top) - y));
  if (y + 9 >= top) {
    ctx.fillStyle = TEXT; ctx.font = "11px system-ui, sans-serif";
    ctx.fillText(counterLabel(c), 14, y + 11);
    ctx.fillStyle = "#57606a"; ctx.font = "10px system-ui, sans-serif";
    ctx.fillText(`scale 0–${fmt(max)} ${c.unit}`, 14, y + 26);
    ctx.font = "11px system-ui, sans-serif";
  }
  ctx.strokeStyle = "#e3e3e3"; ctx.beginPath(); ctx.moveTo(0, y + item.h - 0.5); ctx.lineTo(width, y + item.h - 0.5); ctx.stroke();
  if (y + item.h > top) (view.countersDrawn || (view.countersDrawn = [])).push(c.name);
}

// The step chart: filled under, its edge drawn over, and the value under the cursor.
function paintCounterPath(ctx, view, c, item, y, top, first, endNs, yOf, base) {
  const { scale, width } = view;
  const x0 = LAYOUT.labelW;
  ctx.save();
  ctx.beginPath(); ctx.rect(x0, Math.max(y, top), width - x0, item.h); ctx.clip();
  const edge = new Path2D();
  let startX = null, lastX = null;
  for (let i = first; i < c.ts_ns.length; i++) {
    if (c.ts_ns[i] > scale.end) break;
    const a = x0 + Math.max(-2, scale.x(c.ts_ns[i]));
    const next = i + 1 < c.ts_ns.length ? c.ts_ns[i + 1] : endNs;
    const b = x0 + Math.min(width - x0 + 2, scale.x(next));
    const v = yOf(c.values[i]);
    if (startX === null) { edge.moveTo(a, v); startX = a; } else edge.lineTo(a, v);
    edge.lineTo(b, v);
    lastX = b;
  }
  if (startX !== null) {
    const fill = new Path2D(edge);
    fill.lineTo(lastX, base); fill.lineTo(startX, base); fill.closePath();
    ctx.fillStyle = FILL; ctx.fill(fill);
    ctx.strokeStyle = LINE; ctx.lineWidth = 1; ctx.stroke(edge);
  }
  const cx = view.cursorX;
  if (cx !== null && cx >= x0) {
    const i = sampleAt(c.ts_ns, scale.t(cx - x0));
    if (i >= 0 && scale.t(cx - x0) <= endNs) {
      const text = `${fmt(c.values[i])} ${c.unit}`;
      ctx.font = "600 11px system-ui, sans-serif";
      const w = ctx.measureText(text).width + 8;
      const bx = cx + 6 + w > width ? cx - 6 - w : cx + 6;
      ctx.fillStyle = "rgba(255,255,255,0.92)"; ctx.fillRect(bx, y + 3, w, 15);
      ctx.strokeStyle = "#8c959f"; ctx.strokeRect(bx + 0.5, y + 3.5, w - 1, 14);
      ctx.fillStyle = TEXT; ctx.fillText(text, bx + 4, y + 11);
      ctx.font = "11px system-ui, sans-serif";
    }
  }
  ctx.restore();
}
