"""A failure as it is told, the same wherever it is told (the command line, the MCP server, the
board): its exit code, one message, and every problem of bad input. runner.commands.failures
adds what only a command does (the unexpected, the traceback's log, a closed pipe)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner.core.errors import EXIT_BAD_INPUT, BadInput, RunnerError


@dataclass(frozen=True)
class Failure:
    """A command's failure as it is told: its exit code, one message, and the problems of bad input."""

    code: int
    message: str
    problems: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """As a person reads it: `error: ...`, or every problem of bad input on a line of its own."""
        if len(self.problems) > 1:
            return "\n".join([f"error: {self.message}:"] + [f"  - {p}" for p in self.problems])
        return f"error: {self.message}"

    @property
    def brief(self) -> str:
        """In one line (an MCP tool's error): the problems joined."""
        return "; ".join(self.problems) if len(self.problems) > 1 else self.message

    def as_dict(self) -> dict[str, Any]:
        return {"ok": False, "code": self.code, "message": self.message, "problems": list(self.problems)}


def failure_of(exc: RunnerError) -> Failure:
    """How one of runner's errors is told: bad input with every problem, the rest in its own words."""
    if isinstance(exc, BadInput):
        problems = exc.problems or ["bad input"]
        message = problems[0] if len(problems) == 1 else f"{len(problems)} problems"
        return Failure(EXIT_BAD_INPUT, message, problems)
    return Failure(exc.exit_code, str(exc))
