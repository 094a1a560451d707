"""Merging a step's change into the integration branch, as part of the publish that records
it (a worker's, or a person's approval): the merge built on the tip a snapshot saw, and the
compare-and-swap that moves the branch (lost with the record if the branch moved meanwhile,
then built again)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from runner.core.codec import merge_message
from runner.core.config import Config
from runner.core.layout import branch_ref
from runner.core.machine import Event, Kind, Status
from runner.core.model import utc_now
from runner.queue.leases import author_for
from runner.queue.snapshot import Snapshot
from runner.store import FORCE, Conflict, RefUpdate, Store, StoreError

if TYPE_CHECKING:
    from runner.queue.change import Change, Published
    from runner.queue.queue import Queue


def merge_update(
    store: Store, snap: Snapshot, result: str, step: str, attempt: int, actor: str
) -> RefUpdate | Conflict:
    """Merge a step's result into the integration branch as this snapshot saw it: the
    compare-and-swap that publishes the merge (its `new` is the merge commit), or the conflict."""
    branch = snap.config.queue.integration_branch
    tip = snap.tips.get(branch)
    if tip is None:
        raise StoreError(f"no integration branch {branch!r}: run `runner init`")
    merged = store.workspace().merge(tip, result, merge_message(step, attempt, branch, actor), author_for(actor))
    if isinstance(merged, Conflict):
        return merged
    return RefUpdate(branch_ref(branch), merged.commit, tip)


def step_branch_update(config: Config, step: str, commit: str | None, done: bool) -> RefUpdate:
    """The step branch keeps the attempt's result; once merged, it goes if runner.toml says so."""
    ref = branch_ref(config.queue.step_branch_prefix + step)
    if done and config.queue.prune_merged_step_branches:
        return RefUpdate(ref, None, FORCE)  # the merge on the integration branch keeps the record
    return RefUpdate(ref, commit, FORCE)


def approve(queue: Queue, step_id: str, person: str) -> Published:
    """A person's approval: a result waiting in review is merged and recorded done in one
    publish; a merge that conflicts sends the step back to ready marked `resolve`: the worker
    that claims it brings this result onto the new tip (a resolve pass), not a run from scratch."""
    from runner.queue.queue import OUTCOME_TRIES

    def build(snap: Snapshot) -> Change:
        step = snap.plan.find(step_id)
        step = step and step.full()
        result = (step.meta.get("result") or {}) if step is not None and step.valid else {}
        waiting = (
            step is not None and step.status == Status.REVIEW and (step.meta.get("review") or "result") == "result"
        )
        base = Event(
            Kind.APPROVE, person, utc_now(), step=step_id, attempt=step.attempt if step and step.valid else None
        )
        if not (waiting and isinstance(result, dict) and result.get("commit")):
            return queue.step_change(snap, base)
        assert step is not None  # it waits for this approval
        update = merge_update(queue.store, snap, result["commit"], step_id, step.attempt, person)
        if isinstance(update, Conflict):
            conflict = (
                f"the merge into {snap.config.queue.integration_branch} conflicts in {', '.join(update.paths)}: "
                "a worker brings the result onto the new tip (a resolve pass)"
            )
            return queue.step_change(snap, replace(base, reason=conflict))
        event = replace(base, result={"merge": update.new})
        prune = step_branch_update(snap.config, step_id, result["commit"], done=True)
        return queue.step_change(snap, event, refs=[update] + ([prune] if prune.new is None else []))

    # The result was made on another worker's clone: its step branch brings the commit here
    # (named by runner.toml, so the queue comes first).
    queue.store.fetch([queue.branch])
    return queue.publish(build, person, tries=OUTCOME_TRIES, branches=queue.branches(step_id))
