"""The heartbeat of a running step: moves the worker's heartbeat ref every lease/3 and
checks, more often, that the claim still holds (an abort or a takeover stops the run)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from runner.core.machine import holds
from runner.queue.queue import Queue

CLAIM_CHECK_INTERVAL = 5.0  # seconds between checks that the running step's claim still holds


class Heartbeat(threading.Thread):
    def __init__(self, queue: Queue, worker: str, step_id: str, attempt: int, incarnation: str,
                 interval: float, facts: Callable[[], dict[str, Any]], log: Callable[[str, str], None]):
        super().__init__(daemon=True, name=f"heartbeat-{step_id}")
        self.source = queue
        self.claim = queue.published  # the claim, even if the tracking ref lags
        self.worker, self.step_id, self.attempt, self.incarnation = worker, step_id, attempt, incarnation
        self.interval = interval
        self.facts = facts
        self.log = log
        self.stop = threading.Event()
        self.lost = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        last_beat = time.monotonic()  # the claim's push carried the first beat
        queue = None
        # The claim is checked more often than the heartbeat moves, so an abort stops the run quickly.
        while not self.stop.wait(min(self.interval, CLAIM_CHECK_INTERVAL)):
            try:
                if queue is None:
                    # pygit2 objects are not shared across threads: a handle of our own on the same
                    # repository, opened here, so a step done before the first check opens none.
                    queue = Queue(self.source.store.private(), branch=self.source.branch)
                    queue.published = self.claim
                if time.monotonic() - last_beat >= self.interval:
                    queue.beat(self.worker, self.facts())
                    last_beat = time.monotonic()
                step = queue.snapshot().plan.steps.get(self.step_id)
                why = "the step is gone" if step is None else holds(step.meta, self.worker, self.attempt, self.incarnation)
                if why:
                    self.error = f"claim of {self.step_id} attempt {self.attempt} was lost: {why}"
                    self.lost.set()
                    return
            except Exception as exc:  # a flaky remote must not kill the run: the lease decides
                self.error = f"heartbeat failed: {exc}"
                self.log("ERROR", self.error)
