"""Agent presets: runner.toml's [harness] and [roles.*] commands for the coding-agent CLIs
people use, each in its non-interactive mode, with a comment on every flag.

    preset_tables("codex")            # the commented TOML of those tables
    apply_preset(toml_text, "codex")  # replace only those tables in an existing runner.toml

Each flag here was read from the CLI's own --help; `missing_from_help` checks that it still
is there (tests/test_agents.py installs the real CLIs and runs it, .ci/agents in CI).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field

from runner.agents.tomltables import replace_tables

# The tables a preset writes, in order, and the role each one runs.
TABLES = {
    "harness": "implement",
    "roles.orient": "orient",
    "roles.verify": "verify",
    "roles.review": "review",
    "roles.sweep": "sweep",
    "roles.orchestrate": "orchestrate",
    "roles.resolve": "resolve",
    "roles.qa": "qa",
}
ROLE_ABOUT = {
    "implement": "implement: makes the step's change in its worktree; may end with STEP_BLOCKED:/STEP_FAILED:",
    "orient": "orient: read-only look before implementing; prints `deviation: none` or `deviation: major: <why>`",
    "verify": "verify: judges the change; its answer is the JSON verdict {pass, score, reasons, next_hint}",
    "review": "review: independent, read-only; each critical finding on a line starting with CRITICAL",
    "sweep": "sweep: read-only; lists the edge cases the change misses (into the handoff)",
    "orchestrate": "orchestrate: after the verifier; may add or edit steps through `runner add ...`, never approves",
    "resolve": "resolve: when the integration branch moved and the record's merge conflicts, resolves the conflicts "
    "left in the files (implement's access)",
    "qa": "qa: walks through an Automated QA scenario that has no command (a browser, screenshots); answers with the "
    "verifier's JSON verdict",
}


@dataclass(frozen=True)
class Arg:
    """Argv words and what they do. `choice`: the last word is one of the flag's listed choices
    and must appear in --help too."""

    words: tuple[str, ...]
    comment: str
    choice: bool = False


def a(*words: str, c: str, choice: bool = False) -> Arg:
    return Arg(tuple(words), c, choice)


@dataclass(frozen=True)
class Preset:
    name: str
    about: str
    package: str  # "npm:<name>" or "pypi:<name>"
    program: tuple[str, ...]  # the executable and its non-interactive subcommand
    program_comment: str
    output: str = "text"  # how runner reads what it prints (runner.core.agentoutput)
    roles: dict[str, list[Arg]] = field(default_factory=dict)  # role -> args after `program`
    notes: dict[str, str] = field(default_factory=dict)  # role -> why it has no command


END = a("--", c="end of options: the prompt follows even if it starts with '-'")

# ---- claude: Claude Code, `claude -p` ----------------------------------------------------
_CLAUDE = [
    a(
        "--output-format",
        "json",
        c="one JSON result on stdout: the answer, tokens, cost, and why it stopped",
        choice=True,
    ),
    a("--no-session-persistence", c="save no session to disk (print mode only)"),
]
_CLAUDE_READ_ONLY = a("--tools", "Read,Grep,Glob", c="read-only: the only tools in this run (no edits, no shell)")
CLAUDE = Preset(
    "claude",
    "Claude Code in print mode",
    "npm:@anthropic-ai/claude-code",
    ("claude", "-p"),
    "print mode: run the prompt once, print the answer, exit (non-interactive)",
    output="claude-json",
    roles={
        **{  # resolve edits files as implement does, with its own prompt
            role: [
                *_CLAUDE,
                a("--permission-mode", "acceptEdits", c="edit files without asking", choice=True),
                a(
                    "--allowedTools",
                    "Bash",
                    c='shell commands without asking (tests, builds); narrow it, e.g. "Bash(pytest *)"',
                ),
                END,
                a("{prompt}", c="the role's prompt: its instructions + root.md + NOTES.md + the step + feedback"),
            ]
            for role in ("implement", "resolve")
        },
        **{
            role: [*_CLAUDE, _CLAUDE_READ_ONLY, END, a("{prompt}", c="the role's prompt")]
            for role in ("orient", "verify", "review", "sweep")
        },
        "qa": [
            *_CLAUDE,
            a("--tools", "Bash,Read,Grep,Glob", c="runs and reads, no file edits"),
            a("--allowedTools", "Bash", c="shell commands without asking"),
            END,
            a("{prompt}", c="the role's prompt, with the scenario"),
        ],
        "orchestrate": [
            *_CLAUDE,
            a("--tools", "Bash,Read,Grep,Glob", c="the tools in this run: no file edits"),
            a("--allowedTools", "Bash(runner add *)", c="the only shell commands it may run: add a step,"),
            a("Bash(runner status*)", "Bash(runner show *)", c="look at the plan,"),
            a("Bash(runner graph*)", "Bash(runner validate*)", c="and check it"),
            a("--disallowedTools", "Bash(runner approve*)", c="never approve, whatever the prompt says"),
            END,
            a("{prompt}", c="the role's prompt, with {verdict}, {current_task} and {current_phase} filled in"),
        ],
    },
)


# ---- codex: OpenAI Codex CLI, `codex exec` ----------------------------------------------
def _codex(sandbox: str, why: str) -> list[Arg]:
    return [
        a("--cd", "{cwd}", c="working root: the step's worktree"),
        a("--sandbox", sandbox, c=why, choice=True),
        a("--ephemeral", c="keep no session files"),
        a("--color", "never", c="plain output", choice=True),
        a("--json", c="JSONL events on stdout: runner reads the tokens and why it stopped from them"),
        a("--output-last-message", "{output}", c="write the final answer to {output}; runner reads it from there"),
        END,
        a("{prompt}", c="the role's prompt: its instructions + root.md + NOTES.md + the step + feedback"),
    ]


_CODEX_READ_ONLY = "read-only sandbox: commands may read, never write"
CODEX = Preset(
    "codex",
    "OpenAI Codex CLI, non-interactive",
    "npm:@openai/codex",
    ("codex", "exec"),
    "exec: run non-interactively, print the answer, exit",
    output="codex-jsonl",
    roles={
        **{
            role: _codex("workspace-write", "may write inside the worktree only, no network")
            for role in ("implement", "resolve", "qa")
        },
        **{role: _codex("read-only", _CODEX_READ_ONLY) for role in ("orient", "verify", "review", "sweep")},
        "orchestrate": _codex(
            "danger-full-access", "no sandbox: `runner add` writes the repository's git folder and pushes to the remote"
        ),
    },
)


# ---- gemini: Gemini CLI, headless `gemini --prompt` --------------------------------------
def _gemini(mode: str, why: str) -> list[Arg]:
    return [
        a("--approval-mode", mode, c=why, choice=True),
        a("--skip-trust", c="trust the step's new worktree folder for this run"),
        a(
            "--output-format",
            "json",
            c="one JSON object on stdout: the answer and the tokens of each model",
            choice=True,
        ),
        a(
            "--prompt",
            "{prompt}",
            c="headless mode with the role's prompt (instructions + root.md + NOTES.md + step + feedback)",
        ),
    ]


GEMINI = Preset(
    "gemini",
    "Gemini CLI in headless mode",
    "npm:@google/gemini-cli",
    ("gemini",),
    "Gemini CLI; --prompt below makes it non-interactive",
    output="gemini-json",
    roles={
        **{
            role: _gemini("yolo", "run every tool without asking (headless mode cannot ask)")
            for role in ("implement", "resolve", "qa")
        },
        **{role: _gemini("plan", "plan mode: read-only") for role in ("orient", "verify", "review", "sweep")},
        "orchestrate": _gemini("yolo", "may run `runner add` without asking"),
    },
)


# ---- opencode: `opencode run` --------------------------------------------------------------
def _opencode(*access: Arg) -> list[Arg]:
    return [
        a("--dir", "{cwd}", c="run in the step's worktree"),
        a("--format", "json", c="JSON events on stdout: the answer, and each step's tokens and cost", choice=True),
        *access,
        END,
        a("{prompt}", c="the role's prompt: its instructions + root.md + NOTES.md + the step + feedback"),
    ]


_OPENCODE_AUTO = a(
    "--auto", c="approve permission requests not explicitly denied (a headless run rejects them otherwise)"
)
OPENCODE = Preset(
    "opencode",
    "opencode, non-interactive",
    "npm:opencode-ai",
    ("opencode", "run"),
    "run: send one message, print the answer, exit",
    output="opencode-jsonl",
    roles={
        **{role: _opencode(_OPENCODE_AUTO) for role in ("implement", "resolve", "qa")},
        **{
            role: _opencode(a("--agent", "plan", c="the built-in plan agent: read-only, file edits denied"))
            for role in ("orient", "verify", "review", "sweep")
        },
        "orchestrate": _opencode(_OPENCODE_AUTO),
    },
)

# ---- aider: `aider --message-file` ---------------------------------------------------------
_AIDER = [
    a("--message-file", "{prompt_file}", c="send the role's prompt file as one message, answer, exit"),
    a("--yes-always", c="answer yes to every question (no one is there to ask)"),
    a("--no-auto-commits", c="runner commits the worktree itself"),
    a("--no-dirty-commits", c="nor commit what was there before"),
    a("--no-gitignore", c="do not add .aider* to .gitignore (it would land in the step's change)"),
    a("--chat-history-file", "/dev/null", c="keep no chat history file in the worktree"),
    a("--input-history-file", "/dev/null", c="nor an input history file"),
    a("--no-pretty", c="plain output, no colours"),
    a("--no-stream", c="print the answer whole"),
    a("--no-check-update", c="no version check at start"),
    a("--no-analytics", c="send no analytics"),
]
AIDER = Preset(
    "aider",
    "aider, one message per run",
    "pypi:aider-chat",
    ("aider",),
    "aider in the worktree (runner's cwd for every command)",
    output="aider",
    roles={
        **{role: list(_AIDER) for role in ("implement", "resolve")},
        **{
            role: [
                *_AIDER,
                a("--chat-mode", "ask", c="ask mode: answers, never edits"),
                a("--dry-run", c="and modifies no file"),
            ]
            for role in ("orient", "verify", "review", "sweep")
        },
    },
    notes={
        "orchestrate": "aider does not run `runner add` unattended; leave empty or use another CLI here",
        "qa": "aider does not drive a program or a browser unattended; leave empty (scenarios stay not run) or use "
        "another CLI",
    },
)

NONE = Preset("none", "no agent: fill in your own commands", "", (), "", notes={})

PRESETS = {p.name: p for p in (CLAUDE, CODEX, OPENCODE, GEMINI, AIDER, NONE)}
PRESET_NAMES = tuple(PRESETS)


def get(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown agent preset {name!r} (one of: {', '.join(PRESET_NAMES)})")
    return PRESETS[name]


def argv(name: str, role: str) -> list[str]:
    """The command a preset gives a role ([] when it gives none)."""
    preset = get(name)
    args = preset.roles.get(role)
    if args is None:
        return []
    return [*preset.program, *(w for arg in args for w in arg.words)]


# ---- rendering --------------------------------------------------------------------------------
def _q(word: str) -> str:
    return json.dumps(word, ensure_ascii=False)  # a TOML basic string


def _command_lines(preset: Preset, role: str) -> list[str]:
    args = preset.roles.get(role)
    if args is None:
        note = (
            preset.notes.get(role)
            or 'no agent: write this role\'s argv, e.g. ["my-agent", "--prompt-file", "{prompt_file}"]'
        )
        return [f"# {note}", "command = []"]
    rows = [(", ".join(_q(w) for w in preset.program) + ",", preset.program_comment)]
    rows += [(", ".join(_q(w) for w in arg.words) + ",", arg.comment) for arg in args]
    width = max(len(text) for text, _ in rows)
    return ["command = [", *(f"    {text:<{width}}  # {comment}" for text, comment in rows), "]"]


def preset_tables(name: str, min_files: int = 5, boundaries: list[str] | tuple[str, ...] = ()) -> str:
    """Commented TOML of [harness] and the [roles.*] tables for one preset."""
    preset = get(name)
    install = {"npm": "npm install -g {}", "pypi": "pipx install {}"}
    kind, _, package = preset.package.partition(":")
    lines = [
        f"# Agent preset: {preset.name} ({preset.about}). `runner init --agent NAME` rewrites",
        "# [harness] and the [roles.*] tables below and leaves the rest of this file alone.",
    ]
    if package:
        lines.append(f"# Install: {install[kind].format(package)}. Every command runs in the step's worktree.")
    lines += [
        "# Tokens: {prompt_file} {prompt} {step_file} {step} {title} {attempt} {cwd} {worker} {feedback}",
        "# {output} {diff_file} {verdict} {findings} {artifact} {notes_file} {current_task} {current_phase}",
    ]
    for table, role in TABLES.items():
        if table != "harness":
            lines.append("")
        lines += [f"[{table}]", f"# {ROLE_ABOUT[role]}", *_command_lines(preset, role)]
        if role in preset.roles and preset.output != "text":
            lines.append(
                f'output = "{preset.output}"'.ljust(24) + "# runner reads the answer, tokens, cost and limits "
                "from this mode"
            )
        if table == "roles.review":
            lines += [
                f"min_files = {int(min_files)}".ljust(24) + "# review when the change touches at least this many files",
                f"boundaries = {json.dumps(list(boundaries))}".ljust(24) + "# ...or any path under one of these (e.g. "
                '"migrations/")',
            ]
    return "\n".join(lines) + "\n"


def is_preset_table(name: str) -> bool:
    return name in ("harness", "roles") or name.startswith(("harness.", "roles."))


def with_agent_tables(toml_text: str, tables: str) -> str:
    """runner.toml with its [harness] and [roles.*] tables replaced by `tables` (TOML text);
    every other byte kept."""
    return replace_tables(toml_text, tables, is_preset_table)


def apply_preset(toml_text: str, name: str) -> str:
    """runner.toml with [harness] and [roles.*] set to the preset's; every other byte kept.
    The review role's min_files and boundaries carry over when the file sets them."""
    review = {}
    try:
        review = tomllib.loads(toml_text).get("roles", {}).get("review", {})
    except (tomllib.TOMLDecodeError, AttributeError):
        pass
    kwargs = {}
    if isinstance(review, dict):
        if isinstance(review.get("min_files"), int):
            kwargs["min_files"] = review["min_files"]
        if isinstance(review.get("boundaries"), list) and all(isinstance(b, str) for b in review["boundaries"]):
            kwargs["boundaries"] = review["boundaries"]
    return with_agent_tables(toml_text, preset_tables(name, **kwargs))


# ---- checking a preset against the CLI's own --help ------------------------------------------
def help_checks(name: str) -> list[tuple[list[str], list[str]]]:
    """[(help argv, words that must appear in that help)] for a preset: every flag it uses and
    every choice value it picks. The help argv is the program and its subcommand + --help."""
    preset = get(name)
    if not preset.program:
        return []
    flags = [preset.program[1]] if len(preset.program) > 1 and preset.program[1].startswith("-") else []
    subcommand = [w for w in preset.program[1:] if not w.startswith("-")]
    for args in preset.roles.values():
        for arg in args:
            flags += [w.split("=", 1)[0] for w in arg.words if w.startswith("-") and w != "--"]
            if arg.choice:
                flags.append(arg.words[-1])
    return [([preset.program[0], *subcommand, "--help"], list(dict.fromkeys(flags)))]


def missing_from_help(name: str, help_text: Callable[[list[str]], str]) -> list[str]:
    """Flags (and choice values) of a preset that its CLI's --help does not mention.
    `help_text(argv)` runs the CLI (argv[0] is its name) and returns what it printed."""
    missing = []
    for help_argv, words in help_checks(name):
        text = help_text(help_argv)
        for word in words:
            if not re.search(r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", text):
                missing.append(f"{' '.join(help_argv)}: {word}")
    return missing
