"""What changed between two trees, as libgit2's diff says it (a change of type is a deletion
and an addition), by path. Trees that hold trees are walked here, skipping a subtree with the
same id on both sides: libgit2's diff reads every one, all 10,000 files of a plan in fan-out
folders for one changed step. Trees of files only, and big ones, are compared by libgit2 (in
C, ten times faster an entry)."""

from __future__ import annotations

from typing import cast

import pygit2

from runner.store import Change

DIFF_IN_C = 2048  # entries of two trees past which libgit2 compares them whatever they hold
_FILE_TYPES = {
    pygit2.GIT_FILEMODE_BLOB: "blob",
    pygit2.GIT_FILEMODE_BLOB_EXECUTABLE: "blob",
    pygit2.GIT_FILEMODE_LINK: "link",
    pygit2.GIT_FILEMODE_COMMIT: "gitlink",
    pygit2.GIT_FILEMODE_TREE: "tree",
}


def diff(repo: pygit2.Repository, old_tree: str, new_tree: str) -> list[Change]:
    changes: list[Change] = []
    _diff(repo, tree_of(repo, old_tree), tree_of(repo, new_tree), "", changes)
    changes.sort(key=lambda c: (c.path, c.kind != "D"))
    return changes


def _diff(repo: pygit2.Repository, old: pygit2.Tree, new: pygit2.Tree, base: str, out: list[Change]) -> None:
    if len(old) + len(new) > DIFF_IN_C or not (_may_hold_trees(old) or _may_hold_trees(new)):
        for delta in old.diff_to_tree(new).deltas:
            kind = delta.status_char()
            out.append(
                Change(
                    base + (delta.new_file.path or delta.old_file.path),
                    None if kind == "D" else str(delta.new_file.id),
                    kind,
                    delta.new_file.mode == pygit2.GIT_FILEMODE_LINK,
                )
            )
        return
    before = {entry.name: entry for entry in old}
    for entry in new:
        was = before.pop(entry.name, None)
        if was is None:
            _all_files(repo, entry, base, "A", out)
        elif (
            was.id == entry.id
            and was.type == entry.type
            and (entry.type != pygit2.GIT_OBJECT_BLOB or was.filemode == entry.filemode)
        ):
            # An entry's type follows from its mode, and only a blob's mode varies: its mode (an
            # enum, slow) is read last.
            continue
        elif was.filemode == entry.filemode == pygit2.GIT_FILEMODE_TREE:
            _diff(repo, tree_of(repo, was.id), tree_of(repo, entry.id), f"{base}{entry.name}/", out)
        elif _FILE_TYPES.get(was.filemode) == _FILE_TYPES.get(entry.filemode):  # same kind (two trees went above)
            out.append(Change(f"{base}{entry.name}", str(entry.id), "M", entry.filemode == pygit2.GIT_FILEMODE_LINK))
        else:
            _all_files(repo, was, base, "D", out)
            _all_files(repo, entry, base, "A", out)
    for was in before.values():
        _all_files(repo, was, base, "D", out)


def _all_files(repo: pygit2.Repository, entry: pygit2.Object, base: str, kind: str, out: list[Change]) -> None:
    """`entry` added or deleted: itself, or every file under it when it is a tree."""
    path = f"{base}{entry.name}"  # a tree entry always has a name
    if entry.filemode != pygit2.GIT_FILEMODE_TREE:
        link = kind != "D" and entry.filemode == pygit2.GIT_FILEMODE_LINK
        out.append(Change(path, None if kind == "D" else str(entry.id), kind, link))
        return
    for child in tree_of(repo, entry.id):
        _all_files(repo, child, path + "/", kind, out)


def _may_hold_trees(tree: pygit2.Tree) -> bool:
    """Whether a tree's raw entries name mode 40000 (an id's bytes that look like it only cost
    speed). The empty tree has no raw form in a repository: git knows it without storing it."""
    return len(tree) > 0 and b"40000 " in tree.read_raw()


def tree_of(repo: pygit2.Repository, oid: str | pygit2.Oid) -> pygit2.Tree:
    """The tree `oid` names (callers take it from a tree entry of type tree or a commit's tree:
    no type check on the hot path)."""
    return cast(pygit2.Tree, repo[oid])
