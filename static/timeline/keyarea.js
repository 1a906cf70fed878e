// The area selection by keyboard: B puts its start and E its end at the cursor (the view's
// centre when the mouse is elsewhere), the arrows move its end and Shift+arrows its start.
// With R (a slice's span) this makes an area, so the marks, without a mouse.

export const NUDGE_FRAC = 0.01;  // an arrow moves an edge by 1% of the visible span (Alt: one pixel)

// The area after key `key` ("b", "e", "arrowleft", "arrowright") at time `tNs`, or
// undefined when the key does not touch the area. A zero-width area is a start waiting
// for its end.
export function areaAfterKey(area, key, { tNs, shift = false, alt = false, scale }) {
  if (key === "b") return area && area.end_ns > tNs ? { start_ns: tNs, end_ns: area.end_ns } : { start_ns: tNs, end_ns: tNs };
  if (key === "e") {
    if (!area) return { start_ns: tNs, end_ns: tNs };
    return { start_ns: Math.min(area.start_ns, tNs), end_ns: Math.max(area.start_ns, tNs) };
  }
  if ((key === "arrowleft" || key === "arrowright") && area) {
    const step = (alt ? scale.nsPerPx : (scale.end - scale.start) * NUDGE_FRAC) * (key === "arrowleft" ? -1 : 1);
    const a = shift ? area.start_ns + step : area.start_ns, b = shift ? area.end_ns : area.end_ns + step;
    return { start_ns: Math.min(a, b), end_ns: Math.max(a, b) };
  }
  return undefined;
}
