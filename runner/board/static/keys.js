// The keyboard: j/k move through the steps (the home page's list, as filtered), Enter opens one,
// a approves and r rejects the step shown (or selected), / filters, Esc closes a form.
"use strict";

function selectable() {
  return [...document.querySelectorAll("#steps tbody tr")].filter(r => !r.hidden);
}

function select(delta) {
  const rows = selectable();
  if (!rows.length) return;
  state.selected = Math.max(0, Math.min(rows.length - 1, state.selected + delta));
  rows.forEach((r, i) => r.classList.toggle("selected", i === state.selected));
  rows[state.selected].scrollIntoView({ block: "nearest" });
}

function selectedStep() {
  if (state.data && state.data.step) return state.data.step;
  const row = selectable()[state.selected];
  return row ? row.dataset.step : null;
}

function onKey(event) {
  const typing = event.target.closest && event.target.closest("input, textarea, select");
  if (event.key === "Escape") {
    document.querySelectorAll(".form").forEach(f => f.remove());
    if (typing) event.target.blur();
    return;
  }
  if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
  const step = selectedStep();
  const status = state.data && state.data.step ? state.data.status
    : (state.data && state.data.steps || []).find(s => s.step === step)?.status;
  if (event.key === "j") select(1);
  else if (event.key === "k") select(-1);
  else if (event.key === "Enter" && step && !(state.data && state.data.step)) location.href = "/steps/" + encodeURIComponent(step);
  else if (event.key === "/") {
    const box = document.getElementById("filter-text");
    if (box) { event.preventDefault(); box.focus(); }
  } else if (event.key === "a" && step && status === "review" && canAct()) act("approve", step, null);
  else if (event.key === "r" && step && status === "review" && canAct()) {
    event.preventDefault();
    const bar = document.getElementById("actions") || document.getElementById("bulk-slot");
    if (bar) reasonForm(bar, "reject", step);
  } else return;
}

document.addEventListener("keydown", onKey);
