"""Each bug found by trying runner as a new user would (issue 12), and the bad input that
bricked or stalled it (issue 19, items 7-10 and 15), repeated against the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.repos import ROOT, add_step, edit, git, runner, runner_json, set_config, tick

# --- issue 12: one schema, refused before any worker sees it ---------------------------------


def test_a_bad_config_value_is_refused_by_validate_and_never_committed(queue_repo):
    text = git(queue_repo, "show", "runner/queue:runner.toml").replace(
        "max_fix_attempts = 2", 'max_fix_attempts = "two"'
    )
    from runner.core.errors import BadInput

    with pytest.raises(BadInput) as refused:
        edit(queue_repo, {"runner.toml": text.encode()}, "a typo")
    assert "max_fix_attempts: must be a whole number" in str(refused.value)
    # Pushed anyway (with plain git): validate and doctor say so, a tick claims nothing.
    tree = git(queue_repo, "rev-parse", "runner/queue^{tree}")
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=queue_repo, input=text, capture_output=True, text=True
    ).stdout.strip()
    index = queue_repo / ".git" / "tmp-index"
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    subprocess.run(["git", "read-tree", tree], cwd=queue_repo, env=env, check=True)
    subprocess.run(
        ["git", "update-index", "--cacheinfo", f"100644,{blob},runner.toml"], cwd=queue_repo, env=env, check=True
    )
    new_tree = subprocess.run(
        ["git", "write-tree"], cwd=queue_repo, env=env, capture_output=True, text=True
    ).stdout.strip()
    commit = git(queue_repo, "commit-tree", new_tree, "-p", "runner/queue", "-m", "typo by hand")
    git(queue_repo, "update-ref", "refs/heads/runner/queue", commit)
    add_step_result = runner(queue_repo, "validate", check=False)
    assert add_step_result.returncode == 2 and "max_fix_attempts: must be a whole number" in add_step_result.stderr
    assert "Traceback" not in add_step_result.stderr
    doctor = json.loads(runner(queue_repo, "doctor", "--json", check=False).stdout)
    assert {c["name"]: c["result"] for c in doctor["checks"]}["config"] == "fail"


def test_validate_path_checks_a_folder_on_disk(queue_repo, tmp_path):
    steps = tmp_path / "steps"
    steps.mkdir()
    (steps / "01-a.md").write_text("---\ntitle: a\nrun: [make]\n---\n")
    assert runner(queue_repo, "validate", "--path", str(steps)).stdout.strip() == "plan is sound"
    (steps / "02-b.md").write_text("---\ndepends_on: [ghost]\n---\n")
    bad = runner(queue_repo, "validate", "--path", str(steps), check=False)
    assert bad.returncode == 2 and "unknown dependency: ghost" in bad.stderr and "Traceback" not in bad.stderr


def test_a_step_runner_cannot_read_is_invalid_and_status_still_answers(queue_repo):
    edit(
        queue_repo,
        {
            "plans/steps/01-a.md": b"---\ntitle: a\nrun: [make]\nnot_before: soon\n---\n",
            "plans/steps/02-b.md": b"---\ntitle: b\nrun: [make]\nattempt: -1\n---\n",
            "plans/steps/03-c.md": b'---\n{step: 03-c, priority: 100, run: ["true"]}\n---\n',
        },
    )
    rows = {s["step"]: s for s in runner_json(queue_repo, "status")["steps"]}
    assert rows["01-a"]["status"] == rows["02-b"]["status"] == rows["03-c"]["status"] == "invalid"
    assert "not_before must be a time" in rows["01-a"]["problems"][0]
    assert "attempt must be a whole number, 0 or more" in rows["02-b"]["problems"][0]
    assert "line by line" in rows["03-c"]["problems"][0]
    assert runner(queue_repo, "claim", "--id", "w", check=False).returncode == 3  # none of them is ever claimed


def test_a_parse_cache_written_under_other_rules_is_not_trusted(queue_repo):
    edit(queue_repo, {"plans/steps/01-a.md": b"---\ntitle: a\nrun: [make]\nrequired_outputs: [/etc/passwd]\n---\n"})
    assert runner_json(queue_repo, "status")["steps"][0]["status"] == "invalid"
    cache = queue_repo / ".git" / "runner" / "parsed-steps.jsonl"
    # A cache whose rules said the file was sound (as an older runner's would) ...
    blob = git(queue_repo, "rev-parse", "runner/queue:plans/steps/01-a.md")
    step = ["plans/steps/01-a.md", blob, "01-a", {"title": "a", "run": ["make"]}, None, []]
    cache.write_text(json.dumps({"rules": "an-older-runner"}) + "\n" + json.dumps(step) + "\n")
    assert runner_json(queue_repo, "status")["steps"][0]["status"] == "invalid"  # ... is rebuilt, not believed
    cache.write_text("{not json")  # a tampered or half-written cache is rebuilt too
    assert runner_json(queue_repo, "status")["steps"][0]["status"] == "invalid"


def test_a_step_with_a_yaml_date_does_not_keep_the_others_out_of_the_parse_cache(queue_repo):
    steps = {f"plans/steps/s{n:02d}.md": f'---\ntitle: s{n}\nrun: ["true"]\n---\n'.encode() for n in range(30)}
    steps["plans/steps/s00.md"] = b'---\ntitle: s0\nrun: ["true"]\ndue: 2026-12-01\n---\n'
    steps["plans/steps/s01.md"] = (
        b'---\ntitle: s1\nrun: ["true"]\nrequired_outputs: [/etc/passwd]\nsince: 2026-12-01\n---\n'  # invalid
    )
    edit(queue_repo, steps)
    assert runner_json(queue_repo, "status")["steps"][1]["status"] == "invalid"
    lines = (queue_repo / ".git" / "runner" / "parsed-steps.jsonl").read_text().splitlines()
    cached = {json.loads(line)[2] for line in lines[1:]}
    assert len(cached) == 29 and "s00" in cached and "s01" not in cached  # the invalid one's date has no JSON


def test_add_with_a_run_list_that_is_not_json_is_one_line_with_the_fix(queue_repo):
    bad = runner(queue_repo, "add", "DB", "--id", "01-db", "--run", "[make, db]", check=False)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.count("\n") == 1 and "double quotes" in bad.stderr


def test_a_step_with_nothing_to_run_is_refused_by_add_import_and_validate(queue_repo, tmp_path):
    added = runner(queue_repo, "add", "DB", "--id", "01-db", check=False)
    assert added.returncode == 2 and "no `run:` argv and runner.toml has no [harness] command" in added.stderr
    folder = tmp_path / "steps"
    folder.mkdir()
    (folder / "01-db.md").write_text("---\ntitle: DB\n---\n")
    imported = runner(queue_repo, "import", str(folder), check=False)
    assert imported.returncode == 2 and "[harness] command" in imported.stderr
    set_config(queue_repo, detect=False, harness=["my-agent", "{prompt_file}"])
    runner(queue_repo, "add", "DB", "--id", "01-db")  # the harness runs it now
    assert runner(queue_repo, "validate").returncode == 0


def test_import_refuses_a_step_whose_id_differs_from_its_file_name(queue_repo, tmp_path):
    folder = tmp_path / "steps"
    folder.mkdir()
    (folder / "01-db.md").write_text("---\nstep: 01-database\ntitle: DB\nrun: [make]\n---\n")
    refused = runner(queue_repo, "import", str(folder), check=False)
    assert refused.returncode == 2 and "step id '01-database' does not match the file name '01-db'" in refused.stderr


def test_a_merged_step_branch_is_deleted_by_default_and_kept_when_asked(queue_repo):
    add_step(queue_repo, "01-a", run=["sh", "-c", "echo a > a.txt"])
    add_step(queue_repo, "02-b", run=["false"], max_attempts=1)
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    assert git(queue_repo, "rev-parse", "--verify", "-q", "runner/steps/01-a", check=False) == ""
    assert git(queue_repo, "show", "runner/integration:a.txt") == "a"  # the merge keeps the record
    tick(queue_repo)
    assert git(
        queue_repo, "rev-parse", "--verify", "-q", "runner/steps/02-b", check=False
    )  # a failed step's branch stays
    text = git(queue_repo, "show", "runner/queue:runner.toml").replace(
        "prune_merged_step_branches = true", "prune_merged_step_branches = false"
    )
    edit(queue_repo, {"runner.toml": text.encode()}, "keep merged step branches")
    add_step(queue_repo, "03-c", run=["sh", "-c", "echo c > c.txt"])
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    assert git(queue_repo, "rev-parse", "--verify", "-q", "runner/steps/03-c", check=False)


def test_install_hooks_on_a_server_repository_owned_by_another_user(tmp_path):
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    if os.geteuid() != 0:
        pytest.skip("needs root to give the repository to another user")
    subprocess.run(["chown", "-R", "nobody", str(bare)], check=True)
    done = subprocess.run(
        [sys.executable, "-m", "runner", "install-hooks", "--server", str(bare)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert (bare / "hooks" / "pre-receive").exists()


# --- issue 19: bad input that bricks or stalls -------------------------------------------------


def test_a_name_with_a_line_break_never_reaches_a_commit(queue_repo):
    forged = runner(queue_repo, "halt", "--reason", "x", "--by", "ops\nRunner-Event: complete", check=False)
    assert forged.returncode == 2 and "line breaks" in forged.stderr
    assert runner(queue_repo, "claim", "--id", "w\n1", check=False).returncode == 2
    # A title with a line break is refused, as a name is (issue 30: control characters in titles).
    before = git(queue_repo, "rev-parse", "runner/queue")
    titled = runner(queue_repo, "add", "Title\nRunner-Event: complete", "--id", "01-a", "--run", "true", check=False)
    assert titled.returncode == 2 and "control characters" in titled.stderr
    assert git(queue_repo, "rev-parse", "runner/queue") == before


@pytest.mark.parametrize("bad", [".", "..", "a.", "b.lock", "-rf", "a..b"])
def test_ids_that_are_not_safe_ref_names_are_refused(queue_repo, bad):
    assert runner(queue_repo, "tick", "--id", bad, check=False).returncode == 2
    assert runner(queue_repo, "add", "x", "--id", bad.lower(), "--run", "true", check=False).returncode == 2
    assert (
        runner(queue_repo, "install-schedule", "--id", bad, "--os", "systemd", "--dry-run", check=False).returncode == 2
    )


def test_import_reads_regular_files_inside_the_folder_only(queue_repo, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("password\n")
    folder = tmp_path / "plan"
    (folder / "steps").mkdir(parents=True)
    (folder / "steps" / "01-a.md").write_text("---\ntitle: a\nrun: [make]\n---\n")
    (folder / "root.md").symlink_to(secret)
    refused = runner(queue_repo, "import", str(folder), check=False)
    assert refused.returncode == 2 and "symlink" in refused.stderr
    (folder / "root.md").unlink()
    os.mkfifo(folder / "steps" / "02-b.md")  # a FIFO would block a reader for ever
    refused = runner(queue_repo, "import", str(folder), check=False, timeout=30)
    assert refused.returncode == 2 and "not a regular file" in refused.stderr
    assert "password" not in git(queue_repo, "log", "-p", "runner/queue")


def test_tampered_local_state_is_rebuilt_not_a_traceback(queue_repo):
    add_step(queue_repo, "01-a", run=["true"])
    state = queue_repo / ".git" / "runner"
    runner(queue_repo, "claim", "--id", "w1")
    (state / "observed.json").write_text('{"boot": 1, "seen": [')
    (state / "parsed-steps.jsonl").write_text('{"rules": 3}\n["x", 1]\n')
    out = runner(queue_repo, "claim", "--id", "w2", check=False)
    assert out.returncode == 3 and "Traceback" not in out.stderr
    assert runner_json(queue_repo, "status")["steps"][0]["status"] == "claimed"


def test_an_unexpected_error_is_one_line_and_a_log(queue_repo, tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "RUNNER_FAIL_AT": "before-record"}
    add_step(queue_repo, "01-a", run=["true"])
    proc = runner(queue_repo, "tick", "--id", "w1", check=False, env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
