// The handoff as a person reads it: its Markdown rendered with DOM calls only (headings, lists,
// checkboxes, tables, code, bold and inline code; every text stays text), its frontmatter as a
// small table, and the sentinel shown as what it means ("waits for your approval").
"use strict";

function inline(line) {
  const out = [];
  const re = /(\*\*[^*]+\*\*)|(`[^`]+`)/g;
  let last = 0, m;
  while ((m = re.exec(line)) !== null) {
    if (m.index > last) out.push(text(line.slice(last, m.index)));
    out.push(m[1] ? el("strong", {}, m[1].slice(2, -2)) : el("code", {}, m[2].slice(1, -1)));
    last = re.lastIndex;
  }
  if (last < line.length) out.push(text(line.slice(last)));
  return out;
}

function markdown(source, data) {
  const root = el("div", { class: "md" });
  let lines = String(source).split("\n");
  if (lines[0] === "---") {
    const end = lines.indexOf("---", 1);
    if (end > 0) {
      const facts = lines.slice(1, end).filter(l => /^[a-z_]+: /.test(l));
      root.append(el("details", { class: "facts" }, el("summary", {}, "the handoff's facts"),
        el("table", {}, el("tbody", {}, facts.map(l => { const i = l.indexOf(": "); return el("tr", {}, el("th", {}, l.slice(0, i)), el("td", {}, l.slice(i + 2))); })))));
      lines = lines.slice(end + 1);
    }
  }
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^(`{3,})/);
    if (fence) {
      const body = [];
      i++;
      while (i < lines.length && !lines[i].startsWith(fence[1])) body.push(lines[i++]);
      i++;
      root.append(el("pre", { class: "box" }, body.join("\n")));
      continue;
    }
    const heading = line.match(/^(#{1,4}) (.*)$/);
    if (heading) { root.append(el("h" + Math.min(6, heading[1].length + 2), {}, inline(heading[2]))); i++; continue; }
    const sentinel = line.match(/^\*\*(STEP_[A-Z]+|SKIP)\*\* (.*)$/);
    if (sentinel) {
      root.append(el("p", { class: "sentinel " + sentinel[1].toLowerCase(), title: sentinel[1] + " (runner's sentinel)" },
        el("strong", {}, sentinelMeaning(sentinel[1], data)), " · ", inline(sentinel[2])));
      i++;
      continue;
    }
    if (line.startsWith("|")) {
      const rows = [];
      while (i < lines.length && lines[i].startsWith("|")) rows.push(lines[i++]);
      const cells = r => r.replace(/^\||\|$/g, "").split(/(?<!\\)\|/).map(c => c.trim().replace(/\\\|/g, "|"));
      const body = rows.filter((r, n) => n > 0 && !/^\|[-| :]+\|$/.test(r));
      root.append(el("table", { class: "mdtable" }, el("thead", {}, el("tr", {}, cells(rows[0]).map(c => el("th", {}, inline(c))))),
        el("tbody", {}, body.map(r => el("tr", {}, cells(r).map(c => el("td", {}, inline(c))))))));
      continue;
    }
    if (/^\s*[-*] /.test(line)) {
      const items = [];
      while (i < lines.length && /^\s*[-*] /.test(lines[i])) items.push(lines[i++].replace(/^\s*[-*] /, ""));
      root.append(el("ul", {}, items.map(item => {
        const box = item.match(/^\[([ xX])\] (.*)$/);
        return box ? el("li", { class: "check" }, box[1] === " " ? "☐ " : "☑ ", inline(box[2])) : el("li", {}, inline(item));
      })));
      continue;
    }
    if (!line.trim()) { i++; continue; }
    const para = [];
    while (i < lines.length && lines[i].trim() && !/^(#|\||```|\s*[-*] )/.test(lines[i])) para.push(lines[i++]);
    root.append(el("p", {}, inline(para.join(" "))));
  }
  return root;
}
