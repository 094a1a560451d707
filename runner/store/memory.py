"""MemoryStore: the Store in memory, for fast policy tests of the queue and the worker.

Objects are content-addressed like git's (a blob, a tree of names, a commit of parents,
tree and message), refs move by the same all-or-nothing compare-and-swap, and a merge
is a three-way merge of files. Worktrees are plain folders. It is never used to run a
real queue, and tests that need git's own behaviour use GitStore.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from runner.core.layout import EMPTY_TREE, HEARTBEAT_PREFIX, heartbeat_ref
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
)

Tree = dict[str, tuple[str, str]]  # name -> ("blob" | "tree", id)


class MemoryStore:
    remote = None
    view_lags = False  # there is no remote to lag behind

    def __init__(self, state_dir: Path | None = None):
        self.blobs: dict[str, bytes] = {}
        self.trees: dict[str, Tree] = {}
        self.commits: dict[str, CommitInfo] = {}
        self.refs: dict[str, str] = {}
        self.clock = 1_700_000_000
        self.state_dir = state_dir or Path(tempfile.mkdtemp(prefix="runner-memory-"))
        self.empty_tree = self._put_tree({})
        self.trees[EMPTY_TREE] = {}  # git's own id of the empty tree, which callers name
        self.publishes = 0  # how many publishes moved refs (tests count round trips with it)

    # --- objects ---

    @staticmethod
    def _id(kind: str, data: bytes) -> str:
        return hashlib.sha1(kind.encode() + b"\0" + data).hexdigest()

    def _put_blob(self, data: bytes) -> str:
        oid = self._id("blob", data)
        self.blobs[oid] = data
        return oid

    def _put_tree(self, tree: Tree) -> str:
        oid = self._id("tree", repr(sorted(tree.items())).encode())
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

    def log(self, tip: str) -> Iterator[CommitInfo]:
        oid: str | None = tip
        while oid:
            info = self.commit(oid)
            yield info
            oid = info.parents[0] if info.parents else None

    def _write(self, base: str | None, files: dict[str, bytes | None]) -> str:
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

    def make_commit(self, parents: list[str], files: dict[str, bytes | None], message: str, author: Author, base_tree: str | None = None) -> str:
        if base_tree is None and parents:
            base_tree = self.commit(parents[0]).tree
        tree = self._write(base_tree, files)
        self.clock += 1
        body = repr((tuple(parents), tree, message, author.name, self.clock)).encode()
        oid = self._id("commit", body)
        self.commits[oid] = CommitInfo(oid, tuple(parents), tree, message, author.name, self.clock)
        return oid

    def _merge_base(self, a: str, b: str) -> str | None:
        ancestors, todo = set(), [a]
        while todo:
            oid = todo.pop()
            if oid not in ancestors:
                ancestors.add(oid)
                todo += self.commit(oid).parents
        todo = [b]
        seen = set()
        while todo:
            oid = todo.pop(0)
            if oid in ancestors:
                return oid
            if oid not in seen:
                seen.add(oid)
                todo += self.commit(oid).parents
        return None

    def merge(self, ours: str, theirs: str, message: str, author: Author) -> Merged | Conflict:
        if self.is_ancestor(ours, theirs):
            return Merged(theirs)
        base = self._merge_base(ours, theirs)
        files = {t: self._files(self.commit(c).tree) if c else {} for t, c in (("base", base), ("ours", ours), ("theirs", theirs))}
        merged, conflicts = dict(files["ours"]), []
        for path in set(files["theirs"]) | set(files["base"]):
            b, o, t = files["base"].get(path), files["ours"].get(path), files["theirs"].get(path)
            if t == b or t == o:
                continue
            if o == b:
                merged[path] = t
            else:
                conflicts.append(path)
        if conflicts:
            return Conflict(tuple(sorted(conflicts)))
        changes = {p: self.blobs[oid] for p, oid in merged.items() if files["ours"].get(p) != oid}
        changes.update({p: None for p in files["ours"] if p not in merged})
        return Merged(self.make_commit([ours, theirs], changes, message, author))

    # --- refs ---

    def tip(self, branch: str) -> str | None:
        return self.refs.get("refs/heads/" + branch)

    def heartbeat(self, worker: str) -> str | None:
        return self.refs.get(heartbeat_ref(worker))

    def heartbeats(self) -> dict[str, str]:
        return {r[len(HEARTBEAT_PREFIX):]: oid for r, oid in self.refs.items() if r.startswith(HEARTBEAT_PREFIX)}

    def publish(self, updates: list[RefUpdate]) -> Outcome:
        for u in updates:
            if u.old != FORCE and self.refs.get(u.ref) != u.old:
                return Lost(u.ref)
        for u in updates:
            if u.new is None:
                self.refs.pop(u.ref, None)
            else:
                self.refs[u.ref] = u.new
        self.publishes += 1
        return Won()

    def fetch(self, branches: list[str], heartbeats: bool = False) -> None:
        return None

    # --- worktrees: plain folders ---

    def add_worktree(self, path: Path, commit: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        for file, oid in self._files(self.commit(commit).tree).items():
            target = path / file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.blobs[oid])

    def remove_worktree(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def prune_worktrees(self) -> None:
        return None

    def snapshot_worktree(self, path: Path, base: str) -> tuple[str, list[str]]:
        files = {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}
        tree = self._write(None, files)
        return tree, sorted({c.path for c in self.diff_trees(self.commit(base).tree, tree)})

    def diff_text(self, path: Path, base: str) -> bytes:
        return b""

    def merge_in_worktree(self, path: Path, ours: str, theirs: str) -> tuple[str, ...]:
        """A whole file in conflict holds both sides between git's markers."""
        merged = self.merge(ours, theirs, "merge\n", Author("runner", "runner@localhost"))
        if isinstance(merged, Merged):
            self.reset_worktree(path, merged.commit)
            return ()
        for name in merged.paths:
            sides = [self.file_at(commit, name) or b"" for commit in (ours, theirs)]
            (path / name).write_bytes(b"<<<<<<< ours\n" + sides[0] + b"=======\n" + sides[1] + b">>>>>>> theirs\n")
        return merged.paths

    def reset_worktree(self, path: Path, commit: str) -> None:
        shutil.rmtree(path, ignore_errors=True)
        self.add_worktree(path, commit)

    # --- what GitStore also answers ---

    def ref(self, ref: str) -> str | None:
        return self.refs.get(ref)

    def local_head(self) -> str | None:
        return None

    def private(self) -> "MemoryStore":
        return self
