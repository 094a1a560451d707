"""The worker against real git and real processes: drains, retries, timeouts, kills, approval."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter

import psutil
import pytest
from support.repos import (
    ENV_PATH,
    add_step,
    git,
    make_remote,
    queue_history,
    runner,
    runner_json,
    set_config,
    start_worker,
    statuses,
    tick,
    wait_for,
    write_step,
)

from runner.worker.gates import check_required_outputs
from runner.worker.roles import VerdictError, parse_verdict


def test_demo_plan_drains_with_3_workers_on_a_bare_remote(tmp_path):
    bare, clones = make_remote(tmp_path, clones=3)
    runner(clones[0], "init")
    set_config(clones[0], detect=False)
    plan = {"01-a": [], "02-b": ["01-a"], "03-c": ["01-a"], "04-d": ["02-b", "03-c"], "05-e": []}
    for step_id, deps in plan.items():
        add_step(clones[0], step_id, depends_on=deps, run=write_step(f"{step_id}.txt"))
    workers = [start_worker(clone, f"host-{i}") for i, clone in enumerate(clones)]
    try:
        wait_for(lambda: set(statuses(clones[0]).values()) == {"done"}, timeout=90)
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            assert proc.wait(timeout=30) == 0, proc.stderr.read()
    history = queue_history(bare)
    assert Counter(e["Step"] for e in history if e.get("Event") == "complete") == Counter(list(plan))
    assert Counter(e["Step"] for e in history if e.get("Event") == "claim") == Counter(list(plan))
    # The integration branch holds every step's change, in an order that respects depends_on.
    order = git(bare, "log", "--reverse", "--format=%s", "--first-parent", "runner/integration").splitlines()
    merged = [next(s for s in plan if line.startswith(s) or f"merge {s} " in line) for line in order[1:]]
    assert sorted(merged) == sorted(plan)
    for step_id, deps in plan.items():
        for dep in deps:
            assert merged.index(dep) < merged.index(step_id)
    files = git(bare, "ls-tree", "--name-only", "runner/integration").splitlines()
    assert {f"{s}.txt" for s in plan} <= set(files)
    handoff = git(bare, "show", "runner/queue:plans/handoffs/04-d.md")
    assert "outcome: done" in handoff and "STEP_COMPLETE" in handoff


def test_an_idle_worker_takes_a_new_step_without_waiting_out_its_interval(tmp_path):
    _bare, (laptop, host) = make_remote(tmp_path, clones=2)
    runner(laptop, "init")
    set_config(laptop, detect=False, watch="0.2s")
    add_step(laptop, "01-first", run=["true"])
    worker = subprocess.Popen(
        [sys.executable, "-m", "runner", "worker", "--id", "w1", "--interval", "600", "--repo", str(host)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV_PATH,
    )
    try:
        wait_for(lambda: statuses(laptop)["01-first"] == "done")
        log = host / ".git" / "runner" / "logs" / "worker-w1.log"
        wait_for(lambda: "nothing" in log.read_text().split("01-first")[-1])  # idle now, with 600 s until its next tick
        add_step(laptop, "02-second", run=["true"])  # the queue branch moves on the remote: the watch sees it
        wait_for(lambda: statuses(laptop)["02-second"] == "done", timeout=120)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, worker.stderr.read()


def test_a_worker_started_with_git_dir_set_leaves_the_main_worktree_alone(queue_repo):
    """git sets GIT_DIR for its hooks: a tick started from one still makes the step's own
    worktree, and the step's git works there, not on the repository GIT_DIR names."""
    run = [
        "sh",
        "-c",
        'git rev-parse --show-toplevel > where.txt; echo "${GIT_DIR:-unset}" >> where.txt; git add where.txt',
    ]
    add_step(queue_repo, "01-where", run=run)
    head = git(queue_repo, "rev-parse", "HEAD")
    report = tick(queue_repo, env={"GIT_DIR": str(queue_repo / ".git")})
    assert report["sentinel"] == "STEP_COMPLETE", report
    where = git(queue_repo, "show", "runner/integration:where.txt").splitlines()
    assert "/worktrees/w1/01-where-a1" in where[0] and where[1] == "unset"
    assert git(queue_repo, "symbolic-ref", "HEAD") == "refs/heads/main" and git(queue_repo, "rev-parse", "HEAD") == head
    assert git(queue_repo, "status", "--porcelain") == "" and not (queue_repo / "where.txt").exists()


def test_failed_gate_is_retried_with_feedback_and_then_passes(queue_repo):
    # The step writes "good" only when it is given feedback; the test gate wants "good".
    run = ["sh", "-c", 'if [ -n "$1" ]; then echo good > out.txt; else echo bad > out.txt; fi', "sh", "{feedback}"]
    add_step(queue_repo, "01-fix", run=run)
    report = tick(queue_repo, env={"TEST_CMD": "grep -q good out.txt"})
    assert report["sentinel"] == "STEP_COMPLETE", report
    assert [g["result"] for g in report["gates"] if g["name"] == "test"] == ["pass"]
    handoff = git(queue_repo, "show", "runner/queue:plans/handoffs/01-fix.md")
    assert "Feedback given to the last run" in handoff and "gate test failed" in handoff


def test_a_step_that_removes_its_own_worktree_is_done_with_nothing_to_merge(queue_repo):
    """No worktree left, so no result commit: the step is done and nothing is merged (the record
    used to hand the merge a missing commit and fail the tick with a TypeError)."""
    add_step(queue_repo, "01-gone", run=["sh", "-c", 'cd / && rm -rf "$RUNNER_WORKTREE"'])
    integration = git(queue_repo, "rev-parse", "runner/integration")
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_COMPLETE" and report["final_status"] == "done" and report["files_changed"] == []
    assert git(queue_repo, "rev-parse", "runner/integration") == integration


def test_always_failing_step_ends_failed_after_max_attempts(queue_repo):
    set_config(queue_repo, detect=False, backoff="0s", max_attempts=2, max_fix_attempts=0)
    add_step(queue_repo, "01-broken", run=["sh", "-c", "echo broken >&2; exit 3"])
    first = tick(queue_repo)
    assert first["outcome"] == "ready" and first["sentinel"] == "STEP_FAILED"
    second = tick(queue_repo)
    assert second["outcome"] == "failed"
    show = runner_json(queue_repo, "show", "01-broken")
    assert show["status"] == "failed" and "exit code 3" in show["last_error"] and "attempts spent" in show["last_error"]
    assert tick(queue_repo)["sentinel"] == "SKIP"
    handoff = git(queue_repo, "show", "runner/queue:plans/handoffs/01-broken.md")
    assert "broken" in handoff  # the log tail lands in the handoff


def test_timeout_kills_the_whole_process_tree(queue_repo, tmp_path):
    pidfile = tmp_path / "child.pid"
    script = f'trap "" TERM; sh -c \'trap "" TERM; echo $$ > {pidfile}; sleep 1000\' & sleep 1000'
    add_step(queue_repo, "01-hang", run=["sh", "-c", script], timeout="2s", max_attempts=1)
    report = tick(queue_repo)  # within runner()'s timeout, far below the 1000 s the tree would sleep
    assert report["outcome"] == "failed" and "timed out" in report["reason"]
    child = int(pidfile.read_text())
    wait_for(lambda: not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE, timeout=5)


def test_kill_9_mid_step_is_taken_over_at_once_on_the_same_host(queue_repo, tmp_path):
    marker = tmp_path / "runs"
    add_step(
        queue_repo,
        "01-slow",
        run=["sh", "-c", f'echo run >> {marker}; [ "$RUNNER_ATTEMPT" = 1 ] && sleep 60; echo ok > out.txt'],
    )
    victim = start_worker(queue_repo, "host-a")
    wait_for(lambda: marker.exists())
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    report = tick(queue_repo, worker="host-b")
    assert report["sentinel"] == "STEP_COMPLETE" and report["attempt"] == 2, report
    history = queue_history(queue_repo)
    assert [e["Event"] for e in history if e.get("Step") == "01-slow"] == ["claim", "takeover", "complete"]


def test_kill_9_on_another_host_is_taken_over_after_the_lease(queue_repo, tmp_path):
    set_config(queue_repo, detect=False, lease="3s")
    marker = tmp_path / "runs"
    add_step(
        queue_repo,
        "01-slow",
        run=["sh", "-c", f'echo run >> {marker}; [ "$RUNNER_ATTEMPT" = 1 ] && sleep 60; echo ok > out.txt'],
    )
    victim = start_worker(queue_repo, "host-a", env={"RUNNER_HOST": "far-away"})
    wait_for(lambda: marker.exists())
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert tick(queue_repo, worker="host-b")["sentinel"] == "SKIP"  # the lease is still running
    report = tick(
        queue_repo, worker="host-b", env={"RUNNER_MONOTONIC_OFFSET": "3600"}
    )  # an hour later, by host-b's clock
    assert report["sentinel"] == "STEP_COMPLETE" and report["attempt"] == 2
    assert Counter(e["Event"] for e in queue_history(queue_repo) if e.get("Step") == "01-slow")["complete"] == 1


def test_requires_approval_waits_in_review_until_approved(queue_repo):
    add_step(queue_repo, "01-risky", run=write_step("r.txt"), requires_approval=True)
    assert tick(queue_repo)["outcome"] == "review"
    assert statuses(queue_repo)["01-risky"] == "review"
    assert tick(queue_repo)["sentinel"] == "SKIP"
    runner(queue_repo, "approve", "01-risky", "--by", "alice")
    assert statuses(queue_repo)["01-risky"] == "done"


def test_checklist_commands_run_without_a_shell_and_boxes_get_ticked(queue_repo, tmp_path):
    pwned = tmp_path / "pwned"
    body = (
        "#### Automated Verification:\n"
        "- [ ] file exists: `test -f out.txt`\n"
        f"- [ ] sneaky: `echo $(touch {pwned})`\n"
        "#### Manual Verification:\n"
        "- [ ] read it\n"
    )
    add_step(
        queue_repo,
        "01-check",
        title=f"$(touch {pwned}); rm -rf /",
        run=["sh", "-c", 'echo "$1" > out.txt', "sh", "{title}"],
        body=body,
    )
    report = tick(queue_repo)
    assert not pwned.exists()
    assert report["outcome"] == "ready"  # the shell-syntax check failed the gate
    sneaky = next(g for g in report["gates"] if g["name"].startswith("check: echo"))
    assert sneaky["result"] == "fail" and "shell syntax" in sneaky["detail"]
    assert report["manual_checks_left"] == ["read it"]


def test_boxes_of_passed_checks_are_ticked_and_manual_ones_left(queue_repo):
    body = "#### Automated Verification:\n- [ ] `test -f out.txt`\n#### Manual Verification:\n- [ ] read it\n"
    add_step(queue_repo, "01-check", run=["sh", "-c", "echo hi > out.txt"], body=body)
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    text = git(queue_repo, "show", "runner/queue:plans/steps/01-check.md")
    assert "- [x] `test -f out.txt`" in text and "- [ ] read it" in text


def test_a_ticks_text_and_json_reports_say_the_same(queue_repo):
    body = (
        "#### Automated Verification:\n"
        "- [ ] `test -f out.txt`\n"
        "- [ ] `test -f missing.txt`\n"
        "#### Manual Verification:\n"
        "- [ ] read it\n"
    )
    add_step(queue_repo, "01-check", title="Two checks", run=["sh", "-c", "echo hi > out.txt"], body=body)
    text = runner(queue_repo, "tick", "--id", "w1").stdout
    assert (
        "Status: failed" in text and "Step: 01-check - Two checks" in text and "Final frontmatter status: ready" in text
    )
    assert "Automated Verification: 1/2 passed\n  - [x] `test -f out.txt`\n  - [ ] `test -f missing.txt`" in text
    assert "Manual verification needed:\n  - [ ] read it" in text and "(it will be retried)" in text
    assert text.rstrip().splitlines()[-1].startswith("STEP_FAILED: ")
    report = runner_json(
        queue_repo, "tick", "--id", "w1", "--step", "01-check"
    )  # the second attempt (backing off: named), as JSON
    assert report["sentinel"] == "STEP_FAILED" and report["status"] == "failed" and report["title"] == "Two checks"
    assert report["automated_verification"]["passed"] == 1 and report["automated_verification"]["total"] == 2
    assert report["manual_checks_left"] == ["read it"] and report["attempt"] == 2 and report["commit"]


def test_required_outputs_must_stay_inside_the_worktree(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "ok.txt").write_text("x")
    (tree / "escape").symlink_to("/etc/passwd")
    assert check_required_outputs(tree, ["ok.txt"]).result == "pass"
    for bad in (["../x"], ["/etc/passwd"], ["escape"], ["missing.txt"]):
        assert check_required_outputs(tree, bad).result == "fail", bad


def test_verdicts_raw_fenced_commented_and_garbage():
    assert parse_verdict('{"pass": true, "score": 0.9}').score == 0.9
    assert parse_verdict('Here you go:\n```json\n{"pass": false, "score": 0, "reasons": ["x"]}\n```\n').reasons == ["x"]
    assert (
        parse_verdict('# verifier 1.0\n// notes\n{"pass": true, "score": 1, "next_hint": "more"}').next_hint == "more"
    )
    garbage = (
        "",
        "not json",
        '{"score": 1}',
        "[true]",
        '{"pass": "yes", "score": 1}',
        '{"pass": true}',
        '{"pass": true, "score": 1.5}',
        '{"pass": true, "score": 1, "mood": "good"}',
        '{"pass": true, "score": 1, "reasons": "x"}',
    )
    for text in garbage:
        with pytest.raises(VerdictError):
            parse_verdict(text)


def test_verifier_verdict_gates_the_step(queue_repo, tmp_path):
    verifier = tmp_path / "verify.py"
    verifier.write_text(
        'import os\nprint("```json")\n'
        'print(\'{"pass": %s, "score": 0.5, "reasons": ["looked"]}\' '
        '% ("true" if os.path.exists(os.environ["RUNNER_STEP"]) else "false"))\n'
        'print("```")\n'
    )
    set_config(queue_repo, detect=False, verifier=[sys.executable, str(verifier)], max_fix_attempts=0)
    add_step(queue_repo, "01-good", run=["sh", "-c", "echo > 01-good"])
    add_step(queue_repo, "02-bad", run=["true"])
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    bad = tick(queue_repo)
    verdict = next(r for r in bad["roles"] if r["name"] == "verify")
    assert verdict["result"] == "fail" and "score 0.5" in verdict["detail"]
    assert bad["sentinel"] == "STEP_FAILED" and bad["outcome"] == "ready"


def test_second_daemon_with_the_same_id_gets_a_clear_error(queue_repo):
    add_step(queue_repo, "01-slow", run=["sleep", "30"])
    first = start_worker(queue_repo, "host-a", "--grace", "3600")
    try:
        wait_for(lambda: statuses(queue_repo)["01-slow"] == "claimed")
        second = runner(queue_repo, "worker", "--id", "host-a", check=False)
        assert second.returncode == 2 and "already running" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        log = queue_repo / ".git" / "runner" / "logs" / "worker-host-a.log"
        wait_for(lambda: "SIGNAL" in log.read_text())  # two signals sent at once reach Python's handler as one
        first.send_signal(
            signal.SIGTERM
        )  # a second signal stops the step at once: the grace (an hour) is not waited out
        assert first.wait(timeout=120) == 0
    assert runner_json(queue_repo, "show", "01-slow")["status"] == "ready"  # released, not lost


def test_sigterm_finishes_the_step_within_the_grace_period(queue_repo, tmp_path):
    # Events, not durations: the step runs until the worker has taken the signal, then ends; the
    # grace period is far longer than any machine needs to record it.
    started, go = tmp_path / "started", tmp_path / "go"
    add_step(
        queue_repo,
        "01-short",
        run=["sh", "-c", f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done; echo done > out.txt"],
    )
    proc = start_worker(queue_repo, "host-a", "--grace", "600")
    wait_for(started.exists)
    proc.send_signal(signal.SIGTERM)
    log = queue_repo / ".git" / "runner" / "logs" / "worker-host-a.log"
    wait_for(lambda: "SIGNAL" in log.read_text())
    go.touch()
    assert proc.wait(timeout=120) == 0
    assert statuses(queue_repo)["01-short"] == "done"
    assert git(queue_repo, "show", "runner/integration:out.txt") == "done"


def test_sigterm_releases_a_step_that_outlives_the_grace_period(queue_repo):
    add_step(queue_repo, "01-long", run=["sleep", "60"])
    proc = start_worker(queue_repo, "host-a", "--grace", "1")
    wait_for(lambda: statuses(queue_repo)["01-long"] == "claimed")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    show = runner_json(queue_repo, "show", "01-long")
    assert show["status"] == "ready" and "stopping" in show["last_error"]


def test_halt_stops_ticks_and_worktrees_are_cleaned_up(queue_repo):
    add_step(queue_repo, "01-a", run=["true"])
    runner(queue_repo, "halt", "--reason", "deploy freeze")
    report = tick(queue_repo)
    assert report["sentinel"] == "SKIP" and "halted" in report["reason"]
    runner(queue_repo, "resume")
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    worktrees = git(queue_repo, "worktree", "list").splitlines()
    assert len(worktrees) == 1
    log = (queue_repo / ".git" / "runner" / "logs" / "worker-w1.log").read_text()
    assert "HALT" in log and "TICK" in log


def test_the_change_is_staged_like_git_add_all_deletions_in_ignored_files_out(queue_repo):
    run = [
        "sh",
        "-c",
        "git rm -q README.md; printf '*.log\\n' > .gitignore; echo noise > build.log; echo new > new.txt",
    ]
    add_step(queue_repo, "01-tidy", run=run)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_COMPLETE" and report["files_changed"] == [".gitignore", "README.md", "new.txt"]
    files = git(queue_repo, "ls-tree", "--name-only", "runner/integration").splitlines()
    assert "README.md" not in files and "build.log" not in files and "new.txt" in files


def test_a_steps_command_dies_with_its_worker_on_kill_9(queue_repo, tmp_path):
    pidfile = tmp_path / "step.pid"
    add_step(queue_repo, "01-slow", run=["sh", "-c", f"echo $$ > {pidfile}; exec sleep 120"])
    victim = start_worker(queue_repo, "host-a", env={"RUNNER_HOST": "far-away"})  # no takeover on this host kills it
    pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip()))
    assert psutil.Process(pid).name() == "sleep"
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, timeout=10)


def test_a_command_that_cannot_start_fails_the_step_with_its_name(queue_repo):
    add_step(queue_repo, "01-typo", run=["no-such-program-here", "x"], max_attempts=1)
    report = tick(queue_repo)
    assert report["outcome"] == "failed" and "could not start 'no-such-program-here'" in report["reason"], report
