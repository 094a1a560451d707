"""`runner worker --slots N`: one daemon runs several steps at once, each in its own worktree,
with one heartbeat naming every claim; SIGTERM finishes or releases them all; a kill -9
leaves nothing running and another worker takes the claims over."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from functools import partial
from pathlib import Path

import psutil
from support.repos import (
    ENV_PATH,
    add_step,
    git,
    make_remote,
    queue_history,
    runner,
    runner_json,
    set_config,
    statuses,
    wait_for,
)


def waiting_step(folder: Path) -> list[str]:
    """A step that prints a line, says it started, then waits for the test's word (a file)."""
    return [
        "sh",
        "-c",
        (
            f'echo "output of $RUNNER_STEP"; touch {folder}/started-$RUNNER_STEP; '
            f"while [ ! -e {folder}/go ]; do sleep 0.05; done"
        ),
    ]


def start_slots(repo: Path, worker: str, slots: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner",
            "worker",
            "--id",
            worker,
            "--slots",
            str(slots),
            "--interval",
            "0.2",
            "--repo",
            str(repo),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV_PATH,
    )


def started(folder: Path) -> set[str]:
    return {p.name.removeprefix("started-") for p in folder.glob("started-*")}


def logs_with_output(repo: Path, step: str) -> dict | None:
    """`runner logs STEP --json` once it shows the line the step printed."""
    shown = runner_json(repo, "logs", step)
    return shown if f"output of {step}\n" in (shown["output"] or "") else None


def beat_of(repo: Path, worker: str) -> dict:
    git(repo, "fetch", "-q", "origin", f"+refs/runner/heartbeats/{worker}:refs/test/beat")
    return json.loads(git(repo, "log", "-1", "--format=%B", "refs/test/beat").partition("\n\n")[2])


def plan(tmp_path: Path, steps: int, grace: str = "60s") -> tuple[Path, list[Path], Path]:
    bare, clones = make_remote(tmp_path, clones=2)
    runner(clones[0], "init")
    set_config(clones[0], detect=False, grace_period=grace)
    folder = tmp_path / "marks"
    folder.mkdir()
    for k in range(1, steps + 1):
        add_step(clones[0], f"0{k}-s", run=waiting_step(folder))
    return bare, clones, folder


def test_three_slots_run_three_steps_at_once_each_steps_output_read_elsewhere_and_sigterm_finishes_them(tmp_path):
    bare, (laptop, host), folder = plan(tmp_path, 4)
    daemon = start_slots(host, "fleet", 3)
    try:
        # Each step waits for a file only the test writes: three started means three ran at once.
        wait_for(lambda: len(started(folder)) == 3, timeout=120)
        beat = wait_for(lambda: next((b for b in [beat_of(host, "fleet")] if len(b.get("claims", [])) == 3), None))
        assert sorted(c["step"] for c in beat["claims"]) == sorted(started(folder))
        assert len({c["incarnation"] for c in beat["claims"]}) == 3  # each slot its own incarnation
        rows = json.loads(runner(laptop, "workers", "--json").stdout)["workers"]
        assert [r["worker"] for r in rows] == ["fleet"]  # one heartbeat ref for the whole daemon
        # Each slot's claim carries its own step's output: `runner logs` reads it on another clone.
        for step in started(folder):
            shown = wait_for(partial(logs_with_output, laptop, step))
            assert shown["running"] and shown["worker"] == "fleet" and shown["run"].startswith("implement")
            assert [line for line in shown["output"].splitlines() if line.startswith("output of")] == [
                f"output of {step}"
            ]
        daemon.send_signal(signal.SIGTERM)
        wait_for(lambda: "stopping" in (host / ".git/runner/logs/worker-fleet.log").read_text())
        (folder / "go").touch()  # within the grace period, the three finish
        assert daemon.wait(timeout=120) == 0
    finally:
        (folder / "go").touch()
        daemon.kill()
    done = statuses(laptop)
    assert sorted(s for s, status in done.items() if status == "done") == sorted(started(folder))
    assert list(done.values()).count("ready") == 1  # nothing claimed after the signal
    history = queue_history(bare)
    claims = Counter(e["Step"] for e in history if e.get("Event") == "claim")
    assert set(claims.values()) == {1}  # 0 double claims


def test_sigterm_with_no_grace_releases_every_slots_step(tmp_path):
    bare, (laptop, host), folder = plan(tmp_path, 2, grace="0s")
    daemon = start_slots(host, "fleet", 2)
    try:
        wait_for(lambda: len(started(folder)) == 2, timeout=120)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=120) == 0
    finally:
        daemon.kill()
    assert set(statuses(laptop).values()) == {"ready"}
    releases = [e["Step"] for e in queue_history(bare) if e.get("Event") == "release"]
    assert sorted(releases) == ["01-s", "02-s"]


def test_a_killed_daemon_leaves_nothing_running_and_its_claims_are_taken_over(tmp_path):
    bare, (laptop, host), folder = plan(tmp_path, 2)
    daemon = start_slots(host, "fleet", 2)
    try:
        wait_for(lambda: len(started(folder)) == 2, timeout=120)
        steps = [p for p in psutil.process_iter(["cmdline"]) if str(folder / "go") in " ".join(p.info["cmdline"] or [])]
        assert len(steps) >= 2
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=60)
        psutil.wait_procs(steps, timeout=30)
        assert not [p for p in steps if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    finally:
        daemon.kill()
    (folder / "go").touch()
    runner(host, "worker", "--id", "other", "--once", "--interval", "0.2")
    assert set(statuses(laptop).values()) == {"done"}
    takeovers = [e["Step"] for e in queue_history(bare) if e.get("Event") == "takeover"]
    assert sorted(takeovers) == ["01-s", "02-s"]
