// A small syntax highlighter shipped with the board (no CDN): one line at a time, by the file's
// extension; keywords, strings, comments and numbers become spans of text nodes, never HTML.
"use strict";

const HL_KEYWORDS = {
  py: "and as assert async await break class continue def del elif else except False finally for from global if import in is lambda None nonlocal not or pass raise return True try while with yield self",
  js: "async await break case catch class const continue default delete do else export extends false finally for function if import in instanceof let new null of return static super switch this throw true try typeof undefined var void while yield",
  go: "break case chan const continue default defer else fallthrough for func go goto if import interface map nil package range return select struct switch type var true false",
  rs: "as async await break const continue crate else enum extern false fn for if impl in let loop match mod move mut pub ref return self Self static struct super trait true type unsafe use where while",
  c: "auto break case char const continue default do double else enum extern float for goto if int long register return short signed sizeof static struct switch typedef union unsigned void volatile while class public private protected new delete template namespace using true false null",
  sh: "if then else elif fi case esac for while until do done in function return local export set echo exit",
  toml: "true false",
};
const HL_LANG = { py: "py", js: "js", mjs: "js", ts: "js", tsx: "js", jsx: "js", json: "toml", go: "go", rs: "rs",
  c: "c", h: "c", cc: "c", cpp: "c", hpp: "c", java: "c", kt: "c", cs: "c", sh: "sh", bash: "sh", toml: "toml",
  yaml: "toml", yml: "toml", rb: "py", css: "js", md: null };
const HL_HASH = new Set(["py", "sh", "toml"]);  // comments start with # (else //)
const hlSets = {};

function langOf(path) {
  const ext = String(path).toLowerCase().split(".").pop();
  return HL_LANG[ext] === undefined ? null : HL_LANG[ext];
}

function highlight(line, lang) {
  if (!lang || line.length > 2000) return [text(line)];
  const words = hlSets[lang] || (hlSets[lang] = new Set(HL_KEYWORDS[lang].split(" ")));
  const comment = HL_HASH.has(lang) ? "#.*" : "//.*";
  const re = new RegExp(`(${comment})|("(?:[^"\\\\]|\\\\.)*"?|'(?:[^'\\\\]|\\\\.)*'?|\`[^\`]*\`?)|\\b(\\d[\\d_.xXa-fA-F]*)\\b|([A-Za-z_][A-Za-z0-9_]*)`, "g");
  const out = [];
  let last = 0, m;
  while ((m = re.exec(line)) !== null) {
    if (m.index > last) out.push(text(line.slice(last, m.index)));
    const kind = m[1] ? "c" : m[2] ? "s" : m[3] ? "n" : words.has(m[4]) ? "k" : null;
    out.push(kind ? el("span", { class: "hl-" + kind }, m[0]) : text(m[0]));
    last = re.lastIndex;
  }
  if (last < line.length) out.push(text(line.slice(last)));
  return out;
}
