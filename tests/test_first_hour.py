"""The first hour without surprises (issue 46, point 4): what a newcomer met, each repeated
against the real command line, real workers and, where it matters, the server hook."""

from __future__ import annotations

import json

from conftest import SERVED_WORKERS, as_pusher, drain, git, memory_queue, runner, served, served_statuses
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

    queue = memory_queue(tmp_path, {"01-db": {}, "02-api": {"depends_on": ["01-db"], "tags": ["linux"]},
                                    "03-docs": {"agent": "self", "run": None}})

    def refusal(*args, **kwargs) -> str:
        with pytest.raises(Skip) as refused:
            queue.claim(*args, **kwargs)
        return str(refused.value)

    assert refusal("w1", "w1.1", {}, ["linux"], step_id="02-api") == \
        "02-api waits for 01-db (a person may run it anyway: --ignore-deps --by NAME)"
    assert refusal("w1", "w1.1", {}, [], step_id="02-api", ignore_deps=True, by="alice").startswith(
        "02-api needs tag linux (this claimer has none")
    both = refusal("w1", "w1.1", {}, [], step_id="02-api")
    assert "needs tag linux" in both and "waits for 01-db" in both
    assert refusal("w1", "w1.1", {}, [], step_id="03-docs").startswith("03-docs is for an agent you run yourself")
    assert queue.claim("w1", "w1.1", {}).change.event.step == "01-db"  # the worker's best: never 03-docs
    assert "1 for an agent you run yourself" in refusal("w2", "w2.1", {})
    assert queue.claim("agent-1", "agent-1.1", {}, by_agent=True).change.event.step == "03-docs"
