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

from runner.core.limits import MAX_STEP_BYTES
from runner.core.model import (
    STORED_STATUSES,
    Step,
    format_time,
    parse_duration,
    parse_time,
)
from runner.core.config import step_override_problems
from runner.core.ids import step_id_problem, worker_id_problem


def load_yaml(text: str) -> Any:
    """Parse YAML safely (runner.core.yamlsafe, imported only when a file must be parsed:
    a warm parse cache never pays for it). Raises YamlError, a ValueError."""
    from runner.core import yamlsafe

    return yamlsafe.load(text)


def split_frontmatter(text: str) -> tuple[str, str] | None:
    """(frontmatter, rest) where rest starts at the closing '---' line, or None."""
    if not text.startswith("---"):
        return None
    first_nl = text.find("\n")
    if first_nl < 0 or text[:first_nl].rstrip() != "---":
        return None
    match = re.compile(r"^(---|\.\.\.)[ \t]*\r?$", re.M).search(text, first_nl + 1)
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
        meta = load_yaml(parts[0])
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


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def schema_problems(step: Step, stem: str) -> list[str]:
    meta = step.meta
    problems: list[str] = []
    if problem := step_id_problem(stem):
        problems.append(f"file name: {problem}")
    declared = meta.get("step", meta.get("id"))
    if declared is not None and str(declared) != stem:
        problems.append(f"step id {declared!r} does not match the file name {stem!r}")
    deps = meta.get("depends_on", [])
    if deps is not None and not (isinstance(deps, str) or _is_str_list(deps)):
        problems.append("depends_on must be a list of step ids")
    elif deps:
        for dep in [deps] if isinstance(deps, str) else deps:
            if problem := step_id_problem(dep):
                problems.append(f"depends_on: {problem}")
    for key, minimum in (("priority", None), ("max_attempts", 1)):
        value = meta.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            problems.append(f"{key} must be an integer, not {value!r}")
        elif minimum is not None and value is not None and value < minimum:
            problems.append(f"{key} must be at least {minimum}")
    tags = meta.get("tags")
    if tags is not None and not (isinstance(tags, str) or _is_str_list(tags)):
        problems.append("tags must be a list of strings")
    run = meta.get("run")
    if run is not None and not (_is_str_list(run) and run):
        problems.append("run must be a non-empty list of strings (an argv; no shell is used)")
    outputs = meta.get("required_outputs")
    if outputs is not None and not _is_str_list(outputs):
        problems.append("required_outputs must be a list of paths")
    elif outputs:
        for output in outputs:
            if output.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", output) or ".." in re.split(r"[\\/]", output):
                problems.append(f"required_outputs: {output!r} must be a relative path inside the worktree")
    if (value := meta.get("timeout")) is not None and not (isinstance(value, str) and value.strip().lower() == "none"):
        problems.append(_duration_problem("timeout", value))
    if (title := meta.get("title", meta.get("name"))) is not None and not isinstance(title, (str, int, float)):
        problems.append("title must be text")
    if (value := meta.get("requires_approval")) is not None and not isinstance(value, bool):
        problems.append("requires_approval must be true or false")
    problems += managed_problems(meta)
    problems += step_override_problems(meta)
    problems = [p for p in problems if p]
    if not problems and (problem := _edit_problem(step.text, meta)):
        problems.append(problem)
    return problems


def _duration_problem(key: str, value: Any) -> str | None:
    try:
        parse_duration(value)
    except ValueError as exc:
        return f"{key}: {exc}"
    return None


def _time_problem(key: str, value: Any) -> str | None:
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?", value) and parse_time(value):
        return None
    return f"{key} must be a time like 2026-11-29T08:00:00Z, not {value!r}"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def managed_problems(meta: dict[str, Any]) -> list[str]:
    """The keys runner writes must have the types runner writes: a worker can then trust them."""
    problems: list[Any] = []
    status = meta.get("status", "ready")
    if status not in STORED_STATUSES:
        problems.append(f"status {status!r} is not one of {', '.join(STORED_STATUSES)}")
    checks: dict[str, tuple[Any, str]] = {
        "attempt": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a whole number, 0 or more"),
        "failures": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a whole number, 0 or more"),
        "assignee": (lambda v: worker_id_problem(v) is None, "a worker id"),
        "holder": (lambda v: isinstance(v, dict), "a table (host, pid, started, incarnation)"),
        "last_error": (lambda v: isinstance(v, str), "text"),
        "last_updated_by": (lambda v: isinstance(v, str), "text"),
        "review": (lambda v: v in ("result", "deviation", "blocked"), "result, deviation or blocked"),
        "approved": (lambda v: isinstance(v, bool), "true or false"),
        "result": (lambda v: isinstance(v, dict), "a table"),
        "resolve": (lambda v: v is True, "true (an approved result waits for a worker to bring it onto the new tip)"),
        "last_verdict": (lambda v: isinstance(v, dict), "a table"),
        "scores": (lambda v: isinstance(v, list) and all(_is_number(x) for x in v), "a list of numbers"),
        "spent": (lambda v: _is_number(v) and v >= 0, "a number of seconds"),
    }
    for key, (ok, what) in checks.items():
        if meta.get(key) is not None and not ok(meta[key]):
            problems.append(f"{key} must be {what}, not {meta[key]!r}")
    for key in ("claimed_at", "not_before", "last_updated"):
        if meta.get(key) is not None:
            problems.append(_time_problem(key, meta[key]))
    if meta.get("lease") is not None:
        problems.append(_duration_problem("lease", meta["lease"]))
    if status == "claimed" and not meta.get("assignee"):
        problems.append("a claimed step names its assignee")
    return [p for p in problems if p]


def _edit_problem(text: str, meta: dict[str, Any]) -> str | None:
    """A transition rewrites whole `key: value` lines; a frontmatter where some key has no
    line of its own (flow style, quoted or repeated keys) cannot be edited safely, so it is
    invalid and never claimed."""
    parts = split_frontmatter(text)
    lines = parts[0].splitlines(keepends=True) if parts else []
    key_lines = [m.group(1) for line in lines if (m := _KEY_LINE_RE.match(line))]
    if len(key_lines) != len(set(key_lines)) or set(key_lines) != set(meta):
        return "runner cannot edit this frontmatter line by line (write one `key: value` per line, block style, each key once)"
    return None


# --- writing ----------------------------------------------------------------

_PLAIN_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./@+-]*(?:[ ][A-Za-z0-9_./@+()-]+)*")
_YAML_SPECIAL = {"null", "~", "true", "false", "yes", "no", "on", "off", "y", "n"}
_NUMBER_RE = re.compile(r"[-+]?[\d._]+(e[-+]?\d+)?", re.I)  # YAML would read it as a number
_TIME_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")  # runner's own times stay plain
_DATE_RE = re.compile(r"\d{4}-\d\d-\d\d")  # YAML would read any other date-like text as a date


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
        and (_TIME_RE.fullmatch(text) or not _DATE_RE.match(text))
    ):
        return text
    return json.dumps(text, ensure_ascii=False)


def dump_flow(value: Any) -> str:
    """One-line YAML for a value (flow style; strings quoted when needed). A table's keys are
    written sorted, so the file an event writes never depends on the order a dict was built in
    (the hook replays events from JSON trailers, whose keys are sorted too)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{dump_scalar(str(k))}: {dump_flow(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))) + "}"
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
    """Tick the Automated Verification and QA boxes whose command passed; nothing else."""
    body = body_of(text)
    head = text[: len(text) - len(body)]
    lines = body.splitlines(keepends=True)
    items = [item for section in TICKED_SECTIONS for item in checklist(text, section)]
    for number, ticked, _, command in items:
        if not ticked and command in passed_commands:
            lines[number] = _ITEM_RE.sub(lambda m: f"{m.group(1)}x{m.group(3)}{m.group(4)}", lines[number].rstrip("\r\n"), count=1) + lines[number][len(lines[number].rstrip("\r\n")) :]
    return head + "".join(lines)
