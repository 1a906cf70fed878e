// Showing what a key just selected: pan and zoom so a slice (or a span) is centred at a
// readable width, then scroll its track into view. A 9 µs launch in a 180 ms view is a
// tenth of a pixel: selecting it without this shows nothing.

import { LAYOUT, tracksTop } from "./paint.js";

export const MIN_REVEAL_PX = 40;     // narrower than this, a slice's label does not fit
export const MIN_REVEAL_FRAC = 0.02; // of the view's width, on a wide screen
export const MAX_REVEAL_FRAC = 0.8;  // wider than this, its edges are off-screen or at the border
const MIN_SPAN_NS = 50;              // the viewer's zoom floor

// The window [start, end] (ns) that shows [aNs, bNs] centred at a readable width, or the
// current one when it already does. `scale` is a TimeScale; nothing is changed.
export function revealWindow(scale, aNs, bNs) {
  const dur = Math.max(0, bNs - aNs);
  const w = scale.width;
  const minPx = Math.min(w * MAX_REVEAL_FRAC, Math.max(MIN_REVEAL_PX, w * MIN_REVEAL_FRAC));
  const px = dur / scale.nsPerPx;
  const inside = aNs >= scale.start && bNs <= scale.end;
  let span = scale.end - scale.start;
  if (dur === 0) return inside ? [scale.start, scale.end] : [aNs - span / 2, aNs + span / 2];  // a point: no width to read
  if (inside && px >= minPx && px <= w * MAX_REVEAL_FRAC + 1) return [scale.start, scale.end];
  if (px < minPx) span = dur * w / minPx;
  else if (px > w * MAX_REVEAL_FRAC) span = dur / MAX_REVEAL_FRAC;
  span = Math.max(MIN_SPAN_NS, span);
  const mid = (aNs + bNs) / 2;
  return [mid - span / 2, mid + span / 2];
}

// The y (layout px, before scrolling) of a slice's row, or null when its track is folded.
export function rowY(view, row) {
  const t = view.data.cols.track[row];
  const item = view.layout.items.find((i) => i.kind === "track" && i.track === t);
  return item ? item.y + LAYOUT.trackPad / 2 + view.data.depth[row] * LAYOUT.row : null;
}

// Scroll so layout y `y` sits in the visible tracks: left alone when it already does, else
// a third of the way down them.
export function scrollToY(view, y) {
  const top = tracksTop(view);
  const onScreen = y - view.scrollY;
  if (onScreen >= top && onScreen + LAYOUT.row <= view.height - 8) return;
  const max = Math.max(0, view.layout.height - view.height + 40);
  view.scrollY = Math.max(0, Math.min(max, y - top - (view.height - top) / 3));
}

export function revealRow(view, row) {
  const { ts, dur } = view.data.cols;
  const [a, b] = revealWindow(view.scale, ts[row], ts[row] + dur[row]);
  view.scale.set(a, b, view.scale.width);
  const y = rowY(view, row);
  if (y !== null) scrollToY(view, y);
}

export function revealSpan(view, startNs, endNs) {
  const [a, b] = revealWindow(view.scale, startNs, endNs);
  view.scale.set(a, b, view.scale.width);
}

// The slice after (dir 1) or before (dir -1) `row` on its track at its depth, or -1: `.`
// and `,`. Rows of one depth are sorted by start (data.js).
export function neighbour(data, row, dir) {
  const t = data.tracks[data.cols.track[row]];
  const d = t.depths[data.depth[row]];
  if (!d) return -1;
  const j = d.rows.indexOf(row) + dir;
  return j >= 0 && j < d.rows.length ? d.rows[j] : -1;
}
