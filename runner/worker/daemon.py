"""The daemon: loop ticks with a jittered sleep between idle ones. SIGTERM/SIGINT stops
claiming and lets the running step finish within the grace period, then releases it (a
second signal stops it at once); the worker then exits 0. A fault of runner itself makes
the worker back off, and several in a row stop it (exit 1): a broken install should not
spin through a queue."""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from filelock import Timeout

from runner.core.model import Status, utc_now
from runner.core.plan import claimable
from runner.queue import metrics, notices, stuck
from runner.queue.change import LostRace, PushRefused
from runner.queue.claims import pause_hold
from runner.queue.metrics import WorkerCounts
from runner.queue.snapshot import NotInitialised
from runner.store import StoreError
from runner.worker.report import TickOutcome, TickResult, skip
from runner.worker.tick import Worker, stop_on_signals

MAX_FAULTS_IN_A_ROW = 5  # faults of runner itself (a bug, a broken install); an unreachable remote is not one
MAX_ERRORS_ONCE = 6  # `--once`: ticks in a row that cannot reach the queue (backing off) before it gives up


class Daemon:
    def __init__(
        self,
        worker: Worker,
        interval: float | None = None,
        max_ticks: int = 0,
        once: bool = False,
        json_out: bool = False,
        fleet=None,
        metrics_file: Path | None = None,
        show: Callable[[TickResult], None] = lambda result: None,
    ):
        self.w = worker
        self.metrics_file = metrics_file  # `--metrics-file`: a host's own setting, never the queue's
        self.fleet = fleet  # a slot's loop (runner.worker.slots): the daemon holds the lock, the signals and the beat
        self.counts = fleet.counts if fleet is not None else WorkerCounts(worker.id)
        self.interval = interval
        self.max_ticks = max_ticks
        self.once = once
        self.json_out = json_out
        self.show = show  # how each tick's result is told (runner.commands.tickreport prints it)
        self.last_beat = 0.0

    def run(self) -> int:
        w = self.w
        try:
            w.lock.acquire(timeout=0)
        except Timeout:
            print(
                f"error: another `runner worker --id {w.id}` is already running on this repository (lock "
                f"{w.lock.lock_file})",
                file=sys.stderr,
            )
            return 2
        try:
            return self._loop()
        finally:
            w.release_held()
            self.beat("stopped")
            w.lock.release()

    def _loop(self) -> int:
        w = self.w
        config = self.config()
        if w.grace is None:
            w.grace = config.worker.grace_period if config else 30.0
        interval = self.interval if self.interval is not None else (config.worker.interval if config else 30.0)
        if self.fleet is None:
            stop_on_signals(w)
        w.log("START", f"incarnation {w.incarnation} pid {os.getpid()}")
        self.beat("idle")
        ticks = errors = faults = 0
        while not w.stopping.is_set():
            # The next step is claimed with this one's record only when the next tick follows at once.
            last = bool(self.max_ticks) and ticks + 1 >= self.max_ticks
            w.claim_ahead = not last and not (config and config.worker.step_delay)
            result = self.one_tick()
            self.show(result)
            if self.once and not self.json_out and result.step is not None:
                self.progress()
            ticks += 1
            errors = errors + 1 if result.failed_inside else 0
            faults = faults + 1 if result.outcome == TickOutcome.FAULT else 0
            if self.once and errors >= MAX_ERRORS_ONCE:
                w.log("STOP", f"{errors} ticks in a row could not reach the queue; the last: {result.reason}")
                print(
                    f"error: {errors} ticks in a row could not reach the queue; stopping (the last: {result.reason})",
                    file=sys.stderr,
                )
                return 1
            if faults >= MAX_FAULTS_IN_A_ROW:
                w.log("STOP", f"{faults} faults of runner in a row; the last: {result.reason}")
                print(
                    f"error: {faults} ticks in a row failed inside runner; stopping (the last: {result.reason})",
                    file=sys.stderr,
                )
                return 1
            if self.max_ticks and ticks >= self.max_ticks:
                break
            if result.idle:
                if result.outcome != TickOutcome.NO_QUEUE:
                    self.tell_stuck()
                if self.once and (result.outcome == TickOutcome.NO_QUEUE or self.drained()):
                    self.say_left()
                    break
                self.idle_beat()
                # Errors back off exponentially (a broken remote, a bug), idle ticks by the interval.
                pause = interval if not errors else min(interval * 2**errors, 600)
                self.wait_idle(pause * random.uniform(0.8, 1.2), None if errors or not config else config.worker.watch)
            elif config and config.worker.step_delay:
                w.stopping.wait(config.worker.step_delay)
        w.log("STOP", f"after {ticks} ticks")
        return 0

    def wait_idle(self, pause: float, watch: float | None) -> None:
        """Wait `pause` before the next idle tick, or less: every `watch` seconds ask the queue's
        home where the queue branch is (a remote's ref advertisement, no fetch; without a remote,
        the ref itself) and return as soon as it moved (a step added, approved or given back).
        Expired claims are still looked for at the interval: they show in heartbeats, which only a
        fetch reads."""
        w = self.w
        if not watch or watch >= pause:
            w.stopping.wait(pause)
            return
        deadline = time.monotonic() + pause
        known = w.store.tip(w.queue.branch)
        while (left := deadline - time.monotonic()) > 0:
            if w.stopping.wait(min(left, watch * random.uniform(0.8, 1.2))):
                return
            try:
                if w.store.remote_tip(w.queue.branch) != known:
                    return
            except StoreError:
                return  # the tick reaches the remote, or says why it cannot

    def one_tick(self) -> TickResult:
        started, refused = time.monotonic(), False
        result = None
        try:
            result = self.w._tick()
            return result
        except (StoreError, PushRefused, LostRace) as exc:
            self.w.log("ERROR", str(exc))
            refused = isinstance(exc, PushRefused)
            result = skip(self.w.id, str(exc), outcome=TickOutcome.ERROR)
            return result
        finally:
            self.w.ticks += 1
            if result is not None:
                self.counts.tick(result, time.monotonic() - started, refused)
                self.write_metrics()

    def write_metrics(self) -> None:
        """`--metrics-file`: the queue as this tick left it and what this worker did, in
        Prometheus' text format (runner.queue.metrics); a path it cannot write is a warning."""
        if (path := self.metrics_file) is None:
            return
        try:
            snap = self.w.queue.snapshot(fetch=False)
        except (NotInitialised, StoreError):
            return
        queues = [s.queue for s in self.fleet.slots] if self.fleet is not None else [self.w.queue]
        text = metrics.render(metrics.queue_families(snap) + self.counts.families(sum(q.races_lost for q in queues)))
        try:
            metrics.write(path, text)
        except OSError as exc:
            self.w.log("WARN", f"could not write the metrics file {path}: {exc}")
            print(f"warning: could not write the metrics file {path}: {exc.strerror or exc}", file=sys.stderr)

    def progress(self) -> None:
        """One line after each step of a drain: how far the plan is."""
        try:
            plan = self.w.queue.snapshot(fetch=False).plan
        except (NotInitialised, StoreError):
            return
        counts = plan.status_counts()
        done = counts.pop(Status.DONE, 0)
        rest = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        print(f"progress: {done}/{len(plan.steps)} done" + (f", {rest}" if rest else ""), flush=True)

    def config(self):
        try:
            return self.w.queue.snapshot().config
        except (NotInitialised, StoreError):
            return None

    def beat(self, state: str) -> None:
        if self.fleet is not None:
            return
        try:
            self.w.queue.beat(self.w.id, self.w.facts(state))
            self.last_beat = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - liveness is best effort; the lease decides
            self.w.log("ERROR", f"heartbeat ({state}) failed: {exc}")

    def idle_beat(self) -> None:
        """An idle daemon still shows up in `runner workers`, at the heartbeat's pace."""
        if time.monotonic() - self.last_beat >= max(self.w.lease / 3, 1.0):
            self.beat("idle")

    def drained(self) -> bool:
        """No step is ready (even backing off, but not waiting for a paused account's reset) or
        running: nothing more can happen without a person, an agent you run yourself or the
        reset. A queue that cannot be read now is not drained: a claim of ours may be left on it."""
        try:
            snap = self.w.queue.snapshot()
        except NotInitialised:
            return True
        except StoreError:
            return False
        plan = snap.plan
        if plan.halted:
            return True
        paused = pause_hold(snap, utc_now())
        # a step for an agent you run yourself (agent: self), or with tags this worker lacks, is never its to run
        return not any(
            status == Status.CLAIMED
            or status == Status.READY
            and not s.self_serve
            and not (paused and paused(s))
            and claimable(s, self.w.tags)
            for s in plan.steps.values()
            if (status := plan.derived_status(s)) in (Status.READY, Status.CLAIMED)
        )

    def say_left(self) -> None:
        """`--once` exits: what it leaves behind and why, one line per reason (runner.queue.stuck)."""
        if self.fleet is not None and self.w is not self.fleet.main:
            return  # the daemon says it once
        try:
            snap = self.w.queue.snapshot(fetch=False)
        except (NotInitialised, StoreError):
            return
        for line in stuck.grouped(stuck.left_behind(snap, self.w.tags)):
            self.w.log("LEFT", line)
            if not self.json_out:
                print(line, flush=True)

    def tell_stuck(self) -> None:
        """An idle tick: a "stuck" notice for each step newly stuck (once per host, runner.queue.stuck)."""
        if self.fleet is not None and self.w is not self.fleet.main:
            return  # the daemon tells it once
        try:
            snap = self.w.queue.snapshot(fetch=False)
            fresh = stuck.newly_stuck(self.w.store.state_dir, stuck.stuck_steps(snap))
            if fresh:
                self.w.log("STUCK", "; ".join(f"{step}: {why}" for step, why in fresh.items()))
                if (found := stuck.notices(snap, self.w.queue.branch, fresh)) and notices.opted_in(self.w.store):
                    notices.send(self.w.store, snap.config.notify, found)
        except Exception as exc:  # noqa: BLE001 - a notice never stops a worker
            self.w.log("ERROR", f"could not tell of stuck steps: {exc}")
