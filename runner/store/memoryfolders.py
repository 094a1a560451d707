"""The worktrees and the index of runner.store.memory.MemoryStore: a worktree is a plain
folder holding a commit's files, its change a tree written back into the store, and the
index a dict of the files a test staged."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from runner.store import Author, FileEntry, Merged, StoreError

if TYPE_CHECKING:
    from runner.store.memory import MemoryStore

# Each function is a MemoryStore method of the same name (assigned in its class body).


def add_worktree(store: MemoryStore, path: Path, commit: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for file, oid in store._files(store.commit(commit).tree).items():
        target = path / file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(store.blobs[oid])


def remove_worktree(store: MemoryStore, path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def prune_worktrees(store: MemoryStore) -> None:
    return None


def snapshot_worktree(store: MemoryStore, path: Path, base: str) -> tuple[str, list[str]]:
    files = {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    tree = store._write(None, files)
    return tree, sorted({c.path for c in store.diff_trees(store.commit(base).tree, tree)})


def diff_text(store: MemoryStore, path: Path, base: str) -> bytes:
    """A unified diff of the worktree's text files against `base` (no binary patches)."""
    tree = store.snapshot_worktree(path, base)[0]
    return _patch(store, store.commit(base).tree, tree)


def diff(store: MemoryStore, old: str, new: str, fork: bool = False) -> bytes:
    """A unified diff of the text files of two commits or trees (no renames, no binary patches)."""
    if fork:
        old = merge_base(store, old, new) or store.empty_tree
    return _patch(store, _tree(store, old), _tree(store, new))


def _tree(store: MemoryStore, oid: str) -> str:
    if oid in store.commits:
        return store.commits[oid].tree
    if oid not in store.trees:
        raise StoreError(f"{oid} is neither a commit nor a tree")
    return oid


def _patch(store: MemoryStore, old_tree: str, new_tree: str) -> bytes:
    before, after = store._files(old_tree), store._files(new_tree)
    lines: list[str] = []
    for name in sorted({change.path for change in store.diff_trees(old_tree, new_tree)}):
        old = store.blobs[before[name]].decode("utf-8", "replace") if name in before else ""
        new = store.blobs[after[name]].decode("utf-8", "replace") if name in after else ""
        lines.append(f"diff --git a/{name} b/{name}\n")
        lines += difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{name}", f"b/{name}")
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines).encode("utf-8")


def merge_in_worktree(store: MemoryStore, path: Path, ours: str, theirs: str) -> tuple[str, ...]:
    """A whole file in conflict holds both sides between git's markers."""
    merged = store.merge(ours, theirs, "merge\n", Author("runner", "runner@localhost"))
    if isinstance(merged, Merged):
        store.reset_worktree(path, merged.commit)
        return ()
    for name in merged.paths:
        sides = [store.file_at(commit, name) or b"" for commit in (ours, theirs)]
        (path / name).write_bytes(b"<<<<<<< ours\n" + sides[0] + b"=======\n" + sides[1] + b">>>>>>> theirs\n")
    return merged.paths


def reset_worktree(store: MemoryStore, path: Path, commit: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    store.add_worktree(path, commit)


def attribute(store: MemoryStore, path: Path, paths: list[str], name: str) -> dict[str, str]:
    return {}  # no .gitattributes is read: every path has git's default


def staged_files(store: MemoryStore) -> tuple[list[FileEntry], set[str]]:
    head = store._files(store.commit(store.head).tree) if store.head else {}
    entries = [FileEntry(path, store._id("blob", data)) for path, data in sorted(store.index.items())]
    return entries, {e.path for e in entries if head.get(e.path) != e.oid}


def merge_base(store: MemoryStore, a: str, b: str) -> str | None:
    """The nearest commit both `a` and `b` reach (git's merge base), None when they share none."""
    ancestors, todo = set(), [a]
    while todo:
        oid = todo.pop()
        if oid not in ancestors:
            ancestors.add(oid)
            todo += store.commit(oid).parents
    todo = [b]
    seen = set()
    while todo:
        oid = todo.pop(0)
        if oid in ancestors:
            return oid
        if oid not in seen:
            seen.add(oid)
            todo += store.commit(oid).parents
    return None
