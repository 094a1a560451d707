// A step's diff: per file, collapsible, coloured, with the whole file on demand; a click on a
// line number of the result starts a comment on it (shift-click: a range), and the comments go
// with a rejection, as `runner reject --comment FILE:LINE TEXT` sends them.
"use strict";

function diffCard(diff, stepId) {
  const card = el("div", { class: "card pad", id: "diff" });
  if (diff.note) card.append(el("p", { class: "note" }, diff.note));
  if (diff.conflict.length) card.append(el("ul", { class: "conflict" }, diff.conflict.map(p => el("li", {}, p))));
  const files = diff.files || [];
  if (files.length) {
    const commentable = canAct() && diff.commit && state.data.actions.includes("reject");
    card.append(el("div", { class: "dtools" },
      el("span", { class: "muted" }, `${files.length} file${files.length > 1 ? "s" : ""} changed`),
      commentable ? el("span", { class: "muted" }, " · click a line number of the result to comment on it (shift-click: a range)") : null,
      el("span", { class: "spacer" }),
      el("button", { class: "small", onclick: () => { files.forEach(f => { state.collapsed[f.path] = true; }); rerender(); } }, "Collapse all"),
      el("button", { class: "small", onclick: () => { state.collapsed = {}; rerender(); } }, "Expand all")));
    card.append(pendingBar(stepId));
    files.forEach(f => card.append(fileBlock(f, stepId, diff, commentable)));
    if (diff.more) card.append(el("p", { class: "muted" }, `… and ${diff.more} more files.`));
  } else if (diff.kind) {
    card.append(el("p", { class: "muted" }, "No changes."));
  }
  if (diff.clipped) card.append(el("p", { class: "muted" }, `… ${diff.clipped.toLocaleString()} more bytes of diff not shown (git diff shows them).`));
  return card;
}

function pendingBar(stepId) {
  const mine = state.pending.filter(c => c.step === stepId);
  if (!mine.length) return el("div", { id: "pending", hidden: true });
  return el("div", { class: "pending", id: "pending" },
    el("b", {}, `${mine.length} comment${mine.length > 1 ? "s" : ""} on lines`), " waiting to go with a rejection ",
    el("button", { class: "reject", "data-action": "reject-comments", onclick: () => reasonForm(document.getElementById("actions"), "reject", stepId) },
      "Reject with comments…"),
    el("button", { class: "small", onclick: () => { state.pending = state.pending.filter(c => c.step !== stepId); rerender(); } }, "Discard"));
}

function fileBlock(file, stepId, diff, commentable) {
  const lang = langOf(file.path);
  const whole = state.expanded[stepId + ":" + file.path];
  const open = !state.collapsed[file.path];
  const summary = el("summary", {},
    el("span", { class: "fname", title: file.old_path !== file.path ? `${file.old_path} → ${file.path}` : file.path }, file.path),
    el("span", { class: "fstat " + file.status }, file.status),
    el("span", { class: "adds" }, "+" + file.adds), el("span", { class: "dels" }, "−" + file.dels),
    el("span", { class: "spacer" }),
    !file.binary && file.status !== "deleted" && diff.commit ? el("button", { class: "small", "data-whole": file.path, onclick: (e) => {
      e.preventDefault();
      toggleWhole(stepId, file.path);
    } }, whole ? "Show the changes only" : "Whole file") : null);
  const block = el("details", { class: "dfile", "data-file": file.path, open: open }, summary);
  block.addEventListener("toggle", () => { state.collapsed[file.path] = !block.open; });
  const table = el("table", { class: "dlines" });
  const added = new Set();
  file.hunks.forEach(h => h.lines.forEach(l => { if (l.kind === "add") added.add(l.new); }));
  if (file.binary) table.append(el("tr", {}, el("td", { class: "muted", colspan: 3 }, "A binary file.")));
  else if (whole && whole.lines) {
    whole.lines.forEach((t, i) => table.append(lineRow({ kind: added.has(i + 1) ? "add" : "ctx", old: null, new: i + 1, text: t }, file.path, stepId, lang, commentable)));
    if (whole.clipped) table.append(el("tr", {}, el("td", { colspan: 3, class: "muted" }, `… ${whole.clipped.toLocaleString()} more bytes`)));
  } else {
    file.hunks.forEach(h => {
      table.append(el("tr", { class: "hunk" }, el("td", { class: "ln" }), el("td", { class: "ln" }), el("td", { class: "code" }, h.header)));
      h.lines.forEach(l => table.append(lineRow(l, file.path, stepId, lang, commentable)));
    });
  }
  block.append(el("div", { class: "dbody" }, table));
  return block;
}

function lineRow(line, path, stepId, lang, commentable) {
  const target = line.new !== null && commentable;
  const num = el("td", { class: "ln new" + (target ? " target" : ""), "data-line": line.new ?? "",
    title: target ? `comment on ${path}:${line.new}` : null,
    onclick: target ? (e) => startComment(e, path, line.new, stepId) : null }, line.new ?? "");
  const row = el("tr", { class: line.kind, "data-file": path, "data-new": line.new ?? "" },
    el("td", { class: "ln" }, line.old ?? ""), num,
    el("td", { class: "code" }, el("span", { class: "sign" }, line.kind === "add" ? "+" : line.kind === "del" ? "-" : " "), highlight(line.text, lang)));
  const frag = document.createDocumentFragment();
  frag.append(row);
  state.pending.filter(c => c.step === stepId && c.file === path && (c.end || c.line) === line.new).forEach(c => {
    frag.append(el("tr", { class: "comment-row" }, el("td", { colspan: 3 }, el("div", { class: "comment" },
      el("code", {}, where(c)), " ", el("span", { class: "ctext" }, c.text),
      el("button", { class: "small", onclick: () => { state.pending = state.pending.filter(x => x !== c); rerender(); } }, "Remove")))));
  });
  return frag;
}

let anchor = null;  // the line a shift-click extends from

function startComment(event, path, line, stepId) {
  let first = line, last = line;
  if (event.shiftKey && anchor && anchor.path === path) { first = Math.min(anchor.line, line); last = Math.max(anchor.line, line); }
  anchor = { path, line };
  document.querySelectorAll(".comment-form").forEach(f => f.remove());
  const row = event.target.closest("tr");
  const area = el("textarea", { name: "comment", "aria-label": "your comment on " + path + ":" + first });
  const label = first === last ? `${path}:${first}` : `${path}:${first}-${last}`;
  const form = el("tr", { class: "comment-form form" }, el("td", { colspan: 3 },
    el("label", {}, "Comment on ", el("code", {}, label)), area,
    el("div", { class: "row" },
      el("button", { class: "approve", "data-action": "comment-add", onclick: () => {
        if (!area.value.trim()) { flash("error: a comment says something", false); return; }
        state.pending.push({ step: stepId, file: path, line: first, end: last, text: area.value });
        form.remove();
        rerender();
      } }, "Add comment"),
      el("button", { onclick: () => form.remove() }, "Cancel"))));
  row.after(form);
  area.focus();
}

async function toggleWhole(stepId, path) {
  const key = stepId + ":" + path;
  if (state.expanded[key]) { delete state.expanded[key]; rerender(); return; }
  try {
    state.expanded[key] = await getJSON("/api/file/" + encodeURIComponent(stepId) + "?path=" + encodeURIComponent(path));
  } catch (err) {
    flash(String(err.message || err), false);
    return;
  }
  rerender();
}

function rerender() { if (state.data && state.data.step) renderStep(state.data, true); }
