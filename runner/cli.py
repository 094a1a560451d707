"""The `runner` command line: builds the typer app from the command modules, nothing else.

Exit codes: 0 done or nothing to do; 1 failure at run time; 2 bad usage or bad input
(every problem listed); 3 `claim` found nothing it could take.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

# typer imports its rich help renderer, and markdown-it with it, whenever rich is installed:
# ~50 ms more for every command people and schedulers start. runner's help is plain text
# (rich stays for the tables, imported where a command prints one).
_rich, sys.modules["rich"] = sys.modules.get("rich"), None  # type: ignore[assignment]
try:
    import typer
finally:
    if _rich is None:
        del sys.modules["rich"]
    else:
        sys.modules["rich"] = _rich

from runner import __version__
from runner.commands import (
    agentwork,
    board,
    completion,
    config,
    costs,
    doctor,
    hooks,
    plan,
    quick,
    schedule,
    steps,
    workers,
)
from runner.commands.common import command


def _version(value: bool) -> None:
    if value:
        typer.echo(f"runner {__version__}")
        raise typer.Exit()


def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    pass


# Every command: (name, function, hidden, options for commands.common.command). Wrapping a
# command and typer's reading of its parameters cost ~2 ms each: a run builds only its own.
COMMANDS: list[tuple[str, Callable, bool, dict]] = []


def add(func: Callable, name: str | None = None, hidden: bool = False, **options) -> None:
    COMMANDS.append((name or func.__name__.rstrip("_").replace("_", "-"), func, hidden, options))


# The plan
add(plan.init)
add(plan.add)
add(plan.import_, "import")
add(plan.validate)
add(plan.status)
add(plan.show)
add(plan.ready)
add(plan.graph, json=False)
add(plan.log)
add(config.config)
add(costs.cost)
# One step by hand, and the queue's switch
for func in (
    steps.claim,
    steps.heartbeat,
    steps.release,
    steps.complete,
    steps.fail,
    steps.approve,
    steps.reject,
    steps.retry,
    steps.abort,
    steps.halt,
    steps.resume,
):
    add(func)
# Workers
add(workers.tick)
add(workers.worker)
add(workers.workers)
add(doctor.doctor)
# The review surface: a web board on this clone, a running step's log from any clone
add(board.board, json=False)
add(board.logs)
add(doctor.gc)
# An agent that takes steps itself
add(agentwork.work)
add(agentwork.submit)
add(agentwork.prime, queue=False, json=False)
add(agentwork.mcp, json=False)
add(agentwork.keep_claim, hidden=True, json=False)
# Hooks and schedules
add(hooks.install_hooks, queue=False, json=False)
add(hooks.uninstall_hooks, queue=False, json=False)
add(hooks.hook_pre_receive, hidden=True, queue=False, json=False)
add(hooks.hook_pre_commit, hidden=True, queue=False, json=False)
for name, func in schedule.COMMANDS:
    add(func, name, queue=False, json=False)
add(completion.completion, queue=False, json=False)


def build(only: str | None = None) -> typer.Typer:
    """The app: every command, or only the one named `only` (its run and its --help need no
    other; anything else, `runner --help` and a mistyped name among them, gets them all)."""
    app = typer.Typer(
        name="runner",
        help="A git-native task queue: a plan of Markdown steps on a git branch, drained by worker daemons.\n\nStart "
        "with `runner init` in a git repository (--agent claude|codex|opencode|gemini|aider to run a coding agent), "
        "add steps with `runner add` or `runner import`, then run `runner worker --id NAME` on each machine.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(root)
    wanted = [entry for entry in COMMANDS if entry[0] == only] or COMMANDS
    for name, func, hidden, options in wanted:
        app.command(name, hidden=hidden)(command(func, **options))
    return app


def __getattr__(name: str):
    if name == "app":  # the whole app, for tests and tools that import it
        return build()
    raise AttributeError(name)


def main(args: list[str] | None = None) -> None:
    """The command line: builds the app for the command in `args` (default: sys.argv) and runs it."""
    args = sys.argv[1:] if args is None else args
    if completion.COMPLETE_VAR in os.environ:  # a shell's completion script asks: every command
        completion.complete(build())
        return
    app = build(args[0] if args else None)
    if args in quick.HELP_ARGS:
        _print_help(app, args)
    if "--json" in args:
        _run_json(app, args)
    app(args)


def _run_json(app: typer.Typer, args: list[str]) -> None:
    """Run under --json: a usage error (a missing option, a bad value) is told as every other
    failure is, a JSON object on stdout beside the line on stderr (runner.commands.failures)."""
    import click

    from runner.commands.failures import tell
    from runner.core.failure import Failure

    try:
        code = app(args, standalone_mode=False)
    except click.ClickException as exc:
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            sys.stderr.write(exc.ctx.get_usage() + "\n")
        raise SystemExit(tell(Failure(exc.exit_code, exc.format_message()), json_out=True)) from None
    except click.Abort:
        sys.stderr.write("Aborted!\n")
        raise SystemExit(1) from None
    raise SystemExit(code if isinstance(code, int) else 0)


def _print_help(app: typer.Typer, args: list[str]) -> None:
    """click's own help, kept for runner.commands.quick.answer_help."""
    import contextlib
    import io

    text, code = io.StringIO(), None
    with contextlib.redirect_stdout(text):
        try:
            app(args)
        except SystemExit as stop:
            code = stop.code
    sys.stdout.write(text.getvalue())
    if not code:
        quick.save_help(text.getvalue())
    raise SystemExit(code)
