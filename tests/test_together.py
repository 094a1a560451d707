"""Every feature at once (issue 30, point 1): the whole pipeline with every role on (orient,
implement, gates, verify, orchestrate, sweep, review, a person's approval), under the server
hook with `[hooks] identities` (people and worker keys), over a bare remote, on two workers,
with the stand-in agent in every role and every token runner hands a command.

The presets are not drained one by one here (each drain costs a minute of CPU): their tables
are checked as tables (tests/test_agents.py: every table, token and flag, the flags in the
real CLI's help; tests/test_usage.py: each reader on its CLI's recorded output); each of their
commands runs for real, under the hook, the sandbox and identities, in one drain of
tests/test_costs.py, where every role is run by another preset's CLI and every call's usage is
accounted for; and the Claude Code preset's own runner.toml (`runner init --agent claude`,
the sandbox on) drains under its budgets in tests/test_limits.py.

A local push hands the pusher's environment to the hook, so each process's RUNNER_PUSHER is
the name a git host would give its key (tests/test_identities.py does the same over sshd)."""

from __future__ import annotations

import json

from support.agentplan import as_pusher, drain, served_plan, statuses
from support.repos import git, queue_history


def test_the_whole_pipeline_runs_under_the_hook_with_identities_on_two_workers(tmp_path, stub_agents):
    bare, alice = served_plan(tmp_path, "fake")
    # orchestrate tries `runner add` from a worker's key
    said = drain(bare, tmp_path, {**stub_agents, "FAKE_AGENT_FOLLOW_UP": "1"})
    assert statuses(alice, tmp_path) == {"01-count": "done", "02-cli": "done", "03-tests": "review"}, said

    # Only a person approves: w1's key is refused by the hook, alice's is not.
    refused = as_pusher("key-a", "approve", "03-tests", "--by", "w1", "--repo", str(tmp_path / "w1"), cwd=tmp_path)
    assert refused.returncode != 0 and "person" in refused.stderr, refused.stderr
    approved = as_pusher("alice", "approve", "03-tests", "--by", "alice", "--repo", str(alice), cwd=tmp_path)
    assert approved.returncode == 0, approved.stderr
    assert statuses(alice, tmp_path) == {"01-count": "done", "02-cli": "done", "03-tests": "done"}

    history = [entry for entry in queue_history(bare) if "Event" in entry]
    events = [(entry["Event"], entry["Actor"]) for entry in history if "Step" in entry]
    assert not [e for e in events if e[0] in ("fail", "takeover", "release")], (events, said)
    assert {actor for kind, actor in events if kind == "complete"} <= {"w1", "w2"}
    assert ("approve", "alice") in events
    verdicts = [json.loads(entry["Metrics"])["last_verdict"] for entry in history if entry["Event"] == "complete"]
    assert verdicts and all(v["pass"] for v in verdicts)  # the verifier ran and passed on every record
    runs = [run["name"] for entry in history if entry["Event"] == "complete" for run in json.loads(entry["Runs"])]
    roles = {"orient", "implement", "verify", "sweep", "review", "orchestrate"}
    assert roles <= {name.split(":")[0] for name in runs}, runs
    merged = git(bare, "ls-tree", "-r", "--name-only", "runner/integration").split()
    assert {"tally/count.py", "tally/__main__.py", "tests/test_tally.py"} <= set(merged)
    for worker, text in said.items():
        assert "refused" not in text, (worker, text)
    # only people edit the plan: the step added nothing, and its handoff keeps the proposal for a person
    handoffs = git(bare, "ls-tree", "-r", "--name-only", "runner/queue", "plans/handoffs").split()
    kept = git(bare, "show", f"runner/queue:{next(h for h in handoffs if h.endswith('01-count.md'))}")
    assert "proposed: runner add Follow up 01-count" in kept and "only people edit the plan" in kept, kept
