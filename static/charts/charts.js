// Charts for the measurements whose natural output is a picture: the roofline (ncu), the
// ITL scatter and series (prefill), per-rank bars (per-rank). Data comes from the tools'
// JSON twin (`chart`); uPlot (vendored from npm) draws, with axes and units.

import uPlot from "/static/vendor/uplot-1.6.32.esm.js";

export const OKABE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#999999"];

export function render(el, chart, width = 380, height = Math.round(width * 0.62)) {
  el.replaceChildren();
  const make = { roofline, scatter, bars, series }[chart.kind];
  if (!make) return null;
  const [opts, data] = make(chart);
  const title = document.createElement("p");
  title.className = "chart-title";
  title.textContent = opts.title;
  el.append(title);
  return new uPlot({ ...opts, title: undefined, width, height }, data, el);
}

function axis(label, unit, extra = {}) {
  return { label: unit ? `${label} (${unit})` : label, labelSize: 18, size: 46, ...extra };
}

function roofline(c) {
  // x: arithmetic intensity on a log axis from 1 to 10x past the ridge and the points
  const hi = Math.max(c.ridge * 10, ...c.points.map((p) => p.ai * 4));
  const xs = [];
  for (let x = 1; x <= hi; x *= 1.25) xs.push(x);
  xs.push(c.ridge);
  c.points.forEach((p) => xs.push(p.ai));
  xs.sort((a, b) => a - b);
  const roof = xs.map((x) => Math.min(c.peak_tflops, x * c.mem_tbps));
  const pts = c.points.map((p) => xs.map((x) => (x === p.ai ? p.tflops : null)));
  return [{
    title: `Roofline: ${c.kernel.slice(0, 60)}`,
    scales: { x: { time: false, distr: 3 }, y: { distr: 3 } },
    axes: [axis(c.x_label, c.x_unit), axis("attainable", c.y_unit)],
    series: [{ label: "FLOP/byte" },
      { label: "roof", stroke: "#444", width: 1.5, points: { show: false } },
      ...c.points.map((p, i) => ({ label: p.label, stroke: OKABE[i + 1], paths: () => null,
                                   points: { show: true, size: 10, fill: OKABE[i + 1] } }))],
    legend: { show: true },
  }, [xs, roof, ...pts]];
}

function scatter(c) {
  const order = c.x.map((_, i) => i).sort((a, b) => c.x[a] - c.x[b]);
  return [{
    title: `${c.y_label} vs ${c.x_label}`,
    scales: { x: { time: false } },
    axes: [axis("prefill tokens", c.x_unit), axis("ITL", c.y_unit)],
    series: [{ label: c.x_unit }, { label: c.y_label, stroke: OKABE[1], paths: () => null,
                                    points: { show: true, size: 5, fill: OKABE[1] } }],
  }, [order.map((i) => c.x[i]), order.map((i) => c.y[i])]];
}

function series(c) {
  // stepped by default: each value holds from its iteration to the next, as latency per
  // iteration does; `points` draws a dot per value (scores per round) joined by lines
  const line = c.points ? { points: { show: true, size: 7, fill: OKABE[0] } }
                        : { points: { show: false }, paths: uPlot.paths.stepped({ align: 1 }) };
  return [{
    title: c.title || `${c.y_label} over time`,
    scales: { x: { time: false, ...(c.points ? { range: (u, min, max) => [min - 0.5, max + 0.5] } : {}) },
              ...(c.y_range ? { y: { range: () => c.y_range } } : {}) },
    axes: [axis(c.x_label, c.x_unit, c.points ? { splits: () => c.x, values: (u, v) => v.map((x) => `${x}`) } : {}),
           axis(c.y_label, c.y_unit)],
    series: [{ label: c.x_label || c.x_unit }, { label: c.y_label, stroke: OKABE[0], width: 1.5, ...line }],
  }, [c.x, c.y]];
}

function bars(c) {
  // stacked: each series drawn as a bar up to its cumulative height, tallest first
  const cum = [];
  let run = c.x.map(() => 0);
  for (const s of c.series) { run = run.map((v, i) => v + (s.values[i] || 0)); cum.push(run); }
  const barPaths = uPlot.paths.bars({ size: [0.6, 60] });
  const ser = c.series.map((s, i) => ({ label: s.label, fill: OKABE[i % OKABE.length], stroke: OKABE[i % OKABE.length],
                                        paths: barPaths, points: { show: false } })).reverse();
  return [{
    title: `Per-rank step decomposition (slowest: rank ${c.slowest_rank}, ${c.spread}x the median compute)`,
    scales: { x: { time: false, range: (u, min, max) => [min - 0.6, max + 0.6] },
              y: { range: (u, min, max) => [0, max * 1.05] } },  // stacked bars stand on zero
    axes: [axis(c.x_label, "", { splits: () => c.x, values: (u, v) => v.map((x) => `${x}`) }),
           axis("time per step", c.y_unit)],
    series: [{ label: "rank" }, ...ser],
  }, [c.x, ...cum.slice().reverse()]];
}
