"""The brakes on what agent runs spend, checked before each agent run, and the provider's
limit, read after it (docs/pipeline.md). None of them fails a step:

- a step whose runs spent its budget (`[brakes] step_budget_usd`, `step_budget_tokens`, or
  the same keys in its `brakes:`) is held for a person (review: budget), with the budget and
  the spend in its reason; a person's approve (or reject with guidance) lets it go on for one
  attempt (`budget_waived`), raising the budget lets it go on for good;
- the plan whose runs spent `[brakes] plan_budget_usd` halts the queue
  (`budget_exceeded:plan ...`), the step given back with nothing spent;
- a run that ended on the provider's usage or rate limit gives the step back with no attempt
  spent and no failure recorded, not before the reset its CLI named (else `[brakes]
  limit_wait`), and pauses the account it spent until then on every host.
"""

from __future__ import annotations

from runner.core.agentoutput import reset_or_wait
from runner.core.machine import BUDGET_HALT, REVIEW_BUDGET, Kind
from runner.core.model import format_time, utc_now
from runner.core.usage import Spend
from runner.worker.attempt import Outcome, State
from runner.worker.executor import RunResult


def attempt_spend(state: State) -> Spend:
    """What this attempt's agent runs spent so far."""
    spend = Spend()
    for run in state.runs:
        spend = spend.add(run.usage)
    return spend


def over_budget(state: State) -> Outcome | None:
    """The outcome when the plan's or the step's budget is spent (None: the next agent run may start)."""
    brakes = state.config.brakes
    if brakes.step_budget_usd is None and brakes.step_budget_tokens is None and brakes.plan_budget_usd is None:
        return None
    now = attempt_spend(state)
    plan = round(state.plan_usd_before + now.usd, 6)
    if brakes.plan_budget_usd is not None and plan >= brakes.plan_budget_usd:
        said = f"plan ${plan:.2f} spent of its ${brakes.plan_budget_usd:.2f} budget ([brakes] plan_budget_usd)"
        return Outcome(
            Kind.RELEASE,
            reason=f"budget: the {said}; the queue is halted (raise it, then runner resume)",
            halt=f"{BUDGET_HALT}{said}",
        )
    if state.step.meta.get("budget_waived"):  # a person let it go on over its budget, for this attempt
        return None
    step = state.usage_before.plus(now)
    crossed = []
    if brakes.step_budget_usd is not None and step.usd >= brakes.step_budget_usd:
        crossed.append(f"${step.usd:.4f} spent of its ${brakes.step_budget_usd:.2f} budget (step_budget_usd)")
    if brakes.step_budget_tokens is not None and step.tokens >= brakes.step_budget_tokens:
        crossed.append(f"{step.tokens:,} tokens spent of its {brakes.step_budget_tokens:,} (step_budget_tokens)")
    if not crossed:
        return None
    return Outcome(
        Kind.BLOCK,
        review=REVIEW_BUDGET,
        reason=f"budget: the step's agent runs {' and '.join(crossed)}; {step.describe()}. Held for a "
        "person: runner approve lets it go on for one attempt; raising the budget, for good",
    )


def limited(state: State, what: str, result: RunResult) -> Outcome:
    """A run that ended on a provider's limit: give the step back, no attempt spent, and pause
    its account until the reset."""
    now = utc_now()
    until = reset_or_wait(result.limit, now, state.config.brakes.limit_wait)
    account = result.account or "command"
    said = "named by it" if result.limit.resets_at is not None else "no reset named: [brakes] limit_wait"
    return Outcome(
        Kind.RELEASE,
        retry_at=until,
        account=account,
        reason=f"{what} hit a limit of account {account}: {result.limit.words} (no attempt spent; the "
        f"account is paused until {format_time(until)}, {said})",
    )
