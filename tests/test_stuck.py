"""A stuck queue is said out loud (issue 45): a ready step no live worker can take (its tags),
or one that waits on a dependency failed for good, is named with why by `runner ready`,
`runner status`, the board's needs-you list and a "stuck" notice; `runner worker --once`
exits when nothing is left that it could take, and says what it left."""

from __future__ import annotations

import json
import subprocess
import sys

from support.repos import ENV_PATH, add_step, edit, git, make_remote, runner, runner_json, wait_for

from runner.core.config import DEFAULT_TOML


def notices_to(repo, told) -> None:
    """[notify] appends each notice to `told`; this clone opted in to run it."""
    git(repo, "config", "runner.notify", "true")
    command = ["sh", "-c", 'echo "$1|$2" >> "$0"', str(told), "{event}", "{step}"]
    text = DEFAULT_TOML.replace("detect = true", "detect = false")
    text = text.replace("[notify]\ncommand = []", f"[notify]\ncommand = {json.dumps(command)}")
    edit(repo, {"runner.toml": text.encode()}, "configure notices")


def test_an_untakeable_step_is_named_everywhere_and_once_exits(tmp_path):
    _bare, (laptop, host) = make_remote(tmp_path, clones=2)
    runner(laptop, "init")
    told = tmp_path / "told.txt"
    notices_to(laptop, told)
    add_step(laptop, "01-plain")
    add_step(laptop, "02-gpu", tags=["gpu"])
    add_step(laptop, "03-breaks", run=["false"], max_attempts=1)
    add_step(laptop, "04-after", depends_on=["03-breaks"])
    done = runner(host, "worker", "--id", "cpu", "--once", "--interval", "0.2", "--notify", timeout=300)
    left = [line for line in done.stdout.splitlines() if line.startswith("left: ")]
    assert "left: 02-gpu (needs tag gpu: no live worker has it)" in left
    assert any(line.startswith("left: 04-after (waits for 03-breaks, failed for good") for line in left)
    ready = runner_json(laptop, "ready")
    stuck = {s["step"]: s["why"] for s in ready["stuck"]}
    assert set(stuck) == {"02-gpu", "04-after"}
    assert "needs tag gpu, which no live worker has" in stuck["02-gpu"]
    status = {s["step"]: s["why"] for s in runner_json(laptop, "status")["stuck"]}
    assert status == stuck
    text = runner(laptop, "ready").stdout
    assert "stuck: 02-gpu: needs tag gpu" in text
    # the notice, once per step, from the worker that saw it
    found = wait_for(lambda: told.exists() and {"stuck|02-gpu", "stuck|04-after"} <= set(told.read_text().splitlines()))
    assert found
    # the board's needs-you
    from runner.board.view import home
    from runner.queue.queue import open_queue

    queue = open_queue(laptop)
    needs = [n for n in home(queue, queue.snapshot())["needs"] if n["kind"] == "stuck"]
    assert sorted(n["step"] for n in needs) == ["02-gpu", "04-after"]


def test_a_step_some_live_worker_can_take_is_not_stuck(tmp_path):
    _bare, (laptop, host) = make_remote(tmp_path, clones=2)
    runner(laptop, "init")
    add_step(laptop, "01-gpu", tags=["gpu"], run=["sh", "-c", f"while [ ! -e {tmp_path}/go ]; do sleep 0.05; done"])
    add_step(laptop, "02-gpu", tags=["gpu"])
    gpu = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner",
            "worker",
            "--id",
            "g",
            "--tag",
            "gpu",
            "--interval",
            "0.2",
            "--repo",
            str(host),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV_PATH,
    )
    try:
        wait_for(lambda: any(s["status"] == "claimed" for s in runner_json(laptop, "status")["steps"]))
        assert runner_json(laptop, "ready")["stuck"] == []
    finally:
        (tmp_path / "go").touch()
        gpu.terminate()
        gpu.wait(timeout=120)
