"""A result that adds a secret is not published (issue 44): an agent that wrote a `.env` with
a token, or a secret variable's value into a file. Before the record, the lines the attempt's
result adds are read for token shapes and the worker's secret values (runner.core.secrets);
when one is found the step is held for a person (`block`, review: blocked), the file and line
named, never the secret, and the result goes nowhere: no step branch, no merge."""

from __future__ import annotations

from runner.core import secrets
from runner.core.layout import EMPTY_TREE
from runner.core.machine import REVIEW_BLOCKED, Kind
from runner.store import Store
from runner.worker.attempt import Outcome

MAX_NAMED = 5  # findings a reason names


def secrets_added(store: Store, result: str, section) -> list[str]:
    """`path line N (what)` for each secret the result commit adds on its first parent."""
    scrubber = secrets.for_config(section)
    commit = store.commit(result)
    parent = store.commit(commit.parents[0]) if commit.parents else None
    found = []
    for change in store.diff_trees(parent.tree if parent else EMPTY_TREE, commit.tree):
        if change.oid is None or change.link:
            continue
        before = store.entry_at(parent.id, change.path) if parent else None
        old = store.read(before.oid) if before is not None else None
        found += [
            f"{change.path} line {line} ({what})"
            for line, what in secrets.added_lines_holding(scrubber, old, store.read(change.oid))
        ]
    return found


def held_for_secrets(store: Store, outcome: Outcome, result: str | None, section) -> tuple[Outcome, str | None]:
    """The outcome to record and the result to publish: a result adding a secret is held back."""
    if result is None or outcome.kind == Kind.RELEASE or not (found := secrets_added(store, result, section)):
        return outcome, result
    more = f" and {len(found) - MAX_NAMED} more" if len(found) > MAX_NAMED else ""
    reason = (
        f"held for a person: the result adds a secret in {', '.join(found[:MAX_NAMED])}{more}; it was not "
        "published (runner reject --reason to guide the next attempt, runner approve to run it again, "
        "runner abort to give up)"
    )
    return Outcome(Kind.BLOCK, review=REVIEW_BLOCKED, reason=reason), None
