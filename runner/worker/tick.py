"""One tick: claim a step (the heartbeat rides in the same push), run its pipeline in a
fresh worktree, record the outcome with its merge in one publish, clean up. On the happy
path a tick with a remote costs one fetch and two pushes; a daemon that will tick again
right away claims its next ready step in the push that records this one (`claim_ahead`),
so on a busy queue its ticks cost one push each.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from runner.core.comments import feedback_of
from runner.core.config import Config
from runner.core.errors import BadInput, RunnerError
from runner.core.layout import DEFAULT_INTEGRATION_BRANCH
from runner.core.machine import REVIEW_BLOCKED, Kind, faults_in_a_row
from runner.core.model import Sentinel, Status, format_time, utc_now
from runner.core.usage import Spend, plan_spend
from runner.queue.change import ClaimLost, LostRace, Published, PushRefused, Skip
from runner.queue.leases import holder_info, new_incarnation
from runner.queue.queue import Queue
from runner.queue.snapshot import NotInitialised, Snapshot
from runner.store import StoreError
from runner.worker import report, resolving, sandbox, worktrees
from runner.worker.actions import Stops, Where, WorktreeActions
from runner.worker.attempt import ClaimLostDuringRun, Outcome, State
from runner.worker.begin import ClaimWon, begin_attempt
from runner.worker.faults import crash_point
from runner.worker.heartbeat import Heartbeat
from runner.worker.hostguard import worktree_budget
from runner.worker.livelog import LiveOutput
from runner.worker.pipeline import run_pipeline
from runner.worker.record import Recorder, outcome_report
from runner.worker.report import TickOutcome, TickResult


def fetch_at_least_every() -> float:
    """Seconds: a worker busy with ready steps still sees silent holders. RUNNER_FETCH_AT_LEAST_EVERY is
    the tests' seam: a drain that must claim ahead on every tick however slow the machine is sets it long."""
    return float(os.environ.get("RUNNER_FETCH_AT_LEAST_EVERY", "").strip() or 10.0)


MAX_FAULTS_IN_A_ROW = 3  # faults of runner itself on one step before it is held for a person


class Worker:
    def __init__(
        self,
        queue: Queue,
        worker_id: str,
        tags: list[str] | None = None,
        log_file: Path | None = None,
        grace: float | None = None,
        only_step: str | None = None,
        context: str = "",
    ):
        self.queue = queue
        self.store = queue.store.workspace()
        self.id = worker_id
        self.tags = list(tags or [])
        self.log_file = log_file
        self.grace = grace
        self.only_step = only_step  # `runner tick --step`: this step or nothing
        # `runner tick --context`: the caller's words for the step's prompts and handoff
        self.context = context
        self.incarnation = new_incarnation(worker_id)
        self.holder = holder_info()
        self.stopping = threading.Event()  # first signal: claim nothing more
        self.cancel = threading.Event()  # grace spent or second signal: stop the running step
        self.dirs = {
            name: self.store.state_dir / name for name in ("worktrees", "logs", "attempts", "locks", "sessions")
        }
        for path in self.dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        self.lock = FileLock(str(self.dirs["locks"] / f"{worker_id}.lock"))
        self.own_worktrees = self.dirs["worktrees"] / worker_id  # only this id's ticks (under its lock) use it
        self.integration_branch = DEFAULT_INTEGRATION_BRANCH  # corrected from runner.toml after the first read
        self.started = format_time(utc_now())
        self.ticks = 0
        self.last: dict[str, Any] = {}  # the last step this worker ran and how it ended
        self.lease = 0.0
        self.view_is_fresh = False  # our last publish left our view of the queue current
        self.last_fetch = 0.0  # (monotonic) leases are judged only on fetched views: fetch at least this often
        self.claim_ahead = False  # set by a daemon whose next tick follows at once
        self.held: Published | None = None  # a claim published with the last record, not started yet
        self.running: str | None = None  # "STEP (attempt N)" while a step runs, for what a signal says
        self.current: tuple[str, int] | None = None  # (step, attempt) while a step runs
        self.live: LiveOutput | None = None  # its output while it runs: a fleet's beat carries it
        self.fleet: Any = None  # the daemon this is a slot of (runner.worker.slots): it beats, our heartbeat checks

    # --- what the heartbeat says -----------------------------------------------------------

    def facts(self, state: str, step: str | None = None, attempt: int | None = None) -> dict[str, Any]:
        if self.fleet is not None:  # a slot: the daemon's beat names every slot's claim
            return self.fleet.facts(self, state, step, attempt)
        return {
            "state": state,
            "step": step,
            "attempt": attempt,
            "incarnation": self.incarnation,
            "pid": os.getpid(),
            "started": self.started,
            "process_started": self.holder.get("started"),
            "lease": self.lease,
            "ticks": self.ticks,
            "last": self.last or None,
            "tags": self.tags,
        }

    def log(self, kind: str, message: str) -> None:
        line = f"{format_time(utc_now())} {kind} {self.id} {message}\n"
        for path in (self.dirs["logs"] / f"worker-{self.id}.log", self.log_file):
            if path is not None:
                try:
                    with open(path, "a") as handle:
                        handle.write(line)
                except OSError:
                    pass  # a full disk must not stop the tick from giving its step back

    # --- one tick ------------------------------------------------------------------------------

    def tick(self) -> TickResult:
        try:
            self.lock.acquire(timeout=0)
        except Timeout:
            return self.skip(f"another tick or worker with id {self.id} is running on this repository")
        try:
            return self._tick()
        finally:
            self.ticks += 1
            self.lock.release()

    def skip(self, reason: str, kind: str = "SKIP", outcome: TickOutcome = TickOutcome.SKIP) -> TickResult:
        self.log(kind, reason)
        return report.skip(self.id, reason, outcome)

    def _tick(self) -> TickResult:
        if self.stopping.is_set():
            self.release_held()
            return self.skip("worker is stopping")
        if self.held is not None:  # claimed in the push that recorded the last step
            held, self.held = self.held, None
            return self.work(ClaimWon.of(held))
        worktrees.prune_stale(self.store, self.own_worktrees, self.log)
        try:
            # After our own record push, our view of the queue is as fresh as a fetch would make it
            # (or the claim's compare-and-swap says otherwise): the fetch is skipped.
            fresh = self.view_is_fresh and self.fetched_lately()
            snap = self.queue.snapshot(fetch=not fresh, branches=[self.integration_branch])
            self.view_is_fresh = False
            if snap.fetched:
                self.last_fetch = time.monotonic()
            if snap.config.queue.integration_branch != self.integration_branch:
                self.integration_branch = snap.config.queue.integration_branch
                snap = self.queue.snapshot(branches=[self.integration_branch])
        except NotInitialised as exc:
            return self.skip(str(exc), outcome=TickOutcome.NO_QUEUE)
        except StoreError as exc:
            self.log("ERROR", str(exc))
            return report.skip(self.id, str(exc), outcome=TickOutcome.ERROR)
        self.lease = snap.config.leases.lease
        if self.grace is None:
            self.grace = snap.config.worker.grace_period
        if snap.plan.halted:
            return self.skip(f"queue halted: {snap.plan.halted}", "HALT")
        if why := sandbox.problem(snap.config):
            raise BadInput(why)  # before any claim: a step never runs without the sandbox it was promised
        if floor := resource_floor(snap.config, self.store.state_dir) or worktree_budget(
            snap.config, self.store, snap, self.log
        ):
            return self.skip(floor)
        mine = snap.plan.steps.get(self.only_step or "")
        if mine is not None and mine.status == Status.CLAIMED and mine.assignee == self.id:
            # `runner claim STEP --id X` (a person's override, say), then `runner tick --id X --step STEP`.
            self.incarnation = mine.holder.get("incarnation") or self.incarnation
            return self.work(ClaimWon(mine.id, mine.attempt, snap.tip, snap))
        try:
            published = self.queue.claim(
                self.id,
                self.incarnation,
                self.holder,
                self.tags,
                step_id=self.only_step,
                snapshot=snap,
                beat=self.facts("running"),
            )
        except Skip as exc:
            if not snap.fetched:  # nothing in our own view: look at the remote's before saying so
                return self._tick()
            return self.nothing_to_claim(snap, str(exc))
        except LostRace as exc:
            return self.skip(f"lost every race: {exc}")
        if published.change.status == Status.FAILED:  # a takeover that found the attempts spent recorded `failed`
            self.log("TICK", f"{published.step} -> failed: {published.change.updates.get('last_error')}")
            return TickResult(
                Sentinel.STEP_FAILED,
                Status.FAILED,
                self.id,
                published.change.updates.get("last_error"),
                published.step,
                published.attempt,
                will_retry=False,
            )
        return self.work(ClaimWon.of(published))

    def fetched_lately(self) -> bool:
        """Leases are judged only on fetched views: a view older than this is fetched again."""
        return time.monotonic() - self.last_fetch < min(self.lease / 3, fetch_at_least_every())

    def nothing_to_claim(self, snap: Snapshot, why: str) -> TickResult:
        plan = snap.plan
        if self.only_step and (step := plan.find(self.only_step)) is not None and step.status == Status.CLAIMED:
            reason = f"{self.only_step} is claimed by {step.assignee} (attempt {step.attempt})"
            self.log("SKIP", reason)
            return TickResult(Sentinel.STEP_BLOCKED, TickOutcome.BLOCKED, self.id, reason, step.id, step.attempt)
        statuses = {s.id: plan.derived_status(s) for s in plan.steps.values()}
        blocked = sorted(sid for sid, status in statuses.items() if status == "blocked")
        if blocked and not any(status in (Status.READY, Status.CLAIMED, "waiting") for status in statuses.values()):
            reason = f"dependencies not satisfiable: {', '.join(blocked)} wait on failed steps"
            self.log("SKIP", reason)
            return TickResult(Sentinel.STEP_BLOCKED, TickOutcome.BLOCKED, self.id, reason, blocked=tuple(blocked))
        return self.skip(why)

    def work(self, claim: ClaimWon) -> TickResult:
        """Run the step this worker holds."""
        begun = begin_attempt(self.queue, claim, self.integration_branch, self.dirs["sessions"], self.log)
        snap, step, step_id, attempt = begun.snap, begun.step, claim.step, claim.attempt
        crash_point("after-claim")
        log_path = self.dirs["logs"] / "steps" / f"{step_id}-a{attempt}.log"
        live = LiveOutput(log_path)
        heartbeat = Heartbeat(
            self.queue,
            self.id,
            step_id,
            attempt,
            self.incarnation,
            math.inf if self.fleet else snap.config.heartbeat_interval,
            lambda: self.facts("running", step_id, attempt),
            self.log,
            None if self.fleet else snap.config.worker.live_log,
            None if self.fleet else live.facts,
        )
        heartbeat.start()
        attempt_dir = self.dirs["attempts"] / f"{step_id}-a{attempt}"
        worktree = self.own_worktrees / f"{step_id}-a{attempt}"
        config = snap.config.for_step(step.meta)
        state = State(
            step=step,
            attempt=attempt,
            config=config,
            feedback=feedback_of(step.meta),
            scores=[float(x) for x in step.get("scores", []) if isinstance(x, (int, float))],
            spent_before=float(step.get("spent", 0) or 0),
            context=self.context,
            usage_before=Spend.from_meta(step.get("usage")),
            rung=int(step.get("rung") or 0),
            plan_usd_before=plan_spend(snap.plan).usd,
        )
        started = time.monotonic()
        self.running, self.current, self.live = f"{step_id} (attempt {attempt})", (step_id, attempt), live
        try:
            # a person's approved result whose merge conflicted
            approved = resolving.approved_result(self.store, step, state)
            base = begun.make_worktree(self.store, worktree, start_at=approved)
            attempt_dir.mkdir(parents=True, exist_ok=True)
            where = Where(
                worker=self.id,
                worktree=worktree,
                base=base,
                files=attempt_dir,
                log_path=log_path,
                sessions_dir=self.dirs["sessions"],
            )
            stops = Stops(cancel=self.cancel, lost=heartbeat.lost, stopping=self.stopping)
            actions = WorktreeActions(self.store, where, stops, snap, live)
            outcome = resolving.first_pass(state, actions, base, approved) if approved else run_pipeline(state, actions)
            crash_point("after-step")
            if heartbeat.lost.is_set():
                raise ClaimLost(heartbeat.error or "the claim was lost")
            # The heartbeat goes on while the outcome is published: under contention a record
            # can take longer than a lease, and a silent holder would be taken over.
            return self.record(
                state, outcome, worktree, base, attempt_dir, log_path, time.monotonic() - started, actions
            )
        except (ClaimLost, ClaimLostDuringRun) as exc:
            self.log("LOST", f"{step_id} attempt {attempt}: {exc}; nothing recorded")
            return report.lost(self.queue, self.id, step_id, attempt, str(exc))
        except Exception as exc:  # noqa: BLE001 (a fault of runner itself: give the step back, spending nothing)
            return internal_error(self, state, exc, log_path, time.monotonic() - started)
        finally:
            self.running = self.current = self.live = None
            heartbeat.stop.set()
            heartbeat.join(timeout=10)
            worktrees.clean_up(self.store, worktree, state, self.log)

    # --- recording ---------------------------------------------------------------------------

    def recorder(self) -> Recorder:
        def beat(step: str, attempt: int, status: str) -> dict[str, Any]:
            self.last = {"step": step, "attempt": attempt, "outcome": status}
            return self.facts("idle")

        return Recorder(self.queue, self.id, self.incarnation, beat)

    def record(
        self,
        state: State,
        outcome: Outcome,
        worktree: Path,
        base: str,
        attempt_dir: Path,
        log_path: Path,
        elapsed: float,
        actions=None,
    ) -> TickResult:
        result, files = (None, [])
        if outcome.kind != Kind.RELEASE:
            result, files = (
                actions.commit(state) if actions else worktrees.commit(self.store, self.id, state, worktree, base)
            )
        notes_file = attempt_dir / "notes.md"
        notes = notes_file.read_text(errors="replace").strip() if notes_file.exists() else None
        crash_point("before-record")
        snap = self.queue.snapshot(fetch=False, branches=[self.integration_branch])
        # Claiming ahead builds on the record's own view, never a fetched one, so it never sees a
        # holder gone: a worker that last fetched a while ago claims its next step on a fresh view.
        ahead = (
            self.claim_ahead
            and not outcome.halt
            and not self.only_step
            and not self.stopping.is_set()
            and self.fetched_lately()
            and not resource_floor(snap.config, self.store.state_dir)
        )
        published, sentinel, outcome, files = resolving.record(
            self.recorder(),
            self.queue,
            state,
            outcome,
            result,
            files,
            notes or None,
            log_path,
            elapsed,
            snap,
            self.next_claim if ahead else None,
            actions,
        )
        self.held = published.then
        self.view_is_fresh = bool(self.store.remote)
        crash_point("after-record")
        reason, status = published.event.reason, published.change.status
        self.log(
            "TICK",
            f"{state.step.id} attempt {state.attempt} -> {status} {loop_fields(state, outcome)}"
            + (f": {reason}" if reason else ""),
        )
        if outcome.halt:
            halt(self, outcome.halt)
        return outcome_report(sentinel, state, self.id, published, files, log_path)

    def next_claim(self, snap: Snapshot, after_lost_race: bool):
        """The claim of the next ready step, built on the queue as this tick's record leaves it."""
        return self.queue.claim_change(
            snap, self.id, self.incarnation, self.holder, self.tags, beat=self.facts("running"), spread=after_lost_race
        )

    def release_held(self) -> None:
        """Give back a claim published with the last record that this worker will not start."""
        if self.held is None:
            return
        held, self.held = self.held, None
        step = held.step
        try:
            self.queue.event(
                step,
                Kind.RELEASE,
                self.id,
                incarnation=self.incarnation,
                reason="the worker stopped before starting it",
            )
            self.log("TICK", f"released {step}: the worker stopped before starting it")
        except RunnerError as exc:  # the lease gives it back in the end
            self.log("ERROR", f"could not release {step}: {exc}")


def halt(worker: Worker, reason: str) -> None:
    try:
        worker.queue.set_halt(reason, worker.id)
        worker.log("HALT", reason)
    except (Skip, StoreError, LostRace, PushRefused) as exc:
        worker.log("ERROR", f"could not halt the queue ({reason}): {exc}")


def internal_error(worker: Worker, state: State, exc: Exception, log_path: Path, elapsed: float) -> TickResult:
    """A fault of runner itself (or a record the remote refused, or a queue it could not reach):
    log the traceback, give the step back with nothing spent, backing off; after
    MAX_FAULTS_IN_A_ROW on this step, hold it for a person with the fault written down (an OS
    unit restarting the worker must not loop through it for ever)."""
    trace = worker.dirs["logs"] / "errors.log"
    try:
        with open(trace, "a") as handle:
            handle.write(
                f"--- {format_time(utc_now())} {worker.id} {state.step.id} attempt "
                f"{state.attempt}\n{traceback.format_exc()}\n"
            )
    except OSError:
        pass
    what = f"the record was {exc}" if isinstance(exc, PushRefused) else f"runner error: {type(exc).__name__}: {exc}"
    reason = f"{what} (traceback in {trace})"
    worker.log("ERROR", f"{state.step.id} attempt {state.attempt}: {reason}")
    faults = faults_in_a_row(state.step.meta) + 1
    if isinstance(exc, StoreError):  # the queue could not be reached: nobody's fault, nothing counted
        outcome = Outcome(Kind.RELEASE, reason=f"the queue could not be reached: {exc}")
    elif faults >= MAX_FAULTS_IN_A_ROW:
        outcome = Outcome(
            Kind.BLOCK,
            review=REVIEW_BLOCKED,
            reason=f"held for a person after {faults} faults of runner in a row on this step (runner "
            f"approve to try again, runner reject --abort to give up); the last: {reason}",
        )
    else:
        outcome = Outcome(Kind.RELEASE, reason=reason, fault=True)  # backing off as a failure would
    try:
        published, _ = worker.recorder().record(
            state,
            outcome,
            None,
            [],
            None,
            log_path,
            elapsed,
            worker.queue.snapshot(fetch=False, branches=[worker.integration_branch]),
        )
        commit = published.commit
    except Exception as again:  # noqa: BLE001 (the lease gives the step back in the end)
        worker.log("ERROR", f"could not give {state.step.id} back: {again}")
        commit = None
    sentinel = Sentinel.STEP_BLOCKED if outcome.kind == Kind.BLOCK else Sentinel.SKIP
    said = TickOutcome.ERROR if isinstance(exc, StoreError) else TickOutcome.FAULT
    return TickResult(sentinel, said, worker.id, outcome.reason, state.step.id, state.attempt, commit=commit)


def stop_on_signals(worker: Worker) -> None:
    """SIGTERM/SIGINT: claim nothing more, give the running step the grace period to finish,
    then cancel it (it is released, nothing spent); a second signal cancels it at once. Each
    says so on stderr, naming the step it finishes (a person at the terminal pressed Ctrl-C)."""

    def on_signal(signum, frame):
        again = "Ctrl-C again" if signum == signal.SIGINT else "a second SIGTERM"
        running = worker.running
        if worker.stopping.is_set():
            worker.log("SIGNAL", "second signal: stopping the step now")
            if running:
                say(f"runner: stopping {running} now: it is given back to the queue, nothing spent")
            worker.cancel.set()
            return
        worker.stopping.set()
        wait = worker.grace if worker.grace is not None else 30.0
        worker.log("SIGNAL", f"stopping: no new claims; {wait:.0f}s to finish the running step")
        if running:
            say(
                f"runner: finishing {running} before it stops (up to {wait:.0f}s, then it is given back, nothing "
                f"spent); {again} stops it now"
            )
        else:
            say("runner: stopping (no step is running)")
        timer = threading.Timer(wait, worker.cancel.set)
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def say(line: str) -> None:
    """A line for the person who stopped the worker (stderr: stdout carries the ticks' reports)."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # no terminal to tell: the worker's log has it


def loop_fields(state: State, outcome: Outcome) -> str:
    """pass=, score= and iter= of an attempt, as the loop-runner's log line has them: did it pass
    (the verdict's word when a verifier ran), the verifier's last score, how many times implement
    ran."""
    passed = state.verdict.passed if state.verdict is not None else outcome.kind == Kind.COMPLETE and not outcome.hold
    score = f"{state.verdict.score:g}" if state.verdict is not None else "none"
    return f"pass={str(passed).lower()} score={score} iter={state.implement_runs}"


def resource_floor(config: Config, folder: Path) -> str | None:
    import psutil

    free_memory = psutil.virtual_memory().available
    if free_memory < config.worker.min_free_memory:
        return (
            f"resource floor not met: {free_memory >> 20} MiB memory free, {config.worker.min_free_memory >> 20} "
            f"MiB required"
        )
    free_disk = shutil.disk_usage(folder).free
    if free_disk < config.worker.min_free_disk:
        return (
            f"resource floor not met: {free_disk >> 20} MiB disk free, {config.worker.min_free_disk >> 20} MiB required"
        )
    return None
