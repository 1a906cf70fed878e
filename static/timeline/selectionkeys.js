// The keys that move or make a selection, beside viewer.js's: `.` / `,` the next / previous
// slice on the selected one's track and depth, R the selected slice as an area, B / E / the
// arrows the area by keyboard (keyarea.js), Shift+M a note, L a permalink. Each reveals
// what it selects (reveal.js).

import { areaAfterKey } from "./keyarea.js";
import { LAYOUT } from "./paint.js";
import { neighbour } from "./reveal.js";

// `v`: { view, data, select(row, reveal), setArea(area), notes, permalink() }. True when the
// key was one of these (the caller stops there).
export function selectionKey(e, v) {
  const { view, data } = v;
  if (e.ctrlKey || e.metaKey) return false;
  const k = e.key.toLowerCase();
  const row = view.selectedRow;
  if ((k === "." || k === ",") && row >= 0) {
    const next = neighbour(data, row, k === "." ? 1 : -1);
    if (next >= 0) v.select(next, true);
    e.preventDefault();
    return true;
  }
  if (k === "r" && row >= 0 && !e.shiftKey) {
    const { ts, dur } = data.cols;
    v.setArea({ start_ns: ts[row], end_ns: ts[row] + dur[row] });
    return true;
  }
  if (k === "m" && e.shiftKey) {
    const span = row >= 0 ? { start_ns: data.cols.ts[row], end_ns: data.cols.ts[row] + data.cols.dur[row] }
      : view.area && view.area.end_ns > view.area.start_ns ? { start_ns: view.area.start_ns, end_ns: view.area.end_ns }
      : { start_ns: cursorNs(view), end_ns: null };
    e.preventDefault();  // the M would land in the note's text box
    v.notes.begin(span);
    return true;
  }
  if (k === "l" && !e.shiftKey) { v.permalink(); return true; }
  if (k === "b" || k === "e" || k === "arrowleft" || k === "arrowright") {
    if (e.altKey && (k === "b" || k === "e")) return false;
    const area = areaAfterKey(view.area, k, { tNs: cursorNs(view), shift: e.shiftKey, alt: e.altKey, scale: view.scale });
    if (area === undefined) return false;
    e.preventDefault();
    v.setArea(area);
    return true;
  }
  return false;
}

// Where a key acts: the time under the mouse when it is over the tracks, else the centre.
export function cursorNs(view) {
  const px = view.cursorX !== null && view.cursorX >= LAYOUT.labelW ? view.cursorX - LAYOUT.labelW : view.scale.width / 2;
  return view.scale.t(px);
}
