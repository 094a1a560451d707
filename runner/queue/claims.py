"""Which step a worker claims: the claims whose holder this host judges gone, then the ready
steps it may take, best first (priority, then id); and, when there is none, why."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from datetime import datetime

from runner.core.accounts import held_by_pause
from runner.core.machine import Kind
from runner.core.model import Status, Step, format_time, utc_now
from runner.core.plan import SELF_SERVE, claimable, lacking_tags, sort_key
from runner.queue.leases import LeaseObserver
from runner.queue.snapshot import Snapshot


def candidates(
    observer: LeaseObserver,
    snap: Snapshot,
    worker: str,
    incarnation: str,
    tags: list[str],
    now: datetime,
    step_id: str | None = None,
    ignore_deps: bool = False,
    spread: bool = False,
    by_agent: bool = False,
):
    """(step, claim | takeover, reason), best first (with `spread`, spread by worker id among
    equals). `by_agent`: the claimer is an agent you run yourself (`runner work`, `runner mcp`),
    the only one that takes a step with `agent: self`."""
    plan = snap.plan
    holders = plan.touch_holders() if snap.config.queue.touches_exclusive else []  # touches: never run at once
    paused = pause_hold(snap, now)  # a step that would run a paused account's command waits for its reset
    if step_id is not None:
        step = plan.steps.get(step_id)
        if step is not None and not barriers(snap, step, tags, ignore_deps, by_agent):
            yield step, Kind.CLAIM, None
            return
    # Leases are judged only on a fetched view: heartbeats read without a fetch may be stale,
    # and a stale beat would look like a silent holder.
    claimed = list(plan.with_status(Status.CLAIMED)) if snap.fetched else []
    # Observe every claim (the observations are shared by all workers on this host), then
    # keep those this worker may take over.
    expired = observer.expired_claims(claimed, snap.beats, snap.config.leases.lease) if claimed else {}
    for step in claimed:
        if step.holder.get("incarnation") == incarnation:
            # A worker claims only between steps: a claim of its own incarnation now was
            # dropped by an earlier tick that could not record (the remote was down, say).
            expired[step.id] = "abandoned by an earlier tick of this worker"
    takeovers = sorted(
        (
            (plan.steps[sid], Kind.TAKEOVER, why)
            for sid, why in expired.items()
            if (step_id is None or sid == step_id) and not _not_for(plan.steps[sid], tags, by_agent)
        ),
        key=lambda item: sort_key(item[0]),
    )
    if step_id is not None:
        yield from takeovers
        return
    # A step whose holder is gone goes first: it was started before any ready step, and on a
    # busy queue it would otherwise wait for the plan to drain.
    yield from takeovers
    max_backoff = snap.config.leases.backoff_cap * 1.25 + 60  # beyond any backoff runner writes, plus jitter
    ready = (
        (step, Kind.CLAIM, None)
        for step in plan.iter_ready(now, tags, max_backoff=max_backoff)
        if not plan.held_back(step, holders, by_agent) and not (paused and paused(step))
    )
    yield from spread_out(ready) if spread else ready


def barriers(
    snap: Snapshot, step: Step, tags: list[str], ignore_deps: bool = False, by_agent: bool = False
) -> list[str]:
    """Why this claimer cannot claim `step`, named by a person (`runner claim STEP`), now:
    each reason that holds, as "STEP <reason>" reads; [] when it can. A STEP named is taken
    even while it backs off after a failure (a person asked for it)."""
    plan = snap.plan
    status = plan.derived_status(step)
    if status == Status.CLAIMED:
        return [f"is claimed by {step.assignee} (attempt {step.attempt})"]
    if status not in (Status.READY, "waiting", "blocked"):
        return [f"is {status}"]
    reasons = _not_for(step, tags, by_agent)
    if status != Status.READY and not ignore_deps:
        late = [d for d in step.depends_on if d not in plan.steps or plan.steps[d].status != Status.DONE]
        failed = [d for d in late if d not in plan.steps or plan.steps[d].status == Status.FAILED]
        waits = f"waits for {', '.join(late)}" + (f" ({', '.join(failed)} failed or missing)" if failed else "")
        reasons.append(f"{waits} (a person may run it anyway: --ignore-deps --by NAME)")
    if not reasons and (why := held_back(snap, step, by_agent)):
        reasons.append(f"is held back: {why}")
    return reasons


def _not_for(step: Step, tags: list[str], by_agent: bool) -> list[str]:
    """What keeps this claimer from a step whatever its state: the tags it lacks, an `agent: self` it is not."""
    reasons = []
    if missing := lacking_tags(step, tags):
        reasons.append(
            f"needs tag{'s' if len(missing) > 1 else ''} {', '.join(missing)} (this claimer has "
            f"{', '.join(tags) or 'none'}: --tag {' --tag '.join(missing)})"
        )
    if step.self_serve and not by_agent:
        reasons.append(f"is {SELF_SERVE}")
    return reasons


def why_nothing(
    snap: Snapshot, tags: list[str], step_id: str | None, ignore_deps: bool = False, by_agent: bool = False
) -> str:
    plan = snap.plan
    now = utc_now()
    if step_id:
        step = plan.find(step_id)
        if step is None:
            return f"no step {step_id!r}"
        reasons = barriers(snap, step, tags, ignore_deps, by_agent) if step.valid else ["is invalid"]
        return f"{step_id} {', and '.join(reasons) or 'cannot be claimed now'}"
    counts: dict[str, int] = {}
    for step in [*plan.steps.values(), *plan.invalid]:
        status = plan.derived_status(step)
        counts[status] = counts.get(status, 0) + 1
    backing_off = [s for s in plan.ready(now, tags, include_backoff=True) if not claimable(s, tags, now)]
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no steps"
    if backing_off:
        summary += f"; {len(backing_off)} backing off"
    holders = plan.touch_holders() if snap.config.queue.touches_exclusive else []
    held = [s for s in plan.ready(now, tags) if plan.held_back(s, holders, by_agent)]
    if touching := [s for s in held if by_agent or not s.self_serve]:
        summary += f"; {len(touching)} held back by touches (`runner ready` says why)"
    if for_agents := len(held) - len(touching):
        summary += f"; {for_agents} for an agent you run yourself (agent: self)"
    if (paused := pause_hold(snap, now)) and (waiting := [s for s in plan.ready(now, tags) if paused(s)]):
        accounts = ", ".join(f"{a} until {format_time(p.until)}" for a, p in sorted(snap.pauses(now).items()))
        summary += f"; {len(waiting)} held back by a paused account ({accounts})"
    return f"nothing ready ({summary})"


def held_back(snap: Snapshot, step: Step, by_agent: bool = False) -> str | None:
    """Why a ready step is not for this claimer now: Plan.held_back (agent: self, touches) under
    this queue's runner.toml, or an account it would spend that a provider's limit paused."""
    touched = snap.plan.held_back(
        step, snap.plan.touch_holders() if snap.config.queue.touches_exclusive else None, by_agent
    )
    paused = pause_hold(snap, utc_now())
    return touched or (paused(step) if paused else None)


def pause_hold(snap: Snapshot, now: datetime) -> Callable[[Step], str | None] | None:
    """Why a step waits for a paused account (None when no account is paused): it would run a
    command of that account (its implement or a role, under its own config)."""
    pauses = snap.pauses(now)
    if not pauses:
        return None

    def why(step: Step) -> str | None:
        step = step.full()
        return held_by_pause(snap.config.for_step(step.meta), step.get("run"), step.text, pauses)

    return why


def spread_out(ready: Iterable[tuple[Step, Kind, str | None]]):
    """After a lost race, racers that would all take the same best step again spread over
    the next few steps of the same priority instead."""
    ready = iter(ready)
    first = next(ready, None)
    if first is None:
        return
    group = [first]
    for item in ready:
        if item[0].priority != first[0].priority or len(group) >= 8:
            rest = item
            break
        group.append(item)
    else:
        rest = None
    start = random.randrange(len(group)) if len(group) > 1 else 0
    # heapq.merge needs sorted input: the spread group keeps its sort keys, only the first pick moves.
    yield group[start]
    yield from (item for index, item in enumerate(group) if index != start)
    if rest is not None:
        yield rest
        yield from ready
