"""Step files: Markdown with YAML frontmatter, read safely and edited line by line.

Edits never re-serialise the whole frontmatter: only the lines of the keys that
change are replaced (or appended), so comments, key order, unknown keys and the
body survive byte for byte and `git log -p` shows exactly what a transition did.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from yaml import ScalarNode
from yaml.resolver import Resolver

from runner.core.ids import step_id_problem
from runner.core.limits import MAX_STEP_BYTES
from runner.core.model import Status, Step, format_time
from runner.core.stepschema import key_problems, shown


def load_yaml(text: str, line_offset: int = 0) -> Any:
    """Parse YAML safely (runner.core.yamlsafe, imported only when a file must be parsed:
    a warm parse cache never pays for it). Raises YamlError, a ValueError, whose lines are the
    file's when `text` starts `line_offset` lines into it."""
    from runner.core import yamlsafe

    return yamlsafe.load(text, line_offset)


FRONTMATTER_LINE = 1  # the frontmatter starts on the file's second line, after its opening `---`


def split_frontmatter(text: str) -> tuple[str, str] | None:
    """(frontmatter, rest) where rest starts at the closing '---' line, or None."""
    if not text.startswith("---"):
        return None
    first_nl = text.find("\n")
    if first_nl < 0 or text[:first_nl].rstrip() != "---":
        return None
    match = re.compile(r"^(---|\.\.\.)[ \t]*\r?$", re.MULTILINE).search(text, first_nl + 1)
    if not match:
        return None
    return text[first_nl + 1 : match.start()], text[match.start() :]


def body_of(text: str) -> str:
    parts = split_frontmatter(text)
    if parts is None:
        return text
    rest = parts[1]
    nl = rest.find("\n")
    return "" if nl < 0 else rest[nl + 1 :]


def _normalise(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, dict):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def symlinked_step(path: str) -> Step:
    """What a symlink at a step file's path is: refused, never followed (its target is outside
    the queue's history). Every reader of a tree's step files asks this."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".md")
    return Step(id=stem, path=path, meta={}, text="", problems=["is a symlink (step files must be regular files)"])


def parse_step(path: str, data: bytes) -> Step:
    """Read one step file. Never raises: problems are listed on the Step."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".md")
    step = Step(id=stem, path=path, meta={}, text="")
    if len(data) > MAX_STEP_BYTES:
        step.problems.append(f"file is {len(data)} bytes, over the 1 MiB limit")
        return step
    try:
        step.text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        step.problems.append(f"not UTF-8 ({exc.reason} at byte {exc.start})")
        return step
    if "\x00" in step.text:
        step.problems.append("contains NUL bytes (binary file?)")
        return step
    parts = split_frontmatter(step.text)
    if parts is None:
        step.problems.append("no YAML frontmatter (the file must start with a '---' line and close it with another)")
        return step
    try:
        meta = load_yaml(parts[0], FRONTMATTER_LINE)
    except ValueError as exc:
        step.problems.append(f"bad YAML: {' '.join(str(exc).split())}")
        return step
    except RecursionError:
        step.problems.append("bad YAML: nested too deeply")
        return step
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        step.problems.append("frontmatter is not a mapping of keys to values")
        return step
    step.meta = _normalise(meta)
    step.problems.extend(schema_problems(step, stem))
    return step


def schema_problems(step: Step, stem: str) -> list[str]:
    """Every problem of a parsed frontmatter: its id against the file name, each key against
    the step schema (runner.core.stepschema), and whether runner can edit it line by line."""
    meta = step.meta
    problems: list[str] = []
    if problem := step_id_problem(stem):
        problems.append(f"file name: {problem}")
    declared = meta.get("step", meta.get("id"))
    if declared is not None and str(declared) != stem:
        problems.append(f"step id {shown(declared)} does not match the file name {stem!r}")
    problems += key_problems(meta)
    if meta.get("status") == Status.CLAIMED and not meta.get("assignee"):
        problems.append("a claimed step names its assignee")
    if meta.get("agent") == "self" and meta.get("run") is not None:
        problems.append(
            "agent: self and run: together: no worker runs a step an agent you run yourself takes, so its "
            "run: would never run (remove one)"
        )
    if not problems and (problem := _edit_problem(step.text, meta)):
        problems.append(problem)
    return problems


def _edit_problem(text: str, meta: dict[str, Any]) -> str | None:
    """A transition rewrites whole `key: value` lines; a frontmatter where some key has no
    line of its own (flow style, quoted or repeated keys) cannot be edited safely, so it is
    invalid and never claimed."""
    parts = split_frontmatter(text)
    lines = parts[0].splitlines(keepends=True) if parts else []
    key_lines = [m.group(1) for line in lines if (m := _KEY_LINE_RE.match(line))]
    if len(key_lines) != len(set(key_lines)) or set(key_lines) != set(meta):
        return (
            "runner cannot edit this frontmatter line by line (write one `key: value` per line, block style, each "
            "key once)"
        )
    return None


# --- writing ----------------------------------------------------------------

_PLAIN_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./@+-]*(?:[ ][A-Za-z0-9_./@+()-]+)*")
# Quoted before YAML's own rules were asked (below), and still quoted so that a hook and a worker
# of the last version write the same bytes for them (the hook compares its replay with the push).
_YAML_SPECIAL = {"null", "~", "true", "false", "yes", "no", "on", "off", "y", "n"}
_NUMBER_RE = re.compile(r"[-+]?[\d._]+(e[-+]?\d+)?", re.IGNORECASE)
_DATE_RE = re.compile(r"\d{4}-\d\d-\d\d")
_RESOLVER = Resolver()


def _reads_as_text(text: str) -> bool:
    """Whether YAML reads this plain scalar back as the same text: the loader's own rules decide
    (0x1f, 0b101, 2024-1-5, .inf, yes are numbers, dates, floats and booleans to YAML 1.1)."""
    return bool(_RESOLVER.resolve(ScalarNode, text, (True, False)) == "tag:yaml.org,2002:str")


def dump_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, datetime):
        return format_time(value)
    text = str(value)
    if (
        _PLAIN_RE.fullmatch(text)
        and text.lower() not in _YAML_SPECIAL
        and not _NUMBER_RE.fullmatch(text)
        and not _DATE_RE.match(text)
        and _reads_as_text(text)
    ):
        return text
    return json.dumps(text, ensure_ascii=False)


def dump_flow(value: Any) -> str:
    """One-line YAML for a value (flow style; strings quoted when needed). A table's keys are
    written sorted, so the file an event writes never depends on the order a dict was built in
    (the hook replays events from JSON trailers, whose keys are sorted too)."""
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(
                f"{dump_scalar(str(k))}: {dump_flow(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
            )
            + "}"
        )
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(dump_flow(v) for v in value) + "]"
    return dump_scalar(value)


_KEY_LINE_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)[ \t]*:(?:[ \t]|$)")


def _key_spans(lines: list[str]) -> dict[str, tuple[int, int]]:
    """Top-level key -> (first line, end line) within frontmatter lines."""
    spans: dict[str, tuple[int, int]] = {}
    current, start = None, 0
    for index, line in enumerate(lines):
        continuation = line[:1] in (" ", "\t", "-") or line.strip() == ""
        if continuation and current is not None and not line.startswith("---"):
            continue
        if current is not None:
            spans[current] = (start, index)
            current = None
        match = _KEY_LINE_RE.match(line)
        if match:
            current, start = match.group(1), index
    if current is not None:
        spans[current] = (start, len(lines))
    # A trailing blank line belongs to no key: keep it where it is.
    for key, (first, end) in list(spans.items()):
        while end > first + 1 and lines[end - 1].strip() == "":
            end -= 1
        spans[key] = (first, end)
    return spans


def set_fields(text: str, updates: dict[str, Any]) -> str:
    """Set top-level frontmatter keys, touching only their own lines.

    A key set to None is written as `null` when it exists and left out when not.
    """
    parts = split_frontmatter(text)
    if parts is None:
        raise ValueError("no frontmatter to edit")
    front, rest = parts
    newline = "\r\n" if front.endswith("\r\n") else "\n"
    lines = front.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += newline
    spans = _key_spans(lines)
    replacements: list[tuple[int, int, str]] = []
    appended: list[str] = []
    for key, value in updates.items():
        line = f"{key}: {dump_flow(value)}{newline}"
        if key in spans:
            first, end = spans[key]
            if "".join(lines[first:end]) != line and not _same_value(lines[first:end], value):
                replacements.append((first, end, line))
        elif value is not None:
            appended.append(line)
    for first, end, line in sorted(replacements, reverse=True):
        lines[first:end] = [line]
    return text[: len(text) - len(front) - len(rest)] + "".join(lines) + "".join(appended) + rest


def _same_value(old_lines: list[str], value: Any) -> bool:
    try:
        parsed = load_yaml("".join(old_lines))
    except (ValueError, RecursionError):
        return False
    if not isinstance(parsed, dict) or len(parsed) != 1:
        return False
    return _normalise(next(iter(parsed.values()))) == _normalise(value)


def render_new_step(step_id: str, title: str, extra: dict[str, Any], body: str) -> str:
    lines = [f"step: {dump_scalar(step_id)}", f"title: {dump_scalar(title)}"]
    lines += [f"{key}: {dump_flow(value)}" for key, value in extra.items()]
    return "---\n" + "\n".join(lines) + "\n---\n" + body


# --- checklists ---------------------------------------------------------------

_HEADING_RE = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM_RE = re.compile(r"^(\s*[-*+]\s+\[)([ xX])(\]\s+)(.*)$")
_COMMAND_RE = re.compile(r"`([^`]+)`")


def checklist(text: str, section: str) -> list[tuple[int, bool, str, str | None]]:
    """Items under a heading containing `section`: (line number, ticked, label, command)."""
    items = []
    inside = False
    for number, line in enumerate(body_of(text).splitlines()):
        heading = _HEADING_RE.match(line)
        if heading:
            inside = section.lower() in heading.group(2).lower()
            continue
        if inside and (item := _ITEM_RE.match(line)):
            commands = _COMMAND_RE.findall(item.group(4))
            items.append((number, item.group(2) != " ", item.group(4), commands[-1] if commands else None))
    return items


def automated_checks(text: str) -> list[str]:
    return [cmd for _, _, _, cmd in checklist(text, "Automated Verification") if cmd]


def manual_checks(text: str) -> list[str]:
    return [label for _, ticked, label, _ in checklist(text, "Manual Verification") if not ticked]


TICKED_SECTIONS = ("Automated Verification", "Automated QA")


def tick_checks(text: str, passed_commands: set[str]) -> str:
    """Tick the Automated Verification and QA boxes whose command passed (an item with no
    command: whose label passed, a QA scenario judged by [roles.qa]); nothing else."""
    body = body_of(text)
    head = text[: len(text) - len(body)]
    lines = body.splitlines(keepends=True)
    items = [item for section in TICKED_SECTIONS for item in checklist(text, section)]
    for number, ticked, label, command in items:
        if not ticked and (command if command is not None else label) in passed_commands:
            lines[number] = (
                _ITEM_RE.sub(lambda m: f"{m.group(1)}x{m.group(3)}{m.group(4)}", lines[number].rstrip("\r\n"), count=1)
                + lines[number][len(lines[number].rstrip("\r\n")) :]
            )
    return head + "".join(lines)
