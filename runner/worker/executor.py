"""Run one command: argv only (never a shell), in a worktree, output to a log file,
killed with its whole process tree on timeout or when the claim is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

SHELL_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "<", "&", "2>", "2>&1", "$(", "`"}


@dataclass
class RunResult:
    argv: list[str]
    returncode: int | None
    duration: float
    timed_out: bool = False
    cancelled: bool = False
    error: str | None = None  # the command could not start

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.cancelled and not self.error

    def describe(self) -> str:
        if self.error:
            return self.error
        if self.timed_out:
            return f"timed out after {self.duration:.0f}s (process tree killed)"
        if self.cancelled:
            return "cancelled (claim lost or worker stopping)"
        return f"exit code {self.returncode}"


def substitute(argv: list[str], tokens: dict[str, str | Callable[[], str]]) -> list[str]:
    """Replace {token}s element by element; an unknown {token} stays literal.

    A token's value may be a function, called only when an argument uses it
    (writing the diff file costs git calls that most commands never need).
    """
    out = []
    for arg in argv:
        for name, value in tokens.items():
            placeholder = "{" + name + "}"
            if placeholder in arg:
                arg = arg.replace(placeholder, value() if callable(value) else value)
        out.append(arg)
    return out


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


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    log_path: Path,
    timeout: float | None,
    cancel: threading.Event | None = None,
    stdout_path: Path | None = None,
) -> RunResult:
    """Run argv to completion; stdout+stderr append to log_path (stdout alone to stdout_path if given)."""
    started = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        out = open(stdout_path, "wb") if stdout_path else log
        try:
            proc = subprocess.Popen(
                argv, cwd=str(cwd), env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=log, start_new_session=True
            )
        except (OSError, ValueError) as exc:
            if stdout_path:
                out.close()
            message = f"could not start {argv[0]!r}: {exc.strerror if isinstance(exc, OSError) else exc}"
            log.write((message + "\n").encode())
            return RunResult(argv, None, time.monotonic() - started, error=message)
        try:
            return _wait(proc, argv, started, timeout, cancel)
        finally:
            if stdout_path:
                out.close()


def _wait(proc: subprocess.Popen, argv: list[str], started: float, timeout: float | None, cancel: threading.Event | None) -> RunResult:
    deadline = started + timeout if timeout else None
    while True:
        try:
            code = proc.wait(timeout=0.05)
            _kill_group(proc.pid)  # a step's leftover background children die with it
            return RunResult(argv, code, time.monotonic() - started)
        except subprocess.TimeoutExpired:
            pass
        if cancel is not None and cancel.is_set():
            kill_tree(proc.pid)
            proc.wait()
            return RunResult(argv, proc.returncode, time.monotonic() - started, cancelled=True)
        if deadline is not None and time.monotonic() > deadline:
            kill_tree(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
            kill_tree(proc.pid)
            proc.wait()
            return RunResult(argv, proc.returncode, time.monotonic() - started, timed_out=True)


def tail(path: Path, lines: int = 40, max_bytes: int = 8192) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])
