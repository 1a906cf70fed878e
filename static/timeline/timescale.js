// Pure time <-> pixel maths and ruler ticks. No DOM, no state beyond the visible window.
// Times are ns relative to the trace's first event (data.js), as float64.

export class TimeScale {
  constructor(startNs, endNs, widthPx) {
    this.set(startNs, endNs, widthPx);
  }
  set(startNs, endNs, widthPx) {
    this.start = startNs;
    this.end = Math.max(endNs, startNs + 1); // never a zero-length window
    this.width = Math.max(1, widthPx);
    this.nsPerPx = (this.end - this.start) / this.width;
  }
  x(ns) { return (ns - this.start) / this.nsPerPx; }
  t(px) { return this.start + px * this.nsPerPx; }
  // Zoom by `factor` (<1 zooms in) keeping the time under `px` fixed, within [minNs, maxNs].
  zoom(factor, px, minSpanNs, maxSpanNs) {
    const anchor = this.t(px);
    const span = Math.min(maxSpanNs, Math.max(minSpanNs, (this.end - this.start) * factor));
    const start = anchor - (px / this.width) * span;
    this.set(start, start + span, this.width);
  }
  pan(px) { const d = px * this.nsPerPx; this.set(this.start + d, this.end + d, this.width); }
}

const STEPS = [1, 2, 5];

// Tick spacing: the smallest 1/2/5 x 10^k ns giving at least `minPx` between ticks.
export function tickStep(nsPerPx, minPx = 90) {
  const target = nsPerPx * minPx;
  let p = 1;
  while (true) {
    for (const s of STEPS) if (s * p >= target) return s * p;
    p *= 10;
  }
}

// A duration as people read it on a ruler: 1.5 s, 250 ms, 40 µs, 800 ns.
export function formatDuration(ns, digits = 3) {
  const a = Math.abs(ns);
  const fmt = (v, unit) => `${+v.toFixed(digits)} ${unit}`;
  if (a >= 1e9) return fmt(ns / 1e9, "s");
  if (a >= 1e6) return fmt(ns / 1e6, "ms");
  if (a >= 1e3) return fmt(ns / 1e3, "µs");
  return fmt(ns, "ns");
}

export function ticks(scale, minPx = 90) {
  const step = tickStep(scale.nsPerPx, minPx);
  const first = Math.ceil(scale.start / step) * step;
  const out = [];
  for (let t = first; t <= scale.end; t += step) out.push({ ns: t, x: scale.x(t), label: formatDuration(t, 6) });
  return { step, ticks: out };
}
