"""Stale git lock files. A process killed while it updated a ref (kill -9 during a fetch,
say) leaves `<ref>.lock` behind, and git refuses that ref until someone removes it. A lock
is stale when it is old and no git process of this repository is running; then it is
removed and reported, instead of being read as a lost race for ever."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

STALE_AFTER = 10.0  # seconds: a live git holds a ref lock for milliseconds
_LOCK_RE = re.compile(r"'([^']+\.lock)'")


def lock_path(message: str) -> str | None:
    """The lock file an error message of git or libgit2 names, if any."""
    match = _LOCK_RE.search(message)
    return match.group(1) if match else None


def git_running_in(*folders: Path) -> bool:
    """Is a git process working in one of these folders now?"""
    import psutil

    roots = [str(Path(f).resolve()) for f in folders]
    for proc in psutil.process_iter(["name", "cwd"]):
        try:
            if proc.info["name"] != "git" or not proc.info["cwd"]:
                continue
        except (psutil.Error, KeyError):
            continue
        if any(proc.info["cwd"] == root or proc.info["cwd"].startswith(root + os.sep) for root in roots):
            return True
    return False


def clear_stale(message: str, git_dir: Path, workdir: Path) -> bool:
    """Remove the lock file `message` names when it is stale. True when one was removed."""
    path = lock_path(message)
    if path is None:
        return False
    lock = Path(path) if os.path.isabs(path) else git_dir / path
    try:
        age = time.time() - lock.stat().st_mtime
    except OSError:
        return False
    if age < STALE_AFTER or git_running_in(git_dir, workdir):
        return False
    try:
        lock.unlink()
    except OSError:
        return False
    print(f"runner: removed a stale lock file left by a killed git process: {lock} ({age:.0f}s old)", file=sys.stderr)
    return True
