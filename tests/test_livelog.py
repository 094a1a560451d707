"""A running step's log from any machine (issue 31): the worker's heartbeat carries a bounded
tail of the step's output and which run it is in; `runner logs STEP [--follow]` reads it on
another clone, over a remote under the hook with [hooks] identities. No push beyond the
heartbeat's: the queue branch does not move while the step runs."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.repos import ENV_PATH, git, runner, runner_json, wait_for
from support.review import WORKER_ENV, review_remote, worker_clone

from runner.core.codec import beat_output, decode_beat, encode_beat
from runner.core.limits import MAX_HEARTBEAT_BYTES, MAX_LOG_TAIL_BYTES


def waiting_step(
    release: Path, before: str = 'echo "line $((1))"; echo "on $((2)) stderr" >&2', after: str = 'echo "line $((3))"'
) -> list[str]:
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
        worker = subprocess.Popen(
            [sys.executable, "-m", "runner", "tick", "--id", "w1", "--repo", str(host_a)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**ENV_PATH, **WORKER_ENV["w1"]},
        )
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


def follow(laptop: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "logs", "01-long", "--follow", "--every", "0.2", "--repo", str(laptop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV_PATH,
    )


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """One run of 01-long (a hooked remote and a worker cost seconds of CPU), watched from alice's
    clone: a follower started before any worker claimed it, the log read while it runs and a second
    follower started then, and the log read again once it is done."""
    tmp_path = tmp_path_factory.mktemp("watched")
    release = tmp_path / "release"
    seen: dict = {}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RUNNER_PUSHER", "alice")
        bare, laptop = review_remote(tmp_path, (("01-long", {"run": waiting_step(release)}),))
        early = follow(laptop)
        seen["early_first"] = early.stderr.readline()
        seen["early_waits"] = early.poll() is None  # no worker has claimed the step yet
        host_a = worker_clone(bare, tmp_path / "host-a")
        worker = subprocess.Popen(
            [sys.executable, "-m", "runner", "tick", "--id", "w1", "--repo", str(host_a)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**ENV_PATH, **WORKER_ENV["w1"]},
        )
        try:
            wait_for(lambda: runner_json(laptop, "logs", "01-long")["output"])
            seen["early_following"] = early.stderr.readline()  # it saw the claim: it follows the running attempt
            seen["queue_tip"] = git(bare, "rev-parse", "runner/queue")
            seen["shown"] = runner(laptop, "logs", "01-long")
            seen["as_json"] = runner_json(laptop, "logs", "01-long")
            late = follow(laptop)
            seen["late_first"] = late.stderr.readline()  # it follows the running attempt: only now may the step end
            release.write_text("go")
            seen["early"] = early.communicate(timeout=120), early.returncode
            seen["late"] = late.communicate(timeout=120), late.returncode
        finally:
            release.write_text("go")
            worker.communicate(timeout=120)
        seen["worker"] = worker.returncode
        seen["moves"] = git(bare, "log", "--format=%s", f"{seen['queue_tip']}^..runner/queue").splitlines()
        seen["finished"] = runner(laptop, "logs", "01-long")
        seen["missing"] = runner(laptop, "logs", "02-nope", check=False)
    return seen


def test_a_running_steps_output_reaches_another_clone_and_follow_prints_it_to_the_end(watched):
    shown = watched["shown"]
    assert "line 1" in shown.stdout and "on 2 stderr" in shown.stdout
    assert "-- 01-long attempt 1 on w1, running implement" in shown.stderr
    as_json = watched["as_json"]
    assert as_json["running"] and as_json["worker"] == "w1" and as_json["output_bytes"] > 0
    # the run, and its command as a shell would read it (shlex.join): in the heartbeat, and in the log
    assert as_json["run"].startswith('implement: sh -c \'echo "line $((1))"; ') and len(as_json["run"]) <= 200, as_json[
        "run"
    ]
    assert '$ sh -c \'echo "line $((1))"; ' in shown.stdout
    assert watched["late_first"].startswith("-- 01-long attempt 1 on w1, running"), watched["late_first"]
    (out, err), code = watched["late"]
    assert code == 0, err
    assert out.count("line 1") == 1 and out.count("line 3") == 1 and out.index("line 1") < out.index("line 3")
    assert err.rstrip().endswith("-- 01-long attempt 1 ended: done")
    assert watched["worker"] == 0
    # While it ran, only the worker's heartbeat moved: the claim before, the record after.
    assert [m.split(" (")[0] for m in watched["moves"]] == ["complete 01-long", "claim 01-long"]


def test_a_finished_steps_log_is_the_tail_its_handoff_keeps(watched):
    shown = watched["finished"]
    assert "is done, not running; the log tail of attempt 1, from its handoff" in shown.stderr
    assert "line 1" in shown.stdout and "line 3" in shown.stdout
    missing = watched["missing"]
    assert missing.returncode == 2 and missing.stderr.strip() == "error: no step '02-nope' (see `runner status`)"


def test_follow_waits_for_a_step_that_has_not_started_then_follows_it_to_the_end(watched):
    """`runner logs STEP --follow` on a step no worker has claimed yet waits for it (issue 46), on another clone."""
    assert watched["early_first"].startswith("-- 01-long is ready, not started: waiting for it to start"), watched[
        "early_first"
    ]
    assert watched["early_waits"]
    assert watched["early_following"].startswith("-- 01-long attempt 1 "), watched["early_following"]
    (out, err), code = watched["early"]
    assert code == 0, err
    assert "line 1" in out and "line 3" in out
    assert err.rstrip().endswith("-- 01-long attempt 1 ended: done"), err


def test_a_heartbeat_carries_a_bounded_tail_and_terminal_escapes_reach_no_terminal(running):
    # ('the ' 'end': the command line, which the log shows first, must not hold what the test waits for)
    noisy = (
        "python3 -c \"import sys; sys.stdout.write('\\\\x1b[2J\\\\x07' * 60000 + 'the ' 'end\\\\n'); "
        'sys.stdout.flush()"'
    )
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
        message = encode_beat(
            "w1", {"state": "running", "step": "01-x", "attempt": 1, "run": "implement", "output": output}
        )
        assert len(message.encode()) <= MAX_HEARTBEAT_BYTES
        carried = json.loads(message.split("\n\n", 1)[1])["output"]
        assert carried and output.endswith(carried)


def test_a_daemons_beat_with_every_slot_printing_stays_within_its_bound_and_keeps_each_tail():
    """`runner worker --slots 64`: each claim carries its step's tail; the message stays in bounds."""
    claims = [
        {
            "step": f"{k:02d}-s",
            "attempt": 1,
            "incarnation": f"i-{k}",
            "run": "implement",
            "output": f"{k}:" + "\x01é" * 50_000,
        }
        for k in range(64)
    ]
    message = encode_beat("fleet", {"state": "running", "step": "00-s", "attempt": 1, "claims": claims})
    assert len(message.encode()) <= MAX_HEARTBEAT_BYTES
    carried = decode_beat(message)["claims"]
    assert [c["step"] for c in carried] == [c["step"] for c in claims]
    assert all(c["output"] and sent["output"].endswith(c["output"]) for c, sent in zip(carried, claims))
    assert beat_output(decode_beat(message), "07-s", 1)["output"] == carried[7]["output"]
    assert beat_output(decode_beat(message), "07-s", 2) is None


def test_a_runs_stdout_joins_the_log_in_one_step_no_heartbeat_sees_it_twice_or_lose_it(tmp_path):
    from runner.worker.livelog import LiveOutput

    log, out = tmp_path / "a.log", tmp_path / "a.stdout"
    log.write_text("$ sh -c run\non 2 stderr\n")
    out.write_text("line 1\nline 3\n")
    live = LiveOutput(log)
    live.running("implement: sh -c run", out)
    whole = "$ sh -c run\non 2 stderr\nline 1\nline 3\n"
    seen, stop = [], threading.Event()

    def heartbeats() -> None:  # what heartbeats carry while the run ends
        while not stop.is_set():
            seen.append(live.facts())

    watcher = threading.Thread(target=heartbeats)
    watcher.start()
    wait_for(lambda: len(seen) > 10, every=0.001)
    live.joined(out.read_text())
    wait_for(lambda: seen[-1]["run"] is None, every=0.001)
    stop.set()
    watcher.join()
    assert {(f["output"], f["output_bytes"]) for f in seen} == {(whole, len(whole))}, seen[-1]
    assert log.read_text() == whole and seen[0]["run"] == "implement: sh -c run"
