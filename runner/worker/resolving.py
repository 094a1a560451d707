"""A merge conflict is not a failure (issue 32): when the record's merge conflicts because
the integration branch moved, the attempt is brought onto the new tip in its own worktree
(git's own merge, else a resolve pass: `[roles.resolve]`, or the step's command again on the
new tip; then the gates and the verifier again) and recorded again, without spending the
step's budget, up to `[brakes] max_resolve_attempts` passes. The same for a result a person
approved whose merge conflicted: the step came back `ready` with `resolve: true`, and the
worker that claims it starts from that result instead of from scratch."""

from __future__ import annotations

import time
from typing import Any

from runner.core.machine import Kind
from runner.core.model import Step
from runner.queue.change import Published
from runner.queue.queue import Queue
from runner.queue.snapshot import Snapshot
from runner.store import Store, StoreError
from runner.worker.actions import WorktreeActions
from runner.worker.attempt import Outcome, State, named
from runner.worker.pipeline import run_resolve
from runner.worker.record import MergeConflict, Recorder


def approved_result(store: Store, step: Step, state: State) -> str | None:
    """The commit of the approved result this attempt brings onto the new tip (the step is
    marked `resolve: true`), read from its step branch; None: the attempt starts from scratch."""
    result = step.meta.get("result")
    if not step.meta.get("resolve") or not state.config.brakes.max_resolve_attempts or not isinstance(result, dict):
        return None
    commit, branch = result.get("commit"), result.get("branch")
    try:
        if isinstance(branch, str):
            store.fetch([branch])
        store.commit(str(commit))
    except (StoreError, KeyError, ValueError):
        return None  # the result is nowhere to be read: the step is done again from its new base
    return str(commit)


def first_pass(state: State, actions: WorktreeActions, base: str, approved: str) -> Outcome:
    """An approved result whose merge conflicted, brought onto the integration tip `base`."""
    outcome = run_resolve(state, actions, base, approved)
    _note(state, f"the approved result {approved[:10]} did not merge", base, outcome)
    return outcome


def record(
    recorder: Recorder,
    queue: Queue,
    state: State,
    outcome: Outcome,
    result: str | None,
    files: list[str],
    notes: str | None,
    log_path: Any,
    elapsed: float,
    snapshot: Snapshot,
    then: Any,
    actions: WorktreeActions | None,
) -> tuple[Published, str, Outcome, list[str]]:
    """Publish the attempt's outcome; while its merge conflicts and passes are left, bring it onto
    the new tip and publish again. (what was published, the sentinel, the outcome, its files)"""
    started = time.monotonic()
    integration = snapshot.config.queue.integration_branch
    while True:
        passes_left = actions is not None and state.resolves < state.config.brakes.max_resolve_attempts
        try:
            published, sentinel = recorder.record(
                state,
                outcome,
                result,
                files,
                notes,
                log_path,
                elapsed + time.monotonic() - started,
                snapshot,
                then=then,
                resolve=passes_left,
            )
            return published, sentinel, outcome, files
        except MergeConflict as conflict:
            assert actions is not None and result is not None
            outcome = run_resolve(state, actions, conflict.onto, result)
            _note(state, f"the record's merge conflicted in {named(conflict.paths)}", conflict.onto, outcome)
            result, files = actions.commit(state) if outcome.kind != Kind.RELEASE else (None, [])
            then = None if outcome.halt else then  # a pass whose verifier faulted halts the queue: claim nothing more
            snapshot = queue.snapshot(fetch=False, branches=[integration])


def _note(state: State, why: str, onto: str, outcome: Outcome) -> None:
    """The handoff's Resolve section: one line a pass."""
    how = next((role.detail for role in reversed(state.roles) if role.name == "resolve"), "")
    line = f"- pass {state.resolves}: {why} (the integration branch moved to {onto[:10]})" + (f": {how}" if how else "")
    if outcome.kind != Kind.COMPLETE:
        line += f" -> {outcome.kind}: {outcome.reason or ''}"
    state.notes["Resolve"] = (state.notes.get("Resolve", "") + "\n" + line).strip()
