"""The audit trail: the queue branch's commits as events, newest first, with the runs each
record lists."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from runner.core.codec import CodecError, decode, trailers_of
from runner.core.machine import Kind
from runner.core.model import format_time
from runner.store import Store


def log(store: Store, tip: str, step_id: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    entries = []
    for info in store.workspace().log(tip):
        entry = log_entry(info.id, info.message, info.author, info.time)
        if (
            step_id
            and entry["step"] != step_id
            and not any(p.endswith(f"/{step_id}.md") for p in store.changed_paths(info.id))
        ):
            continue
        entries.append(entry)
        if limit and len(entries) >= limit:
            break
    return entries


def log_entry(commit: str, message: str, author: str, when: int) -> dict[str, Any]:
    """One commit of the queue branch as `runner log` shows it, with the runs it recorded."""
    try:
        decoded = decode(message)
        event = decoded.event
    except CodecError:
        event, decoded = None, None
    trailers = decoded.trailers if decoded else trailers_of_quietly(message)
    return {
        "commit": commit,
        "time": format_time(datetime.fromtimestamp(when).astimezone()),
        "author": author,
        "event": str(event.kind) if event else trailers.get("Event", "edit"),
        "step": event.step if event else trailers.get("Step"),
        "actor": event.actor if event else trailers.get("Actor", trailers.get("Worker", author)),
        "attempt": event.attempt
        if event
        else (int(trailers["Attempt"]) if trailers.get("Attempt", "").isdigit() else None),
        "status": decoded.status if decoded else trailers.get("Status"),
        "reason": event.reason if event and event.kind != Kind.EDIT else None,
        "runs": list(event.runs) if event else [],
        "subject": message.split("\n", 1)[0],
    }


def trailers_of_quietly(message: str) -> dict[str, str]:
    try:
        return trailers_of(message)
    except CodecError:
        return {}


def touched_outside(store: Store, snap: Any) -> list[str]:
    """What a step really touched against what it declared: for each step with `touches:`, the
    files its last attempt changed (its handoff's files_changed) that no glob covers, one line
    a step (`runner validate` warns with them)."""
    from runner.core.layout import handoff_path
    from runner.core.stepfile import load_yaml, split_frontmatter
    from runner.core.touches import outside

    warnings = []
    for step in sorted(snap.plan.steps.values(), key=lambda s: s.id):
        globs = step.get("touches")
        data = store.file_at(snap.tip, handoff_path(step.path)) if globs else None
        parts = split_frontmatter(data.decode("utf-8", "replace")) if data else None
        try:
            meta = load_yaml(parts[0]) if parts else None
        except (ValueError, RecursionError):
            continue  # a handoff that does not read says nothing
        if not isinstance(meta, dict):
            continue
        files = meta.get("files_changed")
        if isinstance(files, list) and (stray := outside(globs, [str(f) for f in files])):
            shown = ", ".join(stray[:10]) + (f" and {len(stray) - 10} more" if len(stray) > 10 else "")
            warnings.append(
                f"{step.path}: its last attempt (handoff of attempt {meta.get('attempt')}) changed files outside its "
                f"touches: {shown}"
            )
    return warnings
