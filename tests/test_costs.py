"""What agent runs cost, end to end (issue 43): stub CLIs printing each real CLI's recorded
output (tests/data/agents) drive the whole pipeline on two workers over a bare remote under
the server hook with identities, each role run by another preset's command, and `runner
cost --json` accounts for every call the stubs saw, exactly; the step files, `runner log`
and `runner show` say the same."""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from datetime import UTC, datetime

from support.agentplan import as_pusher, drain, read_case, served_plan, side_folder, statuses
from support.repos import git, queue_history

from runner.agents.presets import PRESETS, preset_tables
from runner.core.config import parse_config
from runner.core.usage import Spend, Usage

# Each role of the pipeline is run by another agent CLI's preset command.
ROLE_PRESETS = {
    "harness": "claude",
    "roles.orient": "codex",
    "roles.verify": "gemini",
    "roles.review": "opencode",
    "roles.sweep": "aider",
    "roles.orchestrate": "claude",
}
PRICES = '\n[prices."gemini-2.5-pro"]\ninput = 1.25\noutput = 10.0\ncache_read = 0.31\n'


def test_every_preset_runs_a_role_in_the_drain_below():  # no other test drains every preset
    assert set(ROLE_PRESETS.values()) == {name for name, preset in PRESETS.items() if preset.program}


def toml_value(value) -> str:
    return json.dumps(value) if not isinstance(value, bool) else str(value).lower()


def mixed_tables() -> str:
    lines = []
    for table, preset in ROLE_PRESETS.items():
        data = tomllib.loads(preset_tables(preset))
        values = data["harness"] if table == "harness" else data["roles"][table.split(".", 1)[1]]
        lines += [f"[{table}]", *(f"{key} = {toml_value(value)}" for key, value in values.items()), ""]
    return "\n".join(lines)


def per_call() -> dict[str, Usage]:
    """What runner reads from one call of each stub CLI, priced as the plan's [prices] price it."""
    prices = parse_config(PRICES).prices
    return {
        cli: read_case(f"{cli}-success").usage.priced(prices)
        for cli in ("claude", "codex", "gemini", "opencode", "aider")
    }


def test_cost_accounts_for_every_agent_call_of_every_preset_exactly(tmp_path, stub_agents):
    calls_file = side_folder(tmp_path) / "calls.txt"
    bare, alice = served_plan(tmp_path, "claude", tables=mixed_tables(), extra=PRICES)
    said = drain(bare, tmp_path, {**stub_agents, "STUB_AGENT_CALLS": str(calls_file)})
    assert statuses(alice, tmp_path) == {"01-count": "done", "02-cli": "done", "03-tests": "review"}, said
    calls = [line.split() for line in calls_file.read_text().splitlines()]
    assert {cli for cli, _, _ in calls} == {"claude", "codex", "gemini", "opencode", "aider"}, calls

    usage = per_call()
    expected = Spend()
    by_step: dict[str, Spend] = {}
    for cli, _, step in calls:
        expected = expected.add(usage[cli])
        by_step[step] = by_step.get(step, Spend()).add(usage[cli])
    done = as_pusher("alice", "cost", "--json", "--repo", str(alice), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    total = {k: v for k, v in report["total"].items() if k != "money"}
    assert total == expected.as_json()
    assert total["runs"] == len(calls) and total["unknown"] == 0
    assert total["unpriced"] == Counter(cli for cli, _, _ in calls)["codex"]  # codex names no model: no price
    assert total["estimated"] == Counter(cli for cli, _, _ in calls)["gemini"]  # priced from [prices]
    assert {row["step"]: {k: v for k, v in row.items() if k not in ("step", "money")} for row in report["steps"]} == {
        step: spend.as_json() for step, spend in by_step.items()
    }
    assert "estimate" in report["total"]["money"]

    # the same spend by worker and by role; the step files keep each step's sum
    for by in ("worker", "role", "day"):
        grouped = json.loads(
            as_pusher("alice", "cost", "--json", "--by", by, "--repo", str(alice), cwd=tmp_path).stdout
        )
        assert sum(g["runs"] for g in grouped["groups"]) == len(calls)
        assert round(sum(g["usd"] for g in grouped["groups"]), 6) == expected.usd
    roles = json.loads(as_pusher("alice", "cost", "--json", "--by", "role", "--repo", str(alice), cwd=tmp_path).stdout)
    assert {g["role"]: g["runs"] for g in roles["groups"]} == dict(Counter(role for _, role, _ in calls))
    workers = json.loads(
        as_pusher("alice", "cost", "--json", "--by", "worker", "--repo", str(alice), cwd=tmp_path).stdout
    )
    assert {g["worker"] for g in workers["groups"]} <= {"w1", "w2"}
    days = json.loads(as_pusher("alice", "cost", "--json", "--by", "day", "--repo", str(alice), cwd=tmp_path).stdout)
    assert [g["day"] for g in days["groups"]] == [datetime.now(UTC).strftime("%Y-%m-%d")]
    rows = json.loads(as_pusher("alice", "status", "--json", "--repo", str(alice), cwd=tmp_path).stdout)["steps"]
    assert {row["step"]: row["usage"] for row in rows} == {step: spend.as_json() for step, spend in by_step.items()}

    # each run on the record names its model and says whose money it is
    history = [entry for entry in queue_history(bare) if entry.get("Event") == "complete"]
    runs = [run for entry in history for run in json.loads(entry["Runs"])]
    implement = next(run for run in runs if run["name"] == "implement")
    assert implement["model"] == "claude-sonnet-4-5-20250929" and implement["usage"]["usd_from"] == "claude"
    verify = next(run for run in runs if run["name"] == "verify")
    assert verify["model"] == "gemini-2.5-pro" and verify["usage"]["usd_from"] == "prices"
    shown = as_pusher("alice", "log", "01-count", "--repo", str(alice), cwd=tmp_path).stdout
    assert "by claude" in shown and "estimated from [prices]" in shown and "spent: $" in shown, shown
    assert "spent:" in as_pusher("alice", "show", "01-count", "--repo", str(alice), cwd=tmp_path).stdout
    text = as_pusher("alice", "cost", "--repo", str(alice), cwd=tmp_path).stdout
    assert "total" in text and "estimate" in text and "gave tokens but no money" in text, text
    handoff = git(bare, "show", "runner/queue:plans/handoffs/01-count.md")
    assert "by claude" in handoff, handoff


def test_cost_refuses_what_it_cannot_group_by(tmp_path):
    from support.hooked import cli
    from support.repos import make_repo

    repo = make_repo(tmp_path / "repo")
    assert cli("init", "--repo", str(repo), cwd=tmp_path).returncode == 0
    done = cli("cost", "--by", "month", "--repo", str(repo), cwd=tmp_path)
    assert done.returncode == 2 and "one of step, worker, role, day" in done.stderr
    empty = json.loads(cli("cost", "--json", "--repo", str(repo), cwd=tmp_path).stdout)
    assert empty["total"]["runs"] == 0 and empty["steps"] == []
