"""The `runner` command line: builds the typer app from the command modules, nothing else.

Exit codes: 0 done or nothing to do; 1 failure at run time; 2 bad usage or bad input
(every problem listed); 3 `claim` found nothing it could take.
"""

from __future__ import annotations

import sys

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

from runner import __version__  # noqa: E402
from runner.commands import doctor, hooks, plan, schedule, steps, workers  # noqa: E402
from runner.commands.common import command  # noqa: E402

app = typer.Typer(
    name="runner",
    help="A git-native task queue: a plan of Markdown steps on a git branch, drained by worker daemons.\n\n"
    "Start with `runner init` in a git repository (--agent claude|codex|opencode|gemini|aider to run a coding agent), "
    "add steps with `runner add` or `runner import`, then run `runner worker --id NAME` on each machine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"runner {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit.")) -> None:
    pass


def add(func, name: str | None = None, hidden: bool = False, **options) -> None:
    app.command(name or func.__name__.rstrip("_").replace("_", "-"), hidden=hidden)(command(func, **options))


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
# One step by hand, and the queue's switch
for func in (steps.claim, steps.heartbeat, steps.release, steps.complete, steps.fail, steps.approve, steps.reject,
             steps.retry, steps.abort, steps.halt, steps.resume):
    add(func)
# Workers
add(workers.tick)
add(workers.worker)
add(workers.workers)
add(doctor.doctor)
add(doctor.gc, json=False)
# Hooks and schedules
add(hooks.install_hooks, queue=False, json=False)
add(hooks.uninstall_hooks, queue=False, json=False)
add(hooks.hook_pre_receive, hidden=True, queue=False, json=False)
add(hooks.hook_pre_commit, hidden=True, queue=False, json=False)
schedule.register(app)


def main() -> None:
    """The whole command line (what entry scripts installed before runner/__main__.py had
    main() call; `runner` itself starts there)."""
    app()
