"""Where the queue lives: refs, trees, blobs and commits, an atomic multi-ref
compare-and-swap, fetch and worktrees. Knows bytes and refs, never steps.

The contract is two protocols, every method and attribute the queue, the worker, the hooks
and the commands use, and nothing they may probe for: `Store` (refs, objects, commits,
publish, fetch) and `Workspace`, a Store that also has worktrees, the index, merge commits,
history and gc. `runner.store.git.GitStore` is a Workspace over pygit2 and the git CLI (a
remote reached by path, git daemon, ssh or a forge, or none), `runner.store.memory.MemoryStore`
one in memory for fast policy tests, and `runner.store.plumbing.PlumbingStore` a Store over
git's own commands alone (for a command that reads a little and exits: no pygit2 to import)
whose `workspace()` opens a GitStore. tests/test_store.py holds each store to exactly what it
claims; callers that need worktrees, merges or history ask `store.workspace()`.
`runner.store.choice.open_store` is the one place runner picks the store of a repository.

Publishing moves several refs at once or none of them, each on a compare-and-swap of
its old value, and says what happened as a value, never as an error string to match:

    Won()                 every ref moved
    Lost(ref)             another writer moved a ref first: read again and rebuild
    Refused(reasons)      the remote's hook declined, or a ref runner needs cannot exist there
                          (another ref's name is its path): never retried
    Failed(error)         anything else (network, disk): nothing is known to have moved
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runner.core.errors import EXIT_BAD_INPUT, RunnerError

FORCE = "+"  # the expected old value of a ref only its writer moves (a step branch): overwrite
ABSENT = None  # the expected old value of a ref that must not exist yet


@dataclass(frozen=True)
class Author:
    """Who a commit is by. Its email is the repository's configured `user.email` when there is
    one (as git's own commits would carry); `email` only when none is configured."""

    name: str
    email: str


@dataclass(frozen=True)
class RefUpdate:
    ref: str
    new: str | None  # None deletes the ref
    old: str | None  # the value it must have now: an id, ABSENT, or FORCE


@dataclass(frozen=True)
class Won:
    pass


@dataclass(frozen=True)
class Lost:
    ref: str = ""


@dataclass(frozen=True)
class Refused:
    reasons: tuple[str, ...] = ()

    def __str__(self) -> str:
        return "refused: " + "; ".join(self.reasons)


@dataclass(frozen=True)
class Failed:
    error: str = ""

    def __str__(self) -> str:
        return self.error


Outcome = Won | Lost | Refused | Failed


@dataclass(frozen=True)
class CommitInfo:
    id: str
    parents: tuple[str, ...]
    tree: str
    message: str
    author: str
    time: int  # seconds since the epoch, as the committer wrote it


@dataclass(frozen=True)
class FileEntry:
    path: str
    oid: str
    link: bool = False


@dataclass(frozen=True)
class Change:
    path: str
    oid: str | None  # the new blob, None when deleted
    kind: str  # "A" added, "M" modified, "D" deleted, "T" type changed
    link: bool = False


@dataclass(frozen=True)
class Merged:
    commit: str


@dataclass(frozen=True)
class Conflict:
    paths: tuple[str, ...] = field(default_factory=tuple)


class StoreError(RunnerError):
    """The store failed for a reason other than losing a race (a run-time failure, exit 1)."""


class NoSuchPlace(StoreError):
    """The repository or remote a command was pointed at does not exist: a usage error (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class Store(Protocol):
    """Refs, objects, commits, publish and fetch: what every store does itself, the plumbing
    store included (a one-shot command, the server's hook)."""

    remote: str | None  # the remote's name, None when the queue is local
    remote_url: str | None  # where the remote is (None when the queue is local)
    state_dir: Path  # this host's private state for this repository (caches, logs, worktrees)
    workdir: Path  # the repository's working folder (its git folder when bare)
    view_lags: bool  # a push landed but our view of the remote could not follow it: fetch before reading

    # -- reading refs: our view (remote-tracking refs when there is a remote) --
    def ref(self, ref: str) -> str | None: ...  # a ref of this repository itself, as named
    def tip(self, branch: str) -> str | None: ...
    def heartbeat(self, worker: str) -> str | None: ...  # the commit of a worker's last beat
    def heartbeats(self) -> dict[str, str]: ...  # worker id -> commit of its last beat
    def local_head(self) -> str | None: ...  # the commit this clone has checked out, if any
    def reflog(self, ref: str) -> list[tuple[str, str, int]]: ...  # (old, new, time) of its moves, newest first

    # -- reading objects --
    def read(self, oid: str) -> bytes: ...  # a blob
    def object_type(self, oid: str) -> str | None: ...  # "commit", "tree", "blob", "tag" or None
    def file_at(self, commit: str | None, path: str) -> bytes | None: ...
    def entry_at(self, commit: str, path: str) -> FileEntry | None: ...  # the blob at path, if a blob is there
    def tree_id(self, commit: str, path: str = "") -> str | None: ...
    def list_files(self, commit: str, prefix: str) -> list[FileEntry]: ...
    def diff_trees(self, old_tree: str, new_tree: str) -> list[Change]: ...
    def commit(self, oid: str) -> CommitInfo: ...
    def raw_commit(self, oid: str) -> bytes: ...  # headers, a blank line, the message, as git stores it
    def is_ancestor(self, ancestor: str, descendant: str) -> bool: ...
    # reachable from new, not old; oldest first
    def commits_between(self, old: str | None, new: str) -> list[CommitInfo]: ...
    def changed_paths(self, commit: str) -> list[str]: ...  # against its first parent
    # the patch from old to new (commits or trees), renames found; fork: from where new left old (git's old...new)
    def diff(self, old: str, new: str, fork: bool = False) -> bytes: ...
    # the tree a merge of theirs into ours would have, or the paths in conflict; nothing is written but objects
    def would_merge(self, ours: str, theirs: str) -> str | Conflict: ...

    # -- writing objects (by an Author: its email is configured_email() when there is one) --
    def configured_email(self) -> str | None: ...  # the repository's user.email; None when none is configured
    def make_commit(
        self,
        parents: list[str],
        files: Mapping[str, bytes | None],
        message: str,
        author: Author,
        base_tree: str | None = None,
    ) -> str: ...

    # -- moving refs, all or none; the queue's home --
    def publish(self, updates: list[RefUpdate]) -> Outcome: ...
    def fetch(self, branches: list[str], heartbeats: bool = False) -> None: ...
    def remote_branches(self) -> dict[str, str]: ...  # branch -> commit, asked of the queue's home now
    def remote_tip(self, branch: str) -> str | None: ...  # one branch's commit there now: a ref advertisement, no fetch

    def private(self) -> Store: ...  # another handle for another thread
    # the workspace of this repository: the store itself when it is one, else one it opens (and keeps) when asked
    def workspace(self) -> Workspace: ...


class Workspace(Store, Protocol):
    """A store with a working copy's powers: worktrees, the index, merge commits, history and
    gc. GitStore and MemoryStore are workspaces; the plumbing store opens a GitStore for them."""

    # -- worktrees and the index --
    def add_worktree(self, path: Path, commit: str) -> None: ...
    def remove_worktree(self, path: Path) -> None: ...
    def prune_worktrees(self) -> None: ...
    def snapshot_worktree(self, path: Path, base: str) -> tuple[str, list[str]]: ...  # (tree, changed paths)
    # the paths left in conflict
    def merge_in_worktree(self, path: Path, ours: str, theirs: str) -> tuple[str, ...]: ...
    def reset_worktree(self, path: Path, commit: str) -> None: ...  # a fresh checkout of commit, in place
    def diff_text(self, path: Path, base: str) -> bytes: ...  # a worktree's change from base, as a patch
    # each path's value of a gitattributes attribute in a worktree (paths without one are left out)
    def attribute(self, path: Path, paths: list[str], name: str) -> dict[str, str]: ...
    # (the index being committed, the paths it adds or changes)
    def staged_files(self) -> tuple[list[FileEntry], set[str]]: ...

    # -- merges and history --
    def merge(self, ours: str, theirs: str, message: str, author: Author) -> Merged | Conflict: ...
    def log(self, tip: str) -> Iterator[CommitInfo]: ...  # first parents, newest first

    def gc(self) -> str: ...  # pack and prune; what it did, for people
