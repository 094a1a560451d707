"""Commands that run or show workers: tick, worker, workers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from runner.commands.common import Tags, Target, WorkerId, check_worker_id
from runner.core.errors import EXIT_FAILURE, BadInput

LogFile = Annotated[Path | None, typer.Option("--log-file", help="Also append the worker's log lines to this file.")]
Notify = Annotated[
    bool,
    typer.Option(
        "--notify",
        help="Send the notices runner.toml's [notify] names from this host: run its command, send to its URLs (they "
        "come from the queue branch, so a host sends them only when it opts in: this, RUNNER_NOTIFY=1, or `git "
        "config runner.notify true`).",
    ),
]


def opt_in_to_notices(notify: bool) -> None:
    if notify:
        from runner.queue.notices import OPT_IN_ENV

        os.environ[OPT_IN_ENV] = "1"


def tick(
    target: Target,
    worker: WorkerId,
    tag: Tags = [],
    log_file: LogFile = None,
    notify: Notify = False,
    step: Annotated[
        str | None,
        typer.Option(
            "--step",
            help="Run this step only: the one the worker holds, or can take now (a step backing off after a "
            "failure is taken at once).",
        ),
    ] = None,
    context: Annotated[
        str | None,
        typer.Option(
            "--context",
            help="Relevant context for the step's agents: a file's path (its text) or the text itself; it goes "
            "into every role's prompt and the handoff.",
        ),
    ] = None,
) -> None:
    """Run one tick: claim, run, verify, record.

    Claim at most one step, run it in its own worktree, verify it, record the outcome.

    Exit 0 when the tick did its job or had nothing to do (halted, nothing ready, no queue
    yet: SKIP and the reason); 1 only for a fault of this tick."""
    from runner.commands.tickreport import ReportPrinter
    from runner.worker.tick import Worker, stop_on_signals

    check_worker_id(worker)
    opt_in_to_notices(notify)
    w = Worker(target.queue(), worker, tags=tag, log_file=log_file, only_step=step, context=caller_context(context))
    stop_on_signals(w)
    result = w.tick()
    ReportPrinter(target.json)(result)
    if result.failed_inside:
        raise typer.Exit(EXIT_FAILURE)


def caller_context(value: str | None) -> str:
    """`--context FILE|TEXT`: the file's text when VALUE names a file, else VALUE; bounded
    (MAX_CONTEXT_BYTES), since it is copied into every prompt and the handoff."""
    from runner.core.limits import MAX_CONTEXT_BYTES, MAX_STEP_BYTES, clip

    if not value:
        return ""
    path = Path(value)
    try:
        if len(value) < 4096 and "\n" not in value and path.is_file():
            if (size := path.stat().st_size) > MAX_STEP_BYTES:
                raise BadInput(
                    f"--context {value}: {size:,} bytes; pass at most 1 MiB (of which {MAX_CONTEXT_BYTES // 1024} KiB "
                    "is kept)"
                )
            value = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise BadInput(f"--context {value}: cannot read it ({exc.strerror})") from exc
    return clip(value, MAX_CONTEXT_BYTES)


def worker(
    target: Target,
    worker_id: WorkerId,
    tag: Tags = [],
    interval: Annotated[
        float | None,
        typer.Option(help="Seconds between ticks when idle, jittered (default: [worker] interval in runner.toml, 30)."),
    ] = None,
    max_ticks: Annotated[int, typer.Option(help="Stop after this many ticks (0: run until stopped).")] = 0,
    once: Annotated[
        bool,
        typer.Option(
            "--once", help="Drain the plan, then exit: stop when nothing is ready or running (or there is no queue)."
        ),
    ] = False,
    grace: Annotated[
        float | None,
        typer.Option(help="Seconds to finish a step after SIGTERM before it is released (default: runner.toml)."),
    ] = None,
    log_file: LogFile = None,
    notify: Notify = False,
    slots: Annotated[
        int, typer.Option(help="Run up to this many steps at once, each in its own worktree; one heartbeat for all.")
    ] = 1,
    metrics_file: Annotated[
        Path | None,
        typer.Option(
            "--metrics-file",
            metavar="PATH",
            help="Rewrite this Prometheus text file after each tick: the queue's steps and what this worker "
            "did (for node_exporter's textfile collector).",
        ),
    ] = None,
) -> None:
    """Run the worker daemon: tick until stopped.

    SIGTERM/SIGINT stops claiming and finishes (or, after the grace
    period, releases) the running step; a second signal stops it at once."""
    from runner.commands.tickreport import ReportPrinter
    from runner.worker.daemon import Daemon
    from runner.worker.tick import Worker

    check_worker_id(worker_id)
    opt_in_to_notices(notify)
    if slots != 1:
        from runner.worker.slots import Fleet, check_slots

        check_slots(slots)
        fleet = Fleet(
            target.queue(), worker_id, slots, tags=tag, log_file=log_file, grace=grace, metrics_file=metrics_file
        )
        raise typer.Exit(
            fleet.run(
                interval=interval, max_ticks=max_ticks, once=once, json_out=target.json, show=ReportPrinter(target.json)
            )
        )
    w = Worker(target.queue(), worker_id, tags=tag, log_file=log_file, grace=grace)
    daemon = Daemon(
        w,
        interval=interval,
        max_ticks=max_ticks,
        once=once,
        json_out=target.json,
        metrics_file=metrics_file,
        show=ReportPrinter(target.json),
    )
    raise typer.Exit(daemon.run())


def workers(
    target: Target,
    prune: Annotated[
        bool, typer.Option("--prune", help="Delete the heartbeat refs of workers gone for more than a day.")
    ] = False,
) -> None:
    """List the workers from their heartbeats.

    Alive / late / gone, the step each holds, its last step
    and outcome, ticks, uptime; and the accounts a provider's limit paused (no worker starts
    their commands until the reset)."""
    from runner.commands.render import age, console, print_json
    from runner.core.model import parse_time, utc_now
    from runner.queue.workers import forget, prunable, worker_rows

    queue = target.queue()
    snap = queue.snapshot()
    rows = worker_rows(snap)
    paused = [p.as_json() for _, p in sorted(snap.pauses(utc_now()).items())]
    pruned = []
    if prune:
        pruned = [r["worker"] for r in prunable(rows)]
        forget(queue.store, {r["worker"]: r["commit"] for r in rows if r["worker"] in pruned})
        rows = [r for r in rows if r["worker"] not in pruned]
    if target.json:
        print_json({"workers": rows, "pruned": pruned, "paused": paused})
        return
    from rich.table import Table

    from runner.commands.output import cell

    table = Table(title="workers (from refs/runner/heartbeats/*)", title_justify="left")
    for column in ("worker", "liveness", "state", "host", "step", "last", "ticks", "uptime", "last beat"):
        table.add_column(column)
    for r in rows:
        last = r["last"] or {}
        step = f"{r['step']} (attempt {r['attempt']})" if r["step"] else ""
        colour = {"alive": "green", "late": "yellow", "gone": "red"}[r["liveness"]]
        table.add_row(
            cell(r["worker"]),
            f"[{colour}]{r['liveness']}[/]",
            cell(r["state"]),
            cell(r["host"]),
            cell(step),
            cell(f"{last.get('step', '')} {last.get('outcome', '')}".strip()),
            cell(r["ticks"]),
            age(parse_time(r["started"])),
            f"{age(parse_time(r['last_beat']))} ago" if r["last_beat"] else "",
        )
    out = console()
    out.print(table)
    for pause in paused:
        out.print(
            cell(
                f"account {pause['account']} paused until {pause['until']}: no worker starts its commands "
                f"({pause['by']} on {pause['step']}: {' '.join(pause['reason'].split())[:160]})"
            )
        )
    for name in pruned:
        out.print(f"pruned {name}")
