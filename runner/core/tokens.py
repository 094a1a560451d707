"""{token} substitution in a command's argv, element by element (never a shell): the
pipeline's roles and the notices of [notify] fill their commands the same way."""

from __future__ import annotations

import re
from collections.abc import Callable

# Every token runner fills in a role's command (implement's too): docs/pipeline.md.
ROLE_TOKENS = (
    "prompt_file",
    "prompt",
    "step_file",
    "step",
    "title",
    "attempt",
    "cwd",
    "worktree",
    "worker",
    "feedback",
    "output",
    "diff_file",
    "verdict",
    "findings",
    "artifact",
    "notes_file",
    "current_task",
    "current_phase",
    "context",
    "scenario",
    "model",
)


def fill_tokens(text: str, tokens: dict[str, str | Callable[[], str]]) -> str:
    """Replace each {token} `tokens` has; any other {word} stays as written. A token's value
    may be a function, called only when the text names it (the diff costs git calls)."""

    def value(match: re.Match) -> str:
        found = tokens.get(match.group(1))
        if found is None:
            return match.group(0)
        return found() if callable(found) else found

    return re.sub(r"\{([a-z_]+)\}", value, text)


def substitute(argv: list[str], tokens: dict[str, str | Callable[[], str]]) -> list[str]:
    """A command's argv with its {tokens} filled, element by element (never a shell)."""
    return [fill_tokens(arg, tokens) for arg in argv]
