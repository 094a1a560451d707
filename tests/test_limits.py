"""When the provider says stop, and when the money runs out (issue 43), with real workers on
their own clones over a bare remote under the server hook with identities, driving the
Claude Code preset's stub (tests/stubs/agent.py prints its recorded JSON): a usage limit hit
by one worker pauses the account for every worker until the reset, spending no attempt and
recording no `fail`, and the steps run after the reset (time moves with RUNNER_CLOCK_OFFSET,
never a sleep); a step over its budget waits for a person, never failed; a plan over its
budget halts the queue."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.agentplan import KEYS, as_pusher, drain, served_plan, side_folder, statuses
from support.hooked import claim, forge, push_commit, record, refused
from support.repos import ROOT, git, queue_history, wait_for

PLAIN_STEP = """---
step: 04-plain
title: A scripted step that runs no agent
run: ["python3", "-c", "open('plain.txt', 'w').write('plain\\\\n')"]
required_outputs: [plain.txt]
roles:
  orient: {command: []}
  verify: {command: []}
  review: {command: []}
  sweep: {command: []}
  orchestrate: {command: []}
---
Writes plain.txt with no agent.
"""
AGENT_STEP = """---
step: 05-more
title: Another agent step
---
# Another agent step

**File**: `more/notes.txt`
```text
more notes
```
"""
NOTICE = (
    'command = ["python3", "-c", "import sys; open(sys.argv[1], \'a\').write(sys.argv[2] + chr(10))", '
    '"{file}", "{{event}} {{reason}}"]\nevents = ["paused", "halted", "needs-you"]'
)


def tick(worker: str, tmp_path, env: dict) -> subprocess.CompletedProcess:
    clone = tmp_path / worker
    if not clone.exists():
        git(tmp_path, "clone", "-q", str(tmp_path / "remote.git"), str(clone))
    return subprocess.run(
        [sys.executable, "-m", "runner", "tick", "--id", worker, "--repo", str(clone)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "RUNNER_PUSHER": KEYS[worker], **env},
    )


def listing(alice, tmp_path, *args: str, env: dict | None = None) -> dict:
    done = as_pusher("alice", *args, "--json", "--repo", str(alice), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_usage_limit_pauses_the_account_on_every_host_until_the_reset_and_spends_nothing(tmp_path, stub_agents):
    notices = tmp_path / "notices.txt"
    calls = side_folder(tmp_path) / "calls.txt"
    (side_folder(tmp_path) / "limit").mkdir()
    bare, alice = served_plan(
        tmp_path,
        "claude",
        keys={"notify": NOTICE.format(file=notices)},
        steps={"plans/steps/04-plain.md": PLAIN_STEP, "plans/steps/05-more.md": AGENT_STEP},
    )
    env = {
        **stub_agents,
        "RUNNER_NOTIFY": "1",  # the workers' hosts send [notify]'s notices
        "STUB_AGENT_CALLS": str(calls),
        "STUB_AGENT_LIMIT": str(side_folder(tmp_path) / "limit"),
        "STUB_AGENT_LIMIT_ROLE": "orient",
        "STUB_AGENT_LIMIT_TEXT": "Claude AI usage limit reached|{epoch}",
        "STUB_AGENT_RESET_IN": "600",
    }

    hit = tick("w1", tmp_path, env)  # w1 claims 01-count; its first claude run hits the account's limit
    assert hit.returncode == 0 and "SKIP" in hit.stdout, hit.stdout + hit.stderr
    assert "limit of account claude" in hit.stdout and "no attempt spent" in hit.stdout, hit.stdout
    status = listing(alice, tmp_path, "status")
    [pause] = status["paused"]
    assert pause["account"] == "claude" and pause["by"] == "w1" and pause["step"] == "01-count"
    assert "Claude AI usage limit reached" in pause["reason"]
    count = next(s for s in status["steps"] if s["step"] == "01-count")
    assert count["status"] == "ready" and not count["failures"] and count["not_before"] == pause["until"]

    # Both workers, each on its own clone: only the step that spends no claude runs; no claude call starts.
    before = len(calls.read_text().splitlines())
    said = drain(bare, tmp_path, env)
    assert statuses(alice, tmp_path) == {
        "01-count": "ready",
        "02-cli": "waiting",
        "03-tests": "waiting",
        "04-plain": "done",
        "05-more": "ready",
    }, said
    assert len(calls.read_text().splitlines()) == before == 1, calls.read_text()
    ready = listing(alice, tmp_path, "ready")
    assert {row["step"] for row in ready["held_back"]} == {"05-more"}  # 01-count backs off until the reset too
    assert all("account claude is paused until" in row["held_back"] for row in ready["held_back"])
    assert listing(alice, tmp_path, "workers")["paused"][0]["account"] == "claude"
    assert "account claude paused until" in as_pusher("alice", "workers", "--repo", str(alice), cwd=tmp_path).stdout

    # Past the reset (the clocks of both hosts move on), the steps run: nothing was failed or spent.
    said = drain(bare, tmp_path, {**env, "RUNNER_CLOCK_OFFSET": "700"})
    after = statuses(alice, tmp_path)
    assert after == {
        "01-count": "done",
        "02-cli": "done",
        "03-tests": "review",
        "04-plain": "done",
        "05-more": "done",
    }, said
    history = [entry for entry in queue_history(bare) if "Event" in entry and "Step" in entry]
    assert not [e for e in history if e["Event"] in ("fail", "takeover")], history
    released = [e for e in history if e["Event"] == "release"]
    assert len(released) == 1 and released[0]["Account"] == "claude" and released[0]["Step"] == "01-count"
    claims = [int(e["Attempt"]) for e in history if e["Event"] == "claim" and e["Step"] == "01-count"]
    assert claims == [1, 2]  # the released claim spent no attempt: no failure on the record
    assert json.loads(git(bare, "show", "runner/queue:plans/pauses/claude.json"))["by"] == "w1"
    for text in said.values():
        assert "refused" not in text, text
    wait_for(lambda: notices.exists() and "paused" in notices.read_text())
    assert next(line for line in notices.read_text().splitlines() if line.startswith("paused")).count("claude")


def test_a_step_over_its_budget_waits_for_a_person_and_goes_on_when_approved(tmp_path, stub_agents):
    # one recorded Claude Code call costs $0.087125: orient and implement run, verify would cross $0.10
    bare, alice = served_plan(tmp_path, "claude", keys={"brakes": "step_budget_usd = 0.1"})
    said = drain(bare, tmp_path, stub_agents)
    status = listing(alice, tmp_path, "status")
    count = next(s for s in status["steps"] if s["step"] == "01-count")
    assert count["status"] == "review" and not count["failures"], said
    shown = as_pusher("alice", "show", "01-count", "--repo", str(alice), cwd=tmp_path).stdout
    assert "review: budget" in git(bare, "show", "runner/queue:plans/steps/01-count.md")
    assert "$0.1742 spent of its $0.10 budget (step_budget_usd)" in count["last_error"], count["last_error"]
    assert "spent:" in shown
    history = [e for e in queue_history(bare) if e.get("Step") == "01-count"]
    assert [e["Event"] for e in history] == ["claim", "block"] and history[-1]["Review"] == "budget"

    refused = as_pusher("key-a", "approve", "01-count", "--by", "w1", "--repo", str(tmp_path / "w1"), cwd=tmp_path)
    assert refused.returncode != 0  # only a person lets it go on
    assert as_pusher("alice", "approve", "01-count", "--repo", str(alice), cwd=tmp_path).returncode == 0
    said = drain(bare, tmp_path, stub_agents)
    after = statuses(alice, tmp_path)
    assert after["01-count"] == "done" and after["02-cli"] == "review", said  # the next step is held in its turn
    assert not [e for e in queue_history(bare) if e.get("Event") == "fail"]


def test_a_plan_over_its_budget_halts_the_queue(tmp_path, stub_agents):
    bare, alice = served_plan(tmp_path, "claude", keys={"brakes": "plan_budget_usd = 0.3"})
    said = drain(bare, tmp_path, stub_agents)
    status = listing(alice, tmp_path, "status")
    assert status["halted"].startswith("budget_exceeded:plan $0.35 spent of its $0.30 budget"), (status["halted"], said)
    count = next(s for s in status["steps"] if s["step"] == "01-count")
    assert count["status"] == "ready" and not count["failures"]
    history = queue_history(bare)
    halt = next(e for e in history if e.get("Event") == "halt")
    assert halt["Actor"] in ("w1", "w2")  # a worker's key may record the budget's halt; the hook let it
    assert not [e for e in history if e.get("Event") == "fail"]
    assert status["spent"]["usd"] == 0.3485  # four recorded runs of $0.087125


# --- what the server hook lets through ---------------------------------------------------------


def test_the_hook_replays_an_account_pause_and_refuses_a_forged_one(remote, queue):
    from datetime import timedelta

    from runner.core.machine import Kind
    from runner.core.model import utc_now

    until = utc_now() + timedelta(hours=2)
    claim(queue, "w1", "04-d")
    refused(
        remote,
        lambda: forge(
            queue,
            "04-d",
            "release",
            account="claude",
            retry_at=until,
            reason="limit",
            files={"plans/pauses/claude.json": b'{"until": "2099-01-01T00:00:00Z"}\n'},
        ),
        "plans/pauses/claude.json is not the account pause this release writes",
    )
    refused(
        remote,
        lambda: forge(queue, "04-d", "release", account="claude", retry_at=until, reason="limit"),
        "plans/pauses/claude.json is not the account pause this release writes",
    )
    refused(
        remote,
        lambda: forge(queue, "04-d", "release", retry_at=until, reason="limit", says={"account": "../claude"}),
        "names it ('../claude'",
    )
    refused(
        remote,
        lambda: forge(queue, "04-d", "fail", retry_at=until, reason="limit", says={"account": "claude"}),
        "only a release gives a step back",
    )
    accepted_release = record(queue, Kind.RELEASE, "w1", "04-d", account="claude", retry_at=until, reason="limit")
    assert accepted_release.change.status == "ready"
    assert set(queue.snapshot(fetch=True).pauses(utc_now())) == {"claude"}


def test_the_hook_refuses_bad_prices_and_budgets(remote, queue):
    from runner.core.config import DEFAULT_TOML

    bad = (
        DEFAULT_TOML.replace('step_budget_usd = "none"', 'step_budget_usd = "lots"')
        + '\n[prices."claude-sonnet-4-5"]\ninput = -3\n'
    )
    said = refused(
        remote, lambda: push_commit(queue, {"runner.toml": bad.encode()}, "budgets\n", author="alice"), "runner.toml"
    )
    assert "step_budget_usd" in said or "prices" in said
    step = b'---\nstep: 05-e\nrun: ["true"]\nbrakes: {step_budget_usd: -1}\n---\n'
    refused(
        remote,
        lambda: push_commit(queue, {"plans/steps/05-e.md": step}, "add 05-e\n", author="alice"),
        "step_budget_usd",
    )
