"""`runner` commands for the tests, each a process of its own forked from one that has already
imported runner: a fresh interpreter spends ~100 ms of CPU importing before a command does
anything, and the suite starts about a thousand of them.

The forked command is still a separate process with its own pid, working folder, environment,
standard streams (read until every process holding them closes them, as subprocess.run reads)
and exit code, run through `python -m runner`'s own entry point; what it shares with the others
is only the modules imported before the fork, none of which has run a command. A command whose
environment sets the interpreter up otherwise (PYTHON*, the locale) gets a fresh interpreter,
and RUNNER_TEST_FRESH_PROCESSES=1 gives every command one.

One zygote serves one test process; it leaves when that process is gone.
"""

from __future__ import annotations

import array
import atexit
import json
import locale
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FRESH = os.environ.get("RUNNER_TEST_FRESH_PROCESSES") == "1"
_FD_COUNT = 3

# ---- the test process's side ------------------------------------------------------------------

_zygote: tuple[subprocess.Popen, str, dict[str, str]] | None = None
_starting = threading.Lock()


def _interpreter_settings(env: dict[str, str]) -> dict[str, str]:
    """What a fresh interpreter reads as it starts (PYTHONPATH, the locale of its streams, ...): a
    forked one has them already."""
    return {key: value for key, value in env.items() if key.startswith(("PYTHON", "LC_", "LANG"))}


def _started(env: dict[str, str]) -> str | None:
    """The socket of this test process's zygote, started on first use; None when `env` asks for an
    interpreter set up otherwise than the zygote was."""
    with _starting:
        return _start(env)


def _start(env: dict[str, str]) -> str | None:
    global _zygote
    if _zygote is not None and _zygote[0].poll() is None:
        return _zygote[1] if _zygote[2] == _interpreter_settings(env) else None
    folder = tempfile.mkdtemp(prefix="rz-")
    path = os.path.join(folder, "s")
    process = subprocess.Popen(
        [sys.executable, __file__, path, str(os.getpid())],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=None,
    )
    assert process.stdout is not None
    if process.stdout.readline() != b"ready\n":
        raise RuntimeError("the zygote did not start (its error is above)")
    _zygote = (process, path, _interpreter_settings(env))
    return path


def stop() -> None:
    """Ends this test process's zygote, waited for so the CPU of the commands it ran counts where the
    test process's does (tests/conftest.py calls it as a test process ends)."""
    global _zygote
    with _starting:
        if _zygote is not None:
            _zygote[0].terminate()
            _zygote[0].wait(timeout=30)
            _zygote = None


def run(
    args: list[str], env: dict[str, str], cwd: str | Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """`python -m runner *args` as subprocess.run(..., capture_output=True, text=True) would run it."""
    where = None if FRESH else _started(env)
    if where is None:
        return subprocess.run(
            [sys.executable, "-m", "runner", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(where)
        out, err = _sent(conn, {"args": args, "env": env, "cwd": str(cwd or os.getcwd())})
        said, printed, complained = _read_to_the_end(conn, out, err, time.monotonic() + timeout)
    if printed is None:
        raise subprocess.TimeoutExpired(["runner", *args], timeout)
    said_lines = said.split()
    code = int(said_lines[1]) if len(said_lines) > 1 else -9  # no code: killed before it could say
    return subprocess.CompletedProcess(["runner", *args], code, _text(printed), _text(complained or b""))


def _sent(conn: socket.socket, request: dict) -> tuple[int, int]:
    """Sends the request with the command's standard streams; returns the read ends of its output."""
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    nothing = os.open(os.devnull, os.O_RDONLY)
    try:
        data = json.dumps(request).encode()
        fds = array.array("i", [nothing, out_write, err_write])
        conn.sendmsg([len(data).to_bytes(4, "big") + data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    finally:
        for fd in (nothing, out_write, err_write):
            os.close(fd)
    return out_read, err_read


def _read_to_the_end(conn: socket.socket, out: int, err: int, deadline: float):
    """What the zygote said (the pid, then the exit code), and the command's stdout and stderr, read
    until every process holding them has closed them, as subprocess.run reads a child's pipes.
    Past the deadline: the command is killed and its output is None."""
    received: dict[int, bytearray] = {conn.fileno(): bytearray(), out: bytearray(), err: bytearray()}
    with selectors.DefaultSelector() as selector:
        for fd in received:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            ready = selector.select(max(0.0, deadline - time.monotonic()))
            if not ready:
                said = received[conn.fileno()].split()
                if said:
                    _kill(int(said[0]))
                conn.settimeout(30)
                while conn.recv(4096):  # until the stream ends: the command is gone
                    pass
                os.close(out)
                os.close(err)
                return bytes(received[conn.fileno()]), None, None
            for key, _ in ready:
                chunk = os.read(key.fd, 65536)
                if chunk:
                    received[key.fd] += chunk
                else:
                    selector.unregister(key.fd)
    os.close(out)
    os.close(err)
    return bytes(received[conn.fileno()]), bytes(received[out]), bytes(received[err])


def _kill(pid: int | None) -> None:
    if pid is not None:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def _text(data: bytes) -> str:
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")  # as text=True's universal newlines


# ---- the zygote -------------------------------------------------------------------------------


# runner.cli first: it imports typer without rich's help renderer, as a fresh `runner` does
PRELOAD = (
    "runner.cli",
    "runner.commands.quick",
    "runner.hooks.install",
    "runner.queue.queue",
    "runner.store.git",
    "runner.worker.tick",
    "rich.console",
    "rich.table",
)


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)


def _serve(path: str, parent: int) -> None:
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    listener.settimeout(1.0)
    sys.stdout.buffer.write(b"ready\n")
    sys.stdout.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    while os.getppid() == parent:
        _reap()
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        pid = os.fork()
        if pid == 0:
            listener.close()
            _child(conn)
        conn.close()


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _child(conn: socket.socket) -> None:
    code = 1
    try:
        # the descriptors ride with the first bytes: one recvmsg takes both
        data, ancillary, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(_FD_COUNT * 4))
        fds = array.array("i")
        for _, _, payload in ancillary:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        size = int.from_bytes(data[:4], "big")
        message = data[4:]
        while len(message) < size:
            message += _exactly(conn, size - len(message))
        request = json.loads(message)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        conn.sendall(f"{os.getpid()}\n".encode())
        code = _command(request)
    finally:
        try:
            conn.sendall(f"{code}\n".encode())
        finally:
            os._exit(code)


def _exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _command(request: dict) -> int:
    """What a fresh `python -m runner` process would do, in this forked one."""
    import random
    import runpy
    import traceback

    import pygit2

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None
    random.seed()
    # libgit2 found the user's and the system's git config by HOME and XDG_CONFIG_HOME when it loaded
    levels = pygit2.enums.ConfigLevel
    for level in (levels.GLOBAL, levels.XDG, levels.SYSTEM):
        pygit2.option(pygit2.enums.Option.SET_SEARCH_PATH, level, None)
    sys.path.insert(0, request["cwd"])  # as `python -m` puts it first
    sys.argv = ["runner", *request["args"]]
    try:
        runpy.run_module("runner", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


if __name__ == "__main__":
    del sys.path[0]  # this file's folder: runner comes from PYTHONPATH, as for `python -m runner`
    _serve(sys.argv[1], int(sys.argv[2]))
