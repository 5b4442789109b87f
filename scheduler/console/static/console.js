// Ask before a form marked data-confirm is sent (trigger, rerun, backfill, items): the
// Content-Security-Policy allows no inline handlers, so this one listener does it.
document.addEventListener("submit", (event) => {
  const message = event.target.dataset.confirm;
  if (message && !window.confirm(message)) {
    event.preventDefault();
  }
});
