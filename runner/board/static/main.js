"use strict";

// --- loading and live updates -------------------------------------------------------------

function chrome(data) {
  document.getElementById("where").replaceChildren(text(`${data.queue} @ ${String(data.tip).slice(0, 10)}` + (data.remote ? ` · ${data.remote}` : " · local")));
  document.getElementById("who").replaceChildren(text(data.read_only ? "read-only" : token() ? `acting as ${data.actor}` : "no token: view only"));
}

async function load(force) {
  const match = location.pathname.match(/^\/steps\/(.+)$/);
  try {
    if (match) {
      const data = await getJSON("/api/steps/" + match[1]);
      state.data = data;
      chrome(data);
      document.title = `${data.step} · runner board`;
      renderStep(data);
    } else {
      const data = await getJSON("/api/state");
      state.data = data;
      chrome(data);
      document.title = (data.needs.length ? `(${data.needs.length}) ` : "") + "runner board";
      renderHome(data);
    }
    document.body.dataset.version = state.data.version;
  } catch (err) {
    document.getElementById("main").replaceChildren(el("div", { class: "card pad warn" }, String(err.message || err)));
  }
}

function listen() {
  const live = document.getElementById("live");
  const source = new EventSource("/api/events");
  source.addEventListener("open", () => { live.textContent = "live"; live.classList.add("on"); });
  source.addEventListener("error", () => { live.textContent = "reconnecting…"; live.classList.remove("on"); });
  source.addEventListener("moved", (event) => {
    const { version } = JSON.parse(event.data);
    if (version !== state.version) { state.version = version; load(false); }
  });
}

document.addEventListener("DOMContentLoaded", () => { load(true); listen(); });
