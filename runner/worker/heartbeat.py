"""The heartbeat of a running step: moves the worker's heartbeat ref every lease/3 and
checks, more often, that the claim still holds (an abort or a takeover stops the run)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from runner.core.machine import holds
from runner.queue.queue import Queue

CLAIM_CHECK_INTERVAL = 5.0  # seconds between checks that the running step's claim still holds


class Heartbeat(threading.Thread):
    def __init__(
        self,
        queue: Queue,
        worker: str,
        step_id: str,
        attempt: int,
        incarnation: str,
        interval: float,
        facts: Callable[[], dict[str, Any]],
        log: Callable[[str, str], None],
        live_every: float | None = None,
        output: Callable[[], dict[str, Any]] | None = None,
    ):
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
        # The step's output tail rides on the beats; while the output grows they move every
        # `live_every` (one small ref update, no queue commit), else every `interval`.
        self.live_every = live_every if output is not None else None
        self.output = output
        self.sent: tuple[Any, Any] | None = None  # (run, output_bytes) of the last beat

    def run(self) -> None:
        last_beat = last_check = time.monotonic()  # the claim's push carried the first beat
        check_every = min(self.interval, CLAIM_CHECK_INTERVAL)
        queue = None
        # The claim is checked more often than the heartbeat moves, so an abort stops the run quickly.
        while not self.stop.wait(min(check_every, self.live_every or check_every)):
            try:
                if queue is None:
                    # pygit2 objects are not shared across threads: a handle of our own on the same
                    # repository, opened here, so a step done before the first check opens none.
                    queue = Queue(self.source.store.private(), branch=self.source.branch)
                    queue.published = self.claim
                output = self.output() if self.output is not None else {}
                since = time.monotonic() - last_beat
                grew = (
                    self.live_every is not None
                    and since >= self.live_every
                    and self.sent != (output.get("run"), output.get("output_bytes"))
                )
                if since >= self.interval or grew:
                    queue.beat(self.worker, {**self.facts(), **output})
                    last_beat, self.sent = time.monotonic(), (output.get("run"), output.get("output_bytes"))
                if time.monotonic() - last_check < check_every:
                    continue
                last_check = time.monotonic()
                step = queue.snapshot().plan.steps.get(self.step_id)
                why = (
                    "the step is gone"
                    if step is None
                    else holds(step.meta, self.worker, self.attempt, self.incarnation)
                )
                if why:
                    self.error = f"claim of {self.step_id} attempt {self.attempt} was lost: {why}"
                    self.lost.set()
                    return
            except Exception as exc:  # noqa: BLE001 (a flaky remote must not kill the run: the lease decides)
                self.error = f"heartbeat failed: {exc}"
                self.log("ERROR", self.error)
