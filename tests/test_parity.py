"""Step-plan parity (issue 17): what the step-running tools whose plans runner imports do,
runner does, each checked with stub commands on a real repository."""

from __future__ import annotations

import json
import sys

from support.repos import ROOT, add_step, git, roles_toml, runner, runner_json, set_config, statuses, tick

RUNNER = [sys.executable, "-m", "runner"]


def test_automated_qa_items_run_and_are_ticked_and_the_qa_spec_is_reported(queue_repo):
    body = (
        "QA Spec: docs/qa/01.md\n\n"
        "#### Automated Verification:\n- [ ] exists: `test -f out.txt`\n"
        "#### Automated QA:\n- [ ] says hello: `grep -q hello out.txt`\n"
        "#### Manual Verification:\n- [ ] reads well\n"
    )
    add_step(queue_repo, "01-a", run=["sh", "-c", "echo hello > out.txt"], body=body)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_COMPLETE"
    assert report["automated_qa"]["passed"] == report["automated_qa"]["total"] == 1
    assert report["qa_doc"] == "docs/qa/01.md"
    text = git(queue_repo, "show", "runner/queue:plans/steps/01-a.md")
    assert "- [x] says hello: `grep -q hello out.txt`" in text and "- [ ] reads well" in text
    assert "qa_doc: docs/qa/01.md" in git(queue_repo, "show", "runner/queue:plans/handoffs/01-a.md")


def test_a_failing_qa_item_fails_the_gate_like_a_verification_item(queue_repo):
    set_config(queue_repo, detect=False, max_fix_attempts=0)
    add_step(queue_repo, "01-a", run=["true"], body="#### Automated QA:\n- [ ] scenario: `false`\n")
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_FAILED" and report["automated_qa"]["passed"] == 0


def test_the_step_report_has_the_shape_people_know(queue_repo):
    body = (
        "#### Automated Verification:\n- [ ] exists: `test -f out.txt`\n#### Manual Verification:\n- [ ] reads well\n"
    )
    add_step(queue_repo, "01-a", "Write the file", run=["sh", "-c", "echo hi > out.txt"], body=body)
    text = runner(queue_repo, "tick", "--id", "w1").stdout
    for line in (
        "Status: completed",
        "Step: 01-a - Write the file",
        "Final frontmatter status: done",
        "Files changed: out.txt",
        "Automated Verification: 1/1 passed",
        "  - [x] exists: `test -f out.txt`",
        "Manual verification needed:",
        "  - [ ] reads well",
        "STEP_COMPLETE",
    ):
        assert line in text.splitlines(), (line, text)


def test_a_blocked_report_names_who_holds_the_step(queue_repo):
    add_step(queue_repo, "01-a", run=["true"])
    runner(queue_repo, "claim", "01-a", "--id", "host-b")
    report = runner_json(queue_repo, "tick", "--id", "host-a", "--step", "01-a")
    assert report["sentinel"] == "STEP_BLOCKED" and "claimed by host-b" in report["reason"]


def test_the_verifier_gets_the_tokens_and_its_hint_reaches_the_next_run(queue_repo, tmp_path):
    seen = tmp_path / "verifier-saw"
    verifier = tmp_path / "verify.py"
    verifier.write_text(
        "import json, sys, pathlib\n"
        f"pathlib.Path({str(seen)!r}).write_text(sys.argv[1] + '|' + sys.argv[2])\n"
        "good = pathlib.Path('out.txt').read_text().strip() == 'fixed'\n"
        "print(json.dumps({'pass': good, 'score': 1.0 if good else 0.3, "
        "'reasons': ['not fixed yet'], 'next_hint': 'write fixed'}))\n"
    )
    set_config(queue_repo, detect=False, verifier=[sys.executable, str(verifier), "{artifact}", "{step}"])
    run = [
        "sh",
        "-c",
        'case "$1" in *"write fixed"*) echo fixed > out.txt;; *) echo broken > out.txt;; esac; echo done',
        "sh",
        "{feedback}",
    ]
    add_step(queue_repo, "01-a", run=run)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_COMPLETE", report
    artifact, step = seen.read_text().split("|")
    assert step == "01-a" and artifact.endswith("implement.out")
    meta = runner_json(queue_repo, "show", "01-a")["meta"]
    assert meta["last_verdict"]["pass"] is True and meta["scores"] == [0.3, 1.0]


def test_orchestrate_runs_after_the_verifier_and_adds_a_step_through_the_cli(queue_repo, tmp_path):
    seen = tmp_path / "orchestrate-saw"
    add_next = [*RUNNER, "add", "Follow up", "--id", "02-next", "--run", "true", "--by", "orchestrate"]
    # Writes what it was given, then adds a step with the runner command line, from the worktree.
    orchestrate = [
        "sh",
        "-c",
        f'echo "$1|$2|$3" > {seen}; shift 3; exec "$@"',
        "sh",
        "{verdict}",
        "{current_task}",
        "{current_phase}",
        *add_next,
    ]
    verifier = ["sh", "-c", 'echo \'{"pass": true, "score": 0.8}\'']
    extra = roles_toml(orchestrate=orchestrate)
    set_config(queue_repo, detect=False, verifier=verifier, extra=extra)
    add_step(queue_repo, "01-a", run=["true"])
    report = tick(queue_repo, env={"PYTHONPATH": str(ROOT)})
    assert report["sentinel"] == "STEP_COMPLETE", report
    verdict, task, phase = seen.read_text().strip().split("|")
    assert json.loads(verdict)["score"] == 0.8 and task.startswith("01-a") and "steps done" in phase
    assert statuses(queue_repo)["02-next"] == "ready"


def test_notes_from_a_step_are_appended_to_the_plans_notes_in_its_record(queue_repo):
    add_step(
        queue_repo,
        "01-a",
        run=["sh", "-c", 'echo "the API needs a token" > "$1"; echo "my report"', "sh", "{notes_file}"],
    )
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    notes = git(queue_repo, "show", "runner/queue:plans/NOTES.md")
    assert "## From step 01-a (attempt 1)" in notes and "the API needs a token" in notes
    assert "Runner-Notes" in git(queue_repo, "log", "-1", "--format=%B", "runner/queue")
    assert "my report" in git(queue_repo, "show", "runner/queue:plans/handoffs/01-a.md")  # implement's output


def test_a_person_may_run_a_step_before_its_dependencies(queue_repo):
    add_step(queue_repo, "01-a", run=["true"])
    add_step(queue_repo, "02-b", run=["sh", "-c", "echo b > b.txt"], depends_on=["01-a"])
    assert runner(queue_repo, "claim", "02-b", "--id", "host-a", check=False).returncode == 3
    refused = runner(queue_repo, "claim", "02-b", "--id", "host-a", "--ignore-deps", check=False)
    assert refused.returncode == 2 and "--by" in refused.stderr
    claimed = runner_json(queue_repo, "claim", "02-b", "--id", "host-a", "--ignore-deps", "--by", "alice")
    assert claimed["status"] == "claimed"
    message = git(queue_repo, "log", "-1", "--format=%B", "runner/queue")
    assert "Runner-By: alice" in message and "Runner-Ignore-Deps: true" in message
    report = runner_json(queue_repo, "tick", "--id", "host-a", "--step", "02-b")
    assert report["sentinel"] == "STEP_COMPLETE" and report["step"] == "02-b"
    assert statuses(queue_repo) == {"01-a": "ready", "02-b": "done"}


def test_worker_pacing_and_the_default_timeout_come_from_runner_toml(queue_repo):
    text = git(queue_repo, "show", "runner/queue:runner.toml").replace(
        'default_timeout = "1h"', 'default_timeout = "1s"'
    )
    from support.repos import edit

    edit(queue_repo, {"runner.toml": text.encode()})
    add_step(queue_repo, "01-slow", run=["sleep", "30"], max_attempts=1)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_FAILED" and "timed out after 1s" in report["reason"]
    text = text.replace('default_timeout = "1s"', 'default_timeout = "none"').replace(
        'interval = "30s"', 'interval = "0.1s"'
    )
    edit(queue_repo, {"runner.toml": text.encode()})
    add_step(queue_repo, "02-quick", run=["true"])
    # --once with no --interval: the daemon polls at [worker] interval (0.1 s), so an idle drain ends at once.
    done = runner(queue_repo, "worker", "--id", "w2", "--once", timeout=60)
    assert done.returncode == 0 and statuses(queue_repo)["02-quick"] == "done"


def test_orient_runs_read_only_nothing_it_writes_reaches_the_change(queue_repo):
    orient = ["sh", "-c", "echo scribble > orient-was-here.txt; echo 'deviation: none'"]
    set_config(queue_repo, detect=False, extra=roles_toml(orient=orient))
    add_step(queue_repo, "01-a", run=["sh", "-c", "echo a > a.txt"])
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_COMPLETE" and report["files_changed"] == ["a.txt"]
    assert "orient-was-here.txt" not in git(queue_repo, "ls-tree", "--name-only", "runner/integration")


def test_a_formatter_is_detected_for_each_project_type_when_its_tool_is_present(tmp_path, monkeypatch):
    from runner.worker.gates import detect_project_gates

    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("ruff", "prettier", "gofmt", "cargo"):
        (tools / name).write_text("#!/bin/sh\nexit 0\n")
        (tools / name).chmod(0o755)
    projects = {"pyproject.toml": "ruff", "package.json": "prettier", "go.mod": "sh", "Cargo.toml": "cargo"}
    for marker, first in projects.items():
        project = tmp_path / marker.replace(".", "-")
        project.mkdir()
        (project / marker).write_text("{}" if marker == "package.json" else "")
        monkeypatch.setenv("PATH", str(tools))
        assert detect_project_gates(project)["format"][0] == first, marker
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        assert (
            "no formatter installed" in detect_project_gates(project)["format"]
            or "prettier" in detect_project_gates(project)["format"]
        ), marker


def test_a_claim_imported_from_another_tool_is_stale_at_once_when_older_than_the_lease(queue_repo, tmp_path):
    folder = tmp_path / "steps"
    folder.mkdir()
    (folder / "01-old.md").write_text(
        '---\ntitle: old\nstatus: in_progress\nassignee: bob\nclaimed_at: 2020-01-01T00:00:00Z\nrun: ["true"]\n---\n'
    )
    runner(queue_repo, "import", str(folder))
    show = runner_json(queue_repo, "show", "01-old")
    assert show["status"] == "claimed" and show["assignee"] == "bob"
    taken = runner_json(queue_repo, "claim", "--id", "host-a")
    assert taken["event"] == "takeover" and "another tool" in runner_json(queue_repo, "show", "01-old")["last_error"]
