"""Role prompts: what each pipeline role may touch, what it must never do, and the output
runner parses from it. Shipped as package files (runner/agents/prompts/<role>.md);
`runner init` writes them to plans/prompts/<role>.md on the queue branch, where people edit
them like any plan file.

A prompt names runner's tokens ({step}, {cwd}, {diff_file}, {output}, ...): fill them with
`render` and the same values the role's argv gets, then add root.md, NOTES.md, the step file
and the feedback to make the role's prompt file.
"""

from __future__ import annotations

import re

from runner.resources import read_text

ROLE_NAMES = ("orient", "implement", "verify", "review", "sweep", "orchestrate", "resolve", "qa")

TOKEN_RE = re.compile(r"\{([a-z_]+)\}")


def role_prompt(role: str) -> str:
    """The shipped prompt of a role, e.g. role_prompt("review")."""
    if role not in ROLE_NAMES:
        raise ValueError(f"unknown role {role!r} (one of: {', '.join(ROLE_NAMES)})")
    return read_text("runner.agents", "prompts", f"{role}.md")


def render(text: str, tokens: dict[str, str]) -> str:
    """Replace each {token} that has a value; any other {word} stays as written."""
    return TOKEN_RE.sub(lambda m: str(tokens[m.group(1)]) if m.group(1) in tokens else m.group(0), text)
