// The console's only script (no inline script is allowed by the Content-Security-Policy): a
// "select all" box on a page of messages, a confirmation before retrying everything a filter matches,
// and the live counts: an element with data-live names a JSON API that is read every LIVE_EVERY ms and
// the page's numbers updated from it (the overview's depths, the groups' counts and total), with no reload.
const LIVE_EVERY = 3000;

function liveUpdate(kind, data) {
  if (kind === "overview") {
    for (const table of data.status.tables) {
      const cell = document.querySelector(`td.depth[data-address="${CSS.escape(table.address)}"]`);
      if (cell && table.depth !== null && table.depth !== undefined) cell.textContent = String(table.depth);
    }
  } else if (kind === "groups") {
    const total = document.getElementById("total-count");
    if (total) total.textContent = String(data.total);
    let unseen = false;
    const current = new Set(data.groups.map((group) => group.id));
    for (const cell of document.querySelectorAll("td.count[data-group]")) {
      if (!current.has(cell.dataset.group)) cell.textContent = "0"; // retried or archived since
    }
    for (const group of data.groups) {
      const cell = document.querySelector(`td.count[data-group="${CSS.escape(group.id)}"]`);
      if (cell) cell.textContent = String(group.messages);
      else unseen = true;
    }
    const note = document.getElementById("live-note");
    if (note) note.hidden = !unseen;
  }
}

function live(element) {
  const read = async () => {
    try {
      const response = await fetch(element.dataset.live, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (response.ok) liveUpdate(element.dataset.liveKind, await response.json());
    } catch (_) {
      // the console away for a moment: the next read tries again
    }
  };
  setInterval(read, LIVE_EVERY);
}

document.addEventListener("DOMContentLoaded", () => {
  for (const element of document.querySelectorAll("[data-live]")) live(element);
  const all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", () => {
      for (const box of document.querySelectorAll("input.pick")) box.checked = all.checked;
    });
  }
  for (const button of document.querySelectorAll("button[data-confirm]")) {
    button.addEventListener("click", (event) => {
      if (!window.confirm(button.dataset.confirm)) event.preventDefault();
    });
  }
});
