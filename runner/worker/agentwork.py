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

from contextlib import suppress
from pathlib import Path
from typing import Any

from runner.core.clock import wall_clock
from runner.core.comments import feedback_of
from runner.core.errors import RunnerError
from runner.core.limits import MAX_NOTES_APPEND_BYTES, clip
from runner.core.machine import Kind
from runner.core.model import Status, Step, utc_now
from runner.queue.change import ClaimLost
from runner.queue.leases import local_holder_gone, new_incarnation
from runner.queue.queue import Queue
from runner.queue.snapshot import Snapshot
from runner.worker import worktrees
from runner.worker.agenthost import AgentHost, NotHeld, keep_claim
from runner.worker.agentreturns import Claimed, Ready, ReadyStep, Shown
from runner.worker.agentsession import Session, context, not_yet, shown, state_of, worktree_folder
from runner.worker.attempt import Outcome, Run, State, named
from runner.worker.begin import ClaimWon, begin_attempt
from runner.worker.gates import PASS
from runner.worker.markers import MARKERS_LEFT, markers_left
from runner.worker.pipeline import RESOLVE_FEEDBACK, run_checks
from runner.worker.record import MergeConflict, Recorder, outcome_report
from runner.worker.report import TickResult

__all__ = ["AgentWork", "NotHeld", "keep_claim"]


class AgentWork:
    """One agent id's work on one queue, from this host; what it keeps on this host while it
    holds a claim (session files, heartbeat, worktree) is its `host` (runner.worker.agenthost).
    `heartbeat`: "thread" keeps the claim's heartbeat in this process while it lives (`runner
    mcp`, whose pid the claim names), or a callable(session) -> keeper facts that starts a
    process to keep it (`runner work`)."""

    def __init__(
        self, queue: Queue, agent: str, tags: list[str] | None = None, heartbeat: Any = "thread", header: str = ""
    ):
        self.queue = queue
        self.header = header  # the start of a claimed step's prompt (runner.agents.prime; plans/prompts/agent.md wins)
        self.store = queue.store.workspace()
        self.agent = agent
        self.tags = list(tags or [])
        self.host = AgentHost(queue, agent, heartbeat)

    # --- reading ---------------------------------------------------------------------------

    def snapshot(self, fetch: bool = True) -> Snapshot:
        branch = self.queue.branches()[0]
        snap = self.queue.snapshot(fetch=fetch, branches=[branch])
        if snap.config.queue.integration_branch != branch:
            snap = self.queue.snapshot(fetch=False, branches=[snap.config.queue.integration_branch])
        return snap

    def ready(self) -> Ready:
        """What this agent may take now, best first; when nothing, why."""
        from runner.queue.claims import why_nothing

        snap = self.snapshot()
        steps = (
            ()
            if snap.plan.halted
            else tuple(
                ReadyStep(s.id, s.title, s.priority, s.depends_on) for s in snap.plan.ready(utc_now(), self.tags)
            )
        )
        why = (
            None
            if steps
            else (
                f"queue halted: {snap.plan.halted}"
                if snap.plan.halted
                else why_nothing(snap, self.tags, None, by_agent=True)
            )
        )
        return Ready(steps, why)

    def show(self, step_id: str) -> Shown:
        """The step as an agent reads it (`text`) and its facts: status, holder, attempt, problems."""
        return Shown(**shown(self.store, self.snapshot(), step_id))

    # --- claiming --------------------------------------------------------------------------

    def claim(self, step_id: str | None = None, context: str = "") -> Claimed:
        with self.host.locked():
            snap = self.snapshot()
            self.host.prune(snap)
            held = next((s for s in snap.plan.with_status(Status.CLAIMED) if s.assignee == self.agent), None)
            if held is not None:
                session = self.host.sessions.load(held.id)
                if self.host.mine(session, held) and step_id in (None, held.id):
                    return self.claimed(session, snap)  # the same claim again: its worktree and prompt
                if not local_holder_gone(held.holder):
                    where = "" if self.host.mine(session, held) else " in another session"
                    raise NotHeld(
                        f"{self.agent} already holds {held.id} (attempt {held.attempt}){where}: complete, "
                        f"fail or release it first (one step at a time per id)"
                    )
                step_id = step_id or held.id  # its session died on this host: take it over
            incarnation = self.host.incarnation or new_incarnation(self.agent)
            facts = self.host.facts("running", incarnation=incarnation)
            if not self.host.in_process:
                facts.pop("pid"), facts.pop("process_started")  # the keeper's beats name the keeper
            published = self.queue.claim(
                self.agent,
                incarnation,
                self.host.holder,
                self.tags,
                step_id=step_id,
                snapshot=snap,
                beat=facts,
                by_agent=True,
            )
            change = published.change
            if change.status == Status.FAILED:
                raise RunnerError(
                    f"{published.step}: {change.updates.get('last_error')} "
                    "(its attempts are spent; a person may retry it)"
                )
            return self.start(ClaimWon.of(published), incarnation, context)

    def start(self, claim: ClaimWon, incarnation: str, caller: str = "") -> Claimed:
        """Make the worktree of a claim just won; on any fault, give the step back."""
        begun = begin_attempt(
            self.queue,
            claim,
            claim.before.config.queue.integration_branch,
            self.host.sessions_dir,
            lambda kind, line: None,
        )
        snap, step = begun.snap, begun.step
        path = worktree_folder(self.store.workdir, self.store.state_dir, self.agent) / f"{step.id}-a{claim.attempt}"
        try:
            if (dead := self.host.sessions.load(step.id)) is not None:
                self.host.end(dead, None)  # a session of ours that died holding this step: its worktree goes
            base = begun.make_worktree(self.store, path)
            session = Session(
                step.id, claim.attempt, incarnation, str(path), base, wall_clock(), wall_clock(), context=caller
            )
            self.host.open(session)
        except Exception as exc:
            with suppress(RunnerError):  # else its lease gives it back
                self.queue.event(
                    step.id,
                    Kind.RELEASE,
                    self.agent,
                    incarnation=incarnation,
                    reason=clip(f"runner error: could not make the worktree ({type(exc).__name__}: {exc})"),
                )
            worktrees.remove(self.store, path)
            raise
        self.host.beat(session, snap.config.heartbeat_interval)
        return self.claimed(session, snap)

    def claimed(self, session: Session, snap: Snapshot) -> Claimed:
        step = snap.plan.steps[session.step].full()
        tokens = {
            "step": step.id,
            "title": step.title,
            "attempt": str(session.attempt),
            "cwd": session.worktree,
            "worktree": session.worktree,
            "worker": self.agent,
        }
        feedback = session.feedback or feedback_of(step.meta)
        prompt = context(
            lambda path: self.store.file_at(snap.tip, path),
            snap.plan,
            step,
            feedback,
            self.header,
            tokens,
            session.context,
        )
        return Claimed(step.id, step.title, session.attempt, session.worktree, snap.config.leases.lease, prompt)

    # --- handing in ------------------------------------------------------------------------

    def complete(self, step_id: str, notes: str | None = None) -> TickResult:
        """Run the step's checks in the agent's worktree; record the outcome, or (a check failed,
        fixes left) keep the claim and say what to fix."""
        with self.host.locked():
            session, step, snap = self.held(step_id)
            if session is None or not Path(session.worktree).is_dir():
                raise NotHeld(
                    f"{self.agent} holds {step_id}, but no worktree of it is on this host: release it "
                    f"(`runner release {step_id} --id {self.agent}`) and take it again"
                )
            state = state_of(session, step, snap.config)
            now = wall_clock()
            state.runs.append(
                Run("implement", PASS, max(now - session.since, 0.0), f"handed in by {self.agent} from its own session")
            )
            if left := markers_left(self.store, Path(session.worktree), session.conflicts, session.sides):
                return not_yet(session, state, MARKERS_LEFT.format(paths=named(left)), self.agent, tuple(left))
            checked = run_checks(state, self.host.actions(session, snap))
            if isinstance(checked, Outcome):
                return self.finish(session, state, checked, notes)
            session.keep(state)
            session.since = now
            self.host.sessions.save(session)
            return not_yet(session, state, checked, self.agent)

    def fail(self, step_id: str, reason: str, permanent: bool = False) -> TickResult:
        return self.give_back(step_id, Outcome(Kind.FAIL, reason=clip(f"{self.agent}: {reason}"), permanent=permanent))

    def release(self, step_id: str, reason: str) -> TickResult:
        return self.give_back(step_id, Outcome(Kind.RELEASE, reason=clip(f"{self.agent}: {reason}")))

    def give_back(self, step_id: str, outcome: Outcome) -> TickResult:
        with self.host.locked():
            session, step, snap = self.held(step_id)
            if session is None:  # claimed by hand (`runner claim`): no worktree, nothing to keep
                session = Session(
                    step.id, step.attempt, str(step.holder.get("incarnation") or ""), "", "", wall_clock(), wall_clock()
                )
            return self.finish(session, state_of(session, step, snap.config), outcome, None)

    def finish(self, session: Session, state: State, outcome: Outcome, notes: str | None) -> TickResult:
        """Record the outcome (with its merge, the handoff and the heartbeat, in one publish) and end the session."""
        worktree = Path(session.worktree) if session.worktree else None
        result: str | None = None
        files: list[str] = []
        if outcome.kind != Kind.RELEASE and worktree is not None:
            result, files = worktrees.commit(self.store, self.agent, state, worktree, session.base)
        log_path = self.host.log_path(session)
        snap = self.snapshot(fetch=False)

        def beat(step: str, attempt: int, status: str) -> dict[str, Any]:
            return self.host.facts("idle", last={"step": step, "attempt": attempt, "outcome": status})

        recorder = Recorder(self.queue, self.agent, session.incarnation or None, beat)
        passes_left = (
            outcome.kind == Kind.COMPLETE
            and worktree is not None
            and state.resolves < state.config.brakes.max_resolve_attempts
        )
        try:
            published, sentinel = recorder.record(
                state,
                outcome,
                result,
                files,
                clip(notes, MAX_NOTES_APPEND_BYTES) if notes else None,
                log_path,
                max(wall_clock() - session.claimed, 0.0),
                snap,
                resolve=passes_left,
            )
        except MergeConflict as conflict:
            assert worktree is not None and result is not None
            return self.onto_new_tip(session, state, snap, result, conflict, notes)
        except ClaimLost as exc:
            self.host.end(session, state)
            raise NotHeld(f"nothing recorded: {exc}") from None
        if outcome.halt:
            self.queue.set_halt(outcome.halt, self.agent)
        self.host.end(session, state)
        return outcome_report(sentinel, state, self.agent, published, files, log_path)

    def onto_new_tip(
        self, session: Session, state: State, snap: Snapshot, result: str, conflict: MergeConflict, notes: str | None
    ) -> TickResult:
        """The integration branch moved while the agent worked and the hand-in's merge conflicts: as
        a worker's resolve pass (docs/pipeline.md), with the agent as the resolver. The new
        tip is merged into its worktree; where git merges it cleanly the checks run again and it is
        recorded, else the conflicts are left between git's markers and the step stays the agent's
        (nothing recorded, no attempt spent) until it hands in again."""
        conflicted = self.store.merge_in_worktree(Path(session.worktree), result, conflict.onto)
        state.resolves += 1
        session.base = conflict.onto
        where = f"onto {conflict.onto[:10]}"
        if not conflicted:
            state.runs.append(Run("resolve", PASS, None, f"git merged the change {where} cleanly"))
            checked = run_checks(state, self.host.actions(session, snap))
            if isinstance(checked, Outcome):
                return self.finish(session, state, checked, notes)
            feedback = checked
        else:
            left = f"{len(conflicted)} file(s) ({named(conflicted)}) conflict {where}: left to {self.agent}"
            state.runs.append(Run("resolve", "not run", None, left))
            feedback = RESOLVE_FEEDBACK.format(where=where, paths=named(conflicted))
            state.feedback = feedback
            session.conflicts, session.sides = list(conflicted), [conflict.onto, result]
        session.keep(state)
        session.since = wall_clock()
        self.host.sessions.save(session)
        return not_yet(session, state, feedback, self.agent, tuple(conflicted))

    def held(self, step_id: str) -> tuple[Session | None, Step, Snapshot]:
        """(this host's session or None, the step in full, the snapshot) of a step the agent holds."""
        snap = self.snapshot()
        session, step = self.host.held(snap, step_id)
        return session, step, snap
