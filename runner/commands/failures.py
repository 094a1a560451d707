"""How a failure reaches the person or program that asked, in one place for the command line
(typer's path and the fast path of runner.commands.quick) and the MCP server: runner's errors
become their exit code and a message (every problem of bad input listed), anything unexpected
becomes one line and a logged traceback, never a traceback on screen, and a reader that went
away (`runner status | head`) ends the command quietly, as a Unix tool. `run` wraps a command
in all of it.

Under `--json` a failure is also one JSON object on stdout, `{"ok": false, "code": N,
"message": ..., "problems": [...]}`, beside the exit code and the line on stderr: a program
reads stdout, a person reads stderr.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.core.errors import EXIT_FAILURE, RunnerError
from runner.core.failure import Failure, failure_of


def classify(exc: BaseException) -> Failure:
    """The failure an exception means. An unexpected one is logged with its traceback (call this
    inside the `except` that caught it) and named with where its traceback is."""
    if isinstance(exc, RunnerError):
        return failure_of(exc)
    return Failure(
        EXIT_FAILURE,
        f"runner failed unexpectedly ({type(exc).__name__}: {exc}); the traceback is in "
        f"{log_traceback()} (RUNNER_DEBUG=1 shows it)",
    )


def tell(failure: Failure, json_out: bool = False) -> int:
    """Say a failure on stderr (and, under --json, as a JSON object on stdout); its exit code."""
    if json_out:
        sys.stdout.write(json.dumps(failure.as_dict()) + "\n")
        sys.stdout.flush()
    sys.stderr.write(failure.text + "\n")
    sys.stderr.flush()
    return failure.code


def run(func: Callable[[], Any], passthrough: tuple[type[BaseException], ...] = (), json_out: bool = False) -> int:
    """Run a command: 0, or its failure told (one line, every problem of bad input listed; a
    JSON object too under --json) and its exit code; a reader gone away ends it quietly.
    `passthrough`: exceptions the caller handles (a framework's own exits)."""
    try:
        func()
        return 0
    except passthrough:
        raise
    except BrokenPipeError:
        return closed_pipe()
    except Exception as exc:  # noqa: BLE001 (every fault ends here, reported, never a traceback for the user)
        return tell(classify(exc), json_out)


EXIT_CLOSED_PIPE = 128 + 13  # what a shell sees of a Unix tool that SIGPIPE ended


def closed_pipe() -> int:
    """What reads runner's output went away (`runner show STEP | head`): end quietly, as a Unix
    tool does, with nothing more written to the closed pipe (not even at exit)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_CLOSED_PIPE


def log_traceback() -> Path:
    """Keep the traceback being handled in runner's error log (printed too with RUNNER_DEBUG=1); the log's path."""
    import traceback

    text = traceback.format_exc()
    if os.environ.get("RUNNER_DEBUG"):
        sys.stderr.write(text)
    folder = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "runner"
    for log in (folder / "errors.log", Path(_temp()) / "runner-errors.log"):
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a") as handle:
                handle.write(text + "\n")
            return log
        except OSError:
            continue
    return log


def _temp() -> str:
    import tempfile

    return tempfile.gettempdir()
