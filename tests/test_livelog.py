"""A running step's log from any machine (issue 31): the worker's heartbeat carries a bounded
tail of the step's output and which run it is in; `runner logs STEP [--follow]` reads it on
another clone, over a remote under the hook with [hooks] identities. No push beyond the
heartbeat's: the queue branch does not move while the step runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.repos import ENV_PATH, git, runner, runner_json, wait_for
from support.review import WORKER_ENV, review_remote, worker_clone
from runner.core.codec import decode_beat, encode_beat
from runner.core.limits import MAX_HEARTBEAT_BYTES, MAX_LOG_TAIL_BYTES


def waiting_step(release: Path, before: str = 'echo "line $((1))"; echo "on $((2)) stderr" >&2', after: str = 'echo "line $((3))"') -> list[str]:
    """A step that prints, then waits (in the step's own shell, never in the test) until the test releases it.
    (Its lines are written as arithmetic so that the log's `$ sh -c ...` line does not hold them.)"""
    return ["sh", "-c", f"{before}; while [ ! -e {release} ]; do sleep 0.05; done; {after}"]


@pytest.fixture
def running(tmp_path, monkeypatch):
    """Step 01-long running on w1's clone (host-a) until `release` exists; alice's clone reads it."""
    monkeypatch.setenv("RUNNER_PUSHER", "alice")
    release = tmp_path / "release"
    made = {}

    def start(**prints):
        bare, laptop = review_remote(tmp_path, (("01-long", {"run": waiting_step(release, **prints)}),))
        host_a = worker_clone(bare, tmp_path / "host-a")
        worker = subprocess.Popen([sys.executable, "-m", "runner", "tick", "--id", "w1", "--repo", str(host_a)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**ENV_PATH, **WORKER_ENV["w1"]})
        made.update(bare=bare, laptop=laptop, worker=worker, release=release)
        wait_for(lambda: runner_json(laptop, "logs", "01-long")["output"])
        return made

    yield start
    release.write_text("go")
    if "worker" in made and made["worker"].poll() is None:
        try:
            made["worker"].wait(timeout=120)
        finally:
            made["worker"].kill()


def test_a_running_steps_output_reaches_another_clone_and_follow_prints_it_to_the_end(running):
    made = running()
    laptop, bare = made["laptop"], made["bare"]
    queue_tip = git(bare, "rev-parse", "runner/queue")
    shown = runner(laptop, "logs", "01-long")
    assert "line 1" in shown.stdout and "on 2 stderr" in shown.stdout
    assert "-- 01-long attempt 1 on w1, running implement" in shown.stderr
    as_json = runner_json(laptop, "logs", "01-long")
    assert as_json["running"] and as_json["worker"] == "w1" and as_json["output_bytes"] > 0
    # the run, and its command as a shell would read it (shlex.join): in the heartbeat, and in the log
    assert as_json["run"].startswith("implement: sh -c 'echo \"line $((1))\"; ") and len(as_json["run"]) <= 200, as_json["run"]
    assert "$ sh -c 'echo \"line $((1))\"; " in shown.stdout
    follower = subprocess.Popen([sys.executable, "-m", "runner", "logs", "01-long", "--follow", "--every", "0.2", "--repo", str(laptop)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV_PATH)
    made["release"].write_text("go")
    out, err = follower.communicate(timeout=120)
    assert follower.returncode == 0, err
    assert out.count("line 1") == 1 and out.count("line 3") == 1 and out.index("line 1") < out.index("line 3")
    assert err.rstrip().endswith("-- 01-long attempt 1 ended: done")
    assert made["worker"].wait(timeout=120) == 0
    # While it ran, only the worker's heartbeat moved: the claim before, the record after.
    moves = git(bare, "log", "--format=%s", f"{queue_tip}^..runner/queue").splitlines()
    assert [m.split(" (")[0] for m in moves] == ["complete 01-long", "claim 01-long"]


def test_a_finished_steps_log_is_the_tail_its_handoff_keeps(running):
    made = running()
    made["release"].write_text("go")
    assert made["worker"].wait(timeout=120) == 0
    shown = runner(made["laptop"], "logs", "01-long")
    assert "is done, not running; the log tail of attempt 1, from its handoff" in shown.stderr
    assert "line 1" in shown.stdout and "line 3" in shown.stdout
    missing = runner(made["laptop"], "logs", "02-nope", check=False)
    assert missing.returncode == 2 and missing.stderr.strip() == "error: no step '02-nope' (see `runner status`)"


def test_a_heartbeat_carries_a_bounded_tail_and_terminal_escapes_reach_no_terminal(running):
    # ('the ' 'end': the command line, which the log shows first, must not hold what the test waits for)
    noisy = "python3 -c \"import sys; sys.stdout.write('\\\\x1b[2J\\\\x07' * 60000 + 'the ' 'end\\\\n'); sys.stdout.flush()\""
    made = running(before=noisy, after="true")
    wait_for(lambda: "the end" in (runner_json(made["laptop"], "logs", "01-long")["output"] or ""))
    beat = git(made["laptop"], "log", "-1", "--format=%B", "refs/runner/remotes/origin/heartbeats/w1") + "\n"
    assert len(beat.encode()) <= MAX_HEARTBEAT_BYTES
    output = decode_beat(beat)["output"]
    assert 0 < len(output.encode()) <= MAX_LOG_TAIL_BYTES and output.endswith("the end\n")
    shown = runner(made["laptop"], "logs", "01-long").stdout
    assert "\x1b" not in shown and "\x07" not in shown and "\\x1b[2J\\x07" in shown


def test_a_heartbeat_message_stays_within_its_bound_whatever_the_output_is():
    for output in ("\x01" * 100_000, "😀" * 100_000, "é\n" * 100_000):
        message = encode_beat("w1", {"state": "running", "step": "01-x", "attempt": 1, "run": "implement", "output": output})
        assert len(message.encode()) <= MAX_HEARTBEAT_BYTES
        carried = json.loads(message.split("\n\n", 1)[1])["output"]
        assert carried and output.endswith(carried)


def test_follow_waits_for_a_step_that_has_not_started_then_follows_it_to_the_end(tmp_path, monkeypatch):
    """`runner logs STEP --follow` on a step no worker has claimed yet waits for it (issue 46), on another clone."""
    monkeypatch.setenv("RUNNER_PUSHER", "alice")
    release = tmp_path / "release"
    bare, laptop = review_remote(tmp_path, (("01-long", {"run": waiting_step(release)}),))
    follower = subprocess.Popen([sys.executable, "-m", "runner", "logs", "01-long", "--follow", "--every", "0.2", "--repo", str(laptop)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV_PATH)
    first = follower.stderr.readline()
    assert first.startswith("-- 01-long is ready, not started: waiting for it to start"), first
    assert follower.poll() is None  # it waits; no worker has claimed the step yet
    host_a = worker_clone(bare, tmp_path / "host-a")
    worker = subprocess.Popen([sys.executable, "-m", "runner", "tick", "--id", "w1", "--repo", str(host_a)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**ENV_PATH, **WORKER_ENV["w1"]})
    try:
        wait_for(lambda: runner_json(laptop, "logs", "01-long")["output"])
        following = follower.stderr.readline()  # it saw the claim: it follows the running attempt
        assert following.startswith("-- 01-long attempt 1 "), following
        release.write_text("go")
        out, err = follower.communicate(timeout=120)
    finally:
        release.write_text("go")
        worker.communicate(timeout=120)
    assert follower.returncode == 0, err
    assert "line 1" in out and "line 3" in out
    assert err.rstrip().endswith("-- 01-long attempt 1 ended: done"), err
