"""What an event writes: the files of its queue commit. The queue builds commits with
these functions and the server hook checks pushed commits with the same ones, comparing
the files byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.core.accounts import pause_after, pause_path
from runner.core.codec import encode
from runner.core.layout import HALT_FILE, NOTES_FILE, handoff_path
from runner.core.limits import MAX_NOTES_BYTES
from runner.core.machine import Context, Event, Kind, transition
from runner.core.model import Step
from runner.core.stepfile import set_fields, tick_checks

NOTES_HEADER = "\n## From step {step} (attempt {attempt})\n\n"


@dataclass(frozen=True)
class Written:
    """A step event's effect: the managed keys, the step's new text and status, the message."""

    updates: dict[str, Any]
    text: str
    status: str
    message: str


def write_step_event(step: Step, event: Event, context: Context) -> Written:
    """Apply `event` to `step` (TransitionError when the machine refuses it)."""
    step = step.full()
    updates = transition(step.meta, event, context)
    text = set_fields(step.text, updates)
    if event.kind == Kind.COMPLETE and event.ticked:
        text = tick_checks(text, set(event.ticked))
    status = str(updates["status"])
    return Written(updates, text, status, encode(event, status))


def notes_after(notes: bytes | None, event: Event) -> bytes | None:
    """plans/NOTES.md after a step appended its durable facts (None: unchanged)."""
    if not event.notes:
        return None
    text = (notes or b"").decode("utf-8", errors="replace")
    if text and not text.endswith("\n"):
        text += "\n"
    text += NOTES_HEADER.format(step=event.step, attempt=event.attempt) + event.notes.rstrip("\n") + "\n"
    return rolled(text).encode("utf-8")


TRIMMED = (
    "(Older notes were trimmed to keep this file under {kib} KiB: `git log -p plans/NOTES.md` on the queue "
    "branch has them.)\n"
)


def rolled(text: str) -> str:
    """NOTES.md within MAX_NOTES_BYTES: the oldest lines go first (it is a rolling file of facts;
    the queue's history keeps every version)."""
    data = text.encode("utf-8")
    if len(data) <= MAX_NOTES_BYTES:
        return text
    note = TRIMMED.format(kib=MAX_NOTES_BYTES // 1024).encode()
    kept = data[len(data) - (MAX_NOTES_BYTES - len(note)) :]
    kept = kept[kept.find(b"\n") + 1 :]  # from a whole line
    return (note + kept).decode("utf-8", "ignore")


def allowed_paths(event: Event, step_path: str | None) -> set[str]:
    """Every file a commit of this event may change."""
    if event.kind in (Kind.HALT, Kind.RESUME):
        return {HALT_FILE}
    paths = {step_path} if step_path else set()
    if event.spec.handoff and step_path:
        paths.add(handoff_path(step_path))
    if event.notes:
        paths.add(NOTES_FILE)
    if event.account and event.kind == Kind.RELEASE:
        paths.add(pause_path(event.account))
    return paths


def pause_file(before: bytes | None, event: Event) -> tuple[str, bytes] | None:
    """(path, bytes) of the account pause a release for a provider's limit writes, or None."""
    if not (event.account and event.kind == Kind.RELEASE and event.retry_at):
        return None
    return pause_path(event.account), pause_after(
        before, event.account, event.retry_at, event.reason, event.actor, event.step
    )


def side_files(event: Event, before: Callable[[str], bytes | None]) -> dict[str, bytes]:
    """The queue's files a step event writes beside its step file and handoff: plans/NOTES.md
    with its notes appended, an account's pause; `before(path)` reads a file as it was."""
    files = {}
    if (notes := notes_after(before(NOTES_FILE), event)) is not None:
        files[NOTES_FILE] = notes
    if event.account and (paused := pause_file(before(pause_path(event.account)), event)):
        files[paused[0]] = paused[1]
    return files


def halt_file(event: Event) -> bytes | None:
    """plans/HALT as a halt writes it (the reason), or None as a resume leaves it (removed)."""
    return ((event.reason or "halted").strip() + "\n").encode("utf-8") if event.kind == Kind.HALT else None


def context_for(config: Any, deps_done: bool, halted: bool) -> Context:
    """The machine's view of the plan around a step (`config` is a runner.core.config.Config)."""
    from runner.core.model import format_duration

    return Context(
        deps_done=deps_done,
        halted=halted,
        max_attempts=config.leases.max_attempts,
        requires_approval=config.queue.requires_approval,
        lease=format_duration(config.leases.lease),
    )
