"""A running step's output, read from a clone: its holder's heartbeat carries the tail (and
which run it is in) while the step runs; once it has ended, its handoff keeps the last
attempt's log tail. `runner logs` and the board read it here."""

from __future__ import annotations

import re
from typing import Any

from runner.core import secrets
from runner.core.codec import beat_output
from runner.core.errors import BadInput
from runner.core.layout import handoff_path
from runner.core.model import Status
from runner.queue.snapshot import Snapshot

_LOG_TAIL = re.compile(r"^## Log tail\n\n(`{3,})\n(.*?)\n\1$", re.MULTILINE | re.DOTALL)


def step_output(snap: Snapshot, step_id: str, read_file=None) -> dict[str, Any]:
    """What is known of a step's output: {step, status, attempt, worker, running, run, output,
    output_bytes, at}. While it runs: its holder's last heartbeat for this attempt (output is
    None until the holder has published one). Otherwise the log tail of its handoff, if any."""
    step = snap.plan.find(step_id)
    if step is None:
        raise BadInput(f"no step {step_id!r} (see `runner status`)")
    found = {
        "step": step.id,
        "status": snap.plan.derived_status(step),
        "attempt": step.attempt if step.valid else None,
        "worker": step.assignee,
        "running": step.status == Status.CLAIMED,
        "run": None,
        "output": None,
        "output_bytes": None,
        "at": None,
    }
    # Written scrubbed; scrubbed again as it is shown, for what an older runner or a hand wrote.
    scrubber = secrets.for_config(snap.config.secrets)
    if step.status == Status.CLAIMED:
        beat = snap.beats.get(step.assignee or "")
        info = beat.info if beat is not None else {}
        if (carried := beat_output(info, step.id, step.attempt)) is not None:
            found.update(
                run=carried.get("run"),
                output=scrubber.scrub(carried["output"]),
                output_bytes=carried.get("output_bytes"),
                at=info.get("at"),
            )
        return found
    if read_file is not None:
        data = read_file(handoff_path(step.path))
        match = _LOG_TAIL.search(data.decode("utf-8", "replace")) if data else None
        if match:
            found["output"] = scrubber.scrub(match.group(2)) + "\n"
    return found


def new_output(before: dict[str, Any] | None, now: dict[str, Any]) -> str:
    """What `now` adds to the output `before` showed (a follower prints only that). Heartbeats
    carry a bounded tail: when more was printed between two of them than a tail holds, a line
    says how much was not carried."""
    text = now.get("output") or ""
    if before is None or before.get("output") is None or before.get("attempt") != now.get("attempt"):
        return text
    grown = (now.get("output_bytes") or 0) - (before.get("output_bytes") or 0)
    if grown <= 0:
        return ""
    data = text.encode("utf-8")
    if grown > len(data):
        return f"[... {grown - len(data):,} bytes printed between two heartbeats were not carried ...]\n" + text
    return data[len(data) - grown :].decode("utf-8", "replace")


def rest_after(shown: str, final: str) -> str:
    """What `final` (the log tail a step's handoff keeps) has after the end of `shown` (what a
    follower printed while it ran): the last words a step printed after its last heartbeat."""
    for size in (400, 120, 40):
        end = shown[-size:]
        if len(end) >= min(size, len(shown)) and end and (at := final.rfind(end)) >= 0:
            return final[at + len(end) :]
    return ""
