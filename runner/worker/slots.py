"""One daemon, several steps at once (`runner worker --slots N`): N slots, each a Worker of
the daemon's id with an incarnation of its own, its own worktrees and its own process trees,
each looping as a daemon does in a thread. The daemon holds the id's lock and the signals,
and moves ONE heartbeat ref carrying every slot's claim (a `claims` list, runner.core.codec);
each slot's heartbeat thread only checks that its claim still holds. SIGTERM stops every
slot from claiming and gives each running step the grace period, then releases it."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import Timeout

from runner.core.codec import beat_claims, decode_beat
from runner.core.errors import BadInput
from runner.queue.metrics import WorkerCounts
from runner.queue.queue import Queue
from runner.queue.snapshot import NotInitialised
from runner.store import StoreError
from runner.worker.daemon import Daemon
from runner.worker.report import TickResult
from runner.worker.tick import Worker, stop_on_signals

MAX_SLOTS = 64
CHECK_EVERY = 1.0  # seconds between looks at whether the heartbeat names what the slots run


def check_slots(slots: int) -> None:
    if not 1 <= slots <= MAX_SLOTS:
        raise BadInput(f"--slots must be a whole number from 1 to {MAX_SLOTS} (got {slots})")


class Fleet:
    """The daemon of `runner worker --slots N`."""

    def __init__(
        self,
        queue: Queue,
        worker_id: str,
        slots: int,
        tags: list[str] | None = None,
        log_file=None,
        grace: float | None = None,
        metrics_file: Path | None = None,
    ):
        check_slots(slots)
        self.metrics_file = metrics_file
        self.id = worker_id
        self.stopping = threading.Event()
        self.cancel = threading.Event()
        self.slots: list[Worker] = []
        for k in range(1, slots + 1):
            # pygit2 objects are not shared across threads: each slot reads the queue through its own handle
            w = Worker(Queue(queue.store.private(), branch=queue.branch), worker_id, tags, log_file, grace)
            w.incarnation = f"{w.incarnation}-{k}"
            w.own_worktrees = w.dirs["worktrees"] / worker_id / f"slot-{k}"
            w.stopping, w.cancel, w.fleet = self.stopping, self.cancel, self
            self.slots.append(w)
        self.main = self.slots[0]
        self.incarnation = self.main.incarnation.rsplit("-", 1)[0]
        self.beat_queue = Queue(queue.store.private(), branch=queue.branch)
        self.done = threading.Event()
        self.counts = WorkerCounts(worker_id)  # every slot's ticks, for --metrics-file
        self.bad: BadInput | None = None  # a slot's bad input (a sandbox that cannot run): the daemon's
        self.sent: dict[str, tuple[str | None, int]] = {}  # the running slots' progress the last beat carried

    # --- what stop_on_signals reads ------------------------------------------------------------

    @property
    def grace(self) -> float | None:
        return self.main.grace

    @property
    def running(self) -> str | None:
        return ", ".join(w.running for w in self.slots if w.running) or None

    def log(self, kind: str, message: str) -> None:
        self.main.log(kind, message)

    # --- the one heartbeat ---------------------------------------------------------------------

    def facts(
        self, asking: Worker | None, state: str, step: str | None = None, attempt: int | None = None
    ) -> dict[str, Any]:
        """The daemon's heartbeat: every slot's claim, `asking`'s as it says (none when `step` is None:
        it is recording or claiming, and the claim's push adds the new one)."""
        claims = []
        for w in self.slots:
            held = ((step, attempt) if step else None) if w is asking else w.current
            if held:
                claim = {"step": held[0], "attempt": held[1], "incarnation": w.incarnation}
                live = w.live
                if live is not None and held == w.current:
                    claim.update(live.facts())  # its run and output tail, as a one-step worker's beat carries them
                claims.append(claim)
        first = claims[0] if claims else {}
        last = next((w.last for w in self.slots if w.last), None)
        return {
            "state": "running" if claims else state,
            "step": first.get("step"),
            "attempt": first.get("attempt"),
            "incarnation": first.get("incarnation", self.incarnation),
            "claims": claims,
            "slots": len(self.slots),
            "pid": os.getpid(),
            "started": self.main.started,
            "process_started": self.main.holder.get("started"),
            "lease": max(w.lease for w in self.slots),
            "ticks": sum(w.ticks for w in self.slots),
            "last": (asking.last if asking else None) or last,
            "tags": self.main.tags,
        }

    def beat(self, state: str) -> None:
        try:
            sent = self.progress()
            self.beat_queue.beat(self.id, self.facts(None, state))
            self.sent = sent
        except Exception as exc:  # noqa: BLE001 - liveness is best effort; the lease decides
            self.log("ERROR", f"heartbeat ({state}) failed: {exc}")

    def progress(self) -> dict[str, tuple[str | None, int]]:
        """Each running slot's (run, bytes printed), by its incarnation."""
        return {w.incarnation: live.progress() for w in self.slots if (live := w.live) is not None}

    def beat_loop(self, interval: float, live_every: float | None) -> None:
        """Every `interval`; as soon as a slot runs a step the last beat did not name (a record
        push of another slot built before the claim landed); and every `live_every` while a
        running step's output grows ([worker] live_log, as for a one-step worker)."""
        last = time.monotonic()
        while not self.done.wait(CHECK_EVERY):
            since = time.monotonic() - last
            grew = live_every is not None and since >= live_every and self.progress() != self.sent
            if since >= interval or grew or self.beat_lags():
                self.beat("idle")
                last = time.monotonic()

    def beat_lags(self) -> bool:
        held = {(w.current[0], w.current[1], w.incarnation) for w in self.slots if w.current}
        try:
            commit = self.beat_queue.store.heartbeat(self.id)
            info = decode_beat(self.beat_queue.store.commit(commit).message) if commit else None
        except StoreError:
            return True
        named = {(c.get("step"), c.get("attempt"), c.get("incarnation")) for c in beat_claims(info or {})}
        # A step named that ended costs nothing until the next beat; a running one not named would
        # look silent. Every beat moves the ref the slots' claims and records move too: no more of them.
        return not held <= named

    # --- running -------------------------------------------------------------------------------

    def run(
        self,
        interval: float | None = None,
        max_ticks: int = 0,
        once: bool = False,
        json_out: bool = False,
        show: Callable[[TickResult], None] = lambda result: None,
    ) -> int:
        lock = self.main.lock
        try:
            lock.acquire(timeout=0)
        except Timeout:
            print(
                f"error: another `runner worker --id {self.id}` is already running on this repository (lock "
                f"{lock.lock_file})",
                file=sys.stderr,
            )
            return 2
        codes: list[int] = []
        try:
            try:
                config = self.main.queue.snapshot().config
            except (NotInitialised, StoreError):
                config = None
            for w in self.slots:
                if w.grace is None:
                    w.grace = config.worker.grace_period if config else 30.0
                w.lease = config.leases.lease if config else 0.0
            stop_on_signals(self)  # type: ignore[arg-type]  # what it reads, for every slot at once
            self.log("START", f"{len(self.slots)} slots, incarnation {self.incarnation} pid {os.getpid()}")
            self.beat("idle")
            beats = threading.Thread(
                target=self.beat_loop,
                daemon=True,
                name="fleet-heartbeat",
                args=(config.heartbeat_interval if config else 10.0, config.worker.live_log if config else None),
            )
            beats.start()
            threads = [
                threading.Thread(
                    target=self.slot_loop, name=f"slot-{k}", args=(w, codes, interval, max_ticks, once, json_out, show)
                )
                for k, w in enumerate(self.slots, 1)
            ]
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.5)  # the main thread stays free for the signals
            if self.bad is not None:
                raise self.bad
        finally:
            self.done.set()
            for w in self.slots:
                w.release_held()
            self.beat("stopped")
            lock.release()
        return max(codes, default=0)

    def slot_loop(self, w: Worker, codes: list[int], interval, max_ticks, once, json_out, show) -> None:
        try:
            code = Daemon(
                w,
                interval=interval,
                max_ticks=max_ticks,
                once=once,
                json_out=json_out,
                fleet=self,
                metrics_file=self.metrics_file,
                show=show,
            )._loop()
        except BadInput as exc:
            self.bad, code = exc, 2
        except Exception as exc:  # noqa: BLE001 - one slot's fault stops the daemon, whose other slots finish
            w.log("ERROR", f"slot stopped: {type(exc).__name__}: {exc}")
            code = 1
        finally:
            w.release_held()
        if code:
            self.stopping.set()
        codes.append(code)
