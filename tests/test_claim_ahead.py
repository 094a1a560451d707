"""A daemon claims its next ready step in the push that records the step it ran (one push a
tick on a busy queue), and never holds a claim it will not start: not on its last tick, not
from `runner tick`, not when it stops right after; a server that refuses the pair gets the
record alone."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from support.repos import ROOT, add_step, git, make_remote, queue_history, queue_moves, runner, runner_json, set_config

QUEUE = "refs/heads/runner/queue"


def events(repo: Path) -> list[tuple[str, str]]:
    return [(e["Event"], e["Step"]) for e in queue_history(repo) if e.get("Step")]


def remote_with_steps(tmp_path: Path, steps: list[str]) -> tuple[Path, Path]:
    """A bare remote (keeping a reflog of its refs) with a plan of no-op steps, and a clone."""
    bare, (clone,) = make_remote(tmp_path)
    git(bare, "config", "core.logAllRefUpdates", "always")
    runner(clone, "init")
    set_config(clone, detect=False)
    for step in steps:
        add_step(clone, step, run=["true"])
    return bare, clone


def server_hook(bare: Path, name: str, script: str) -> None:
    hook = bare / "hooks" / name
    hook.write_text("#!/bin/sh\n" + script)
    hook.chmod(hook.stat().st_mode | stat.S_IEXEC)


# Claiming ahead needs a view fetched lately (10 s): a slow machine's ticks must not decide these tests.
SLOW_MACHINE = {"RUNNER_FETCH_AT_LEAST_EVERY": "3600"}


def drain(clone: Path, *args: str) -> subprocess.CompletedProcess:
    return runner(clone, "worker", "--id", "w1", "--interval", "0.2", *args, env=SLOW_MACHINE)


def test_a_daemon_claims_its_next_step_in_the_push_that_records_the_last(tmp_path):
    bare, clone = remote_with_steps(tmp_path, ["s1", "s2", "s3"])
    before = len(queue_moves(bare))
    drain(clone, "--once")
    assert queue_moves(bare)[before:] == [
        "claim s1",
        "claim s2",
        "claim s3",
        "complete s3",
    ]  # complete s1 rode with claim s2, ...
    assert events(bare)[-6:] == [
        ("claim", "s1"),
        ("complete", "s1"),
        ("claim", "s2"),
        ("complete", "s2"),
        ("claim", "s3"),
        ("complete", "s3"),
    ]
    assert {s["step"]: s["status"] for s in runner_json(clone, "status")["steps"]} == {
        "s1": "done",
        "s2": "done",
        "s3": "done",
    }


def test_the_last_of_max_ticks_and_runner_tick_claim_nothing_ahead(queue_repo):
    for step in ("s1", "s2", "s3"):
        add_step(queue_repo, step, run=["true"])
    before = len(queue_moves(queue_repo))
    drain(queue_repo, "--max-ticks", "2")
    assert queue_moves(queue_repo)[before:] == ["claim s1", "claim s2", "complete s2"]
    assert {s["step"]: s["status"] for s in runner_json(queue_repo, "status")["steps"]}["s3"] == "ready"
    runner(queue_repo, "tick", "--id", "w1")
    runner(queue_repo, "tick", "--id", "w1")  # nothing left: a tick that claims nothing
    assert [e for e in events(queue_repo) if e[0] not in ("edit", "init")] == [
        ("claim", "s1"),
        ("complete", "s1"),
        ("claim", "s2"),
        ("complete", "s2"),
        ("claim", "s3"),
        ("complete", "s3"),
    ]


def test_a_worker_stopped_right_after_claiming_ahead_releases_that_claim(tmp_path):
    bare, clone = remote_with_steps(tmp_path, ["s1", "s2", "s3"])
    count, pid_file = tmp_path / "pushes", tmp_path / "worker.pid"
    # SIGTERM the worker while the push that records s1 (and claims s2) is landing.
    server_hook(
        bare,
        "post-receive",
        f"""
while read old new ref; do
  [ "$ref" = {QUEUE} ] || continue
  n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo $n > {count}
  [ $n -eq 2 ] && kill -TERM $(cat {pid_file})
done
exit 0
""",
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "runner", "worker", "--id", "w1", "--interval", "0.2", "--repo", str(clone)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    pid_file.write_text(str(worker.pid))
    _out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    assert [e for e in events(bare) if e[0] not in ("edit", "init")] == [
        ("claim", "s1"),
        ("complete", "s1"),
        ("claim", "s2"),
        ("release", "s2"),
    ]
    s2 = runner_json(clone, "show", "s2")
    assert (
        s2["status"] == "ready" and s2["assignee"] is None and "stopped before starting it" in s2["meta"]["last_error"]
    )
    assert runner_json(clone, "show", "s3")["status"] == "ready"


def test_a_server_that_refuses_the_pair_gets_each_record_alone(tmp_path):
    bare, clone = remote_with_steps(tmp_path, ["s1", "s2"])
    # A stricter server: one queue commit a push.
    server_hook(
        bare,
        "pre-receive",
        f"""
while read old new ref; do
  if [ "$ref" = {QUEUE} ] && [ "$(git rev-parse "$new^")" != "$old" ]; then echo "one commit a push" >&2; exit 1; fi
done
exit 0
""",
    )
    before = len(queue_moves(bare))
    drain(clone, "--once")
    assert queue_moves(bare)[before:] == ["claim s1", "complete s1", "claim s2", "complete s2"]
    assert {s["step"]: s["status"] for s in runner_json(clone, "status")["steps"]} == {"s1": "done", "s2": "done"}
