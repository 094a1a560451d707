"""The start of an attempt, written once for a worker's tick (runner.worker.tick) and an agent's
claim (runner.worker.agentwork): the queue read at the commit that records the claim (with the
branch tips read before it), what a dead holder left running killed on a takeover, and a fresh
worktree at the integration tip that holds every dependency's merge.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.core.machine import Kind
from runner.core.model import Step
from runner.queue.change import Published
from runner.queue.queue import Queue
from runner.queue.snapshot import Snapshot
from runner.store import Workspace
from runner.worker import worktrees
from runner.worker.worktrees import Log


@dataclass(frozen=True)
class ClaimWon:
    """A claim this process holds: its step and attempt, the queue commit that records it, the
    snapshot it was built on (`before`) and, for a takeover, the attempt it replaces."""

    step: str
    attempt: int
    commit: str
    before: Snapshot
    kind: Kind = Kind.CLAIM
    replaces: int | None = None

    @classmethod
    def of(cls, published: Published) -> ClaimWon:
        event = published.event
        return cls(published.step, published.attempt, published.commit, published.snapshot, event.kind, event.replaces)


@dataclass(frozen=True)
class Begun:
    """An attempt begun: its claim, the queue as the claim left it, the step in full, and the
    integration branch its worktree starts from."""

    claim: ClaimWon
    snap: Snapshot
    step: Step
    integration: str

    def make_worktree(self, store: Workspace, path: Path, start_at: str | None = None) -> str:
        """A fresh worktree at `path` at the integration tip that holds every dependency's merge
        (or at `start_at`: an approved result brought onto that tip); returns that tip, the
        attempt's base."""
        base = worktrees.base_with_dependencies(store, self.snap, self.step, self.integration)
        worktrees.remove(store, path)
        store.add_worktree(path, start_at or base)
        return base


def begin_attempt(queue: Queue, claim: ClaimWon, integration: str, sessions_dir: Path, log: Log) -> Begun:
    """Read the queue at the claim and, on a takeover on the dead holder's own host, kill what
    its commands left running (their session records are in `sessions_dir`)."""
    snap = queue.snapshot_at(claim.commit, [integration])
    snap.tips.update(claim.before.tips)
    step = snap.plan.steps[claim.step].full()
    log("TICK", f"claimed {claim.step} attempt {claim.attempt}")
    if claim.kind == Kind.TAKEOVER:
        worktrees.kill_leftovers(sessions_dir, claim.step, claim.replaces or 0, claim.before, log)
    return Begun(claim, snap, step, integration)
