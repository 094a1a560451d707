"""Worktrees of the repository: detached ones for each attempt (no branch checked out, so a
crashed holder's worktree never blocks the next attempt), staged and removed in process."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from runner.store import FileEntry, StoreError
from runner.store.gitcli import run_git

if TYPE_CHECKING:
    from filelock import FileLock

    from runner.store.git import GitStore


def _worktree_lock(store: GitStore) -> FileLock:
    """Worktree administration is not safe to run concurrently in one repository (a prune
    can delete another process's half-made worktree): workers on this host take turns."""
    from filelock import FileLock

    return FileLock(str(store.state_dir / "worktrees.lock"))


# What a worktree's `locked` file says while runner makes it. The maker holds the worktree
# lock until the checkout is done and the file gone, so a folder saying this, seen under the
# lock, was left by a maker that died: nothing would ever prune it (git keeps locked ones).
_INITIALIZING = "initializing (runner)\n"

# Settings under which `git worktree add` does more than register the worktree: it copies
# sparse-checkout patterns and per-worktree config, or writes relative paths.
_WORKTREE_SETTINGS = ("extensions.worktreeConfig", "core.sparseCheckout", "worktree.useRelativePaths")


def add_worktree(store: GitStore, path: Path, commit: str) -> None:
    """A detached worktree: no branch is checked out, so a stale worktree of a crashed
    holder can never block the next attempt of the same step.

    `git worktree add --detach` starts two more gits (update-ref, reset --hard), a third of a
    local tick. runner registers the worktree itself, writing the files gitrepository-layout(5)
    documents, as libgit2 does, and starts one `git checkout`: git's own checkout, so filter
    drivers (git-lfs), attributes and the post-checkout hook still apply."""
    with _worktree_lock(store):
        config = store.repo.config
        if any(name in config for name in _WORKTREE_SETTINGS):
            run_git(store.git_dir, "worktree", "add", "--force", "--quiet", "--detach", str(path), commit)
            return
        admin = _register(store.git_dir / "worktrees", path.resolve(), commit)
        try:
            run_git(path, "checkout", "--force", "--quiet", "--detach", commit)
        finally:
            (admin / "locked").unlink(missing_ok=True)


def _register(worktrees: Path, path: Path, commit: str) -> Path:
    """The administrative folder of a new linked worktree at `path` (HEAD detached at
    `commit`), locked while it has no checkout so that no `git worktree prune` takes it
    for a leftover, and the worktree's `.git` file pointing at it."""
    worktrees.mkdir(exist_ok=True)
    _forget_half_made(worktrees)
    admin = worktrees / path.name
    suffix = 0
    while True:
        try:
            admin.mkdir()
            break
        except FileExistsError:
            suffix += 1
            admin = worktrees / f"{path.name}{suffix}"
    (admin / "locked").write_text(_INITIALIZING)
    (admin / "commondir").write_text("../..\n")
    (admin / "HEAD").write_text(f"{commit}\n")
    (admin / "gitdir").write_text(f"{path / '.git'}\n")
    path.mkdir(parents=True, exist_ok=True)
    (path / ".git").write_text(f"gitdir: {admin}\n")
    return admin


def _forget_half_made(worktrees: Path) -> None:
    """Remove the administrative folders a killed maker left locked (see _INITIALIZING)."""
    for admin in worktrees.iterdir():
        try:
            if (admin / "locked").read_text() == _INITIALIZING:
                shutil.rmtree(admin, ignore_errors=True)
        except OSError:
            continue


def remove_worktree(store: GitStore, path: Path) -> None:
    """Remove a worktree and its administrative files, in process (no git to start)."""
    with _worktree_lock(store):
        shutil.rmtree(path, ignore_errors=True)
        for name in store.repo.list_worktrees():
            try:
                worktree = store.repo.lookup_worktree(name)
                if Path(worktree.path).resolve() == path.resolve():
                    worktree.prune(True)
            except (pygit2.GitError, KeyError, OSError):
                continue


def prune_worktrees(store: GitStore) -> None:
    with _worktree_lock(store):
        run_git(store.git_dir, "worktree", "prune", check=False)


def snapshot_worktree(store: GitStore, path: Path, base: str) -> tuple[str, list[str]]:
    """Stage everything in a worktree as `git add -A` would (.gitignore honoured), in
    process; the tree it makes and the paths that differ from `base`."""
    index = pygit2.Repository(str(path)).index
    index.read()
    index.add_all()
    for delta in index.diff_to_workdir().deltas:  # what add_all left: files deleted in the worktree
        if delta.status_char() == "D":
            index.remove(delta.old_file.path)
    index.write()
    tree = str(index.write_tree())
    changed = store.diff_trees(str(store._commit(base).tree_id), tree)
    return tree, sorted({c.path for c in changed})


def merge_in_worktree(store: GitStore, path: Path, ours: str, theirs: str) -> tuple[str, ...]:
    """Merge `theirs` into the worktree's content, committed as `ours`, with git's own merge
    (its .gitattributes drivers, rerere, the user's conflict style); nothing is committed.
    The paths git could not merge, their conflicts left in the files; () when it merged."""
    run_git(path, "add", "-A")  # what an earlier pass resolved: staged, so its merge can be forgotten
    run_git(path, "merge", "--quit")
    run_git(path, "reset", "-q", "--soft", ours)
    who = ("-c", "user.name=runner", "-c", "user.email=runner@localhost")  # git asks even when it commits nothing
    done = run_git(path, *who, "merge", "--no-ff", "--no-commit", "--no-edit", "-q", theirs, check=False)
    unmerged = run_git(path, "diff", "--name-only", "-z", "--diff-filter=U").stdout.decode("utf-8", "surrogateescape")
    conflicted = tuple(sorted(name for name in unmerged.split("\0") if name))
    if done.returncode != 0 and not conflicted:
        raise StoreError(
            f"git merge of {theirs[:10]} in {path} failed: {done.stderr.decode(errors='replace').strip()[:500]}"
        )
    return conflicted


def reset_worktree(store: GitStore, path: Path, commit: str) -> None:
    """The worktree as a fresh checkout of `commit` (files git ignores are kept: a build's output)."""
    run_git(path, "merge", "--quit")
    run_git(path, "reset", "-q", "--hard", commit)
    run_git(path, "clean", "-q", "-d", "--force")


def diff_text(store: GitStore, path: Path, base: str) -> bytes:
    run_git(path, "add", "-A")
    return run_git(path, "diff", "--cached", "--binary", base).stdout


def staged_files(store: GitStore) -> tuple[list[FileEntry], set[str]]:
    """(every file in the index being committed, the paths the commit adds or changes).
    `git commit -a` and `git commit PATH` stage into a temporary index named by GIT_INDEX_FILE."""
    names = run_git(
        store.workdir, "diff", "--cached", "--name-only", "-z", "--diff-filter=ACMRT", inherit_repository=True
    ).stdout.decode("utf-8", errors="replace")
    index_file = os.environ.get("GIT_INDEX_FILE")
    index = pygit2.Index(os.path.abspath(index_file)) if index_file else store.repo.index
    entries = [FileEntry(e.path, str(e.id), e.mode == pygit2.GIT_FILEMODE_LINK) for e in index]
    return entries, {name for name in names.split("\0") if name}


def attribute(store: GitStore, path: Path, paths: list[str], name: str) -> dict[str, str]:
    """Each path's value of gitattributes attribute `name`, as git reads it in the worktree at
    `path` (unset and unspecified ones left out; none when git cannot say)."""
    names = "".join(f"{p}\0" for p in paths).encode("utf-8", "surrogateescape")
    try:
        done = run_git(path, "check-attr", "-z", "--stdin", name, input=names, check=False)
    except StoreError:
        return {}
    fields = done.stdout.decode("utf-8", "surrogateescape").split("\0") if done.returncode == 0 else []
    return {
        p: value
        for p, _, value in zip(fields[0::3], fields[1::3], fields[2::3])
        if value not in ("unspecified", "unset")
    }
