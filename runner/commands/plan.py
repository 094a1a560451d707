"""Commands that set up and read the plan: init, add, import, validate, status, show,
ready, graph, log."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from runner.commands.common import By, Tags, Target, emit, person
from runner.core.errors import EXIT_BAD_INPUT, BadInput
from runner.core.stepschema import key_doc, shown


def init(
    target: Target,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            help="Write [harness] and [roles.*] for a coding agent's CLI: claude, codex, opencode, gemini, aider or "
            "none.",
        ),
    ] = None,
    by: By = None,
    prime: Annotated[
        bool,
        typer.Option(
            "--prime",
            help="With --agent: also write `runner prime` (how an agent takes steps itself) into that agent's project "
            "instructions file here (CLAUDE.md, AGENTS.md, GEMINI.md, CONVENTIONS.md).",
        ),
    ] = False,
) -> None:
    """Create the queue and integration branches here.

    The queue branch holds runner.toml and plans/; done steps are merged into the integration branch.

    With --agent NAME, runner.toml's [harness] and [roles.*] commands run that agent's CLI and
    plan-wide approval is on ([queue] requires_approval = true: every result waits for
    `runner approve`); on a queue that exists, only those change (one commit shows the change)."""
    from runner.commands.agents import APPROVAL_ON, init_files, sandbox_said, set_agent

    if prime:
        from runner.commands.agentwork import check_prime

        check_prime(target, agent)
    queue = target.queue(one_shot=True)
    actor = person(by, target.repo)
    created, message = queue.init(actor, files=init_files(agent))
    if agent and not created:
        message += "; " + set_agent(queue, agent, actor)
    elif agent:
        message += "; " + APPROVAL_ON + "; " + sandbox_said()
    if prime:
        from runner.commands.agentwork import write_prime

        message += "; " + write_prime(target, agent)
    emit(target, {"created": created, "message": message}, message)
    if not target.json:
        typer.echo(NEXT_FOR_AGENTS if agent and agent != "none" else NEXT)


NEXT = 'next: `runner add "First step" --id 01-first --run \'["make"]\'`, then `runner worker --id $(hostname)`'
NEXT_FOR_AGENTS = (
    'next: `runner add "First step" --id 01-first --body "What to do, and how to check it"` (no --run: the agent '
    "runs it, with the step's text as its prompt), then `runner worker --id $(hostname)`; to take a step in your own "
    "agent session instead: `runner work --id NAME`, or `runner mcp --id NAME` as an MCP server"
)


def add(
    target: Target,
    title: Annotated[str, typer.Argument(help="What the step does.")],
    step_id: Annotated[str, typer.Option("--id", help="Step id: 1 to 64 of a-z 0-9 . _ -, e.g. 03-add-parser.")],
    depends_on: Annotated[
        list[str], typer.Option("--depends-on", "-d", help=f"{key_doc('depends_on')} (repeatable).")
    ] = [],
    priority: Annotated[int, typer.Option(help=key_doc("priority"))] = 0,
    tag: Annotated[list[str], typer.Option("--tag", help=f"{key_doc('tags')} (repeatable).")] = [],
    run: Annotated[
        str | None, typer.Option("--run", help=f"{key_doc('run')}: a JSON list, or words split as a shell would.")
    ] = None,
    agent: Annotated[str | None, typer.Option("--agent", help=f"{key_doc('agent')}.")] = None,
    timeout: Annotated[str | None, typer.Option(help=key_doc("timeout"))] = None,
    max_attempts: Annotated[int | None, typer.Option("--max-attempts", help=key_doc("max_attempts"))] = None,
    output: Annotated[
        list[str], typer.Option("--required-output", help=f"{key_doc('required_outputs')} (repeatable).")
    ] = [],
    requires_approval: Annotated[bool, typer.Option("--requires-approval", help=key_doc("requires_approval"))] = False,
    touches: Annotated[list[str], typer.Option("--touches", help=f"{key_doc('touches')} (repeatable).")] = [],
    body: Annotated[str, typer.Option(help="Markdown body of the step.")] = "",
    by: By = None,
) -> None:
    """Add a step to the plan.

    It is checked like `runner validate` before it is committed."""
    from runner.core.ids import step_id_problem
    from runner.core.layout import FANOUT_FROM, new_step_path
    from runner.core.plan import Plan
    from runner.core.stepfile import parse_step, render_new_step

    given = {
        "depends_on": depends_on,
        "priority": priority,
        "tags": tag,
        "run": parse_run(run) if run else None,
        "agent": agent,
        "timeout": timeout,
        "max_attempts": max_attempts,
        "required_outputs": output,
        "requires_approval": requires_approval,
        "touches": touches,
    }
    fields = {key: value for key, value in given.items() if value is not None and value is not False and value != []}
    if not priority:
        del fields["priority"]
    if problem := step_id_problem(step_id):
        raise BadInput(f"--id: {problem}")
    data = render_new_step(step_id, title, fields, body.strip() + "\n" if body else "").encode()
    path_holder: list[str] = []

    def files(snap) -> dict:
        if existing := snap.plan.find(step_id):
            raise BadInput(f"step {step_id!r} already exists ({existing.path})")
        size = len(snap.plan.steps) + len(snap.plan.invalid)
        fanned = size + 1 >= FANOUT_FROM or any(
            s.path == new_step_path(s.id, True) for s in list(snap.plan.steps.values())[:1]
        )
        path = new_step_path(step_id, fanned)
        step = parse_step(path, data)
        merged = Plan.build([*snap.plan.steps.values(), step])
        problems = [f"{p}" for s in merged.invalid if s.id == step_id for p in s.problems]
        problems += [
            p.split(": ", 1)[1] for p in merged.unrunnable(bool(snap.config.harness.command)) if p.startswith(path)
        ]
        if problems:
            raise BadInput(problems)
        path_holder[:] = [path]
        return {path: data}

    target.queue(one_shot=True).edit(files, f"add {step_id}: {title}", person(by, target.repo))
    emit(target, {"step": step_id, "path": path_holder[0]}, f"added {step_id} ({path_holder[0]})")


def parse_run(text: str) -> list[str]:
    if text.lstrip().startswith("["):
        from runner.core import jsonsafe

        try:
            argv = jsonsafe.loads(text)
        except ValueError as exc:
            raise BadInput(
                f'--run: {shown(text)} is not a JSON list ({exc}); write it as \'["make", "db"]\' with double '
                "quotes, or as plain words: --run 'make db'"
            ) from None
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise BadInput('--run: a JSON list of strings, e.g. \'["make", "db"]\'')
        return argv
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise BadInput(f"--run: cannot split {text!r}: {exc}") from None
    if not argv:
        raise BadInput("--run: empty command")
    return argv


def import_(
    target: Target,
    folder: Annotated[
        Path,
        typer.Argument(help="A plans/steps folder of NN-slug.md files, or a DAG folder with root.md and step-<n>.md."),
    ],
    by: By = None,
) -> None:
    """Import a plan folder onto the queue branch.

    All or nothing: every problem is listed and nothing is committed."""
    from runner.queue.importer import import_files

    summary: list[str] = []

    def files(snap) -> dict:
        found, what = import_files(folder, snap.plan, progress=None if target.json else progress_line("read"))
        steps_only = {p for p in found if p.startswith("plans/steps/")}
        from runner.core.plan import Plan
        from runner.core.stepfile import parse_step

        merged = Plan.build([*snap.plan.steps.values(), *(parse_step(p, found[p]) for p in steps_only)])
        if problems := [
            p for p in merged.unrunnable(bool(snap.config.harness.command)) if p.split(":", 1)[0] in steps_only
        ]:
            raise BadInput(problems)
        summary[:] = what
        return found

    target.queue(one_shot=True).edit(files, f"import {folder.name}", person(by, target.repo))
    emit(target, {"imported": summary}, f"imported {', '.join(summary)}")


def progress_line(verb: str):
    """Progress of long work on stderr: one line redrawn on a terminal, nothing in a log."""
    import sys

    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        sys.stderr.write(f"\r{verb} {done}/{total} step files" + ("\n" if done == total else ""))
        sys.stderr.flush()

    return show


def validate(
    target: Target,
    path: Annotated[
        Path | None, typer.Option("--path", help="Check a plan folder on disk instead of the queue branch.")
    ] = None,
) -> None:
    """Check that the plan is sound.

    Exit 2 listing every problem (file: reason), 0 when it is sound. A step
    whose last attempt changed files outside its `touches:`, and agents configured without
    plan-wide approval, are warnings (exit 0)."""
    warnings: list[str] = []
    if path is not None:
        from runner.core.plan import Plan
        from runner.queue.importer import import_files

        try:
            import_files(path, Plan.build([]))
            problems = []
        except BadInput as exc:
            problems = exc.problems
    else:
        from runner.queue.audit import touched_outside

        queue = target.queue(one_shot=True)
        snap = queue.snapshot()
        problems = snap.plan.check(snap.config)
        warnings = [w for w in [snap.config.agents_without_approval()] if w] + touched_outside(queue.store, snap)
    if target.json:
        emit(target, {"ok": not problems, "problems": problems, "warnings": warnings}, "")
        if problems:
            raise typer.Exit(EXIT_BAD_INPUT)
        return
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
    if problems:
        raise BadInput(problems)
    typer.echo("plan is sound" + (f" ({len(warnings)} warning{'s' if len(warnings) > 1 else ''})" if warnings else ""))


AllRows = Annotated[bool, typer.Option("--all", help="Every step, even in a large plan (plain text past 200 rows).")]


def status(
    target: Target,
    show_all: AllRows = False,
    watch: Annotated[
        bool,
        typer.Option("--watch", help="Redraw every few seconds until Ctrl-C: counts, running steps, the last events."),
    ] = False,
    every: Annotated[float, typer.Option("--every", help="Seconds between redraws with --watch.")] = 2.0,
) -> None:
    """List every step with its status.

    The stored status or the derived waiting / blocked / invalid, assignee, attempt and age."""
    from runner.commands import render

    if watch:
        render.watch(target, every)
        return
    from runner.core.model import utc_now
    from runner.queue.claims import pause_hold
    from runner.queue.stuck import stuck_steps

    snap = _listed(target)
    rows = render.status_rows(snap.plan, snap.config.queue.touches_exclusive, pause_hold(snap, utc_now()))
    render.print_status(
        snap.plan,
        rows,
        target.branch,
        snap.tip,
        target.json,
        show_all,
        render.warnings(snap.config),
        [p.as_json() for _, p in sorted(snap.pauses(utc_now()).items())],
        stuck_steps(snap),
    )


def show(target: Target, step_id: Annotated[str, typer.Argument(help="The step.")]) -> None:
    """Show one step: its fields, status and file.

    With its derived status, its problems and why it is held back."""
    from runner.commands.render import print_json, step_row

    snap = target.snapshot()
    step = snap.plan.find(step_id)
    if step is None:
        raise BadInput(f"no step {step_id!r} (see `runner status`)")
    from runner.core.model import utc_now
    from runner.queue.claims import pause_hold

    row = step_row(
        snap.plan,
        step,
        snap.plan.touch_holders() if snap.config.queue.touches_exclusive else None,
        pause_hold(snap, utc_now()),
    )
    if target.json:
        print_json({**row, "meta": step.meta, "text": step.text})
        return
    for key in (
        "step",
        "title",
        "status",
        "priority",
        "depends_on",
        "tags",
        "assignee",
        "attempt",
        "failures",
        "lease",
        "claimed_at",
        "not_before",
        "last_error",
        "held_back",
        "path",
    ):
        if row.get(key) not in (None, [], ""):
            typer.echo(f"{key + ':':<12} {row[key]}")
    if step.get("usage") is not None:
        from runner.core.usage import Spend

        typer.echo(f"{'spent:':<12} {Spend.from_meta(step.get('usage')).describe()} (runner cost {step.id})")
    for problem in step.problems:
        typer.echo(f"problem:     {problem}")
    typer.echo("")
    typer.echo(step.text)


def ready(target: Target, tag: Tags = [], show_all: AllRows = False) -> None:
    """List the steps a worker could claim now.

    Best first, for a worker with these --tag values; then the ready steps held
    back while a claimed step's `touches:` overlap theirs, or while an account they would spend
    is paused by a provider's limit, each with why."""
    from runner.commands.render import print_ready, ready_rows
    from runner.core.model import utc_now
    from runner.queue.claims import pause_hold
    from runner.queue.stuck import stuck_steps

    snap = _listed(target)
    rows = ready_rows(snap.plan, tag, snap.config.queue.touches_exclusive, pause_hold(snap, utc_now()))
    print_ready(snap.plan, rows, target.branch, target.json, show_all, stuck_steps(snap))


def _listed(target: Target):
    """The queue's snapshot for a listing; its plan index is kept for the next `runner ready`
    or `runner status` (runner.commands.quick)."""
    from runner.commands import quick
    from runner.commands.render import warnings

    queue = target.queue(one_shot=True)  # a listing reads a little and exits
    snap = queue.snapshot()
    from runner.core.model import Status, utc_now

    # A paused account holds steps back, and a step with tags is stuck or not by the live workers'
    # heartbeats, which the plan's tip does not name: the full listing says so, every time.
    if not snap.pauses(utc_now()) and not any(s.tags for s in snap.plan.with_status(Status.READY)):
        quick.save(
            queue.store.state_dir,
            queue.branch,
            snap.tip,
            snap.plan,
            snap.config.queue.touches_exclusive,
            warnings(snap.config),
        )
    return snap


def graph(target: Target) -> None:
    """Print the plan as a Mermaid flowchart."""
    from runner.commands.render import mermaid

    typer.echo(mermaid(target.snapshot().plan), nl=False)


def log(
    target: Target,
    step_id: Annotated[str | None, typer.Argument(help="Only this step.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="At most this many entries (0 = all).")] = 50,
) -> None:
    """Print the audit trail, newest first.

    The queue branch's events; with STEP, every run of each attempt."""
    from runner.commands.render import print_json, print_log

    entries = target.queue(one_shot=True).log(step_id, limit or None)
    if target.json:
        print_json({"entries": entries})
        return
    print_log(
        entries, f"log of {target.branch}" + (f" for {step_id}" if step_id else ""), show_runs=step_id is not None
    )
