"""What every command shares: where the queue is (--repo, --remote, --queue-branch), who a
person is (--by), and how runner's errors become exit codes and one line of text.

`command(func)` gives a command the shared options by adding them to its signature once,
here; the function receives a `Target` and never repeats them. Failures are told by
runner.commands.failures, the one place that maps them to exit codes and messages.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from runner.commands import failures

# Commands import these from here:
from runner.commands.plain import Target, check_worker_id, emit, person, say  # noqa: F401
from runner.core.layout import DEFAULT_QUEUE_BRANCH

SHARED = [
    inspect.Parameter(
        "repo",
        inspect.Parameter.KEYWORD_ONLY,
        default=Path("."),
        annotation=Annotated[
            Path, typer.Option("--repo", help="The git repository (default: the one you are in).", show_default=False)
        ],
    ),
    inspect.Parameter(
        "remote",
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[
            str | None,
            typer.Option(
                "--remote",
                help=(
                    "The remote that holds the queue (default: origin when there is one; 'none': this repository only)."
                ),
            ),
        ],
    ),
    inspect.Parameter(
        "queue_branch",
        inspect.Parameter.KEYWORD_ONLY,
        default=DEFAULT_QUEUE_BRANCH,
        annotation=Annotated[
            str, typer.Option("--queue-branch", envvar="RUNNER_QUEUE_BRANCH", help="The queue branch.")
        ],
    ),
]
JSON = inspect.Parameter(
    "json_out",
    inspect.Parameter.KEYWORD_ONLY,
    default=False,
    annotation=Annotated[bool, typer.Option("--json", help="Print JSON (one object) instead of text.")],
)


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
            kwargs["target"] = Target.of(
                shared.get("repo", Path(".")),
                shared.get("remote"),
                shared.get("queue_branch", DEFAULT_QUEUE_BRANCH),
                shared.get("json_out", False),
            )
        return run_mapped(func, *args, json_out=bool(shared.get("json_out")), **kwargs)

    cast(Any, wrapper).__signature__ = signature.replace(parameters=own + extra)  # what typer reads
    return wrapper


def run_mapped(func: Callable, *args: Any, json_out: bool = False, **kwargs: Any) -> Any:
    """Run a command; runner's errors become their exit codes, with one line of text (and a
    JSON object under --json: runner.commands.failures)."""
    result = []
    code = failures.run(
        lambda: result.append(func(*args, **kwargs)), passthrough=(typer.Exit, typer.Abort), json_out=json_out
    )
    if code:
        raise typer.Exit(code)
    return result[0] if result else None


WorkerId = Annotated[str, typer.Option("--id", help="This worker's id, e.g. host-a (1 to 64 of A-Z a-z 0-9 . _ -).")]
By = Annotated[str | None, typer.Option("--by", help="Who acts (default: git's user.name, else $USER).")]
Tags = Annotated[
    list[str], typer.Option("--tag", help="A tag this worker has (repeatable): it takes steps that need it.")
]
