// The viewer: state, layout, one requestAnimationFrame scheduler, and the interactions
// Perfetto users' hands expect (W/S zoom, A/D pan, Ctrl+wheel, drag to select an area,
// Shift+drag or the ruler to pan, click for details, / search, F focus, M mark, ? help).
// Revealing a selection, the keyboard area, notes and permalinks: selectionkeys.js.

import { layoutCounters } from "./counters.js";
import { load, partner } from "./data.js";
import { LAYOUT, PALETTE, paint, tracksTop } from "./paint.js";
import { createDrawer } from "./drawer.js";
import { createPanels } from "./panels.js";
import { setupQuery } from "./query.js";
import { TimeScale } from "./timescale.js";
import { heldZoomFactor } from "./motion.js";
import { NOTES_ROW_PX, createNotes, paintNotes } from "./notes.js";
import { decodeState, encodeState, rowOfSrc, stateOf } from "./permalink.js";
import { revealRow, revealSpan } from "./reveal.js";
import { selectionKey } from "./selectionkeys.js";

export async function mount(root, url, opts = {}) {
  const canvas = root.querySelector("canvas");
  const ctx = canvas.getContext("2d");
  const status = root.querySelector("[data-status]");
  status.textContent = "loading trace…";
  const data = await load(url);
  status.textContent = `${data.count.toLocaleString()} slices`;

  const view = {
    // opts.scale: a TimeScale shared with another viewer (before/after: one window over both)
    data, scale: opts.scale || new TimeScale(0, data.endNs, 100), width: 0, height: 0, scrollY: 0,
    selectedRow: -1, partnerRow: -1, area: null, marks: opts.marks ? [...opts.marks] : [], matches: null, cursorX: null,
    collapsed: new Set(data.header.collapsed || []), pinned: new Set(),
    layout: { items: [], height: 0 }, lastDrawn: 0,
  };
  view.sliceBox = (row) => {
    const t = data.cols.track[row];
    const item = view.layout.items.find((i) => i.kind === "track" && i.track === t);
    if (!item) return null;
    const x = LAYOUT.labelW + view.scale.x(data.cols.ts[row]);
    return { x, y: item.y - view.scrollY + LAYOUT.trackPad / 2 + data.depth[row] * LAYOUT.row, h: LAYOUT.row - 2,
             w: data.cols.dur[row] / view.scale.nsPerPx };
  };

  function relayout() {
    const items = [];
    let y = tracksTop(view);
    const groups = [];
    for (const t of data.tracks) {
      let g = groups.find((x) => x.label === t.group);
      if (!g) groups.push((g = { label: t.group, tracks: [] }));
      g.tracks.push(t);
    }
    const pinned = data.tracks.filter((t) => view.pinned.has(t.id));
    const add = (t, pin) => {
      const h = Math.max(1, t.depths.length) * LAYOUT.row + LAYOUT.trackPad;
      items.push({ kind: "track", track: t.id, y, h, pinned: pin });
      y += h;
    };
    pinned.forEach((t) => add(t, true));
    y = layoutCounters(data, view.collapsed, items, y);
    for (const g of groups) {
      const collapsed = view.collapsed.has(g.label);
      items.push({ kind: "group", label: g.label, y, h: LAYOUT.groupH, collapsed });
      y += LAYOUT.groupH;
      if (!collapsed) g.tracks.filter((t) => !view.pinned.has(t.id)).forEach((t) => add(t, false));
    }
    view.layout = { items, height: y };
    // the timeline's height is the drawer's business (drawer.js): it takes what the drawer leaves
  }

  const stats = { firstPaintMs: null, frames: [], loadedMs: performance.now() };
  // --- scheduler: one rAF; anything that changes the picture calls redraw() ---
  let pending = false, idleWaiters = [];
  const held = new Set();
  let zoomHeldAt = 0;  // when W or S went down: the held zoom speeds up (motion.js)
  function redraw() {
    if (!pending) { pending = true; requestAnimationFrame(frame); }
  }
  let lastFrame = performance.now();
  function frame(now) {
    pending = false;
    const dt = Math.min(50, now - lastFrame);
    lastFrame = now;
    if (held.size) {
      const w = view.width - LAYOUT.labelW;
      const px = view.cursorX !== null ? view.cursorX - LAYOUT.labelW : w / 2;
      const zoomRate = heldZoomFactor(now - zoomHeldAt, dt);
      if (held.has("w")) view.scale.zoom(1 / zoomRate, px, 50, data.endNs * 4);
      if (held.has("s")) view.scale.zoom(zoomRate, px, 50, data.endNs * 4);
      if (held.has("a")) view.scale.pan(-dt * 0.8);
      if (held.has("d")) view.scale.pan(dt * 0.8);
    }
    const t0 = performance.now();
    view.lastDrawn = paint(ctx, view);
    paintNotes(ctx, view, notes.list());
    const work = performance.now() - t0;
    // Frame work times for the viewer benchmark (bench/viewer.py), bounded.
    if (stats.frames.length >= 5000) stats.frames.shift();
    stats.frames.push(work);
    if (stats.firstPaintMs === null) stats.firstPaintMs = performance.now();
    if (opts.onChange) reportChange();
    if (held.size) redraw();
    else if (!pending) { const w = idleWaiters; idleWaiters = []; w.forEach((f) => f()); }
  }

  // What the person looks at, reported when it changes (a live round mirrors it on the
  // interviewer's console): checked once per frame, so every way of moving is covered.
  let reported = { window: "", selection: "" };
  function reportChange() {
    const win = `${Math.round(view.scale.start)}:${Math.round(view.scale.end)}:${Math.round(view.scrollY)}`;
    if (win !== reported.window) {
      reported.window = win;
      opts.onChange("viewport", { start_ns: view.scale.start, end_ns: view.scale.end, scroll_y: view.scrollY });
    }
    const sel = `${view.area ? `${view.area.start_ns}:${view.area.end_ns}` : ""}|${view.selectedRow}`;
    if (sel !== reported.selection) {
      reported.selection = sel;
      opts.onChange("selection", {
        area: view.area ? { start_ns: view.area.start_ns, end_ns: view.area.end_ns } : null,
        row: view.selectedRow >= 0 ? view.selectedRow : null,
        name: view.selectedRow >= 0 ? data.header.names[data.cols.name[view.selectedRow]] : null,
      });
    }
  }

  function resize() {
    const dpr = window.devicePixelRatio || 1;
    const rect = canvas.getBoundingClientRect();
    view.width = rect.width; view.height = rect.height;
    canvas.width = Math.round(rect.width * dpr); canvas.height = Math.round(rect.height * dpr);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    view.scale.set(view.scale.start, view.scale.end, rect.width - LAYOUT.labelW);
    redraw();
  }

  // --- hit testing ---
  function itemAt(y) { return view.layout.items.find((i) => y + view.scrollY >= i.y && y + view.scrollY < i.y + i.h); }
  function sliceAt(x, y) {
    const item = itemAt(y);
    if (!item || item.kind !== "track" || x < LAYOUT.labelW) return -1;
    const t = data.tracks[item.track];
    const depth = Math.floor((y + view.scrollY - item.y - LAYOUT.trackPad / 2) / LAYOUT.row);
    const d = t.depths[depth];
    if (!d) return -1;
    const tNs = view.scale.t(x - LAYOUT.labelW), slop = view.scale.nsPerPx * 2;
    const { ts, dur } = data.cols;
    let lo = 0, hi = d.rows.length;
    while (lo < hi) { const m = (lo + hi) >> 1; if (d.ends[m] > tNs - slop) hi = m; else lo = m + 1; }
    for (let j = lo; j < d.rows.length && ts[d.rows[j]] <= tNs + slop; j++) {
      const r = d.rows[j];
      if (ts[r] - slop <= tNs && tNs <= ts[r] + dur[r] + slop) return r;
    }
    return -1;
  }

  const drawer = createDrawer(root);
  const panels = createPanels(root.querySelector("[data-details]"), data, view, opts.sliceUrl, (row) => select(row, true),
                              root.querySelector("[data-area]"));
  setupQuery(root, data, (row) => select(row, true, null));  // the results stay in view: stepping through them
  const notes = createNotes(root.querySelector("[data-notes]"), {
    storageKey: opts.notesKey === undefined ? `tracedojo:notes:${location.pathname}${location.search.replace(/[?&]testing=1/, "")}` : opts.notesKey,
    onAdd: opts.onNote,
    onReveal: (n) => { revealSpan(view, n.start_ns, n.end_ns ?? n.start_ns); redraw(); },
    onChange: () => { notesRow(); relayout(); redraw(); },
    returnFocus: () => canvas.focus({ preventScroll: true }),
    onBegin: () => drawer.show("notes", { bring: true }),
  });
  // the notes' row under the ruler is there while there are notes
  const notesRow = () => { view.notesRowPx = notes.list().length ? NOTES_ROW_PX : 0; };
  notesRow();

  // The tracks an area drag covered vertically (content y, scroll included): a folded
  // group's header stands for its tracks.
  function tracksBetween(y0, y1) {
    const lo = Math.min(y0, y1), hi = Math.max(y0, y1);
    const out = [];
    for (const i of view.layout.items) {
      if (i.y + i.h <= lo || i.y > hi) continue;
      if (i.kind === "track") out.push(i.track);
      else if (i.collapsed) data.tracks.forEach((t) => { if (t.group === i.label && !view.pinned.has(t.id)) out.push(t.id); });
    }
    return [...new Set(out)];
  }

  function select(row, reveal, tab = "current") {
    view.selectedRow = row;
    view.partnerRow = row >= 0 ? partner(data, row) : -1;
    view.area = null;
    panels.describe(row);
    if (row >= 0 && tab) drawer.show(tab, { bring: true });
    if (reveal && row >= 0) revealRow(view, row);
    redraw();
  }
  // F: the selected slice fills the view, half its length to either side (revealRow, for
  // the selections that only have to be seen, zooms no further than it must)
  function focusRow(row) {
    const { ts, dur } = data.cols;
    const pad = Math.max(dur[row] * 0.5, 1000);
    view.scale.set(ts[row] - pad, ts[row] + dur[row] + pad, view.scale.width);
    const item = view.layout.items.find((i) => i.kind === "track" && i.track === data.cols.track[row]);
    if (item && (item.y - view.scrollY < tracksTop(view) || item.y - view.scrollY > view.height - 40)) view.scrollY = Math.max(0, item.y - 80);
  }

  // --- mouse ---
  let drag = null;
  canvas.addEventListener("mousedown", (e) => {
    const x = e.offsetX, y = e.offsetY;
    canvas.focus({ preventScroll: true });
    if (y < tracksTop(view) || e.shiftKey || e.button === 1) drag = { mode: "pan", x, moved: false };
    else if (x < LAYOUT.labelW) {
      const item = itemAt(y);
      if (item && item.kind === "group") { view.collapsed.has(item.label) ? view.collapsed.delete(item.label) : view.collapsed.add(item.label); relayout(); redraw(); }
      else if (item && item.kind === "track") { view.pinned.has(item.track) ? view.pinned.delete(item.track) : view.pinned.add(item.track); relayout(); redraw(); }
      return;
    } else drag = { mode: "area", x, y: y + view.scrollY, t0: view.scale.t(x - LAYOUT.labelW), moved: false };
  });
  window.addEventListener("mousemove", (e) => {
    const rect = canvas.getBoundingClientRect();
    const x = e.clientX - rect.left;
    view.cursorX = x >= 0 && x <= rect.width && e.clientY >= rect.top && e.clientY <= rect.bottom ? x : null;
    if (drag) {
      if (Math.abs(x - drag.x) > 3) drag.moved = true;
      if (drag.mode === "pan") { view.scale.pan(drag.x - x); drag.x = x; }
      else if (drag.moved) {
        const t1 = view.scale.t(x - LAYOUT.labelW);
        const yNow = e.clientY - rect.top + view.scrollY;
        view.area = { start_ns: Math.min(drag.t0, t1), end_ns: Math.max(drag.t0, t1), tracks: tracksBetween(drag.y, yNow) };
        view.selectedRow = -1;
      }
    }
    redraw();
  });
  window.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const d = drag; drag = null;
    if (d.mode === "area" && d.moved) { panels.showArea(view.area); drawer.show("area", { bring: true }); opts.onArea && opts.onArea(view.area); }
    else if (!d.moved) { const rect = canvas.getBoundingClientRect(); select(sliceAt(e.clientX - rect.left, e.clientY - rect.top), false); }
    redraw();
  });
  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    if (e.ctrlKey || e.metaKey) view.scale.zoom(Math.pow(1.0015, e.deltaY), e.offsetX - LAYOUT.labelW, 50, data.endNs * 4);
    else if (e.shiftKey) view.scale.pan(e.deltaY);
    else view.scrollY = Math.max(0, Math.min(view.layout.height - view.height + 40, view.scrollY + e.deltaY));
    redraw();
  }, { passive: false });

  // --- keys ---
  const search = root.querySelector("[data-search]");
  const searchCount = root.querySelector("[data-search-count]");
  const help = root.querySelector("[data-help]");
  let matchList = [], matchAt = -1;
  // W/A/S/D by physical key (e.code), as Perfetto does: the same hand position on AZERTY.
  const WASD = { KeyW: "w", KeyA: "a", KeyS: "s", KeyD: "d" };
  canvas.addEventListener("keydown", (e) => {
    const k = e.key.toLowerCase();
    const move = WASD[e.code];
    if (move && !e.ctrlKey && !e.metaKey) {
      if ((move === "w" || move === "s") && !held.has("w") && !held.has("s")) zoomHeldAt = performance.now();
      held.add(move); redraw(); e.preventDefault(); return;
    }
    if (selectionKey(e, { view, data, select, setArea, notes, permalink })) { redraw(); return; }
    if ((k === "]" || k === "[") && view.selectedRow >= 0 && view.partnerRow >= 0) {
      // follow the flow: ] to the following end (launch -> kernel), [ to the preceding one
      const later = data.cols.ts[view.partnerRow] >= data.cols.ts[view.selectedRow];
      if ((k === "]") === later) select(view.partnerRow, true);
      return;
    }
    if (k === "/") { e.preventDefault(); search.focus(); search.select(); return; }
    if (k === "f" && view.selectedRow >= 0) { focusRow(view.selectedRow); redraw(); }
    else if (k === "f" && view.area) { view.scale.set(view.area.start_ns, view.area.end_ns, view.scale.width); redraw(); }
    else if ((k === "p" || k === "c") && view.selectedRow >= 0) {
      // P pins the selected slice's track to the top (again to unpin); C folds its group
      const t = data.tracks[data.cols.track[view.selectedRow]];
      const set = k === "p" ? view.pinned : view.collapsed;
      const id = k === "p" ? t.id : t.group;
      set.has(id) ? set.delete(id) : set.add(id);
      relayout(); redraw();
    } else if (k === "m") {
      const m = view.selectedRow >= 0 ? { start_ns: data.cols.ts[view.selectedRow], end_ns: data.cols.ts[view.selectedRow] + data.cols.dur[view.selectedRow] } : view.area;
      if (m) { view.marks.push({ ...m }); redraw(); }
    } else if (k === "?") { help.hidden ? openHelp() : closeHelp(); }
    else if (k === "escape") { view.selectedRow = -1; view.area = null; view.matches = null; closeHelp(); panels.describe(-1); redraw(); }
    else if (k === "enter" && matchList.length) { step(e.shiftKey ? -1 : 1); }
  });
  // The help: a dialog with a close button; closing it (the button, Escape or ? again) puts
  // the focus back where it was when it opened.
  let helpReturn = null;
  function openHelp() {
    helpReturn = document.activeElement;
    help.hidden = false;
    help.querySelector("[data-help-close]").focus();
  }
  function closeHelp() {
    if (help.hidden) return;
    help.hidden = true;
    (helpReturn && helpReturn.isConnected ? helpReturn : canvas).focus({ preventScroll: true });
    helpReturn = null;
  }
  help.querySelector("[data-help-close]").addEventListener("click", closeHelp);
  help.addEventListener("keydown", (e) => {
    if (e.key === "Escape" || e.key === "?") { e.preventDefault(); e.stopPropagation(); closeHelp(); }
  });
  canvas.addEventListener("keyup", (e) => { held.delete(WASD[e.code]); });
  canvas.addEventListener("blur", () => held.clear());
  function runSearch(q) {
    matchList = [];
    if (q) {
      const ql = q.toLowerCase();
      const hits = new Set();
      data.header.names.forEach((n, i) => { if (n.toLowerCase().includes(ql)) hits.add(i); });
      const name = data.cols.name;
      const order = [];
      for (let r = 0; r < data.count; r++) if (hits.has(name[r])) order.push(r);
      order.sort((a, b) => data.cols.ts[a] - data.cols.ts[b]);
      matchList = order;
    }
    view.matches = matchList.length ? new Set(matchList) : null;
    matchAt = -1;
    searchCount.textContent = q ? `${matchList.length.toLocaleString()} matches` : "";
    redraw();
  }
  function step(dir) {
    matchAt = (matchAt + dir + matchList.length) % matchList.length;
    searchCount.textContent = `${matchAt + 1} / ${matchList.length.toLocaleString()}`;
    select(matchList[matchAt], true);
  }
  search.addEventListener("input", () => runSearch(search.value.trim()));
  search.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && matchList.length) { e.preventDefault(); step(e.shiftKey ? -1 : 1); }
    if (e.key === "Escape") { search.value = ""; runSearch(""); canvas.focus(); }
  });
  root.querySelectorAll("[data-zoom]").forEach((b) => b.addEventListener("click", () => {
    const f = { in: 0.5, out: 2 }[b.dataset.zoom];
    if (f) view.scale.zoom(f, view.scale.width / 2, 50, data.endNs * 4);
    else view.scale.set(0, data.endNs, view.scale.width);
    redraw();
  }));

  // legend
  const legend = root.querySelector("[data-legend]");
  legend.replaceChildren(...Object.values(PALETTE).map(([bg, , label]) => {
    const s = document.createElement("span");
    const swatch = document.createElement("i");
    swatch.style.background = bg; // through the CSSOM: the CSP refuses inline style attributes
    s.append(swatch, label);
    return s;
  }));

  // An area from the keys (R, B/E, arrows): a zero-width one is a start waiting for its end.
  function setArea(area) {
    view.area = area; view.selectedRow = -1; view.partnerRow = -1;
    if (area && area.end_ns > area.start_ns) { panels.showArea(area); drawer.show("area", { bring: true }); opts.onArea && opts.onArea(area); }
    redraw();
  }
  const linkButton = root.querySelector("[data-permalink]");
  function permalink() {
    history.replaceState(history.state, "", `${location.pathname}${location.search}#${encodeState(stateOf(view, notes.list()))}`);
    if (navigator.clipboard) navigator.clipboard.writeText(location.href).catch(() => {});
    if (linkButton) { linkButton.textContent = "copied"; setTimeout(() => { linkButton.textContent = "link"; }, 1500); }
    return location.href;
  }
  linkButton?.addEventListener("click", permalink);

  new ResizeObserver(resize).observe(canvas);
  relayout();
  resize();
  panels.describe(-1);
  restoreLink(decodeState(location.hash));
  // Opened from a permalink: its window, scroll, pins, area or slice, and notes.
  function restoreLink(st) {
    if (!st) return;
    st.pinned.forEach((id) => { if (id >= 0 && id < data.tracks.length) view.pinned.add(id); });
    relayout();
    view.scale.set(st.start_ns, st.end_ns, view.scale.width);
    view.scrollY = Math.max(0, st.scroll_y);
    if (st.notes.length) notes.merge(st.notes);
    const row = st.src != null ? rowOfSrc(data, st.src) : -1;
    if (row >= 0) select(row, false);
    if (st.area) setArea(st.area);
    redraw();
  }

  const api = {
    view, redraw, stats,
    idle: () => new Promise((res) => { if (!pending && !held.size) res(); else idleWaiters.push(res); }),
    visibleSliceCount: () => view.lastDrawn,
    drawer: () => drawer.state(),  // {open, height_px, tab}
    counters: () => [...(view.countersDrawn || [])],  // the counter tracks drawn in the last frame
    selection: () => (view.area ? { start_us: view.area.start_ns / 1e3, end_us: view.area.end_ns / 1e3 } : null),
    selectedSlice: () => (view.selectedRow >= 0 ? data.header.names[data.cols.name[view.selectedRow]] : null),
    setWindow: (startNs, endNs) => { view.scale.set(startNs, endNs, view.scale.width); redraw(); },
    window: () => ({ start_ns: view.scale.start, end_ns: view.scale.end }),
    selectedBox: () => (view.selectedRow >= 0 ? view.sliceBox(view.selectedRow) : null),
    // search `query`, Enter, and the selected slice's box on the canvas (CSS px)
    reveal: (query) => { search.value = query; runSearch(query); if (matchList.length) step(1); return api.selectedBox(); },
    notes: () => notes.list(),
    addNote: (n) => notes.add(n),
    permalink,
    trackY: (label) => { const it = view.layout.items.find((i) => i.kind === "track" && data.tracks[i.track].label.startsWith(label)); return it ? it.y - view.scrollY + LAYOUT.trackPad / 2 + 2 : null; },
    xOf: (ns) => LAYOUT.labelW + view.scale.x(ns),
    steps: data.header.steps,
    ranks: () => [...(data.header.ranks || [0])],  // the ranks drawn: the brief's one, or every rank stacked
    t0_ns: data.header.t0_ns,  // absolute trace time of 0: marks are stored absolute (µs), like the key's
    setMarks: (marks) => { view.marks = [...marks]; relayout(); redraw(); },  // the marks band's rows move the tracks
    // Show what another viewer of the same timeline shows (the console's mirror): its
    // window, scroll, area selection and selected slice.
    mirror: ({ viewport, selection }) => {
      if (viewport) {
        view.scale.set(viewport.start_ns, viewport.end_ns, view.scale.width);
        if (viewport.scroll_y != null) view.scrollY = Math.max(0, viewport.scroll_y);
      }
      if (selection) {
        const row = selection.row != null && selection.row < data.count ? selection.row : -1;
        if (row !== view.selectedRow) {
          view.selectedRow = row; view.partnerRow = row >= 0 ? partner(data, row) : -1; panels.describe(row);
          if (row >= 0) drawer.show("current");
        }
        view.area = selection.area ? { ...selection.area } : null;
        if (view.area && row < 0) { panels.showArea(view.area); drawer.show("area"); }
      }
      redraw();
    },
  };
  return api;
}
