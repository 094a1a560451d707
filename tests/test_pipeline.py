"""The step pipeline: orient, review and sweep roles, sentinels and brakes, driven by stub role commands."""

from __future__ import annotations

import json

from support.repos import (
    STUB,
    WRITE,
    add_step,
    git,
    handoff,
    roles_toml,
    runner,
    runner_json,
    set_config,
    start_worker,
    statuses,
    tick,
    wait_for,
)

from runner.core.config import Role
from runner.worker.roles import critical_findings, deviation_reported, plateaued, review_due


def test_deviation_goes_to_review_and_approve_lets_it_proceed(queue_repo):
    set_config(queue_repo, detect=False, extra=roles_toml(orient=[*STUB, "deviation"]))
    add_step(queue_repo, "01-api", run=WRITE)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_BLOCKED" and "deviation" in report["reason"]
    show = runner_json(queue_repo, "show", "01-api")
    assert show["status"] == "review" and "gRPC" in show["last_error"]
    assert "gRPC" in handoff(queue_repo, "01-api")
    runner(queue_repo, "approve", "01-api", "--by", "alice")
    assert statuses(queue_repo)["01-api"] == "ready"
    done = tick(queue_repo)
    assert done["sentinel"] == "STEP_COMPLETE", done
    assert "approved by a person" in json.dumps(done["roles"])


def test_deviation_rejected_goes_back_to_ready_with_the_reason(queue_repo):
    set_config(queue_repo, detect=False, extra=roles_toml(orient=[*STUB, "deviation-json"]))
    add_step(queue_repo, "01-api", run=WRITE)
    assert tick(queue_repo)["sentinel"] == "STEP_BLOCKED"
    runner(queue_repo, "reject", "01-api", "--reason", "rewrite the step first", "--by", "alice")
    show = runner_json(queue_repo, "show", "01-api")
    assert show["status"] == "ready" and "rewrite the step first" in show["last_error"]


def test_autoapprove_skips_the_deviation_gate_and_says_so(queue_repo):
    set_config(queue_repo, detect=False, extra=roles_toml(orient=[*STUB, "deviation"]))
    add_step(queue_repo, "01-api", run=WRITE)
    report = tick(queue_repo, env={"RUNNER_AUTOAPPROVE": "1"})
    assert report["sentinel"] == "STEP_COMPLETE"
    assert "RUNNER_AUTOAPPROVE=1" in handoff(queue_repo, "01-api")


def test_critical_review_sends_the_step_back_to_implement_with_findings(queue_repo, tmp_path):
    state = tmp_path / "review-state"
    set_config(queue_repo, detect=False, extra=roles_toml(review=[*STUB, "critical-once", str(state)]))
    add_step(queue_repo, "01-parser", run=WRITE)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_COMPLETE", report
    out = git(queue_repo, "show", "runner/integration:out.txt")
    assert "drops the last token" in out  # the findings reached implement as {feedback}
    assert "minor: naming" in handoff(queue_repo, "01-parser")


def test_critical_review_beyond_max_review_attempts_fails_the_attempt(queue_repo):
    set_config(
        queue_repo, detect=False, max_attempts=1, extra=roles_toml(review=["sh", "-c", "echo 'CRITICAL: still broken'"])
    )
    add_step(queue_repo, "01-parser", run=WRITE)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_FAILED" and "critical" in report["reason"]


def test_reviewer_crashing_once_is_retried_without_spending_a_fix(queue_repo, tmp_path):
    state = tmp_path / "crash-state"
    set_config(queue_repo, detect=False, max_fix_attempts=0, extra=roles_toml(review=[*STUB, "crash-once", str(state)]))
    add_step(queue_repo, "01-a", run=WRITE)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_COMPLETE", report
    assert "reviewed after a retry" in handoff(queue_repo, "01-a")
    assert "PIPELINE-FAULT" not in handoff(queue_repo, "01-a")


def test_reviewer_crashing_twice_is_a_pipeline_fault_and_never_passes_as_reviewed(queue_repo):
    set_config(queue_repo, detect=False, extra=roles_toml(review=[*STUB, "crash"]))
    add_step(queue_repo, "01-a", run=WRITE)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_BLOCKED"
    assert [f for f in report["faults"] if f.startswith("PIPELINE-FAULT: independent review did not run")]
    text = handoff(queue_repo, "01-a")
    assert "PIPELINE-FAULT: independent review did not run" in text and "not passed as reviewed" in text
    assert statuses(queue_repo)["01-a"] == "review"


def test_a_sweep_fault_holds_the_result_for_a_person_flagged_and_never_reported_as_covered(queue_repo):
    set_config(queue_repo, detect=False, extra=roles_toml(sweep=[*STUB, "crash"]))
    add_step(queue_repo, "01-a", run=WRITE)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_BLOCKED" and statuses(queue_repo)["01-a"] == "review"
    fault = "PIPELINE-FAULT: edge-case sweep did not run (exit code 2: reviewer exploded)"
    assert report["faults"] == [fault] and f"awaiting a person: {fault}; not passed as swept" == report["reason"]
    sweep = next(r for r in report["roles"] if r["name"] == "sweep")
    assert sweep["result"] == "fail" and sweep["detail"] == fault
    assert fault in handoff(queue_repo, "01-a") and "Sweep findings" not in handoff(queue_repo, "01-a")
    assert [r["name"] for r in report["runs"]].count("implement") == 1  # never a reason to run the coder again
    assert git(queue_repo, "ls-tree", "--name-only", "runner/integration") == "README.md"  # nothing merged
    runner(queue_repo, "approve", "01-a", "--by", "alice")  # the person at the approval gate decides
    assert statuses(queue_repo)["01-a"] == "done" and "out.txt" in git(
        queue_repo, "ls-tree", "--name-only", "runner/integration"
    )


def test_skip_review_is_recorded(queue_repo):
    set_config(queue_repo, detect=False, extra=roles_toml(review=[*STUB, "crash"]))
    add_step(queue_repo, "01-a", run=WRITE)
    report = tick(queue_repo, env={"RUNNER_SKIP_REVIEW": "1"})
    assert report["sentinel"] == "STEP_COMPLETE"
    assert "RUNNER_SKIP_REVIEW=1" in handoff(queue_repo, "01-a")


def test_unconfigured_roles_are_reported_as_not_configured(queue_repo):
    add_step(queue_repo, "01-a", run=WRITE)
    report = tick(queue_repo)
    assert {r["name"]: r["detail"] for r in report["roles"]} == {
        n: "not configured" for n in ("orient", "verify", "orchestrate", "sweep", "review")
    }


def test_plateau_fails_the_step(queue_repo):
    set_config(queue_repo, detect=False, verifier=[*STUB, "score", "0.5"], max_fix_attempts=5, score_plateau_window=2)
    add_step(queue_repo, "01-a", run=WRITE)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_FAILED" and report["reason"].startswith("plateau")
    show = runner_json(queue_repo, "show", "01-a")
    assert show["status"] == "failed" and show["meta"]["scores"] == [0.5, 0.5]  # exactly the plateau window


def test_budget_fails_the_step(queue_repo):
    set_config(queue_repo, detect=False, step_budget="1s")
    add_step(queue_repo, "01-slow", run=["sleep", "5"])
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_FAILED" and report["reason"].startswith("budget")
    assert runner_json(queue_repo, "show", "01-slow")["status"] == "failed"


def test_abort_by_a_person_kills_the_run_and_the_tick_says_rejected(queue_repo):
    add_step(queue_repo, "01-long", run=["sleep", "60"])
    proc = start_worker(queue_repo, "host-a", "--json", "--max-ticks", "1")
    wait_for(lambda: statuses(queue_repo)["01-long"] == "claimed")
    runner(queue_repo, "abort", "01-long", "--reason", "wrong plan", "--by", "alice")
    out, _err = proc.communicate(timeout=30)
    report = json.loads(out.strip().splitlines()[-1])
    assert report["sentinel"] == "STEP_REJECTED" and "wrong plan" in report["reason"]
    assert statuses(queue_repo)["01-long"] == "failed"


def test_blocked_plan_ends_the_tick_with_step_blocked(queue_repo):
    add_step(queue_repo, "01-a", run=["false"], max_attempts=1)
    add_step(queue_repo, "02-b", run=["true"], depends_on=["01-a"])
    set_config(queue_repo, detect=False, max_fix_attempts=0)
    assert tick(queue_repo)["sentinel"] == "STEP_FAILED"
    assert tick(queue_repo)["sentinel"] == "STEP_BLOCKED"


def test_parsers():
    assert deviation_reported("x\nDeviation: MAJOR - moved\n")
    assert deviation_reported('```json\n{"deviation": "major", "reason": "gone"}\n```') == "gone"
    assert deviation_reported("deviation: minor") is None
    assert critical_findings("ok\nCRITICAL: a\n  \N{LARGE RED CIRCLE} b\nnote") == [
        "CRITICAL: a",
        "\N{LARGE RED CIRCLE} b",
    ]
    role = Role(("x",), min_files=3, boundaries=("api/",))
    assert review_due(role, ["a", "b"]) is None
    assert review_due(role, ["a", "b", "c"])
    assert review_due(role, ["api/x.py"])
    assert plateaued([0.1, 0.5, 0.5, 0.4], 2) and not plateaued([0.1, 0.5, 0.6], 2) and not plateaued([0.5, 0.5], 2)
