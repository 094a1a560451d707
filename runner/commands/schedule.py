"""`runner install-schedule`, `uninstall-schedule` and `schedule-status`.

Thin: options in, runner.schedules does the work (imported inside each command so
that other commands start fast), results out. Exit codes: 0 done (schedule-status:
healthy); 1 an OS command failed (schedule-status: not installed, not healthy, or
the OS could not be asked); 2 bad usage or bad input, every problem listed.
"""

import json
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer


class SchedulerName(str, Enum):
    systemd = "systemd"
    launchd = "launchd"
    schtasks = "schtasks"


class Mode(str, Enum):
    daemon = "daemon"
    tick = "tick"


OsOption = Annotated[
    SchedulerName | None,
    typer.Option(
        "--os",
        help="systemd (Linux), launchd (macOS) or schtasks (Windows); default: this computer's.",
        show_default=False,
    ),
]
IdOption = Annotated[
    str,
    typer.Option(
        "--id",
        help="Worker id, e.g. host-a: 1 to 64 of A-Z a-z 0-9 . _ -, starting with a letter or digit.",
        show_default=False,
    ),
]
NoActivateOption = Annotated[
    bool,
    typer.Option(
        "--no-activate",
        help="Write or remove the files but run no systemctl/launchctl/schtasks; print the commands instead (also when "
        "RUNNER_SCHEDULE_NO_ACTIVATE=1).",
    ),
]


def install_schedule(
    worker_id: IdOption,
    os_name: OsOption = None,
    mode: Annotated[
        Mode,
        typer.Option(
            "--mode",
            help="daemon: keep `runner worker` running; tick: run `runner tick` every --interval seconds.",
        ),
    ] = Mode.daemon,
    tag: Annotated[
        list[str],
        typer.Option(
            "--tag",
            help="A tag of this worker (repeatable): a step with tags goes only to workers that have all of them.",
            metavar="TAG",
            show_default=False,
        ),
    ] = [],
    interval: Annotated[
        int | None,
        typer.Option(
            "--interval",
            help="Seconds: the daemon's poll interval when idle (default: the worker's, 30), or the tick period "
            "(default 300).",
            metavar="SECONDS",
            show_default=False,
        ),
    ] = None,
    grace: Annotated[
        int | None,
        typer.Option(
            "--grace",
            help="Daemon: seconds to finish a step after SIGTERM before releasing it (default: runner.toml's "
            "grace_period). The OS waits a minute longer before it kills: pass --grace when grace_period is over "
            "30 s.",
            metavar="SECONDS",
            show_default=False,
        ),
    ] = None,
    remote: Annotated[
        str | None,
        typer.Option(
            "--remote",
            help="The remote that holds the queue (default: origin when the clone has it; 'none' for a local queue).",
            metavar="NAME",
            show_default=False,
        ),
    ] = None,
    queue_branch: Annotated[
        str | None,
        typer.Option(
            "--queue-branch",
            envvar="RUNNER_QUEUE_BRANCH",
            help="The queue branch (default: runner/queue).",
            metavar="BRANCH",
            show_default=False,
        ),
    ] = None,
    repo: Annotated[
        Path | None,
        typer.Option(
            "--repo",
            help="The worker's clone of the queue on this computer (default: the current folder). Checked with git: it "
            "must hold the queue branch.",
            show_default=False,
        ),
    ] = None,
    target_repo: Annotated[
        str | None,
        typer.Option(
            "--target-repo",
            help="With --output or --dry-run: the worker's clone on the computer the files are for.",
            metavar="PATH",
            show_default=False,
        ),
    ] = None,
    python: Annotated[
        str | None,
        typer.Option(
            "--python",
            help="The interpreter runner is installed in (default here: this one, symlinks kept).",
            metavar="PATH",
            show_default=False,
        ),
    ] = None,
    env_file: Annotated[
        Path | None,
        typer.Option("--env-file", help="NAME=value lines for the worker's environment.", show_default=False),
    ] = None,
    notify: Annotated[
        bool,
        typer.Option(
            "--notify",
            help="The worker sends the notices runner.toml's [notify] names from this computer: it runs [notify]'s "
            "command and sends to its URLs, which come from the queue branch (with [hooks] identities, only "
            "admins change them).",
        ),
    ] = False,
    slots: Annotated[
        int, typer.Option(help="--mode daemon: the worker runs up to this many steps at once (runner worker --slots).")
    ] = 1,
    metrics_file: Annotated[
        Path | None,
        typer.Option(
            "--metrics-file",
            metavar="PATH",
            show_default=False,
            help="--mode daemon: the worker rewrites this Prometheus text file after each tick (runner "
            "worker --metrics-file).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the files and the commands; touch nothing.")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            help="Write the files into DIR instead of installing them (for another computer too).",
            metavar="DIR",
            show_default=False,
        ),
    ] = None,
    no_activate: NoActivateOption = False,
) -> None:
    """Keep a worker running with the OS's scheduler.

    Across logouts, reboots and crashes.

    The schedule runs `runner worker` (--mode daemon) or `runner tick` (--mode tick) with the
    options given here, in the clone at --repo. Re-run it to change them; uninstall-schedule
    removes it; schedule-status asks the OS how it is doing.

    Examples: `runner install-schedule --id host-a --tag gpu --repo ~/plan` · `runner
    install-schedule --id host-a --mode tick --interval 600` · `runner install-schedule --os
    launchd --id mac-1 --output DIR --python /Users/me/venv/bin/python --target-repo
    /Users/me/plan`"""
    from runner import schedules

    target = schedules.choose_target(
        scheduler=os_name.value if os_name else None,
        worker_id=worker_id,
        mode=mode.value,
        interval=interval,
        tags=tag,
        grace=grace,
        remote=remote,
        queue_branch=queue_branch,
        repo=repo,
        target_repo=target_repo,
        python=python,
        env_file=env_file,
        notify=notify,
        slots=slots,
        metrics_file=metrics_file,
        files_only=output is not None or dry_run,
    )
    outcome = schedules.install(target, output_dir=output, dry_run=dry_run, activate=not no_activate)
    _print_outcome(outcome)
    if outcome.not_activated:
        typer.echo(
            f"error: the schedule was written but not activated ({outcome.not_activated}): nothing runs until you do",
            err=True,
        )
        raise typer.Exit(1)


def uninstall_schedule(
    worker_id: IdOption,
    os_name: OsOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be removed and run; touch nothing.")
    ] = False,
    no_activate: NoActivateOption = False,
) -> None:
    """Stop and remove a worker's OS schedule.

    Exactly the files install-schedule wrote are removed."""
    from runner import schedules

    outcome = schedules.uninstall(
        os_name.value if os_name else None, worker_id, dry_run=dry_run, activate=not no_activate
    )
    _print_outcome(outcome)


def schedule_status(
    worker_id: IdOption,
    os_name: OsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Say how a worker's schedule is doing.

    Installed, enabled, running, failing, drifted.

    Asks the OS (systemctl --user, launchctl print, schtasks /query) and compares the files
    with what install-schedule would write now. Exit 0 only when healthy; when the OS cannot
    be asked from here, it says so and exits 1.
    """
    from runner import schedules

    report = schedules.status(os_name.value if os_name else None, worker_id)
    if as_json:
        typer.echo(json.dumps(report, sort_keys=True))
    else:
        _print_status(report)
    if not report["healthy"]:
        raise typer.Exit(1)


def _print_outcome(outcome) -> None:
    from runner.schedules.base import as_text

    echo = typer.echo
    for path, content in outcome.previews:
        echo(f"--- would write {path}")
        echo(as_text(content), nl=False)
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


def _yes_no(value) -> str:
    return "unknown" if value is None else "yes" if value else "no"


def _print_status(report: dict) -> None:
    echo = typer.echo
    mode = f" ({report['mode']})" if report["mode"] else ""
    verdict = "healthy" if report["healthy"] else "NOT healthy" if report["installed"] else "not installed"
    echo(f"{report['scheduler']} schedule of worker {report['id']}{mode}: {verdict}")
    if report["installed"]:
        for name in ("installed", "enabled", "running", "failing", "drifted"):
            echo(f"  {name:<10} {_yes_no(report[name])}")
    for question, answer in report["os_answers"].items():
        echo(f"  os: {question}: {answer}")
    for file in report["files"]:
        echo(f"  {file['state']:<10} {file['path']}")
    for problem in report["problems"]:
        echo(f"problem: {problem}", err=True)


COMMANDS: list[tuple[str, Callable[..., None]]] = [
    ("install-schedule", install_schedule),
    ("uninstall-schedule", uninstall_schedule),
    ("schedule-status", schedule_status),
]
