// Ranks: the toolbar's rank switcher, and links from a per-rank measurement to each
// rank's view. A rank's view is this page's URL with `rank` set; every other query key
// (the instance's params, testing) stays.

export function rankHref(rank, href = location.href) {
  const u = new URL(href);
  u.searchParams.set("rank", String(rank));
  return u.pathname + u.search;
}

// The switcher is a GET form that works alone; a choice made with the pointer submits at
// once. Keyboard changes wait for Enter or the button, so arrowing through the options
// does not reload the page at each one.
export function enhanceSwitch(root) {
  const form = root.querySelector("[data-rank-switch]");
  if (!form) return;
  let pointer = false;
  form.rank.addEventListener("pointerdown", () => { pointer = true; });
  form.rank.addEventListener("keydown", (e) => {
    pointer = false;
    if (e.key === "Enter") { e.preventDefault(); form.requestSubmit(); }
  });
  form.rank.addEventListener("change", () => { if (pointer) form.requestSubmit(); });
}

// Under a per-rank measurement: each rank its own view, and the stack. `chart` is the
// tool's chart (x: the ranks); the slowest is named, as the tool's last line names it.
export function rankLinks(chart, current) {
  const nav = document.createElement("nav");
  nav.className = "rank-links";
  nav.setAttribute("aria-label", "open a rank's trace");
  nav.append("Open: ");
  const link = (rank, text) => {
    const a = document.createElement("a");
    a.href = rankHref(rank);
    a.textContent = text;
    if (String(rank) === String(current)) a.setAttribute("aria-current", "page");
    return a;
  };
  chart.x.forEach((r, i) => {
    nav.append(link(r, `rank ${r}${r === chart.slowest_rank ? " (slowest)" : ""}`), i < chart.x.length - 1 ? " · " : "");
  });
  nav.append(" · ", link("all", "all ranks stacked"));
  return nav;
}
