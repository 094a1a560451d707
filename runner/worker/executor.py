"""Run one command: argv only (never a shell), in a worktree, output to a log file,
killed with its whole process tree when it ends, on timeout, when the claim is lost, or when
its worker dies (runner.worker.reaper: every process it starts is tagged, and a watcher
outlives the worker). The direct child also gets a parent-death signal, and the run's tag is
recorded so that a takeover on the same host kills what a killed worker left running."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from runner.core import secrets
from runner.core.limits import MAX_STDERR_TAIL_BYTES, clip_tail
from runner.queue.processes import TAG, kill_tagged, kill_tree
from runner.worker import reaper

SHELL_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "<", "&", "2>", "2>&1", "$(", "`"}


class Cancel(Protocol):
    """What the executor polls to stop a command (a threading.Event, or several as one)."""

    def is_set(self) -> bool: ...


@dataclass
class RunResult:
    argv: list[str]
    returncode: int | None
    duration: float
    timed_out: bool = False
    cancelled: bool = False
    error: str | None = None  # the command could not start
    output: str = ""  # what it printed on stdout (or wrote to its {output} file)
    stderr: str = ""  # the tail of its stderr (with its stdout, when that is not kept apart)
    # an agent role's run, read by its [harness]/[roles.*] `output` reader (runner.core.agentoutput):
    usage: Any = None  # a Usage, UNKNOWN, or None (the command reports none)
    model: str | None = None  # the model it ran, as it said or as {model} was filled
    limit: Any = None  # the provider's limit it ended on (a runner.core.agentoutput.Limit), or None
    account: str | None = None  # the account it spent
    stderr_cut: bool = False  # that tail starts inside a line (a line longer than the tail)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.cancelled and not self.error

    def describe(self) -> str:
        """How it ended; a run that failed adds the last words it printed ("rate limited")."""
        if self.error:
            return self.error
        if self.cancelled:
            return "cancelled (claim lost or worker stopping)"
        if self.timed_out:
            said = f"timed out after {self.duration:.0f}s (process tree killed)"
        else:
            said = f"exit code {self.returncode}"
        last = last_words(self.stderr) if not self.ok else ""
        return f"{said}: {last}" if last else said


def scrub(result: RunResult, section) -> None:
    """What a run printed, cleaned of secrets ([secrets] of runner.toml, runner.core.secrets)
    before runner reads it: every reason, verdict, finding and note made from it is clean."""
    scrubber = secrets.for_config(section)
    result.output = scrubber.scrub(result.output)
    result.stderr = scrubber.scrub(result.stderr, cut_start=result.stderr_cut)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def last_words(text: str) -> str:
    """The last lines of a command's stderr, on one line and within MAX_STDERR_TAIL_BYTES: what a
    fault says beside its exit code (colours dropped; an agent's output is hostile input)."""
    lines = [line.strip() for line in _ANSI.sub("", text).splitlines() if line.strip()]
    return clip_tail(" | ".join(lines[-3:]), MAX_STDERR_TAIL_BYTES)


# The step must die with its worker: PR_SET_PDEATHSIG, set in the child. A preexec_fn
# makes Python fork() the whole worker (~9 ms at its size) where it would vfork() (~0.3 ms),
# so util-linux's setpriv sets it and execs the command; without setpriv, the preexec_fn.
_SETPRIV = shutil.which("setpriv") if sys.platform.startswith("linux") else None
DIE_WITH_PARENT = [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []


def _prctl():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl() if sys.platform.startswith("linux") and not _SETPRIV else None  # resolved before any fork


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the worker that started it dies."""
    if _PRCTL is not None:  # only installed where it is
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _program(argv: list[str], cwd: Path, env: dict[str, str]) -> str | None:
    """Why argv[0] cannot be started, as exec would find it (None when it can): setpriv
    runs it, so the error has to be found before, not read from an exit code."""
    name = argv[0]
    found = shutil.which(name, path=env.get("PATH", os.defpath)) if "/" not in name else str(cwd / name)
    if not found or not os.path.isfile(found):
        return "No such file or directory"
    if not os.access(found, os.X_OK):
        return "Permission denied"
    return None


def run(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    log_path: Path,
    timeout: float | None,
    cancel: Cancel | None = None,
    stdout_path: Path | None = None,
    session_file: Path | None = None,
    sandbox: list[str] | None = None,
) -> RunResult:
    """Run argv to completion; stdout+stderr append to log_path (stdout alone to stdout_path if
    given). While it runs, `session_file` names its session for a takeover on this host.
    `sandbox`: the argv that starts it inside a sandbox (runner.worker.sandbox)."""
    started = time.monotonic()
    tag = reaper.new_tag()
    env = {**env, TAG: tag}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"$ {shlex.join(argv)}\n".encode())  # as a shell would read it: what a person may paste
        log.flush()
        start = log.tell()  # what it writes to the log from here is its stderr (and its stdout, when not kept apart)
        out = open(stdout_path, "wb") if stdout_path else log  # noqa: SIM115 (closed below, after the child started)
        problem = _program(argv, cwd, env) if DIE_WITH_PARENT else None
        try:
            if problem:
                raise OSError(0, problem)
            proc = subprocess.Popen(
                [*DIE_WITH_PARENT, *(sandbox or ()), *argv],
                cwd=str(cwd),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=log,
                start_new_session=True,
                # one prctl call, no lock taken:
                preexec_fn=_die_with_parent if _PRCTL is not None else None,  # noqa: PLW1509
            )
        except (OSError, ValueError) as exc:
            if stdout_path:
                out.close()
            message = f"could not start {argv[0]!r}: {exc.strerror if isinstance(exc, OSError) else exc}"
            log.write((message + "\n").encode())
            return RunResult(argv, None, time.monotonic() - started, error=message)
        if session_file is not None:
            session_file.parent.mkdir(parents=True, exist_ok=True)
            session_file.write_text(json.dumps({"run": tag}))
        try:
            result = _wait(proc, argv, started, timeout, cancel)
        finally:
            kill_tagged(tag)  # what the command left running (a daemon, a setsid child) ends with it
            if stdout_path:
                out.close()
            if session_file is not None:
                session_file.unlink(missing_ok=True)
    result.stderr, result.stderr_cut = _read_from(log_path, start)
    return result


def _read_from(path: Path, start: int, max_bytes: int = 4096) -> tuple[str, bool]:
    """The last `max_bytes` of a file after offset `start`, from a line's start (and whether it
    still starts inside one: runner.core.secrets.tail_text)."""
    try:
        with open(path, "rb") as handle:
            at = max(start, handle.seek(0, os.SEEK_END) - max_bytes)
            handle.seek(at)
            return secrets.tail_text(handle.read(max_bytes), at > start)
    except OSError:
        return "", False


def kill_recorded_session(path: Path) -> int:
    """Kill what a dead holder's command left running (the run's tag in `path`), then forget it."""
    try:
        tag = json.loads(path.read_text())["run"]
        killed = kill_tagged(tag) if isinstance(tag, str) and tag.endswith("/") and "/" in tag[:-1] else 0
    except (OSError, ValueError, KeyError, TypeError):
        killed = 0
    path.unlink(missing_ok=True)
    return killed


def _wait(
    proc: subprocess.Popen, argv: list[str], started: float, timeout: float | None, cancel: Cancel | None
) -> RunResult:
    deadline = started + timeout if timeout else None
    with _exit_watch(proc) as exited:
        while not exited(0.05):
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
    return RunResult(argv, proc.returncode, time.monotonic() - started)


_PIDFD_OPEN = getattr(os, "pidfd_open", None)  # Linux 5.3+, Python 3.9+


@contextlib.contextmanager
def _exit_watch(proc: subprocess.Popen) -> Iterator[Callable[[float], bool]]:
    """A function that waits up to some seconds for `proc` to exit and says whether it did.
    Where Linux gives a process descriptor it wakes the moment the process exits;
    Popen.wait(timeout) polls with growing sleeps, ~3 ms late for a step that takes 2."""
    try:
        pidfd = _PIDFD_OPEN(proc.pid) if _PIDFD_OPEN else None
    except OSError:
        pidfd = None
    if pidfd is None:

        def exited(seconds: float) -> bool:
            try:
                proc.wait(timeout=seconds)
                return True
            except subprocess.TimeoutExpired:
                return False

        yield exited
        return
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)

    def exited_fd(seconds: float) -> bool:
        poller.poll(seconds * 1000)
        return proc.poll() is not None

    try:
        yield exited_fd
    finally:
        os.close(pidfd)


def tail(path: Path, lines: int = 40, max_bytes: int = 8192) -> str:
    """The last lines of a log, scrubbed ([secrets] last read: runner.core.secrets)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data, cut = secrets.tail_text(handle.read(), size > max_bytes)
    except OSError:
        return ""
    return secrets.for_config().scrub("\n".join(data.splitlines()[-lines:]), cut_start=cut)
