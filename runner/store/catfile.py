"""Git objects as git's own commands give them, for runner.store.plumbing: one `git cat-file
--batch` process (trees and commits parsed here, once each), and what a tree diff says."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from runner.store import Change, CommitInfo, StoreError
from runner.store.gitcli import QUIET_GIT, git_env

TREE, LINK, GITLINK = "40000", "120000", "160000"
HEX = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
OBJECTS_KEPT = 4096  # trees and commits parsed, for the life of a one-shot command

Entry = tuple[str, str, str]  # (mode as git writes it in a tree, name, object id)
Trees = Callable[[str], list[Entry]]  # a tree's entries, by its id


class CatFile:
    """Objects read through one `git cat-file --batch` process: trees (their entries) and
    commits (CommitInfo) parsed once each, blobs as they are."""

    def __init__(self, git_dir: Path, id_bytes: int, objects_env: dict[str, str] | None = None):
        self.git_dir = git_dir
        self.objects_env = objects_env or {}
        self.id_bytes = id_bytes
        self._parsed: dict[str, tuple[str, Any]] = {}
        self._batch: subprocess.Popen | None = None

    def __del__(self) -> None:
        batch = self.__dict__.get("_batch")
        if batch is not None and batch.poll() is None:
            batch.stdin.close()
            batch.wait()

    def raw(self, oid: str) -> tuple[str, bytes] | None:
        """(type, content) of an object, None when this repository does not have it."""
        if not HEX.fullmatch(oid):
            return None
        batch = self._cat_file()
        assert batch.stdin is not None and batch.stdout is not None
        batch.stdin.write(oid.encode() + b"\n")
        batch.stdin.flush()
        header = batch.stdout.readline().split()
        if len(header) != 3:
            if not header:
                raise StoreError(f"git cat-file stopped answering in {self.git_dir}")
            return None  # "<id> missing"
        data = _read_exactly(batch.stdout, int(header[2]) + 1)[:-1]
        return header[1].decode(), data

    def parsed(self, oid: str) -> tuple[str, Any] | None:
        """(type, what it says) of a tree (its entries) or a commit (CommitInfo); a blob as it is, not kept."""
        kept = self._parsed.get(oid)
        if kept is not None:
            return kept
        raw = self.raw(oid)
        if raw is None:
            return None
        kind, data = raw
        if kind == "tree":
            parsed: tuple[str, Any] = (kind, _tree_entries(data, self.id_bytes))
        elif kind == "commit":
            parsed = (kind, _commit_info(oid, data))
        else:
            return raw
        if len(self._parsed) >= OBJECTS_KEPT:
            self._parsed.clear()
        self._parsed[oid] = parsed
        return parsed

    def _cat_file(self) -> subprocess.Popen:
        if self._batch is None or self._batch.poll() is not None:
            self._batch = subprocess.Popen(
                ["git", *QUIET_GIT, "cat-file", "--batch"],
                cwd=self.git_dir,
                env=git_env(extra=self.objects_env),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        return self._batch


def tree_diff(tree: Trees, old_tree: str, new_tree: str) -> list[Change]:
    """As runner.store.trees says it: a subtree with the same id on both sides is skipped, a
    change of kind (file, link, submodule, folder) is a deletion and an addition."""
    changes: list[Change] = []
    _diff(tree, old_tree, new_tree, "", changes)
    changes.sort(key=lambda c: (c.path, c.kind != "D"))
    return changes


def _diff(tree: Trees, old: str, new: str, base: str, out: list[Change]) -> None:
    before = {name: (mode, oid) for mode, name, oid in tree(old)}
    for mode, name, oid in tree(new):
        was = before.pop(name, None)
        if was is None:
            _all_files(tree, mode, oid, base + name, "A", out)
        elif was == (mode, oid):
            continue
        elif was[0] == mode == TREE:
            _diff(tree, was[1], oid, f"{base}{name}/", out)
        elif _kind(was[0]) == _kind(mode):
            out.append(Change(base + name, oid, "M", mode == LINK))
        else:
            _all_files(tree, *was, base + name, "D", out)
            _all_files(tree, mode, oid, base + name, "A", out)
    for name, (mode, oid) in before.items():
        _all_files(tree, mode, oid, base + name, "D", out)


def _all_files(tree: Trees, mode: str, oid: str, path: str, kind: str, out: list[Change]) -> None:
    """An entry added or deleted: itself, or every file under it when it is a folder."""
    if mode != TREE:
        out.append(Change(path, None if kind == "D" else oid, kind, kind != "D" and mode == LINK))
        return
    for child_mode, name, child in tree(oid):
        _all_files(tree, child_mode, child, f"{path}/{name}", kind, out)


def is_blob(mode: str) -> bool:
    return mode not in (TREE, GITLINK)


def _kind(mode: str) -> str:
    return {TREE: "tree", LINK: "link", GITLINK: "gitlink"}.get(mode, "file")


def _tree_entries(data: bytes, id_bytes: int) -> list[Entry]:
    """A tree object's entries: `<mode> <name>\\0<id>`, one after another."""
    entries = []
    at = 0
    while at < len(data):
        space = data.index(b" ", at)
        nul = data.index(b"\0", space)
        oid = data[nul + 1 : nul + 1 + id_bytes].hex()
        entries.append((data[at:space].decode(), data[space + 1 : nul].decode("utf-8", "surrogateescape"), oid))
        at = nul + 1 + id_bytes
    return entries


def _commit_info(oid: str, data: bytes) -> CommitInfo:
    head, _, message = data.partition(b"\n\n")
    tree, parents, author, when = "", [], b"", 0
    for line in head.split(b"\n"):
        key, _, value = line.partition(b" ")
        if key == b"tree":
            tree = value.decode()
        elif key == b"parent":
            parents.append(value.decode())
        elif key == b"author":
            author = value.rpartition(b" <")[0]
        elif key == b"committer":
            when = int(value.rsplit(b" ", 2)[-2])
    # As UTF-8 whatever the commit's `encoding` header says, as GitStore reads it.
    return CommitInfo(
        oid,
        tuple(parents),
        tree,
        message.decode("utf-8", errors="replace"),
        author.decode("utf-8", errors="replace"),
        when,
    )


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise StoreError("git cat-file stopped answering")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
