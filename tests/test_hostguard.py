"""The host guard (issue 45): every runner daemon of a user on one machine shares
`[worker] max_parallel_gates`; `[worker] worktree_budget` removes the worktrees of finished
steps before a claim; `runner gc` removes them by hand and says what it freed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.repos import ENV_PATH, add_step, edit, make_remote, runner, runner_json, statuses, tick, wait_for

from runner.core.config import DEFAULT_TOML


def configure(repo: Path, **worker: str) -> None:
    text = DEFAULT_TOML.replace("detect = true", "detect = false")
    for name, value in worker.items():
        old = next(line for line in text.splitlines() if line.startswith(f"{name} = "))
        text = text.replace(old, f"{name} = {value}", 1)
    edit(repo, {"runner.toml": text.encode()}, "configure the guard")


def test_the_gate_guard_holds_across_two_daemons(tmp_path):
    _bare, (laptop, host_a, host_b) = make_remote(tmp_path, clones=3)
    runner(laptop, "init")
    marks = tmp_path / "marks"
    marks.mkdir()
    gate = [
        "sh",
        "-c",
        (
            f"touch {marks}/in-$RUNNER_STEP; while [ ! -e {marks}/go-$RUNNER_STEP ]; do sleep 0.05; done; "
            f"rm {marks}/in-$RUNNER_STEP"
        ),
    ]
    configure(laptop, max_parallel_gates="1", test=json.dumps(gate))
    add_step(laptop, "01-a")
    add_step(laptop, "02-b")
    env = {**ENV_PATH, "RUNNER_RUNTIME_DIR": str(tmp_path / "runtime")}
    daemons = [
        subprocess.Popen(
            [sys.executable, "-m", "runner", "worker", "--id", name, "--interval", "0.2", "--repo", str(clone)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name, clone in (("a", host_a), ("b", host_b))
    ]

    def waiting() -> list[Path]:
        return [
            log
            for clone in (host_a, host_b)
            for log in (clone / ".git/runner/logs/steps").glob("*.log")
            if "waiting for a gate slot" in log.read_text()
        ]

    try:
        wait_for(lambda: waiting() and list(marks.glob("in-*")), timeout=120)
        inside = [p.name.removeprefix("in-") for p in marks.glob("in-*")]
        assert len(inside) == 1  # the other daemon's gate waits for the one slot
        first = inside[0]
        second = "02-b" if first == "01-a" else "01-a"
        assert waiting()[0].name.startswith(second)
        (marks / f"go-{first}").touch()
        wait_for(lambda: (marks / f"in-{second}").exists(), timeout=120)
        (marks / f"go-{second}").touch()
        wait_for(lambda: set(statuses(laptop).values()) == {"done"}, timeout=120)
    finally:
        for name in ("01-a", "02-b"):
            (marks / f"go-{name}").touch()
        for proc in daemons:
            proc.terminate()
            proc.wait(timeout=120)


def test_finished_worktrees_are_removed_by_the_budget_and_by_gc(queue_repo):
    configure(queue_repo, keep_worktree_on_failure="true", test='["false"]')
    add_step(queue_repo, "01-kept", max_attempts=1)
    assert tick(queue_repo)["outcome"] == "failed"
    kept = list((queue_repo / ".git/runner/worktrees").glob("*/01-kept-a1"))
    assert len(kept) == 1
    # gc removes a finished step's worktree and says what it freed
    freed = runner_json(queue_repo, "gc")
    assert [Path(w["path"]).name for w in freed["worktrees"]] == ["01-kept-a1"] and freed["bytes"] > 0
    assert not kept[0].exists()
    assert runner_json(queue_repo, "gc")["worktrees"] == []
    # over the budget, a tick removes the finished worktrees before it claims
    add_step(queue_repo, "02-kept", max_attempts=1)
    assert tick(queue_repo, "w2")["outcome"] == "failed"  # kept in w2's folder, which w1's ticks leave alone
    configure(queue_repo, worktree_budget="1", test="[]")  # bytes: a worktree here is a few
    add_step(queue_repo, "03-next")
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    assert not list((queue_repo / ".git/runner/worktrees").glob("*/02-kept-a1"))
    log = (queue_repo / ".git/runner/logs/worker-w1.log").read_text()
    assert "over the worktree budget: removed 1 finished worktree(s)" in log


def test_a_guard_value_out_of_range_is_refused(queue_repo):
    text = DEFAULT_TOML.replace('max_parallel_gates = "none"', "max_parallel_gates = 0")
    with pytest.raises(Exception) as refused:
        edit(queue_repo, {"runner.toml": text.encode()}, "bad guard")
    assert "[worker].max_parallel_gates: must be 1 or more, not 0" in str(refused.value)
