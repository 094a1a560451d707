"""What an agent's reads and claims return (runner.worker.agentwork), typed: the commands
(runner.commands.agentwork, runner.commands.mcpserver) word them for a person or a model and
print `as_dict()` under --json and as an MCP tool's structured answer. A hand-in returns a
runner.worker.report.TickResult, as a worker's tick does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ReadyStep:
    step: str
    title: str
    priority: int
    depends_on: list[str]


@dataclass(frozen=True)
class Ready:
    """What an agent may take now, best first; when nothing, why."""

    steps: tuple[ReadyStep, ...]
    why: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"steps": [asdict(step) for step in self.steps], "why": self.why}


@dataclass(frozen=True)
class Shown:
    """A step as an agent reads it (`text`: its status and holder, then its context) and those facts."""

    step: str
    title: str
    status: str
    assignee: str | None
    attempt: int | None
    problems: list[str]
    text: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Claimed:
    """A claim the agent holds: its worktree and the step's prompt."""

    step: str
    title: str
    attempt: int
    worktree: str
    lease: float
    prompt: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
