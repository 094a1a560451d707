"""An agent that works the queue itself (Claude Code, Codex, opencode in a terminal), with a
worker's guarantees: it claims a step as a worker claims (the same compare-and-swap, the same
holder fence), works in a worktree made at the integration tip with its dependencies' merges,
and hands the work in; runner then runs what a worker's tick runs after implement (gates,
checklists, verify, orchestrate, sweep, review, with the same brakes: `run_checks`) and
records the outcome with its merge in one publish (`Recorder`). `runner mcp` and `runner work`
/ `runner submit` are two faces of this one class; nothing here approves, rejects, retries or
aborts.

A hand-in whose checks fail while fixes are left records nothing: the step stays the agent's,
with the failure as its feedback (the worker's fix loop, with the agent as implement). An
agent id holds one step at a time: its heartbeat ref names one.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeGuard

from filelock import FileLock, Timeout

from runner.core.clock import wall_clock
from runner.core.comments import feedback_of
from runner.core.errors import BadInput, RunnerError
from runner.core.limits import MAX_NOTES_APPEND_BYTES, clip
from runner.core.machine import Kind, holds
from runner.core.model import format_time, utc_now
from runner.queue.change import ClaimLost
from runner.queue.leases import holder_info, local_holder_gone, new_incarnation
from runner.queue.queue import Queue
from runner.queue.snapshot import Snapshot
from runner.worker import worktrees
from runner.worker.actions import WorktreeActions
from runner.worker.agentsession import (
    Session,
    Sessions,
    context,
    not_yet,
    shown,
    state_of,
    stop_keeper,
    worktree_folder,
)
from runner.worker.attempt import Outcome, Run, State, named
from runner.worker.gates import PASS
from runner.worker.heartbeat import Heartbeat
from runner.worker.markers import MARKERS_LEFT, markers_left
from runner.worker.pipeline import RESOLVE_FEEDBACK, run_checks
from runner.worker.record import MergeConflict, Recorder, outcome_report
from runner.worker.report import TickResult

KEEPER_LOOKS = 2.0  # seconds between a keeper's looks at its session file


class NotHeld(RunnerError):
    """The agent does not hold the step it names (or holds another one)."""


class AgentWork:
    """One agent id's work on one queue, from this host. `heartbeat`: "thread" keeps the claim's
    heartbeat in this process while it lives (`runner mcp`, whose pid the claim names), or a
    callable(session) -> keeper facts that starts a process to keep it (`runner work`)."""

    def __init__(self, queue: Queue, agent: str, tags: list[str] | None = None, heartbeat: Any = "thread",
                 header: str = ""):
        self.queue = queue
        self.header = header  # the start of a claimed step's prompt (runner.agents.prime; plans/prompts/agent.md wins)
        self.store = queue.store.workspace()
        self.agent = agent
        self.tags = list(tags or [])
        self.in_process = heartbeat == "thread"
        self.start_keeper: Callable[[Session], dict[str, Any]] | None = None if self.in_process else heartbeat
        # A session process is the holder (its pid ends the claim on this host); a shell agent's
        # commands exit at once, so its claim lives by its lease and the keeper's heartbeats.
        self.holder = holder_info(with_pid=self.in_process)
        self.incarnation = new_incarnation(agent) if self.in_process else None
        self.sessions = Sessions(self.store.state_dir, agent)
        # shared with workers: a takeover here kills what our checks left
        self.sessions_dir = self.store.state_dir / "sessions"
        self.started = format_time(utc_now())
        self.beating: dict[str, Heartbeat] = {}
        self.mutex = threading.Lock()

    # --- reading ---------------------------------------------------------------------------

    def snapshot(self, fetch: bool = True) -> Snapshot:
        branch = self.queue.branches()[0]
        snap = self.queue.snapshot(fetch=fetch, branches=[branch])
        if snap.config.queue.integration_branch != branch:
            snap = self.queue.snapshot(fetch=False, branches=[snap.config.queue.integration_branch])
        return snap

    def ready(self) -> dict[str, Any]:
        """What this agent may take now, best first; when nothing, why."""
        from runner.queue.claims import why_nothing

        snap = self.snapshot()
        steps = [] if snap.plan.halted else [
            {"step": s.id, "title": s.title, "priority": s.priority, "depends_on": s.depends_on}
            for s in snap.plan.ready(utc_now(), self.tags)]
        why = None if steps else (f"queue halted: {snap.plan.halted}" if snap.plan.halted
                                  else why_nothing(snap, self.tags, None, by_agent=True))
        return {"steps": steps, "why": why}

    def show(self, step_id: str) -> dict[str, Any]:
        """The step as an agent reads it (`text`) and its facts: status, holder, attempt, problems."""
        return shown(self.store, self.snapshot(), step_id)

    # --- claiming --------------------------------------------------------------------------

    def claim(self, step_id: str | None = None, context: str = "") -> dict[str, Any]:
        with self.locked():
            snap = self.snapshot()
            self.prune(snap)
            held = next((s for s in snap.plan.with_status("claimed") if s.assignee == self.agent), None)
            if held is not None:
                session = self.sessions.load(held.id)
                if self.mine(session, held) and step_id in (None, held.id):
                    return self.claimed(session, snap)  # the same claim again: its worktree and prompt
                if not local_holder_gone(held.holder):
                    where = "" if self.mine(session, held) else " in another session"
                    raise NotHeld(f"{self.agent} already holds {held.id} (attempt {held.attempt}){where}: complete, "
                                  f"fail or release it first (one step at a time per id)")
                step_id = step_id or held.id  # its session died on this host: take it over
            incarnation = self.incarnation or new_incarnation(self.agent)
            facts = self.facts("running", incarnation=incarnation)
            if not self.in_process:
                facts.pop("pid"), facts.pop("process_started")  # the keeper's beats name the keeper
            published = self.queue.claim(self.agent, incarnation, self.holder, self.tags, step_id=step_id,
                                         snapshot=snap, beat=facts, by_agent=True)
            change = published.change
            if change.status == "failed":
                raise RunnerError(f"{published.step}: {change.updates.get('last_error')} "
                                  "(its attempts are spent; a person may retry it)")
            return self.start(published.commit, published.snapshot, published.event, incarnation, context)

    def start(self, claim: str, before: Snapshot, event, incarnation: str, caller: str = "") -> dict[str, Any]:
        """Make the worktree of a claim just won; on any fault, give the step back."""
        integration = before.config.queue.integration_branch
        snap = self.queue.snapshot_at(claim, [integration])
        snap.tips.update(before.tips)
        step = snap.plan.steps[event.step].full()
        path = worktree_folder(self.store.workdir, self.store.state_dir, self.agent) / f"{step.id}-a{event.attempt}"
        try:
            if event.kind == Kind.TAKEOVER:
                worktrees.kill_leftovers(self.sessions_dir, step.id, event.replaces or 0, before,
                                         lambda kind, line: None)
            if (dead := self.sessions.load(step.id)) is not None:
                self.end(dead, None)  # a session of ours that died holding this step: its worktree goes
            base = worktrees.base_with_dependencies(self.store, snap, step, integration)
            worktrees.remove(self.store, path)
            self.store.add_worktree(path, base)
            session = Session(step.id, event.attempt, incarnation, str(path), base, wall_clock(), wall_clock(),
                              context=caller)
            self.sessions.save(session)  # the keeper reads it
            if self.start_keeper is not None:
                session.keeper = self.start_keeper(session)
                self.sessions.save(session)
        except Exception as exc:
            with suppress(RunnerError):  # else its lease gives it back
                self.queue.event(step.id, Kind.RELEASE, self.agent, incarnation=incarnation,
                                 reason=clip("runner error: could not make the worktree "
                                             f"({type(exc).__name__}: {exc})"))
            worktrees.remove(self.store, path)
            raise
        start_heartbeat(self, session, snap)
        return self.claimed(session, snap)

    def claimed(self, session: Session, snap: Snapshot) -> dict[str, Any]:
        step = snap.plan.steps[session.step].full()
        tokens = {"step": step.id, "title": step.title, "attempt": str(session.attempt), "cwd": session.worktree,
                  "worktree": session.worktree, "worker": self.agent}
        feedback = session.feedback or feedback_of(step.meta)
        prompt = context(lambda path: self.store.file_at(snap.tip, path), snap.plan, step, feedback, self.header,
                         tokens, session.context)
        return {"step": step.id, "title": step.title, "attempt": session.attempt, "worktree": session.worktree,
                "lease": snap.config.leases.lease, "prompt": prompt}

    # --- handing in ------------------------------------------------------------------------

    def complete(self, step_id: str, notes: str | None = None) -> TickResult:
        """Run the step's checks in the agent's worktree; record the outcome, or (a check failed,
        fixes left) keep the claim and say what to fix."""
        with self.locked():
            session, step, snap = held(self, step_id)
            if session is None or not Path(session.worktree).is_dir():
                raise NotHeld(f"{self.agent} holds {step_id}, but no worktree of it is on this host: release it "
                              f"(`runner release {step_id} --id {self.agent}`) and take it again")
            state = state_of(session, step, snap.config)
            now = wall_clock()
            state.runs.append(Run("implement", PASS, max(now - session.since, 0.0),
                                  f"handed in by {self.agent} from its own session"))
            if left := markers_left(self.store, Path(session.worktree), session.conflicts, session.sides):
                return not_yet(session, state, MARKERS_LEFT.format(paths=named(left)), self.agent, tuple(left))
            checked = run_checks(state, worktree_actions(self, session, state, snap))
            if isinstance(checked, Outcome):
                return self.finish(session, state, checked, notes)
            session.keep(state)
            session.since = now
            self.sessions.save(session)
            return not_yet(session, state, checked, self.agent)

    def fail(self, step_id: str, reason: str, permanent: bool = False) -> TickResult:
        return self.give_back(step_id, Outcome(Kind.FAIL, reason=clip(f"{self.agent}: {reason}"), permanent=permanent))

    def release(self, step_id: str, reason: str) -> TickResult:
        return self.give_back(step_id, Outcome(Kind.RELEASE, reason=clip(f"{self.agent}: {reason}")))

    def give_back(self, step_id: str, outcome: Outcome) -> TickResult:
        with self.locked():
            session, step, snap = held(self, step_id)
            if session is None:  # claimed by hand (`runner claim`): no worktree, nothing to keep
                session = Session(step.id, step.attempt, str(step.holder.get("incarnation") or ""), "", "",
                                  wall_clock(), wall_clock())
            return self.finish(session, state_of(session, step, snap.config), outcome, None)

    def finish(self, session: Session, state: State, outcome: Outcome, notes: str | None) -> TickResult:
        """Record the outcome (with its merge, the handoff and the heartbeat, in one publish) and end the session."""
        worktree = Path(session.worktree) if session.worktree else None
        result: str | None = None
        files: list[str] = []
        if outcome.kind != Kind.RELEASE and worktree is not None:
            result, files = worktrees.commit(self.store, self.agent, state, worktree, session.base)
        log_path = self.log_path(session)
        snap = self.snapshot(fetch=False)

        def beat(step: str, attempt: int, status: str) -> dict[str, Any]:
            return self.facts("idle", last={"step": step, "attempt": attempt, "outcome": status})

        recorder = Recorder(self.queue, self.agent, session.incarnation or None, beat)
        passes_left = (outcome.kind == Kind.COMPLETE and worktree is not None
                       and state.resolves < state.config.brakes.max_resolve_attempts)
        try:
            published, sentinel = recorder.record(state, outcome, result, files,
                                                  clip(notes, MAX_NOTES_APPEND_BYTES) if notes else None,
                                                  log_path, max(wall_clock() - session.claimed, 0.0), snap,
                                                  resolve=passes_left)
        except MergeConflict as conflict:
            assert worktree is not None and result is not None
            return onto_new_tip(self, session, state, snap, result, conflict, notes)
        except ClaimLost as exc:
            self.end(session, state)
            raise NotHeld(f"nothing recorded: {exc}") from None
        if outcome.halt:
            self.queue.set_halt(outcome.halt, self.agent)
        self.end(session, state)
        return outcome_report(sentinel, state, self.agent, published, files, log_path)

    # --- sessions ---------------------------------------------------------------------------

    def log_path(self, session: Session) -> Path:
        return self.store.state_dir / "logs" / "steps" / f"{session.step}-a{session.attempt}.log"

    def mine(self, session: Session | None, step) -> TypeGuard[Session]:
        """`session` is this process's (or, for a shell agent, this host's) claim of `step`."""
        return (session is not None and session.attempt == step.attempt
                and session.incarnation == step.holder.get("incarnation")
                and (self.incarnation is None or session.incarnation == self.incarnation))

    def prune(self, snap: Snapshot) -> None:
        """End the sessions whose claim is gone (recorded elsewhere, taken over, aborted)."""
        for session in self.sessions.all():
            step = snap.plan.steps.get(session.step)
            if step is None or holds(step.meta, self.agent, session.attempt, session.incarnation):
                self.end(session, None)

    def end(self, session: Session, state: State | None) -> None:
        beating = self.beating.pop(session.step, None)
        if beating is not None:
            beating.stop.set()
            beating.join(timeout=10)
        stop_keeper(session.keeper)
        if session.worktree:
            path = Path(session.worktree)
            if state is not None:
                worktrees.clean_up(self.store, path, state, lambda kind, line: None)
            else:
                worktrees.remove(self.store, path)
        # its prompt and output files
        shutil.rmtree(self.sessions.folder / f"{session.step}-a{session.attempt}", ignore_errors=True)
        self.sessions.forget(session.step)

    def facts(self, state: str, step: str | None = None, attempt: int | None = None, incarnation: str | None = None,
              last: dict | None = None) -> dict[str, Any]:
        import os

        return {"state": state, "step": step, "attempt": attempt, "incarnation": incarnation or self.incarnation,
                "agent": True, "pid": os.getpid(), "started": self.started,
                "process_started": self.holder.get("started"), "last": last}

    @contextmanager
    def locked(self):
        """One command of this agent id at a time on this repository (and one tool call at a time in a session)."""
        with self.mutex:
            lock = FileLock(str(self.sessions.folder.parent / f"{self.agent}.lock"))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                raise RunnerError(f"another runner command of {self.agent} is working on this repository; "
                                  "try again when it ends") from None
            try:
                yield
            finally:
                lock.release()


def worktree_actions(work: AgentWork, session: Session, state: State, snap: Snapshot) -> WorktreeActions:
    """A worker's tick's actions on the session's worktree: a hand-in runs the same checks there."""
    files = work.sessions.folder / f"{session.step}-a{session.attempt}"
    files.mkdir(parents=True, exist_ok=True)
    beating = work.beating.get(session.step)
    lost = beating.lost if beating is not None else threading.Event()
    actions = WorktreeActions(work.store, work.agent, Path(session.worktree), session.base, files,
                              work.log_path(session), lambda path: work.store.file_at(snap.tip, path), snap.plan,
                              threading.Event(), lost, threading.Event(), work.sessions_dir,
                              state.config.worker.default_timeout)
    # the budget counts from the claim
    actions.started = time.monotonic() - max(wall_clock() - session.claimed, 0.0)
    return actions


def held(work: AgentWork, step_id: str):
    """(this host's session or None, the step in full, the snapshot) of a step the agent holds."""
    snap = work.snapshot()
    step = snap.plan.find(step_id)
    if step is None:
        raise BadInput(f"no step {step_id!r} (see `runner ready` or `runner status`)")
    session = work.sessions.load(step_id)
    if session is not None and (not step.valid
                                or holds(step.meta, work.agent, session.attempt, session.incarnation)):
        work.end(session, None)  # its claim is gone: taken over, aborted, recorded elsewhere
        session = None
    why = holds(step.meta, work.agent, None) if step.valid else "the step is invalid"
    if why is None and work.incarnation is not None and step.holder.get("incarnation") != work.incarnation:
        why = f"it was claimed in another session of {work.agent}"
    if why:
        raise NotHeld(f"{work.agent} does not hold {step_id}: {why}")
    return session, step.full(), snap


def start_heartbeat(work: AgentWork, session: Session, snap: Snapshot) -> None:
    """Beat for the claim from this process while it holds it (an MCP session; a shell agent's
    claim is kept by its keeper process instead)."""
    if not work.in_process:
        return
    beating = Heartbeat(work.queue, work.agent, session.step, session.attempt, session.incarnation,
                        snap.config.heartbeat_interval,
                        lambda: work.facts("running", session.step, session.attempt, session.incarnation),
                        lambda kind, line: None)
    work.beating[session.step] = beating
    beating.start()


def onto_new_tip(work: AgentWork, session: Session, state: State, snap: Snapshot, result: str, conflict: MergeConflict,
             notes: str | None) -> TickResult:
    """The integration branch moved while the agent worked and the hand-in's merge conflicts: as
    a worker's resolve pass (docs/pipeline.md), with the agent as the resolver. The new
    tip is merged into its worktree; where git merges it cleanly the checks run again and it is
    recorded, else the conflicts are left between git's markers and the step stays the agent's
    (nothing recorded, no attempt spent) until it hands in again."""
    conflicted = work.store.merge_in_worktree(Path(session.worktree), result, conflict.onto)
    state.resolves += 1
    session.base = conflict.onto
    where = f"onto {conflict.onto[:10]}"
    if not conflicted:
        state.runs.append(Run("resolve", PASS, None, f"git merged the change {where} cleanly"))
        checked = run_checks(state, worktree_actions(work, session, state, snap))
        if isinstance(checked, Outcome):
            return work.finish(session, state, checked, notes)
        feedback = checked
    else:
        state.runs.append(Run("resolve", "not run", None, f"{len(conflicted)} file(s) ({named(conflicted)}) conflict "
                                                          f"{where}: left to {work.agent}"))
        feedback = RESOLVE_FEEDBACK.format(where=where, paths=named(conflicted))
        state.feedback = feedback
        session.conflicts, session.sides = list(conflicted), [conflict.onto, result]
    session.keep(state)
    session.since = wall_clock()
    work.sessions.save(session)
    return not_yet(session, state, feedback, work.agent, tuple(conflicted))


def keep_claim(queue: Queue, agent: str, step_id: str) -> None:
    """The keeper's life (`runner keep-claim`, started by `runner work`): move the agent's
    heartbeat for the claim its session names, and end when the claim does (recorded,
    released, taken over or aborted; `runner submit` also stops it when it records)."""
    import os

    sessions = Sessions(queue.store.state_dir, agent)
    session = sessions.load(step_id)
    if session is None:
        return
    snap = queue.snapshot(fetch=False)
    holder, started = holder_info(), format_time(utc_now())

    def facts() -> dict[str, Any]:
        return {"state": "running", "step": session.step, "attempt": session.attempt,
                "incarnation": session.incarnation, "agent": True, "pid": os.getpid(), "started": started,
                "process_started": holder.get("started"), "last": None}

    beating = Heartbeat(queue, agent, session.step, session.attempt, session.incarnation,
                        snap.config.heartbeat_interval, facts,
                        lambda kind, line: print(f"{format_time(utc_now())} {kind} {line}", flush=True))
    beating.start()
    # Also ends with its session file (ended by this host, or its clone deleted): a keeper
    # never outlives what it keeps, even when the remote cannot be reached to say so.
    while beating.is_alive():
        beating.join(KEEPER_LOOKS)
        if not sessions.path(step_id).exists():
            beating.stop.set()
