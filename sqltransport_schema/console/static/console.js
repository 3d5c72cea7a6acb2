// The console's only script (no inline script is allowed by the Content-Security-Policy): a
// "select all" box on a page of messages, and a confirmation before retrying everything a filter matches.
document.addEventListener("DOMContentLoaded", () => {
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
