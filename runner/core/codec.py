"""The commit vocabulary of the queue branch, shared by the workers, the server hook and
the history checker: subjects with `Runner-*` trailers, and where files live.

Kept free of heavy imports: the server hook starts a Python process on every push.
"""

from __future__ import annotations

from typing import Any

from runner.core.plan import HANDOFFS_DIR, STEPS_DIR


def commit_message(subject: str, trailers: dict[str, Any]) -> str:
    lines = [f"Runner-{key}: {value}" for key, value in trailers.items() if value not in (None, "")]
    return subject + "\n\n" + "\n".join(lines) + "\n"


def parse_trailers(message: str) -> dict[str, str]:
    trailers = {}
    for line in message.splitlines():
        if line.startswith("Runner-") and ": " in line:
            key, _, value = line.partition(": ")
            trailers[key[len("Runner-") :]] = value.strip()
    return trailers


def one_line(text: str | None) -> str:
    """A reason as it is written into the Runner-Reason trailer."""
    return " ".join((text or "").split())[:500]


def handoff_path(step_id: str) -> str:
    return f"{HANDOFFS_DIR}/{step_id}.md"


def is_step_path(path: str) -> bool:
    """A step file of the queue tree (a path below plans/steps, or a name within it)."""
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".md") and name.lower() != "readme.md"


def is_step_file(path: str) -> bool:
    return path.startswith(STEPS_DIR + "/") and is_step_path(path)


def step_id_of(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".md")
