// runner board: renders the queue's JSON with DOM calls only (text is always text: a title
// or an output with HTML or terminal escapes is shown as written), and reads it again when
// the server says the queue moved (server-sent events).
"use strict";

const TOKEN_KEY = "runner-board-token";
const state = { version: null, data: null, stepId: null, busy: false,
  pending: [], expanded: {}, collapsed: {}, filter: null, selected: -1 };

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

async function act(action, step, reason, comments) {
  if (state.busy) return;
  state.busy = true;
  document.querySelectorAll("button[data-action]").forEach(b => b.disabled = true);
  try {
    const response = await fetch("/api/act", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Runner-Token": token() },
      body: JSON.stringify({ action, step, reason, comments: comments && comments.length ? comments : undefined }),
    });
    const body = await response.json().catch(() => ({ ok: false, error: "error: " + response.statusText }));
    flash(body.ok ? body.line : body.error, body.ok);
    if (body.ok) {
      document.querySelectorAll("#main .form").forEach(f => f.remove());  // done: the page may update again
      if (comments && comments.length) state.pending = [];
    }
    return body;
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
  const comments = action === "reject" ? state.pending.filter(c => c.step === step) : [];
  const listed = comments.length ? el("div", { class: "pending-list" },
    el("b", {}, `${comments.length} comment${comments.length > 1 ? "s" : ""} on lines go with it:`),
    el("ul", {}, comments.map(c => el("li", {}, el("code", {}, where(c)), " ", c.text)))) : null;
  const form = el("div", { class: "form", "data-form": action },
    el("label", {}, comments.length ? prompt + " (optional: the comments are feedback too)" : prompt), area, listed,
    el("div", { class: "row" },
      el("button", { class: action, "data-action": action + "-send", onclick: () => {
        if (!area.value.trim() && !comments.length) { flash("error: " + action + " needs a reason", false); return; }
        act(action, step, area.value, comments.map(({ file, line, end, text }) => ({ file, line, end, text })));
      } }, { reject: comments.length ? `Reject with ${comments.length} comment${comments.length > 1 ? "s" : ""}` : "Reject with this feedback",
             abort: "Abort the step", halt: "Halt the queue" }[action]),
      el("button", { onclick: () => form.remove() }, "Cancel")));
  container.querySelectorAll(".form").forEach(f => f.remove());
  container.append(form);
  area.focus();
}


// FILE:LINE or FILE:START-END, as `runner reject --comment` writes it.
function where(c) { return c.file + ":" + c.line + (c.end && c.end !== c.line ? "-" + c.end : ""); }

// What runner's sentinels and statuses mean for the person reading the board.
const SENTINEL_MEANS = {
  STEP_COMPLETE: "done: its result is merged",
  STEP_BLOCKED: "waits for you",
  STEP_FAILED: "failed: tried again while attempts are left",
  STEP_REJECTED: "stopped for good",
  SKIP: "nothing was run",
};
function sentinelMeaning(sentinel, data) {
  if (sentinel === "STEP_BLOCKED" && data && data.status === "review") {
    return (data.review || "result") === "result" ? "waits for your approval" : "waits for your decision (" + data.review + ")";
  }
  return SENTINEL_MEANS[sentinel] || sentinel;
}
