"""Turning plans, logs and reports into rich tables, JSON and Mermaid."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from runner.core.model import Status, Step, parse_time, utc_now
from runner.core.plan import Plan
from runner.core.usage import Spend, plan_spend, run_note, runs_spend

STATUS_STYLE = {
    "ready": "cyan",
    "claimed": "yellow",
    "review": "magenta",
    "done": "green",
    "failed": "red",
    "waiting": "dim",
    "blocked": "red dim",
    "invalid": "bold red",
}


def console(stderr: bool = False):
    """A rich console on the raw stream (rich writes its own colours): give it queue text only
    through runner.commands.output.cell."""
    from rich.console import Console

    from runner.commands.output import raw

    stream = raw(sys.stderr if stderr else sys.stdout)
    width = None if stream.isatty() else 160  # logs and pipes: don't fold tables at 80 columns
    return Console(file=stream, highlight=False, soft_wrap=False, width=width)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=str, sort_keys=False) + "\n")


def age(moment: datetime | None, now: datetime | None = None) -> str:
    if moment is None:
        return ""
    seconds = int(((now or utc_now()) - moment).total_seconds())
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{sign}{seconds // size}{unit}"
    return f"{sign}{seconds}s"


def step_row(
    plan: Plan, step: Step, holders: list[Step] | None = None, paused: Callable[[Step], str | None] | None = None
) -> dict[str, Any]:
    """A step as listings show it; `holders`: the claimed steps whose `touches:` may hold it back;
    `paused`: why a paused account holds it back (runner.queue.claims.pause_hold)."""
    status = plan.derived_status(step)
    held = plan.held_back(step, holders) or (paused(step) if paused else None)
    return {
        "step": step.id,
        "title": step.title,
        "status": status,
        "stored_status": step.get("status", Status.READY) if step.valid or step.meta else None,
        "priority": step.priority if step.valid else None,
        "depends_on": step.depends_on if step.valid else [],
        "tags": step.tags if step.valid else [],
        "assignee": step.assignee,
        "attempt": step.attempt if step.valid else None,
        "failures": step.get("failures"),
        "faults_in_a_row": step.get("faults_in_a_row"),
        "lease": step.get("lease"),
        "claimed_at": step.get("claimed_at"),
        "not_before": step.get("not_before"),
        "last_error": step.get("last_error"),
        "held_back": held if status == Status.READY else None,
        "last_updated": step.get("last_updated"),
        "usage": Spend.from_meta(step.get("usage")).as_json() if step.get("usage") is not None else None,
        "path": step.path,
        "problems": step.problems,
    }


def all_steps(plan: Plan) -> list[Step]:
    return sorted([*plan.steps.values(), *plan.invalid], key=lambda s: (s.id, s.path))


def status_table(plan: Plan, rows: Iterable[dict[str, Any]], title: str):
    from rich.table import Table

    from runner.commands.output import cell

    table = Table(title=title, title_justify="left", header_style="bold")
    for column in ("step", "title", "status", "assignee", "attempt", "age", "note"):
        table.add_column(column, overflow="fold" if column in ("note", "title") else "ellipsis")
    for row in rows:
        status = row["status"]
        note = _note(row)
        if status == Status.READY and (until := parse_time(row["not_before"] or "")) is not None and until > utc_now():
            note = f"backing off until {row['not_before']}" + (f"; {note}" if note else "")
        moment = parse_time(row["claimed_at"] or row["last_updated"])
        table.add_row(
            cell(row["step"]),
            cell(row["title"]),
            f"[{STATUS_STYLE.get(status, '')}]{status}[/]",
            cell(row["assignee"]),
            cell(row["attempt"] or ""),
            age(moment),
            cell(note[:200]),
        )
    return table


RICH_ROW_LIMIT = 200  # rich lays out every cell: past this, plain text is what stays fast
ATTENTION = ("claimed", "review", "failed", "blocked", "invalid")


def plain_table(rows: list[dict[str, Any]], title: str) -> str:
    """The status table as padded text: milliseconds for 10,000 rows where rich takes seconds."""
    columns = ("step", "title", "status", "assignee", "attempt", "note")
    cells = [[str(row.get(c) or "")[:60] if c != "note" else _note(row)[:120] for c in columns] for row in rows]
    widths = [max([len(c)] + [len(line[i]) for line in cells]) for i, c in enumerate(columns)]
    lines = [title, "  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in cells]
    return "\n".join(lines)


def _note(row: dict[str, Any]) -> str:
    return (
        "; ".join(row["problems"])
        if row["problems"]
        else (f"held back: {row['held_back']}" if row.get("held_back") else row["last_error"] or "")
    )


def counts_line(rows: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    order = ["done", "claimed", "review", "ready", "waiting", "blocked", "failed", "invalid"]
    return "  ".join(f"[{STATUS_STYLE[s]}]{counts[s]} {s}[/]" for s in order if counts.get(s))


def mermaid(plan: Plan) -> str:
    lines = ["flowchart TD"]
    for step in all_steps(plan):
        node = _node_id(step.id)
        label = str(step.title).replace('"', "'")
        lines.append(f'    {node}["{step.id}: {label}"]:::{plan.derived_status(step)}')
    for step in plan.steps.values():
        for dep in step.depends_on:
            lines.append(f"    {_node_id(dep)} --> {_node_id(step.id)}")
    colours = {
        "done": "#b7e1a1",
        "claimed": "#ffe08a",
        "review": "#e3b5ff",
        "ready": "#a8d8ff",
        "waiting": "#eeeeee",
        "blocked": "#ffb3b3",
        "failed": "#ff6b6b",
        "invalid": "#ff0000",
    }
    lines += [f"    classDef {status} fill:{colour}" for status, colour in colours.items()]
    return "\n".join(lines) + "\n"


def _node_id(step_id: str) -> str:
    return "s_" + "".join(c if c.isalnum() else "_" for c in step_id)


def print_rows(
    plan: Plan, rows: list[dict[str, Any]], title: str, show_all: bool, summary_of: str, halted: str | None = None
) -> None:
    """A rich table for a plan of human size on a terminal; plain text otherwise (a pipe, a log,
    a large plan), without even importing rich. A large plan shows the rows that need attention."""
    shown = rows
    if len(rows) > RICH_ROW_LIMIT and not show_all:
        shown = [r for r in rows if r["status"] in ATTENTION] if summary_of == "status" else rows[:50]
        shown = shown[:100]
    lines: list[tuple[str, str]] = []  # (plain text, the same in rich markup)
    if halted:
        from runner.commands.output import cell

        lines.append(
            (f"queue halted: {halted}  (runner resume)", f"[bold red]queue halted:[/] {cell(halted)}  (runner resume)")
        )
    table = None
    if not shown and rows:
        lines.append((f"{title}: no step needs attention",) * 2)
    elif len(shown) > RICH_ROW_LIMIT or not sys.stdout.isatty():
        table = plain_table(shown, title)
    else:
        table = status_table(plan, shown, title)
    after = []
    if len(shown) < len(rows):
        what = "that need attention" if summary_of == "status" else "first"
        text = f"{len(shown)} of {len(rows)} steps shown ({what}); --all lists every one, --json for scripts"
        after.append((text, f"[dim]{text}[/]"))
    if summary_of == "status":
        counts = counts_line(rows)
        after.append((_unmarked(counts), counts) if counts else ('no steps yet: runner add "..." --id 01-first',) * 2)
    if isinstance(table, str) or not sys.stdout.isatty():
        plain = [text for text, _ in lines] + ([table] if table else []) + [text for text, _ in after]
        sys.stdout.write("\n".join(plain) + "\n")
        return
    out = console()
    for _, marked in lines:
        out.print(marked)
    if table is not None:
        out.print(table)
    for _, marked in after:
        out.print(marked)


def status_rows(
    plan: Plan, touches_exclusive: bool = True, paused: Callable[[Step], str | None] | None = None
) -> list[dict[str, Any]]:
    holders = plan.touch_holders() if touches_exclusive else None
    return [step_row(plan, s, holders, paused) for s in all_steps(plan)]


def warnings(config) -> list[str]:
    """What `runner status` warns of, from runner.toml: agents whose results merge with no person."""
    return [w for w in [config.agents_without_approval()] if w]


def print_status(
    plan: Plan,
    rows: list[dict[str, Any]],
    branch: str,
    tip: str,
    as_json: bool,
    show_all: bool,
    warned: list[str] | None = None,
    paused: list[dict[str, Any]] | None = None,
    stuck: dict[str, str] | None = None,
) -> None:
    if as_json:
        print_json(
            {
                "tip": tip,
                "halted": plan.halted,
                "warnings": warned or [],
                "paused": paused or [],
                "spent": plan_spend(plan).as_json(),
                "steps": rows,
                "stuck": [{"step": step, "why": why} for step, why in (stuck or {}).items()],
            }
        )
        return
    print_rows(plan, rows, f"{branch} @ {tip[:10]}", show_all, "status", plan.halted)
    print_stuck(stuck or {})
    for pause in paused or []:
        sys.stdout.write(
            f"paused: account {pause['account']} until {pause['until']} ({pause['by']} on "
            f"{pause['step']}: {' '.join(pause['reason'].split())[:160]})\n"
        )
    if (spent := plan_spend(plan)).runs:
        sys.stdout.write(f"spent: {spent.describe()} (runner cost)\n")
    if warned:
        sys.stdout.write("".join(f"warning: {w}\n" for w in warned))


def ready_rows(
    plan: Plan, tags: list[str], touches_exclusive: bool = True, paused: Callable[[Step], str | None] | None = None
) -> list[dict[str, Any]]:
    """Every ready step a worker with `tags` may take, best first; those a claimed step's
    `touches:` or a paused account holds back say why (`held_back`)."""
    holders = plan.touch_holders() if touches_exclusive else None
    return [] if plan.halted else [step_row(plan, s, holders, paused) for s in plan.ready(utc_now(), tags)]


def print_ready(
    plan: Plan,
    rows: list[dict[str, Any]],
    branch: str,
    as_json: bool,
    show_all: bool,
    stuck: dict[str, str] | None = None,
) -> None:
    claimable, held = [r for r in rows if not r.get("held_back")], [r for r in rows if r.get("held_back")]
    stuck = stuck or {}
    if as_json:
        print_json(
            {
                "halted": plan.halted,
                "steps": claimable,
                "held_back": held,
                "stuck": [{"step": step, "why": why} for step, why in stuck.items()],
            }
        )
        return
    print_rows(plan, claimable, f"ready on {branch}" + (" (halted)" if plan.halted else ""), show_all, "ready")
    if held:
        sys.stdout.write("".join(f"{row['step']} held back: {row['held_back']}\n" for row in held[:100]))
    print_stuck(stuck)


def print_stuck(stuck: dict[str, str]) -> None:
    """The steps no live worker will take, each with why (runner.queue.stuck)."""
    sys.stdout.write("".join(f"stuck: {step}: {why}\n" for step, why in list(stuck.items())[:100]))


def _unmarked(line: str) -> str:
    """A line of runner's own rich markup (never queue text) without its [style] tags."""
    import re

    return re.sub(r"\[/?[a-z ]*\]", "", line)


def print_log(entries: list[dict[str, Any]], title: str, show_runs: bool) -> None:
    lines = [title]
    for e in entries:
        attempt = f" (attempt {e['attempt']})" if e["attempt"] else ""
        status = f" -> {e['status']}" if e["status"] else ""
        lines.append(
            f"{e['time']}  {e['commit'][:10]}  {e['event']:<9} {e['step'] or '':<20} "
            f"{e['actor'] or ''}{attempt}{status}"
        )
        if show_runs:
            if e.get("reason"):
                lines.append(f"    reason: {' '.join(str(e['reason']).split())[:300]}")
            for run in e.get("runs") or []:
                took = f" in {run['seconds']}s" if run.get("seconds") is not None else ""
                spent = f" [{note}]" if (note := run_note(run)) else ""
                lines.append(
                    f"    - {run.get('name')}: {run.get('result')}{took}{spent}"
                    + (f" ({run['detail']})" if run.get("detail") else "")
                )
            if (spend := runs_spend(e.get("runs"))).runs:
                lines.append(f"    spent: {spend.describe()}")
    sys.stdout.write("\n".join(lines) + "\n")


def watch(target, every: float) -> None:
    """`runner status --watch`: counts by status, running steps with worker and elapsed time,
    the last events; redrawn until Ctrl-C."""
    import time

    from rich.live import Live

    from runner.commands.output import cell

    queue = target.queue()

    def frame():
        from rich.console import Group
        from rich.table import Table

        snap = queue.snapshot()
        rows = [step_row(snap.plan, s) for s in all_steps(snap.plan)]
        running = Table(title="running", title_justify="left")
        for column in ("step", "worker", "attempt", "elapsed"):
            running.add_column(column)
        for row in rows:
            if row["status"] == Status.CLAIMED:
                running.add_row(
                    cell(row["step"]),
                    cell(row["assignee"]),
                    cell(row["attempt"] or ""),
                    age(parse_time(row["claimed_at"])),
                )
        events = Table(title="last events", title_justify="left")
        for column in ("time", "event", "step", "by", "status"):
            events.add_column(column)
        for e in queue.log(limit=8):
            events.add_row(*(cell(e[k]) for k in ("time", "event", "step", "actor", "status")))
        head = f"{cell(target.branch)} @ {snap.tip[:10]}  " + (counts_line(rows) or "no steps")
        if snap.plan.halted:
            head += f"  [bold red]halted:[/] {cell(snap.plan.halted)}"
        head += "".join(f"\n[yellow]warning:[/] {cell(w)}" for w in warnings(snap.config))
        return Group(head, running, events)

    try:
        with Live(frame(), console=console(), refresh_per_second=1, screen=False) as live:
            while True:
                time.sleep(every)
                live.update(frame())
    except KeyboardInterrupt:
        return
