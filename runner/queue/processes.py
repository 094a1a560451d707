"""Killing a command with everything it started, on any host runner runs on: what a worker does
to a step's commands (runner.worker.executor, runner.worker.reaper) and a notifier to its
notify command (runner.queue.notifier).

Every command runner runs carries RUNNER_RUN=<a prefix><n>/ in its environment, and so does
everything it starts (a grandchild, a daemon that double-forked, a child that left the session
with setsid): the environment is inherited, and the kernel keeps the one a process started
with. That tag finds them all, on Linux (/proc) and macOS (psutil) alike. A process that clears
its whole environment escapes; nothing else does."""

from __future__ import annotations

import os
import signal
import uuid

TAG = "RUNNER_RUN"
ROUNDS = 8  # scans per kill: a process forking while it is killed is caught by the next scan


def new_prefix(kind: str = "") -> str:
    """A tag prefix of this process's own (its pid and a random part): no other process's runs match it."""
    return f"{kind}{os.getpid()}.{uuid.uuid4().hex[:12]}/"


def tagged(prefix: str) -> set[int]:
    """Pids of the processes whose RUNNER_RUN starts with `prefix` (never this process)."""
    own, found = os.getpid(), set()
    if os.path.isdir("/proc"):
        needle = f"{TAG}={prefix}".encode()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == own:
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as handle:
                    entries = handle.read().split(b"\0")
            except OSError:
                continue
            if any(entry.startswith(needle) for entry in entries):
                found.add(int(name))
        return found
    import psutil

    for proc in psutil.process_iter():
        try:
            if proc.pid != own and proc.environ().get(TAG, "").startswith(prefix):
                found.add(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


def kill_tagged(prefix: str) -> int:
    """SIGKILL every process tagged with `prefix`, scanning again until none is left."""
    killed: set[int] = set()
    for _ in range(ROUNDS):
        pids = tagged(prefix)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
    return len(killed)


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    """Kill a process, its process group, and every descendant (even ones that left the group)."""
    import psutil

    try:
        parent = psutil.Process(pid)
        family = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for proc in family:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
