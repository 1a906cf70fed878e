// The Query tab: SQL over the trace on screen (POST to the page's sql URL, the upload
// console's tables), its rows linked to the timeline: a row with ts (and dur, name) or a
// slice_id selects and reveals that slice. The console's ts is absolute ns, the timeline's
// is ns from t0 (header.t0_ns).

export function setupQuery(root, data, onSelect) {
  const form = root.querySelector("[data-query-form]");
  if (!form) return;
  const url = form.dataset.sqlUrl;
  const status = root.querySelector("[data-query-status]");
  const out = root.querySelector("[data-query-result]");

  async function post(query) {
    const res = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ query }) });
    const body = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error(body.error || body.detail || `HTTP ${res.status}`);
    return body;
  }

  // Ctrl+Enter (Cmd+Enter) runs it from the editor, as Perfetto's query page does
  form.q.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); form.requestSubmit(); }
  });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    status.textContent = "running…";
    out.replaceChildren();
    try {
      const r = await post(form.q.value);
      status.textContent = `${r.rows.length.toLocaleString()} row${r.rows.length === 1 ? "" : "s"}` +
        (r.truncated ? " (the rest is past the row or size limit)" : "");
      out.replaceChildren(resultTable(r));
    } catch (err) {
      status.textContent = err.message;
    }
  });

  function resultTable({ columns, rows }) {
    const col = (n) => columns.indexOf(n);
    const iTs = col("ts"), iDur = col("dur"), iName = col("name"), iId = col("slice_id");
    const linked = iTs >= 0 || iId >= 0;
    const tbl = document.createElement("table");
    tbl.className = "query-result";
    const hr = tbl.createTHead().insertRow();
    columns.forEach((c) => { const th = document.createElement("th"); th.scope = "col"; th.textContent = c; hr.append(th); });
    const body = tbl.createTBody();
    for (const row of rows) {
      const tr = body.insertRow();
      row.forEach((v) => {
        const td = tr.insertCell();
        td.textContent = v === null ? "NULL" : typeof v === "object" ? JSON.stringify(v) : String(v);
        if (typeof v === "number") td.className = "num";
      });
      if (!linked) continue;
      tr.className = "linked";
      tr.tabIndex = 0;
      tr.title = "show this slice in the timeline";
      const go = async () => {
        let ts = iTs >= 0 ? row[iTs] : null, dur = iDur >= 0 ? row[iDur] : null, name = iName >= 0 ? row[iName] : null;
        if (ts === null && iId >= 0) {
          // only an id: the console knows where that slice is
          const r = await post(`SELECT ts, dur, name FROM slice WHERE id = ${Number(row[iId])}`).catch(() => null);
          if (!r || !r.rows.length) { status.textContent = `no slice ${row[iId]}`; return; }
          [ts, dur, name] = r.rows[0];
        }
        const hit = findRow(data, Number(ts), dur === null ? null : Number(dur), name);
        status.textContent = hit >= 0 ? "" : "no slice on the timeline at that ts";
        if (hit >= 0) onSelect(hit);
      };
      tr.addEventListener("click", go);
      tr.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); go(); } });
    }
    return tbl;
  }
}

// The timeline row nearest an absolute ts (ns), preferring the same duration and name: the
// console rounds µs to whole ns, the timeline keeps float ns. A scan: a click is rare.
export function findRow(data, tsAbsNs, durNs, name) {
  const { ts, dur } = data.cols;
  const want = tsAbsNs - (data.header.t0_ns || 0);
  const names = data.header.names;
  let best = -1, bestCost = Infinity;
  for (let r = 0; r < data.count; r++) {
    const dt = Math.abs(ts[r] - want);
    if (dt > 2) continue;
    const cost = dt + (durNs === null ? 0 : Math.abs(dur[r] - durNs)) + (name && names[data.cols.name[r]] !== name ? 1e9 : 0);
    if (cost < bestCost) { best = r; bestCost = cost; }
  }
  return best;
}
