"""`runner init --agent NAME`: the role prompts and the agent presets on the queue branch."""

from __future__ import annotations

from runner.core.config import DEFAULT_TOML
from runner.core.errors import BadInput
from runner.core.layout import CONFIG_FILE, PROMPTS_DIR


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
        files[CONFIG_FILE] = apply_preset(DEFAULT_TOML, agent).encode()
    return files


def set_agent(queue, agent: str, actor: str) -> str:
    """On a queue that exists: only [harness] and [roles.*] of runner.toml change, in one commit."""
    from runner.agents.presets import apply_preset
    from runner.core.config import parse_config

    _check(agent)

    def files(snap) -> dict[str, bytes]:
        current = (queue.store.file_at(snap.tip, CONFIG_FILE) or b"").decode("utf-8")
        text = apply_preset(current or DEFAULT_TOML, agent)
        parse_config(text)  # refused before it is committed, like any runner.toml edit
        return {CONFIG_FILE: text.encode()}

    queue.edit(files, f"set the agent commands to {agent} (runner init --agent {agent})", actor)
    return f"runner.toml's [harness] and [roles.*] now run {agent}"
