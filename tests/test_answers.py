"""Answers a program reads (issue 46, points 3 and 5): a claim's JSON carries the worktree as
data, and under --json every failure is one JSON object on stdout (code, message, problems)
beside its exit code and the line on stderr, whichever path answered: the fast path without
typer (runner.commands.quick), typer's, or typer's own usage errors. One classification
(runner.commands.failures) serves them all and the MCP server (tests/test_agentwork.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.repos import ROOT, add_step, runner


def failure_of(proc: subprocess.CompletedProcess) -> dict:
    """The JSON failure a --json command printed on stdout, checked against its exit code and stderr."""
    data = json.loads(proc.stdout)
    assert data["ok"] is False and data["code"] == proc.returncode and proc.returncode != 0, proc
    assert proc.stderr.startswith("error: ") or "\nerror: " in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    return data


def test_a_claim_by_hand_and_work_give_the_worktree_as_data(queue_repo):
    add_step(queue_repo, "01-a")
    add_step(queue_repo, "02-b")
    claimed = json.loads(runner(queue_repo, "claim", "01-a", "--id", "w1", "--json").stdout)  # the fast path
    assert claimed["worktree"] is None and Path(claimed["repository"]) == queue_repo.resolve()
    worked = json.loads(runner(queue_repo, "work", "02-b", "--id", "agent-1", "--json").stdout)
    assert (
        Path(worked["worktree"]) == queue_repo.resolve() / ".runner" / "02-b-a1" and Path(worked["worktree"]).is_dir()
    )
    runner(queue_repo, "release", "02-b", "--id", "agent-1")


def test_a_failure_under_json_is_a_json_object_on_every_path(queue_repo):
    add_step(queue_repo, "01-a", tags=["gpu"])
    nothing = failure_of(runner(queue_repo, "claim", "--id", "w1", "--json", check=False))  # the fast path
    assert nothing["code"] == 3 and nothing["message"].startswith("nothing ready") and nothing["problems"] == []
    bad_id = failure_of(runner(queue_repo, "claim", "--id", "bad id", "--json", check=False))
    assert bad_id["code"] == 2 and bad_id["problems"] == [bad_id["message"]] and "--id" in bad_id["message"]
    missing = failure_of(runner(queue_repo, "show", "02-zz", "--json", check=False))  # typer's path
    assert missing["code"] == 2 and "no step '02-zz'" in missing["message"]
    usage = failure_of(runner(queue_repo, "claim", "--ignore-deps", "--json", check=False))  # typer's own refusal
    assert usage["code"] == 2 and "--id" in usage["message"]
    problems = failure_of(
        runner(
            queue_repo, "add", "T", "--id", "02-b", "--timeout", "soon", "--max-attempts", "-1", "--json", check=False
        )
    )
    assert problems["code"] == 2 and len(problems["problems"]) == 2 and problems["message"] == "2 problems"


def test_without_json_a_failure_is_the_line_alone(queue_repo):
    proc = runner(queue_repo, "show", "02-zz", check=False)
    assert (
        proc.returncode == 2 and proc.stdout == "" and proc.stderr == "error: no step '02-zz' (see `runner status`)\n"
    )


def test_an_unexpected_error_is_classified_once_logged_and_told_as_json(tmp_path):
    probe = """
import json, sys
from runner.commands.failures import classify, tell
try:
    {}["boom"]
except Exception as exc:
    code = tell(classify(exc), json_out=True)
sys.exit(code)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    data = failure_of(proc)
    assert data["code"] == 1 and "runner failed unexpectedly (KeyError: 'boom')" in data["message"]
    assert "Traceback" in (tmp_path / "runner" / "errors.log").read_text()
