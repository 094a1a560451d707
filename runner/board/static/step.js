"use strict";

// --- a step's page ------------------------------------------------------------------------

function renderStep(data, force) {
  const main = document.getElementById("main");
  if (!force && main.querySelector(".form")) { updateLive(data); return false; }  // a form a person opened survives an update
  const header = el("div", {},
    el("a", { class: "back", href: "/" }, "← the board"),
    el("h1", {}, el("span", { class: "id" }, data.step), " ", el("span", { class: "title", title: data.title }, data.title), " ", pill(data.status)),
    data.status === "review" ? el("div", { class: "means" }, sentinelMeaning("STEP_BLOCKED", data)) : null,
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
    el("h2", {}, "Result"), diffCard(data.diff, data.step), lastComments(data),
    el("h2", {}, "Runs", el("span", { class: "count" }, data.attempts.length + " recorded")), attemptsList(data.attempts),
    data.verdict ? [el("h2", {}, "Verdict"), el("div", { class: "card pad" }, el("pre", { id: "verdict" }, JSON.stringify(data.verdict, null, 2)))] : null,
    el("h2", {}, "Manual checks left"), data.manual.length
      ? el("div", { class: "card pad" }, el("ul", { class: "checks", id: "manual" }, data.manual.map(m => el("li", {}, "☐ ", m))))
      : el("div", { class: "card empty" }, "None."),
    data.handoff ? [el("h2", {}, "Handoff"), el("div", { class: "card pad", id: "handoff" }, markdown(data.handoff, data))] : null,
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


// The comments of the last rejection: what this attempt was asked to change.
function lastComments(data) {
  const given = (data.diff && data.diff.comments) || [];
  if (!given.length) return null;
  return el("div", { class: "card pad", id: "last-comments" },
    el("b", {}, `The last rejection's ${given.length} comment${given.length > 1 ? "s" : ""} on lines`),
    el("ul", {}, given.map(c => el("li", {}, el("code", {}, where(c)), " ", c.text,
      c.line_text ? el("pre", { class: "quoted" }, c.line_text) : null))));
}
