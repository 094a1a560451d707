"""A person's decisions from the board, through the same queue calls as the CLI's approve,
reject, retry, abort, halt and resume (runner/commands/steps.py), as the person running the
board. The queue and its state machine decide; a refusal comes back as the CLI states it."""

from __future__ import annotations

from typing import Any

from runner.core.errors import BadInput, RunnerError
from runner.core.failure import failure_of
from runner.core.machine import Kind
from runner.queue import merging, review
from runner.queue.change import Published, Skip
from runner.queue.queue import Queue

STEP_ACTIONS = ("approve", "reject", "retry", "abort")
QUEUE_ACTIONS = ("halt", "resume")
NEEDS_REASON = ("reject", "abort", "halt")


def act(
    queue: Queue,
    actor: str,
    action: str,
    step: str | None,
    reason: str | None,
    comments: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Do one action; {"ok": True, "line": what the CLI prints} or {"ok": False, "error": ...}.
    A reject may carry comments on lines of the result (`runner reject --comment`'s)."""
    reason = (reason or "").strip()
    try:
        if action not in STEP_ACTIONS + QUEUE_ACTIONS:
            raise BadInput(f"unknown action {action!r} (actions: {', '.join(STEP_ACTIONS + QUEUE_ACTIONS)})")
        if action in STEP_ACTIONS and not step:
            raise BadInput(f"{action} needs a step")
        if comments and action != "reject":
            raise BadInput("only a rejection carries comments on lines")
        if action in NEEDS_REASON and not reason and not comments:
            raise BadInput(
                f"{action} needs a reason: "
                + ("your feedback is what the next attempt reads" if action == "reject" else "say why")
            )
        if action in QUEUE_ACTIONS:
            return {"ok": True, "line": _on_queue(queue, actor, action, reason)}
        published = (
            review.reject(queue, step or "", actor, reason, comments)
            if comments
            else _on_step(queue, actor, action, step or "", reason)
        )
    except RunnerError as exc:  # bad input; refused by the state machine, the hook, a lost race, the remote
        return {"ok": False, "error": failure_of(exc).text}
    event, change = published.change.event, published.change
    assert event is not None  # every step action is an event
    line = f"{event.kind} {event.step} (attempt {event.attempt}) -> {change.status}  [{published.commit[:10]}]"
    return {
        "ok": True,
        "line": line + (f": {event.reason}" if event.reason and action == "approve" else ""),
        "status": change.status,
    }


def _on_queue(queue: Queue, actor: str, action: str, reason: str) -> str:
    if action == "halt":
        queue.set_halt(reason, actor)
        return f"queue halted: {reason}"
    try:
        queue.set_halt(None, actor)
    except Skip as exc:
        return str(exc)
    return "queue resumed"


def _on_step(queue: Queue, actor: str, action: str, step: str, reason: str) -> Published:
    if action == "approve":
        return merging.approve(queue, step, actor)
    if action == "reject":
        return queue.event(step, Kind.REJECT, actor, reason=reason, permanent=False)
    if action == "retry":
        return queue.event(step, Kind.RETRY, actor)
    return queue.event(step, Kind.ABORT, actor, reason=reason)
