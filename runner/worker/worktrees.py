"""A step's worktree: made fresh for each attempt, committed as the attempt's change,
removed afterwards (kept on failure when configured); and what a crashed holder left."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from runner.core.codec import result_message
from runner.queue.leases import author_for, local_holder_gone
from runner.queue.snapshot import Snapshot
from runner.store import StoreError, Workspace
from runner.worker import executor
from runner.worker.attempt import State

Log = Callable[[str, str], None]


def base_with_dependencies(store: Workspace, snap: Snapshot, step, branch: str) -> str:
    """The tip of the integration `branch` an attempt starts from: one that holds every
    dependency's merge. Our view of the branch can lag the queue's (a tracking ref another
    process held when we fetched); then it is read again, and the step never starts without
    its inputs."""
    merges = [m for dep in step.depends_on if (m := ((snap.plan.steps[dep].get("result") or {}).get("merge")))]
    for attempt in range(6):
        base = snap.tips.get(branch) if attempt == 0 else store.tip(branch)
        if base is None:
            raise StoreError(f"no integration branch {branch!r}: run `runner init`")
        if all(store.is_ancestor(merge, base) for merge in merges):
            return base
        time.sleep(0.5 * attempt)
        store.fetch([branch])
    raise StoreError(f"the integration branch here lacks the merges of {step.id}'s dependencies; released to run later")


def commit(
    store: Workspace, worker: str, state: State, worktree: Path, base: str, parents: list[str] | None = None
) -> tuple[str | None, list[str]]:
    """The attempt's change as one commit on top of its base (kept on runner/steps/<id>); after a
    resolve pass, a merge of the new tip and the earlier result (`parents`)."""
    if not worktree.exists():
        return None, []
    tree, changed = store.snapshot_worktree(worktree, base)
    message = result_message(state.step.id, state.step.title, state.attempt, worker)
    return store.make_commit(parents or [base], {}, message, author_for(worker), base_tree=tree), changed


def remove(store: Workspace, worktree: Path) -> None:
    if worktree.exists():
        store.remove_worktree(worktree)
        shutil.rmtree(worktree, ignore_errors=True)


def clean_up(store: Workspace, worktree: Path, state: State, log: Log) -> None:
    if (
        worktree.exists()
        and state.config.worker.keep_worktree_on_failure
        and any(g.result == "fail" for g in state.gates)
    ):
        log("KEEP", f"kept worktree {worktree}")
        return
    remove(store, worktree)


def prune_stale(store: Workspace, own: Path, log: Log) -> None:
    """Worktrees of this worker id left by a crashed tick (its id's lock is held: none is live)."""
    stale = [p for p in own.iterdir() if p.is_dir()] if own.is_dir() else []
    for path in stale:
        remove(store, path)
    if stale:
        store.prune_worktrees()
        log("PRUNE", f"removed {len(stale)} stale worktree(s)")


def kill_leftovers(sessions: Path, step_id: str, replaced: int, snap: Snapshot, log: Log) -> None:
    """A takeover on the holder's own host: kill what the dead holder's commands left running."""
    step = snap.plan.steps.get(step_id)
    if step is None or not local_holder_gone(step.holder):
        return
    for record in sessions.glob(f"{step_id}-a*.json"):
        attempt = record.stem.rsplit("-a", 1)[-1]
        if attempt.isdigit() and int(attempt) <= replaced and (killed := executor.kill_recorded_session(record)):
            log("KILL", f"killed {killed} process(es) left running by {step.assignee}'s attempt of {step_id}")
