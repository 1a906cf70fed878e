// The report's timeline: the candidate's marks beside the key's; on the owner's page, the
// share controls (htmx swaps them; copying the link needs a script).
import { setupViewerPage } from "./viewer-page.js";
import { showHtmxErrors } from "./live-common.js";

const { marks, key_marks: keyMarks, runs, mine } = JSON.parse(document.getElementById("report-data").textContent);
const who = mine ? "your" : "their";

const share = document.querySelector("section.share");
if (share) {
  showHtmxErrors(share.querySelector("[data-share-error]"), share);
  // delegated: the controls are replaced after every Share, New link and Revoke
  share.addEventListener("click", async (e) => {
    if (!e.target.matches("[data-copy-share]")) return;
    const input = share.querySelector("[data-share-link]");
    input.select();
    let ok = false;
    try { await navigator.clipboard.writeText(input.value); ok = true; } catch { ok = document.execCommand?.("copy"); }
    share.querySelector("[data-copied]").textContent = ok ? "copied" : "select the link and copy it";
  });
}
// the round's own runs are listed; a tool run on the report is shown but not added to them
setupViewerPage(document.getElementById("viewer"), { runs: { list: () => runs, record: async () => runs } }).then((tl) => {
  const t0us = tl.t0_ns / 1e3;
  // each on its own row of the marks band; the key's dashed and italic, the reader's solid
  const span = (m, label, color, textColor, row, style) => ({ start_ns: (m.start_us - t0us) * 1e3, end_ns: (m.end_us - t0us) * 1e3,
                                                               label, color, textColor, row, style });
  const out = [];
  if (marks.step) out.push(span(marks.step, `${who} step`, "rgba(0,114,178,0.14)", "#0b4f7a", 0, "reader"));
  out.push(span(keyMarks.step, "key: one step", "rgba(0,158,115,0.10)", "#00603f", 1, "key"));
  if (marks.gap) out.push(span(marks.gap, `${who} gap`, "rgba(213,94,0,0.16)", "#8a3a00", 2, "reader"));
  out.push(span(keyMarks.gap, "key: the gap", "rgba(204,121,167,0.18)", "#7a2f5a", 3, "key"));
  tl.setMarks(out);
});
