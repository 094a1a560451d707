"""The first hour without surprises (issue 46, point 4): what a newcomer met, each repeated
against the real command line, real workers and, where it matters, the server hook."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys

from support.memory import memory_queue
from support.repos import ENV_PATH, add_step, git, runner, start_worker, tick, wait_for
from support.served import SERVED_WORKERS, as_pusher, drain, served, served_statuses

from runner.core.config import DEFAULT_TOML

# --- a step for an agent you run yourself, on a plain queue ---------------------------------------


def test_a_self_serve_step_is_added_to_a_plain_queue_and_taken_only_by_an_agent_you_run(tmp_path):
    """`agent: self` on a queue with no [harness] command: add, validate and the hook accept it;
    workers leave it, saying why (as `runner ready` and `runner claim` do); `runner work` takes it."""
    toml = DEFAULT_TOML.replace("detect = true", "detect = false").encode()
    bare, alice = served(tmp_path, toml, {"01-build": {}})
    added = as_pusher("alice", "add", "Write the docs", "--id", "02-docs", "--agent", "self", repo=alice)
    assert "added 02-docs" in added.stdout
    assert as_pusher("alice", "validate", repo=alice).stdout.strip() == "plan is sound"
    said = drain(bare, tmp_path)
    assert served_statuses(alice) == {"01-build": "done", "02-docs": "ready"}  # no worker ran it
    assert json.loads(as_pusher("alice", "show", "02-docs", "--json", repo=alice).stdout)["attempt"] == 0
    assert any("for an agent you run yourself (agent: self)" in text for text in said.values()), said

    ready = json.loads(as_pusher("alice", "ready", "--json", repo=alice).stdout)
    assert ready["steps"] == [] and ready["held_back"][0]["step"] == "02-docs"
    assert "for an agent you run yourself" in ready["held_back"][0]["held_back"]
    refused = runner(tmp_path / "w1", "claim", "02-docs", "--id", "w1", check=False, env={"RUNNER_PUSHER": "key-1"})
    assert refused.returncode == 3 and "02-docs is for an agent you run yourself" in refused.stderr

    worked = runner(tmp_path / "w1", "work", "--id", "w1", "--json", env={"RUNNER_PUSHER": SERVED_WORKERS["w1"]})
    claimed = json.loads(worked.stdout)
    assert claimed["step"] == "02-docs"
    (tmp_path / "w1" / ".runner" / "02-docs-a1" / "docs.md").parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "w1" / ".runner" / "02-docs-a1" / "docs.md").write_text("# Docs\n")
    runner(tmp_path / "w1", "submit", "02-docs", "--id", "w1", env={"RUNNER_PUSHER": SERVED_WORKERS["w1"]})
    assert served_statuses(alice)["02-docs"] == "done"
    assert git(bare, "show", "runner/integration:docs.md") == "# Docs"


def test_a_step_with_nothing_to_run_and_no_agent_self_is_still_refused_with_the_three_ways_out(queue_repo):
    added = runner(queue_repo, "add", "Docs", "--id", "01-docs", check=False)
    assert added.returncode == 2 and "--agent self" in added.stderr and "--run" in added.stderr
    both = runner(queue_repo, "add", "Docs", "--id", "01-docs", "--agent", "self", "--run", "make docs", check=False)
    assert both.returncode == 2 and "agent: self and run: together" in both.stderr


def test_the_claim_choice_names_every_real_reason_and_leaves_self_serve_steps_to_agents(tmp_path):
    """The rule, on the in-memory store: one choice (runner.queue.claims) for worker, CLI and agent."""
    import pytest

    from runner.queue.change import Skip

    queue = memory_queue(
        tmp_path,
        {
            "01-db": {},
            "02-api": {"depends_on": ["01-db"], "tags": ["linux"]},
            "03-docs": {"agent": "self", "run": None},
        },
    )

    def refusal(*args, **kwargs) -> str:
        with pytest.raises(Skip) as refused:
            queue.claim(*args, **kwargs)
        return str(refused.value)

    assert (
        refusal("w1", "w1.1", {}, ["linux"], step_id="02-api")
        == "02-api waits for 01-db (a person may run it anyway: --ignore-deps --by NAME)"
    )
    assert refusal("w1", "w1.1", {}, [], step_id="02-api", ignore_deps=True, by="alice").startswith(
        "02-api needs tag linux (this claimer has none"
    )
    both = refusal("w1", "w1.1", {}, [], step_id="02-api")
    assert "needs tag linux" in both and "waits for 01-db" in both
    assert refusal("w1", "w1.1", {}, [], step_id="03-docs").startswith("03-docs is for an agent you run yourself")
    assert queue.claim("w1", "w1.1", {}).change.event.step == "01-db"  # the worker's best: never 03-docs
    assert "1 for an agent you run yourself" in refusal("w2", "w2.1", {})
    assert queue.claim("agent-1", "agent-1.1", {}, by_agent=True).change.event.step == "03-docs"


# --- runner config get|set ----------------------------------------------------------------------------


def test_config_set_rewrites_one_line_as_a_persons_edit_checked_by_the_schema_under_the_hook(tmp_path):
    toml = DEFAULT_TOML.replace("detect = true", "detect = false").encode()
    bare, alice = served(tmp_path, toml, {"01-a": {"brakes": {"max_fix_attempts": 0}, "requires_approval": True}})
    before = git(bare, "show", "runner/queue:runner.toml")

    def get(*args: str) -> str:
        return as_pusher("alice", "config", "get", *args, repo=alice).stdout.rstrip("\n")

    assert get("leases.lease", "--show-origin") == "runner.toml\t1h"
    assert get("roles.review.min_files", "--show-origin") == "default\t5"
    set_ = as_pusher("alice", "config", "set", "leases.lease", "2h", "--by", "alice", repo=alice)
    assert set_.stdout.startswith('runner.toml: leases.lease = "2h"  [')
    after = git(bare, "show", "runner/queue:runner.toml")
    changed = [(old, new) for old, new in zip(before.splitlines(), after.splitlines()) if old != new]
    assert changed == [
        (
            'lease = "1h"  # a claim whose heartbeat has not moved for this long may be taken over',
            'lease = "2h"  # a claim whose heartbeat has not moved for this long may be taken over',
        )
    ]
    assert len(after.splitlines()) == len(before.splitlines())
    trailers = git(bare, "log", "-1", "--format=%B", "runner/queue")
    assert "Runner-Event: edit" in trailers and "Runner-Actor: alice" in trailers
    assert get("leases.lease", "--show-origin") == "runner.toml\t2h"

    # A step's own value counts for that step, and says so.
    assert get("brakes.max_fix_attempts", "--step", "01-a", "--show-origin") == "step 01-a\t0"
    assert get("brakes.max_fix_attempts", "--show-origin") == "runner.toml\t2"
    assert get("queue.requires_approval", "--step", "01-a") == "true"
    as_json = json.loads(as_pusher("alice", "config", "get", "roles.review.min_files", "--json", repo=alice).stdout)
    assert as_json == {"key": "roles.review.min_files", "value": 5, "origin": "default", "step": None}

    # Refused before anything is pushed: a bad value (by the one schema), an unknown key, a worker's key.
    tip = git(bare, "rev-parse", "runner/queue")
    bad = runner(alice, "config", "set", "leases.lease", "soon", check=False, env={"RUNNER_PUSHER": "alice"})
    assert bad.returncode == 2 and "[leases].lease: not a duration: 'soon'" in bad.stderr
    unknown = runner(alice, "config", "get", "lease", check=False, env={"RUNNER_PUSHER": "alice"})
    assert unknown.returncode == 2 and "did you mean leases.lease?" in unknown.stderr
    git(tmp_path, "clone", "-q", str(bare), str(tmp_path / "w1"))
    worker = runner(
        tmp_path / "w1", "config", "set", "leases.lease", "5m", check=False, env={"RUNNER_PUSHER": SERVED_WORKERS["w1"]}
    )
    assert worker.returncode != 0 and "refused" in worker.stderr
    assert git(bare, "rev-parse", "runner/queue") == tip
    set_role = as_pusher("alice", "config", "set", "roles.review.command", '["claude", "-p"]', repo=alice)
    assert "roles.review.command" in set_role.stdout
    assert git(bare, "show", "runner/queue:runner.toml").endswith('[roles.review]\ncommand = ["claude", "-p"]')


# --- small things a newcomer met --------------------------------------------------------------------


def test_commits_runner_makes_carry_the_configured_user_email(queue_repo):
    """By a person (an edit, with git's commands alone: `runner claim`'s store) and by a worker (pygit2's)."""
    git(queue_repo, "config", "user.email", "alice@example.org")
    add_step(queue_repo, "01-a")
    runner(queue_repo, "add", "B", "--id", "02-b", "--run", "true")  # a person's edit
    runner(queue_repo, "claim", "01-a", "--id", "w1")  # the one-shot store: git's own commands
    tick(queue_repo, "w2")  # a worker: pygit2's store, the record and its merge
    emails = set(git(queue_repo, "log", "--format=%ae", "-4", "runner/queue").splitlines())
    emails |= set(git(queue_repo, "log", "--format=%ae", "-1", "runner/integration").splitlines())
    assert emails == {"alice@example.org"}, emails


def test_a_person_is_named_by_the_user_name_of_the_repository_acted_on_not_of_the_current_folder(queue_repo, tmp_path):
    """`runner halt --repo CLONE` from another folder records CLONE's git user.name as the person."""
    git(queue_repo, "config", "user.name", "carol")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    git(elsewhere, "init", "-q")
    git(elsewhere, "config", "user.name", "mallory")
    subprocess.run(
        [sys.executable, "-m", "runner", "halt", "--reason", "lunch", "--repo", str(queue_repo)],
        cwd=elsewhere,
        env=ENV_PATH,
        check=True,
        capture_output=True,
    )
    assert git(queue_repo, "log", "-1", "--format=%an", "runner/queue") == "carol"


def test_ctrl_c_on_a_busy_worker_says_it_finishes_the_step_and_a_second_stops_it(queue_repo, tmp_path):
    started, release = tmp_path / "started", tmp_path / "release"
    add_step(queue_repo, "01-long", run=["sh", "-c", f"touch {started}; while [ ! -e {release} ]; do sleep 0.05; done"])
    worker = start_worker(queue_repo, "host-a", "--grace", "600")
    try:
        wait_for(lambda: started.exists())
        worker.send_signal(signal.SIGINT)
        said = worker.stderr.readline()
        assert said.startswith("runner: finishing 01-long (attempt 1) before it stops (up to 600s"), said
        assert "Ctrl-C again stops it now" in said
        worker.send_signal(signal.SIGINT)
        said = worker.stderr.readline()
        assert said == "runner: stopping 01-long (attempt 1) now: it is given back to the queue, nothing spent\n", said
        assert worker.wait(timeout=120) == 0
    finally:
        release.write_text("go")
        if worker.poll() is None:
            worker.kill()
        worker.communicate()
    shown = json.loads(runner(queue_repo, "show", "01-long", "--json").stdout)
    assert shown["status"] == "ready" and shown["failures"] in (None, 0)  # given back, nothing spent


def test_init_with_an_agent_ends_with_a_hint_for_agent_steps_that_runs_as_written(repo):
    said = runner(repo, "init", "--agent", "claude").stdout.rstrip().splitlines()[-1]
    assert said.startswith("next: ") and "no --run" in said and "runner work --id NAME" in said
    hinted = re.search(r"`(runner add [^`]*)`", said).group(1)
    assert "--run" not in hinted
    runner(repo, *shlex.split(hinted)[1:])  # an agent step: [harness] command runs it
    assert json.loads(runner(repo, "ready", "--json").stdout)["steps"][0]["step"] == "01-first"


def test_a_yaml_error_names_the_files_own_line_numbers(queue_repo, tmp_path):
    """The frontmatter starts on line 2 of the file: its errors say the file's lines, as an editor shows them."""
    steps = tmp_path / "steps"
    steps.mkdir()
    (steps / "01-a.md").write_text("---\ntitle: a\nrun: [make\npriority: 1\n---\n")  # `run: [make` is line 3
    bad = runner(queue_repo, "validate", "--path", str(steps), check=False)
    assert bad.returncode == 2 and "(line 3, column 6)" in bad.stderr and "unicode string" not in bad.stderr, bad.stderr
    (steps / "01-a.md").write_text("---\ntitle: a\nrun: [make]\ntags: x: y\n---\n")  # line 4, column 8
    bad = runner(queue_repo, "validate", "--path", str(steps), check=False)
    assert "mapping values are not allowed in this context (line 4, column 8)" in bad.stderr, bad.stderr


def test_every_commands_summary_in_help_is_a_whole_sentence():
    """`runner --help` lists each command by the first paragraph of its help, whole: click cuts
    one longer than the room left on an 80-column line with "...", mid-sentence."""
    proc = subprocess.run(
        [sys.executable, "-m", "runner", "--help"],
        capture_output=True,
        text=True,
        env={**ENV_PATH, "COLUMNS": "80"},
        check=True,
    )
    listed = proc.stdout.split("Commands:\n", 1)[1].splitlines()
    from runner.cli import COMMANDS

    visible = [name for name, _, hidden, _ in COMMANDS if not hidden]
    assert len(listed) == len(visible)
    for line in listed:
        _name, summary = line.split(maxsplit=1)
        assert summary.endswith(".") and not summary.endswith("..."), line
        assert summary[0].isupper(), line
