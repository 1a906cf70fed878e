// What the live round's pages share: the phase clock, and htmx's error answers (JSON with
// one line, not swapped into the page) shown where the page shows errors (`scope`: only
// those of requests made from inside it).

// The phase clock: time left in the current phase, from the server's own clock (`now`)
// so a browser whose clock is off still counts right.
export function tickClock(el, t) {
  if (!el) return;
  if (!t || !t.phase_started_at || !t.minutes || t.ended_at || t.ended) { el.textContent = ""; return; }
  const skew = t.now ? Date.parse(t.now) - (t.receivedAt || Date.now()) : 0;
  const left = Date.parse(t.phase_started_at) + t.minutes * 60_000 - (Date.now() + skew);
  const s = Math.round(Math.abs(left) / 1000);
  const mmss = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
  el.textContent = left >= 0 ? `${mmss} left` : `${mmss} over`;
  el.classList.toggle("over", left < 0);
}

// Read a JSON data attribute once, remembering when it arrived (for the clock's skew).
export function readTimer(el, attr) {
  if (!el || !el.dataset[attr]) return null;
  if (!el._timer) { try { el._timer = { ...JSON.parse(el.dataset[attr]), receivedAt: Date.now() }; } catch { el._timer = null; } }
  return el._timer;
}

export function showHtmxErrors(errorEl, scope = document) {
  scope.addEventListener("htmx:response:error", (e) => {
    const ctx = e.detail && e.detail.ctx;
    let msg = `HTTP ${ctx && ctx.response ? ctx.response.status : "error"}`;
    try { msg = JSON.parse(ctx.text).error || msg; } catch { /* not JSON */ }
    errorEl.textContent = msg;
    errorEl.hidden = false;
  });
  scope.addEventListener("htmx:after:request", (e) => {
    const ctx = e.detail && e.detail.ctx;
    if (ctx && ctx.response && ctx.response.status < 400) errorEl.hidden = true;
  });
}

export const words = (text) => (text.match(/\S+/g) || []).length;

// A measurement's output as the candidate saw it, fetched again from the round's own tool
// URL (`toolBase`): the console shows each run as it comes, the review each run replayed.
// A query from the candidate's Query tab sits among the runs (a `query` event): its text and
// what came back, since no other page has the SQL to run it again.
export async function showRunOutput(out, toolBase, run) {
  out.hidden = false;
  if (run.query != null) { out.textContent = `SQL (the candidate's Query tab), ${queryOutcome(run)}:\n\n${run.query}`; return; }
  const q = new URLSearchParams(run.options || {}).toString();
  out.textContent = `running ${run.tool}…`;
  try {
    const body = await (await fetch(`${toolBase}${encodeURIComponent(run.tool)}${q ? `?${q}` : ""}`)).json();
    out.textContent = body.error || (body.applicable ? `$ ${body.command}\n${body.output}` : `${body.tool} does not apply here: ${body.reason}`);
  } catch (e) { out.textContent = `could not fetch the output: ${e.message}`; }
}

const queryOutcome = (q) => (q.error ? `refused: ${q.error}` : `${q.rows} row${q.rows === 1 ? "" : "s"}`);

// A run's line in a list: the tool and its options, or a query's first words and outcome.
export function runLabel(r) {
  if (r.query != null) return `SQL: ${r.query.replace(/\s+/g, " ").slice(0, 60)} (${queryOutcome(r)})`;
  return `${r.tool}${r.options && Object.keys(r.options).length ? ` ${new URLSearchParams(r.options)}` : ""}`;
}
