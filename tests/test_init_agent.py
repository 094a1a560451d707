"""`runner init --agent NAME` (issue 18): the role prompts on the queue branch, the agent's
commands in runner.toml, and on a queue that exists, a commit that changes only those tables."""

from __future__ import annotations

import tomllib

from conftest import add_step, git, make_repo, runner, set_config, tick


def test_init_with_an_agent_writes_its_commands_and_every_role_prompt(tmp_path):
    repo = make_repo(tmp_path / "repo")
    runner(repo, "init", "--agent", "claude")
    config = tomllib.loads(git(repo, "show", "runner/queue:runner.toml"))
    assert config["harness"]["command"][0] == "claude"
    assert {"orient", "verify", "review", "sweep", "orchestrate"} <= set(config["roles"])
    prompts = git(repo, "ls-tree", "--name-only", "runner/queue:plans/prompts/").split()
    assert prompts == [f"{role}.md" for role in sorted(["implement", "orchestrate", "orient", "resolve", "review", "sweep", "verify"])]
    assert git(repo, "show", "runner/queue:plans/prompts/review.md").startswith("# Role: review")


def test_init_with_an_agent_on_a_queue_that_exists_changes_only_its_tables(queue_repo):
    before = git(queue_repo, "show", "runner/queue:runner.toml")
    runner(queue_repo, "init", "--agent", "codex")
    after = git(queue_repo, "show", "runner/queue:runner.toml")
    assert git(queue_repo, "log", "-1", "--format=%s", "runner/queue") == "set the agent commands to codex (runner init --agent codex)"
    assert git(queue_repo, "diff", "--name-only", "runner/queue~1", "runner/queue") == "runner.toml"
    kept = lambda text: [line for line in text.splitlines() if line.startswith(("[queue]", "[leases]", "lease", "detect", "max_attempts"))]
    assert kept(before) == kept(after)
    assert tomllib.loads(after)["harness"]["command"][0] == "codex"


def test_an_unknown_agent_is_refused_with_the_names_that_exist(queue_repo):
    refused = runner(queue_repo, "init", "--agent", "gpt-9", check=False)
    assert refused.returncode == 2 and "claude" in refused.stderr and "aider" in refused.stderr


def test_the_prompt_file_a_role_gets_starts_with_its_prompt_tokens_filled(tmp_path):
    repo = make_repo(tmp_path / "repo")
    runner(repo, "init")
    set_config(repo, detect=False)
    seen = tmp_path / "prompt-seen"
    add_step(repo, "01-a", "Do the thing", run=["sh", "-c", f'cp "$1" {seen}', "sh", "{prompt_file}"], body="The step's own words.\n")
    assert tick(repo)["sentinel"] == "STEP_COMPLETE"
    prompt = seen.read_text()
    assert prompt.startswith("# Role: implement") and "`01-a`" in prompt and "{step}" not in prompt.split("The step's own words.")[0]
    assert prompt.index("# Plan") < prompt.index("The step's own words.")  # the role's prompt, root.md, NOTES.md, the step
