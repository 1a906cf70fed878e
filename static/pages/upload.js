// The upload page: a drop zone that is also the file picker (the input inside it keeps the
// keyboard: Tab reaches it, Space or Enter opens the picker), and the chosen files listed,
// with their sizes, before anything is sent.
const form = document.getElementById("upload-form");
const zone = document.getElementById("dropzone");
const input = document.getElementById("trace");
const list = document.getElementById("chosen");
const summary = document.getElementById("chosen-summary");
const submit = document.getElementById("upload-submit");

function size(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 2 ** 20) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

function show() {
  const files = [...input.files];
  list.replaceChildren(...files.map((f) => {
    const li = document.createElement("li");
    const name = document.createElement("span");
    name.className = "chosen-name";
    name.textContent = f.name;
    const bytes = document.createElement("span");
    bytes.className = "note";
    bytes.textContent = size(f.size);
    li.append(name, " ", bytes);
    return li;
  }));
  const total = files.reduce((a, f) => a + f.size, 0);
  summary.textContent = files.length === 0 ? "No files chosen."
    : files.length === 1 ? `1 file chosen, ${size(total)}.`
    : `${files.length} files chosen, ${size(total)}: read as one upload of ${files.length} ranks.`;
  zone.classList.toggle("has-files", files.length > 0);
}

input.addEventListener("change", show);

// A drop on the zone fills the same input the picker does, so the form sends it as usual.
for (const type of ["dragenter", "dragover"]) {
  zone.addEventListener(type, (e) => {
    e.preventDefault();
    e.dataTransfer.dropEffect = "copy";
    zone.classList.add("dragging");
  });
}
zone.addEventListener("dragleave", (e) => {
  if (!zone.contains(e.relatedTarget)) zone.classList.remove("dragging");
});
zone.addEventListener("drop", (e) => {
  e.preventDefault();
  zone.classList.remove("dragging");
  if (!e.dataTransfer.files.length) return;
  input.files = e.dataTransfer.files;
  show();
});
// A file dropped beside the zone would make the browser navigate away to it.
window.addEventListener("dragover", (e) => e.preventDefault());
window.addEventListener("drop", (e) => e.preventDefault());

form.addEventListener("submit", (e) => {
  if (!input.files.length) {
    e.preventDefault();
    summary.textContent = "Choose or drop a trace file first.";
    input.focus();
    return;
  }
  submit.disabled = true;
  submit.textContent = input.files.length > 1 ? `Reading ${input.files.length} files…` : "Reading…";
});
// Back from the trace's page, the form is as it was left: list what it still holds.
window.addEventListener("pageshow", () => {
  submit.disabled = false;
  submit.textContent = "Read it";
  show();
});
show();
