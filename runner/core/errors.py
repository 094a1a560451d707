"""runner's errors, each with the exit code the command line maps it to (in one place:
runner/cli.py). A message says what went wrong and what to do next, in one line."""

from __future__ import annotations

EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_NOTHING = 1, 2, 3
# How the server's hook starts its refusal of a push that lost a race (the installed pre-receive
# and runner.hooks.races write it; runner.store.remote reads it as a Lost).
LOST_RACE = "lost a race:"


class RunnerError(Exception):
    """A failure at run time: exit 1."""

    exit_code = EXIT_FAILURE


class BadInput(RunnerError):
    """Input runner refuses: exit 2, every problem listed."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))
