"""The workflow's promises (issue 13), each driven by real ticks with stub commands on a real
repository: what lands on the integration branch, the queue's final state, the sentinel,
and what the record commit says."""

from __future__ import annotations

import json
from pathlib import Path

from support.repos import STUB, add_step, git, roles_toml, runner, runner_json, set_config, statuses, tick

WRITE = ["sh", "-c", 'echo "$1" >> out.txt', "sh", "{step} attempt {attempt}"]


def integration_has(repo: Path, path: str) -> bool:
    return git(repo, "ls-tree", "--name-only", "runner/integration", path) == path


def record_of(repo: Path, step: str) -> str:
    """The body of the last queue commit of `step` (its record)."""
    return git(repo, "log", "-1", "--format=%B", f"--grep=^Runner-Step: {step}$", "runner/queue")


# --- 1. approval gates the merge -------------------------------------------------------------


def test_a_step_that_needs_approval_is_not_merged_until_a_person_approves(queue_repo):
    add_step(queue_repo, "01-risky", run=["sh", "-c", "echo risky > risky.txt"], requires_approval=True)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_BLOCKED" and report["outcome"] == "review"
    assert not integration_has(queue_repo, "risky.txt")  # nothing merged while it waits
    assert git(queue_repo, "show", "runner/steps/01-risky:risky.txt") == "risky"  # the result waits on its step branch
    approved = runner_json(queue_repo, "approve", "01-risky", "--by", "alice")
    assert approved["status"] == "done"
    assert integration_has(queue_repo, "risky.txt")
    assert "Runner-Event: approve" in git(queue_repo, "log", "-1", "--format=%B", "runner/queue")


def test_reject_and_abort_never_touch_the_integration_branch(queue_repo):
    add_step(queue_repo, "01-risky", run=["sh", "-c", "echo risky > risky.txt"], requires_approval=True)
    before = git(queue_repo, "rev-parse", "runner/integration")
    tick(queue_repo)
    runner(queue_repo, "reject", "01-risky", "--reason", "not like this", "--by", "alice")
    assert statuses(queue_repo)["01-risky"] == "ready"
    tick(queue_repo)
    runner(queue_repo, "reject", "01-risky", "--reason", "no", "--abort", "--by", "alice")
    assert statuses(queue_repo)["01-risky"] == "failed"
    assert git(queue_repo, "rev-parse", "runner/integration") == before


def test_approve_of_a_result_that_no_longer_merges_sends_it_back_with_the_conflict(queue_repo):
    add_step(queue_repo, "01-first", run=["sh", "-c", "echo first > shared.txt"], requires_approval=True)
    add_step(queue_repo, "02-second", run=["sh", "-c", "echo second > shared.txt"])
    assert tick(queue_repo)["step"] == "01-first"
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"  # 02 merged shared.txt meanwhile
    back = runner_json(queue_repo, "approve", "01-first", "--by", "alice")
    assert back["status"] == "ready"
    show = runner_json(queue_repo, "show", "01-first")
    assert "conflicts in shared.txt" in show["last_error"]
    assert git(queue_repo, "show", "runner/integration:shared.txt") == "second"


def test_a_plan_wide_requires_approval_holds_every_step_and_a_step_may_opt_out(queue_repo):
    set_config(queue_repo, detect=False, requires_approval=True)
    add_step(queue_repo, "01-held", run=WRITE)
    add_step(queue_repo, "02-free", run=WRITE, requires_approval=False)
    assert {tick(queue_repo)["sentinel"], tick(queue_repo)["sentinel"]} == {"STEP_BLOCKED", "STEP_COMPLETE"}
    assert statuses(queue_repo) == {"01-held": "review", "02-free": "done"}


def test_dependents_never_start_before_an_approved_step_is_done(queue_repo):
    add_step(queue_repo, "01-risky", run=WRITE, requires_approval=True)
    add_step(queue_repo, "02-next", run=WRITE, depends_on=["01-risky"])
    tick(queue_repo)
    assert tick(queue_repo)["sentinel"] == "SKIP"
    runner(queue_repo, "approve", "01-risky", "--by", "alice")
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"


# --- 2. faults never pass --------------------------------------------------------------------


def test_an_orient_fault_fails_the_attempt_and_the_step_is_retried(queue_repo):
    set_config(queue_repo, detect=False, extra=roles_toml(orient=["sh", "-c", "echo rate limited >&2; exit 3"]))
    add_step(queue_repo, "01-a", run=WRITE)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_FAILED" and report["will_retry"] is True and report["outcome"] == "ready"
    assert "orient did not run (exit code 3: rate limited)" in report["reason"]  # the engine's own words (issue 36)
    assert not integration_has(queue_repo, "out.txt")


def test_a_crashed_implement_is_never_run_again_in_its_worktree(queue_repo, tmp_path):
    runs = tmp_path / "runs"
    crash = ["sh", "-c", f"[ -f half.txt ] && echo dirty >> {runs}; echo run >> {runs}; echo half > half.txt; exit 1"]
    set_config(queue_repo, detect=False, max_fix_attempts=2, backoff="0s")
    add_step(queue_repo, "01-a", run=crash)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_FAILED" and report["will_retry"] is True
    assert runs.read_text().splitlines() == ["run"]  # one run per attempt, not a fix loop on a dirty tree
    assert tick(queue_repo)["attempt"] == 2
    assert runs.read_text().splitlines() == ["run", "run"]  # the next attempt started from a fresh worktree


def test_implement_may_end_with_step_blocked_for_a_person(queue_repo):
    add_step(queue_repo, "01-a", run=["sh", "-c", "echo thinking; echo 'STEP_BLOCKED: which database?'"])
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_BLOCKED" and "which database?" in report["reason"]
    show = runner_json(queue_repo, "show", "01-a")
    assert show["status"] == "review" and show["meta"]["review"] == "blocked"


def test_implement_may_end_with_step_failed(queue_repo):
    set_config(queue_repo, detect=False, max_attempts=1)
    add_step(queue_repo, "01-a", run=["sh", "-c", "echo 'STEP_FAILED: the API key is revoked'"])
    report = tick(queue_repo)
    assert (
        report["sentinel"] == "STEP_FAILED"
        and report["will_retry"] is False
        and "API key is revoked" in report["reason"]
    )


def test_a_verifier_fault_halts_the_queue_and_spends_nothing(queue_repo):
    set_config(queue_repo, detect=False, verifier=["sh", "-c", "echo not a verdict"])
    add_step(queue_repo, "01-a", run=WRITE)
    report = tick(queue_repo)
    assert report["sentinel"] == "SKIP" and "verifier fault" in report["reason"]
    show = runner_json(queue_repo, "show", "01-a")
    assert show["status"] == "ready" and not show["meta"].get("failures")
    assert runner_json(queue_repo, "status")["halted"].startswith("verifier_failed:")


def test_a_verifier_fault_fails_the_attempt_when_the_queue_should_not_halt(queue_repo):
    set_config(queue_repo, detect=False, verifier=["sh", "-c", "exit 4"], halt_on_verifier_fault=False)
    add_step(queue_repo, "01-a", run=WRITE)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_FAILED" and "verifier fault" in report["reason"]
    assert runner_json(queue_repo, "status")["halted"] is None


# --- 3. sentinels mean what they say ----------------------------------------------------------


def test_step_complete_only_when_the_step_is_done(queue_repo):
    add_step(queue_repo, "01-done", run=WRITE)
    add_step(queue_repo, "02-held", run=WRITE, requires_approval=True)
    reports = {r["step"]: r for r in (tick(queue_repo), tick(queue_repo))}
    assert reports["01-done"]["sentinel"] == "STEP_COMPLETE" and reports["01-done"]["final_status"] == "done"
    assert reports["02-held"]["sentinel"] == "STEP_BLOCKED" and reports["02-held"]["final_status"] == "review"


# --- 4. every run on the record -----------------------------------------------------------------


def test_every_run_of_an_attempt_is_in_its_record_commit_and_in_runner_log(queue_repo):
    run = ["sh", "-c", 'if [ -n "$1" ]; then echo good > out.txt; else echo bad > out.txt; fi', "sh", "{feedback}"]
    add_step(queue_repo, "01-fix", run=run, body="#### Automated Verification:\n- [ ] good: `grep -q good out.txt`\n")
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_COMPLETE"
    body = record_of(queue_repo, "01-fix")
    assert body.count("- implement: pass") == 2  # the first run, and the fix after the failed check
    assert "- check: grep -q good out.txt: fail" in body and "- check: grep -q good out.txt: pass" in body
    log = runner(queue_repo, "log", "01-fix").stdout
    assert log.count("- implement: pass") == 2 and "grep -q good out.txt: fail" in log
    entries = runner_json(queue_repo, "log", "01-fix")["entries"]
    assert [r["result"] for r in entries[0]["runs"] if r["name"] == "implement"] == ["pass", "pass"]


# --- 5. attempts count failures, not hand-backs --------------------------------------------------


def test_releases_do_not_spend_attempts(queue_repo):
    set_config(queue_repo, detect=False, max_attempts=1)
    add_step(queue_repo, "01-a", run=WRITE)
    for _ in range(3):
        runner(queue_repo, "claim", "--id", "host-a")
        runner(queue_repo, "release", "01-a", "--id", "host-a", "--reason", "not now")
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"  # attempt 4, and still its first failure budget
    assert runner_json(queue_repo, "show", "01-a")["attempt"] == 4


def test_an_internal_runner_error_gives_the_step_back_without_spending_an_attempt(queue_repo):
    set_config(queue_repo, detect=False, max_attempts=1)
    add_step(queue_repo, "01-a", run=WRITE)
    # A fault of runner itself (injected where the record is built), not of the step.
    proc = runner(queue_repo, "tick", "--id", "w1", "--json", check=False, env={"RUNNER_FAIL_AT": "before-record"})
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 1 and report["outcome"] == "fault" and "runner error" in report["reason"]
    show = runner_json(queue_repo, "show", "01-a")
    assert show["status"] == "ready" and not show["meta"].get("failures")
    assert tick(queue_repo, env={"RUNNER_CLOCK_OFFSET": "3600"})["sentinel"] == "STEP_COMPLETE"  # after its backoff


# --- 6. the deviation gate carries the person's words --------------------------------------------


def test_a_rejected_deviation_sends_the_persons_words_to_implement_and_orient_is_told(queue_repo, tmp_path):
    seen = tmp_path / "orient-saw"
    orient = ["sh", "-c", f'cat "$1" > {seen}; echo "deviation: major: the module moved"', "sh", "{prompt_file}"]
    set_config(queue_repo, detect=False, extra=roles_toml(orient=orient))
    add_step(queue_repo, "01-a", run=["sh", "-c", 'echo "$1" > out.txt', "sh", "{feedback}"])
    assert tick(queue_repo)["sentinel"] == "STEP_BLOCKED"
    runner(queue_repo, "reject", "01-a", "--reason", "use the new module path", "--by", "alice")
    done = tick(queue_repo)
    assert done["sentinel"] == "STEP_COMPLETE", done
    assert "use the new module path" in git(queue_repo, "show", "runner/integration:out.txt")  # implement got the words
    assert "use the new module path" in seen.read_text()  # and orient was told it has been decided


def test_an_approved_deviation_covers_that_attempt_only(queue_repo):
    set_config(queue_repo, detect=False, backoff="0s", extra=roles_toml(orient=[*STUB, "deviation"]))
    add_step(queue_repo, "01-a", run=["sh", "-c", "exit 1"])
    assert tick(queue_repo)["sentinel"] == "STEP_BLOCKED"
    runner(queue_repo, "approve", "01-a", "--by", "alice")
    ran = tick(queue_repo)
    assert (
        ran["sentinel"] == "STEP_FAILED" and "implement" in ran["reason"]
    )  # the approved attempt went ahead (and failed)
    again = tick(queue_repo)
    assert again["sentinel"] == "STEP_BLOCKED" and "deviation" in again["reason"]  # the next attempt asks again


# --- 7. familiar switches and defaults ----------------------------------------------------------


def test_step_autoapprove_and_step_skip_review_work_like_the_runner_names(queue_repo):
    set_config(queue_repo, detect=False, extra=roles_toml(orient=[*STUB, "deviation"], review=[*STUB, "crash"]))
    add_step(queue_repo, "01-a", run=WRITE)
    report = tick(queue_repo, env={"STEP_AUTOAPPROVE": "1", "STEP_SKIP_REVIEW": "1"})
    assert report["sentinel"] == "STEP_COMPLETE", report
    handoff = git(queue_repo, "show", "runner/queue:plans/handoffs/01-a.md")
    assert "STEP_AUTOAPPROVE=1" in handoff and "STEP_SKIP_REVIEW=1" in handoff


def test_the_review_is_due_at_five_changed_files_by_default(queue_repo):
    set_config(queue_repo, detect=False, extra=f"\n[roles.review]\ncommand = {json.dumps([*STUB, 'ok'])}\n")
    add_step(queue_repo, "01-small", run=["sh", "-c", "touch a b c d"])
    add_step(queue_repo, "02-large", run=["sh", "-c", "touch e f g h i"])
    small, large = tick(queue_repo), tick(queue_repo)
    assert next(r for r in small["roles"] if r["name"] == "review")["result"] == "not run"
    assert next(r for r in large["roles"] if r["name"] == "review")["result"] == "pass"


def test_a_person_approves_from_another_clone_than_the_worker_made_the_result_on(tmp_path):
    from support.repos import make_remote

    bare, (worker_clone, person_clone) = make_remote(tmp_path, clones=2)
    runner(worker_clone, "init")
    set_config(worker_clone, detect=False)
    add_step(worker_clone, "01-risky", run=["sh", "-c", "echo risky > risky.txt"], requires_approval=True)
    assert tick(worker_clone)["sentinel"] == "STEP_BLOCKED"
    approved = runner_json(person_clone, "approve", "01-risky", "--by", "alice")
    assert approved["status"] == "done"
    assert git(bare, "show", "runner/integration:risky.txt") == "risky"
