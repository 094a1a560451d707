"""What the board shows of a result, asked of git's own commands (for both git stores): a
patch between two commits or trees, and the tree a merge would have (git's merge-tree: the
same merge `git merge` makes, .gitattributes drivers and renames included)."""

from __future__ import annotations

from pathlib import Path

from runner.store import Conflict, StoreError
from runner.store.gitcli import run_git


def diff(git_dir: Path, old: str, new: str, fork: bool = False) -> bytes:
    """The patch from `old` to `new` (with `fork`, from where `new` left `old`: git's old...new)."""
    revisions = [f"{old}...{new}"] if fork else [old, new]
    proc = run_git(git_dir, "diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M", *revisions, "--", check=False)
    if proc.returncode != 0:
        raise StoreError(f"git diff failed: {proc.stderr.decode('utf-8', 'replace').strip()[:300]}")
    return proc.stdout


def would_merge(git_dir: Path, ours: str, theirs: str) -> str | Conflict:
    """The tree of a merge of `theirs` into `ours`, or the paths it could not merge."""
    merged = run_git(git_dir, "merge-tree", "--write-tree", "--name-only", "--no-messages", ours, theirs, check=False)
    lines = merged.stdout.decode("utf-8", "replace").splitlines()
    if merged.returncode == 1:
        return Conflict(tuple(path for path in lines[1:] if path))
    if merged.returncode == 0 and lines:
        return lines[0]
    raise StoreError(f"git merge-tree failed: {merged.stderr.decode('utf-8', 'replace').strip()[:300]}")
