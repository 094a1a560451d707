"""The schedulers runner knows, by name, and which one is this computer's."""

from __future__ import annotations

import sys

from runner.core.errors import BadInput
from runner.schedules.base import Scheduler
from runner.schedules.launchd import Launchd
from runner.schedules.schtasks import Schtasks
from runner.schedules.systemd import Systemd

SCHEDULERS: dict[str, Scheduler] = {s.name: s for s in (Systemd(), Launchd(), Schtasks())}
NAMES = tuple(SCHEDULERS)


def native() -> Scheduler | None:
    """This computer's scheduler, or None on a platform runner has none for."""
    return next((s for s in SCHEDULERS.values() if sys.platform.startswith(s.platform)), None)


def problem(name: str | None) -> str | None:
    """Why `name` (None: this computer's) names no scheduler, or None."""
    if name is None:
        return (
            None
            if native()
            else f"no scheduler for platform {sys.platform!r}: pass --os {', '.join(NAMES[:-1])} or {NAMES[-1]}"
        )
    return None if name in SCHEDULERS else f"unknown scheduler {name!r}: use {', '.join(NAMES[:-1])} or {NAMES[-1]}"


def get(name: str | None) -> Scheduler:
    """The scheduler called `name` (None: this computer's); BadInput when there is none."""
    if reason := problem(name):
        raise BadInput(reason)
    chosen = SCHEDULERS[name] if name is not None else native()
    assert chosen is not None  # problem() said there is one
    return chosen
