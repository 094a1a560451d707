"""`runner cost`: what the plan's agent runs spent, by step, worker, role or day."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from runner.commands.common import Target
from runner.core.errors import BadInput

By = Annotated[str, typer.Option("--by", help="Group by step (the default), worker, role or day (UTC).")]


def cost(
    target: Target, step_id: Annotated[str | None, typer.Argument(help="Only this step.")] = None, by: By = "step"
) -> None:
    """Show what the agent runs cost.

    Tokens as each CLI reported them, money as an estimate that says
    whose it is (reported by the CLI, or priced from runner.toml's [prices]), runs whose usage
    is unknown counted apart, never as zero. Read from the queue's history (every recorded run).

    --json prints {"total": {usd, input_tokens, output_tokens, runs, ...}, "steps": [{step, usd,
    ...}], and with --by worker|role|day "groups" too}."""
    from runner.commands.render import print_json
    from runner.queue.costs import BY, report

    if by not in BY:
        raise BadInput(f"--by {by!r}: one of {', '.join(BY)}")
    queue = target.queue()
    snap = queue.snapshot()
    if step_id and snap.plan.find(step_id) is None:
        raise BadInput(f"no step {step_id!r} (see `runner status`)")
    data = report(queue.store, snap.tip, step_id, by)
    budget = snap.config.brakes.plan_budget_usd
    data["plan_budget_usd"] = budget
    if target.json:
        print_json(data)
        return
    key = data.get("by", "step")
    rows = data.get("groups", data["steps"])
    lines = [f"{'what it cost, by ' + key:<28} {'money (USD)':>12} {'in':>9} {'out':>9} {'runs':>5}  unknown"]
    for row in rows:
        lines.append(
            f"{str(row[key])[:28]:<28} {row['usd']:>12.4f} {_k(row['input_tokens']):>9} "
            f"{_k(row['output_tokens']):>9} {row['runs']:>5}  {row['unknown'] or ''}"
        )
    total = data["total"]
    lines.append(
        f"{'total':<28} {total['usd']:>12.4f} {_k(total['input_tokens']):>9} {_k(total['output_tokens']):>9} "
        f"{total['runs']:>5}  {total['unknown'] or ''}"
    )
    lines.append(f"money: {total['money']}" + (f"; the plan's budget is ${budget:.2f}" if budget is not None else ""))
    if total["unknown"]:
        lines.append(f"{total['unknown']} run(s) reported no usage: they are not in the figures above")
    if total["unpriced"]:
        lines.append(f"{total['unpriced']} run(s) gave tokens but no money and their model has no [prices] entry")
    sys.stdout.write("\n".join(lines) + "\n")


def _k(count: int) -> str:
    from runner.core.usage import tokens

    return tokens(count)
