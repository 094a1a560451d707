"""The step state machine: one pure function, shared by workers and the server hook.

No git, no clock, no I/O: everything a decision needs arrives in the Event
(including the observer's judgement that a lease expired, and a retry time the
caller computed with jitter). The result is the set of frontmatter keys to write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runner.core.model import format_time

EVENTS = (
    "claim",
    "takeover",
    "heartbeat",
    "release",
    "fail",
    "complete",
    "deviation",
    "approve",
    "reject",
    "retry",
    "abort",
)

# Events that only the holder of the current attempt may record.
HOLDER_EVENTS = ("heartbeat", "release", "fail", "complete", "deviation")


class TransitionError(Exception):
    """A transition the state machine refuses, with the reason."""


@dataclass(frozen=True)
class Event:
    kind: str
    attempt: int | None = None  # the fencing token the actor believes it holds
    incarnation: str | None = None
    holder: dict[str, Any] = field(default_factory=dict)
    lease: str | None = None
    reason: str | None = None
    result: dict[str, Any] | None = None
    retry_at: datetime | None = None  # not_before for a retryable failure/release
    permanent: bool = False
    deps_done: bool = True
    halted: bool = False
    default_max_attempts: int = 3
    metrics: dict[str, Any] | None = None  # scores / spent time the holder carries across attempts
    hold: bool = False  # complete, but a person must look (the automated review did not run)


def _status(meta: dict[str, Any]) -> str:
    return meta.get("status") or "ready"


def _attempt(meta: dict[str, Any]) -> int:
    return int(meta.get("attempt") or 0)


def _max_attempts(meta: dict[str, Any], event: Event) -> int:
    return int(meta.get("max_attempts") or event.default_max_attempts)


def _stamp(actor: str, now: datetime) -> dict[str, Any]:
    return {"last_updated": format_time(now), "last_updated_by": actor}


def _clear_claim() -> dict[str, Any]:
    return {"assignee": None, "claimed_at": None, "lease": None, "holder": None}


def _new_claim(meta: dict[str, Any], event: Event, actor: str, now: datetime) -> dict[str, Any]:
    holder = dict(event.holder)
    if event.incarnation:
        holder["incarnation"] = event.incarnation
    return {
        "status": "claimed",
        "assignee": actor,
        "claimed_at": format_time(now),
        "lease": event.lease,
        "attempt": _attempt(meta) + 1,
        "holder": holder or None,
        "not_before": None,
    }


def _check_holder(meta: dict[str, Any], event: Event, actor: str, step_id: str) -> None:
    if _status(meta) != "claimed":
        raise TransitionError(f"{step_id} is {_status(meta)}, not claimed: there is nothing to {event.kind}")
    if meta.get("assignee") != actor:
        raise TransitionError(f"{step_id} is held by {meta.get('assignee')!r}, not {actor!r}")
    if event.attempt is not None and event.attempt != _attempt(meta):
        raise TransitionError(
            f"{step_id} is at attempt {_attempt(meta)}; attempt {event.attempt} was taken over and may not record anything"
        )
    held_by = (meta.get("holder") or {}).get("incarnation")
    if event.incarnation and held_by and event.incarnation != held_by:
        raise TransitionError(f"{step_id} is held by another incarnation of {actor} ({held_by})")


def transition(meta: dict[str, Any], event: Event, actor: str, now: datetime, step_id: str = "step") -> dict[str, Any]:
    """Apply `event` by `actor` to a step's frontmatter; return the keys to write."""
    status = _status(meta)
    kind = event.kind
    if kind not in EVENTS:
        raise TransitionError(f"unknown event {kind!r}")
    if kind in HOLDER_EVENTS:
        _check_holder(meta, event, actor, step_id)
    updates = _transition(meta, event, actor, now, step_id, status, kind)
    if kind in HOLDER_EVENTS and kind != "heartbeat" and event.metrics:
        updates.update(event.metrics)
    return updates


def _transition(meta: dict[str, Any], event: Event, actor: str, now: datetime, step_id: str, status: str, kind: str) -> dict[str, Any]:

    if kind == "claim":
        if event.halted:
            raise TransitionError("the queue is halted (runner resume to continue)")
        if status != "ready":
            raise TransitionError(f"{step_id} is {status}, not ready")
        if not event.deps_done:
            raise TransitionError(f"{step_id} has dependencies that are not done")
        return {**_new_claim(meta, event, actor, now), **_stamp(actor, now)}

    if kind == "takeover":
        if event.halted:
            raise TransitionError("the queue is halted (runner resume to continue)")
        if status != "claimed":
            raise TransitionError(f"{step_id} is {status}: only a claimed step can be taken over")
        if event.attempt != _attempt(meta):
            raise TransitionError(f"takeover must name the attempt it replaces ({_attempt(meta)}), not {event.attempt}")
        lost = f"attempt {_attempt(meta)} by {meta.get('assignee')} lost its holder: {event.reason or 'lease expired'}"
        if _attempt(meta) >= _max_attempts(meta, event):
            return {"status": "failed", **_clear_claim(), "last_error": lost + "; attempts spent", **_stamp(actor, now)}
        return {**_new_claim(meta, event, actor, now), "last_error": lost, **_stamp(actor, now)}

    if kind == "heartbeat":
        return {}

    if kind == "release":
        return {
            "status": "ready",
            **_clear_claim(),
            "not_before": format_time(event.retry_at) if event.retry_at else None,
            "last_error": event.reason,
            **_stamp(actor, now),
        }

    if kind == "fail":
        spent = _attempt(meta) >= _max_attempts(meta, event)
        if event.permanent or spent:
            reason = event.reason or "failed"
            if spent and not event.permanent:
                reason += f" (attempt {_attempt(meta)} of {_max_attempts(meta, event)}: attempts spent)"
            return {"status": "failed", **_clear_claim(), "last_error": reason, "result": event.result, **_stamp(actor, now)}
        return {
            "status": "ready",
            **_clear_claim(),
            "not_before": format_time(event.retry_at) if event.retry_at else None,
            "last_error": event.reason or "failed",
            "result": event.result,
            **_stamp(actor, now),
        }

    if kind == "complete":
        to = "review" if meta.get("requires_approval") or event.hold else "done"
        last_error = event.reason if event.hold else None
        updates = {"status": to, **_clear_claim(), "result": event.result, "last_error": last_error, **_stamp(actor, now)}
        if to == "review":
            updates["review"] = "result"
        return updates

    if kind == "deviation":
        return {
            "status": "review",
            **_clear_claim(),
            "review": "deviation",
            "last_error": event.reason or "orient reported a major deviation from the plan",
            **_stamp(actor, now),
        }

    if kind == "approve":
        if status != "review":
            raise TransitionError(f"{step_id} is {status}, not in review")
        if meta.get("review") == "deviation":
            return {"status": "ready", "review": None, "approved": True, **_stamp(actor, now)}
        return {"status": "done", "review": None, "approved": True, **_stamp(actor, now)}

    if kind == "reject":
        if status != "review":
            raise TransitionError(f"{step_id} is {status}, not in review")
        if not event.reason:
            raise TransitionError("a rejection needs a reason (it is the feedback for the next attempt)")
        to = "failed" if event.permanent else "ready"
        return {"status": to, "review": None, "last_error": f"rejected by {actor}: {event.reason}", **_stamp(actor, now)}

    if kind == "retry":
        if status != "failed":
            raise TransitionError(f"{step_id} is {status}; only a failed step can be retried")
        return {"status": "ready", **_clear_claim(), "not_before": None, **_stamp(actor, now)}

    if kind == "abort":
        if status in ("done", "failed"):
            raise TransitionError(f"{step_id} is {status}: there is nothing to abort")
        reason = f"aborted by {actor}" + (f": {event.reason}" if event.reason else "")
        return {"status": "failed", **_clear_claim(), "review": None, "last_error": reason, **_stamp(actor, now)}

    raise TransitionError(f"unhandled event {kind!r}")  # pragma: no cover


def apply(meta: dict[str, Any], updates: dict[str, Any]) -> dict[str, Any]:
    """The frontmatter after a transition (None values are absent/null)."""
    merged = dict(meta)
    merged.update(updates)
    return merged
