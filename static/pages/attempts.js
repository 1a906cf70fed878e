// Scores over time, one small chart per case.
import { render } from "/static/charts/charts.js";

document.querySelectorAll("[data-scores]").forEach((el) => {
  const scores = JSON.parse(el.dataset.scores);
  render(el, { kind: "series", title: "score per round", x_label: "round", x_unit: "", y_label: "score", y_unit: "/100",
               points: true, y_range: [0, 100], x: scores.map((_, i) => i + 1), y: scores.map((s) => s.total) },
         Math.min(640, el.clientWidth || 640), 200);
});
