"""MemoryStore: the Store in memory, for fast policy tests of the queue and the worker.

Objects are content-addressed like git's (a blob has git's own id; a tree of names and a
commit of parents, tree and message are hashed as git hashes its objects), refs move by the
same all-or-nothing compare-and-swap and keep a reflog, and a merge is a three-way merge of
files. Worktrees are plain folders and the index is a dict a test fills. It is never used to
run a real queue; tests/test_store.py holds it to the same contract as GitStore.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from runner.core.layout import HEARTBEAT_PREFIX, heartbeat_ref
from runner.store import (
    FORCE,
    Author,
    Change,
    CommitInfo,
    Conflict,
    FileEntry,
    Lost,
    Merged,
    Outcome,
    RefUpdate,
    StoreError,
    Won,
    memoryfolders,
)
from runner.store.memoryfolders import merge_base

Tree = dict[str, tuple[str, str]]  # name -> ("blob" | "tree", id)


class MemoryStore:
    # The worktrees are folders: each is the function of the same name in runner.store.memoryfolders.
    add_worktree = memoryfolders.add_worktree
    remove_worktree = memoryfolders.remove_worktree
    prune_worktrees = memoryfolders.prune_worktrees
    snapshot_worktree = memoryfolders.snapshot_worktree
    diff_text = memoryfolders.diff_text
    merge_in_worktree = memoryfolders.merge_in_worktree
    reset_worktree = memoryfolders.reset_worktree
    staged_files = memoryfolders.staged_files
    attribute = memoryfolders.attribute
    diff = memoryfolders.diff

    def merge(self, ours: str, theirs: str, message: str, author: Author) -> Merged | Conflict:
        return three_way_merge(self, ours, theirs, message, author)

    def would_merge(self, ours: str, theirs: str) -> str | Conflict:
        merged = merged_files(self, ours, theirs)
        if isinstance(merged, Conflict):
            return merged
        return self._write(None, {path: self.blobs[oid] for path, oid in merged.items()})

    remote = None
    remote_url = None
    view_lags = False  # there is no remote to lag behind

    def __init__(self, state_dir: Path | None = None):
        self.blobs: dict[str, bytes] = {}
        self.trees: dict[str, Tree] = {}
        self.commits: dict[str, CommitInfo] = {}
        self.raw: dict[str, bytes] = {}  # commit id -> the commit as git would store it
        self.refs: dict[str, str] = {}
        self.reflogs: dict[str, list[tuple[str, str, int]]] = {}  # ref -> (old, new, time), oldest first
        self.head: str | None = None  # what local_head() answers: no clone has anything checked out
        self.index: dict[str, bytes] = {}  # what staged_files() answers: the files a test staged
        self.clock = 1_700_000_000
        self.state_dir = state_dir or Path(tempfile.mkdtemp(prefix="runner-memory-"))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.workdir = self.state_dir
        self.empty_tree = self._put_tree({})  # EMPTY_TREE, git's own id of it, which callers name
        self.publishes = 0  # how many publishes moved refs (tests count round trips with it)

    # --- objects ---

    @staticmethod
    def _id(kind: str, data: bytes) -> str:
        """As git names its objects: a blob's id is the one git gives the same bytes."""
        return hashlib.sha1(f"{kind} {len(data)}".encode() + b"\0" + data).hexdigest()

    def _put_blob(self, data: bytes) -> str:
        oid = self._id("blob", data)
        self.blobs[oid] = data
        return oid

    def _put_tree(self, tree: Tree) -> str:
        """Named as git names a tree: its entries in git's order (a folder sorts as 'name/')."""
        order = sorted(tree, key=lambda name: name + "/" if tree[name][0] == "tree" else name)
        data = b"".join(
            b"%s %s\0" % (b"40000" if tree[n][0] == "tree" else b"100644", n.encode()) + bytes.fromhex(tree[n][1])
            for n in order
        )
        oid = self._id("tree", data)
        self.trees[oid] = dict(tree)
        return oid

    def read(self, oid: str) -> bytes:
        if oid not in self.blobs:
            raise StoreError(f"{oid} is not a blob")
        return self.blobs[oid]

    def commit(self, oid: str) -> CommitInfo:
        if oid not in self.commits:
            raise StoreError(f"{oid} is not a commit")
        return self.commits[oid]

    def raw_commit(self, oid: str) -> bytes:
        self.commit(oid)
        return self.raw[oid]

    def object_type(self, oid: str) -> str | None:
        kinds = (("commit", self.commits), ("tree", self.trees), ("blob", self.blobs))
        return next((kind for kind, objects in kinds if oid in objects), None)

    def _node(self, tree: str, path: str) -> tuple[str, str] | None:
        node = ("tree", tree)
        for part in [p for p in path.split("/") if p]:
            if node[0] != "tree" or part not in self.trees[node[1]]:
                return None
            node = self.trees[node[1]][part]
        return node

    def file_at(self, commit: str | None, path: str) -> bytes | None:
        if commit is None:
            return None
        node = self._node(self.commit(commit).tree, path)
        return self.blobs[node[1]] if node and node[0] == "blob" else None

    def entry_at(self, commit: str, path: str) -> FileEntry | None:
        node = self._node(self.commit(commit).tree, path)
        return FileEntry(path, node[1]) if node and node[0] == "blob" else None

    def tree_id(self, commit: str, path: str = "") -> str | None:
        node = self._node(self.commit(commit).tree, path)
        return node[1] if node and node[0] == "tree" else None

    def _files(self, tree: str, prefix: str = "") -> dict[str, str]:
        found = {}
        for name, (kind, oid) in self.trees[tree].items():
            path = f"{prefix}/{name}" if prefix else name
            if kind == "tree":
                found.update(self._files(oid, path))
            else:
                found[path] = oid
        return found

    def list_files(self, commit: str, prefix: str) -> list[FileEntry]:
        tree = self.tree_id(commit, prefix)
        return [FileEntry(path, oid) for path, oid in self._files(tree, prefix).items()] if tree else []

    def diff_trees(self, old_tree: str, new_tree: str) -> list[Change]:
        old, new = self._files(old_tree), self._files(new_tree)
        changes = [Change(p, new[p], "A" if p not in old else "M") for p in new if old.get(p) != new[p]]
        return changes + [Change(p, None, "D") for p in old if p not in new]

    def changed_paths(self, commit: str) -> list[str]:
        info = self.commit(commit)
        base = self.commit(info.parents[0]).tree if info.parents else self.empty_tree
        return [c.path for c in self.diff_trees(base, info.tree)]

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        seen, todo = set(), [descendant]
        while todo:
            oid = todo.pop()
            if oid == ancestor:
                return True
            if oid not in seen:
                seen.add(oid)
                todo += self.commit(oid).parents
        return False

    def commits_between(self, old: str | None, new: str) -> list[CommitInfo]:
        return [self.commit(oid) for oid in parents_first(lambda oid: self.commit(oid).parents, old, new)]

    def log(self, tip: str) -> Iterator[CommitInfo]:
        oid: str | None = tip
        while oid:
            info = self.commit(oid)
            yield info
            oid = info.parents[0] if info.parents else None

    def _write(self, base: str | None, files: Mapping[str, bytes | None]) -> str:
        tree: Tree = dict(self.trees[base]) if base else {}
        below: dict[str, dict[str, bytes | None]] = {}
        for path, data in files.items():
            head, _, rest = path.partition("/")
            if rest:
                below.setdefault(head, {})[rest] = data
            elif data is None:
                tree.pop(head, None)
            else:
                tree[head] = ("blob", self._put_blob(data))
        for name, sub in below.items():
            current = tree.get(name)
            subtree = self._write(current[1] if current and current[0] == "tree" else None, sub)
            if self.trees[subtree]:
                tree[name] = ("tree", subtree)
            else:
                tree.pop(name, None)
        return self._put_tree(tree)

    def configured_email(self) -> str | None:
        return None  # an in-memory repository has no configuration: the author's own email

    def make_commit(
        self,
        parents: list[str],
        files: Mapping[str, bytes | None],
        message: str,
        author: Author,
        base_tree: str | None = None,
    ) -> str:
        if base_tree is None and parents:
            base_tree = self.commit(parents[0]).tree
        tree = self._write(base_tree, files)
        self.clock += 1
        who = f"{author.name} <{author.email}> {self.clock} +0000"
        headers = [f"tree {tree}", *(f"parent {p}" for p in parents), f"author {who}", f"committer {who}"]
        raw = ("\n".join(headers) + "\n\n" + message).encode("utf-8")
        oid = self._id("commit", raw)
        self.commits[oid] = CommitInfo(oid, tuple(parents), tree, message, author.name, self.clock)
        self.raw[oid] = raw
        return oid

    # --- refs ---

    def tip(self, branch: str) -> str | None:
        return self.refs.get("refs/heads/" + branch)

    def heartbeat(self, worker: str) -> str | None:
        return self.refs.get(heartbeat_ref(worker))

    def heartbeats(self) -> dict[str, str]:
        return {r[len(HEARTBEAT_PREFIX) :]: oid for r, oid in self.refs.items() if r.startswith(HEARTBEAT_PREFIX)}

    def publish(self, updates: list[RefUpdate]) -> Outcome:
        for u in updates:
            if u.old != FORCE and self.refs.get(u.ref) != u.old:
                return Lost(u.ref)
        now = int(time.time())  # a reflog's time is the wall clock's, as git's is
        for u in updates:
            old = self.refs.get(u.ref)
            if u.new is None:
                self.refs.pop(u.ref, None)
                self.reflogs.pop(u.ref, None)  # git deletes a ref's reflog with it
            else:
                self.refs[u.ref] = u.new
                self.reflogs.setdefault(u.ref, []).append((old or "0" * 40, u.new, now))
        self.publishes += 1
        return Won()

    def reflog(self, ref: str) -> list[tuple[str, str, int]]:
        return list(reversed(self.reflogs.get(ref, [])))

    def fetch(self, branches: list[str], heartbeats: bool = False) -> None:
        return None

    def remote_branches(self) -> dict[str, str]:
        return {ref.removeprefix("refs/heads/"): oid for ref, oid in self.refs.items() if ref.startswith("refs/heads/")}

    def remote_tip(self, branch: str) -> str | None:
        return self.tip(branch)

    # --- refs of this store itself, and housekeeping ---

    def ref(self, ref: str) -> str | None:
        return self.refs.get(ref)

    def local_head(self) -> str | None:
        return self.head

    def private(self) -> MemoryStore:
        return self  # one thread's objects are every thread's: there is nothing to separate

    def workspace(self) -> MemoryStore:
        return self  # a Workspace itself

    def gc(self) -> str:
        return "nothing to pack: the store is in memory"


def parents_first(parents_of: Callable[[str], Sequence[str]], old: str | None, new: str) -> list[str]:
    """The commits reachable from `new` and not from `old`, each after its parents."""
    hidden, todo = set(), [old] if old else []
    while todo:
        oid = todo.pop()
        if oid not in hidden:
            hidden.add(oid)
            todo += parents_of(oid)
    found: list[str] = []
    seen = set(hidden)
    stack: list[tuple[str, bool]] = [(new, False)]
    while stack:  # depth first; a commit is listed once its parents are
        oid, parents_done = stack.pop()
        if parents_done:
            found.append(oid)
        elif oid not in seen:
            seen.add(oid)
            stack.append((oid, True))
            stack += [(p, False) for p in reversed(parents_of(oid))]
    return found


def merged_files(store: MemoryStore, ours: str, theirs: str) -> dict[str, str] | Conflict:
    """git's three-way merge of two commits' files (path -> blob), a whole file the unit of a conflict."""
    base = merge_base(store, ours, theirs)
    files = {
        t: store._files(store.commit(c).tree) if c else {}
        for t, c in (("base", base), ("ours", ours), ("theirs", theirs))
    }
    merged, conflicts = dict(files["ours"]), []
    for path in set(files["theirs"]) | set(files["base"]):
        b, o, t = files["base"].get(path), files["ours"].get(path), files["theirs"].get(path)
        if t == b or t == o:
            continue
        if o != b:
            conflicts.append(path)
        elif t is None:
            merged.pop(path, None)  # theirs deleted it
        else:
            merged[path] = t
    return Conflict(tuple(sorted(conflicts))) if conflicts else merged


def three_way_merge(store: MemoryStore, ours: str, theirs: str, message: str, author: Author) -> Merged | Conflict:
    """MemoryStore.merge: a fast-forward when it can, else a commit of merged_files."""
    if store.is_ancestor(ours, theirs):
        return Merged(theirs)
    merged = merged_files(store, ours, theirs)
    if isinstance(merged, Conflict):
        return merged
    before = store._files(store.commit(ours).tree)
    changes: dict[str, bytes | None] = {p: store.blobs[oid] for p, oid in merged.items() if before.get(p) != oid}
    changes.update({p: None for p in before if p not in merged})
    return Merged(store.make_commit([ours, theirs], changes, message, author))
