// A slice's place in its track's nesting: its parent, its direct children and its self time
// (duration less its direct children's), from the per-depth indexes data.js builds. A
// depth's slices never overlap and a parent contains its children (data.js nests them
// with a stack), so each is a binary search and a short walk.

import { firstEndingAfter } from "./data.js";

export function parentOf(data, row) {
  const d = data.depth[row];
  if (d === 0) return -1;
  const above = data.tracks[data.cols.track[row]].depths[d - 1];
  if (!above) return -1;
  const j = firstEndingAfter(above.ends, data.cols.ts[row]);
  const p = above.rows[j];
  return p !== undefined && data.cols.ts[p] <= data.cols.ts[row] ? p : -1;
}

export function childrenOf(data, row) {
  const below = data.tracks[data.cols.track[row]].depths[data.depth[row] + 1];
  if (!below) return [];
  const { ts, dur } = data.cols;
  const end = ts[row] + dur[row];
  const out = [];
  for (let j = firstEndingAfter(below.ends, ts[row]); j < below.rows.length && ts[below.rows[j]] < end; j++) {
    if (ts[below.rows[j]] >= ts[row]) out.push(below.rows[j]);
  }
  return out;
}

export function selfTimeNs(data, row, children = childrenOf(data, row)) {
  let inner = 0;
  for (const c of children) inner += data.cols.dur[c];
  return Math.max(0, data.cols.dur[row] - inner);
}
