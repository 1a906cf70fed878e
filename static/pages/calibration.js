// The calibration page's charts (uPlot): leniency per rater with its interval and spread,
// agreement figures against their bars, drift by week. The numbers come from the page's
// JSON block (the same dict as /calibration.json); the tables beside the charts carry every
// figure, so a chart is a picture of them, not the only place they are.

import uPlot from "/static/vendor/uplot-1.6.32.esm.js";
import { OKABE } from "/static/charts/charts.js";

const page = JSON.parse(document.getElementById("calibration-data").textContent);
const SHORT = { discipline_order: "discipline", findings: "findings", trap: "trap", root_cause: "root cause",
                measurement: "measure", fix_win: "fix & win", recommendation: "overall" };
const items = page.criteria.map((c) => c.id);
const pick = (part, id) => (id === "recommendation" ? part.overall : part.criteria[id]);
const px = (n) => n * uPlot.pxRatio;
const HEIGHT = 250;

function axis(label, extra = {}) {
  return { label, labelSize: 18, size: 44, ...extra };
}

function caption(el, title, note) {
  const p = document.createElement("p");
  p.className = "chart-title";
  p.textContent = title;
  el.append(p);
  if (note) {
    const n = document.createElement("p");
    n.className = "chart-note";
    n.textContent = note;
    el.append(n);
  }
}

function empty(el, title, why) {
  el.replaceChildren();
  caption(el, title);
  const p = document.createElement("p");
  p.className = "needs chart-empty";
  p.textContent = why;
  el.append(p);
}

// Points per category with whiskers: `series` [{label, color, values, lo, hi, sdLo?, sdHi?}],
// `lines` [{y, label}] drawn across the plot (bars to pass), `ticks` [{values, label}]: a short
// dash per category (a bar that differs per category).
function dotChart(el, { title, note, labels, series, lines = [], ticks = [], yLabel, yRange }) {
  el.replaceChildren();
  caption(el, title, note);
  const n = labels.length;
  const spread = series.length > 1 ? 0.36 : 0;
  const offs = series.map((_, s) => (series.length > 1 ? -spread / 2 + (spread * s) / (series.length - 1) : 0));
  const xs = [];
  for (let i = 0; i < n; i++) offs.forEach((o) => xs.push(i + o));
  const data = [xs, ...series.map((s, si) => xs.map((_, j) => (j % series.length === si ? s.values[Math.floor(j / series.length)] : null)))];

  const draw = (u) => {
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    lines.forEach((l) => {
      const y = u.valToPos(l.y, "y", true);
      ctx.strokeStyle = l.color || "#a40e26";
      ctx.lineWidth = px(1.25);
      ctx.setLineDash(l.solid ? [] : [px(6), px(4)]);
      ctx.beginPath();
      ctx.moveTo(left, y);
      ctx.lineTo(left + width, y);
      ctx.stroke();
    });
    ctx.setLineDash([]);
    ticks.forEach((t) => {
      ctx.strokeStyle = t.color || "#555";
      ctx.lineWidth = px(2);
      t.values.forEach((v, i) => {
        if (v == null) return;
        const y = u.valToPos(v, "y", true);
        const x0 = u.valToPos(i - 0.3, "x", true);
        const x1 = u.valToPos(i + 0.3, "x", true);
        ctx.beginPath();
        ctx.moveTo(x0, y);
        ctx.lineTo(x1, y);
        ctx.stroke();
      });
    });
    series.forEach((s, si) => {
      ctx.strokeStyle = s.color;
      s.values.forEach((v, i) => {
        if (v == null) return;
        const x = u.valToPos(i + offs[si], "x", true);
        const whisker = (lo, hi, w, cap) => {
          if (lo == null || hi == null) return;
          const y0 = u.valToPos(lo, "y", true);
          const y1 = u.valToPos(hi, "y", true);
          ctx.lineWidth = px(w);
          ctx.beginPath();
          ctx.moveTo(x, y0);
          ctx.lineTo(x, y1);
          if (cap) {
            ctx.moveTo(x - px(cap), y0);
            ctx.lineTo(x + px(cap), y0);
            ctx.moveTo(x - px(cap), y1);
            ctx.lineTo(x + px(cap), y1);
          }
          ctx.stroke();
        };
        if (s.sdLo) whisker(s.sdLo[i], s.sdHi[i], 1, 0);
        whisker(s.lo?.[i], s.hi?.[i], s.sdLo ? 4 : 2, s.sdLo ? 0 : 4);
      });
    });
    ctx.restore();
  };

  const opts = {
    width: Math.max(280, el.clientWidth), height: HEIGHT,
    scales: { x: { time: false, range: () => [-0.5, n - 0.5] }, y: { range: () => yRange } },
    axes: [axis("", { splits: () => labels.map((_, i) => i), values: (u, v) => v.map((i) => labels[i] ?? ""),
                     gap: 4, size: 34 }),
           axis(yLabel)],
    series: [{ label: "" }, ...series.map((s) => ({
      label: s.label, stroke: s.color, paths: () => null, points: { show: true, size: 9, fill: s.color, stroke: s.color },
    }))],
    legend: { show: series.length > 1, live: false },
    cursor: { show: false },
    hooks: { draw: [draw] },
  };
  return new uPlot(opts, data, el);
}

function range(values, lo, hi, pad = 0.1) {
  const all = values.filter((v) => v != null && Number.isFinite(v));
  return [Math.min(lo, ...all) - pad, Math.max(hi, ...all) + pad];
}

const val = (f) => (f && f.value != null ? f.value : null);
const lo = (f) => (f && f.value != null && f.ci95 ? f.ci95[0] : null);
const hi = (f) => (f && f.value != null && f.ci95 ? f.ci95[1] : null);

// Weeks on the x axis: one tick per ISO week (Monday), labelled by its name, thinned to one
// every ~70 px so a year of weeks stays legible.
const weekXs = (d) => d.week_starts.map((w) => Date.parse(`${w}T00:00:00Z`) / 1000);
function weekAxis(d, xs) {
  const name = new Map(xs.map((x, i) => [x, d.weeks[i].replace(/^\d{4}-/, "")]));
  return axis("ISO week", {
    splits: (u) => { const every = Math.max(1, Math.ceil(xs.length / Math.max(1, u.bbox.width / uPlot.pxRatio / 70)));
                     return xs.filter((_, i) => i % every === 0); },
    values: (u, splits) => splits.map((x) => name.get(x) ?? ""),
  });
}

// -- the charts ---------------------------------------------------------------------------

const charts = {
  leniency(el) {
    const title = "Leniency per rater (levels above the other raters)";
    const rs = page.raters.filter((r) => r.leniency.value != null);
    if (!rs.length) {
      const need = page.raters.length ? page.raters[0].leniency.why : `needs ${page.minimums.shared_rounds} rounds scored by two raters`;
      return empty(el, title, `Nothing to chart yet: ${need}.`);
    }
    const L = (r) => r.leniency;
    const sd = (r, sign) => (L(r).sd_by_round == null ? null : L(r).value + sign * L(r).sd_by_round);
    const values = rs.flatMap((r) => [L(r).value, L(r).ci95?.[0], L(r).ci95?.[1], sd(r, -1), sd(r, 1)]);
    return dotChart(el, {
      title, note: "thick: 95% interval · thin: ± 1 SD of the per-round difference",
      labels: rs.map((r) => r.email.split("@")[0]),
      series: [{ label: "leniency", color: OKABE[0], values: rs.map((r) => L(r).value),
                 lo: rs.map((r) => L(r).ci95?.[0]), hi: rs.map((r) => L(r).ci95?.[1]),
                 sdLo: rs.map((r) => sd(r, -1)), sdHi: rs.map((r) => sd(r, 1)) }],
      lines: [{ y: 0, label: "", color: "#777", solid: true }],
      yLabel: "levels", yRange: range(values, -1, 1, 0.15),
    });
  },

  hh(el) {
    const hh = page.agreement.human_human;
    const title = `Agreement between raters (${hh.base === "gold" ? "gold set" : "double-scored rounds"}, n = ${hh.n_rounds})`;
    const qwk = items.map((id) => pick(hh, id).qwk);
    const icc = items.map((id) => pick(hh, id).icc);
    if (![...qwk, ...icc].some((f) => f.value != null)) return empty(el, title, `Nothing to chart yet: ${qwk[6].why}.`);
    const bar = page.thresholds.qwk_min;
    return dotChart(el, {
      title, note: `dashed: the ${bar.toFixed(2)} bar`, labels: items.map((id) => SHORT[id] || id),
      series: [{ label: "kappa", color: OKABE[0], values: qwk.map(val), lo: qwk.map(lo), hi: qwk.map(hi) },
               { label: "ICC(2,1)", color: OKABE[1], values: icc.map(val), lo: icc.map(lo), hi: icc.map(hi) }],
      lines: [{ y: bar, label: `${bar.toFixed(2)}` }], yLabel: "agreement",
      yRange: range([...qwk, ...icc].flatMap((f) => [val(f), lo(f), hi(f)]), 0, 1, 0.05),
    });
  },

  ah(el) {
    const ah = page.agreement.auto_human;
    const hh = page.agreement.human_human;
    const title = `The automatic score against the raters (n = ${ah.n_rounds})`;
    const qwk = items.map((id) => pick(ah, id).qwk);
    const r = items.map((id) => pick(ah, id).r);
    if (![...qwk, ...r].some((f) => f.value != null)) return empty(el, title, `Nothing to chart yet: ${qwk[6].why}.`);
    const bar = page.thresholds.qwk_min;
    const drop = page.thresholds.drop_max;
    const floor = items.map((id) => { const v = val(pick(hh, id).qwk); return v == null ? null : v - drop; });
    return dotChart(el, {
      title, note: `dashed: the ${bar.toFixed(2)} bar · grey dash: human-human kappa − ${drop.toFixed(2)} (the drop's bar)`,
      labels: items.map((id) => SHORT[id] || id),
      series: [{ label: "kappa", color: OKABE[0], values: qwk.map(val), lo: qwk.map(lo), hi: qwk.map(hi) },
               { label: "Pearson r", color: OKABE[2], values: r.map(val), lo: r.map(lo), hi: r.map(hi) }],
      lines: [{ y: bar, label: `${bar.toFixed(2)}` }], ticks: [{ values: floor, color: "#666" }], yLabel: "agreement",
      yRange: range([...qwk, ...r].flatMap((f) => [val(f), lo(f), hi(f)]).concat(floor), 0, 1, 0.05),
    });
  },

  smd(el) {
    const ah = page.agreement.auto_human;
    const title = "Standardized mean difference (automatic − raters)";
    const smd = items.map((id) => pick(ah, id).smd);
    if (!smd.some((f) => f.value != null)) return empty(el, title, `Nothing to chart yet: ${smd[6].why}.`);
    const bar = page.thresholds.smd_abs_max;
    return dotChart(el, {
      title, note: `dashed: ± ${bar.toFixed(2)}; above zero the machine scores higher`,
      labels: items.map((id) => SHORT[id] || id),
      series: [{ label: "SMD", color: OKABE[1], values: smd.map(val), lo: smd.map(lo), hi: smd.map(hi) }],
      lines: [{ y: bar, label: `+${bar.toFixed(2)}` }, { y: -bar, label: `−${bar.toFixed(2)}` },
              { y: 0, color: "#777", solid: true }],
      yLabel: "pooled SD", yRange: range(smd.flatMap((f) => [val(f), lo(f), hi(f)]), -0.3, 0.3, 0.05),
    });
  },

  drift(el) {
    const d = page.drift;
    const title = "Mean level per rater, by week";
    const shown = d.raters.filter((r) => r.mean_level.some((v) => v != null));
    if (!shown.length) return empty(el, title, `Nothing to chart yet: a week needs ${d.min_rounds} rounds from one rater.`);
    const xs = weekXs(d);
    el.replaceChildren();
    caption(el, title, `weeks with fewer than ${d.min_rounds} of a rater's rounds are gaps`);
    return new uPlot({
      width: Math.max(280, el.clientWidth), height: HEIGHT,
      scales: { x: { time: true }, y: { range: () => [1, 4] } },
      axes: [weekAxis(d, xs), axis("mean level")],
      series: [{ label: "week" }, ...shown.map((r, i) => ({
        label: r.email.split("@")[0], stroke: OKABE[i % OKABE.length], width: 1.5,
        points: { show: true, size: 6, fill: OKABE[i % OKABE.length] },
      }))],
      legend: { live: false },
    }, [xs, ...shown.map((r) => r.mean_level)], el);
  },

  "drift-auto"(el) {
    const d = page.drift;
    const title = "Automatic − raters' mean level, by week";
    const v = d.auto_minus_human.value;
    if (!v.some((x) => x != null)) return empty(el, title, `Nothing to chart yet: a week needs ${d.min_rounds} rounds with an automatic score and a scorecard.`);
    const xs = weekXs(d);
    el.replaceChildren();
    caption(el, title, "above zero the machine scores higher that week");
    const zero = (u) => {
      const ctx = u.ctx;
      const y = u.valToPos(0, "y", true);
      ctx.save();
      ctx.strokeStyle = "#777";
      ctx.lineWidth = px(1);
      ctx.beginPath();
      ctx.moveTo(u.bbox.left, y);
      ctx.lineTo(u.bbox.left + u.bbox.width, y);
      ctx.stroke();
      ctx.restore();
    };
    const lim = Math.max(0.5, ...v.filter((x) => x != null).map((x) => Math.abs(x) + 0.1));
    return new uPlot({
      width: Math.max(280, el.clientWidth), height: HEIGHT,
      scales: { x: { time: true }, y: { range: () => [-lim, lim] } },
      axes: [weekAxis(d, xs), axis("levels")],
      series: [{ label: "week" }, { label: "automatic − raters", stroke: OKABE[1], width: 1.5,
                                    points: { show: true, size: 6, fill: OKABE[1] } }],
      legend: { live: false },
      hooks: { draw: [zero] },
    }, [xs, v], el);
  },
};

// Draw each chart at its box's width, and again when the box changes width (the grid puts
// charts beside their tables on a wide screen, above them on a narrow one).
document.querySelectorAll("[data-chart]").forEach((el) => {
  const make = charts[el.dataset.chart];
  let plot = make(el);
  let width = el.clientWidth;
  new ResizeObserver(() => {
    if (Math.abs(el.clientWidth - width) < 4) return;
    width = el.clientWidth;
    if (plot && plot.setSize) plot.setSize({ width: Math.max(280, width), height: HEIGHT });
    else plot = make(el);
  }).observe(el);
});
document.documentElement.dataset.chartsReady = "1";  // for tests and screenshots
