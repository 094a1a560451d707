"""A running step's output as its heartbeat carries it (`runner logs`, the board): the tail
of the attempt's log with the output of the run in progress after it (a role's stdout goes
to a file of its own until the run ends, then joins the log), which run it is, and how much
the attempt has printed so far."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from runner.core import secrets
from runner.core.codec import one_line
from runner.core.limits import MAX_LOG_TAIL_BYTES, clip_tail


class LiveOutput:
    def __init__(self, log_path: Path):
        self.log_path = log_path
        self._lock = threading.Lock()
        self._run: str | None = None
        self._stdout: Path | None = None

    def running(self, name: str | None, stdout: Path | None = None) -> None:
        """The run in progress (None when between runs), and the file its stdout goes to."""
        with self._lock:
            self._run, self._stdout = (one_line(name, 200) if name else None), stdout

    def joined(self, printed: str) -> None:
        """The run is over and what it printed on stdout joins the log, in one step: a heartbeat
        between the two would count that output twice, or drop it and then carry it again as
        new, and a follower (`runner logs --follow`) would print it twice."""
        with self._lock:
            if printed:
                with open(self.log_path, "a") as log:
                    log.write(printed)
            self._run, self._stdout = None, None

    def progress(self) -> tuple[str | None, int]:
        """(the run in progress, bytes printed so far): whether the output grew since a beat,
        without reading it."""
        with self._lock:
            run, paths = self._run, [self.log_path, *([self._stdout] if self._stdout is not None else [])]
        return run, sum(_size(path) for path in paths)

    def facts(self) -> dict[str, Any]:
        """What the next heartbeat carries: {run, output, output_bytes}."""
        with self._lock:  # the log and the run's stdout as one state (joined())
            run, stdout = self._run, self._stdout
            log_size, log_tail, log_cut = _tail(self.log_path)
            out_size, out_tail, out_cut = _tail(stdout) if stdout is not None else (0, "", False)
        # a stdout tail cut short fills the whole tail on its own
        whole, cut = (out_tail, True) if out_cut else (log_tail + out_tail, log_cut)
        text = clip_tail(whole, MAX_LOG_TAIL_BYTES)
        at = len(whole) - len(text)
        if (at == 0 and cut) or (at > 0 and whole[at - 1] != "\n"):  # it starts inside a line, maybe a secret
            text = secrets.for_config().scrub(text, cut_start=True)
        return {"run": run, "output": text, "output_bytes": log_size + out_size}


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _tail(path: Path) -> tuple[int, str, bool]:
    """(the file's size, its last MAX_LOG_TAIL_BYTES from a line's start when it can, whether
    it starts inside a line); (0, "", False) when it is not there yet."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - MAX_LOG_TAIL_BYTES))
            text, cut = secrets.tail_text(handle.read(MAX_LOG_TAIL_BYTES), size > MAX_LOG_TAIL_BYTES)
    except OSError:
        return 0, "", False
    return size, text, cut
