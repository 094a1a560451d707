"""A corpus of hostile step files.

Every payload that could execute something tries to create a file in a canary folder;
after the run the canary folder must be empty. Each invalid file comes with the words
its reason must contain (loose on purpose: the wording may change, the meaning not).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Bad:
    path: str  # under plans/steps/
    content: bytes | tuple[str, str]  # bytes, or ("symlink", target)
    reason: tuple[str, ...]  # any of these words in the reason (case-insensitive)
    what: str

    @property
    def step_id(self) -> str:
        return self.path.rsplit("/", 1)[-1].removesuffix(".md")


@dataclass
class Corpus:
    invalid: list[Bad]
    valid: dict[str, bytes]  # path -> content of the steps that must run (or fail) safely
    expect: dict[str, str]  # valid step id -> done | failed | blocked
    literal: dict[str, str] = field(default_factory=dict)  # file in integration -> exact expected content
    tricky_outputs: list[Bad] = field(default_factory=list)  # required_outputs escaping the worktree


def _front(fields: dict, body: str = "") -> bytes:
    lines = ["---"] + [f"{key}: {json.dumps(value)}" for key, value in fields.items()] + ["---", body]
    return "\n".join(lines).encode()


def build(canary: Path, exec_log: Path) -> Corpus:
    c = str(canary)
    touch = lambda name: ["sh", "-c", f"touch {c}/{name}"]  # what a hostile file wants to run
    log_run = 'printf "%s %s %s %s\\n" "$RUNNER_STEP" "$RUNNER_ATTEMPT" "$RUNNER_WORKER" "$PPID" >> ' + json.dumps(
        str(exec_log)
    )
    rng = random.Random(6)
    bomb = ["---", "step: yaml-bomb", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        bomb.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    bomb += [f"run: {json.dumps(touch('yaml-bomb'))}", "---", ""]
    deep_block = (
        "---\nstep: deep-block\n" + "".join(" " * i + f"k{i}:\n" for i in range(200)) + " " * 200 + "v: 1\n---\n"
    )
    huge = _front({"step": "huge-10mib", "run": touch("huge")}, "x" * (10 * 1024 * 1024))
    invalid = [
        Bad(
            "bad-yaml.md",
            b"---\nstep: bad-yaml\ntitle: [unclosed\nrun: " + json.dumps(touch("bad-yaml")).encode() + b"\n---\n",
            ("yaml",),
            "broken YAML",
        ),
        Bad("yaml-bomb.md", "\n".join(bomb).encode(), ("alias", "anchor"), "YAML bomb (billion laughs)"),
        Bad(
            "deep-flow.md",
            b"---\nstep: deep-flow\ntitle: " + b"[" * 5000 + b"]" * 5000 + b"\n---\n",
            ("nest", "deep"),
            "5000 levels of flow nesting",
        ),
        Bad("deep-block.md", deep_block.encode(), ("nest", "deep"), "200 levels of block nesting"),
        Bad("huge-10mib.md", huge, ("1 mib", "bytes", "too large", "size"), "a 10 MiB file"),
        Bad("binary.md", bytes(rng.getrandbits(8) for _ in range(4096)), ("utf-8", "nul", "binary"), "random binary"),
        Bad("nul-bytes.md", b"---\nstep: nul-bytes\n---\n\x00\x00\x00", ("nul", "binary", "utf-8"), "NUL bytes"),
        Bad("latin1.md", "---\nstep: latin1\ntitle: caf\xe9\n---\n".encode("latin-1"), ("utf-8",), "not UTF-8"),
        Bad("empty.md", b"", ("frontmatter",), "an empty file"),
        Bad(
            "no-frontmatter.md",
            b"just some notes\n" + json.dumps(touch("no-front")).encode(),
            ("frontmatter",),
            "no frontmatter",
        ),
        Bad("not-a-mapping.md", b"---\n- a\n- b\n---\n", ("mapping",), "frontmatter that is a list"),
        Bad(
            "wrong-id.md",
            _front({"step": "someone-else", "run": touch("wrong-id")}),
            ("does not match",),
            "id differs from the file name",
        ),
        Bad("a/dup-id.md", _front({"step": "dup-id", "run": touch("dup-a")}), ("duplicate",), "duplicate id (1 of 2)"),
        Bad("b/dup-id.md", _front({"step": "dup-id", "run": touch("dup-b")}), ("duplicate",), "duplicate id (2 of 2)"),
        Bad(
            "cycle-a.md",
            _front({"step": "cycle-a", "depends_on": ["cycle-b"], "run": touch("cycle-a")}),
            ("cycle",),
            "a dependency cycle (1 of 2)",
        ),
        Bad(
            "cycle-b.md",
            _front({"step": "cycle-b", "depends_on": ["cycle-a"], "run": touch("cycle-b")}),
            ("cycle",),
            "a dependency cycle (2 of 2)",
        ),
        Bad(
            "self-loop.md",
            _front({"step": "self-loop", "depends_on": ["self-loop"], "run": touch("self")}),
            ("itself", "cycle"),
            "depends on itself",
        ),
        Bad(
            "unknown-dep.md",
            _front({"step": "unknown-dep", "depends_on": ["ghost-step"], "run": touch("unknown")}),
            ("unknown dependency",),
            "an unknown dependency",
        ),
        Bad(
            "dep-traversal.md",
            _front({"step": "dep-traversal", "depends_on": ["../../etc/passwd"], "run": touch("dep-trav")}),
            ("must match", "..", "step id"),
            "`..` path as a dependency",
        ),
        Bad(
            "abs-id.md",
            _front({"step": "/etc/passwd", "run": touch("abs-id")}),
            ("does not match", "must match"),
            "an absolute path as the id",
        ),
        Bad(
            "dep-absolute.md",
            _front({"step": "dep-absolute", "depends_on": ["/etc/passwd"], "run": touch("dep-abs")}),
            ("must match", "step id"),
            "an absolute path as a dependency",
        ),
        Bad("a..b.md", _front({"step": "a..b", "run": touch("dotdot")}), ("..",), "`..` inside an id"),
        Bad(
            "Upper-Case.md",
            _front({"step": "Upper-Case", "run": touch("upper")}),
            ("must match", "not allowed"),
            "an id outside [a-z0-9._-]",
        ),
        Bad(
            "evil;touch x.md",
            _front({"step": "evil;touch x", "run": touch("semicolon")}),
            ("must match", "not allowed"),
            "shell metacharacters in the id",
        ),
        Bad(
            "x" * 70 + ".md",
            _front({"step": "x" * 70, "run": touch("long")}),
            ("must match", "not allowed"),
            "a 70-character id",
        ),
        Bad(
            "run-string.md",
            _front({"step": "run-string", "run": f"touch {c}/run-string"}),
            ("run must",),
            "run: a shell string, not an argv",
        ),
        Bad(
            "bad-status.md",
            _front({"step": "bad-status", "status": "running", "run": touch("status")}),
            ("status",),
            "an unknown status",
        ),
        Bad("link-passwd.md", ("symlink", "/etc/passwd"), ("symlink",), "a symlink to /etc/passwd"),
        Bad("link-sibling.md", ("symlink", "good-1.md"), ("symlink",), "a symlink to a valid step"),
        Bad("link-dir.md", ("symlink", "../.."), ("symlink",), "a symlink to a folder"),
        Bad(
            "title-escapes.md",
            _front({"step": "title-escapes", "title": "\x1b]0;owned\x07\x1b[2Jline\nbreak", "run": touch("title-esc")}),
            ("control characters",),
            "terminal escapes and a line break in the title",
        ),
    ]
    title = f"$(touch {c}/title-subst); `touch {c}/title-tick` | touch {c}/title-pipe && rm -rf {c}; touch {c}/title-nl"
    args = ["$(touch " + c + "/arg-subst)", "; touch " + c + "/arg-semi", "{step}", "a\nb", "'\"", "*"]
    valid = {
        "good-1.md": _front({"step": "good-1", "run": ["sh", "-c", log_run + "; echo one > good-1.txt"]}),
        "good-2.md": _front(
            {"step": "good-2", "depends_on": ["good-1"], "run": ["sh", "-c", log_run + "; echo two > good-2.txt"]}
        ),
        "good-3.md": _front(
            {"step": "good-3", "depends_on": ["good-1"], "run": ["sh", "-c", log_run + "; echo three > good-3.txt"]}
        ),
        "good-4.md": _front(
            {
                "step": "good-4",
                "depends_on": ["good-2", "good-3"],
                "run": ["sh", "-c", log_run + "; echo four > good-4.txt"],
            }
        ),
        "meta-title.md": _front(
            {
                "step": "meta-title",
                "title": title,
                "run": ["sh", "-c", log_run + '; printf "%s" "$1" > title.txt', "sh", "{title}"],
            }
        ),
        "meta-args.md": _front(
            {"step": "meta-args", "run": ["sh", "-c", log_run + '; printf "[%s]\\n" "$@" > args.txt', "sh", *args]}
        ),
        "sneaky-check.md": _front(
            {"step": "sneaky-check", "max_attempts": 1, "run": ["sh", "-c", log_run + "; echo hi > sneaky.txt"]},
            "#### Automated Verification:\n"
            "- [ ] exists: `test -f sneaky.txt`\n"
            f"- [ ] sneaky: `echo $(touch {c}/check-subst)`\n"
            "- [ ] piped: `cat sneaky.txt | sh`\n",
        ),
        "after-bad.md": _front(
            {"step": "after-bad", "depends_on": ["bad-yaml"], "run": ["sh", "-c", log_run + f"; touch {c}/after-bad"]}
        ),
    }
    expect = {
        "good-1": "done",
        "good-2": "done",
        "good-3": "done",
        "good-4": "done",
        "meta-title": "done",
        "meta-args": "done",
        "sneaky-check": "failed",
        "after-bad": "blocked",
    }
    literal = {"title.txt": title, "args.txt": "".join(f"[{a.replace('{step}', 'meta-args')}]\n" for a in args)}
    tricky = [
        Bad(
            "req-absolute.md",
            _front(
                {
                    "step": "req-absolute",
                    "max_attempts": 1,
                    "required_outputs": ["/etc/passwd"],
                    "run": ["sh", "-c", log_run],
                }
            ),
            ("required_outputs", "absolute", "inside"),
            "an absolute path in required_outputs",
        ),
        Bad(
            "req-dotdot.md",
            _front(
                {
                    "step": "req-dotdot",
                    "max_attempts": 1,
                    "required_outputs": ["../../outside.txt"],
                    "run": ["sh", "-c", log_run],
                }
            ),
            ("required_outputs", "..", "inside"),
            "a `..` path in required_outputs",
        ),
    ]
    return Corpus(
        invalid=invalid,
        valid={f"plans/steps/{k}": v for k, v in valid.items()},
        expect=expect,
        literal=literal,
        tricky_outputs=tricky,
    )


def files_of(bads: list[Bad]) -> dict[str, bytes | tuple[str, str]]:
    return {f"plans/steps/{b.path}": b.content for b in bads}
