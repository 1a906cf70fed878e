// The drawer under the timeline, as Perfetto's: tabs (an ARIA tablist: arrows move between
// tabs, Home/End to the ends), a handle that resizes it by mouse or by keyboard (Up/Down),
// Enter on the handle or the hide button folding it away. Its height persists per browser.
// The panes (timeline + handle + drawer) fill the window below where they start on the
// page (under the brief and the toolbar); by default the timeline keeps at least 60% of the
// window's height and the drawer the rest, at least a quarter of it (a tall brief above
// then scrolls off a little rather than squeeze either).

const KEY_PX = "tracedojo:drawer:height_px";
const KEY_OPEN = "tracedojo:drawer:open";
const STEP_PX = 24;       // one arrow press on the handle
const MIN_DRAWER_PX = 90; // the tab bar and a line or two
const MIN_TIMELINE_PX = 200;
const HANDLE_PX = 6;
const TIMELINE_SHARE = 0.6; // of the window's height, by default
const DRAWER_SHARE = 0.25;  // at least, by default

export function createDrawer(root) {
  const panes = root.querySelector(".panes");
  const section = root.querySelector("[data-drawer]");
  const handle = root.querySelector("[data-drawer-handle]");
  const toggle = root.querySelector("[data-drawer-toggle]");
  const bar = section.querySelector(".drawer-bar");
  const tabs = [...section.querySelectorAll("[role=tab]")];
  const panels = new Map([...section.querySelectorAll("[role=tabpanel]")].map((p) => [p.dataset.panel, p]));
  const stored = Number(localStorage.getItem(KEY_PX));
  let heightPx = Number.isFinite(stored) && stored > 0 ? stored : null;  // null: the default share
  let open = localStorage.getItem(KEY_OPEN) !== "0";
  let tab = null;

  const H = () => window.innerHeight;
  function panesPx() {
    const top = panes.getBoundingClientRect().top + window.scrollY;  // on the page, not the screen
    const fit = H() - top - 8;
    return Math.round(Math.max(fit, (TIMELINE_SHARE + DRAWER_SHARE) * H() + HANDLE_PX, MIN_TIMELINE_PX + MIN_DRAWER_PX + HANDLE_PX));
  }
  const clamp = (px) => Math.round(Math.max(MIN_DRAWER_PX, Math.min(panesPx() - MIN_TIMELINE_PX - HANDLE_PX, px)));
  // folded, the drawer keeps its tab bar (and the show button)
  const drawerPx = () => (open ? clamp(heightPx ?? panesPx() - Math.ceil(TIMELINE_SHARE * H()) - HANDLE_PX) : bar.offsetHeight);

  function layout() {
    const d = drawerPx();
    // through the CSSOM: the CSP refuses inline style attributes
    panes.style.setProperty("--timeline-h", `${panesPx() - d - HANDLE_PX}px`);
    panes.style.setProperty("--drawer-h", `${d}px`);
    section.classList.toggle("folded", !open);
    toggle.textContent = open ? "hide" : "show";
    toggle.setAttribute("aria-expanded", String(open));
    handle.setAttribute("aria-valuenow", String(d));
    handle.setAttribute("aria-valuemin", "0");
    handle.setAttribute("aria-valuemax", String(panesPx() - MIN_TIMELINE_PX - HANDLE_PX));
  }
  function setHeight(px) {
    open = true;
    heightPx = clamp(px);
    localStorage.setItem(KEY_PX, String(heightPx));
    localStorage.setItem(KEY_OPEN, "1");
    layout();
  }
  function setOpen(v) {
    open = v;
    localStorage.setItem(KEY_OPEN, v ? "1" : "0");
    layout();
  }

  // `bring`: a selection opened this tab; if the drawer sits below the fold (a tall brief
  // above), scroll the page so its bottom is the window's: the panes fit in the window.
  function show(name, { focus = false, unfold = true, bring = false } = {}) {
    if (!panels.has(name)) return;
    tab = name;
    for (const t of tabs) {
      const on = t.dataset.tab === name;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;  // roving tabindex: Tab reaches the chosen tab, arrows the others
      if (on && focus) t.focus();
    }
    for (const [k, p] of panels) p.hidden = k !== name;
    if (unfold && !open) setOpen(true);
    if (bring && section.getBoundingClientRect().top > window.innerHeight - 60) {
      window.scrollBy(0, panes.getBoundingClientRect().bottom - window.innerHeight + 4);
    }
  }

  tabs.forEach((t, i) => {
    t.addEventListener("click", () => show(t.dataset.tab));
    t.addEventListener("keydown", (e) => {
      const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
      if (to === undefined) return;
      e.preventDefault();
      show(tabs[(to + tabs.length) % tabs.length].dataset.tab, { focus: true });
    });
  });
  toggle.addEventListener("click", () => setOpen(!open));

  // --- the handle: drag it, or focus it and press Up / Down (Enter folds the drawer) ---
  handle.addEventListener("keydown", (e) => {
    if (e.key === "ArrowUp") setHeight(drawerPx() + STEP_PX);
    else if (e.key === "ArrowDown") setHeight(drawerPx() - STEP_PX);
    else if (e.key === "Enter" || e.key === " ") setOpen(!open);
    else return;
    e.preventDefault();
  });
  let drag = null;
  handle.addEventListener("pointerdown", (e) => {
    drag = { y: e.clientY, px: drawerPx() };
    handle.setPointerCapture(e.pointerId);
    e.preventDefault();
  });
  handle.addEventListener("pointermove", (e) => { if (drag) setHeight(drag.px + drag.y - e.clientY); });
  const end = () => { drag = null; };
  handle.addEventListener("pointerup", end);
  handle.addEventListener("pointercancel", end);
  window.addEventListener("resize", layout);

  const first = panels.has("measurements") ? "measurements" : "current";
  show(first, { unfold: false });
  layout();

  return {
    show,  // (tab, {focus, unfold, bring})
    setHeight,
    state: () => ({ open, height_px: drawerPx(), tab }),
  };
}
