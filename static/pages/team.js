// A team's admin page: the invite form posts JSON and shows the link in place (it is
// shown only once: the server keeps its hash), then the open invites are read again.
// Without this script the form posts fields and the server renders the page with the link.
const form = document.querySelector("[data-invite]");
const made = document.querySelector("[data-made]");
const errorBox = document.querySelector("[data-error]");
const $ = (sel) => made.querySelector(sel);
const when = (iso) => iso.slice(0, 16).replace("T", " ");
const showError = (msg) => { errorBox.textContent = msg; errorBox.hidden = !msg; };

function row(cells) {
  const tr = document.createElement("tr");
  cells.forEach((text, i) => {
    const td = document.createElement("td");
    td.textContent = text;
    if (i === 3) td.className = "num";
    tr.append(td);
  });
  return tr;
}

async function refreshInvites() {
  const res = await fetch(`${location.pathname}.json`);
  if (!res.ok) return;
  const { invites } = await res.json();
  const body = document.querySelector("[data-invites] tbody");
  body.replaceChildren(...(invites.length ? invites.map((i) => row([i.email, i.role, i.by || "", when(i.expires_at)]))
    : [row(["none", "", "", ""])]));
}

form.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const fields = Object.fromEntries(new FormData(form));
  const button = form.querySelector("button");
  button.disabled = true;
  try {
    const res = await fetch(form.action, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(fields),
    });
    const data = await res.json();
    if (!res.ok) { showError(data.error || `the invite was not made (${res.status})`); return; }
    showError("");
    $("[data-made-email]").textContent = data.email;
    $("[data-made-role]").textContent = data.role;
    $("[data-made-expires]").textContent = when(data.expires_at);
    $("[data-made-url]").value = data.invite_url;
    $("[data-copy]").textContent = "Copy";
    made.hidden = false;
    form.reset();
    await refreshInvites();
  } catch (e) {
    showError(`the invite was not made: ${e.message}`);
  } finally {
    button.disabled = false;
  }
});

$("[data-copy]").addEventListener("click", async () => {
  const input = $("[data-made-url]");
  try {
    await navigator.clipboard.writeText(input.value);
  } catch {
    input.select();  // no clipboard permission (plain HTTP): selected, for Ctrl+C
    return;
  }
  $("[data-copy]").textContent = "Copied";
});
