"use strict";

// --- the home page ------------------------------------------------------------------------

function renderHome(data) {
  const main = document.getElementById("main");
  if (main.querySelector(".form")) return false;  // a form a person opened survives an update, empty or not
  const counts = el("div", { class: "counts" },
    Object.entries(data.counts).sort().map(([status, n]) => el("span", { class: "pill " + status }, n + " " + status)));
  const halt = data.halted ? actionButtons(["resume"], null) : actionButtons(["halt"], null, (a) => reasonForm(topBar, a, null));
  const topBar = el("div", { class: "bar" }, counts, el("span", { class: "spacer" }), halt);
  fill(main, 
    topBar,
    el("h2", {}, "Needs you", el("span", { class: "count" + (data.needs.length ? " hot" : "") }, data.needs.length)),
    needsList(data),
    el("h2", {}, "The plan", el("span", { class: "count" }, data.steps.length + " steps")),
    spentCard(data.spent),
    filterBar(data), el("div", { id: "bulk-slot" }),
    el("div", { class: "grid2" }, graphCard(data.graph), stepsTable(data.steps)),
    el("h2", {}, "Workers", el("span", { class: "count" }, data.workers.length)),
    pausedList(data.paused),
    workersTable(data.workers),
  );
  applyFilter();
  return true;
}

function needsList(data) {
  if (!data.needs.length) return el("div", { class: "card empty" }, "Nothing waits for you.");
  return el("div", { class: "needs", id: "needs" }, data.needs.map(need => {
    const actions = { review: ["approve", "reject"], failed: ["retry"], halted: ["resume"], "worker-gone": ["abort"] }[need.kind] || [];
    const card = el("div", { class: "card need " + need.kind, "data-step": need.step || "", "data-kind": need.kind },
      el("div", {}, pill({ review: "review", failed: "failed", halted: "halted", "worker-gone": "worker gone" }[need.kind] || need.kind)),
      el("div", {},
        el("div", { class: "what" }, need.step ? [stepLink(need.step), " ", el("span", { class: "title", title: need.title }, need.title)] : need.title),
        el("div", { class: "why" }, need.why),
        need.since ? el("div", { class: "since", title: need.since }, "since " + ago(need.since)) : null));
    card.append(actionButtons(actions, need.step, (a) => reasonForm(card.children[1], a, need.step)) || el("div"));
    return card;
  }));
}

function usd(value) { return "$" + Number(value).toFixed(4); }
function kilo(n) { return n < 1000 ? String(n) : n < 1e6 ? (n / 1000).toFixed(1) + "k" : (n / 1e6).toFixed(2) + "M"; }

// What the plan's agent runs spent: money is an estimate and says whose; tokens are as reported.
function spentCard(spent) {
  if (!spent || !spent.runs) return el("div", { class: "card pad muted", id: "plan-spent" }, "No agent usage recorded yet.");
  const gaps = [spent.unknown ? spent.unknown + " unknown" : null, spent.unpriced ? spent.unpriced + " unpriced" : null].filter(Boolean);
  return el("div", { class: "card pad spent", id: "plan-spent" },
    el("b", {}, "Spent "), el("span", { class: "money" }, usd(spent.usd)), " ",
    el("span", { class: "muted" }, spent.money.replace(/^\$[0-9.]+ /, "")),
    ` · ${kilo(spent.input_tokens)} in, ${kilo(spent.output_tokens)} out · ${spent.runs} agent runs`,
    gaps.length ? ` (${gaps.join(", ")})` : "",
    spent.budget !== null && spent.budget !== undefined ? el("span", { class: "budget" }, ` · plan budget ${usd(spent.budget)}`) : null);
}

function pausedList(paused) {
  if (!paused || !paused.length) return null;
  return el("div", { class: "paused", id: "paused" }, paused.map(p => el("div", { class: "card need paused", "data-account": p.account },
    el("div", {}, pill("paused")),
    el("div", {},
      el("div", { class: "what" }, `Account ${p.account} is paused until ${p.until}`),
      el("div", { class: "why" }, `no worker starts its commands: ${p.by} hit a provider's limit on `, stepLink(p.step), `: ${p.reason}`),
      el("div", { class: "since", title: p.until }, "resets " + until(p.until))))));
}

function until(when) {
  const then = Date.parse(when);
  if (isNaN(then)) return String(when);
  const s = Math.round((then - Date.now()) / 1000);
  if (s <= 0) return "now";
  return "in " + (s < 3600 ? Math.round(s / 60) + "m" : s < 86400 ? Math.round(s / 3600) + "h" : Math.round(s / 86400) + "d");
}

function stepsTable(steps) {
  return el("div", { class: "card" }, el("table", { id: "steps" },
    el("thead", {}, el("tr", {}, ["step", "title", "status", "assignee", "attempt", "depends on", "spent", "updated"].map(h => el("th", {}, h)))),
    el("tbody", {}, steps.map(s => el("tr", { "data-step": s.step, "data-status": s.status, "data-tags": (s.tags || []).join(" "),
      "data-worker": s.assignee || "", "data-text": (s.step + " " + s.title + " " + (s.last_error || "")).toLowerCase() },
      el("td", { class: "id" }, stepLink(s.step)),
      el("td", { class: "title", title: s.title }, s.title),
      el("td", {}, pill(s.status)),
      el("td", {}, s.assignee || ""),
      el("td", { class: "num" }, s.attempt ?? ""),
      el("td", {}, s.depends_on.map((d, i) => [i ? ", " : "", stepLink(d)])),
      el("td", { class: "num spent", title: s.usage ? `${kilo(s.usage.input_tokens)} in, ${kilo(s.usage.output_tokens)} out, ${s.usage.runs} runs` : "" },
        s.usage ? usd(s.usage.usd) : ""),
      el("td", { class: "muted", title: s.since || "" }, ago(s.since)))))));
}

const NODE_W = 168, NODE_H = 42, COL_W = 212, ROW_H = 58, PAD = 14;

function graphCard(graph) {
  if (graph.too_many) return el("div", { class: "card pad muted" }, "The graph of " + graph.too_many + " steps is too large to draw; the list below has every step.");
  if (!graph.nodes.length) return el("div", { class: "card pad muted" }, "No steps yet: add them with `runner add` or `runner import`.");
  const cols = Math.max(...graph.nodes.map(n => n.col ?? n.layer)) + 1;
  const rows = Math.max(...graph.nodes.map(n => n.row)) + 1;
  const width = PAD * 2 + (cols - 1) * COL_W + NODE_W, height = PAD * 2 + (rows - 1) * ROW_H + NODE_H;
  const at = {};
  graph.nodes.forEach(n => { at[n.id] = { x: PAD + (n.col ?? n.layer) * COL_W, y: PAD + n.row * ROW_H }; });
  const image = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "the plan's dependency graph", id: "graph" });
  image.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto" },
    svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }))));
  for (const [from, to] of graph.edges) {
    const a = at[from], b = at[to];
    const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x - 2, y2 = b.y + NODE_H / 2, mid = (x1 + x2) / 2;
    image.append(svg("path", { d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, class: "edge", "data-from": from, "data-to": to, "marker-end": "url(#arrow)" }));
  }
  for (const node of graph.nodes) {
    const { x, y } = at[node.id];
    const title = node.title.length > 22 ? node.title.slice(0, 21) + "…" : node.title;
    const link = svg("a", { href: "/steps/" + encodeURIComponent(node.id), "data-node": node.id, "data-status": node.status },
      svg("title", {}, `${node.id}: ${node.title} (${node.status})`),
      svg("rect", { x, y, width: NODE_W, height: NODE_H, rx: "8", class: "node " + node.status }),
      svg("circle", { cx: x + 12, cy: y + 14, r: "4", class: "dot " + node.status }),
      svg("text", { x: x + 22, y: y + 18, class: "gid" }, node.id.length > 20 ? node.id.slice(0, 19) + "…" : node.id),
      svg("text", { x: x + 12, y: y + 33, class: "gtitle" }, title.replace(/[\x00-\x1f\x7f-\x9f]/g, "�")));
    image.append(link);
  }
  return el("div", { class: "card graph" }, image);
}

function workersTable(workers) {
  if (!workers.length) return el("div", { class: "card pad muted" }, "No worker has beaten yet: start one with `runner worker --id NAME`.");
  return el("div", { class: "card" }, el("table", { id: "workers" },
    el("thead", {}, el("tr", {}, ["worker", "liveness", "state", "host", "holds", "last step", "spent", "last beat"].map(h => el("th", {}, h)))),
    el("tbody", {}, workers.map(w => el("tr", { "data-worker": w.worker },
      el("td", { class: "id" }, w.worker),
      el("td", {}, pill(w.liveness)),
      el("td", {}, w.state || ""),
      el("td", {}, w.host || ""),
      el("td", {}, w.step ? [stepLink(w.step), ` (attempt ${w.attempt})`] : ""),
      el("td", {}, w.last ? [stepLink(w.last.step), " ", w.last.outcome || ""] : ""),
      el("td", { class: "num spent", title: w.spent ? w.spent.money : "" }, w.spent ? usd(w.spent.usd) + ` · ${w.spent.runs} runs` : ""),
      el("td", { class: "muted", title: w.last_beat || "" }, ago(w.last_beat)))))));
}


// --- filters and bulk actions -----------------------------------------------------------------

function readFilter() {
  if (state.filter) return state.filter;
  const q = new URLSearchParams(location.search);
  state.filter = { status: q.get("status") || "", tag: q.get("tag") || "", worker: q.get("worker") || "", text: q.get("q") || "" };
  return state.filter;
}

function filterBar(data) {
  const f = readFilter();
  const options = (name, values) => el("select", { name, "aria-label": "filter by " + name, onchange: (e) => setFilter(name, e.target.value) },
    el("option", { value: "" }, "any " + name), [...new Set(values)].filter(Boolean).sort().map(v => el("option", { value: v, selected: f[name] === v }, v)));
  return el("div", { class: "filters", id: "filters" },
    options("status", data.steps.map(s => s.status)),
    options("tag", data.steps.flatMap(s => s.tags || [])),
    options("worker", data.steps.map(s => s.assignee)),
    el("input", { type: "search", name: "q", id: "filter-text", placeholder: "filter: id, title, error  ( / )", value: f.text,
      oninput: (e) => setFilter("text", e.target.value) }),
    el("span", { class: "muted", id: "filter-count" }),
    el("span", { class: "spacer" }),
    el("button", { class: "retry", "data-action": "bulk-retry", onclick: () => bulk("retry") }, "Retry the failed…"),
    el("button", { class: "abort", "data-action": "bulk-abort", onclick: () => bulk("abort") }, "Abort…"));
}

function setFilter(name, value) {
  readFilter()[name] = value;
  const q = new URLSearchParams();
  const f = state.filter;
  if (f.status) q.set("status", f.status);
  if (f.tag) q.set("tag", f.tag);
  if (f.worker) q.set("worker", f.worker);
  if (f.text) q.set("q", f.text);
  history.replaceState(null, "", location.pathname + (q.toString() ? "?" + q : ""));
  applyFilter();
}

function matches(row) {
  const f = readFilter();
  return (!f.status || row.dataset.status === f.status) && (!f.tag || row.dataset.tags.split(" ").includes(f.tag))
    && (!f.worker || row.dataset.worker === f.worker) && (!f.text || row.dataset.text.includes(f.text.toLowerCase()));
}

function applyFilter() {
  const rows = [...document.querySelectorAll("#steps tbody tr")];
  const shown = new Set();
  rows.forEach(row => { const ok = matches(row); row.hidden = !ok; if (ok) shown.add(row.dataset.step); });
  document.querySelectorAll("#graph [data-node]").forEach(n => n.classList.toggle("dim", !shown.has(n.dataset.node)));
  const count = document.getElementById("filter-count");
  if (count) count.textContent = shown.size === rows.length ? `${rows.length} steps` : `${shown.size} of ${rows.length} steps`;
  const slot = document.getElementById("bulk-slot");
  if (slot && slot.firstChild && slot.firstChild.dataset.filter !== JSON.stringify(state.filter)) slot.replaceChildren();
}

// What a bulk action would act on: the steps the filter shows that the state machine lets it move.
function bulkTargets(action) {
  const can = action === "retry" ? ["failed"] : ["ready", "claimed", "review"];
  return (state.data.steps || []).filter(s => can.includes(s.status)).filter(s => {
    const row = document.querySelector(`#steps tbody tr[data-step="${CSS.escape(s.step)}"]`);
    return row && !row.hidden;
  });
}

function bulk(action) {
  const slot = document.getElementById("bulk-slot");
  const targets = bulkTargets(action);
  if (!targets.length) { flash(`nothing the filter shows can be ${action === "retry" ? "retried (only failed steps)" : "aborted"}`, false); return; }
  const reason = action === "abort" ? el("input", { name: "bulk-reason", placeholder: "why they stop for good", class: "reason" }) : null;
  const form = el("div", { class: "card pad form confirm", id: "bulk-confirm", "data-filter": JSON.stringify(state.filter) },
    el("b", {}, `${action === "retry" ? "Retry" : "Abort"} these ${targets.length} step${targets.length > 1 ? "s" : ""}? Each is its own event.`),
    el("ul", { id: "bulk-list" }, targets.map(s => el("li", { "data-step": s.step }, el("code", {}, s.step), " ", el("span", { title: s.title }, s.title), " ", pill(s.status)))),
    reason,
    el("div", { class: "row" },
      el("button", { class: action, "data-action": "bulk-" + action + "-send", onclick: async () => {
        if (reason && !reason.value.trim()) { flash("error: abort needs a reason", false); return; }
        form.remove();
        const done = [], failed = [];
        for (const s of targets) {
          const body = await act(action, s.step, reason ? reason.value : null);
          (body && body.ok ? done : failed).push(body && body.ok ? s.step : `${s.step}: ${body ? body.error : "no answer"}`);
        }
        flash(`${action}: ${done.length} of ${targets.length} done` + (failed.length ? "\n" + failed.join("\n") : ""), !failed.length);
      } }, `${action === "retry" ? "Retry" : "Abort"} ${targets.length}`),
      el("button", { onclick: () => form.remove() }, "Cancel")));
  slot.replaceChildren(form);
}
