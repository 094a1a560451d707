"""The worker: a tick claims a step, runs it in its own worktree, verifies it and records
the outcome; the daemon loops ticks until told to stop."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2
from filelock import FileLock, Timeout

from runner.worker import executor
from runner.worker.faults import crash_point
from runner.core.config import Config
from runner.worker.gates import FAIL, NOT_RUN, PASS, GateResult, Verdict, gate_failure_feedback, run_gates
from runner.store.git import FORCE, GitError, GitStore, PushRefused, run_git
from runner.worker.handoff import GateEntry, HandoffMeta, fence, render_handoff
from runner.queue.leases import holder_info, new_incarnation
from runner.core.model import Step, format_time, step_duration, utc_now
from runner.worker.roles import (
    FAULT_ORIENT,
    FAULT_REVIEW,
    FAULT_SWEEP,
    Brakes,
    Role,
    brakes_for,
    critical_findings,
    deviation_reported,
    env_flag,
    plateaued,
    review_due,
    roles_for,
)
from runner.core.codec import handoff_path
from runner.queue.queue import OUTCOME_TRIES, LostRace, Published, Queue, Skip, Snapshot, retry_at, signer_for
from runner.core.machine import Event, TransitionError
from runner.core.stepfile import manual_checks, tick_checks

SENTINELS = ("STEP_COMPLETE", "STEP_BLOCKED", "STEP_REJECTED", "STEP_FAILED", "SKIP")
CLAIM_CHECK_INTERVAL = 5.0  # seconds between checks that the running step's claim still holds
IDLE_OUTCOMES = ("skip", "error", "lost", "blocked")  # the daemon sleeps before its next tick


class ClaimLost(Exception):
    pass


@dataclass
class Attempt:
    """Everything one tick knows about the step it holds."""

    step: Step
    attempt: int
    config: Config
    worktree: Path
    base: str  # integration tip the worktree started from
    log_path: Path
    started: float = field(default_factory=time.monotonic)
    gates: list[GateResult] = field(default_factory=list)
    verdict: Verdict | None = None
    feedback: str = ""
    runs: int = 0
    result_commit: str | None = None
    brakes: Brakes = field(default_factory=Brakes)
    roles: list[GateResult] = field(default_factory=list)  # orient / sweep / review, as they ran
    faults: list[str] = field(default_factory=list)  # PIPELINE-FAULT lines
    overrides: list[str] = field(default_factory=list)  # RUNNER_AUTOAPPROVE / RUNNER_SKIP_REVIEW uses
    notes: dict[str, str] = field(default_factory=dict)  # role outputs for the handoff
    findings: str = ""
    scores: list[float] = field(default_factory=list)
    spent_before: float = 0.0  # wall time of earlier attempts (step_budget)
    deviation: str | None = None  # orient found the plan stale: a person decides
    stop: str | None = None  # a brake fired (plateau, budget): failed for good
    failure: str | None = None  # failed for a reason other than a gate (e.g. review findings remain)
    hold: str | None = None  # done, but a person must look (PIPELINE-FAULT of the review)
    completed: Event | None = None  # set once the merge landed: the outcome to record, come what may
    files: list[str] = field(default_factory=list)

    def spent(self) -> float:
        return self.spent_before + (time.monotonic() - self.started)

    def set_role(self, result: GateResult) -> None:
        self.roles = [r for r in self.roles if r.name != result.name] + [result]

    def metrics(self) -> dict[str, Any] | None:
        metrics: dict[str, Any] = {}
        if self.scores:
            metrics["scores"] = self.scores[-20:]
        if self.brakes.step_budget is not None:
            metrics["spent"] = round(self.spent(), 1)
        return metrics or None


class Heartbeat(threading.Thread):
    """Moves the worker's heartbeat ref every lease/3 and watches for the claim being lost."""

    def __init__(self, worker: "Worker", step_id: str, attempt: int, interval: float):
        super().__init__(daemon=True, name=f"heartbeat-{step_id}")
        self.worker = worker
        self.step_id = step_id
        self.attempt = attempt
        self.interval = interval
        self.stop = threading.Event()
        self.lost = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        queue = self.worker.private_queue()  # pygit2 objects are not shared across threads
        queue.published = self.worker.queue.published  # the claim, even if the tracking ref lags
        try:  # the first beat names the step at once (for `runner workers`), off the tick's critical path
            self.worker.beat(queue, self.step_id, self.attempt)
        except Exception as exc:
            self.error = f"heartbeat failed: {exc}"
        last_beat = time.monotonic()
        # The claim is checked more often than the heartbeat moves, so an abort stops the run quickly.
        while not self.stop.wait(min(self.interval, CLAIM_CHECK_INTERVAL)):
            try:
                if time.monotonic() - last_beat >= self.interval:
                    self.worker.beat(queue, self.step_id, self.attempt)
                    last_beat = time.monotonic()
                snap = queue.snapshot()
                step = snap.plan.steps.get(self.step_id)
                if step is None or step.status != "claimed" or step.attempt != self.attempt or step.assignee != self.worker.id:
                    self.error = f"claim of {self.step_id} attempt {self.attempt} was lost"
                    self.lost.set()
                    return
            except Exception as exc:  # a flaky remote must not kill the run; the lease decides
                self.error = f"heartbeat failed: {exc}"


class Worker:
    def __init__(self, queue: Queue, worker_id: str, tags: list[str] | None = None, log_file: Path | None = None, grace: float | None = None):
        self.queue = queue
        self.store = queue.store
        self.id = worker_id
        self.tags = list(tags or [])
        self.log_file = log_file
        self.incarnation = new_incarnation(worker_id)
        self.holder = holder_info(self.incarnation)
        self.grace = grace
        self.stopping = threading.Event()  # first signal: claim nothing more
        self.cancel = threading.Event()  # grace spent or second signal: stop the running step
        self.dirs = {name: self.store.runner_dir / name for name in ("worktrees", "logs", "prompts", "locks")}
        for path in self.dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        self.lock = FileLock(str(self.dirs["locks"] / f"{worker_id}.lock"))
        self.own_worktrees = self.dirs["worktrees"] / worker_id  # only this id's ticks (under its lock) use it
        self.integration_branch = "runner/integration"  # fetched with the queue; corrected from runner.toml
        self.last_beat = 0.0
        self.last_skip: str | None = None

    def private_queue(self) -> Queue:
        return Queue(GitStore(self.store.git_dir, remote=self.store.remote), branch=self.queue.branch)

    def beat(self, queue: Queue, step_id: str | None, attempt: int | None, state: str = "running") -> None:
        queue.beat(self.id, {"step": step_id, "attempt": attempt, "incarnation": self.incarnation, "pid": os.getpid(), "state": state})
        self.last_beat = time.monotonic()

    # --- logging -------------------------------------------------------------------

    def log(self, kind: str, message: str) -> None:
        line = f"{format_time(utc_now())} {kind} {self.id} {message}\n"
        with open(self.dirs["logs"] / f"worker-{self.id}.log", "a") as handle:
            handle.write(line)
        if self.log_file:
            with open(self.log_file, "a") as handle:
                handle.write(line)

    # --- one tick ------------------------------------------------------------------

    def tick(self) -> dict[str, Any]:
        try:
            self.lock.acquire(timeout=0)
        except Timeout:
            return self.skip(f"another tick or worker with id {self.id} is running on this repository")
        try:
            return self._tick()
        finally:
            self.lock.release()

    def skip(self, reason: str, kind: str = "SKIP") -> dict[str, Any]:
        self.log(kind, reason)
        return {"sentinel": "SKIP", "outcome": "skip", "reason": reason, "worker": self.id}

    def _tick(self) -> dict[str, Any]:
        if self.stopping.is_set():
            return self.skip("worker is stopping")
        self.prune_stale_worktrees()
        try:
            snap = self.queue.snapshot(also_fetch=[self.integration_branch])
        except GitError as exc:
            self.log("ERROR", str(exc))
            return {"sentinel": "SKIP", "outcome": "error", "reason": str(exc), "worker": self.id}
        if snap.plan.halted:
            return self.skip(f"queue halted: {snap.plan.halted}", "HALT")
        if floor := self.resource_floor(snap.config):
            return self.skip(floor)
        try:
            published = self.queue.claim(self.id, self.incarnation, self.holder, self.tags, snapshot=snap)
        except Skip as exc:
            blocked = [s.id for s in snap.plan.steps.values() if snap.plan.derived_status(s) == "blocked"]
            if blocked and not any(snap.plan.derived_status(s) in ("ready", "claimed", "waiting") for s in snap.plan.steps.values()):
                reason = f"dependencies not satisfiable: {', '.join(sorted(blocked))} wait on failed steps"
                self.log("SKIP", reason)
                return {"sentinel": "STEP_BLOCKED", "outcome": "blocked", "reason": reason, "worker": self.id, "steps": sorted(blocked)}
            return self.skip(str(exc))
        except LostRace as exc:
            return self.skip(f"lost every race: {exc}")
        return self.work(published)

    def resource_floor(self, config: Config) -> str | None:
        import psutil

        free_memory = psutil.virtual_memory().available
        if free_memory < config.min_free_memory:
            return f"resource floor not met: {free_memory >> 20} MiB memory free, {config.min_free_memory >> 20} MiB required"
        free_disk = shutil.disk_usage(self.store.runner_dir).free
        if free_disk < config.min_free_disk:
            return f"resource floor not met: {free_disk >> 20} MiB disk free, {config.min_free_disk >> 20} MiB required"
        return None

    def work(self, published: Published) -> dict[str, Any]:
        step_id = published.change.step_id
        attempt_no = published.change.attempt
        snap = self.queue.snapshot_at(published.commit)
        step = snap.plan.steps[step_id]
        if step.status != "claimed":  # a takeover that found the attempts spent recorded `failed`
            return self.report_only(step, attempt_no, "STEP_FAILED", "failed", step.meta.get("last_error") or "attempts spent")
        self.log("TICK", f"claimed {step_id} attempt {attempt_no}")
        crash_point("after-claim")
        heartbeat = Heartbeat(self, step_id, attempt_no, snap.config.heartbeat_interval)
        heartbeat.start()
        run: Attempt | None = None
        try:
            run = self.prepare(step, attempt_no, snap.config)
            self.execute(run, heartbeat)
            if heartbeat.lost.is_set():
                raise ClaimLost(heartbeat.error or "claim lost")
            return self.finish(run, heartbeat)
        except ClaimLost as exc:
            self.log("LOST", f"{step_id} attempt {attempt_no}: {exc}; nothing recorded")
            return self.lost_report(step_id, attempt_no, str(exc))
        except Exception as exc:  # record what we can: the step goes back with the error
            self.log("ERROR", f"{step_id} attempt {attempt_no}: {exc!r}")
            if run is not None and run.completed is not None:
                # The merge landed: the step is done, only its record failed. Never record that
                # as a failure (the next attempt would merge it again): keep the claim alive and retry.
                return self.record_done_patiently(run, heartbeat)
            return self.record_failure(step, attempt_no, run, f"runner error: {exc}", heartbeat)
        finally:
            heartbeat.stop.set()
            heartbeat.join(timeout=5)
            if run is not None:
                self.cleanup(run)

    # --- preparing and running ----------------------------------------------------------

    def prepare(self, step: Step, attempt_no: int, config: Config) -> Attempt:
        integration = config.integration_branch
        self.integration_branch = integration
        # Fetched after the claim: the claim may have been won on a newer queue tip than the
        # tick started from, whose dependencies' merges the integration branch must then hold.
        self.store.fetch([integration])
        base = self.store.tip(integration)
        if base is None:
            raise GitError(f"no integration branch {integration!r}: run `runner init`")
        worktree = self.own_worktrees / f"{step.id}-a{attempt_no}"
        if worktree.exists():
            self.store.remove_worktree(worktree)
            shutil.rmtree(worktree, ignore_errors=True)
        self.store.add_worktree(worktree, base)
        log_path = self.dirs["logs"] / "steps" / f"{step.id}-a{attempt_no}.log"
        scores = [float(x) for x in step.get("scores", []) if isinstance(x, (int, float))]
        return Attempt(
            step=step, attempt=attempt_no, config=config, worktree=worktree, base=base, log_path=log_path,
            feedback=step.meta.get("last_error") or "", scores=scores, spent_before=float(step.get("spent", 0) or 0),
        )

    def tokens(self, run: Attempt) -> dict[str, Any]:
        prompts = self.dirs["prompts"]
        step_file = prompts / f"{run.step.id}-a{run.attempt}.step.md"
        prompt_file = prompts / f"{run.step.id}-a{run.attempt}.prompt.md"
        return {
            "prompt_file": lambda: _written(prompt_file, self.prompt(run)),
            "step_file": lambda: _written(step_file, run.step.text),
            "step": run.step.id,
            "title": run.step.title,
            "attempt": str(run.attempt),
            "cwd": str(run.worktree),
            "worktree": str(run.worktree),
            "worker": self.id,
            "feedback": run.feedback,
            "output": str(prompts / f"{run.step.id}-a{run.attempt}.output.md"),
            "diff_file": lambda: str(self.write_diff(run)),
            "verdict": lambda: json.dumps(run.verdict.__dict__ if run.verdict else None),
            "findings": run.findings,
        }

    def prompt(self, run: Attempt) -> str:
        parts = []
        for path in ("plans/root.md", "plans/NOTES.md"):
            data = self.store.file_at(self.queue.store.tip(self.queue.branch), path)
            if data:
                parts.append(data.decode(errors="replace"))
        parts.append(run.step.text)
        if run.feedback:
            parts.append(f"## Feedback from the previous attempt\n\n{run.feedback}\n")
        return "\n\n".join(parts)

    def env(self, run: Attempt) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "RUNNER_STEP": run.step.id,
                "RUNNER_ATTEMPT": str(run.attempt),
                "RUNNER_WORKER": self.id,
                "RUNNER_WORKTREE": str(run.worktree),
            }
        )
        return env

    def command(self, run: Attempt) -> list[str]:
        argv = run.step.get("run") or run.config.harness_command
        if not argv:
            raise ValueError(f"{run.step.id} has no `run:` argv and runner.toml has no harness.command")
        return executor.substitute(list(argv), self.tokens(run))

    def run_command(self, run: Attempt, name: str, argv: list[str], stdout_path: Path | None, cancel: threading.Event) -> executor.RunResult:
        timeout = step_duration(run.step, "timeout", 3600.0)
        if run.brakes.step_budget is not None:
            timeout = max(1.0, min(timeout, run.brakes.step_budget - run.spent()))
        return executor.run(argv, run.worktree, self.env(run), run.log_path, timeout, cancel, stdout_path)

    def execute(self, run: Attempt, heartbeat: Heartbeat) -> None:
        """orient -> deviation gate -> implement -> gates -> fix loop -> sweep -> review, with brakes."""
        cancel = _AnyEvent(heartbeat.lost, self.cancel)
        roles = roles_for(run.config, run.step)
        brakes = run.brakes = brakes_for(run.config, run.step)
        if self.budget_spent(run) or not self.orient(run, roles.get("orient"), cancel):
            return
        fixes = reviews = 0
        swept = False
        while True:
            timed_out = self.implement(run, cancel)
            if heartbeat.lost.is_set():
                raise ClaimLost(heartbeat.error or "claim lost")
            if self.cancel.is_set():
                return
            if run.verdict is not None and run.verdict.score is not None:
                run.scores.append(float(run.verdict.score))
                if plateaued(run.scores, brakes.score_plateau_window):
                    run.stop = f"plateau: verifier score has not improved over the last {brakes.score_plateau_window} runs ({run.scores[-brakes.score_plateau_window - 1:]})"
                    return
            if self.budget_spent(run):
                return
            if any(g.result == FAIL for g in run.gates):
                if fixes >= brakes.max_fix_attempts or timed_out:
                    return  # re-running a step that hit its timeout would only spend the budget again
                fixes += 1
                run.feedback = gate_failure_feedback(run.gates) + "\n\n" + executor.tail(run.log_path, 30)
                self.log("FIX", f"{run.step.id} attempt {run.attempt}: gates failed (fix {fixes}/{brakes.max_fix_attempts})")
                continue
            if not swept:
                self.sweep(run, roles.get("sweep"), cancel)
                swept = True
            critical = self.review(run, roles.get("review"), cancel)
            if not critical:
                return
            if reviews >= brakes.max_review_attempts:
                run.failure = f"review found critical issues after {reviews} review round(s): " + "; ".join(critical)[:1000]
                return
            reviews += 1
            run.feedback = "The independent review found critical issues:\n" + "\n".join(critical)
            self.log("REVIEW", f"{run.step.id} attempt {run.attempt}: critical findings, back to implement ({reviews}/{brakes.max_review_attempts})")

    def implement(self, run: Attempt, cancel) -> bool:
        """Run the step's command and the gates once. True when the command hit its timeout."""
        run.runs += 1
        result = self.run_command(run, "run", self.command(run), None, cancel)
        crash_point("after-step")
        if self.cancel.is_set():
            run.gates = [GateResult("run", FAIL, "worker stopping: step released")]
        elif not result.ok:
            run.gates = [GateResult("run", FAIL, result.describe(), result.argv)]
        else:
            gates, run.verdict = run_gates(
                run.worktree,
                run.step.text,
                run.step.get("required_outputs", []),
                run.config,
                lambda name, argv, out: self.run_command(run, name, argv, out, cancel),
            )
            run.gates = [GateResult("run", PASS, result.describe(), result.argv), *gates]
        return result.timed_out

    def budget_spent(self, run: Attempt) -> bool:
        budget = run.brakes.step_budget
        if budget is not None and run.spent() >= budget:
            run.stop = f"budget: {run.spent():.0f}s spent of the step's {budget:.0f}s budget across attempts"
            return True
        return False

    def run_role(self, run: Attempt, role: Role, cancel) -> tuple[executor.RunResult, str]:
        out_path = self.dirs["prompts"] / f"{run.step.id}-a{run.attempt}.{role.name}.out"
        argv = executor.substitute(role.command, self.tokens(run))
        result = self.run_command(run, role.name, argv, out_path, cancel)
        output = out_path.read_text(errors="replace") if out_path.exists() else ""
        with open(run.log_path, "a") as log:
            log.write(output)
        return result, output

    def orient(self, run: Attempt, role: Role | None, cancel) -> bool:
        """Run the read-only orient role. False when it found a major deviation a person must judge."""
        if role is None:
            run.roles.append(GateResult("orient", NOT_RUN, "not configured"))
            return True
        result, output = self.run_role(run, role, cancel)
        run.notes["Orient"] = output
        if not result.ok:
            run.faults.append(FAULT_ORIENT)
            run.roles.append(GateResult("orient", FAIL, f"{FAULT_ORIENT} ({result.describe()})", result.argv))
            return True
        deviation = deviation_reported(output)
        if not deviation:
            run.roles.append(GateResult("orient", PASS, "no major deviation", result.argv))
            return True
        if run.step.meta.get("approved") or not run.brakes.deviation_gate:
            why = "approved by a person" if run.step.meta.get("approved") else "deviation gate off"
            run.roles.append(GateResult("orient", PASS, f"major deviation ({deviation}); {why}", result.argv))
            return True
        if env_flag("RUNNER_AUTOAPPROVE"):
            run.overrides.append(f"RUNNER_AUTOAPPROVE=1 skipped the deviation gate: {deviation}")
            run.roles.append(GateResult("orient", PASS, f"major deviation ({deviation}); skipped by RUNNER_AUTOAPPROVE=1", result.argv))
            return True
        run.deviation = deviation
        run.roles.append(GateResult("orient", FAIL, f"major deviation: {deviation}", result.argv))
        return False

    def sweep(self, run: Attempt, role: Role | None, cancel) -> None:
        if role is None:
            run.roles.append(GateResult("sweep", NOT_RUN, "not configured"))
            return
        result, output = self.run_role(run, role, cancel)
        if result.ok:
            run.notes["Sweep findings"] = output
            run.roles.append(GateResult("sweep", PASS, f"{len(output.splitlines())} lines of findings", result.argv))
        else:
            run.faults.append(FAULT_SWEEP)
            run.roles.append(GateResult("sweep", FAIL, f"{FAULT_SWEEP} ({result.describe()})", result.argv))

    def review(self, run: Attempt, role: Role | None, cancel) -> list[str]:
        """Run the reviewer when due (retried once if it faults). Returns its critical findings."""
        if role is None:
            run.set_role(GateResult("review", NOT_RUN, "not configured"))
            return []
        if env_flag("RUNNER_SKIP_REVIEW"):
            run.overrides.append("RUNNER_SKIP_REVIEW=1 skipped the independent review")
            run.set_role(GateResult("review", NOT_RUN, "skipped by RUNNER_SKIP_REVIEW=1"))
            return []
        due = review_due(role, self.stage(run)[1])
        if not due:
            run.set_role(GateResult("review", NOT_RUN, "not due (small change, no boundary crossed)"))
            return []
        for _ in range(2):
            result, output = self.run_role(run, role, cancel)
            if result.ok:
                break
            self.log("FAULT", f"{run.step.id}: reviewer {result.describe()}")
        if not result.ok:
            run.faults.append(FAULT_REVIEW)
            run.hold = FAULT_REVIEW
            run.set_role(GateResult("review", FAIL, f"{FAULT_REVIEW} (twice: {result.describe()}); not passed as reviewed", result.argv))
            return []
        run.notes["Review"] = output
        critical = critical_findings(output)
        run.findings = "\n".join(critical) or output
        detail = f"{len(critical)} critical finding(s)" if critical else f"reviewed ({due})"
        run.set_role(GateResult("review", FAIL if critical else PASS, detail, result.argv))
        return critical

    def write_diff(self, run: Attempt) -> Path:
        path = self.dirs["prompts"] / f"{run.step.id}-a{run.attempt}.diff"
        if run.worktree.exists():
            run_git(run.worktree, "add", "-A")
            path.write_bytes(run_git(run.worktree, "diff", "--cached", "--binary", run.base).stdout)
        else:
            path.write_bytes(b"")
        return path

    # --- recording -------------------------------------------------------------------------

    def finish(self, run: Attempt, heartbeat: Heartbeat) -> dict[str, Any]:
        if self.cancel.is_set():
            return self.release(run, heartbeat, "worker stopping before the step finished")
        if run.deviation:
            event = Event("deviation", attempt=run.attempt, incarnation=self.incarnation, reason=f"orient reported a major deviation: {run.deviation}", metrics=run.metrics())
            return self.record(run, event, "STEP_BLOCKED", "awaiting a person: orient reported a major deviation (runner approve / runner reject)", [])
        if run.stop:
            event = Event("fail", attempt=run.attempt, incarnation=self.incarnation, reason=run.stop, permanent=True, metrics=run.metrics())
            return self.record(run, event, "STEP_FAILED", run.stop, [])
        files = self.commit_worktree(run)
        if run.failure or any(g.result == FAIL for g in run.gates):
            return self.record_failure(run.step, run.attempt, run, run.failure or gate_failure_feedback(run.gates), heartbeat, files)
        snap = self.check_fence(run)
        try:
            merged = self.merge(run)
        except MergeConflict as exc:
            return self.record_failure(run.step, run.attempt, run, str(exc), heartbeat, files)
        result = {"branch": run.config.step_branch_prefix + run.step.id, "commit": run.result_commit, "merge": merged, "handoff": handoff_path(run.step.id)}
        event = Event("complete", attempt=run.attempt, incarnation=self.incarnation, result=result, hold=bool(run.hold), reason=run.hold, metrics=run.metrics())
        run.completed, run.files = event, files
        if run.hold:
            return self.record(run, event, "STEP_BLOCKED", f"awaiting a person: {run.hold}", files, snap)
        return self.record(run, event, "STEP_COMPLETE", None, files, snap)

    def record_done_patiently(self, run: Attempt, heartbeat: Heartbeat) -> dict[str, Any]:
        """Retry recording a merged step while the heartbeat keeps its claim alive (a flaky remote)."""
        deadline = time.monotonic() + max(run.config.lease / 2, 5.0)
        delay = 0.5
        while True:
            try:
                return self.record(run, run.completed, "STEP_COMPLETE", None, run.files)
            except ClaimLost:
                raise
            except (GitError, LostRace, OSError) as exc:
                if heartbeat.lost.is_set() or time.monotonic() + delay > deadline:
                    raise
                self.log("ERROR", f"{run.step.id} attempt {run.attempt}: recording done failed ({exc}); retrying in {delay:.1f}s")
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def check_fence(self, run: Attempt) -> Snapshot:
        """Still our claim? Checked before merging, so a stale holder never touches the integration
        branch. One fetch brings the queue and the integration branch for the merge."""
        self.queue.fetch([run.config.integration_branch])
        snap = self.queue.snapshot(fetch=False)
        step = snap.plan.steps.get(run.step.id)
        if step is None or step.status != "claimed" or step.attempt != run.attempt or step.assignee != self.id:
            raise ClaimLost(f"claim of {run.step.id} attempt {run.attempt} was taken over before recording")
        return snap

    def stage(self, run: Attempt) -> tuple[str, list[str]]:
        """Stage everything in the worktree (git's own rules: .gitignore, attributes) and
        return the tree it makes and the paths that differ from the base."""
        run_git(run.worktree, "add", "-A")
        index = pygit2.Repository(str(run.worktree)).index
        index.read()
        tree = str(index.write_tree())
        diff = self.store.repo[run.base].tree.diff_to_tree(self.store.repo[tree])
        return tree, sorted({d.new_file.path for d in diff.deltas} | {d.old_file.path for d in diff.deltas})

    def commit_worktree(self, run: Attempt) -> list[str]:
        """Commit the worktree (one commit per attempt that got this far) on runner/steps/<id>."""
        tree, changed = self.stage(run)
        message = (
            f"{run.step.id}: {run.step.title} (attempt {run.attempt})\n\n"
            f"Runner-Step: {run.step.id}\nRunner-Worker: {self.id}\nRunner-Attempt: {run.attempt}\n"
        )
        run.result_commit = self.store.make_commit([run.base], {}, message, signer_for(self.id), base_tree=tree)
        self.store.set_own_ref("refs/heads/" + run.config.step_branch_prefix + run.step.id, run.result_commit)
        return changed

    def merge(self, run: Attempt) -> str:
        """Merge the step's commit into the integration branch by compare-and-swap."""
        branch = run.config.integration_branch
        step_ref = "refs/heads/" + run.config.step_branch_prefix + run.step.id
        for attempt in range(self.queue.max_tries):
            if attempt:  # the fence check fetched it for the first try
                self.store.fetch([branch])
            tip = self.store.tip(branch)
            if self.store.is_ancestor(run.result_commit, tip):
                return tip  # already merged (a retry after a push whose answer was lost)
            if tip == run.base or self.store.is_ancestor(tip, run.result_commit):
                new = run.result_commit
            else:
                tree, conflicts = self.store.merge_commits(tip, run.result_commit)
                if conflicts:
                    raise MergeConflict(f"merge conflict with {branch} in: {', '.join(conflicts)}")
                message = f"merge {run.step.id} (attempt {run.attempt}) into {branch}\n\nRunner-Step: {run.step.id}\nRunner-Worker: {self.id}\nRunner-Attempt: {run.attempt}\n"
                sig = signer_for(self.id).signature()
                new = str(self.store.repo.create_commit(None, sig, sig, message, tree, [tip, run.result_commit]))
            crash_point("before-merge")
            if self.store.remote:
                won = self.store.push([(step_ref, run.result_commit, FORCE), ("refs/heads/" + branch, new, tip)])
            else:
                won = self.store.local_cas("refs/heads/" + branch, new, tip)
            if won:
                crash_point("after-merge")
                return new
            time.sleep(random.uniform(0, min(1.0, 0.02 * 2**attempt)))
        raise LostRace(f"could not merge into {branch}: lost every race")

    def record(self, run: Attempt, event: Event, sentinel: str, reason: str | None, files: list[str], snap: Snapshot | None = None) -> dict[str, Any]:
        def build(snap):
            step = snap.plan.steps.get(run.step.id)
            if step is None or step.attempt != run.attempt or step.assignee != self.id or step.status != "claimed":
                raise ClaimLost(f"claim of {run.step.id} attempt {run.attempt} was taken over; not recording")
            crash_point("before-record")
            outcome = _outcome_of(step, event, snap.config)
            handoff = self.handoff(run, outcome, sentinel, reason, files)
            passed = {" ".join(g.command) if g.command else "" for g in run.gates if g.result == PASS}
            passed_checks = {g.name.removeprefix("check: ") for g in run.gates if g.name.startswith("check: ") and g.result == PASS}
            return self.queue.transition_change(
                snap,
                run.step.id,
                event,
                self.id,
                extra_files={handoff_path(run.step.id): handoff},
                edit_text=(lambda text: tick_checks(text, passed_checks)) if event.kind == "complete" and passed else None,
            )

        published = self.queue.publish(build, signer_for(self.id), snapshot=snap, max_tries=OUTCOME_TRIES)
        status = published.change.updates.get("status")
        if status == "failed":
            sentinel = "STEP_FAILED"
        self.log("TICK", f"{run.step.id} attempt {run.attempt} -> {status}" + (f": {reason}" if reason else ""))
        return self.report(run, status, sentinel, reason, files, published.commit)

    def record_failure(self, step: Step, attempt_no: int, run: Attempt | None, reason: str, heartbeat: Heartbeat, files: list[str] | None = None) -> dict[str, Any]:
        if heartbeat.lost.is_set():
            raise ClaimLost(heartbeat.error or "claim lost")
        config = run.config if run else self.queue.snapshot().config
        metrics = run.metrics() if run else None
        event = Event("fail", attempt=attempt_no, incarnation=self.incarnation, reason=reason[:2000], retry_at=retry_at(config, attempt_no), metrics=metrics)
        if run is None:
            run = Attempt(step=step, attempt=attempt_no, config=config, worktree=Path("/nonexistent"), base="", log_path=Path("/nonexistent"))
            run.gates = [GateResult("run", NOT_RUN, reason)]
        try:
            return self.record(run, event, "STEP_FAILED", reason, files or [])
        except ClaimLost as exc:
            return self.lost_report(step.id, attempt_no, str(exc))

    def release(self, run: Attempt, heartbeat: Heartbeat, reason: str) -> dict[str, Any]:
        event = Event("release", attempt=run.attempt, incarnation=self.incarnation, reason=reason)
        try:
            return self.record(run, event, "SKIP", reason, [])
        except ClaimLost as exc:
            return {"sentinel": "SKIP", "outcome": "lost", "reason": str(exc), "step": run.step.id, "worker": self.id}

    def handoff(self, run: Attempt, outcome: str, sentinel: str, reason: str | None, files: list[str]) -> bytes:
        meta = HandoffMeta(
            step=run.step.id,
            attempt=run.attempt,
            worker=self.id,
            outcome=outcome,
            gates=[GateEntry(name=g.name, result=g.result, detail=g.detail[:500]) for g in [*run.gates, *run.roles]],
            files_changed=files,
            duration_s=round(time.monotonic() - run.started, 2),
            result_commit=run.result_commit,
            sentinel=sentinel if outcome != "failed" else "STEP_FAILED",
            reason=reason[:1000] if reason else None,
            overrides=run.overrides,
            faults=run.faults,
        )
        manual = manual_checks(run.step.text)
        sections = {
            "Pipeline faults": "\n".join(run.faults),
            "Overrides": "\n".join(f"- {item}" for item in run.overrides),
            **{title: fence(text) for title, text in run.notes.items() if text.strip()},
            "Manual checks left": "\n".join(f"- [ ] {item}" for item in manual),
            "Feedback given to the last run": run.feedback if run.runs > 1 else "",
            "Log tail": fence(executor.tail(run.log_path)) if run.log_path.exists() else "",
        }
        return render_handoff(meta, sections)

    def report(self, run: Attempt, status: str | None, sentinel: str, reason: str | None, files: list[str], commit: str) -> dict[str, Any]:
        counted = [g for g in run.gates if g.result != NOT_RUN]
        return {
            "sentinel": sentinel,
            "outcome": status,
            "step": run.step.id,
            "attempt": run.attempt,
            "worker": self.id,
            "gates_passed": sum(1 for g in counted if g.result == PASS),
            "gates_run": len(counted),
            "gates": [g.as_dict() for g in run.gates],
            "roles": [r.as_dict() for r in run.roles],
            "faults": run.faults,
            "overrides": run.overrides,
            "files_changed": files,
            "manual_checks_left": manual_checks(run.step.text),
            "duration_s": round(time.monotonic() - run.started, 2),
            "reason": reason,
            "commit": commit,
            "log": str(run.log_path),
        }

    def lost_report(self, step_id: str, attempt_no: int, reason: str) -> dict[str, Any]:
        """The claim went away under us: taken over (SKIP), or aborted by a person (STEP_REJECTED)."""
        try:
            step = self.queue.snapshot().plan.steps.get(step_id)
        except GitError:
            step = None
        last_error = (step.meta.get("last_error") or "") if step else ""
        if step is not None and step.status == "failed" and last_error.startswith("aborted by"):
            return {"sentinel": "STEP_REJECTED", "outcome": "rejected", "reason": last_error, "step": step_id, "attempt": attempt_no, "worker": self.id}
        return {"sentinel": "SKIP", "outcome": "lost", "reason": reason, "step": step_id, "attempt": attempt_no, "worker": self.id}

    def report_only(self, step: Step, attempt_no: int, sentinel: str, outcome: str, reason: str) -> dict[str, Any]:
        self.log("TICK", f"{step.id} -> {outcome}: {reason}")
        return {"sentinel": sentinel, "outcome": outcome, "step": step.id, "attempt": attempt_no, "worker": self.id, "reason": reason}

    # --- housekeeping ------------------------------------------------------------------------

    def cleanup(self, run: Attempt) -> None:
        if not run.worktree.exists():
            return
        if run.config.keep_worktree_on_failure and any(g.result == FAIL for g in run.gates):
            self.log("KEEP", f"kept worktree {run.worktree}")
            return
        self.store.remove_worktree(run.worktree)
        shutil.rmtree(run.worktree, ignore_errors=True)

    def prune_stale_worktrees(self) -> None:
        """Worktrees of this worker id left by a crashed tick (we hold the id's lock, so none is live)."""
        stale = [p for p in self.own_worktrees.iterdir() if p.is_dir()] if self.own_worktrees.is_dir() else []
        for path in stale:
            self.store.remove_worktree(path)
            shutil.rmtree(path, ignore_errors=True)
        if stale:
            self.store.prune_worktrees()
            self.log("PRUNE", f"removed {len(stale)} stale worktree(s)")

    def print_report(self, report: dict[str, Any], json_out: bool) -> None:
        if json_out:
            print(json.dumps(report, default=str), flush=True)
            return
        from runner.commands.render import console

        out = console()
        if report["sentinel"] == "SKIP":
            if report.get("reason") != self.last_skip:  # an idle daemon says why once, not every tick
                out.print(f"[dim]SKIP[/] {report.get('reason')}", markup=True)
            self.last_skip = report.get("reason")
            return
        self.last_skip = None
        colour = "green" if report["sentinel"] == "STEP_COMPLETE" else "red"
        if "step" not in report:  # a tick that ran nothing but says why (e.g. dependencies not satisfiable)
            out.print(f"[{colour}]{report['sentinel']}[/] {report.get('reason')}", markup=True)
            self.last_skip = report.get("reason")
            return
        out.print(
            f"[{colour}]{report['sentinel']}[/] {report['step']} attempt {report.get('attempt')} -> {report['outcome']}"
            f"  gates {report.get('gates_passed', 0)}/{report.get('gates_run', 0)}"
            f"  files changed {len(report.get('files_changed', []))}"
            f"  manual checks left {len(report.get('manual_checks_left', []))}"
            f"  {report.get('duration_s', 0)}s"
        )
        if report.get("reason") and report["sentinel"] != "STEP_COMPLETE":
            out.print(f"  reason: {report['reason'][:500]}", markup=False)

    # --- the daemon ---------------------------------------------------------------------------

    def run_forever(self, interval: float, max_ticks: int = 0, once: bool = False, json_out: bool = False) -> int:
        try:
            self.lock.acquire(timeout=0)
        except Timeout:
            from runner.commands.render import console

            console(stderr=True).print(f"error: another `runner worker --id {self.id}` is already running on this repository (lock {self.lock.lock_file})")
            return 2
        if self.grace is None:
            try:
                self.grace = self.queue.snapshot().config.grace_period
            except GitError:
                self.grace = 30.0
        self.install_signal_handlers()
        self.log("START", f"incarnation {self.incarnation} pid {os.getpid()}")
        ticks = 0
        try:
            self.beat(self.queue, None, None, state="idle")
        except Exception as exc:
            self.log("ERROR", f"first heartbeat failed: {exc}")
        try:
            while not self.stopping.is_set():
                report = self._tick_with_grace()
                self.print_report(report, json_out)
                ticks += 1
                if max_ticks and ticks >= max_ticks:
                    break
                if report["outcome"] in IDLE_OUTCOMES:
                    if once and self.drained():
                        break
                    self.idle_beat()
                    self.stopping.wait(interval * random.uniform(0.8, 1.2))
        finally:
            try:
                self.beat(self.queue, None, None, state="stopped")
            except Exception:
                pass
            self.log("STOP", f"after {ticks} ticks")
            self.lock.release()
        return 0

    def idle_beat(self) -> None:
        """An idle daemon still shows up in `runner workers`, at the heartbeat's pace."""
        try:
            interval = self.queue.snapshot(fetch=False).config.heartbeat_interval
            if time.monotonic() - self.last_beat >= interval:
                self.beat(self.queue, None, None, state="idle")
        except (GitError, LostRace) as exc:
            self.log("ERROR", f"idle heartbeat failed: {exc}")

    def drained(self) -> bool:
        """No step is ready (even backing off) or running: nothing more can happen without a person."""
        try:
            plan = self.queue.snapshot().plan
        except GitError:
            return False
        return not any(plan.derived_status(s) in ("ready", "claimed") for s in plan.steps.values())

    def _tick_with_grace(self) -> dict[str, Any]:
        try:
            return self._tick()
        except (GitError, PushRefused, TransitionError, LostRace) as exc:
            self.log("ERROR", str(exc))
            return {"sentinel": "SKIP", "outcome": "error", "reason": str(exc), "worker": self.id}

    def install_signal_handlers(self) -> None:
        def on_signal(signum, frame):
            if self.stopping.is_set():
                self.log("SIGNAL", "second signal: stopping the step now")
                self.cancel.set()
                return
            self.stopping.set()
            wait = self.grace if self.grace is not None else 30.0
            self.log("SIGNAL", f"stopping: no new claims; {wait:.0f}s to finish the running step")
            timer = threading.Timer(wait, self.cancel.set)
            timer.daemon = True
            timer.start()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)


class MergeConflict(Exception):
    pass


def _written(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


class _AnyEvent:
    """Set when any of several events is set (the executor polls is_set)."""

    def __init__(self, *events: threading.Event):
        self.events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


def _outcome_of(step: Step, event: Event, config: Config) -> str:
    if event.kind == "complete":
        return "review" if step.requires_approval else "done"
    if event.kind == "release":
        return "released"
    max_attempts = int(step.meta.get("max_attempts") or config.max_attempts)
    return "failed" if event.permanent or step.attempt >= max_attempts else "ready"
