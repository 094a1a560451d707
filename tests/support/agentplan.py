"""The agent plan (examples/agent-plan) served by a hooked bare remote with `[hooks]
identities`, and drained by two workers with their own keys: the whole pipeline together
(tests/test_together.py, tests/test_costs.py, tests/test_limits.py). A local push hands the
pusher's environment to the hook, so each process's RUNNER_PUSHER is the name a git host
would give its key."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from runner.agents.presets import PRESETS, with_agent_tables
from support.hooked import IDENTITIES, cli
from support.repos import ROOT, git, make_repo

PLAN = ROOT / "examples" / "agent-plan"
FAKE_AGENT = PLAN / "fake-agent"
STUB_AGENT = Path(__file__).parents[1] / "stubs" / "agent.py"
KEYS = {"w1": "key-a", "w2": "key-b"}


def fake_agent_tables() -> str:
    """The stand-in agent in every role, handed every file token runner has."""

    def command(role: str, *extra: str) -> str:
        return json.dumps([sys.executable, str(FAKE_AGENT), role, "--prompt-file", "{prompt_file}", *extra])

    return "\n".join(
        [
            "[harness]",
            f"command = {command('implement', '--output', '{output}', '--notes', '{notes_file}')}",
            "[roles.orient]",
            f"command = {command('orient')}",
            "[roles.verify]",
            f"command = {command('verify')}",
            "[roles.review]",
            f"command = {command('review', '--diff', '{diff_file}')}",
            "min_files = 0",
            "[roles.sweep]",
            f"command = {command('sweep')}",
            "[roles.orchestrate]",
            f"command = {command('orchestrate', '--verdict', '{verdict}')}",
            "",
        ]
    )


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
            program.write_text(f'#!/bin/sh\nSTUB_AGENT_AS={preset.name} exec {sys.executable} {STUB_AGENT} "$@"\n')
            program.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


STUB_VARIABLES = (
    "STUB_AGENT_CALLS",
    "STUB_AGENT_LIMIT",
    "STUB_AGENT_LIMIT_ROLE",
    "STUB_AGENT_LIMIT_TEXT",
    "STUB_AGENT_RESET_IN",
)


def side_folder(tmp_path: Path) -> Path:
    """Where a test's stub agent leaves what the test reads (its calls, its limit's mark): the one
    folder beside its worktree a sandboxed step may write (`[worker] sandbox_write`)."""
    folder = tmp_path / "side"
    folder.mkdir(exist_ok=True)
    return folder


def served_plan(
    tmp_path: Path,
    agent: str,
    tables: str | None = None,
    extra: str = "",
    keys: dict[str, str] | None = None,
    steps: dict[str, str] | None = None,
) -> tuple[Path, Path]:
    """A hooked bare remote whose queue runs the agent plan with `agent`'s commands (or the
    agent `tables` given, `extra` TOML tables, and `keys`: lines set in runner.toml's existing
    tables, e.g. {"brakes": "step_budget_usd = 0.1"}), and `steps` (path -> text) beside the
    plan's, identities on; alice (an admin) set it up. Returns (remote, alice's clone)."""
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
    if agent == "fake" or tables:
        toml = with_agent_tables(toml, tables or fake_agent_tables())
    if (
        agent != "fake"
    ):  # `runner init --agent` turns plan-wide approval on; here only 03-tests asks a person, as the plan says
        assert tomllib.loads(toml)["queue"]["requires_approval"] is True
        # ...and the sandbox, where bubblewrap works (.ci/run installs it): every preset's stub runs inside it
        assert tomllib.loads(toml)["worker"]["sandbox"] == ("bwrap" if shutil.which("bwrap") else "none")
        toml = toml.replace("requires_approval = true", "requires_approval = false", 1)
    if agent != "fake":  # the stub's own variables and the folder it tells the test through pass the sandbox
        passed = [*tomllib.loads(toml)["worker"]["env_pass"], *STUB_VARIABLES]
        toml = with_keys(
            toml,
            "worker",
            f"env_pass = {json.dumps(passed)}\nsandbox_write = {json.dumps([str(side_folder(tmp_path))])}",
        )
    toml = (
        toml.replace("detect = true", "detect = false").replace("min_files = 5", "min_files = 0") + IDENTITIES + extra
    )  # review every change
    for table, lines in (keys or {}).items():
        toml = with_keys(toml, table, lines)
    tomllib.loads(toml)
    person = tmp_path / "alice-queue"
    git(tmp_path, "clone", "-q", "--branch", "runner/queue", str(bare), str(person))
    (person / "runner.toml").write_text(toml)
    git(person, "commit", "-q", "-am", "people, worker keys and the agent's commands")
    pushed = subprocess.run(
        ["git", "push", "-q", "origin", "runner/queue"],
        cwd=person,
        capture_output=True,
        text=True,
        env={**os.environ, "RUNNER_PUSHER": "alice"},
    )
    assert pushed.returncode == 0, pushed.stderr
    imported = as_pusher("alice", "import", str(PLAN), "--repo", str(alice), cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    if steps:  # alice's own plan edit, pushed under her name
        git(person, "pull", "-q", "--rebase", "origin", "runner/queue")
        for path, text in steps.items():
            (person / path).parent.mkdir(parents=True, exist_ok=True)
            (person / path).write_text(text)
        git(person, "add", "-A")
        git(person, "commit", "-q", "-m", "more steps")
        pushed = subprocess.run(
            ["git", "push", "-q", "origin", "runner/queue"],
            cwd=person,
            capture_output=True,
            text=True,
            env={**os.environ, "RUNNER_PUSHER": "alice"},
        )
        assert pushed.returncode == 0, pushed.stderr
    return bare, alice


def drain(bare: Path, tmp_path: Path, env: dict) -> dict[str, str]:
    """w1 and w2 (each with its own key and clone) drain what they can; their stderr by worker."""
    procs = {}
    for worker, key in KEYS.items():
        clone = tmp_path / worker
        if not clone.exists():
            git(tmp_path, "clone", "-q", str(bare), str(clone))
        procs[worker] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runner",
                "worker",
                "--id",
                worker,
                "--once",
                "--interval",
                "0.2",
                "--repo",
                str(clone),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), "RUNNER_PUSHER": key, **env},
        )
    said = {}
    for worker, proc in procs.items():
        out, err = proc.communicate(timeout=240)
        said[worker] = out + err
    return said


def statuses(alice: Path, tmp_path: Path) -> dict[str, str]:
    done = as_pusher("alice", "status", "--json", "--repo", str(alice), cwd=tmp_path)
    return {s["step"]: s["status"] for s in json.loads(done.stdout)["steps"]}


AGENT_DATA = Path(__file__).parents[1] / "data" / "agents"
AGENT_CASES = json.loads((AGENT_DATA / "cases.json").read_text())


def read_case(name: str, exit_code: int | None = None, now=None, local=None):
    """What runner reads from one recorded output (tests/data/agents/cases.json names it)."""
    from datetime import UTC, datetime

    from runner.core.agentoutput import read_output

    case = AGENT_CASES[name]
    stderr = (AGENT_DATA / case["stderr"]).read_text() if "stderr" in case else ""
    when = now or (datetime.fromisoformat(case["now"]) if "now" in case else datetime(2026, 12, 5, 12, 0, tzinfo=UTC))
    return read_output(
        case["reader"],
        (AGENT_DATA / case["stdout"]).read_text(),
        "",
        stderr,
        case["exit"] if exit_code is None else exit_code,
        when,
        local or UTC,
    )


def with_keys(toml: str, table: str, lines: str) -> str:
    """runner.toml with `lines` (key = value) set in its [table]: a key it has is replaced."""
    import re

    head = toml.index(f"[{table}]\n") + len(f"[{table}]\n")
    end = next((m.start() for m in re.finditer(r"^\[", toml[head:], re.MULTILINE)), len(toml) - head) + head
    section = toml[head:end]
    for line in lines.splitlines():
        name = line.split("=", 1)[0].strip()
        kept = [old for old in section.splitlines(keepends=True) if not old.startswith(f"{name} =")]
        section = line + "\n" + "".join(kept)
    return toml[:head] + section + toml[end:]
