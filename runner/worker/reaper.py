"""A step's whole process tree dies with its worker, however the worker ends.

Every command a worker runs is tagged (runner.queue.processes: RUNNER_RUN in its environment,
inherited by everything it starts), with or without systemd:
- when a step's command ends (exit, timeout, a lost claim), the worker kills what is left of
  that run;
- while a worker runs steps, a small watcher process (`python -m runner.worker.reaper PREFIX`)
  waits on a pipe from it; the pipe closes when the worker dies, even by kill -9, and the
  watcher then kills every process tagged with the worker's prefix and exits.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading

from runner.queue.processes import TAG, kill_tagged, new_prefix

PREFIX = new_prefix()  # this process's runs (a fork gets its own below)
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
            _watcher = subprocess.Popen(
                [sys.executable, "-m", "runner.worker.reaper", PREFIX],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
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
