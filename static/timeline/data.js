// The trace as columns (app/web/timeline.py's binary), plus the per-track, per-depth
// indexes the painter needs: slices of one depth never overlap, so both their starts and
// their ends are sorted and a visible range is two binary searches away.

const TYPES = { float64: Float64Array, int32: Int32Array, uint8: Uint8Array, int16: Int16Array };
// Columns: ts, dur (ns from t0), name (into names), track, corr (flow id), cat, src (row id
// at the source, for the slice's args).

export function decode(buf) {
  const view = new DataView(buf);
  const headLen = view.getUint32(0, true);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 4, headLen)));
  let base = 4 + headLen;
  base += (8 - (base % 8)) % 8;
  const cols = {};
  for (const c of header.columns) cols[c.name] = new TYPES[c.dtype](buf, base + c.offset, c.length);
  return index(header, cols);
}

function index(header, cols) {
  const n = header.count;
  const { ts, dur, track } = cols;
  const depth = new Uint8Array(n);
  const tracks = header.tracks.map((t) => ({ ...t, lo: 0, hi: 0, depths: [] }));
  // Rows come sorted by (track, ts, -dur): one pass finds each track's range and nests
  // its slices with a stack of open ends.
  let i = 0;
  while (i < n) {
    const tr = track[i];
    const lo = i;
    const stack = [];
    while (i < n && track[i] === tr) {
      const s = ts[i], e = s + dur[i];
      while (stack.length && stack[stack.length - 1] <= s) stack.pop();
      depth[i] = Math.min(stack.length, 255);
      stack.push(e);
      i++;
    }
    tracks[tr].lo = lo;
    tracks[tr].hi = i;
  }
  for (const t of tracks) {
    let maxDepth = -1;
    for (let k = t.lo; k < t.hi; k++) if (depth[k] > maxDepth) maxDepth = depth[k];
    const counts = new Int32Array(maxDepth + 1);
    for (let k = t.lo; k < t.hi; k++) counts[depth[k]]++;
    const lists = Array.from(counts, (c) => new Int32Array(c));
    const fill = new Int32Array(maxDepth + 1);
    for (let k = t.lo; k < t.hi; k++) lists[depth[k]][fill[depth[k]]++] = k;
    t.depths = lists.map((rows) => {
      const ends = new Float64Array(rows.length);
      for (let j = 0; j < rows.length; j++) ends[j] = ts[rows[j]] + dur[rows[j]];
      return { rows, ends };
    });
  }
  let endNs = 0;
  for (let k = 0; k < n; k++) endNs = Math.max(endNs, ts[k] + dur[k]);
  return { header, cols, depth, tracks, endNs, count: n };
}

// First index j in `ends` (sorted) with ends[j] > t.
export function firstEndingAfter(ends, t) {
  let lo = 0, hi = ends.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (ends[mid] > t) hi = mid; else lo = mid + 1; }
  return lo;
}

// The slice a launch or GPU op is linked to (they share a correlation id), or -1. Found by
// a scan when asked (a few ms at a million rows) rather than a map built for every load.
export function partner(data, row) {
  const c = data.cols.corr[row];
  if (c <= 0) return -1;
  const corr = data.cols.corr;
  for (let k = 0; k < corr.length; k++) if (corr[k] === c && k !== row) return k;
  return -1;
}

export async function load(url) {
  const res = await fetch(url);
  if (!res.ok) throw new Error((await res.json().catch(() => ({}))).error || `HTTP ${res.status}`);
  return decode(await res.arrayBuffer());
}
