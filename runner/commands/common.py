"""What every command shares: where the queue is (--repo, --remote, --queue-branch), who a
person is (--by), and how runner's errors become exit codes and one line of text.

`command(func)` gives a command the shared options by adding them to its signature once,
here; the function receives a `Target` and never repeats them. Expected failures print
one line (every problem for bad input) and exit 1, 2 or 3; anything unexpected prints one
line and where the traceback is (RUNNER_DEBUG=1 prints it).
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from runner.core.errors import EXIT_BAD_INPUT, EXIT_FAILURE, BadInput, RunnerError
from runner.core.layout import DEFAULT_QUEUE_BRANCH


@dataclass(frozen=True)
class Target:
    repo: Path
    remote: str | None  # "auto", a name, or None (local only)
    branch: str
    json: bool = False

    def queue(self):
        from runner.queue.queue import open_queue

        return open_queue(self.repo, remote=self.remote, branch=self.branch)

    def snapshot(self):
        return self.queue().snapshot()


SHARED = [
    inspect.Parameter("repo", inspect.Parameter.KEYWORD_ONLY, default=Path("."), annotation=Annotated[
        Path, typer.Option("--repo", help="The git repository (default: the one you are in).", show_default=False)]),
    inspect.Parameter("remote", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        str | None, typer.Option("--remote", help="The remote that holds the queue (default: origin when there is one; 'none': this repository only).")]),
    inspect.Parameter("queue_branch", inspect.Parameter.KEYWORD_ONLY, default=DEFAULT_QUEUE_BRANCH, annotation=Annotated[
        str, typer.Option("--queue-branch", envvar="RUNNER_QUEUE_BRANCH", help="The queue branch.")]),
]
JSON = inspect.Parameter("json_out", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=Annotated[
    bool, typer.Option("--json", help="Print JSON (one object) instead of text.")])


def command(func: Callable | None = None, *, queue: bool = True, json: bool = True):
    """Register-ready command: adds --repo/--remote/--queue-branch (when `queue`) and --json
    (when `json`), passes them as `target`, and maps errors to exit codes."""
    if func is None:
        return lambda f: command(f, queue=queue, json=json)
    signature = inspect.signature(func, eval_str=True)
    own = [p for name, p in signature.parameters.items() if name != "target"]
    wants_target = "target" in signature.parameters
    extra = (SHARED if queue else []) + ([JSON] if json else [])

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        shared = {p.name: kwargs.pop(p.name, p.default) for p in extra}
        if wants_target:
            remote = shared.get("remote")
            remote = None if remote and remote.lower() == "none" else (remote or "auto")
            kwargs["target"] = Target(shared.get("repo", Path(".")), remote, shared.get("queue_branch", DEFAULT_QUEUE_BRANCH), shared.get("json_out", False))
        return run_mapped(func, *args, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=own + extra)
    return wrapper


def run_mapped(func: Callable, *args: Any, **kwargs: Any) -> Any:
    """Run a command; runner's errors become their exit codes, with one line of text."""
    try:
        return func(*args, **kwargs)
    except (typer.Exit, typer.Abort, KeyboardInterrupt):
        raise
    except BadInput as exc:
        if len(exc.problems) == 1:
            say(f"error: {exc.problems[0]}")
        else:
            say("\n".join([f"error: {len(exc.problems)} problems:"] + [f"  - {p}" for p in exc.problems]))
        raise typer.Exit(EXIT_BAD_INPUT)
    except RunnerError as exc:
        say(f"error: {exc}")
        raise typer.Exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 (every fault ends here, reported, never a traceback for the user)
        raise typer.Exit(report_bug(exc))


def say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def report_bug(exc: BaseException) -> int:
    """An unexpected error: one line, and the traceback in a log (or on screen with RUNNER_DEBUG=1)."""
    text = traceback.format_exc()
    if os.environ.get("RUNNER_DEBUG"):
        sys.stderr.write(text)
        return EXIT_FAILURE
    folder = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "runner"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / "errors.log"
        with open(log, "a") as handle:
            handle.write(text + "\n")
    except OSError:
        log = Path(tempfile.gettempdir()) / "runner-errors.log"
        with open(log, "a") as handle:
            handle.write(text + "\n")
    say(f"error: runner failed unexpectedly ({type(exc).__name__}: {exc}); the traceback is in {log} (RUNNER_DEBUG=1 shows it)")
    return EXIT_FAILURE


def person(by: str | None) -> str:
    """Who acts: --by, else git's user.name, else $USER; checked like every name in a commit."""
    from runner.core.ids import person_problem

    name = by
    if not name:
        from runner.store.git import run_git

        name = run_git(".", "config", "user.name", check=False).stdout.decode(errors="replace").strip() or os.environ.get("USER") or "person"
    if problem := person_problem(name):
        raise BadInput(f"--by: {problem}")
    return name


def check_worker_id(worker: str) -> str:
    from runner.core.ids import worker_id_problem

    if problem := worker_id_problem(worker):
        raise BadInput(f"--id: {problem}")
    return worker


WorkerId = Annotated[str, typer.Option("--id", help="This worker's id, e.g. host-a (1 to 64 of A-Z a-z 0-9 . _ -).")]
By = Annotated[str | None, typer.Option("--by", help="Who acts (default: git's user.name, else $USER).")]
Tags = Annotated[list[str], typer.Option("--tag", help="A tag this worker has (repeatable): it takes steps that need it.")]


def emit(target: Target, data: dict[str, Any], text: str) -> None:
    """Print JSON with --json, else the text."""
    if target.json:
        from runner.commands.render import print_json

        print_json(data)
    else:
        typer.echo(text)
