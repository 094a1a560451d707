"""`runner config get|set KEY [VALUE]`: one key of runner.toml on the queue branch, as `git
config` reads and writes one. A set rewrites only that key's line (its comment, and every
other byte, kept), is checked by the one schema before anything is pushed, and lands as a
person's plan edit (an `edit` event, as `runner add` makes). A get says which value counts:
a step's own (--step), runner.toml's, or the default, and with --show-origin where it is from."""

from __future__ import annotations

import re
import tomllib
from typing import Annotated, Any

import typer

from runner.commands.common import By, Target, emit, person
from runner.core.errors import BadInput

Action = Annotated[
    str, typer.Argument(help="get (print the value that counts) or set (write KEY = VALUE).", show_default=False)
]
KeyArg = Annotated[
    str, typer.Argument(help="The key, as <table>.<key>: leases.lease, roles.review.min_files.", show_default=False)
]


def config(
    target: Target,
    action: Action,
    key: KeyArg,
    value: Annotated[
        str | None,
        typer.Argument(
            help='For set: a TOML value (true, 3, "1h", \'["make", "test"]\'); plain words are text.',
            show_default=False,
        ),
    ] = None,
    show_origin: Annotated[
        bool,
        typer.Option(
            "--show-origin", help="Print where the value comes from (step STEP, runner.toml or default) before it."
        ),
    ] = False,
    step: Annotated[
        str | None, typer.Option("--step", help="With get: the value that counts for this step (its own value wins).")
    ] = None,
    by: By = None,
) -> None:
    """Read or write one key of runner.toml.

    On the queue branch, as `git config` does.

    `runner config get leases.lease` prints the value that counts (runner.toml's, else the
    default); `--step STEP` the one that counts for that step; `--show-origin` says where
    it comes from. `runner config set leases.lease 2h` rewrites that key's line only,
    checked by runner.toml's schema before it is pushed, as your plan edit (git's
    user.name, or --by)."""
    from runner.core.configkeys import config_key

    found = config_key(key)
    if action == "get":
        if value is not None:
            raise BadInput(f"get takes a KEY only (to write {value!r}: runner config set {key} VALUE)")
        _get(target, found, step, show_origin)
    elif action == "set":
        if value is None:
            raise BadInput(f"set needs a VALUE: runner config set {key} VALUE")
        if step is not None:
            raise BadInput(
                "--step reads a step's value; a step's own values are in its file (roles:, brakes:, "
                "pipeline:, timeout:, max_attempts:, requires_approval:)"
            )
        _set(target, found, value, person(by, target.repo))
    else:
        raise BadInput(f"{action!r}: use `runner config get KEY` or `runner config set KEY VALUE`")


def _get(target: Target, key, step_id: str | None, show_origin: bool) -> None:
    from runner.core.configkeys import as_toml, value_of
    from runner.core.layout import CONFIG_FILE

    queue = target.queue(one_shot=True)
    snap = queue.snapshot()
    meta = None
    if step_id is not None:
        step = snap.plan.find(step_id)
        if step is None:
            raise BadInput(f"no step {step_id!r} (see `runner status`)")
        meta = step.meta
    text = (queue.store.file_at(snap.tip, CONFIG_FILE) or b"").decode("utf-8", errors="replace")
    value, origin = value_of(key, text, meta, step_id)
    shown = value if isinstance(value, str) else as_toml(value)
    emit(
        target,
        {"key": key.dotted, "value": value, "origin": origin, "step": step_id},
        f"{origin}\t{shown}" if show_origin else shown,
    )


def _set(target: Target, key, typed: str, actor: str) -> None:
    from runner.core.configkeys import given_value
    from runner.core.layout import CONFIG_FILE

    value, literal = given_value(typed)
    queue = target.queue()

    def files(snap) -> dict[str, bytes]:
        current = (queue.store.file_at(snap.tip, CONFIG_FILE) or b"").decode("utf-8")
        return {CONFIG_FILE: with_key(current, key, value, literal).encode()}  # queue.edit checks it by the schema

    published = queue.edit(files, f"set {key.dotted} = {literal} in runner.toml (runner config set)", actor)
    emit(
        target,
        {"key": key.dotted, "value": value, "commit": published.commit},
        f"runner.toml: {key.dotted} = {literal}  [{published.commit[:10]}]",
    )


def with_key(toml_text: str, key, value: Any, literal: str) -> str:
    """runner.toml with `key = literal`: its line rewritten (its comment kept), else added
    under its table's header, else in a new table at the end; every other byte kept."""
    from runner.agents.tomltables import segments

    lines = toml_text.splitlines(keepends=True)
    newline = "\r\n" if "\r\n" in toml_text else "\n"
    table = next(((start, end) for start, end, name in segments(lines) if name == key.table), None)
    if table is None:
        ending = "" if not toml_text or toml_text.endswith("\n") else newline
        text = f"{toml_text}{ending}{newline if toml_text.strip() else ''}[{key.table}]{newline}{key.name} = {literal}"
        text += newline
    else:
        start, end = table
        header = next(i for i in range(start, end) if lines[i].lstrip().startswith("["))
        line = re.compile(rf"^(\s*){re.escape(key.name)}(\s*=\s*)(.*?)(\r?\n)?$", re.DOTALL)
        found = next((i for i in range(header + 1, end) if line.match(lines[i])), None)
        if found is None:
            lines.insert(header + 1, f"{key.name} = {literal}{newline}")
        else:
            match = line.match(lines[found])
            assert match is not None
            comment = _comment(match.group(3))
            lines[found] = f"{match.group(1)}{key.name}{match.group(2)}{literal}{comment}{match.group(4) or ''}"
        text = "".join(lines)
    _check_only_key_changed(toml_text, text, key, value)
    return text


def _comment(rest: str) -> str:
    """The comment after a value on its line (with the spaces before it), or ""."""
    for at in (m.start() for m in re.finditer("#", rest)):
        try:
            tomllib.loads(f"v = {rest[:at]}")
        except tomllib.TOMLDecodeError:
            continue
        value = rest[:at].rstrip()
        return rest[len(value) :]
    return ""


def _check_only_key_changed(before: str, after: str, key, value: Any) -> None:
    """The edit set that one key and nothing else (a value spread over lines is not edited by line)."""
    refused = BadInput(
        f"runner.toml: could not set {key.dotted} on its line (is its value on several lines?); "
        "edit runner.toml on the queue branch by hand"
    )
    try:
        old, new = tomllib.loads(before) if before else {}, tomllib.loads(after)
    except tomllib.TOMLDecodeError:
        raise refused from None
    table = old
    for part in key.table.split("."):
        table = table.setdefault(part, {}) if isinstance(table, dict) else table
    if not isinstance(table, dict):
        raise refused
    table[key.name] = value
    if old != new:
        raise refused
