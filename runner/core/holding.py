"""Who holds a step: the facts of a step file's claim, and the one fence every holder event
passes (the worker checks it before every publish, the hook on every holder event)."""

from __future__ import annotations

from typing import Any

from runner.core.model import Status


def status_of(meta: dict[str, Any]) -> Status:
    return Status(meta.get("status") or Status.READY)


def attempt_of(meta: dict[str, Any]) -> int:
    return int(meta.get("attempt") or 0)


def failures_of(meta: dict[str, Any]) -> int:
    return int(meta.get("failures") or 0)


def faults_in_a_row(meta: dict[str, Any]) -> int:
    return int(meta.get("faults_in_a_row") or 0)


def holds(meta: dict[str, Any], actor: str, attempt: int | None, incarnation: str | None = None) -> str | None:
    """None when `actor` (and `incarnation`) still holds `attempt` of this step; else why not.
    The one fence: the worker checks it before every publish, the hook on every holder event."""
    status = status_of(meta)
    if status != Status.CLAIMED:
        return f"the step is {status}, not claimed"
    if meta.get("assignee") != actor:
        return f"the step is held by {meta.get('assignee')!r}, not {actor!r}"
    if attempt is not None and attempt != attempt_of(meta):
        return (
            f"the step is at attempt {attempt_of(meta)}; attempt {attempt} was taken over and may not record anything"
        )
    held_by = (meta.get("holder") or {}).get("incarnation") if isinstance(meta.get("holder"), dict) else None
    if incarnation and held_by and incarnation != held_by:
        return f"the step is held by another incarnation of {actor} ({held_by})"
    return None


__all__ = ["attempt_of", "failures_of", "faults_in_a_row", "holds", "status_of"]
