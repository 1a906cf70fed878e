// The area selection's figures, as Perfetto's area-selection panel shows them: per slice
// name, occurrences, wall duration (time inside the span) and average; per track, the
// busy and idle time inside the span.

export function areaSummary(data, area) {
  const { ts, dur, name } = data.cols;
  const a = area.start_ns, b = area.end_ns;
  const byName = new Map();
  const tracks = [];
  for (const t of data.tracks) {
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
    for (const d of t.depths) {
      let lo = 0, hi = d.rows.length;
      while (lo < hi) { const m = (lo + hi) >> 1; if (d.ends[m] > a) hi = m; else lo = m + 1; }
      for (let j = lo; j < d.rows.length && ts[d.rows[j]] < b; j++) {
        const r = d.rows[j];
        const w = Math.min(ts[r] + dur[r], b) - Math.max(ts[r], a);
        if (w <= 0) continue;
        const n = data.header.names[name[r]];
        const x = byName.get(n) || { name: n, count: 0, wall_ns: 0 };
        x.count++; x.wall_ns += w;
        byName.set(n, x);
      }
    }
    if (t.hi > t.lo) tracks.push({ label: t.label, busy_ns: busy, idle_ns: b - a - busy });
  }
  const names = [...byName.values()].sort((x, y) => y.wall_ns - x.wall_ns);
  return { span_ns: b - a, names, tracks };
}
