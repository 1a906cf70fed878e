// Notes on the timeline (Perfetto's Shift+M): a point or a span with a line of text, drawn
// as a flag on the ruler and listed in `[data-notes]`; clicking one shows it. Kept in this
// browser per page (`storageKey`), and handed to `onAdd` (a live round posts it to its log).

import { LAYOUT, tracksTop } from "./paint.js";
import { formatDuration } from "./timescale.js";

export const MAX_NOTE_CHARS = 500;
const COLOR = "#00695c";  // teal: apart from the steps' purple and the marks' blue and orange
const TINT = "rgba(0,105,92,0.10)";

function loadStored(key) {
  if (!key) return [];
  try { return (JSON.parse(localStorage.getItem(key) || "[]") || []).filter(valid); } catch { return []; }
}

export function valid(n) {
  return n && typeof n.text === "string" && Number.isFinite(n.start_ns) && (n.end_ns == null || Number.isFinite(n.end_ns));
}

export function noteLabel(n) {
  const where = n.end_ns == null ? formatDuration(n.start_ns, 3) : `${formatDuration(n.start_ns, 3)} + ${formatDuration(n.end_ns - n.start_ns, 3)}`;
  return `${where} · ${n.text}`;
}

export function createNotes(el, { storageKey, onAdd, onReveal, onChange, returnFocus, onBegin }) {
  let notes = loadStored(storageKey);
  const save = () => { if (storageKey) try { localStorage.setItem(storageKey, JSON.stringify(notes.slice(-200))); } catch { /* full: kept for this page */ } };
  let list = null, form = null;
  if (el) {
    el.replaceChildren();
    const h = document.createElement("h2");
    h.textContent = "Notes";
    form = document.createElement("form");
    form.className = "note-form";
    form.hidden = true;
    const label = document.createElement("label");
    label.textContent = "Note";
    const input = document.createElement("input");
    input.name = "text"; input.maxLength = MAX_NOTE_CHARS; input.autocomplete = "off";
    input.id = `note-text-${Math.random().toString(36).slice(2, 8)}`;
    label.htmlFor = input.id;
    const ok = document.createElement("button"); ok.type = "submit"; ok.textContent = "Save note";  // not "Add note": the console has its own button by that name
    const cancel = document.createElement("button"); cancel.type = "button"; cancel.textContent = "Cancel";
    form.append(label, input, ok, cancel);
    list = document.createElement("ol");
    list.className = "notes-list";
    list.setAttribute("aria-label", "notes on this timeline");
    const empty = document.createElement("p");
    empty.className = "note"; empty.dataset.notesEmpty = "";
    empty.textContent = "Shift+M adds a note at the cursor, or on the selected slice or area.";
    el.append(h, form, empty, list);
    let span = null;
    const close = () => { form.hidden = true; span = null; returnFocus && returnFocus(); };
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const text = input.value.trim();
      if (text && span) add({ ...span, text });
      close();
    });
    cancel.addEventListener("click", close);
    input.addEventListener("keydown", (e) => { if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); close(); } });
    // onBegin first: the list may sit in a folded drawer or a hidden tab, where the input takes no focus
    form.begin = (s) => { span = s; if (onBegin) onBegin(); form.hidden = false; input.value = ""; input.focus(); };
  }

  function render() {
    if (!list) return;
    el.querySelector("[data-notes-empty]").hidden = notes.length > 0;
    list.replaceChildren(...notes.map((n) => {
      const li = document.createElement("li");
      const show = document.createElement("button");
      show.type = "button"; show.className = "linkish"; show.textContent = noteLabel(n);
      show.addEventListener("click", () => onReveal(n));
      const del = document.createElement("button");
      del.type = "button"; del.className = "linkish"; del.textContent = "remove";
      del.setAttribute("aria-label", `remove the note ${n.text}`);
      del.addEventListener("click", () => { notes = notes.filter((x) => x !== n); save(); render(); onChange(); });
      li.append(show, " ", del);
      return li;
    }));
  }

  function add(n) {
    const note = { id: n.id || `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`, start_ns: n.start_ns,
                   end_ns: n.end_ns == null || n.end_ns <= n.start_ns ? null : n.end_ns, text: n.text.slice(0, MAX_NOTE_CHARS) };
    notes.push(note);
    save(); render(); onChange();
    if (onAdd) onAdd(note);
    return note;
  }

  // Notes from a permalink join this page's own (one per id).
  function merge(more) {
    const ids = new Set(notes.map((n) => n.id));
    for (const n of more) if (valid(n) && !ids.has(n.id)) notes.push({ id: n.id, start_ns: n.start_ns, end_ns: n.end_ns ?? null, text: n.text });
    save(); render(); onChange();
  }

  render();
  return {
    list: () => notes,
    add, merge,
    // Ask for the text of a note on `span` ({start_ns, end_ns|null}); without a list to ask in, a prompt.
    begin(span) {
      if (form) form.begin(span);
      else { const text = window.prompt("Note"); if (text && text.trim()) add({ ...span, text: text.trim() }); }
    },
  };
}

export const NOTES_ROW_PX = 14;  // a row of its own under the ruler: a flag there hides no tick label

// Each note a flag in the notes' row, named beside it where there is room; down the tracks a
// dashed line (a point) or a tint between dashed edges (a span).
export function paintNotes(ctx, view, notes) {
  if (!notes.length) return;
  const { scale, width, height } = view;
  const x0 = LAYOUT.labelW, top = tracksTop(view), y0 = top - NOTES_ROW_PX;
  ctx.fillStyle = "#fff"; ctx.fillRect(0, y0, width, NOTES_ROW_PX);
  ctx.fillStyle = "#57606a"; ctx.font = "10px system-ui, sans-serif";
  ctx.fillText("notes", 14, y0 + NOTES_ROW_PX / 2);
  ctx.save();
  ctx.beginPath(); ctx.rect(x0, y0, width - x0, height - y0); ctx.clip();
  const xs = notes.map((n) => Math.round(x0 + scale.x(n.start_ns)) + 0.5);
  const sorted = [...xs].sort((p, q) => p - q);
  notes.forEach((n, i) => {
    const a = xs[i];
    const b = n.end_ns == null ? a : Math.round(x0 + scale.x(n.end_ns)) - 0.5;
    if (b < x0 - 10 || a > width + 10) return;
    ctx.strokeStyle = COLOR;
    if (n.end_ns != null) {
      ctx.fillStyle = TINT; ctx.fillRect(a, top, b - a, height - top);
      ctx.fillStyle = TINT; ctx.fillRect(a, y0 + 2, Math.max(1, b - a), NOTES_ROW_PX - 4);
    }
    ctx.setLineDash([3, 3]);
    ctx.beginPath(); ctx.moveTo(a, top); ctx.lineTo(a, height);
    if (n.end_ns != null) { ctx.moveTo(b, top); ctx.lineTo(b, height); }
    ctx.stroke(); ctx.setLineDash([]);
    // the flag: a pole and a pennant
    ctx.fillStyle = COLOR;
    ctx.beginPath(); ctx.moveTo(a, y0 + 1); ctx.lineTo(a, y0 + NOTES_ROW_PX - 1); ctx.stroke();
    ctx.beginPath(); ctx.moveTo(a, y0 + 1); ctx.lineTo(a + 8, y0 + 4.5); ctx.lineTo(a, y0 + 8); ctx.closePath(); ctx.fill();
    // its text up to the next flag
    const next = sorted.find((x) => x > a) ?? width;
    const room = Math.min(next, width) - (a + 11) - 4;
    let text = n.text;
    if (room < 20) return;
    while (text.length > 1 && ctx.measureText(text).width > room) text = text.slice(0, -2) + "…";
    ctx.fillStyle = "#004d40"; ctx.fillText(text, a + 11, y0 + NOTES_ROW_PX / 2 + 0.5);
  });
  ctx.restore();
}
