"""What a publish is made of and comes to: a Change (the files and refs one compare-and-swap
writes), a Published change, and the ways a publish does not happen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runner.core.errors import EXIT_NOTHING, RunnerError
from runner.core.machine import Event
from runner.store import RefUpdate

if TYPE_CHECKING:
    from runner.queue.snapshot import Snapshot


class Skip(RunnerError):
    """Nothing to do this time, with the reason (a tick exits 0; `runner claim` exits 3)."""

    exit_code = EXIT_NOTHING


class LostRace(RunnerError):
    """Every compare-and-swap attempt lost to another writer."""


class ClaimLost(RunnerError):
    """The claim went away (taken over, aborted): the holder may not record anything."""


class PushRefused(RunnerError):
    """The remote's hook refused the push: a protocol violation, never retried."""


@dataclass
class Change:
    """What one publish writes: a queue commit (files + message) and the other refs it moves."""

    files: dict[str, bytes | None]
    message: str
    event: Event | None = None
    status: str | None = None
    updates: dict[str, Any] = field(default_factory=dict)
    refs: list[RefUpdate] = field(default_factory=list)
    note: Any = None  # what the builder wants to hand back to its caller (a merge conflict, say)


@dataclass
class Published:
    commit: str
    change: Change
    snapshot: Snapshot  # the snapshot the change was built on
    then: Published | None = None  # the change published after it in the same push (a worker's next claim)

    @property
    def event(self) -> Event:
        """The step event it recorded (a step's transition always records one)."""
        if self.change.event is None:
            raise LookupError(f"{self.commit[:10]} recorded no event")
        return self.change.event

    @property
    def step(self) -> str:
        return _given(self.event.step, "step", self)

    @property
    def attempt(self) -> int:
        return _given(self.event.attempt, "attempt", self)


def _given(value: Any, what: str, published: Published) -> Any:
    if value is None:
        raise LookupError(f"the event of {published.commit[:10]} names no {what}")
    return value
