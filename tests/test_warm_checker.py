"""The server hook's warm checker (runner/hooks/warm.py): after the first hooked push, a push
is checked by a child of a process that has already imported the check, and decided exactly
as the hook decides in its own process; a checker that is killed leaves no push unchecked.

Each test gives its pushes a TMPDIR of its own, so its checker is its own (a local push
hands the pusher's environment to the hook). The hook's Python is also run by hand, as the
installed hook runs it, with its imports listed: whether the hook's own process imported runner.hooks.server
says whether it checked the push itself."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from support.hooked import ENV, QUEUE, hooked_remote, seed, tip
from support.repos import ROOT, wait_for

from runner.core.machine import Kind
from runner.queue.queue import Queue, author_for
from runner.store.git import GitStore

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the warm checker runs on Linux only")


@pytest.fixture
def private_tmp(monkeypatch) -> Iterator[Path]:
    """A TMPDIR of the test's own, short: the checker's socket path must fit AF_UNIX's 108 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="warm-"))
    monkeypatch.setenv("TMPDIR", str(folder))
    yield folder
    for checker in checkers(folder):  # not left to idle out
        checker.kill()
    shutil.rmtree(folder, ignore_errors=True)


def checkers(tmpdir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] == "runner-checker" and proc.environ().get("TMPDIR") == str(tmpdir):
                found.append(proc)
        except psutil.Error:
            continue
    return [p for p in found if p.ppid() not in {c.pid for c in found}]  # not a child checking a push


def forged_update(bare: Path) -> str:
    """A commit in the remote's objects that edits a managed field by hand (the ref not moved):
    the `old new ref` line git would hand the hook."""
    store = GitStore(bare)  # written straight into the remote's objects: no push, no hook
    snap = Queue(store).snapshot()
    step = snap.plan.find("04-d")
    text = step.text.replace("run:", "status: done\nrun:", 1)
    commit = store.make_commit([snap.tip], {step.path: text.encode()}, "forge\n", author_for("mallory"))
    return f"{snap.tip} {commit} {QUEUE}\n"


def run_hook(bare: Path, update: str, **env: str) -> subprocess.CompletedProcess:
    """The hook's Python as the installed pre-receive starts it (without site: a cold check adds
    site-packages itself), its imports listed on stderr (PYTHONPROFILEIMPORTTIME)."""
    return subprocess.run(
        [sys.executable, "-S", "-m", "runner.hooks.races", "pre-receive"],
        input=update,
        cwd=bare,
        env={**ENV, "GIT_DIR": str(bare), "TMPDIR": os.environ["TMPDIR"], "PYTHONPROFILEIMPORTTIME": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def refusals(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("runner refused")]


def checked_here(done: subprocess.CompletedProcess) -> bool:
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    return "runner.hooks.server" in imported


def test_a_push_after_the_first_is_checked_by_the_warm_checker_and_refused_alike(tmp_path, private_tmp):
    bare = hooked_remote(tmp_path / "remote.git")
    seed(bare, tmp_path / "seed")  # its pushes start the checker, and none waited for it
    (checker,) = wait_for(lambda: checkers(private_tmp))
    update = forged_update(bare)

    warm = run_hook(bare, update)
    cold = run_hook(bare, update, RUNNER_HOOK_WARM="0")
    assert warm.returncode == cold.returncode == 1
    assert refusals(warm) == refusals(cold) and "changes runner-managed status" in refusals(warm)[0], warm.stderr
    assert not checked_here(warm) and checked_here(cold)
    assert checker.is_running() and checkers(private_tmp) == [checker]
    assert oct(os.stat(next(private_tmp.glob("runner-*/checker-*.sock"))).st_mode & 0o777) == "0o600"


def test_a_killed_checker_leaves_no_push_unchecked_and_the_next_hook_starts_another(tmp_path, private_tmp):
    bare = hooked_remote(tmp_path / "remote.git")
    queue = seed(bare, tmp_path / "seed")
    (first,) = wait_for(lambda: checkers(private_tmp))
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    update = forged_update(bare)

    done = run_hook(bare, update)
    assert done.returncode == 1 and refusals(done) and checked_here(done), done.stderr
    (second,) = wait_for(lambda: checkers(private_tmp))
    assert second.pid != first.pid
    before = tip(bare)
    queue.event("04-d", Kind.ABORT, "alice", reason="not needed")  # a person's event: accepted through the new checker
    assert tip(bare) != before
    again = run_hook(bare, update.replace(update.split()[0], tip(bare), 1))
    assert again.returncode == 1 and not checked_here(again), again.stderr


def test_a_stuck_checker_is_no_checker_the_hook_checks_in_its_own_process_and_stops_it(tmp_path, private_tmp):
    bare = hooked_remote(tmp_path / "remote.git")
    seed(bare, tmp_path / "seed")
    (stuck,) = wait_for(lambda: checkers(private_tmp))
    stuck.suspend()  # SIGSTOP: it accepts nothing and answers nothing
    update = forged_update(bare)
    try:
        done = run_hook(bare, update)
    finally:
        if stuck.is_running():
            stuck.resume()
    assert done.returncode == 1 and refusals(done) and checked_here(done), done.stderr
    # Only the first push waited: that hook killed the stuck checker and started another.
    stuck.wait(timeout=30)
    (fresh,) = wait_for(lambda: checkers(private_tmp))
    again = run_hook(bare, update)
    assert fresh.pid != stuck.pid and again.returncode == 1 and not checked_here(again), again.stderr


def test_a_checker_whose_runner_changed_on_disk_checks_nothing_and_the_next_one_runs_the_new_code(
    tmp_path, private_tmp
):
    home = tmp_path / "home"  # a runner of the test's own, so changing it changes no other test's
    shutil.copytree(ROOT / "runner", home / "runner", ignore=shutil.ignore_patterns("__pycache__"))
    bare = hooked_remote(tmp_path / "remote.git")
    seed(bare, tmp_path / "seed")
    update = forged_update(bare)
    ours = {"PYTHONPATH": str(home)}

    def own_checkers() -> list[psutil.Process]:
        return [p for p in checkers(private_tmp) if p.environ().get("PYTHONPATH") == str(home)]

    assert checked_here(run_hook(bare, update, **ours))  # none yet: checked here, and one started
    (first,) = wait_for(own_checkers)
    assert not checked_here(run_hook(bare, update, **ours))
    limits = home / "runner" / "core" / "limits.py"
    limits.write_text(limits.read_text() + "\n# changed on disk\n")

    done = run_hook(bare, update, **ours)
    assert done.returncode == 1 and refusals(done) and checked_here(done), done.stderr
    first.wait(timeout=30)  # it served nothing of the new code, and went away
    (second,) = wait_for(own_checkers)
    again = run_hook(bare, update, **ours)
    assert second.pid != first.pid and again.returncode == 1 and not checked_here(again), again.stderr


def test_a_request_carries_every_field_and_the_environment_exactly_and_a_nul_keeps_the_push_here():
    from runner.hooks.warm import decode_request, encode_request

    fields = {"python": "/usr/bin/python3", "runner": "/opt/r", "cwd": "/srv/q.git", "git_dir": ".", "stdin": "a b c\n"}
    environ = {"RUNNER_PUSHER": "alice", "EQUALS": "a=b=c", "EMPTY": "", "NOT_UTF8": os.fsdecode(b"\xff\xfe")}
    assert decode_request(encode_request(fields, environ)) == (fields, environ)
    assert encode_request({**fields, "stdin": "a\0b"}, environ) is None
    assert encode_request(fields, {"X": "a\0b"}) is None
    assert decode_request(b"too\0few") is None
