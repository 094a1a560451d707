"""The step file's keys, declared once as data: what each may hold, who writes it, what it
means. Validation (runner.core.stepfile), the did-you-mean check for a mistyped key, the
step-key table of docs/protocol.md (generated, checked by tests/test_docs.py) and the help of
`runner add`'s options all read this table.

Keys not in it are allowed (people keep their own metadata), unless a key is so close to a
known one that it is surely a typo: `requires_aproval: true` would otherwise validate and run
at once without its gate.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.core.ids import step_id_problem, worker_id_problem
from runner.core.model import STORED_STATUSES, parse_duration, parse_time
from runner.core.touches import glob_problems

PEOPLE, RUNNER = "people", "runner"

# A check returns the problems of one key's value (never raises).
Check = Callable[[str, Any], list[str]]


@dataclass(frozen=True)
class StepKey:
    name: str
    writer: str  # PEOPLE or RUNNER
    holds: str  # what its value must be, as a person reads it
    doc: str  # what it means
    check: Check
    alias: str | None = None  # the same key in plans people already write (`id`, `name`)


def shown(value: Any, limit: int = 60) -> str:
    """A value in an error message: its repr, clipped (a value may be megabytes)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def has_control(text: str) -> bool:
    """Control characters (C0, DEL, C1): in a title they would reach an operator's terminal."""
    return any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


def _must(ok: Callable[[Any], bool], what: str) -> Check:
    return lambda key, value: [] if ok(value) else [f"{key} must be {what}, not {shown(value)}"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _title(key: str, value: Any) -> list[str]:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return [f"{key} must be text"]
    if isinstance(value, str) and has_control(value):
        return [f"{key} must not contain line breaks or control characters (terminal escapes among them)"]
    return []


def _ids(key: str, value: Any) -> list[str]:
    if not (isinstance(value, str) or _is_str_list(value)):
        return [f"{key} must be a list of step ids"]
    return [
        f"{key}: {problem}"
        for dep in ([value] if isinstance(value, str) else value)
        if (problem := step_id_problem(dep))
    ]


def _outputs(key: str, value: Any) -> list[str]:
    if not _is_str_list(value):
        return [f"{key} must be a list of paths"]
    return [
        f"{key}: {shown(path)} must be a relative path inside the worktree"
        for path in value
        if path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", path) or ".." in re.split(r"[\\/]", path)
    ]


def _duration(key: str, value: Any) -> list[str]:
    try:
        parse_duration(value)
    except ValueError as exc:
        return [f"{key}: {exc}"]
    return []


def _timeout(key: str, value: Any) -> list[str]:
    return [] if isinstance(value, str) and value.strip().lower() == "none" else _duration(key, value)


_TIME_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


def _time(key: str, value: Any) -> list[str]:
    if isinstance(value, str) and _TIME_RE.fullmatch(value) and parse_time(value):
        return []
    return [f"{key} must be a time like 2026-11-29T08:00:00Z, not {shown(value)}"]


def _override(key: str, value: Any) -> list[str]:
    from runner.core.config import step_override_problems  # config's schema checks its own tables

    return step_override_problems({key: value})


def _comments(key: str, value: Any) -> list[str]:
    from runner.core.comments import problems

    return [f"{key}: {problem}" for problem in problems(value)]


_COUNT = _must(lambda v: _is_int(v) and v >= 0, "a whole number, 0 or more")
_TEXT = _must(lambda v: isinstance(v, str), "text")
_TABLE = _must(lambda v: isinstance(v, dict), "a table")

STEP_KEYS: tuple[StepKey, ...] = (
    # --- written by people -------------------------------------------------------------------
    StepKey(
        "step",
        PEOPLE,
        "a step id",
        "the id; must equal the file name's stem. 1-64 of `a-z 0-9 . _ -`, starting with a letter or digit, no "
        "`..`, not ending in `.` or `.lock`",
        lambda k, v: [],
        alias="id",
    ),
    StepKey("title", PEOPLE, "text", "what it does (no control characters)", _title, alias="name"),
    StepKey("depends_on", PEOPLE, "a list of step ids", "ids that must be `done` first", _ids),
    StepKey("priority", PEOPLE, "a whole number", "higher first; ties by id", _must(_is_int, "an integer")),
    StepKey(
        "tags",
        PEOPLE,
        "a list of strings",
        "only a worker started with all these `--tag`s takes it",
        _must(lambda v: isinstance(v, str) or _is_str_list(v), "a list of strings"),
    ),
    StepKey(
        "run",
        PEOPLE,
        "an argv",
        "the implement argv (never run through a shell); absent: `[harness] command`",
        _must(lambda v: _is_str_list(v) and bool(v), "a non-empty list of strings (an argv; no shell is used)"),
    ),
    StepKey(
        "agent",
        PEOPLE,
        "self",
        "`self`: an agent you run yourself takes it (`runner work`, `runner mcp`) and no "
        "worker runs it, so it needs no `run:` or `[harness] command`; absent: workers run it",
        _must(lambda v: v == "self", "self (an agent you run yourself; workers run a step without the key)"),
    ),
    StepKey(
        "timeout", PEOPLE, "a duration or none", "e.g. `30m`, or `none`; absent: `[worker] default_timeout`", _timeout
    ),
    StepKey(
        "max_attempts",
        PEOPLE,
        "a whole number, 1 or more",
        "failures before it fails for good; absent: `[leases] max_attempts`",
        _must(lambda v: _is_int(v) and v >= 1, "a whole number, 1 or more"),
    ),
    StepKey(
        "required_outputs",
        PEOPLE,
        "a list of paths",
        "paths that must exist in the worktree (relative, inside it)",
        _outputs,
    ),
    StepKey(
        "requires_approval",
        PEOPLE,
        "true or false",
        "true: the result waits for `runner approve` before it is merged; absent: `[queue] requires_approval`",
        _must(lambda v: isinstance(v, bool), "true or false"),
    ),
    StepKey(
        "touches",
        PEOPLE,
        "a list of globs",
        "the files it changes (`src/parser/**`; at most 64 globs of 16 "
        "segments): with `[queue] touches_exclusive`, it is not claimed while a claimed step's globs overlap its "
        "own; `runner validate` warns when its last result changed a file outside them",
        glob_problems,
    ),
    StepKey("roles", PEOPLE, "a table", "this step's own `[roles.*]` values (runner.toml's schema)", _override),
    StepKey("brakes", PEOPLE, "a table", "this step's own `[brakes]` values", _override),
    StepKey("pipeline", PEOPLE, "a table", "this step's own `[pipeline]` values", _override),
    # --- written by runner only ----------------------------------------------------------------
    StepKey(
        "status",
        RUNNER,
        " / ".join(STORED_STATUSES),
        "where the step is in the state machine (absent: ready)",
        _must(lambda v: v in STORED_STATUSES, f"one of {', '.join(STORED_STATUSES)}"),
    ),
    StepKey(
        "assignee",
        RUNNER,
        "a worker id",
        "the claim's worker",
        lambda k, v: [] if worker_id_problem(v) is None else [f"{k} must be a worker id, not {shown(v)}"],
    ),
    StepKey("claimed_at", RUNNER, "a time", "when the claim was made", _time),
    StepKey("lease", RUNNER, "a duration", "the lease the claim was made under", _duration),
    StepKey("attempt", RUNNER, "a whole number", "the fencing token: +1 with every claim, never goes back", _COUNT),
    StepKey(
        "failures",
        RUNNER,
        "a whole number",
        "failures that spend the budget (a crash counts, a hand-back does not)",
        _COUNT,
    ),
    StepKey(
        "holder",
        RUNNER,
        "a table",
        "the claim's process: `{host, pid, started, incarnation}`",
        _must(lambda v: isinstance(v, dict), "a table (host, pid, started, incarnation)"),
    ),
    StepKey(
        "faults_in_a_row",
        RUNNER,
        "a whole number",
        "faults of runner itself in a row on this step (released, nothing spent, backing off); a few hold it for a "
        "person",
        _COUNT,
    ),
    StepKey("not_before", RUNNER, "a time", "retry backoff", _time),
    StepKey(
        "last_error", RUNNER, "text", "the last failure, rejection or guidance; the next attempt's feedback", _TEXT
    ),
    StepKey(
        "review_comments",
        RUNNER,
        "a list of tables",
        "a reviewer's comments on lines of the rejected result, "
        "each `{file, line, end, text, line_text}` (`runner reject --comment`, the board): the next attempt's "
        "feedback too, and its handoff says which it addressed",
        _comments,
    ),
    StepKey(
        "review",
        RUNNER,
        "result / deviation / blocked / budget",
        "in review: `result` (a change to approve), "
        "`deviation` (orient), `blocked` (implement), `budget` (its agent runs spent the step's budget)",
        _must(lambda v: v in ("result", "deviation", "blocked", "budget"), "result, deviation, blocked or budget"),
    ),
    StepKey(
        "approved",
        RUNNER,
        "true or false",
        "a person decided a deviation or block: the next attempt goes ahead",
        _must(lambda v: isinstance(v, bool), "true or false"),
    ),
    StepKey("result", RUNNER, "a table", "`{branch, commit, merge}` of the step's change", _TABLE),
    StepKey(
        "resolve",
        RUNNER,
        "true",
        "a person approved the result but its merge conflicted: the worker that claims it brings that result onto "
        "the new tip (a resolve pass), not a run from scratch",
        _must(lambda v: v is True, "true"),
    ),
    StepKey(
        "scores",
        RUNNER,
        "a list of numbers",
        "the verifier's last scores (the plateau brake)",
        _must(lambda v: isinstance(v, list) and all(_is_number(x) for x in v), "a list of numbers"),
    ),
    StepKey(
        "spent",
        RUNNER,
        "seconds",
        "wall time spent across attempts (the step budget)",
        _must(lambda v: _is_number(v) and v >= 0, "a number of seconds"),
    ),
    StepKey("last_verdict", RUNNER, "a table", "the verifier's last verdict", _TABLE),
    StepKey(
        "usage",
        RUNNER,
        "a table",
        "what its agent runs spent, every attempt's: `{usd, input_tokens, "
        "output_tokens, cache_read_tokens, cache_write_tokens, runs, unknown, unpriced, estimated}` (usd: an "
        "estimate, of the runs whose money is known; unknown: runs whose CLI reported no usage)",
        _TABLE,
    ),
    StepKey(
        "rung",
        RUNNER,
        "a whole number",
        "its place on the roles' model ladders (`models`): up one after a failing gate or verdict",
        _COUNT,
    ),
    StepKey(
        "budget_waived",
        RUNNER,
        "true",
        "a person let it go on over its budget: for its next attempt only",
        _must(lambda v: v is True, "true"),
    ),
    StepKey("last_updated", RUNNER, "a time", "when the last event was recorded", _time),
    StepKey("last_updated_by", RUNNER, "text", "who recorded it", _TEXT),
)

BY_NAME: dict[str, StepKey] = {k.name: k for k in STEP_KEYS}
ALIASES: dict[str, str] = {k.alias: k.name for k in STEP_KEYS if k.alias}
KNOWN: frozenset[str] = frozenset(BY_NAME) | frozenset(ALIASES)
# in the order runner appends them
MANAGED_KEYS: tuple[str, ...] = tuple(k.name for k in STEP_KEYS if k.writer == RUNNER)


def key_doc(name: str) -> str:
    """What a key means, as its row says (also the help of `runner add`'s option for it)."""
    doc = BY_NAME[name].doc
    return doc[0].upper() + doc[1:]


def did_you_mean(name: str) -> str | None:
    """The known key `name` is surely a typo of, or None (unknown keys are people's own)."""
    if name in KNOWN:
        return None
    folded = {k.lower().replace("-", "_"): k for k in KNOWN}
    if name.lower().replace("-", "_") in folded:
        return folded[name.lower().replace("-", "_")]
    import difflib  # only for a key that is not known

    close = difflib.get_close_matches(name, sorted(KNOWN), n=1, cutoff=0.8)
    return close[0] if close else None


def key_problems(meta: dict[str, Any]) -> list[str]:
    """Every problem of the keys a frontmatter sets: each value against its key's check, and
    each unknown key that is a known one mistyped."""
    problems: list[str] = []
    for name, value in meta.items():
        spec = BY_NAME.get(ALIASES.get(name, name))
        if spec is not None:
            if value is not None or name == "status":  # `status:` with no value is not "ready"
                problems += spec.check(name, value)
        elif (meant := did_you_mean(name)) is not None:
            problems.append(f"unknown key {shown(name)}: did you mean {meant}?")
    return problems


def doc_rows() -> list[tuple[str, str, str, str]]:
    """(key, value, written by, meaning) for docs/protocol.md's step-key table."""
    return [(f"`{k.name}`" + (f" (or `{k.alias}`)" if k.alias else ""), k.holds, k.writer, k.doc) for k in STEP_KEYS]
