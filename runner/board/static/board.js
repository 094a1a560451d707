// runner board: renders the queue's JSON with DOM calls only (text is always text: a title
// or an output with HTML or terminal escapes is shown as written), and reads it again when
// the server says the queue moved (server-sent events).
"use strict";

const TOKEN_KEY = "runner-board-token";
const state = { version: null, data: null, stepId: null, busy: false };

(function takeToken() {
  const match = location.hash.match(/token=([A-Za-z0-9_-]+)/);
  if (match) {
    sessionStorage.setItem(TOKEN_KEY, match[1]);
    history.replaceState(null, "", location.pathname);
  }
})();

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

// --- small DOM helpers --------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : text(String(child)));
  }
  return node;
}

// Control characters (terminal escapes among them) are shown as \x1b-style escapes.
function text(value) {
  const parts = String(value).split(/([\x00-\x08\x0b-\x1f\x7f-\x9f])/);
  if (parts.length === 1) return document.createTextNode(value);
  const frag = document.createDocumentFragment();
  parts.forEach((part, i) => {
    if (i % 2 === 0) { if (part) frag.append(document.createTextNode(part)); return; }
    const code = part.charCodeAt(0).toString(16).padStart(2, "0");
    frag.append(el("span", { class: "esc" }, "\\x" + code));
  });
  return frag;
}

// Replace a node's children (arrays flattened, null and false left out), as el() does.
function fill(node, ...children) {
  node.replaceChildren();
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : text(String(child)));
  }
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function pill(status) { return el("span", { class: "pill " + String(status).replace(/\s+/g, "-") }, status); }
function stepLink(id) { return el("a", { href: "/steps/" + encodeURIComponent(id), class: "steplink" }, id); }

function ago(when) {
  if (!when) return "";
  const then = Date.parse(when);
  if (isNaN(then)) return String(when);
  let s = Math.max(0, Math.round((Date.now() - then) / 1000));
  if (s < 60) return s + "s ago";
  if (s < 3600) return Math.round(s / 60) + "m ago";
  if (s < 86400) return Math.round(s / 3600) + "h ago";
  return Math.round(s / 86400) + "d ago";
}

function flash(message, ok) {
  const box = document.getElementById("flash");
  box.replaceChildren(text(message));
  box.className = "flash " + (ok ? "ok" : "err");
  box.hidden = false;
}

// --- talking to the board ---------------------------------------------------------------

async function getJSON(url) {
  const response = await fetch(url, { headers: { "Accept": "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

async function act(action, step, reason) {
  if (state.busy) return;
  state.busy = true;
  document.querySelectorAll("button[data-action]").forEach(b => b.disabled = true);
  try {
    const response = await fetch("/api/act", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Runner-Token": token() },
      body: JSON.stringify({ action, step, reason }),
    });
    const body = await response.json().catch(() => ({ ok: false, error: "error: " + response.statusText }));
    flash(body.ok ? body.line : body.error, body.ok);
    if (body.ok) document.querySelectorAll("#main .form").forEach(f => f.remove());  // done: the page may update again
  } catch (err) {
    flash("error: the board did not answer (" + err.message + ")", false);
  } finally {
    state.busy = false;
    await load(true);
  }
}

function canAct() { return state.data && !state.data.read_only && token(); }

function actionButtons(actions, step, onReason) {
  if (!state.data || state.data.read_only) return null;
  const wrap = el("div", { class: "buttons" });
  for (const action of actions) {
    const label = { approve: "Approve", reject: "Reject…", retry: "Retry", abort: "Abort…", halt: "Halt…", resume: "Resume" }[action] || action;
    const button = el("button", {
      class: action, "data-action": action, "data-step": step || "", disabled: !canAct(),
      title: canAct() ? null : "open the address `runner board` printed, with its token, to act",
      onclick: () => (["reject", "abort", "halt"].includes(action) ? onReason(action) : act(action, step, null)),
    }, label);
    wrap.append(button);
  }
  return wrap;
}

function reasonForm(container, action, step) {
  const prompt = {
    reject: "Your feedback: the next attempt reads it (for a deviation, what to do instead).",
    abort: "Why this step stops for good:",
    halt: "Why the queue halts (every worker shows it):",
  }[action];
  const area = el("textarea", { name: "reason", "aria-label": prompt });
  const form = el("div", { class: "form", "data-form": action },
    el("label", {}, prompt), area,
    el("div", { class: "row" },
      el("button", { class: action, "data-action": action + "-send", onclick: () => {
        if (!area.value.trim()) { flash("error: " + action + " needs a reason", false); return; }
        act(action, step, area.value);
      } }, { reject: "Reject with this feedback", abort: "Abort the step", halt: "Halt the queue" }[action]),
      el("button", { onclick: () => form.remove() }, "Cancel")));
  container.querySelectorAll(".form").forEach(f => f.remove());
  container.append(form);
  area.focus();
}

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
    el("div", { class: "grid2" }, graphCard(data.graph), stepsTable(data.steps)),
    el("h2", {}, "Workers", el("span", { class: "count" }, data.workers.length)),
    pausedList(data.paused),
    workersTable(data.workers),
  );
  return true;
}

function needsList(data) {
  if (!data.needs.length) return el("div", { class: "card empty" }, "Nothing waits for you.");
  return el("div", { class: "needs", id: "needs" }, data.needs.map(need => {
    const actions = { review: ["approve", "reject"], failed: ["retry"], halted: ["resume"], "worker-gone": ["abort"] }[need.kind] || [];
    const card = el("div", { class: "card need " + need.kind, "data-step": need.step || "", "data-kind": need.kind },
      el("div", {}, pill({ review: "review", failed: "failed", halted: "halted", "worker-gone": "worker gone" }[need.kind] || need.kind)),
      el("div", {},
        el("div", { class: "what" }, need.step ? [stepLink(need.step), " ", el("span", { class: "title" }, need.title)] : need.title),
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
    el("tbody", {}, steps.map(s => el("tr", { "data-step": s.step, "data-status": s.status },
      el("td", { class: "id" }, stepLink(s.step)),
      el("td", { class: "title" }, s.title),
      el("td", {}, pill(s.status)),
      el("td", {}, s.assignee || ""),
      el("td", { class: "num" }, s.attempt ?? ""),
      el("td", {}, s.depends_on.map((d, i) => [i ? ", " : "", stepLink(d)])),
      el("td", { class: "num spent", title: s.usage ? `${kilo(s.usage.input_tokens)} in, ${kilo(s.usage.output_tokens)} out, ${s.usage.runs} runs` : "" },
        s.usage ? usd(s.usage.usd) : ""),
      el("td", { class: "muted", title: s.since || "" }, ago(s.since)))))));
}

const NODE_W = 168, NODE_H = 42, COL_W = 212, ROW_H = 58, PAD = 14;
const FILL = { ready: "#ecfeff", claimed: "#fffbeb", review: "#f5f3ff", done: "#f0fdf4", failed: "#fef2f2", waiting: "#f9fafb", blocked: "#fff1f2", invalid: "#fef2f2" };
const STROKE = { ready: "#0891b2", claimed: "#d97706", review: "#7c3aed", done: "#16a34a", failed: "#dc2626", waiting: "#9ca3af", blocked: "#9f1239", invalid: "#b91c1c" };

function graphCard(graph) {
  if (graph.too_many) return el("div", { class: "card pad muted" }, "The graph of " + graph.too_many + " steps is too large to draw; the list below has every step.");
  if (!graph.nodes.length) return el("div", { class: "card pad muted" }, "No steps yet: add them with `runner add` or `runner import`.");
  const cols = Math.max(...graph.nodes.map(n => n.layer)) + 1;
  const rows = Math.max(...graph.nodes.map(n => n.row)) + 1;
  const width = PAD * 2 + (cols - 1) * COL_W + NODE_W, height = PAD * 2 + (rows - 1) * ROW_H + NODE_H;
  const at = {};
  graph.nodes.forEach(n => { at[n.id] = { x: PAD + n.layer * COL_W, y: PAD + n.row * ROW_H }; });
  const image = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "the plan's dependency graph", id: "graph" });
  image.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto" },
    svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#9ca3af" }))));
  for (const [from, to] of graph.edges) {
    const a = at[from], b = at[to];
    const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x - 2, y2 = b.y + NODE_H / 2, mid = (x1 + x2) / 2;
    image.append(svg("path", { d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, fill: "none", stroke: "#c7ccd4", "stroke-width": "1.5", "marker-end": "url(#arrow)" }));
  }
  for (const node of graph.nodes) {
    const { x, y } = at[node.id];
    const title = node.title.length > 22 ? node.title.slice(0, 21) + "…" : node.title;
    const link = svg("a", { href: "/steps/" + encodeURIComponent(node.id), "data-node": node.id, "data-status": node.status },
      svg("title", {}, `${node.id}: ${node.title} (${node.status})`),
      svg("rect", { x, y, width: NODE_W, height: NODE_H, rx: "8", fill: FILL[node.status] || "#fff", stroke: STROKE[node.status] || "#9ca3af", "stroke-width": "1.5" }),
      svg("circle", { cx: x + 12, cy: y + 14, r: "4", fill: STROKE[node.status] || "#9ca3af" }),
      svg("text", { x: x + 22, y: y + 18, class: "gid" }, node.id.length > 20 ? node.id.slice(0, 19) + "…" : node.id),
      svg("text", { x: x + 12, y: y + 33, fill: "#4b5563" }, title.replace(/[\x00-\x1f\x7f-\x9f]/g, "�")));
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

// --- a step's page ------------------------------------------------------------------------

function renderStep(data) {
  const main = document.getElementById("main");
  if (main.querySelector(".form")) { updateLive(data); return false; }  // a form a person opened survives an update
  const header = el("div", {},
    el("a", { class: "back", href: "/" }, "← the board"),
    el("h1", {}, el("span", { class: "id" }, data.step), " ", el("span", { class: "title" }, data.title), " ", pill(data.status)),
    el("div", { class: "meta" },
      el("span", {}, el("b", {}, "assignee"), data.assignee || "none"),
      el("span", {}, el("b", {}, "attempt"), data.attempt ?? "-"),
      el("span", {}, el("b", {}, "failures"), data.failures ?? 0),
      el("span", {}, el("b", {}, "depends on"), data.depends_on.length ? data.depends_on.map((d, i) => [i ? ", " : "", stepLink(d)]) : "nothing"),
      el("span", {}, el("b", {}, "updated"), data.since ? ago(data.since) : "-"),
      data.spent ? el("span", { id: "step-spent" }, el("b", {}, "spent"), data.spent) : null),
    data.last_error ? el("div", { class: "warn", id: "last-error" }, data.last_error) : null);
  const bar = el("div", { class: "bar", id: "actions" });
  const buttons = actionButtons(data.actions, data.step, (a) => reasonForm(bar, a, data.step));
  if (buttons) bar.append(buttons);
  fill(main, 
    header, bar,
    data.status === "claimed" ? el("div", { id: "live-slot" }) : null,
    el("h2", {}, "Result"), diffCard(data.diff),
    el("h2", {}, "Runs", el("span", { class: "count" }, data.attempts.length + " recorded")), attemptsList(data.attempts),
    data.verdict ? [el("h2", {}, "Verdict"), el("div", { class: "card pad" }, el("pre", { id: "verdict" }, JSON.stringify(data.verdict, null, 2)))] : null,
    el("h2", {}, "Manual checks left"), data.manual.length
      ? el("div", { class: "card pad" }, el("ul", { class: "checks", id: "manual" }, data.manual.map(m => el("li", {}, "☐ ", m))))
      : el("div", { class: "card empty" }, "None."),
    data.handoff ? [el("h2", {}, "Handoff"), el("div", { class: "card pad" }, el("pre", { id: "handoff" }, data.handoff))] : null,
    el("h2", {}, "Step file ", el("span", { class: "count" }, data.path)), el("div", { class: "card pad" }, el("pre", { id: "file" }, data.file)),
    el("h2", {}, "History"), historyTable(data.history),
  );
  updateLive(data);
  return true;
}

function updateLive(data) {
  const slot = document.getElementById("live-slot");
  if (!slot) return;
  const live = data.live || {};
  const head = el("div", { class: "head" }, el("span", { class: "dot" }), el("b", {}, "Live output"),
    el("span", { class: "muted" }, live.output === null || live.output === undefined
      ? `attempt ${live.attempt} on ${live.worker}: no output carried by its heartbeat yet`
      : `attempt ${live.attempt} on ${live.worker}` + (live.run ? `, running ${live.run}` : "") + ` · heartbeat ${ago(live.at)}`));
  const pre = el("pre", { class: "box", id: "live-output" }, live.output || "");
  fill(slot, el("h2", {}, "Running now"), el("div", { class: "card livebox" }, head, el("div", { class: "live-pane" }, pre)));
  pre.scrollTop = pre.scrollHeight;
}

function diffCard(diff) {
  const card = el("div", { class: "card pad", id: "diff" });
  if (diff.note) card.append(el("p", { class: "note" }, diff.note));
  if (diff.conflict.length) card.append(el("ul", { class: "conflict" }, diff.conflict.map(p => el("li", {}, p))));
  if (diff.text) {
    card.append(el("pre", { class: "diff" }, diff.text.split("\n").map(line => {
      const kind = line.startsWith("diff --git") ? "file" : line.startsWith("@@") ? "hunk"
        : line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : "";
      return el("span", { class: kind }, line || " ");
    })));
  } else if (diff.kind) {
    card.append(el("p", { class: "muted" }, "No changes."));
  }
  if (diff.clipped) card.append(el("p", { class: "muted" }, `… ${diff.clipped.toLocaleString()} more bytes of diff not shown (git diff shows them).`));
  return card;
}

function attemptsList(attempts) {
  if (!attempts.length) return el("div", { class: "card pad muted" }, "No attempt recorded yet.");
  return el("div", { id: "runs" }, attempts.map(a => el("div", { class: "card attempt", "data-attempt": a.attempt },
    el("div", { class: "head" }, el("b", {}, `Attempt ${a.attempt}`), pill(a.status || a.event), el("span", { class: "muted" }, `${a.event} by ${a.actor} · ${ago(a.time)}`),
      a.spent && a.spent !== "no agent usage recorded" ? el("span", { class: "spent" }, a.spent) : null),
    a.reason ? el("div", { class: "reason" }, a.reason) : null,
    a.runs.length ? el("table", {},
      el("thead", {}, el("tr", {}, ["run", "result", "took", "spent", "output"].map(h => el("th", {}, h)))),
      el("tbody", {}, a.runs.map(r => el("tr", {},
        el("td", {}, r.name), el("td", {}, pill(r.result)),
        el("td", { class: "num" }, r.seconds === undefined || r.seconds === null ? "" : r.seconds + "s"),
        el("td", { class: "spent" }, r.spent || ""),
        el("td", {}, el("div", { class: "detail" }, r.detail || ""))))))
      : el("div", { class: "pad muted" }, "No runs listed."))));
}

function historyTable(history) {
  return el("div", { class: "card" }, el("table", { id: "history" },
    el("thead", {}, el("tr", {}, ["when", "event", "by", "attempt", "to", "reason"].map(h => el("th", {}, h)))),
    el("tbody", {}, history.map(h => el("tr", {},
      el("td", { class: "muted", title: h.time }, ago(h.time)), el("td", {}, h.event), el("td", {}, h.actor || ""),
      el("td", { class: "num" }, h.attempt ?? ""), el("td", {}, h.status ? pill(h.status) : ""), el("td", {}, h.reason || ""))))));
}

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
