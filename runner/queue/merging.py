"""Merging a step's change into the integration branch, as part of the publish that records
it: the merge built on the tip a snapshot saw, and the compare-and-swap that moves the branch
(lost with the record if the branch moved meanwhile, then built again)."""

from __future__ import annotations

from runner.core.codec import merge_message
from runner.core.config import Config
from runner.core.layout import branch_ref
from runner.queue.snapshot import Snapshot
from runner.queue.leases import author_for
from runner.store import FORCE, Conflict, Merged, RefUpdate, Store, StoreError


def merge_update(store: Store, snap: Snapshot, result: str, step: str, attempt: int, actor: str) -> tuple[Merged | Conflict, RefUpdate | None]:
    """Merge a step's result into the integration branch as this snapshot saw it: the merge
    and the compare-and-swap that publishes it (None when it conflicts)."""
    branch = snap.config.queue.integration_branch
    tip = snap.tips.get(branch)
    if tip is None:
        raise StoreError(f"no integration branch {branch!r}: run `runner init`")
    merged = store.merge(tip, result, merge_message(step, attempt, branch, actor), author_for(actor))
    if isinstance(merged, Conflict):
        return merged, None
    return merged, RefUpdate(branch_ref(branch), merged.commit, tip)


def step_branch_update(config: Config, step: str, commit: str | None, done: bool) -> RefUpdate:
    """The step branch keeps the attempt's result; once merged, it goes if runner.toml says so."""
    ref = branch_ref(config.queue.step_branch_prefix + step)
    if done and config.queue.prune_merged_step_branches:
        return RefUpdate(ref, None, FORCE)  # the merge on the integration branch keeps the record
    return RefUpdate(ref, commit, FORCE)
