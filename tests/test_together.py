"""Every feature at once (issue 30, point 1): the whole pipeline with every role on (orient,
implement, gates, verify, orchestrate, sweep, review, a person's approval), under the server
hook with `[hooks] identities` (people and worker keys), over a bare remote, on two workers;
once with the stand-in agent in every role and every token, and once with each agent
preset's own runner.toml (`runner init --agent NAME`) driving a stub of that agent's CLI.

A local push hands the pusher's environment to the hook, so each process's RUNNER_PUSHER is
the name a git host would give its key (tests/test_identities.py does the same over sshd)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import ROOT, git, make_repo, queue_history
from hooked import IDENTITIES, cli

from runner.agents.presets import PRESETS, with_agent_tables

PLAN = ROOT / "examples" / "agent-plan"
FAKE_AGENT = PLAN / "fake-agent"
STUB_AGENT = Path(__file__).parent / "stubs" / "agent.py"
KEYS = {"w1": "key-a", "w2": "key-b"}


def fake_agent_tables() -> str:
    """The stand-in agent in every role, handed every file token runner has."""
    def command(role: str, *extra: str) -> str:
        return json.dumps([sys.executable, str(FAKE_AGENT), role, "--prompt-file", "{prompt_file}", *extra])

    return "\n".join([
        "[harness]", f"command = {command('implement', '--output', '{output}', '--notes', '{notes_file}')}",
        "[roles.orient]", f"command = {command('orient')}",
        "[roles.verify]", f"command = {command('verify')}",
        "[roles.review]", f"command = {command('review', '--diff', '{diff_file}')}", "min_files = 0",
        "[roles.sweep]", f"command = {command('sweep')}",
        "[roles.orchestrate]", f"command = {command('orchestrate', '--verdict', '{verdict}')}", "",
    ])


def as_pusher(pusher: str, *args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return cli(*args, cwd=cwd, env={"RUNNER_PUSHER": pusher, **(env or {})})


@pytest.fixture
def stub_agents(tmp_path: Path) -> dict:
    """A PATH on which every preset's program is the stub agent."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for preset in PRESETS.values():
        if preset.program:
            program = folder / preset.program[0]
            program.write_text(f"#!/bin/sh\nexec {sys.executable} {STUB_AGENT} \"$@\"\n")
            program.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def served_plan(tmp_path: Path, agent: str) -> tuple[Path, Path]:
    """A hooked bare remote whose queue runs the agent plan with `agent`'s commands, identities
    on; alice (an admin) set it up. Returns (remote, alice's clone)."""
    project = make_repo(tmp_path / "project")
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(project), str(bare))
    assert cli("install-hooks", "--server", str(bare), cwd=tmp_path).returncode == 0
    alice = tmp_path / "alice"
    git(tmp_path, "clone", "-q", str(bare), str(alice))
    init = ["init"] if agent == "fake" else ["init", "--agent", agent]
    done = as_pusher("alice", *init, "--repo", str(alice), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    toml = git(alice, "show", "origin/runner/queue:runner.toml") + "\n"
    if agent == "fake":
        toml = with_agent_tables(toml, fake_agent_tables())
    else:  # `runner init --agent` turns plan-wide approval on; here only 03-tests asks a person, as the plan says
        assert tomllib.loads(toml)["queue"]["requires_approval"] is True
        # ...and the sandbox, where bubblewrap works (.ci/run installs it): every preset's stub runs inside it
        assert tomllib.loads(toml)["worker"]["sandbox"] == ("bwrap" if shutil.which("bwrap") else "none")
        toml = toml.replace("requires_approval = true", "requires_approval = false", 1)
    toml = toml.replace("detect = true", "detect = false").replace("min_files = 5", "min_files = 0") + IDENTITIES  # review every change
    tomllib.loads(toml)
    person = tmp_path / "alice-queue"
    git(tmp_path, "clone", "-q", "--branch", "runner/queue", str(bare), str(person))
    (person / "runner.toml").write_text(toml)
    git(person, "commit", "-q", "-am", "people, worker keys and the agent's commands")
    pushed = subprocess.run(["git", "push", "-q", "origin", "runner/queue"], cwd=person, capture_output=True, text=True,
                            env={**os.environ, "RUNNER_PUSHER": "alice"})
    assert pushed.returncode == 0, pushed.stderr
    imported = as_pusher("alice", "import", str(PLAN), "--repo", str(alice), cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    return bare, alice


def drain(bare: Path, tmp_path: Path, env: dict) -> dict[str, str]:
    """w1 and w2 (each with its own key and clone) drain what they can; their stderr by worker."""
    procs = {}
    for worker, key in KEYS.items():
        clone = tmp_path / worker
        if not clone.exists():
            git(tmp_path, "clone", "-q", str(bare), str(clone))
        procs[worker] = subprocess.Popen(
            [sys.executable, "-m", "runner", "worker", "--id", worker, "--once", "--interval", "0.2", "--repo", str(clone)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), "RUNNER_PUSHER": key, **env})
    said = {}
    for worker, proc in procs.items():
        out, err = proc.communicate(timeout=240)
        said[worker] = out + err
    return said


def statuses(alice: Path, tmp_path: Path) -> dict[str, str]:
    done = as_pusher("alice", "status", "--json", "--repo", str(alice), cwd=tmp_path)
    return {s["step"]: s["status"] for s in json.loads(done.stdout)["steps"]}


@pytest.mark.parametrize("agent", ["fake", *(name for name, p in PRESETS.items() if p.program)])
def test_the_whole_pipeline_runs_under_the_hook_with_identities_on_two_workers(agent, tmp_path, stub_agents):
    bare, alice = served_plan(tmp_path, agent)
    follow_up = {"FAKE_AGENT_FOLLOW_UP": "1"} if agent == "fake" else {}  # orchestrate tries `runner add` from a worker's key
    said = drain(bare, tmp_path, {**stub_agents, **follow_up})
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
    roles = {"orient", "implement", "verify", "sweep", "review"} | ({"orchestrate"} if agent != "aider" else set())
    assert roles <= {name.split(":")[0] for name in runs}, runs
    merged = git(bare, "ls-tree", "-r", "--name-only", "runner/integration").split()
    assert {"tally/count.py", "tally/__main__.py", "tests/test_tally.py"} <= set(merged)
    for worker, text in said.items():
        assert "refused" not in text, (worker, text)
    if follow_up:  # only people edit the plan: the step added nothing, and its handoff keeps the proposal for a person
        handoffs = git(bare, "ls-tree", "-r", "--name-only", "runner/queue", "plans/handoffs").split()
        kept = git(bare, "show", f"runner/queue:{next(h for h in handoffs if h.endswith('01-count.md'))}")
        assert "proposed: runner add Follow up 01-count" in kept and "only people edit the plan" in kept, kept
