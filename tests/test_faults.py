"""Faults that cost a double execution or a stuck worker (issue 19, items 11-15), each
repeated for real: kill -9, a clock step, stale lock files, a push whose answer was
lost, a full disk."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from support.repos import (
    add_step,
    git,
    make_remote,
    runner,
    runner_json,
    set_config,
    start_worker,
    statuses,
    tick,
    wait_for,
)


def test_kill_9_of_a_worker_and_its_watcher_leaves_the_rest_to_a_takeover_on_the_same_host(queue_repo, tmp_path):
    pids = tmp_path / "pids"
    # The step's command and a grandchild that leaves its process group but not its session.
    script = (
        f"[ \"$RUNNER_ATTEMPT\" = 1 ] || exit 0; sh -c 'echo $$ >> {pids}; exec sleep 300' "
        f"& echo $$ >> {pids}; sleep 300"
    )
    add_step(queue_repo, "01-hang", run=["sh", "-c", script], timeout="10m")
    victim = start_worker(queue_repo, "host-a")
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2)
    watcher = next(p for p in psutil.Process(victim.pid).children() if "runner.worker.reaper" in " ".join(p.cmdline()))
    watcher.kill()  # the machine's own cleanup went too (an OOM kill of both, say)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    child, grandchild = (int(p) for p in sorted(pids.read_text().split(), key=int))

    def dead(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(lambda: dead(child), timeout=10)  # the command died with its worker (parent-death signal)
    assert not dead(grandchild)  # with no watcher, what it started lives on ...
    tick(queue_repo, worker="host-b")  # ... until the same-host takeover kills what the dead holder left
    wait_for(lambda: dead(grandchild), timeout=10)


def test_a_forward_clock_step_on_an_observer_does_not_steal_a_live_claim(queue_repo):
    set_config(queue_repo, detect=False, lease="10m")
    add_step(queue_repo, "01-a", run=["true"])
    from runner.queue.queue import open_queue

    open_queue(queue_repo).claim("host-a", "host-a.1", {"host": "elsewhere", "pid": 1})
    jumped = {"RUNNER_CLOCK_OFFSET": "3600"}  # this observer's wall clock jumps an hour ahead
    assert runner(queue_repo, "claim", "--id", "host-b", check=False, env=jumped).returncode == 3
    assert (
        runner(queue_repo, "claim", "--id", "host-b", check=False, env={"RUNNER_CLOCK_OFFSET": "7200"}).returncode == 3
    )
    assert statuses(queue_repo)["01-a"] == "claimed"


def old_lock(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    past = time.time() - 3600
    os.utime(path, (past, past))
    return path


def test_stale_lock_files_left_by_a_killed_fetch_are_removed_not_read_as_lost_races(tmp_path):
    _bare, (clone,) = make_remote(tmp_path, clones=1)
    runner(clone, "init")
    set_config(clone, detect=False)
    add_step(clone, "01-a", run=["sh", "-c", "echo a > a.txt"])
    runner(clone, "claim", "--id", "w1")  # a heartbeat ref and its tracking ref exist now
    runner(clone, "release", "01-a", "--id", "w1")
    refs = clone / ".git" / "refs"
    locks = [
        old_lock(refs / "remotes" / "origin" / "runner" / "queue.lock"),
        old_lock(refs / "remotes" / "origin" / "runner" / "integration.lock"),
        old_lock(refs / "runner" / "remotes" / "origin" / "heartbeats" / "w1.lock"),
    ]
    proc = runner(clone, "tick", "--id", "w1", "--json")
    assert '"sentinel": "STEP_COMPLETE"' in proc.stdout
    assert "removed a stale lock file" in proc.stderr
    assert not any(lock.exists() for lock in locks)


def test_a_push_that_landed_but_whose_answer_was_lost_is_not_run_again(tmp_path):
    bare, (clone,) = make_remote(tmp_path, clones=1)
    runner(clone, "init")
    set_config(clone, detect=False)
    add_step(clone, "01-a", run=["sh", "-c", "echo a > a.txt"])
    # The remote updates its refs, then the connection drops before the answer reaches us:
    # the first record (a push moving runner/integration) kills its receive-pack once.
    hook = bare / "hooks" / "reference-transaction"
    hook.write_text(
        "#!/bin/sh\n"
        '[ "$1" = committed ] || exit 0\n'
        'grep -q "refs/heads/runner/integration" || exit 0\n'
        f'[ -e "{tmp_path}/dropped" ] && exit 0\n'
        f'touch "{tmp_path}/dropped"\n'
        "kill -9 $PPID\n"
    )
    hook.chmod(0o755)
    report = runner_json(clone, "tick", "--id", "w1")
    assert (tmp_path / "dropped").exists()  # the answer really was lost
    assert report["sentinel"] == "STEP_COMPLETE" and report["attempt"] == 1
    merges = git(bare, "log", "--format=%s", "runner/integration").splitlines()
    assert sum(1 for m in merges if m.startswith("merge 01-a")) <= 1 and "a" == git(
        bare, "show", "runner/integration:a.txt"
    )
    assert runner_json(clone, "show", "01-a")["status"] == "done"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small filesystem needs root")
def test_a_full_disk_mid_step_is_a_clear_message_and_the_daemon_goes_on(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        from support.repos import make_repo

        repo = make_repo(disk / "repo")
        runner(repo, "init")
        set_config(repo, detect=False, max_attempts=1)
        text = git(repo, "show", "runner/queue:runner.toml").replace(
            'min_free_disk = "256MiB"', 'min_free_disk = "1MiB"'
        )
        from support.repos import edit

        edit(repo, {"runner.toml": text.encode()})
        add_step(repo, "01-fill", run=["sh", "-c", "dd if=/dev/zero of=big bs=1M count=64 2>/dev/null; exit 0"])
        proc = runner(repo, "worker", "--id", "w1", "--max-ticks", "2", "--interval", "0.1", check=False, timeout=120)
        assert "Traceback" not in proc.stdout + proc.stderr
        assert proc.returncode in (0, 1)  # it went on after the fault (and may stop after faults in a row)
        (repo / ".git" / "runner" / "worktrees").exists() and subprocess.run(
            ["rm", "-rf", str(repo / ".git" / "runner" / "worktrees")]
        )
        assert statuses(repo)["01-fill"] in ("ready", "failed", "claimed")
    finally:
        subprocess.run(["umount", "-l", str(disk)])


def test_a_remote_away_for_a_moment_when_the_outcome_is_recorded_costs_nothing(tmp_path):
    bare, (clone,) = make_remote(tmp_path, clones=1)
    runner(clone, "init")
    set_config(clone, detect=False)
    gone = tmp_path / "remote.away"
    add_step(clone, "01-a", run=["sh", "-c", f"mv {bare} {gone}; echo ok > a.txt"])  # the step takes the remote away

    def bring_back():
        wait_for(gone.exists, timeout=60, every=0.05)
        time.sleep(2)  # the remote is away while the worker records (a fault to cause, not a timing to assert)
        gone.rename(bare)

    import threading

    helper = threading.Thread(target=bring_back)
    helper.start()
    report = runner_json(clone, "tick", "--id", "w1")
    helper.join()
    assert report["sentinel"] == "STEP_COMPLETE" and report["attempt"] == 1
    assert git(bare, "show", "runner/integration:a.txt") == "ok"
