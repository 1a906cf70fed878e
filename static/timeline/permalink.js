// A permalink: the view (window, scroll), the selected slice (by its source id, stable across
// loads), the area, the pinned tracks and the notes, in the URL's fragment, which never
// reaches a server. Opening such a URL puts them back.

const round = (x) => Math.round(x);

export function encodeState(s) {
  const p = new URLSearchParams();
  p.set("v", [round(s.start_ns), round(s.end_ns), round(s.scroll_y || 0)].join(","));
  if (s.src != null) p.set("s", String(s.src));
  if (s.area) p.set("a", `${round(s.area.start_ns)},${round(s.area.end_ns)}`);
  if (s.pinned && s.pinned.length) p.set("p", s.pinned.join(","));
  if (s.notes && s.notes.length) p.set("n", JSON.stringify(s.notes.map((n) => [n.id, round(n.start_ns), n.end_ns == null ? null : round(n.end_ns), n.text])));
  return p.toString();
}

const nums = (v) => (v ? v.split(",").map(Number) : []);

// The state in `hash` ("#v=…"), or null when it is not a permalink (another page's fragment,
// such as the console's #link=, or a broken one).
export function decodeState(hash) {
  const p = new URLSearchParams((hash || "").replace(/^#/, ""));
  const [start, end, scroll] = nums(p.get("v"));
  if (!Number.isFinite(start) || !Number.isFinite(end) || end <= start) return null;
  const out = { start_ns: start, end_ns: end, scroll_y: Number.isFinite(scroll) ? scroll : 0, src: null, area: null, pinned: [], notes: [] };
  if (p.has("s") && Number.isFinite(Number(p.get("s")))) out.src = Number(p.get("s"));
  const [a, b] = nums(p.get("a"));
  if (Number.isFinite(a) && Number.isFinite(b) && b > a) out.area = { start_ns: a, end_ns: b };
  out.pinned = nums(p.get("p")).filter(Number.isInteger);
  try {
    const n = JSON.parse(p.get("n") || "[]");
    if (Array.isArray(n)) out.notes = n.filter(Array.isArray).map(([id, s, e, text]) => ({ id: String(id), start_ns: s, end_ns: e, text: String(text ?? "") }));
  } catch { /* a broken notes part: the view still opens */ }
  return out;
}

// The state a permalink carries, read from the viewer.
export function stateOf(view, notes) {
  const row = view.selectedRow;
  return {
    start_ns: view.scale.start, end_ns: view.scale.end, scroll_y: view.scrollY,
    src: row >= 0 ? view.data.cols.src[row] : null,
    area: view.area && view.area.end_ns > view.area.start_ns ? view.area : null,
    pinned: [...view.pinned], notes,
  };
}

// The row whose source id is `src`, or -1 (a scan: once per opened link).
export function rowOfSrc(data, src) {
  const col = data.cols.src;
  for (let r = 0; r < col.length; r++) if (col[r] === src) return r;
  return -1;
}
