"""`runner init --agent NAME`: the role prompts and the agent presets on the queue branch, and
plan-wide approval turned on: an agent's result waits for a person (the point of the workflow)."""

from __future__ import annotations

import re

from runner.core.config import DEFAULT_TOML
from runner.core.errors import BadInput
from runner.core.layout import CONFIG_FILE, PROMPTS_DIR

APPROVAL_ON = (
    "plan-wide approval is on ([queue] requires_approval = true): every agent's result waits for `runner approve`; set "
    "it to false in runner.toml to merge results with no person"
)
_APPROVAL_RE = re.compile(r"^(\s*requires_approval\s*=\s*)(true|false)\b(.*)$", re.DOTALL)


def _check(agent: str) -> None:
    from runner.agents.presets import PRESET_NAMES

    if agent not in PRESET_NAMES:
        raise BadInput(f"--agent {agent!r}: use one of {', '.join(PRESET_NAMES)}")


def init_files(agent: str | None) -> dict[str, bytes]:
    """What `runner init` writes beside the defaults: every role's prompt, and runner.toml
    with the agent's commands when one is named."""
    from runner.agents.presets import apply_preset
    from runner.agents.prompts import ROLE_NAMES, role_prompt

    files = {f"{PROMPTS_DIR}/{role}.md": role_prompt(role).encode() for role in ROLE_NAMES}
    if agent:
        _check(agent)
        files[CONFIG_FILE] = with_sandbox(with_approval(apply_preset(DEFAULT_TOML, agent)), agent).encode()
    return files


def set_agent(queue, agent: str, actor: str) -> str:
    """On a queue that exists: only [harness] and [roles.*] of runner.toml change, in one commit."""
    from runner.agents.presets import apply_preset
    from runner.core.config import parse_config

    _check(agent)

    def files(snap) -> dict[str, bytes]:
        current = (queue.store.file_at(snap.tip, CONFIG_FILE) or b"").decode("utf-8")
        text = with_sandbox(with_approval(apply_preset(current or DEFAULT_TOML, agent)), agent)
        parse_config(text)  # refused before it is committed, like any runner.toml edit
        return {CONFIG_FILE: text.encode()}

    queue.edit(
        files, f"set the agent commands to {agent} and turn plan-wide approval on (runner init --agent {agent})", actor
    )
    return f"runner.toml's [harness] and [roles.*] now run {agent}; {APPROVAL_ON}; {sandbox_said()}"


def with_approval(toml_text: str) -> str:
    """runner.toml with `[queue] requires_approval = true`, every other byte kept."""
    import tomllib

    from runner.agents.tomltables import segments

    lines = toml_text.splitlines(keepends=True)
    queue = next(((start, end) for start, end, name in segments(lines) if name == "queue"), None)
    if queue is None:
        text = (
            toml_text
            + ("" if toml_text.endswith("\n") or not toml_text else "\n")
            + "\n[queue]\nrequires_approval = true\n"
        )
    else:
        start, end = queue
        found = next((i for i in range(start, end) if _APPROVAL_RE.match(lines[i])), None)
        if found is not None:
            lines[found] = _APPROVAL_RE.sub(lambda m: m.group(1) + "true" + m.group(3), lines[found])
        else:
            header = next(i for i in range(start, end) if lines[i].lstrip().startswith("["))
            lines.insert(
                header + 1, "requires_approval = true  # runner init --agent: an agent's result waits for a person\n"
            )
        text = "".join(lines)
    if tomllib.loads(text).get("queue", {}).get("requires_approval") is not True:
        raise BadInput(
            "runner.toml: could not turn plan-wide approval on; set [queue] requires_approval = true in it by hand"
        )
    return text


def sandbox_said() -> str:
    """What `runner init --agent` says of the sandbox it turned on (or could not)."""
    from runner.worker.sandbox import unusable

    if why := unusable():
        return f"no sandbox: {why}; steps run as the worker's user, with its files and keys"
    return (
        'steps run in a bubblewrap sandbox ([worker] sandbox = "bwrap"): their worktree writable, $HOME empty '
        "but the agent's own config, a private /tmp, the environment cut to an allow-list"
    )


def with_sandbox(toml_text: str, agent: str) -> str:
    """runner.toml whose [worker] runs steps in the sandbox when bubblewrap works here, with the
    agent's config and login (sandbox_home) and its variables (env_pass) let in."""
    import json

    from runner.agents.homes import ENV_NAMES, HOME_PATHS
    from runner.worker.sandbox import unusable

    values = {
        "sandbox_home": json.dumps(list(HOME_PATHS.get(agent, ()))),
        "env_pass": json.dumps(list(ENV_NAMES.get(agent, ()))),
    }
    if unusable() is None:
        values["sandbox"] = '"bwrap"'
    text = toml_text
    for name, literal in values.items():
        text = set_key(text, "worker", name, literal)
    return text


def set_key(toml_text: str, table: str, name: str, literal: str) -> str:
    """runner.toml with `name = literal` in [table] (the line replaced, or added under the
    header, or the table added), every other byte kept."""
    from runner.agents.tomltables import segments

    pattern = re.compile(rf"^(\s*{re.escape(name)}\s*=\s*)[^#\n]*?(\s*(#.*)?)$", re.DOTALL)
    lines = toml_text.splitlines(keepends=True)
    found = next(((start, end) for start, end, named in segments(lines) if named == table), None)
    if found is None:
        tail = "" if toml_text.endswith("\n") or not toml_text else "\n"
        return toml_text + tail + f"\n[{table}]\n{name} = {literal}\n"
    start, end = found
    at = next((i for i in range(start, end) if pattern.match(lines[i])), None)
    if at is not None:
        lines[at] = pattern.sub(lambda m: m.group(1) + literal + m.group(2), lines[at])
    else:
        header = next(i for i in range(start, end) if lines[i].lstrip().startswith("["))
        lines.insert(header + 1, f"{name} = {literal}\n")
    return "".join(lines)
