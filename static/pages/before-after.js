// The before/after page: two viewers, the trace after the fix over the trace as it is, sharing
// one TimeScale (the two builds start on one clock: app/before_after.py), so zooming or panning
// either moves both. Each reports its viewport when it changes; the other then repaints.
import { mount } from "/static/timeline/viewer.js";

const testing = new URLSearchParams(location.search).get("testing") === "1";
const afterRoot = document.getElementById("viewer-after");
const beforeRoot = document.getElementById("viewer-before");

const apis = {};
const repaintOther = (me) => (kind) => {
  const other = apis[me === "after" ? "before" : "after"];
  if (kind === "viewport" && other) other.redraw();
};

const after = await mount(afterRoot, afterRoot.dataset.url, { sliceUrl: afterRoot.dataset.sliceUrl, onChange: repaintOther("after") });
apis.after = after;
const before = await mount(beforeRoot, beforeRoot.dataset.url,
                           { sliceUrl: beforeRoot.dataset.sliceUrl, scale: after.view.scale, onChange: repaintOther("before") });
apis.before = before;
// The GPUs are the comparison: host threads start folded (a click on the group opens them).
// setMarks relays the tracks out, which a changed fold needs.
for (const api of [after, before]) {
  api.view.data.tracks.forEach((t) => { if (!t.gpu) api.view.collapsed.add(t.group); });
  api.setMarks(api.view.marks);
}
// one window over both traces: the longer one whole
const end = Math.max(after.view.data.endNs, before.view.data.endNs);
after.setWindow(0, end);
before.redraw();
if (testing) window.beforeAfterTest = apis;
