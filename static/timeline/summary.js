// The area selection's figures, as Perfetto's area-selection panel shows them: per slice
// name, occurrences, wall duration (time inside the span), self time (wall less the wall of
// its direct children inside the span) and average; per track, the busy and idle time
// inside the span. `trackIds` (ids; all tracks when null) limits both to the tracks chosen.

import { parentOf } from "./slicetree.js";

export function areaSummary(data, area, trackIds = null) {
  const { ts, dur, name } = data.cols;
  const a = area.start_ns, b = area.end_ns;
  const only = trackIds ? new Set(trackIds) : null;
  const byName = new Map();
  const tracks = [];
  const entry = (r) => {
    const n = data.header.names[name[r]];
    let x = byName.get(n);
    if (!x) byName.set(n, (x = { name: n, count: 0, wall_ns: 0, self_ns: 0 }));
    return x;
  };
  for (const t of data.tracks) {
    if (only && !only.has(t.id)) continue;
    let busy = 0, runEnd = -Infinity, runStart = 0;
    const top = t.depths[0];
    if (top) {
      let lo = 0, hi = top.rows.length;
      while (lo < hi) { const m = (lo + hi) >> 1; if (top.ends[m] > a) hi = m; else lo = m + 1; }
      for (let j = lo; j < top.rows.length && ts[top.rows[j]] < b; j++) {
        const r = top.rows[j];
        const s = Math.max(ts[r], a), e = Math.min(ts[r] + dur[r], b);
        if (e <= s) continue;
        if (s > runEnd) { if (runEnd > -Infinity) busy += runEnd - runStart; runStart = s; runEnd = e; }
        else runEnd = Math.max(runEnd, e);
      }
    }
    if (runEnd > -Infinity) busy += runEnd - runStart;
    t.depths.forEach((d, depth) => {
      let lo = 0, hi = d.rows.length;
      while (lo < hi) { const m = (lo + hi) >> 1; if (d.ends[m] > a) hi = m; else lo = m + 1; }
      for (let j = lo; j < d.rows.length && ts[d.rows[j]] < b; j++) {
        const r = d.rows[j];
        const w = Math.min(ts[r] + dur[r], b) - Math.max(ts[r], a);
        if (w <= 0) continue;
        const x = entry(r);
        x.count++; x.wall_ns += w; x.self_ns += w;
        // a child's time inside the span is not its parent's self time (the parent holds it whole)
        if (depth > 0) { const p = parentOf(data, r); if (p >= 0) entry(p).self_ns -= w; }
      }
    });
    if (t.hi > t.lo) tracks.push({ id: t.id, label: t.label, group: t.group, busy_ns: busy, idle_ns: b - a - busy });
  }
  const names = [...byName.values()].filter((x) => x.count > 0).sort((x, y) => y.wall_ns - x.wall_ns);
  return { span_ns: b - a, names, tracks };
}
