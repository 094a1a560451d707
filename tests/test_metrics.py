"""Fleet metrics (issue 45): `runner worker --metrics-file`, a Prometheus text file a worker rewrites
after each tick, and GET /metrics on the board; parsed with the official client library's
parser, their counts match the queue's."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from support.repos import add_step, edit, git, runner, runner_json
from support.review import start_board, stop

from runner.core.config import DEFAULT_TOML


def configure(repo: Path) -> None:
    edit(repo, {"runner.toml": DEFAULT_TOML.replace("detect = true", "detect = false").encode()}, "metrics")


def samples(text: str) -> dict[tuple, float]:
    """(sample name, sorted labels) -> value, every family parsed by prometheus_client."""
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "worker"))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def plan(repo: Path) -> None:
    add_step(repo, "01-a")
    add_step(repo, "02-b")
    add_step(repo, "03-breaks", run=["false"], max_attempts=1)
    add_step(repo, "04-gpu", tags=["gpu"])


def test_the_metrics_file_parses_and_its_counts_match_the_queue(queue_repo, tmp_path):
    path = tmp_path / "runner.prom"
    configure(queue_repo)
    plan(queue_repo)
    runner(queue_repo, "worker", "--id", "w1", "--once", "--interval", "0.2", "--metrics-file", str(path))
    found = samples(path.read_text())
    statuses = [s["status"] for s in runner_json(queue_repo, "status")["steps"]]
    for status in ("done", "failed", "ready", "claimed", "waiting", "blocked", "review", "invalid"):
        assert found[("runner_steps", (("status", status),))] == statuses.count(status), status
    assert statuses.count("done") == 2 and statuses.count("failed") == 1
    assert found[("runner_steps_stuck", ())] == len(runner_json(queue_repo, "ready")["stuck"]) == 1
    assert found[("runner_worker_claims_total", ())] == 3
    assert found[("runner_worker_steps_total", (("outcome", "done"),))] == 2
    assert found[("runner_worker_steps_total", (("outcome", "failed"),))] == 1
    assert found[("runner_worker_ticks_total", ())] >= 3
    assert found[("runner_worker_tick_seconds_count", ())] == found[("runner_worker_ticks_total", ())]
    assert found[("runner_worker_step_seconds_count", ())] == 3
    assert ("runner_worker_lost_races_total", ()) in found and ("runner_worker_hook_refusals_total", ()) in found
    assert found[("runner_workers", (("liveness", "alive"),))] == 1
    assert not list(tmp_path.glob(".runner.prom.*"))  # written through a temporary file renamed over it


def test_a_metrics_path_that_cannot_be_written_is_a_warning_and_the_ticks_go_on(queue_repo, tmp_path):
    configure(queue_repo)
    add_step(queue_repo, "01-a")
    missing = tmp_path / "no" / "such" / "folder" / "runner.prom"
    done = runner(queue_repo, "worker", "--id", "w1", "--once", "--interval", "0.2", "--metrics-file", str(missing))
    assert "warning: could not write the metrics file" in done.stderr
    assert runner_json(queue_repo, "status")["steps"][0]["status"] == "done"


def test_the_board_serves_the_queues_metrics(queue_repo):
    plan(queue_repo)
    runner(queue_repo, "worker", "--id", "w1", "--once", "--interval", "0.2")
    proc, address, _ = start_board(queue_repo, "--read-only")
    try:
        with urllib.request.urlopen(address.rstrip("/") + "/metrics", timeout=60) as answer:
            assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
            found = samples(answer.read().decode())
    finally:
        stop(proc)
    statuses = [s["status"] for s in runner_json(queue_repo, "status")["steps"]]
    assert found[("runner_steps", (("status", "done"),))] == statuses.count("done") == 2
    assert found[("runner_steps", (("status", "failed"),))] == 1
    assert found[("runner_steps_stuck", ())] == 1


def test_a_metrics_path_on_the_queue_branch_is_refused_so_no_pusher_can_make_workers_overwrite_a_file(
    queue_repo, tmp_path
):
    victim = tmp_path / "bashrc"
    victim.write_text("keep me\n")
    add_step(queue_repo, "01-a")
    worktree = tmp_path / "plain-git"
    git(queue_repo, "worktree", "add", "-q", str(worktree), "runner/queue")  # a pusher with plain git, not runner
    toml = worktree / "runner.toml"
    toml.write_text(toml.read_text().replace("[worker]\n", f"[worker]\nmetrics_file = {json.dumps(str(victim))}\n"))
    git(worktree, "commit", "-qam", "point every worker at a file")
    done = runner(queue_repo, "worker", "--id", "w1", "--once", "--interval", "0.2", check=False)
    assert (
        "metrics_file is a setting of each host now: `runner worker --metrics-file PATH`" in done.stdout + done.stderr
    )
    assert victim.read_text() == "keep me\n"
    toml.write_text(toml.read_text().replace(json.dumps(str(victim)), '""'))
    git(worktree, "commit", "-qam", "empty, as runner init wrote it")
    runner(queue_repo, "worker", "--id", "w1", "--once", "--interval", "0.2")
    assert runner_json(queue_repo, "status")["steps"][0]["status"] == "done"  # an empty one still reads
