"""The warm checker: the server hook's check, forked from a process that has already imported it.

A hooked push paid ~57 ms of imports for ~16 ms of checking (bench/hook_profile.py). When a
hook finds no checker, it imports what a check uses and forks one before it checks its own
push (the checker: its own session, stdio on /dev/null, nothing of the push left open). The
checker listens on a socket of its own, in a folder only its user may enter
($TMPDIR/runner-UID, /tmp by default), named after the Python and the runner
package it runs: every repository its user serves with that runner shares it, since nothing
of a repository stays in it. The hook of each later push (runner.hooks.races, under its lock)
connects and hands over its standard output and error (SCM_RIGHTS) with its input,
environment, working directory and repository; the checker forks a child that takes them on,
runs the same run_pre_receive, and sends its exit code back.

The checker only saves time, it never decides: a hook that finds no checker, or one that dies
or answers nothing, checks in its own process as before; one that takes no push within
TAKEN_WITHIN is killed by that hook, so a stuck checker costs one push its wait. It serves
only while runner's code on disk is the code it loaded (runner.core.fingerprint.package_stamp,
asked again for every push); it exits after IDLE seconds without a push and when its socket
is gone.
RUNNER_HOOK_WARM=0 in the hook's environment turns it off; it runs on Linux only (fork,
SCM_RIGHTS), elsewhere every hook checks in its own process.
"""

from __future__ import annotations

import os
import stat
import struct
import sys
import time

TYPE_CHECKING = False  # typing's own costs every push a few milliseconds of start-up
if TYPE_CHECKING:
    import _socket
    import socket

IDLE = 60.0  # seconds a checker waits for a push before it exits
NAME = "runner-checker"  # what ps and top call it
HEADER = struct.Struct("!I")
TAKEN = b"+"  # the checker's first answer: a child checks the push
TAKEN_WITHIN = 10.0  # seconds a hook waits for it before it checks in its own process
MAX_REQUEST = 64 << 20  # a push's ref lines and environment; more is not a hook's request
# A request is its fields joined by NUL (none of them can hold one): the identity, the hook's
# working directory, the repository, the hook's input, then its environment, NAME=value each.
# The hook's side imports neither json nor socket for it: that side is every push's start-up.
FIELDS = ("python", "runner", "cwd", "git_dir", "stdin")


def enabled() -> bool:
    return sys.platform == "linux" and os.environ.get("RUNNER_HOOK_WARM", "1") != "0"


def identity() -> dict[str, str]:
    """What a hook and its checker must share: the interpreter and the runner package."""
    import runner

    return {"python": sys.executable, "runner": os.path.dirname(os.path.abspath(runner.__file__))}


def address() -> str | None:
    """The checker's socket for this user, Python and runner; None when its folder is not this
    user's alone (another user made it first: nothing of a push goes through it)."""
    import zlib

    folder = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"runner-{os.geteuid()}")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        found = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o077:
        return None
    key = zlib.crc32("\0".join(identity().values()).encode())
    path = os.path.join(folder, f"checker-{key:08x}.sock")
    return path if len(os.fsencode(path)) < 108 else None  # AF_UNIX's limit, its NUL included


# --- the hook's side ------------------------------------------------------------------------


def checked(stdin_text: str, git_dir: str) -> int | None:
    """The push's check by the checker: its exit code, or None when no checker answered (the
    caller then calls start() and checks in its own process)."""
    path = address()
    if path is None or not os.path.exists(path):
        return None
    data = encode_request({**identity(), "cwd": os.getcwd(), "git_dir": git_dir, "stdin": stdin_text}, os.environ)
    if data is None:
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    import _socket  # socket.py's enums cost a push more than its check's hand-over does

    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.settimeout(TAKEN_WITHIN)  # a checker that is stuck is no checker
        conn.connect(path)
        conn.sendall(HEADER.pack(len(data)) + data)
        if conn.recv(1) != TAKEN:
            return None
        # Only now this process's output goes over: a descriptor in flight to a checker that
        # never reads it would hold git's pipe open, and the push, until the checker died.
        conn.sendmsg([b"."], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("2i", 1, 2))])
        conn.settimeout(None)  # the check itself takes what it takes, as in the hook's own process
        answer = conn.recv(1)
    except TimeoutError:
        stop_stuck(conn)
        return None
    except OSError:
        return None
    finally:
        conn.close()
    return answer[0] if answer else None


def stop_stuck(conn: _socket.socket) -> None:
    """A checker that takes no push within TAKEN_WITHIN is stuck (stopped, wedged), and would
    cost every later push the same wait: it is killed (it is this user's, by its socket's
    credentials, and named NAME), so the next hook starts another."""
    import _socket

    creds = struct.Struct("3i")
    try:
        pid, uid, _ = creds.unpack(conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, creds.size))
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as comm:
            name = comm.read().strip()
        if pid > 0 and uid == os.geteuid() and name == NAME:
            os.kill(pid, 9)  # SIGKILL: signal's import (enum) is not worth one constant
    except (OSError, struct.error):
        pass


def encode_request(fields: dict[str, str], environ: os._Environ[str] | dict[str, str]) -> bytes | None:
    """The request's bytes; None when a field holds a NUL (that push checks in the hook's process)."""
    parts = [os.fsencode(fields[name]) for name in FIELDS]
    parts += [os.fsencode(f"{name}={value}") for name, value in environ.items()]
    if any(b"\0" in part for part in parts):
        return None
    return b"\0".join(parts)


def decode_request(data: bytes) -> tuple[dict[str, str], dict[str, str]] | None:
    """A request's fields and the hook's environment; None when the bytes are not a request."""
    parts = [os.fsdecode(part) for part in data.split(b"\0")]
    if len(parts) < len(FIELDS):
        return None
    environ = dict(entry.split("=", 1) for entry in parts[len(FIELDS) :] if "=" in entry)
    return dict(zip(FIELDS, parts)), environ


def start() -> None:
    """Fork the checker from this hook, once it has imported what a check uses (so the checker
    costs no start-up of its own); a second checker exits at once."""
    path = address()
    if path is None:
        return
    preload()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if os.fork():
            return
    except OSError:
        return  # no checker: every push checks in its own process
    try:
        os.setsid()  # out of the push's session: git, sshd and their signals do not wait on it
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 1 << 16)  # the hook's lock, git's pipes: nothing of the push stays open
        os.chdir("/")
        with open("/proc/self/comm", "w") as comm:
            comm.write(NAME)
        serve(path)
    finally:
        os._exit(0)


# --- the checker's side ---------------------------------------------------------------------


def serve(path: str) -> None:
    import fcntl
    import socket

    from runner.core import fingerprint

    with open(f"{path}.lock", "a+b") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # another checker serves
        if os.path.lexists(path):
            os.unlink(path)  # a checker that died left it; the lock says none serves
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path)
            os.chmod(path, 0o600)
            listener.listen(64)
            listener.settimeout(1.0)  # a second at most between reaping the children that checked
            ours = os.stat(path).st_ino
            stamp = fingerprint.package_stamp()
            me = identity()
            last = time.monotonic()
            while True:
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    reap()
                    if time.monotonic() - last > IDLE:
                        break
                    continue
                reap()
                last = time.monotonic()
                with conn:
                    if not still_ours(path, ours) or fingerprint.package_stamp.__wrapped__() != stamp:
                        break  # gone, or runner changed under it: this push and the next check cold
                    serve_one(conn, listener, me)
            if still_ours(path, ours):
                os.unlink(path)


def preload() -> None:
    """Import what a check imports, some only when it needs them (the secrets scan's encoders,
    the store's git processes), so that a forked child imports nothing."""
    import base64  # noqa: F401
    import hashlib  # noqa: F401
    import subprocess  # noqa: F401
    import urllib.parse  # noqa: F401

    import runner.hooks.server
    import runner.store.plumbing
    import runner.store.remote  # noqa: F401
    from runner.core.shapes import shapes
    from runner.hooks.cache import rules

    rules()  # each child's cache key (runner's files, PyYAML's), computed once
    shapes()  # the secrets scan's patterns, read and indexed once


def still_ours(path: str, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def serve_one(conn: socket.socket, listener: socket.socket, me: dict[str, str]) -> None:
    import socket

    fds: list[int] = []
    fields: dict[str, str] = {}
    environ: dict[str, str] = {}
    try:
        conn.settimeout(TAKEN_WITHIN)
        (size,) = HEADER.unpack(read_exactly(conn, HEADER.size))
        request = decode_request(read_exactly(conn, size)) if size <= MAX_REQUEST else None
        if request is not None and {k: request[0][k] for k in me} == me:
            fields, environ = request
            conn.sendall(TAKEN)
            _, fds, _, _ = socket.recv_fds(conn, 1, 2)
    except (OSError, ValueError, struct.error):
        pass
    child = -1  # no fork: the hook sees the connection close with no code, and checks cold
    if len(fds) == 2:
        try:
            child = os.fork()
        except OSError:
            pass
    if child:
        for fd in fds:
            os.close(fd)
        return
    try:
        listener.close()
        conn.settimeout(None)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds:
            os.close(fd)
        os.chdir(fields["cwd"])
        os.environ.clear()
        os.environ.update(environ)
        from runner.hooks.server import run_pre_receive
    except BaseException:  # noqa: BLE001 (no answer: the hook checks in its own process)
        os._exit(0)
    code = 1
    try:
        code = run_pre_receive(fields["stdin"], fields["git_dir"])
    except BaseException:  # noqa: BLE001 (refused, as the hook in its own process would be)
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            conn.sendall(bytes([code & 0xFF]))
        finally:
            os._exit(0)


def read_exactly(conn: socket.socket, size: int) -> bytes:
    parts, left = [], size
    while left:
        part = conn.recv(min(left, 1 << 20))
        if not part:
            raise OSError("the hook went away")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)
