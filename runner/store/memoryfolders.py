"""The worktrees and the index of runner.store.memory.MemoryStore: a worktree is a plain
folder holding a commit's files, its change a tree written back into the store, and the
index a dict of the files a test staged."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

from runner.store import Author, FileEntry, Merged


class FolderWorktrees:
    """Mixed into MemoryStore, whose objects (blobs, _files, _write, _id, commit, diff_trees)
    and head and index it uses."""

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
        """A unified diff of the worktree's text files against `base` (no binary patches)."""
        tree, changed = self.snapshot_worktree(path, base)
        before, after = self._files(self.commit(base).tree), self._files(tree)
        lines: list[str] = []
        for name in changed:
            old = self.blobs[before[name]].decode("utf-8", "replace") if name in before else ""
            new = self.blobs[after[name]].decode("utf-8", "replace") if name in after else ""
            lines.append(f"diff --git a/{name} b/{name}\n")
            lines += difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{name}", f"b/{name}")
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines).encode("utf-8")

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

    def staged_files(self) -> tuple[list[FileEntry], set[str]]:
        head = self._files(self.commit(self.head).tree) if self.head else {}
        entries = [FileEntry(path, self._id("blob", data)) for path, data in sorted(self.index.items())]
        return entries, {e.path for e in entries if head.get(e.path) != e.oid}
