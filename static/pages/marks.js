// The candidate's two marks (one step, the gap): stored absolute in µs, as the key's are,
// drawn relative to the trace's start. The practice round, the live round's candidate
// page and the interviewer's console draw them alike.
const MARKS = { step: ["one step", "rgba(0,114,178,0.14)", "#0b4f7a", 0], gap: ["the gap", "rgba(213,94,0,0.16)", "#8a3a00", 1] };

export function marksText(marks) {
  return Object.entries(marks).map(([k, m]) => `${MARKS[k][0]}: ${((m.end_us - m.start_us) / 1e3).toFixed(2)} ms`).join(" · ");
}

export function drawMarks(tl, marks) {
  const t0us = tl.t0_ns / 1e3;
  tl.setMarks(Object.entries(marks).map(([k, m]) => ({
    start_ns: (m.start_us - t0us) * 1e3, end_ns: (m.end_us - t0us) * 1e3,
    label: MARKS[k][0], color: MARKS[k][1], textColor: MARKS[k][2], row: MARKS[k][3],
  })));
}

// The area selection as a mark's span (absolute µs), or null.
function selectionSpan(tl) {
  const sel = tl.selection();
  if (!sel) return null;
  const t0us = tl.t0_ns / 1e3;
  return { start_us: t0us + sel.start_us, end_us: t0us + sel.end_us };
}

// The marks bar (_marks_bar.html) under `box`: its buttons mark the area selection through
// `put({kind: span})`, which stores it and answers the marks as stored (or throws, having
// shown why); `marks` is what is stored now.
export function setupMarks(box, tl, marks, put, showError) {
  const show = () => { drawMarks(tl, marks); box.querySelector("[data-marks-status]").textContent = marksText(marks); };
  show();
  box.querySelectorAll("[data-mark]").forEach((b) => b.addEventListener("click", async () => {
    const span = selectionSpan(tl);
    if (!span) { showError("Select an area first (drag across the timeline, or R on a selected slice, or B and E), then mark it."); return; }
    try { marks = await put({ [b.dataset.mark]: span }); } catch { return; }
    showError("");
    show();
  }));
  return () => marks;
}
