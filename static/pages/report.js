// The report's timeline: the candidate's marks beside the key's.
import { setupViewerPage } from "./viewer-page.js";

const { marks, key_marks: keyMarks, runs } = JSON.parse(document.getElementById("report-data").textContent);
// the round's own runs are listed; a tool run on the report is shown but not added to them
setupViewerPage(document.getElementById("viewer"), { runs: { list: () => runs, record: async () => runs } }).then((tl) => {
  const t0us = tl.t0_ns / 1e3;
  const span = (m, label, color, textColor, row) => ({ start_ns: (m.start_us - t0us) * 1e3, end_ns: (m.end_us - t0us) * 1e3,
                                                        label, color, textColor, row });
  const out = [];
  if (marks.step) out.push(span(marks.step, "your step", "rgba(0,114,178,0.14)", "#0b4f7a", 0));
  if (marks.gap) out.push(span(marks.gap, "your gap", "rgba(213,94,0,0.16)", "#8a3a00", 1));
  out.push(span(keyMarks.step, "key: one step", "rgba(0,158,115,0.10)", "#00603f", 2));
  out.push(span(keyMarks.gap, "key: the gap", "rgba(204,121,167,0.18)", "#7a2f5a", 3));
  tl.setMarks(out);
});
