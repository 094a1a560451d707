"""Agents that take steps themselves (issue 33): `runner mcp` driven by the official MCP client
SDK over stdio, and `runner work` / `runner submit` from a shell, each in a clone of a bare
remote; the claim, the worktree, the checks and the record are a worker's, so the queue, the
integration branch and the step file say exactly what a worker's tick would have left. Time
passes through RUNNER_MONOTONIC_OFFSET, never sleep; a session dies by kill -9."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import psutil
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from support.hooked import IDENTITIES, add_steps, clone, hooked_remote
from support.repos import ROOT, add_step, git, make_remote, queue_history, runner, runner_json, set_config, wait_for

from runner.core.config import DEFAULT_TOML

CHECKS = """Write the greeting.

#### Automated Verification:
- [ ] out exists: `test -f out.txt`

#### Automated QA:
- [ ] says hello: `grep -q hello out.txt`

#### Manual Verification:
- [ ] the greeting reads well
"""
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
PERSON_ONLY = {"approve", "reject", "retry", "abort", "halt", "resume"}


def served_plan(tmp_path: Path, clones: int = 2, **config) -> tuple[Path, list[Path]]:
    """A bare remote whose queue holds 01-a (with checklists) and 02-b after it."""
    bare, paths = make_remote(tmp_path, clones=clones)
    runner(paths[0], "init")
    set_config(paths[0], detect=False, **config)
    add_step(paths[0], "01-a", "Greet", body=CHECKS)
    add_step(paths[0], "02-b", "After", depends_on=["01-a"])
    return bare, paths


def step_text(bare: Path, step: str) -> str:
    return git(bare, "show", f"runner/queue:plans/steps/{step}.md")


def events(bare: Path) -> list[tuple[str, str, str]]:
    return [(e["Event"], e.get("Step", ""), e.get("Actor", "")) for e in queue_history(bare) if e.get("Step")]


# --- the MCP client side -------------------------------------------------------------------------


@asynccontextmanager
async def mcp_session(repo: Path, agent: str, env: dict | None = None):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "runner", "mcp", "--id", agent, "--repo", str(repo)],
        env={**ENV, **(env or {})},
        cwd=str(repo),
    )
    # errlog goes to the server's process as its stderr: DEVNULL, not a file this test would have to close.
    async with stdio_client(params, errlog=subprocess.DEVNULL) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments) -> tuple[bool, str]:
    result = await session.call_tool(tool, arguments)
    return result.is_error, "\n".join(getattr(c, "text", "") for c in result.content)


def worktree_of(claimed: str) -> Path:
    return Path(re.search(r"^Worktree: (.+)$", claimed, re.MULTILINE).group(1))


def test_an_agent_takes_a_step_over_mcp_and_the_queue_records_it_as_a_workers(tmp_path):
    bare, (agent_clone, _) = served_plan(tmp_path)

    async def session() -> tuple[list[str], str, str, Path]:
        async with mcp_session(agent_clone, "agent-1") as s:
            tools = [t.name for t in (await s.list_tools()).tools]
            failed, ready = await call(s, "ready")
            assert not failed and ready.splitlines()[0].startswith("01-a: Greet")
            failed, claimed = await call(s, "claim", step="01-a")
            assert not failed, claimed
            worktree = worktree_of(claimed)
            assert (worktree / "README.md").exists()  # at the integration tip
            (worktree / "out.txt").write_text("hello\n")
            failed, report = await call(s, "complete", step="01-a")
            assert not failed, report
            failed, shown = await call(s, "show", step="02-b")  # the next step, with what 01-a left
            assert not failed and "## What its dependencies left" in shown and "# Handoff: 01-a (attempt 1)" in shown, (
                shown
            )
            return tools, claimed, report, worktree

    tools, claimed, report, worktree = anyio.run(session)
    assert sorted(tools) == ["claim", "complete", "fail", "log", "ready", "release", "show"]
    assert "# Step 01-a: Greet (attempt 1)" in claimed and "Write the greeting." in claimed and "# Plan" in claimed
    for line in (
        "Final frontmatter status: done",
        "Automated Verification: 1/1 passed",
        "Automated QA: 1/1 passed",
        "Manual verification needed:",
        "- [ ] the greeting reads well",
        "STEP_COMPLETE",
    ):
        assert line in report, report
    assert events(bare)[-2:] == [("claim", "01-a", "agent-1"), ("complete", "01-a", "agent-1")]
    assert git(bare, "show", "runner/integration:out.txt") == "hello"
    text = step_text(bare, "01-a")
    assert "status: done" in text and "- [x] out exists" in text and "- [x] says hello" in text
    assert "- [ ] the greeting reads well" in text  # a person's check is never ticked
    assert not worktree.exists()  # the session ended with the record


def test_the_tools_are_small_and_none_is_a_persons(tmp_path):
    _, (agent_clone,) = served_plan(tmp_path, clones=1)

    async def listed():
        async with mcp_session(agent_clone, "agent-1") as s:
            return (await s.list_tools()).tools

    tools = anyio.run(listed)
    described = sum(len(t.name) + len(t.description or "") + len(json.dumps(t.input_schema)) for t in tools)
    assert described < 8000, described
    assert not PERSON_ONLY & {t.name for t in tools}
    for tool in ("show", "complete", "fail", "release"):
        assert "step" in next(t for t in tools if t.name == tool).input_schema["required"]


def test_every_tool_answers_with_structured_content_and_the_server_names_runners_version(tmp_path):
    """An agent's client reads the worktree, the step, the attempt and the report's fields as
    data, not by parsing text; a refusal is data too (its code and message)."""
    from runner import __version__

    _, (agent_clone, _) = served_plan(tmp_path)

    async def session() -> dict:
        params = StdioServerParameters(
            command=sys.executable,
            cwd=str(agent_clone),
            env=ENV,
            args=["-m", "runner", "mcp", "--id", "agent-1", "--repo", str(agent_clone)],
        )
        async with stdio_client(params, errlog=subprocess.DEVNULL) as (read, write), ClientSession(read, write) as s:
            answers = {"version": (await s.initialize()).server_info.version}
            for tool, arguments in (("ready", {}), ("show", {"step": "02-b"}), ("claim", {}), ("log", {"limit": 5})):
                result = await s.call_tool(tool, arguments)
                assert not result.is_error and result.structured_content, (tool, result)
                answers[tool] = result.structured_content
            (Path(answers["claim"]["worktree"]) / "out.txt").write_text("hello\n")
            answers["complete"] = (await s.call_tool("complete", {"step": "01-a"})).structured_content
            refused = await s.call_tool("release", {"step": "02-b", "reason": "not mine"})
            answers["refused"] = (refused.is_error, refused.structured_content)
            return answers

    answers = anyio.run(session)
    assert answers["version"] == __version__
    assert [s["step"] for s in answers["ready"]["steps"]] == ["01-a"]
    assert (answers["show"]["step"], answers["show"]["status"]) == ("02-b", "waiting")
    claimed = answers["claim"]
    assert (claimed["step"], claimed["attempt"], claimed["status"], claimed["agent"]) == (
        "01-a",
        1,
        "claimed",
        "agent-1",
    )
    assert Path(claimed["worktree"]).name == "01-a-a1" and claimed["prompt"]
    assert answers["log"]["entries"][0]["event"] == "claim"
    report = answers["complete"]
    assert (report["step"], report["sentinel"], report["final_status"]) == ("01-a", "STEP_COMPLETE", "done")
    assert report["automated_verification"]["passed"] == 1 and report["files_changed"] == ["out.txt"]
    failed, refusal = answers["refused"]
    assert failed and refusal["ok"] is False and refusal["code"] == 1 and "does not hold 02-b" in refusal["message"]


def test_a_check_that_fails_keeps_the_claim_and_a_second_hand_in_records_both_runs(tmp_path):
    bare, (agent_clone, _) = served_plan(tmp_path)

    async def session() -> tuple[str, str]:
        async with mcp_session(agent_clone, "agent-1") as s:
            worktree = worktree_of((await call(s, "claim"))[1])
            _failed, first = await call(s, "complete", step="01-a")
            (worktree / "out.txt").write_text("hello\n")
            _failed, second = await call(s, "complete", step="01-a", notes="out.txt holds the greeting")
            return first, second

    first, second = anyio.run(session)
    assert (
        "not recorded" in first
        and "Automated Verification: 0/1 passed" in first
        and "gate check: test -f out.txt failed" in first
    )
    assert "Final frontmatter status: done" in second
    complete = [e for e in queue_history(bare) if e.get("Event") == "complete"][-1]
    runs = [(r["name"], r["result"]) for r in json.loads(complete["Runs"])]
    assert runs == [
        ("implement", "pass"),
        ("check: test -f out.txt", "fail"),
        ("implement", "pass"),
        ("check: test -f out.txt", "pass"),
        ("qa: grep -q hello out.txt", "pass"),
    ]
    assert "out.txt holds the greeting" in git(bare, "show", "runner/queue:plans/NOTES.md")


def test_complete_runs_the_verifier_as_a_workers_pipeline_does(tmp_path):
    stub = json.dumps([sys.executable, str(ROOT / "tests" / "stubs" / "role.py"), "score", "0.4"])
    bare, (agent_clone, _) = served_plan(tmp_path, extra=f"\n[roles.verify]\ncommand = {stub}\n")

    async def session() -> str:
        async with mcp_session(agent_clone, "agent-1") as s:
            (worktree_of((await call(s, "claim"))[1]) / "out.txt").write_text("hello\n")
            return (await call(s, "complete", step="01-a"))[1]

    report = anyio.run(session)
    assert "not recorded" in report and "The verifier did not pass the result (score 0.4)" in report
    assert "status: claimed" in step_text(bare, "01-a")  # nothing recorded: still the agent's


def test_a_second_session_cannot_claim_the_step_the_first_holds(tmp_path):
    bare, (first_clone, second_clone) = served_plan(tmp_path)

    async def sessions() -> tuple[str, str]:
        async with mcp_session(first_clone, "agent-1") as first:
            assert not (await call(first, "claim", step="01-a"))[0]
            async with mcp_session(second_clone, "agent-2") as other:
                refused_other = await call(other, "claim", step="01-a")
            async with mcp_session(second_clone, "agent-1") as same:
                refused_same = await call(same, "claim", step="01-a")
            assert refused_other[0] and refused_same[0]
            return refused_other[1], refused_same[1]

    other, same = anyio.run(sessions)
    assert "01-a is claimed by agent-1 (attempt 1)" in other
    assert "agent-1 already holds 01-a (attempt 1) in another session" in same
    assert [e for e in events(bare) if e[0] in ("claim", "takeover")] == [("claim", "01-a", "agent-1")]


def kill_session_holding(bare: Path, step: str) -> int:
    """kill -9 the server process the claim names as its holder."""
    pid = int(
        re.search(r"pid: (\d+)", re.search(r"^holder: .*$", step_text(bare, step), re.MULTILINE).group(0)).group(1)
    )
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    return pid


async def claim_then_die(repo: Path, bare: Path) -> None:
    with suppress(Exception):  # the server is gone under the client
        async with mcp_session(repo, "agent-1") as s:
            assert not (await call(s, "claim", step="01-a"))[0]
            kill_session_holding(bare, "01-a")


def test_a_session_that_dies_leaves_its_claim_to_be_taken_over_after_its_lease(tmp_path):
    bare, (agent_clone, taker) = served_plan(tmp_path)
    anyio.run(claim_then_die, agent_clone, bare)
    elsewhere = {"RUNNER_HOST": "elsewhere"}  # judged by the lease, not by a pid of this host
    assert runner(taker, "claim", "01-a", "--id", "w2", env=elsewhere, check=False).returncode == 3
    assert "status: claimed" in step_text(bare, "01-a")
    later = {**elsewhere, "RUNNER_MONOTONIC_OFFSET": str(3600 + 60)}  # an hour and a minute later, by the taker's clock
    taken = runner_json(taker, "claim", "01-a", "--id", "w2", env=later)
    assert (taken["event"], taken["attempt"]) == ("takeover", 2)
    assert events(bare)[-2:] == [("claim", "01-a", "agent-1"), ("takeover", "01-a", "w2")]


def test_on_its_own_host_a_dead_sessions_claim_is_taken_over_at_once(tmp_path):
    bare, (agent_clone, _) = served_plan(tmp_path)
    anyio.run(claim_then_die, agent_clone, bare)
    taken = runner_json(agent_clone, "claim", "01-a", "--id", "w2")
    assert (taken["event"], taken["attempt"]) == ("takeover", 2)


def test_a_new_session_of_the_same_id_takes_its_dead_sessions_claim_over_in_a_fresh_worktree(tmp_path):
    bare, (agent_clone, _) = served_plan(tmp_path)
    anyio.run(claim_then_die, agent_clone, bare)
    old = agent_clone / ".runner" / "01-a-a1"
    assert old.is_dir()

    async def again() -> str:
        async with mcp_session(agent_clone, "agent-1") as s:
            return (await call(s, "claim", step="01-a"))[1]

    claimed = anyio.run(again)
    assert worktree_of(claimed) == agent_clone / ".runner" / "01-a-a2" and not old.exists()
    assert events(bare)[-1] == ("takeover", "01-a", "agent-1")


def test_a_session_keeps_its_heartbeat_while_it_holds_the_step(tmp_path):
    bare, (agent_clone,) = served_plan(tmp_path, clones=1, lease="3s")  # a beat every second

    def beats() -> int:
        return int(git(bare, "rev-list", "--count", "refs/runner/heartbeats/agent-1"))

    async def session() -> None:
        async with mcp_session(agent_clone, "agent-1") as s:
            assert not (await call(s, "claim", step="01-a"))[0]
            after_claim = beats()
            await anyio.to_thread.run_sync(lambda: wait_for(lambda: beats() > after_claim + 1))
            facts = json.loads(git(bare, "log", "-1", "--format=%b", "refs/runner/heartbeats/agent-1"))
            assert (facts["step"], facts["attempt"], facts["state"]) == ("01-a", 1, "running")

    anyio.run(session)


def test_the_agents_key_acts_only_as_its_id_under_the_hook(tmp_path, monkeypatch):
    bare = hooked_remote(tmp_path / "remote.git")
    monkeypatch.setenv("RUNNER_PUSHER", "alice")
    alice = clone(bare, tmp_path / "alice")
    alice.init("alice")
    alice.edit(
        lambda snap: {"runner.toml": (DEFAULT_TOML.replace("detect = true", "detect = false") + IDENTITIES).encode()},
        "people and worker keys",
        "alice",
    )
    add_steps(alice, ("01-a", {"body": CHECKS}), ("02-b", {"body": CHECKS}))
    monkeypatch.delenv("RUNNER_PUSHER")
    agent_clone = tmp_path / "agent"
    clone(bare, agent_clone)
    key_a = {"RUNNER_PUSHER": "key-a"}  # the key of worker id w1 only

    async def sessions() -> tuple[tuple[bool, str], str]:
        async with mcp_session(agent_clone, "w2", key_a) as s:
            as_other = await call(s, "claim", step="01-a")
        async with mcp_session(agent_clone, "w1", key_a) as s:
            (worktree_of((await call(s, "claim", step="01-a"))[1]) / "out.txt").write_text("hello\n")
            return as_other, (await call(s, "complete", step="01-a"))[1]

    as_other, report = anyio.run(sessions)
    assert as_other[0] and "refused" in as_other[1] and "w2" in as_other[1], as_other
    assert "Final frontmatter status: done" in report, report
    assert events(bare)[-2:] == [("claim", "01-a", "w1"), ("complete", "01-a", "w1")]
    assert git(bare, "show", "runner/integration:out.txt") == "hello"

    # The same from a shell: the key is refused as w2, and works as w1 (its keeper's beats too).
    refused = runner(agent_clone, "work", "02-b", "--id", "w2", env=key_a, check=False)
    assert refused.returncode == 1 and "refused" in refused.stderr, refused.stderr
    worktree = Path(runner_json(agent_clone, "work", "02-b", "--id", "w1", env=key_a)["worktree"])
    (worktree / "out.txt").write_text("hello again\n")
    assert "Final frontmatter status: done" in runner(agent_clone, "submit", "02-b", "--id", "w1", env=key_a).stdout
    assert events(bare)[-2:] == [("claim", "02-b", "w1"), ("complete", "02-b", "w1")]


@pytest.fixture(scope="module")
def two_megabytes(tmp_path_factory) -> dict:
    """One session (an MCP server costs a second of CPU to start): 01-a failed with a reason of
    two megabytes, then (no back-off) claimed again and completed with notes of two megabytes."""
    tmp_path = tmp_path_factory.mktemp("two-megabytes")
    bare, (agent_clone,) = served_plan(tmp_path, clones=1, backoff="0s")
    before = len(git(bare, "show", "runner/queue:plans/NOTES.md"))

    async def session() -> dict:
        async with mcp_session(agent_clone, "agent-1") as s:
            assert not (await call(s, "claim", step="01-a"))[0]
            failed = (await call(s, "fail", step="01-a", reason="x" * 2_000_000 + " the real cause"))[1]
            said = {"failed": failed, "step_after_fail": step_text(bare, "01-a")}
            (worktree_of((await call(s, "claim", step="01-a"))[1]) / "out.txt").write_text("hello\n")
            said["completed"] = (await call(s, "complete", step="01-a", notes="n" * 2_000_000 + " the last fact"))[1]
            return said

    said = anyio.run(session)
    return {**said, "notes_before": before, "notes": git(bare, "show", "runner/queue:plans/NOTES.md")}


def test_a_reason_of_two_megabytes_is_clipped_where_the_event_is_made(two_megabytes):
    assert "STEP_FAILED" in two_megabytes["failed"]
    last_error = re.search(r"^last_error: (.*)$", two_megabytes["step_after_fail"], re.MULTILINE).group(1)
    assert len(last_error) < 8000 and "bytes clipped" in last_error and "the real cause" in last_error


def test_notes_of_two_megabytes_reach_notes_md_clipped(two_megabytes):
    assert "STEP_COMPLETE" in two_megabytes["completed"]
    notes = two_megabytes["notes"]
    assert len(notes) - two_megabytes["notes_before"] <= 16 * 1024 + 200 and notes.rstrip().endswith("the last fact")


# --- the same flow from a shell ----------------------------------------------------------------


def alive(pid: int) -> bool:
    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


def session_file(repo: Path, agent: str, step: str) -> dict:
    return json.loads((repo / ".git" / "runner" / "agents" / agent / f"{step}.json").read_text())


def test_an_agent_takes_a_step_with_work_and_submit_from_a_shell(tmp_path):
    bare, (agent_clone, _) = served_plan(tmp_path, lease="3s")  # the keeper beats every second
    claimed = runner_json(agent_clone, "work", "--id", "agent-1")
    assert (claimed["step"], claimed["attempt"]) == ("01-a", 1)
    worktree = Path(claimed["worktree"])
    keeper = session_file(agent_clone, "agent-1", "01-a")["keeper"]["pid"]
    assert alive(keeper)
    first = int(git(bare, "rev-list", "--count", "refs/runner/heartbeats/agent-1"))
    wait_for(
        lambda: int(git(bare, "rev-list", "--count", "refs/runner/heartbeats/agent-1")) > first
    )  # the keeper beats

    again = runner_json(agent_clone, "work", "--id", "agent-1")  # the same claim, printed again
    assert again["worktree"] == claimed["worktree"] and again["attempt"] == 1

    not_yet = runner(agent_clone, "submit", "01-a", "--id", "agent-1", check=False)
    assert (
        not_yet.returncode == 1
        and "not recorded" in not_yet.stdout
        and "Automated Verification: 0/1 passed" in not_yet.stdout
    )
    assert alive(keeper)  # still the agent's: the heartbeat goes on

    (worktree / "out.txt").write_text("hello\n")
    done = runner(agent_clone, "submit", "01-a", "--id", "agent-1")
    assert "Final frontmatter status: done" in done.stdout and "Automated QA: 1/1 passed" in done.stdout
    assert events(bare)[-2:] == [("claim", "01-a", "agent-1"), ("complete", "01-a", "agent-1")]
    assert git(bare, "show", "runner/integration:out.txt") == "hello"
    assert "- [x] out exists" in step_text(bare, "01-a")
    wait_for(lambda: not alive(keeper))  # the heartbeat ends with the claim
    assert not worktree.exists()


def test_a_shell_agent_cannot_take_a_step_another_holds(tmp_path):
    _bare, (first, second) = served_plan(tmp_path)
    runner_json(first, "work", "01-a", "--id", "agent-1")
    refused = runner(second, "work", "01-a", "--id", "agent-2", check=False)
    assert refused.returncode == 3 and "01-a is claimed by agent-1 (attempt 1)" in refused.stderr
    twice = runner(first, "work", "02-b", "--id", "agent-1", check=False)
    assert (
        twice.returncode == 1
        and "agent-1 already holds 01-a (attempt 1)" in twice.stderr
        and "one step at a time" in twice.stderr
    )
    runner(first, "release", "01-a", "--id", "agent-1", "--reason", "done for today")


def test_release_of_a_step_taken_with_work_ends_its_keeper_and_worktree(tmp_path):
    bare, (agent_clone,) = served_plan(tmp_path, clones=1)
    claimed = runner_json(agent_clone, "work", "01-a", "--id", "agent-1")
    keeper = session_file(agent_clone, "agent-1", "01-a")["keeper"]["pid"]
    runner(agent_clone, "release", "01-a", "--id", "agent-1", "--reason", "out of time")
    assert "status: ready" in step_text(bare, "01-a")
    assert "out of time" in git(bare, "show", "runner/queue:plans/handoffs/01-a.md")  # the handoff a worker leaves
    wait_for(lambda: not alive(keeper))
    assert not Path(claimed["worktree"]).exists()


# --- prime ----------------------------------------------------------------------------------------


def test_prime_says_how_to_take_a_step_and_what_is_a_persons():
    text = subprocess.run(
        [sys.executable, "-m", "runner", "prime", "--id", "claude-1"],
        capture_output=True,
        text=True,
        env=ENV,
        check=True,
    ).stdout
    for said in ("runner work STEP --id claude-1", "runner submit STEP --id claude-1", "approve, reject, retry, abort"):
        assert said in text
    assert len(text) < 3000


@pytest.mark.parametrize("agent, file", [("claude", "CLAUDE.md"), ("codex", "AGENTS.md"), ("aider", "CONVENTIONS.md")])
def test_init_writes_prime_into_the_agents_instructions_file_once(repo, agent, file):
    (repo / file).write_text("# Our project\n\nUse tabs.\n")
    first = runner(repo, "init", "--agent", agent, "--prime")
    runner(repo, "init", "--agent", agent, "--prime")
    text = (repo / file).read_text()
    assert text.startswith("# Our project\n\nUse tabs.\n") and text.count("runner prime: begin") == 1
    assert "runner submit STEP --id AGENT-ID" in text
    assert (agent == "aider") == ("aider --read CONVENTIONS.md" in first.stdout)


def test_prime_without_an_agent_is_refused_before_anything_is_written(repo):
    done = runner(repo, "init", "--prime", check=False)
    assert done.returncode == 2 and "--prime" in done.stderr
    assert git(repo, "branch", "--list", "runner/queue") == ""


def test_a_hand_in_whose_merge_conflicts_is_left_to_the_agent_to_resolve_and_spends_nothing(tmp_path):
    """The integration branch moved while the agent worked (a worker merged a change to the same
    file): its hand-in records nothing, the new tip is merged into its worktree with the conflict
    left between git's markers, and once the agent resolves it the next hand-in records done;
    no fail event, attempt 1 throughout (issue 32's resolve pass, with the agent as resolver)."""
    bare, (agent_clone, worker_clone) = served_plan(tmp_path)
    add_step(agent_clone, "03-c", "Other", run=["sh", "-c", "echo worker > shared.txt"])
    claimed = runner_json(agent_clone, "work", "01-a", "--id", "agent-1")
    worktree = Path(claimed["worktree"])
    (worktree / "out.txt").write_text("hello\n")
    (worktree / "shared.txt").write_text("agent\n")
    assert runner_json(worker_clone, "tick", "--id", "w1", "--step", "03-c")["sentinel"] == "STEP_COMPLETE"

    conflicted = runner(agent_clone, "submit", "01-a", "--id", "agent-1", check=False)
    assert conflicted.returncode == 1 and "conflicts with your change in shared.txt" in conflicted.stdout, (
        conflicted.stdout
    )
    text = (worktree / "shared.txt").read_text()
    assert "<<<<<<<" in text and "agent" in text and "worker" in text
    (worktree / "shared.txt").write_text("agent\nworker\n")
    done = runner(agent_clone, "submit", "01-a", "--id", "agent-1")
    assert "Final frontmatter status: done" in done.stdout
    assert git(bare, "show", "runner/integration:shared.txt") == "agent\nworker"
    assert [e for e in events(bare) if e[1] == "01-a"] == [
        ("claim", "01-a", "agent-1"),
        ("complete", "01-a", "agent-1"),
    ]
    record = [e for e in queue_history(bare) if e.get("Event") == "complete" and e.get("Step") == "01-a"][-1]
    assert record["Attempt"] == "1" and any(run["name"] == "resolve" for run in json.loads(record["Runs"]))


def test_a_hand_in_that_leaves_part_of_a_conflict_is_refused_and_nothing_is_recorded(tmp_path):
    """Attack 3 (issue 48) on `runner submit`: the agent deletes only the <<<<<<< and >>>>>>> lines of the
    conflict left in its worktree, and hands in ======= with both sides; nothing may be recorded."""
    bare, (agent_clone, worker_clone) = served_plan(tmp_path)
    add_step(agent_clone, "03-c", "Other", run=["sh", "-c", "echo worker > shared.txt"])
    worktree = Path(runner_json(agent_clone, "work", "01-a", "--id", "agent-1")["worktree"])
    (worktree / "out.txt").write_text("hello\n")
    (worktree / "shared.txt").write_text("agent\n")
    assert runner_json(worker_clone, "tick", "--id", "w1", "--step", "03-c")["sentinel"] == "STEP_COMPLETE"
    assert runner(agent_clone, "submit", "01-a", "--id", "agent-1", check=False).returncode == 1  # the conflict
    text = (worktree / "shared.txt").read_text()
    (worktree / "shared.txt").write_text(
        "".join(line for line in text.splitlines(True) if not line.startswith(("<<<<<<<", ">>>>>>>")))
    )
    integration = git(bare, "rev-parse", "runner/integration")
    half = runner(agent_clone, "submit", "01-a", "--id", "agent-1", "--json", check=False)
    assert half.returncode == 1, half.stdout
    said = json.loads(half.stdout.strip().splitlines()[-1])
    assert said["outcome"] == "resolve" and "Conflict markers are left in shared.txt" in said["feedback"], said
    assert git(bare, "rev-parse", "runner/integration") == integration
    assert [e for e in events(bare) if e[1] == "01-a"] == [("claim", "01-a", "agent-1")]
    (worktree / "shared.txt").write_text("agent\nworker\n")
    assert "Final frontmatter status: done" in runner(agent_clone, "submit", "01-a", "--id", "agent-1").stdout
    assert git(bare, "show", "runner/integration:shared.txt") == "agent\nworker"


def test_work_takes_the_callers_context_into_the_prompt_and_the_handoff(tmp_path):
    bare, (agent_clone, _) = served_plan(tmp_path)
    claimed = runner_json(
        agent_clone, "work", "01-a", "--id", "agent-1", "--context", "the customer wants it in French"
    )
    assert "## Context from the caller" in claimed["prompt"] and "in French" in claimed["prompt"]
    (Path(claimed["worktree"]) / "out.txt").write_text("hello\n")
    runner(agent_clone, "submit", "01-a", "--id", "agent-1")
    assert "in French" in git(bare, "show", "runner/queue:plans/handoffs/01-a.md")
