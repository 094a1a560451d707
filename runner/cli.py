"""The `runner` command line: parse arguments, call the library, render the answer.

Exit codes: 0 done or nothing to do; 1 failure at run time; 2 bad usage or bad
input (every problem listed); 3 `claim` found nothing it could take.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from runner import __version__

app = typer.Typer(
    name="runner",
    help="A git-native task queue: a plan of Markdown steps on a git branch, drained by worker daemons.\n\n"
    "Start with `runner init` in a git repository, add steps with `runner add`, then run `runner worker --id NAME`.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)

Repo = Annotated[Path, typer.Option("--repo", help="The git repository (default: the current one).", show_default=False)]
Remote = Annotated[
    Optional[str],
    typer.Option("--remote", help="Remote that holds the queue (default: origin when it exists; 'none' for local only)."),
]
Branch = Annotated[str, typer.Option("--queue-branch", envvar="RUNNER_QUEUE_BRANCH", help="The queue branch.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
WorkerId = Annotated[str, typer.Option("--id", help="This worker's id, e.g. host-a ([A-Za-z0-9._-]).")]
By = Annotated[Optional[str], typer.Option("--by", help="Who acts (default: git user.name, else $USER).")]

EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_NOTHING = 1, 2, 3


def fail(message: str, code: int = EXIT_FAILURE) -> typer.Exit:
    sys.stderr.write(f"error: {message}\n")
    return typer.Exit(code)


def handle_errors(func):
    """Map library exceptions to exit codes and readable messages."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from runner.store.git import GitError
        from runner.core.model import BadInput
        from runner.queue.queue import LostRace, Skip
        from runner.core.machine import TransitionError

        try:
            return func(*args, **kwargs)
        except BadInput as exc:
            lines = [f"error: {len(exc.problems)} problem(s):"] + [f"  - {problem}" for problem in exc.problems]
            sys.stderr.write("\n".join(lines) + "\n")
            raise typer.Exit(EXIT_BAD_INPUT)
        except TransitionError as exc:
            raise fail(f"refused: {exc}")
        except Skip as exc:
            raise fail(str(exc), EXIT_NOTHING)
        except (GitError, LostRace) as exc:
            raise fail(str(exc))

    return wrapper


def open_queue(repo: Path, remote: Optional[str], branch: str):
    from runner.queue.queue import open_queue as _open

    remote_name = None if remote and remote.lower() == "none" else (remote or "auto")
    return _open(repo, remote=remote_name, branch=branch)


def person(by: Optional[str]) -> str:
    if by:
        return by
    import subprocess

    name = subprocess.run(["git", "config", "user.name"], capture_output=True, text=True).stdout.strip()
    return name or os.environ.get("USER") or "person"


def check_worker_id(worker: str) -> None:
    from runner.core.ids import worker_id_problem
    from runner.core.model import BadInput

    if problem := worker_id_problem(worker):
        raise BadInput(problem)


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"runner {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Show the version.")] = False,
) -> None:
    pass


# --- plan set-up ----------------------------------------------------------------


@app.command()
@handle_errors
def init(repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue") -> None:
    """Create the queue branch (runner.toml, plans/) and the integration branch in this repository."""
    queue = open_queue(repo, remote, queue_branch)
    _, message = queue.init(person(None))
    typer.echo(message)
    typer.echo("next: `runner add \"First step\" --id 01-first`, then `runner worker --id $(hostname)`")


@app.command()
@handle_errors
def add(
    title: Annotated[str, typer.Argument(help="What the step does.")],
    step_id: Annotated[str, typer.Option("--id", help="Step id: [a-z0-9][a-z0-9._-]{0,63}, e.g. 03-add-parser.")],
    depends_on: Annotated[list[str], typer.Option("--depends-on", "-d", help="A step that must be done first (repeatable).")] = [],
    priority: Annotated[int, typer.Option(help="Higher runs first.")] = 0,
    tag: Annotated[list[str], typer.Option("--tag", help="Only workers with this tag take it (repeatable).")] = [],
    run: Annotated[Optional[str], typer.Option("--run", help="Command to run, as a JSON list (argv) or words split like a shell would, never run through one.")] = None,
    timeout: Annotated[Optional[str], typer.Option(help="e.g. 30m")] = None,
    requires_approval: Annotated[bool, typer.Option("--requires-approval", help="Wait in review for `runner approve`.")] = False,
    body: Annotated[str, typer.Option(help="Markdown body of the step.")] = "",
    repo: Repo = Path("."),
    remote: Remote = None,
    queue_branch: Branch = "runner/queue",
) -> None:
    """Add a step to the plan."""
    import json
    import shlex

    from runner.core.model import BadInput
    from runner.core.plan import Plan
    from runner.queue.queue import new_step_file
    from runner.core.stepfile import parse_step

    fields: dict = {}
    if depends_on:
        fields["depends_on"] = depends_on
    if priority:
        fields["priority"] = priority
    if tag:
        fields["tags"] = tag
    if run:
        fields["run"] = json.loads(run) if run.lstrip().startswith("[") else shlex.split(run)
    if timeout:
        fields["timeout"] = timeout
    if requires_approval:
        fields["requires_approval"] = True
    path, data = new_step_file(step_id, title, fields, body.strip() + "\n" if body else "")
    step = parse_step(path, data)
    if step.problems:
        raise BadInput([f"{path}: {p}" for p in step.problems])

    def check(snap):
        if snap.plan.find(step_id):
            raise BadInput(f"step {step_id!r} already exists ({snap.plan.find(step_id).path})")
        merged = Plan.build([*snap.plan.steps.values(), parse_step(path, data)])
        problems = [f"{path}: {p}" for s in merged.invalid if s.id == step_id for p in s.problems]
        if problems:
            raise BadInput(problems)

    queue = open_queue(repo, remote, queue_branch)
    queue.add_files({path: data}, f"add {step_id}: {title}"[:200], person(None), check=check)
    typer.echo(f"added {step_id} ({path})")


@app.command("import")
@handle_errors
def import_(
    folder: Annotated[Path, typer.Argument(help="A plans/steps folder of NN-slug.md files, or a DAG folder with root.md and step-<n>.md.")],
    repo: Repo = Path("."),
    remote: Remote = None,
    queue_branch: Branch = "runner/queue",
) -> None:
    """Import a plan folder onto the queue branch (all or nothing; every problem listed)."""
    from runner.queue.importer import import_files

    queue = open_queue(repo, remote, queue_branch)
    summary: list[str] = []

    def check(snap):
        files, what = import_files(folder, snap.plan)
        summary[:] = what
        checked.update(files)

    checked: dict = {}
    snap = queue.snapshot()
    check(snap)
    queue.add_files(dict(checked), f"import {folder.name}: {summary[0]}", person(None), check=check)
    typer.echo(f"imported {', '.join(summary)}")


@app.command()
@handle_errors
def validate(
    repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False,
    path: Annotated[Optional[Path], typer.Option("--path", help="Validate a plan folder on disk instead of the queue branch.")] = None,
) -> None:
    """Check the plan: exit 2 listing every problem (file and reason), 0 when sound."""
    from runner.core.model import BadInput
    from runner.commands.render import print_json

    if path is not None:
        from runner.validate import validate_folder

        problems = validate_folder(path)
    else:
        queue = open_queue(repo, remote, queue_branch)
        snap = queue.snapshot()
        problems = snap.plan.problems
    if json_out:
        print_json({"ok": not problems, "problems": problems})
        if problems:
            raise typer.Exit(EXIT_BAD_INPUT)
        return
    if problems:
        raise BadInput(problems)
    typer.echo("plan is sound")


def _snapshot(repo, remote, queue_branch):
    return open_queue(repo, remote, queue_branch).snapshot()


AllRows = Annotated[bool, typer.Option("--all", help="Every step, even in a large plan (plain text past 200 rows).")]


def print_rows(plan, rows: list[dict], title: str, show_all: bool, summary_of: str) -> None:
    """A rich table for a plan of human size; for a large one, the rows that need attention."""
    from runner.commands.render import ATTENTION, RICH_ROW_LIMIT, console, plain_table, status_table

    out = console()
    shown = rows
    if len(rows) > RICH_ROW_LIMIT and not show_all:
        shown = [r for r in rows if r["status"] in ATTENTION] if summary_of == "status" else rows[:50]
        shown = shown[:100]
    if not shown and rows:
        out.print(f"{title}: no step needs attention")
    elif len(shown) > RICH_ROW_LIMIT:
        typer.echo(plain_table(shown, title))
    else:
        out.print(status_table(plan, shown, title))
    if len(shown) < len(rows):
        what = "that need attention" if summary_of == "status" else "first"
        out.print(f"[dim]{len(shown)} of {len(rows)} steps shown ({what}); --all lists every one, --json for scripts[/]")


@app.command()
@handle_errors
def status(repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False, show_all: AllRows = False) -> None:
    """Every step with its status (incl. derived waiting / blocked / invalid), assignee, attempt and age."""
    from runner.commands.render import all_steps, console, counts_line, print_json, step_row

    snap = _snapshot(repo, remote, queue_branch)
    rows = [step_row(snap.plan, s) for s in all_steps(snap.plan)]
    if json_out:
        print_json({"tip": snap.tip, "halted": snap.plan.halted, "steps": rows})
        return
    out = console()
    if snap.plan.halted:
        out.print(f"[bold red]queue halted:[/] {snap.plan.halted}  (runner resume)")
    print_rows(snap.plan, rows, f"{queue_branch} @ {snap.tip[:10]}", show_all, "status")
    out.print(counts_line(rows) or "no steps yet: runner add \"…\" --id 01-first")


@app.command()
@handle_errors
def show(step_id: str, repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False) -> None:
    """One step: its fields, derived status, problems and file."""
    from runner.core.model import BadInput
    from runner.commands.render import print_json, step_row

    snap = _snapshot(repo, remote, queue_branch)
    step = snap.plan.find(step_id)
    if step is None:
        raise BadInput(f"no step {step_id!r} (see `runner status`)")
    row = step_row(snap.plan, step)
    if json_out:
        print_json({**row, "meta": step.meta, "text": step.text})
        return
    for key in ("step", "title", "status", "priority", "depends_on", "tags", "assignee", "attempt", "lease", "claimed_at", "not_before", "last_error", "path"):
        if row.get(key) not in (None, [], ""):
            typer.echo(f"{key + ':':<12} {row[key]}")
    for problem in step.problems:
        typer.echo(f"problem:     {problem}")
    typer.echo("")
    typer.echo(step.text)


@app.command()
@handle_errors
def ready(
    tag: Annotated[list[str], typer.Option("--tag", help="Worker tags (repeatable).")] = [],
    repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False,
    show_all: AllRows = False,
) -> None:
    """Steps a worker (with --tag ...) could claim now, best first."""
    from runner.core.model import utc_now
    from runner.commands.render import print_json, step_row

    snap = _snapshot(repo, remote, queue_branch)
    rows = [] if snap.plan.halted else [step_row(snap.plan, s) for s in snap.plan.ready(utc_now(), tag)]
    if json_out:
        print_json({"halted": snap.plan.halted, "steps": rows})
        return
    print_rows(snap.plan, rows, f"ready on {queue_branch}" + (" (halted)" if snap.plan.halted else ""), show_all, "ready")


# --- driving steps by hand ----------------------------------------------------------


def _event_report(published, json_out: bool) -> None:
    from runner.commands.render import print_json

    change = published.change
    data = {"step": change.step_id, "event": change.event, "attempt": change.attempt, "status": change.updates.get("status"), "commit": published.commit}
    if json_out:
        print_json(data)
    else:
        typer.echo(f"{change.event} {change.step_id} (attempt {change.attempt}) -> {data['status']}  [{published.commit[:10]}]")


@app.command()
@handle_errors
def claim(
    step_id: Annotated[Optional[str], typer.Argument(help="A particular step (default: the best ready one).")] = None,
    worker: WorkerId = ...,
    tag: Annotated[list[str], typer.Option("--tag", help="This worker's tags (repeatable).")] = [],
    repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False,
) -> None:
    """Claim the best ready step (or STEP) for worker --id. Exit 3 when nothing can be taken."""
    from runner.queue.leases import holder_info, new_incarnation

    check_worker_id(worker)
    queue = open_queue(repo, remote, queue_branch)
    incarnation = new_incarnation(worker)
    # This process exits at once: the claim lives by its lease and heartbeats, not by our pid.
    holder = holder_info(incarnation, with_pid=False)
    published = queue.claim(worker, incarnation, holder, tags=tag, step_id=step_id)
    queue.beat(worker, {"step": published.change.step_id, "attempt": published.change.attempt, "incarnation": incarnation})
    _event_report(published, json_out)


def _holder_event(kind: str, step_id: str, worker: str, repo, remote, queue_branch, json_out, **fields) -> None:
    from runner.core.machine import Event

    check_worker_id(worker)
    queue = open_queue(repo, remote, queue_branch)
    _event_report(queue.apply_event(step_id, Event(kind=kind, **fields), worker), json_out)


@app.command()
@handle_errors
def heartbeat(step_id: str, worker: WorkerId = ..., repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue") -> None:
    """Renew worker --id's lease on STEP (moves refs/runner/heartbeats/<id>; no queue commit)."""
    from runner.core.machine import Event, transition
    from runner.core.model import BadInput, utc_now

    check_worker_id(worker)
    queue = open_queue(repo, remote, queue_branch)
    snap = queue.snapshot()
    step = snap.plan.find(step_id)
    if step is None:
        raise BadInput(f"no step {step_id!r}")
    transition(step.meta, Event("heartbeat"), worker, utc_now(), step_id)
    queue.beat(worker, {"step": step_id, "attempt": step.attempt, "incarnation": step.holder.get("incarnation")})
    typer.echo(f"heartbeat {step_id} (attempt {step.attempt}) by {worker}")


@app.command()
@handle_errors
def release(
    step_id: str, worker: WorkerId = ..., reason: Annotated[str, typer.Option(help="Why (kept in last_error).")] = "released",
    repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False,
) -> None:
    """Give STEP back to the queue (ready again at once)."""
    _holder_event("release", step_id, worker, repo, remote, queue_branch, json_out, reason=reason)


@app.command()
@handle_errors
def complete(
    step_id: str, worker: WorkerId = ..., repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False
) -> None:
    """Record STEP as done (or review when it requires approval)."""
    _holder_event("complete", step_id, worker, repo, remote, queue_branch, json_out)


@app.command("fail")
@handle_errors
def fail_(
    step_id: str, worker: WorkerId = ..., reason: Annotated[str, typer.Option(help="What went wrong.")] = "failed",
    permanent: Annotated[bool, typer.Option("--permanent", help="Do not retry: failed at once.")] = False,
    repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False,
) -> None:
    """Record a failure of STEP: ready again after a backoff, or failed when attempts are spent or --permanent."""
    from runner.queue.queue import retry_at

    queue = open_queue(repo, remote, queue_branch)
    step = queue.snapshot().plan.find(step_id)
    when = retry_at(queue.config_at(queue.store.tip(queue_branch)), step.attempt if step else 1)
    _holder_event("fail", step_id, worker, repo, remote, queue_branch, json_out, reason=reason, permanent=permanent, retry_at=when)


@app.command()
@handle_errors
def approve(step_id: str, by: By = None, repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False) -> None:
    """Approve a step in review: a result becomes done; a reported deviation goes ahead (ready)."""
    from runner.core.machine import Event

    _event_report(open_queue(repo, remote, queue_branch).apply_event(step_id, Event("approve"), person(by)), json_out)


@app.command()
@handle_errors
def reject(
    step_id: str, reason: Annotated[str, typer.Option(help="Feedback for the next attempt.")], by: By = None,
    abort: Annotated[bool, typer.Option("--abort", help="Fail the step instead of sending it back to ready.")] = False,
    repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False,
) -> None:
    """Reject a step in review: back to ready with your reason as feedback (or failed with --abort)."""
    from runner.core.machine import Event

    event = Event("reject", reason=reason, permanent=abort)
    _event_report(open_queue(repo, remote, queue_branch).apply_event(step_id, event, person(by)), json_out)


@app.command()
@handle_errors
def retry(step_id: str, by: By = None, repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False) -> None:
    """Send a failed step back to ready (its attempt count is kept)."""
    from runner.core.machine import Event

    _event_report(open_queue(repo, remote, queue_branch).apply_event(step_id, Event("retry"), person(by)), json_out)


@app.command()
@handle_errors
def abort(
    step_id: str, reason: Annotated[str, typer.Option(help="Why; kept in last_error.")], by: By = None,
    repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False,
) -> None:
    """Stop a step for good (ready, claimed or in review -> failed). A worker running it kills the run and records nothing."""
    from runner.core.machine import Event

    _event_report(open_queue(repo, remote, queue_branch).apply_event(step_id, Event("abort", reason=reason), person(by)), json_out)


@app.command()
@handle_errors
def halt(reason: Annotated[str, typer.Option(help="Why; shown to every worker.")], by: By = None, repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue") -> None:
    """Stop every worker from claiming (each stops at its next tick) until `runner resume`."""
    open_queue(repo, remote, queue_branch).set_halt(reason, person(by))
    typer.echo(f"queue halted: {reason}")


@app.command()
@handle_errors
def resume(by: By = None, repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue") -> None:
    """Let workers claim again after `runner halt`."""
    from runner.queue.queue import Skip

    try:
        open_queue(repo, remote, queue_branch).set_halt(None, person(by))
    except Skip as exc:
        typer.echo(str(exc))
        return
    typer.echo("queue resumed")


# --- looking back ----------------------------------------------------------------------


@app.command()
@handle_errors
def workers(repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False) -> None:
    """Workers seen through their heartbeat refs: id, host, last beat, step held."""
    from runner.commands.render import console, print_json

    snap = _snapshot(repo, remote, queue_branch)
    rows = []
    for worker, beat in sorted(snap.heartbeats.items()):
        info = beat.info
        rows.append({"worker": worker, "host": info.get("host"), "last_beat": info.get("at"), "state": info.get("state"), "step": info.get("step"), "attempt": info.get("attempt"), "pid": info.get("pid")})
    if json_out:
        print_json({"workers": rows})
        return
    from rich.table import Table

    table = Table(title="workers (from refs/runner/heartbeats/*)", title_justify="left")
    for column in ("worker", "host", "last_beat", "state", "step", "attempt"):
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(row[c] or "") for c in ("worker", "host", "last_beat", "state", "step", "attempt")))
    console().print(table)


@app.command()
@handle_errors
def log(
    step_id: Annotated[Optional[str], typer.Argument(help="Only this step.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="At most this many entries (0 = all).")] = 50,
    repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False,
) -> None:
    """The audit trail: the queue branch's commits and their Runner-* trailers, newest first."""
    from runner.commands.render import console, print_json

    entries = open_queue(repo, remote, queue_branch).log(step_id, limit or None)
    if json_out:
        print_json({"entries": entries})
        return
    from rich.table import Table

    table = Table(title=f"log of {queue_branch}" + (f" for {step_id}" if step_id else ""), title_justify="left")
    for column in ("time", "commit", "event", "step", "worker", "attempt", "status"):
        table.add_column(column)
    for e in entries:
        table.add_row(e["time"], e["commit"][:10], e["event"], e["step"] or "", e["worker"] or e["author"], str(e["attempt"] or ""), e["status"] or "")
    console().print(table)


@app.command()
@handle_errors
def graph(repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue") -> None:
    """The plan as a Mermaid flowchart, coloured by status."""
    from runner.commands.render import mermaid

    typer.echo(mermaid(_snapshot(repo, remote, queue_branch).plan), nl=False)


# --- workers ------------------------------------------------------------------------


@app.command()
@handle_errors
def tick(
    worker: WorkerId = ...,
    tag: Annotated[list[str], typer.Option("--tag", help="This worker's tags (repeatable).")] = [],
    repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False,
    log_file: Annotated[Optional[Path], typer.Option("--log-file", help="Also append the report to this file.")] = None,
) -> None:
    """One tick: claim at most one step, run it in its own worktree, verify it, record the outcome. Exit 0."""
    from runner.worker.tick import Worker

    check_worker_id(worker)
    w = Worker(open_queue(repo, remote, queue_branch), worker, tags=tag, log_file=log_file)
    report = w.tick()
    w.print_report(report, json_out)
    if report.get("outcome") == "error":
        raise typer.Exit(EXIT_FAILURE)


@app.command()
@handle_errors
def worker(
    worker_id: WorkerId = ...,
    tag: Annotated[list[str], typer.Option("--tag", help="This worker's tags (repeatable).")] = [],
    interval: Annotated[float, typer.Option(help="Seconds between ticks when idle (jittered).")] = 30.0,
    max_ticks: Annotated[int, typer.Option(help="Stop after this many ticks (0 = run forever).")] = 0,
    once: Annotated[bool, typer.Option("--once", help="Drain the plan, then exit: stop when no step is ready or running.")] = False,
    grace: Annotated[Optional[float], typer.Option(help="Seconds to finish a step after SIGTERM before releasing it (default: runner.toml).")] = None,
    repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False,
    log_file: Annotated[Optional[Path], typer.Option("--log-file", help="Also append reports to this file.")] = None,
) -> None:
    """The daemon: loop ticks with jittered sleep. SIGTERM/SIGINT stops claiming and finishes or releases the step."""
    from runner.worker.tick import Worker

    check_worker_id(worker_id)
    w = Worker(open_queue(repo, remote, queue_branch), worker_id, tags=tag, log_file=log_file, grace=grace)
    code = w.run_forever(interval=interval, max_ticks=max_ticks, once=once, json_out=json_out)
    raise typer.Exit(code)


@app.command()
@handle_errors
def doctor(repo: Repo = Path("."), remote: Remote = None, queue_branch: Branch = "runner/queue", json_out: Json = False) -> None:
    """Check this machine and repository: git version, queue branch, remote, plan, free resources."""
    from runner.commands.doctor import run_checks
    from runner.commands.render import print_json

    checks = run_checks(repo, remote, queue_branch)
    if json_out:
        print_json({"checks": checks})
    else:
        from runner.commands.render import console

        out = console()
        for check in checks:
            mark = {"ok": "[green]  ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}[check["result"]]
            out.print(f"{mark}  {check['name']}: {check['detail']}", markup=True)
    if any(c["result"] == "fail" for c in checks):
        raise typer.Exit(EXIT_FAILURE)


def _register_optional() -> None:
    for module in ("runner.commands.schedule", "runner.commands.hooks"):
        try:
            mod = __import__(module, fromlist=["register"])
        except ImportError:
            continue
        mod.register(app)


_register_optional()


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        print(f"runner {__version__}")
        return
    app()
