"""`runner init --agent NAME` (issue 18): the role prompts on the queue branch, the agent's
commands in runner.toml, and on a queue that exists, a commit that changes only those tables."""

from __future__ import annotations

import tomllib

from support.repos import (
    add_step,
    edit,
    git,
    handoff,
    make_repo,
    queue_history,
    runner,
    runner_json,
    set_config,
    statuses,
    tick,
)


def test_init_with_an_agent_writes_its_commands_and_every_role_prompt(tmp_path):
    repo = make_repo(tmp_path / "repo")
    runner(repo, "init", "--agent", "claude")
    config = tomllib.loads(git(repo, "show", "runner/queue:runner.toml"))
    assert config["harness"]["command"][0] == "claude"
    assert {"orient", "verify", "review", "sweep", "orchestrate"} <= set(config["roles"])
    prompts = git(repo, "ls-tree", "--name-only", "runner/queue:plans/prompts/").split()
    assert prompts == [
        f"{role}.md"
        for role in sorted(["implement", "orchestrate", "orient", "qa", "resolve", "review", "sweep", "verify"])
    ]
    assert git(repo, "show", "runner/queue:plans/prompts/review.md").startswith("# Role: review")


def test_init_with_an_agent_on_a_queue_that_exists_changes_only_its_tables(queue_repo):
    before = git(queue_repo, "show", "runner/queue:runner.toml")
    runner(queue_repo, "init", "--agent", "codex")
    after = git(queue_repo, "show", "runner/queue:runner.toml")
    assert (
        git(queue_repo, "log", "-1", "--format=%s", "runner/queue")
        == "set the agent commands to codex and turn plan-wide approval on (runner init --agent codex)"
    )
    assert git(queue_repo, "diff", "--name-only", "runner/queue~1", "runner/queue") == "runner.toml"
    kept = lambda text: [
        line
        for line in text.splitlines()
        if line.startswith(("[queue]", "[leases]", "lease", "detect", "max_attempts"))
    ]
    assert kept(before) == kept(after)
    assert tomllib.loads(after)["harness"]["command"][0] == "codex"
    assert (
        tomllib.loads(before)["queue"]["requires_approval"] is False
        and tomllib.loads(after)["queue"]["requires_approval"] is True
    )
    assert [line for line in after.splitlines() if line.startswith("requires_approval")] == [
        line.replace("= false", "= true") for line in before.splitlines() if line.startswith("requires_approval")
    ]  # its comment kept


def test_an_unknown_agent_is_refused_with_the_names_that_exist(queue_repo):
    refused = runner(queue_repo, "init", "--agent", "gpt-9", check=False)
    assert refused.returncode == 2 and "claude" in refused.stderr and "aider" in refused.stderr


def test_the_prompt_file_a_role_gets_starts_with_its_prompt_tokens_filled(tmp_path):
    repo = make_repo(tmp_path / "repo")
    runner(repo, "init")
    set_config(repo, detect=False)
    seen = tmp_path / "prompt-seen"
    add_step(
        repo,
        "01-a",
        "Do the thing",
        run=["sh", "-c", f'cp "$1" {seen}', "sh", "{prompt_file}"],
        body="The step's own words.\n",
    )
    assert tick(repo)["sentinel"] == "STEP_COMPLETE"
    prompt = seen.read_text()
    assert (
        prompt.startswith("# Role: implement")
        and "`01-a`" in prompt
        and "{step}" not in prompt.split("The step's own words.")[0]
    )
    assert prompt.index("# Plan") < prompt.index(
        "The step's own words."
    )  # the role's prompt, root.md, NOTES.md, the step


# --- issue 36, point 1: an agent's result waits for a person unless the plan says otherwise -----


def test_init_with_an_agent_turns_plan_wide_approval_on_and_says_so_and_plain_init_does_not(tmp_path):
    plain = make_repo(tmp_path / "plain")
    said = runner(plain, "init").stdout
    assert (
        "approval" not in said
        and tomllib.loads(git(plain, "show", "runner/queue:runner.toml"))["queue"]["requires_approval"] is False
    )
    agent = make_repo(tmp_path / "agent")
    said = runner(agent, "init", "--agent", "claude").stdout
    assert "plan-wide approval is on ([queue] requires_approval = true)" in said and "runner approve" in said
    assert tomllib.loads(git(agent, "show", "runner/queue:runner.toml"))["queue"]["requires_approval"] is True
    assert runner_json(agent, "status")["warnings"] == []


def test_a_worker_holds_an_agent_plans_result_for_a_person_until_approved(tmp_path):
    repo = make_repo(tmp_path / "repo")
    runner(repo, "init", "--agent", "none")
    edit(
        repo,
        {
            "runner.toml": git(repo, "show", "runner/queue:runner.toml")
            .replace("detect = true", "detect = false")
            .encode()
            + b"\n"
        },
    )
    add_step(repo, "01-a", run=["sh", "-c", "echo made > made.txt"])
    report = tick(repo)
    assert report["sentinel"] == "STEP_BLOCKED" and statuses(repo) == {"01-a": "review"}
    assert git(repo, "ls-tree", "--name-only", "runner/integration") == "README.md"  # nothing merged without a person
    assert "sentinel: STEP_BLOCKED" in handoff(repo, "01-a") and "outcome: review" in handoff(repo, "01-a")
    assert queue_history(repo)[-1]["Status"] == "review"
    runner(repo, "approve", "01-a", "--by", "alice")
    assert statuses(repo) == {"01-a": "done"} and "made.txt" in git(
        repo, "ls-tree", "--name-only", "runner/integration"
    )


def test_status_and_validate_say_when_a_plan_runs_agents_without_approval(queue_repo):
    assert runner_json(queue_repo, "status")["warnings"] == []
    set_config(
        queue_repo,
        detect=False,
        harness=["my-agent", "{prompt_file}"],
        extra='\n[roles.review]\ncommand = ["my-reviewer"]\n',
    )
    warning = (
        "agents run without approval: runner.toml sets [harness], [roles.review] "
        "but [queue] requires_approval = false, so their results are merged with no person "
        "(set it to true, or requires_approval: true in each step)"
    )
    for _ in range(2):  # the second answer comes from the plan index a local queue keeps (runner.commands.quick)
        assert runner_json(queue_repo, "status")["warnings"] == [warning]
        assert f"warning: {warning}" in runner(queue_repo, "status").stdout.splitlines()
    assert runner_json(queue_repo, "validate")["warnings"] == [warning]
    set_config(queue_repo, detect=False, harness=["my-agent", "{prompt_file}"], requires_approval=True)
    assert runner_json(queue_repo, "status")["warnings"] == [] and "warning" not in runner(queue_repo, "status").stdout
