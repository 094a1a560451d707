"""The server hook's entry (`python -m runner.hooks.races pre-receive`, what the installed
pre-receive runs): what can be said of a push before any replay, with the standard library.

A queue update carries the value its pusher last saw (git push --force-with-lease). When the
queue ref no longer holds it, another push landed first and git's own ref update would refuse
this one after the hook anyway: it is refused at once, before anything is imported or
replayed, with a line starting "lost a race:", which runner's client takes for a lost race
(runner.store.remote): the loser fetches and tries again, as after git's own rejection.

Hooked pushes of the queue are also serialized here: git runs the hooks of concurrent pushes
side by side and updates the ref only after each hook exits, so every loser used to replay
its whole push on a state that was already gone. One lock (runner/hook.lock in the
repository) is held around the check; a push the check accepted leaves a note
(runner/hook-pending: its receive-pack's pid and its update) and the next hook waits, out of
the lock's way, until that update lands or its receive-pack is gone, then judges against the
ref as it is. The lock and the note only save work: git's ref transaction stays the one
compare-and-swap, so a note that lies (a pid reused) costs a wait of at most PENDING_WAIT.
"""

from __future__ import annotations

import os
import sys
import time

from runner.core.errors import LOST_RACE
from runner.core.layout import DEFAULT_QUEUE_BRANCH, branch_ref

# Paths are strings here (os.path): pathlib's import (re, fnmatch, urllib) costs a refused push
# more than the rest of its refusal. The installed hook starts Python without site (-S): a push
# the warm checker takes needs nothing from site-packages, and site's start-up was a tenth of
# that push's time in the hook; a check in this process adds them first (with_site_packages).

LOST = LOST_RACE
PENDING_WAIT = 10.0  # seconds a hook waits at most for an accepted push's ref update
POLL = 0.001


def queue_ref() -> str:
    return branch_ref(os.environ.get("RUNNER_QUEUE_BRANCH") or DEFAULT_QUEUE_BRANCH)


def is_zero(oid: str) -> bool:
    return set(oid) == {"0"}


def _read(path: str) -> str:
    with open(path, encoding="ascii") as handle:
        return handle.read()


def current(git_dir: str, ref: str) -> str | None:
    """The ref's value now ("" when it does not exist), read from the files git keeps; None
    when that cannot be said for sure (a symbolic ref, an unreadable file)."""
    if os.path.isdir(os.path.join(git_dir, "reftable")):
        import subprocess

        found = subprocess.run(
            ["git", "rev-parse", "--verify", "-q", ref], cwd=git_dir, capture_output=True, check=False
        )
        return found.stdout.decode().strip() if found.returncode == 0 else ""
    try:
        text = _read(os.path.join(git_dir, ref)).strip()
        return None if text.startswith("ref:") else text
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError):
        return None
    try:
        with open(os.path.join(git_dir, "packed-refs"), encoding="ascii", errors="replace") as handle:
            packed = handle.read()
    except FileNotFoundError:
        return ""
    except OSError:
        return None
    for line in packed.splitlines():
        oid, _, name = line.partition(" ")
        if name == ref:
            return oid
    return ""


def lost_race(git_dir: str, updates: list[tuple[str, str, str]], ref: str) -> str | None:
    """The refusal of a queue update whose old value is not the ref's value now, or None."""
    for old, new, name in updates:
        if name != ref:
            continue
        now = current(git_dir, ref)
        expected = "" if is_zero(old) else old
        if now is not None and now != expected:
            return (
                f"{LOST} {ref} is at {now[:10] or 'nothing'}, not {expected[:10] or 'nothing'} as this push "
                "expected: another push landed first (fetch and try again)"
            )
    return None


def receive_pack_pid() -> int | None:
    """The git receive-pack that runs this hook: the nearest git among its ancestors (the
    installed script's parent, or a wrapper's), on Linux; None elsewhere."""
    pid = os.getppid()
    for _ in range(4):
        try:
            if _read(f"/proc/{pid}/comm").startswith("git"):
                return pid
            pid = int(_read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
    return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def wait_for_pending(state: str, git_dir: str) -> None:
    """Wait until the push the last hook accepted has landed, or its receive-pack is gone."""
    try:
        pid_text, old, _new, ref, when = _read(os.path.join(state, "hook-pending")).split()
        pid, since = int(pid_text), float(when)
    except (OSError, ValueError):
        return
    deadline = min(since, time.time()) + PENDING_WAIT
    expected = "" if is_zero(old) else old
    while time.time() < deadline and alive(pid) and current(git_dir, ref) == expected:
        time.sleep(POLL)


def note_pending(state: str, update: tuple[str, str, str]) -> None:
    pid = receive_pack_pid()
    note = os.path.join(state, "hook-pending")
    if pid is None:
        if os.path.exists(note):
            os.unlink(note)
        return
    old, new, ref = update
    with open(note, "w", encoding="ascii") as out:
        out.write(f"{pid} {old} {new} {ref} {time.time():.3f}\n")


def checked(stdin_text: str, git_dir: str | os.PathLike[str]) -> int:
    """The pre-receive hook: the early refusal, then the whole check (runner.hooks.server)."""
    git_dir = os.fspath(git_dir)
    ref = queue_ref()
    updates = [tuple(line.split()) for line in stdin_text.splitlines() if len(line.split()) == 3]
    queue = next((u for u in updates if u[2] == ref), None)
    if queue is None:
        return full_check(stdin_text, git_dir)
    state = os.path.join(git_dir, "runner")
    os.makedirs(state, exist_ok=True)
    with open(os.path.join(state, "hook.lock"), "a+b") as lock:
        try:
            import fcntl

            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        except ImportError:  # no flock: the checks run side by side, as git runs them
            pass
        wait_for_pending(state, git_dir)
        if refusal := lost_race(git_dir, updates, ref):  # type: ignore[arg-type]
            print(refusal, file=sys.stderr)
            return 1
        code = full_check(stdin_text, git_dir)
        if code == 0:
            note_pending(state, queue)  # type: ignore[arg-type]
        return code


def full_check(stdin_text: str, git_dir: str) -> int:
    """The whole check: by the warm checker (runner.hooks.warm), else in this process."""
    from runner.hooks import warm

    if not warm.enabled():
        return cold_check(stdin_text, git_dir)
    code = warm.checked(stdin_text, git_dir)
    if code is None:
        with_site_packages()
        warm.start()  # for the next push; forked before this check, so it holds nothing of it
        code = cold_check(stdin_text, git_dir)
    return code


def cold_check(stdin_text: str, git_dir: str) -> int:
    with_site_packages()
    from runner.hooks.server import run_pre_receive

    return run_pre_receive(stdin_text, git_dir)


def with_site_packages() -> None:
    """What site adds at start-up (site-packages, their .pth files), for a Python started with -S:
    the check imports PyYAML and detect-secrets from there."""
    if sys.flags.no_site and "site" not in sys.modules:
        import site

        site.main()


def main(argv: list[str]) -> int:
    if argv == ["pre-receive"]:
        return checked(sys.stdin.read(), os.path.abspath(os.environ.get("GIT_DIR") or "."))
    print("usage: python -m runner.hooks.races pre-receive", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
