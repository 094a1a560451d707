"""How long to wait: after a lost compare-and-swap (full jitter, a fraction of a second, and
no new attempt while the ref moves faster than one attempt takes), and before a failed step
may run again (exponential from [leases] backoff, with jitter)."""

from __future__ import annotations

import random
import time
from datetime import datetime, timedelta

from runner.core.config import Config
from runner.core.model import utc_now
from runner.store import Store

PACE_WALK = 256  # commits counted between two fetches at most (a second of a writer every 4 ms)
MAX_DEFERRAL = 2.0  # seconds in a row a claim that lost a race waits for the queue to slow down


def race_backoff(attempt: int, remote: bool, outpaced: bool = False) -> float:
    """Full-jitter exponential backoff for a lost compare-and-swap; while the ref moves faster
    than an attempt takes, at least half the cap (each look costs a fetch)."""
    base = 0.05 if remote else 0.005
    cap = min(1.0, base * (2**attempt))
    return random.uniform(cap / 2 if outpaced else 0, cap)


def retry_delay(config: Config, failures: int) -> float:
    """Delay before a failed step may run again: exponential from [leases] backoff, +-20 % jitter."""
    delay = min(config.leases.backoff_cap, config.leases.backoff * (2 ** max(failures - 1, 0)))
    return delay * random.uniform(0.8, 1.2)


def retry_at(config: Config, failures: int) -> datetime:
    """When a failed step may run again, rounded up to the second `not_before` is written to:
    truncated, a 2 s backoff could come out as 1 s or none."""
    moment = utc_now() + timedelta(seconds=retry_delay(config, failures))
    return moment + timedelta(microseconds=1_000_000 - moment.microsecond) if moment.microsecond else moment


class RefPace:
    """How often the queue's ref moves, from this process's fetches, against how long one of
    its own attempts takes (a fetch, building the change, a push). An attempt that takes
    80 ms cannot win against a writer that publishes every 50 ms (a worker recording one
    step and claiming the next in each push): it can only lose, and every loss costs a
    fetch, a rebuild and a push of the CPU that writer needs. A claim that lost a race
    waits, a fetch at a time, until the ref moves more slowly than that."""

    def __init__(self) -> None:
        self.fetch_seconds = 0.0  # how long the last fetch took
        self.attempt_seconds: float | None = None  # the last attempt: its fetch, build and push
        self.interval = 0.0  # seconds between the starts of the last two fetches
        self._last_fetch: float | None = None
        self._read: tuple[Store, str, str] | None = None  # what the last fetch moved, counted when asked
        self._moved: int | None = None

    def read(self, store: Store, before: str | None, after: str | None, started: float) -> None:
        """A fetch that began at `started` moved our view of the ref from `before` to `after`."""
        self.fetch_seconds = time.monotonic() - started
        self.interval = started - self._last_fetch if self._last_fetch is not None else 0.0
        self._last_fetch = started
        self._read = (store, before, after) if self.interval and before and after and before != after else None
        self._moved = None

    @property
    def moved(self) -> int:
        """Commits the last fetch brought (counted only after a lost race: most fetches never ask)."""
        if self._moved is None:
            self._moved = commits_since(*self._read) if self._read else 0
        return self._moved

    def attempted(self, seconds: float) -> None:
        """An attempt's build and push took `seconds`, after the fetch it was built on."""
        self.attempt_seconds = self.fetch_seconds + seconds

    def outpaced(self) -> bool:
        """Between the last two fetches the ref moved more often than one attempt lasts."""
        return (
            bool(self.moved) and self.attempt_seconds is not None and self.interval / self.moved < self.attempt_seconds
        )


class Deferral:
    """While the ref outpaces a claim, its tries are fetches, not pushes; but for MAX_DEFERRAL
    seconds in a row at most, then it pushes once: a writer that never pauses (a loop of legal
    claims and releases) must not keep every other claimer waiting for ever."""

    def __init__(self) -> None:
        self.since: float | None = None

    def wait(self, outpaced: bool, now: float) -> bool:
        if not outpaced:
            self.since = None
            return False
        if self.since is None:
            self.since = now
        if now - self.since < MAX_DEFERRAL:
            return True
        self.since = None
        return False


def commits_since(store: Store, old: str, new: str) -> int:
    """First-parent commits from `old` to `new` (up to PACE_WALK)."""
    count, oid = 0, new
    while oid != old and count < PACE_WALK:
        parents = store.commit(oid).parents
        count += 1
        if not parents:
            break
        oid = parents[0]
    return count
