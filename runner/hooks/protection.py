"""Push protection, as forges have it for code: a push is refused when what it adds to runner's
refs holds a token shape (runner.core.shapes), so a client without the scrubber (an older
runner, a hand edit) cannot publish one to every clone. Scanned, and only what is new:

- the queue branch: each new commit's message, and the lines each adds to a file (a step file,
  a handoff, NOTES.md, runner.toml) against its first parent;
- heartbeats: each new beat's message (the output tail it carries);
- the integration and step branches: runner's own commits there (a result, a merge: they carry
  `Runner-Step`), the lines they add; people's commits of their own code are theirs.

`[secrets] allow` of runner.toml (before the push and after it) lists known false positives.
Each finding is one line: the ref, the commit, the file and line, the shape; never the secret.
"""

from __future__ import annotations

from collections.abc import Iterable

from runner.core.layout import EMPTY_TREE, HEARTBEAT_PREFIX
from runner.core.secrets import Scrubber, added_lines_holding, lines_holding
from runner.core.shapes import shapes
from runner.store import CommitInfo, Store

ZERO = "0" * 40
RUNNER_COMMIT = "\nRunner-Step: "
MAX_FINDINGS = 5  # one push's refusal lists at most these


def secrets_in_push(
    store: Store,
    updates: Iterable[tuple[str, str, str]],
    queue_ref: str,
    code_refs: Iterable[str],
    code_prefixes: Iterable[str],
    allow: Iterable[str],
) -> list[str]:
    """Why to refuse `updates` [(old, new, ref)] for the token shapes they add (empty: none).
    `code_refs` are the integration branches, `code_prefixes` the step branches' prefixes."""
    scan = _Scan(store, Scrubber({}, allow, shapes()))
    code_refs, code_prefixes = set(code_refs), tuple(code_prefixes)
    for old, new, ref in updates:
        if new == ZERO or store.object_type(new) != "commit":
            continue  # a deletion, or not a commit: the other checks refuse what must be refused
        since = None if old == ZERO else old
        if ref == queue_ref:
            for commit in store.commits_between(since, new):
                scan.commit(ref, commit, files=True)
        elif ref.startswith(HEARTBEAT_PREFIX):
            for commit in store.commits_between(since, new):
                scan.commit(ref, commit, files=False)
        elif ref in code_refs or ref.startswith(code_prefixes):
            for commit in store.commits_between(since, new):
                if RUNNER_COMMIT in commit.message:
                    scan.commit(ref, commit, files=True)
        if len(scan.found) >= MAX_FINDINGS:
            break
    return scan.found[:MAX_FINDINGS]


class _Scan:
    def __init__(self, store: Store, scrubber: Scrubber):
        self.store = store
        self.scrubber = scrubber
        self.found: list[str] = []
        self.seen: set[tuple[str | None, str]] = set()  # (old blob, new blob) pairs already read

    def commit(self, ref: str, commit: CommitInfo, files: bool) -> None:
        where = f"{ref}: {commit.id[:10]}"
        for line, name in lines_holding(self.scrubber, commit.message.splitlines()):
            self.found.append(f"{where}: its message, line {line}, holds a {name} (push protection)")
        if not files:
            return
        parent = self.store.commit(commit.parents[0]) if commit.parents else None
        for change in self.store.diff_trees(parent.tree if parent else EMPTY_TREE, commit.tree):
            if change.oid is None or change.link:
                continue
            if self.store.entry_at(commit.id, change.path) is None:
                continue  # not a blob (a gitlink): the commit's own check refuses it
            before = self.store.entry_at(parent.id, change.path) if parent else None
            old = before.oid if before is not None else None
            if (old, change.oid) in self.seen:
                continue
            self.seen.add((old, change.oid))
            data = self.store.read(change.oid)
            for line, name in added_lines_holding(self.scrubber, self.store.read(old) if old else None, data):
                self.found.append(f"{where}: {change.path} line {line} holds a {name} (push protection)")
