"""A step's whole process tree dies with its worker, however the worker ends.

Every command runner runs carries RUNNER_RUN=<this process's prefix><n>/ in its environment,
and so does everything it starts (a grandchild, a daemon that double-forked, a child that left
the session with setsid): the environment is inherited, and the kernel keeps
the one a process started with. That tag finds them all, on Linux (/proc) and macOS (psutil)
alike, with or without systemd:
- when a step's command ends (exit, timeout, a lost claim), the worker kills what is left of
  that run;
- while a worker runs steps, a small watcher process (`python -m runner.worker.reaper PREFIX`)
  waits on a pipe from it; the pipe closes when the worker dies, even by kill -9, and the
  watcher then kills every process tagged with the worker's prefix and exits.
A process that clears its whole environment escapes; nothing else does.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import uuid

TAG = "RUNNER_RUN"
ROUNDS = 8  # scans per kill: a process forking while it is killed is caught by the next scan


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


PREFIX = f"{os.getpid()}.{uuid.uuid4().hex[:12]}/"  # this process's runs (a fork gets its own below)
_runs = itertools.count(1)
_watcher: subprocess.Popen | None = None
_watcher_lock = threading.Lock()


def new_tag() -> str:
    """The RUNNER_RUN value of one command this process starts; the watcher is started first."""
    with _watcher_lock:
        global _watcher
        if _watcher is None or _watcher.poll() is not None:
            env = {k: v for k, v in os.environ.items() if k != TAG}
            # Its own session: a signal to the worker's process group does not reach it.
            _watcher = subprocess.Popen([sys.executable, "-m", "runner.worker.reaper", PREFIX], stdin=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                        start_new_session=True)
        return f"{PREFIX}{next(_runs)}/"


def main(argv: list[str]) -> int:
    prefix = argv[0]
    if not prefix.endswith("/"):
        return 2  # never a prefix that could match another worker's runs
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only the pipe's end (or SIGKILL) ends it
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    kill_tagged(prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
