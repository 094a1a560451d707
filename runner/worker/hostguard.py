"""The host guard, shared by every runner daemon of this user on the machine (whatever their
repositories and --slots): many agents on one host must not take it down with their gates.

- `[worker] max_parallel_gates`: a gate or test command runs only while it holds one of N
  slots, flock'ed files in a per-user runtime folder (RUNNER_RUNTIME_DIR, else
  $XDG_RUNTIME_DIR/runner, else the temp folder's runner-<uid>); the others wait, saying so in
  the step's log. A lock dies with its process: a killed worker frees its slot.
- the free-memory and disk floors (`[worker] min_free_memory`, `min_free_disk`) are checked
  before each claim (runner.worker.tick.resource_floor), by each slot of a daemon.
- `[worker] worktree_budget`: over it, the worktrees of finished steps (kept after a failure,
  or left by a crash) are removed before a claim; a tick skips while it stays over.
  `runner gc` removes them by hand and says what it freed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Protocol

from filelock import FileLock, Timeout

from runner.core.config import Config
from runner.core.model import Status
from runner.queue.snapshot import Snapshot
from runner.store import StoreError, Workspace

WAIT_STEP = 0.1  # seconds between looks for a free gate slot


class Cancel(Protocol):
    def is_set(self) -> bool: ...


def runtime_dir() -> Path:
    """This user's folder for what every runner daemon on the host shares."""
    named = os.environ.get("RUNNER_RUNTIME_DIR")
    if named:
        folder = Path(named)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        folder = Path(os.environ["XDG_RUNTIME_DIR"]) / "runner"
    else:
        uid = os.getuid() if hasattr(os, "getuid") else os.getlogin()
        folder = Path(tempfile.gettempdir()) / f"runner-{uid}"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


@contextmanager
def gate_slot(
    limit: int | None, say: Callable[[str], None] | None = None, cancel: Cancel | None = None
) -> Iterator[int | None]:
    """Hold one of `limit` gate slots of this host while the block runs (None: no limit). A
    cancelled step stops waiting (its command is stopped at once anyway)."""
    if not limit:
        yield None
        return
    folder = runtime_dir()
    locks = [FileLock(str(folder / f"gate-{k}.lock"), is_singleton=False) for k in range(limit)]
    told = False
    while True:
        for k, lock in enumerate(locks):
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            try:
                if told and say:
                    say(f"runner: got gate slot {k + 1} of {limit}")
                yield k
            finally:
                lock.release()
            return
        if not told and say:
            say(f"runner: waiting for a gate slot ([worker] max_parallel_gates = {limit}, all in use on this host)")
            told = True
        if cancel is not None and cancel.is_set():
            yield None
            return
        time.sleep(WAIT_STEP)


# --- the worktrees' disk budget ----------------------------------------------------------------


def size_of(path: Path) -> int:
    total = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def finished_worktrees(state_dir: Path, snap: Snapshot | None) -> list[Path]:
    """The worktrees of this clone whose step attempt no longer runs: `<step>-a<attempt>` folders
    under .git/runner/worktrees/ of a step not claimed at that attempt. Without a plan to judge
    by, none."""
    if snap is None:
        return []
    plan = snap.plan
    found = []
    for path in _attempt_folders(state_dir / "worktrees"):
        step_id, _, attempt = path.name.rpartition("-a")
        if not path.is_dir() or not attempt.isdigit() or not step_id:
            continue
        step = plan.steps.get(step_id)
        if step is not None and step.status == Status.CLAIMED and step.attempt == int(attempt):
            continue  # running (here or, for a stale copy, elsewhere: its holder may come back to it)
        if step is None and not (path / ".git").exists():
            continue  # not a worktree of ours
        found.append(path)
    return found


def _attempt_folders(root: Path) -> list[Path]:
    """worktrees/<worker>/<step>-a<N>, and worktrees/<worker>/slot-<k>/<step>-a<N> (--slots)."""
    found: list[Path] = []
    for worker in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        for child in sorted(p for p in worker.iterdir() if p.is_dir()):
            if child.name.startswith("slot-") and child.name[5:].isdigit():
                found += sorted(p for p in child.iterdir() if p.is_dir())
            else:
                found.append(child)
    return found


def collect(store: Workspace, snap: Snapshot | None) -> list[tuple[str, int]]:
    """Remove the finished steps' worktrees: (path, bytes freed) of each."""
    freed = []
    for path in finished_worktrees(store.state_dir, snap):
        size = size_of(path)
        with suppress(StoreError):  # git may not know it (a crash before `worktree add` ended)
            store.remove_worktree(path)
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            freed.append((str(path), size))
    if freed:
        store.prune_worktrees()
    return freed


def worktree_budget(config: Config, store: Workspace, snap: Snapshot, log: Callable[[str, str], None]) -> str | None:
    """Why a tick must not claim: the worktrees are over `[worker] worktree_budget` even after
    the finished steps' were removed; None when within it (or no budget)."""
    budget = config.worker.worktree_budget
    folder = store.state_dir / "worktrees"
    if not budget or not folder.is_dir() or (used := size_of(folder)) <= budget:
        return None
    if freed := collect(store, snap):
        log(
            "GC",
            f"over the worktree budget: removed {len(freed)} finished worktree(s), "
            f"{sum(n for _, n in freed) >> 20} MiB",
        )
        used = size_of(folder)
    if used <= budget:
        return None
    return (
        f"worktree budget exceeded: {used >> 20} MiB of worktrees, [worker] worktree_budget {budget >> 20} MiB "
        "(the running steps' own)"
    )
