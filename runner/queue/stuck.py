"""A stuck queue, said out loud: the steps that wait for something no live worker will do.

A step is stuck when it is ready (its dependencies done) but no live worker can take it (it
needs tags that no live worker's heartbeat names, or its account is paused by a provider's
limit until a reset), or when it waits for a dependency that failed for good (or is missing),
which only a person can change. `runner ready`, `runner status`, the board's needs-you list
and a "stuck" notice name each with why; a `runner worker --once` that can take nothing more
exits and says what it left (`left`).

Live workers are those whose heartbeat is alive or late and not stopped. A heartbeat that
names no tags (written by an older runner, an agent's session) could take anything: nothing is
called stuck for want of tags while one beats. With no live worker at all, a step with tags is
stuck (it needs a worker of its own kind to start) and one without is not: whichever worker
starts next takes it."""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

from runner.core.model import Status, Step, utc_now
from runner.core.plan import claimable
from runner.queue.claims import pause_hold
from runner.queue.snapshot import Snapshot
from runner.queue.workers import liveness

STATE_FILE = "stuck-notified.json"  # this host's last stuck steps told in a notice


def live_tags(snap: Snapshot) -> dict[str, frozenset[str] | None]:
    """worker -> its tags (None: not known, it may take anything), for the live workers."""
    found: dict[str, frozenset[str] | None] = {}
    for worker, beat in snap.beats.items():
        info = beat.info
        if info.get("state") == "stopped":
            continue
        if liveness(info, float(info.get("lease") or snap.config.leases.lease)) == "gone":
            continue
        tags = info.get("tags")
        found[worker] = frozenset(str(t) for t in tags) if isinstance(tags, list) else None
    return found


def _tags_why(step: Step, workers: dict[str, frozenset[str] | None]) -> str | None:
    if not step.tags or any(t is None or claimable(step, t) for t in workers.values()):
        return None
    need = ", ".join(sorted(step.tags))
    have = "; ".join(f"{w}: {', '.join(sorted(t or ())) or 'no tags'}" for w, t in sorted(workers.items())) or "none is"
    return f"needs tag{'s' if len(step.tags) > 1 else ''} {need}, which no live worker has ({have})"


def _dependency_why(snap: Snapshot, step: Step) -> str | None:
    plan = snap.plan
    gone = [d for d in step.depends_on if d not in plan.steps or plan.steps[d].status == Status.FAILED]
    if not gone:
        late = [
            d
            for d in step.depends_on
            if d in plan.steps
            and plan.steps[d].status == Status.READY
            and plan.derived_status(plan.steps[d]) == "blocked"
        ]
        return f"waits for {', '.join(late)}, blocked in turn" if late else None
    return f"waits for {', '.join(gone)}, failed for good or missing (runner retry, or edit its depends_on)"


def stuck_steps(snap: Snapshot, now: datetime | None = None) -> dict[str, str]:
    """step id -> why no live worker will take it, best first."""
    plan = snap.plan
    if plan.halted:
        return {}
    now = now or utc_now()
    workers = live_tags(snap)
    paused = pause_hold(snap, now)
    found: dict[str, str] = {}
    for step in sorted(plan.with_status(Status.READY), key=lambda s: s.id):
        status = plan.derived_status(step)
        if status == "blocked":
            why = _dependency_why(snap, step)
        elif status == Status.READY and not step.self_serve:
            why = _tags_why(step, workers) or (paused(step) if paused else None)
        else:
            why = None
        if why:
            found[step.id] = why
    return found


def left_behind(snap: Snapshot, tags: list[str], now: datetime | None = None) -> dict[str, str]:
    """step id -> why a worker with `tags` leaves it: the steps it cannot take that are not done."""
    plan = snap.plan
    now = now or utc_now()
    paused = pause_hold(snap, now)
    workers = live_tags(snap)
    found: dict[str, str] = {}
    for step in sorted(plan.with_status(Status.READY), key=lambda s: s.id):
        status = plan.derived_status(step)
        if status == "blocked":
            found[step.id] = _dependency_why(snap, step) or "blocked"
        elif status != Status.READY:
            continue
        elif step.self_serve:
            found[step.id] = "agent: self (an agent you run yourself takes it)"
        elif not claimable(step, tags):
            others = sorted(w for w, t in workers.items() if t is not None and claimable(step, t))
            found[step.id] = f"needs tag{'s' if len(step.tags) > 1 else ''} {', '.join(sorted(step.tags))}" + (
                f": {', '.join(others)} may take it" if others else ": no live worker has it"
            )
        elif paused and (why := paused(step)):
            found[step.id] = why
    return found


def grouped(left: dict[str, str]) -> list[str]:
    """`left: STEPS (WHY)` lines, one per reason."""
    by_why: dict[str, list[str]] = {}
    for step, why in left.items():
        by_why.setdefault(why, []).append(step)
    return [f"left: {', '.join(steps)} ({why})" for why, steps in by_why.items()]


def newly_stuck(state_dir, stuck: dict[str, str]) -> dict[str, str]:
    """The stuck steps this host has not told of yet (remembered in a file every worker on the
    host shares); a step no longer stuck is forgotten, so it is told again if it gets stuck again."""
    path = state_dir / STATE_FILE
    try:
        told = set(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        told = set()
    fresh = {step: why for step, why in stuck.items() if step not in told}
    if set(stuck) != told:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(sorted(stuck)))
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
    return fresh


def notices(snap: Snapshot, branch: str, fresh: dict[str, str]) -> list[dict[str, Any]]:
    """The "stuck" notices of the steps newly stuck ([notify] events)."""
    if "stuck" not in snap.config.notify.events:
        return []
    return [
        {
            "event": "stuck",
            "step": step,
            "title": snap.plan.steps[step].title,
            "status": Status.READY,
            "actor": "",
            "reason": why,
            "queue": branch,
            "commit": snap.tip,
            "message": f"{step} is stuck: {why}",
        }
        for step, why in fresh.items()
    ]
