"""What operators see is true (issue 15): workers from facts, ticks that suit a scheduler,
a live view."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys

from support.repos import ENV_PATH, add_step, make_repo, runner, runner_json, start_worker, statuses, tick, wait_for


def workers(repo) -> dict[str, dict]:
    return {w["worker"]: w for w in runner_json(repo, "workers")["workers"]}


def test_a_running_worker_is_alive_with_its_step_and_a_killed_one_is_gone_at_once(queue_repo):
    add_step(queue_repo, "01-slow", run=["sleep", "60"])
    proc = start_worker(queue_repo, "host-a")
    wait_for(lambda: statuses(queue_repo)["01-slow"] == "claimed")
    seen = wait_for(lambda: (w := workers(queue_repo).get("host-a")) and w["step"] and w)
    assert seen["liveness"] == "alive" and seen["state"] == "running" and seen["step"] == "01-slow"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    gone = workers(queue_repo)["host-a"]
    assert gone["liveness"] == "gone"  # its pid is gone on this host: no waiting for the lease


def test_a_tick_worker_beats_idle_with_its_last_step_when_the_tick_ends(queue_repo):
    add_step(queue_repo, "01-a", run=["true"])
    assert tick(queue_repo, worker="cron-1")["sentinel"] == "STEP_COMPLETE"
    row = workers(queue_repo)["cron-1"]
    assert row["state"] == "idle" and row["step"] is None
    assert row["last"] == {"step": "01-a", "attempt": 1, "outcome": "done"}


def test_workers_prune_removes_only_workers_gone_for_a_day(queue_repo):
    add_step(queue_repo, "01-a", run=["true"])
    add_step(queue_repo, "02-b", run=["true"])
    tick(queue_repo, worker="old")
    tick(queue_repo, worker="fresh")
    # Seen from a day and a half later (the display judges a beat by its own timestamp).
    later = {"RUNNER_CLOCK_OFFSET": str(36 * 3600)}
    pruned = runner_json(queue_repo, "workers", "--prune", env=later)
    assert sorted(pruned["pruned"]) == ["fresh", "old"]
    assert runner_json(queue_repo, "workers")["workers"] == []
    add_step(queue_repo, "03-c", run=["true"])
    tick(queue_repo, worker="new")
    assert runner_json(queue_repo, "workers", "--prune")["pruned"] == []  # a live worker stays
    assert list(workers(queue_repo)) == ["new"]


def test_a_tick_in_a_repository_with_no_queue_skips_and_exits_0(tmp_path):
    repo = make_repo(tmp_path / "bare-project")
    done = runner(repo, "tick", "--id", "w1")
    assert done.returncode == 0 and "SKIP" in done.stdout and "runner init" in done.stdout
    drained = runner(repo, "worker", "--id", "w1", "--once", "--interval", "0.1", timeout=30)
    assert drained.returncode == 0


def test_worker_once_returns_when_nothing_can_be_done(queue_repo):
    add_step(queue_repo, "01-a", run=["true"])
    add_step(queue_repo, "02-held", run=["true"], requires_approval=True)
    done = runner(queue_repo, "worker", "--id", "w1", "--once", "--interval", "0.1", timeout=60)
    assert done.returncode == 0
    assert statuses(queue_repo) == {"01-a": "done", "02-held": "review"}
    assert "progress: 1/2 done, 1 review" in done.stdout.splitlines()


def test_status_watch_redraws_until_interrupted(queue_repo):
    add_step(queue_repo, "01-a", run=["true"])
    # On a terminal (a pty), as a person watches it: Ctrl-C once a frame is drawn, however long start-up took.
    # (Sent as a terminal sends it: a shell's background job, CI started with `&`, inherits SIGINT ignored.)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "status", "--watch", "--every", "0.2", "--repo", str(queue_repo)],
        stdin=follower,
        stdout=follower,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV_PATH,
        # Only preexec_fn resets a SIGINT inherited ignored (restore_signals covers SIGPIPE and SIGXFSZ, not SIGINT).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    os.close(follower)
    shown = b""
    while b"last events" not in shown:
        ready, _, _ = select.select([leader], [], [], 60)
        assert ready, shown
        shown += os.read(leader, 65536)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    os.close(leader)
    assert proc.returncode == 0, err
    assert b"1 ready" in shown and "Traceback" not in err


# Ctrl-C as it lands while runner imports the command line: the import of typer raises it.
CTRL_C_WHILE_IMPORTING = """
import sys
class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            raise KeyboardInterrupt
sys.meta_path.insert(0, CtrlC())
sys.argv = ["runner", "status", "--watch", "--repo", sys.argv[1]]
from runner.__main__ import main
main()
"""


def test_ctrl_c_while_a_command_starts_prints_no_traceback(queue_repo):
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_WHILE_IMPORTING, str(queue_repo)], capture_output=True, text=True, env=ENV_PATH
    )
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr
