"""What an agent working the queue itself keeps on this host while it holds a claim, apart from
the work (runner.worker.agentwork): its session files, the claim's heartbeat (a thread of this
process for `runner mcp`, a keeper process of its own for `runner work`), the worktree and the
attempt's files, the facts its heartbeat shows, and one command of the agent id at a time.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeGuard

from filelock import FileLock, Timeout

from runner.core.clock import wall_clock
from runner.core.errors import BadInput, RunnerError
from runner.core.machine import holds
from runner.core.model import Step, format_time, utc_now
from runner.queue.leases import holder_info, new_incarnation
from runner.queue.queue import Queue
from runner.queue.snapshot import Snapshot
from runner.worker import worktrees
from runner.worker.actions import Stops, Where, WorktreeActions
from runner.worker.agentsession import Session, Sessions, stop_keeper
from runner.worker.attempt import State
from runner.worker.heartbeat import Heartbeat

KEEPER_LOOKS = 2.0  # seconds between a keeper's looks at its session file


class NotHeld(RunnerError):
    """The agent does not hold the step it names (or holds another one)."""


class AgentHost:
    """One agent id's sessions on this host. `heartbeat`: "thread" keeps a claim's heartbeat in
    this process while it lives (`runner mcp`, whose pid the claim names), or a
    callable(session) -> keeper facts that starts a process to keep it (`runner work`)."""

    def __init__(self, queue: Queue, agent: str, heartbeat: Any = "thread"):
        self.queue = queue
        self.store = queue.store.workspace()
        self.agent = agent
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

    def facts(
        self,
        state: str,
        step: str | None = None,
        attempt: int | None = None,
        incarnation: str | None = None,
        last: dict | None = None,
    ) -> dict[str, Any]:
        return {
            "state": state,
            "step": step,
            "attempt": attempt,
            "incarnation": incarnation or self.incarnation,
            "agent": True,
            "pid": os.getpid(),
            "started": self.started,
            "process_started": self.holder.get("started"),
            "last": last,
        }

    @contextmanager
    def locked(self):
        """One command of this agent id at a time on this repository (and one tool call at a time in a session)."""
        with self.mutex:
            lock = FileLock(str(self.sessions.folder.parent / f"{self.agent}.lock"))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                raise RunnerError(
                    f"another runner command of {self.agent} is working on this repository; try again when it ends"
                ) from None
            try:
                yield
            finally:
                lock.release()

    # --- a session's life ---------------------------------------------------------------------

    def open(self, session: Session) -> None:
        """Write the session of a claim whose worktree is made, and start its keeper (a shell agent)."""
        self.sessions.save(session)  # the keeper reads it
        if self.start_keeper is not None:
            session.keeper = self.start_keeper(session)
            self.sessions.save(session)

    def beat(self, session: Session, interval: float) -> None:
        """Beat for the claim from this process while it holds it (an MCP session; a shell agent's
        claim is kept by its keeper process instead)."""
        if not self.in_process:
            return
        beating = Heartbeat(
            self.queue,
            self.agent,
            session.step,
            session.attempt,
            session.incarnation,
            interval,
            lambda: self.facts("running", session.step, session.attempt, session.incarnation),
            lambda kind, line: None,
        )
        self.beating[session.step] = beating
        beating.start()

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
        shutil.rmtree(self.files(session), ignore_errors=True)
        self.sessions.forget(session.step)

    def prune(self, snap: Snapshot) -> None:
        """End the sessions whose claim is gone (recorded elsewhere, taken over, aborted)."""
        for session in self.sessions.all():
            step = snap.plan.steps.get(session.step)
            if step is None or holds(step.meta, self.agent, session.attempt, session.incarnation):
                self.end(session, None)

    # --- what a session holds -----------------------------------------------------------------

    def mine(self, session: Session | None, step) -> TypeGuard[Session]:
        """`session` is this process's (or, for a shell agent, this host's) claim of `step`."""
        return (
            session is not None
            and session.attempt == step.attempt
            and session.incarnation == step.holder.get("incarnation")
            and (self.incarnation is None or session.incarnation == self.incarnation)
        )

    def held(self, snap: Snapshot, step_id: str) -> tuple[Session | None, Step]:
        """(this host's session or None, the step in full) of a step the agent holds in `snap`."""
        step = snap.plan.find(step_id)
        if step is None:
            raise BadInput(f"no step {step_id!r} (see `runner ready` or `runner status`)")
        session = self.sessions.load(step_id)
        if session is not None and (
            not step.valid or holds(step.meta, self.agent, session.attempt, session.incarnation)
        ):
            self.end(session, None)  # its claim is gone: taken over, aborted, recorded elsewhere
            session = None
        why = holds(step.meta, self.agent, None) if step.valid else "the step is invalid"
        if why is None and self.incarnation is not None and step.holder.get("incarnation") != self.incarnation:
            why = f"it was claimed in another session of {self.agent}"
        if why:
            raise NotHeld(f"{self.agent} does not hold {step_id}: {why}")
        return session, step.full()

    def files(self, session: Session) -> Path:
        """The attempt's prompt, output and notes files."""
        return self.sessions.folder / f"{session.step}-a{session.attempt}"

    def log_path(self, session: Session) -> Path:
        return self.store.state_dir / "logs" / "steps" / f"{session.step}-a{session.attempt}.log"

    def actions(self, session: Session, snap: Snapshot) -> WorktreeActions:
        """A worker's tick's actions on the session's worktree: a hand-in runs the same checks there."""
        files = self.files(session)
        files.mkdir(parents=True, exist_ok=True)
        beating = self.beating.get(session.step)
        where = Where(
            worker=self.agent,
            worktree=Path(session.worktree),
            base=session.base,
            files=files,
            log_path=self.log_path(session),
            sessions_dir=self.sessions_dir,
        )
        stops = Stops(
            cancel=threading.Event(),
            lost=beating.lost if beating is not None else threading.Event(),
            stopping=threading.Event(),
        )
        actions = WorktreeActions(self.store, where, stops, snap)
        # the budget counts from the claim
        actions.started = time.monotonic() - max(wall_clock() - session.claimed, 0.0)
        return actions


def keep_claim(queue: Queue, agent: str, step_id: str) -> None:
    """The keeper's life (`runner keep-claim`, started by `runner work`): move the agent's
    heartbeat for the claim its session names, and end when the claim does (recorded,
    released, taken over or aborted; `runner submit` also stops it when it records)."""
    sessions = Sessions(queue.store.state_dir, agent)
    session = sessions.load(step_id)
    if session is None:
        return
    snap = queue.snapshot(fetch=False)
    holder, started = holder_info(), format_time(utc_now())

    def facts() -> dict[str, Any]:
        return {
            "state": "running",
            "step": session.step,
            "attempt": session.attempt,
            "incarnation": session.incarnation,
            "agent": True,
            "pid": os.getpid(),
            "started": started,
            "process_started": holder.get("started"),
            "last": None,
        }

    beating = Heartbeat(
        queue,
        agent,
        session.step,
        session.attempt,
        session.incarnation,
        snap.config.heartbeat_interval,
        facts,
        lambda kind, line: print(f"{format_time(utc_now())} {kind} {line}", flush=True),
    )
    beating.start()
    # Also ends with its session file (ended by this host, or its clone deleted): a keeper
    # never outlives what it keeps, even when the remote cannot be reached to say so.
    while beating.is_alive():
        beating.join(KEEPER_LOOKS)
        if not sessions.path(step_id).exists():
            beating.stop.set()
