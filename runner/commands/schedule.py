"""`runner install-schedule`, `uninstall-schedule` and `schedule-status`.

Thin: options in, runner.schedules does the work (imported inside each
command so that other commands start fast), results out. Exit codes: 0 done,
1 an OS command failed (or, for schedule-status, not installed or stale),
2 bad usage or bad input.
"""

import contextlib
import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Iterator, Optional

import typer


class SchedulerName(str, Enum):
    systemd = "systemd"
    launchd = "launchd"
    schtasks = "schtasks"


class Mode(str, Enum):
    daemon = "daemon"
    tick = "tick"


OsOption = Annotated[
    Optional[SchedulerName],
    typer.Option("--os", help="systemd (Linux), launchd (macOS) or schtasks (Windows); default: this computer's."),
]
IdOption = Annotated[str, typer.Option("--id", help="Worker id: 1 to 64 of A-Z a-z 0-9 . _ -")]
NoActivateOption = Annotated[
    bool,
    typer.Option(
        "--no-activate",
        help="Write or remove the files but run no systemctl/launchctl/schtasks; print the commands instead "
        "(also when RUNNER_SCHEDULE_NO_ACTIVATE=1).",
    ),
]


def register(app: typer.Typer) -> None:
    app.command("install-schedule")(install_schedule)
    app.command("uninstall-schedule")(uninstall_schedule)
    app.command("schedule-status")(schedule_status)


def install_schedule(
    worker_id: IdOption,
    os_name: OsOption = None,
    mode: Annotated[Mode, typer.Option("--mode", help="daemon: keep `runner worker` running; tick: run `runner tick` every --interval seconds.")] = Mode.daemon,
    interval: Annotated[Optional[int], typer.Option("--interval", help="Seconds between ticks (--mode tick; default 300).")] = None,
    repo: Annotated[Optional[Path], typer.Option("--repo", help="The worker's repository (default: the current folder).")] = None,
    env_file: Annotated[Optional[Path], typer.Option("--env-file", help="NAME=value lines for the worker's environment.")] = None,
    python: Annotated[Optional[str], typer.Option("--python", help="Interpreter to run runner with (default: this one, symlinks kept).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the files and the commands; touch nothing.")] = False,
    output: Annotated[Optional[Path], typer.Option("--output", help="Write the files into DIR instead of installing them.", metavar="DIR")] = None,
    no_activate: NoActivateOption = False,
) -> None:
    """Install an OS schedule that keeps a worker running across reboots and crashes."""
    from runner import schedules

    with _exit_codes():
        spec = schedules.build_spec(
            worker_id=worker_id,
            scheduler=os_name.value if os_name else None,
            mode=mode.value,
            interval=interval,
            repo=repo,
            python=python,
            env_file=env_file,
        )
        outcome = schedules.install(spec, output_dir=output, dry_run=dry_run, activate=not no_activate)
    _print_outcome(outcome)


def uninstall_schedule(
    worker_id: IdOption,
    os_name: OsOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be removed and run; touch nothing.")] = False,
    no_activate: NoActivateOption = False,
) -> None:
    """Stop a worker's OS schedule and remove exactly the files install-schedule wrote."""
    from runner import schedules

    with _exit_codes():
        outcome = schedules.uninstall(os_name.value if os_name else None, worker_id, dry_run=dry_run, activate=not no_activate)
    _print_outcome(outcome)


def schedule_status(
    worker_id: IdOption,
    os_name: OsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Is the schedule installed, and do its files match what install would write now? Exit 0 if both."""
    from runner import schedules

    with _exit_codes():
        report = schedules.status(os_name.value if os_name else None, worker_id)
    if as_json:
        typer.echo(json.dumps(report, sort_keys=True))
    else:
        _print_status(report)
    if not report["up_to_date"]:
        raise typer.Exit(1)


@contextlib.contextmanager
def _exit_codes() -> Iterator[None]:
    from runner.schedules import ScheduleInputError, ScheduleRuntimeError

    try:
        yield
    except ScheduleInputError as exc:
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2) from None
    except ScheduleRuntimeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _as_text(content: bytes) -> str:
    from runner.schedules import UTF16_BOM

    if content.startswith(UTF16_BOM):
        return content[len(UTF16_BOM):].decode("utf-16-le")
    return content.decode("utf-8", errors="replace")


def _print_outcome(outcome) -> None:
    echo = typer.echo
    for path, content in outcome.previews:
        echo(f"--- would write {path}")
        echo(_as_text(content), nl=False)
    for path in outcome.written:
        echo(f"wrote {path}")
    for path in outcome.unchanged:
        echo(f"unchanged {path}")
    for path in outcome.removed:
        echo(f"{'would remove' if outcome.dry_run else 'removed'} {path}")
    for command in outcome.ran:
        echo(f"ran {command.display()}")
    if outcome.would_run:
        echo("would run:")
        for command in outcome.would_run:
            echo(f"  {command.display()}")
    if outcome.to_run:
        echo(f"{outcome.skipped_because}; run these yourself:")
        for command in outcome.to_run:
            echo(f"  {command.display()}")
    for note in outcome.notes:
        echo(note)
    for warning in outcome.warnings:
        echo(f"warning: {warning}", err=True)


def _print_status(report: dict) -> None:
    echo = typer.echo
    name = f"{report['scheduler']} schedule of worker {report['id']}"
    if not report["installed"]:
        echo(f"{name}: not installed")
    else:
        echo(f"{name}: installed ({report['mode']}), {'up to date' if report['up_to_date'] else 'NOT up to date'}")
    for file in report["files"]:
        echo(f"  {file['state']:<10} {file['path']}")
    if report["os_state"]:
        echo(f"  {report['os_state']}")
    for problem in report["problems"]:
        echo(f"problem: {problem}", err=True)
