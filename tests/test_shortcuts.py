"""Answers runner gives without loading its command line (runner.commands.quick): `runner
ready` and `runner status` from the saved plan index, `runner --help` from the help it printed
last. Each is the full command's answer, and only while what it was made from is unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.repos import ROOT, add_step, edit, git, make_remote, runner, set_config

SHORTCUT = """
import json, sys
from runner.commands.quick import answer
answered = answer(sys.argv[1:])
loaded = sorted(m for m in ("pygit2", "typer", "yaml", "pydantic") if m in sys.modules)
print(json.dumps({"answered": answered, "loaded": loaded}), file=sys.stderr)
"""


def shortcut(repo: Path, *args: str, cwd: Path | None = None) -> tuple[bool, str, list[str]]:
    """Ask the shortcut alone, in a fresh process: (answered, what it printed, heavy modules it loaded)."""
    proc = subprocess.run(
        [sys.executable, "-c", SHORTCUT, *args, "--repo", str(repo)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    return report["answered"], proc.stdout, report["loaded"]


def plan(repo: Path) -> None:
    add_step(repo, "a", run=["true"])
    add_step(repo, "b", run=["true"], depends_on=["a"])
    add_step(repo, "c", priority=5, agent="self", run=None)  # no worker takes it: ready, and no claim of w1
    add_step(repo, "d", run=["true"], not_before="2999-01-01T00:00:00Z")


def test_an_unchanged_local_queue_is_answered_from_the_index_exactly_as_the_full_command_answers(queue_repo):
    plan(queue_repo)
    for args in (["--json"], [], ["--tag", "gpu", "--json"], ["--tag=gpu", "--all"]):
        full = runner(queue_repo, "ready", *args).stdout  # reads the queue with git and saves the index
        answered, quick, loaded = shortcut(queue_repo, "ready", *args)
        assert answered and quick == full and loaded == [], args
    ids = [row["step"] for row in json.loads(runner(queue_repo, "ready", "--json").stdout)["steps"]]
    assert ids == ["a"]  # c is for an agent you run, b waits for a, d backs off


def test_a_ready_step_with_tags_is_answered_by_the_full_command_which_knows_the_live_workers(queue_repo):
    plan(queue_repo)
    add_step(queue_repo, "e", run=["true"], tags=["gpu"])  # stuck or not: only the workers' heartbeats say
    runner(queue_repo, "ready", "--json")
    answered, _, _ = shortcut(queue_repo, "ready", "--json")
    assert not answered
    assert "e" in runner(queue_repo, "ready", "--json", "--tag", "gpu").stdout


def test_status_of_an_unchanged_local_queue_is_the_full_commands_invalid_steps_included(queue_repo):
    plan(queue_repo)
    edit(
        queue_repo,
        {
            "plans/steps/e.md": b"---\ntitle: E\npriority: high\n---\n",  # invalid, with an index
            "plans/steps/f.md": b"---\ntimeout: banana\n---\n",  # invalid, no key of the index
            "plans/steps/g.md": b"---\n: [\n---\n",  # frontmatter that does not parse
        },
        "add invalid steps",
    )
    runner(queue_repo, "claim", "--id", "w1")  # a is claimed: an assignee, an attempt, an age
    for args in (["--json"], [], ["--all"]):
        full = runner(queue_repo, "status", *args).stdout
        answered, quick, loaded = shortcut(queue_repo, "status", *args)
        assert answered and quick == full and loaded == [], args
    rows = {row["step"]: row for row in json.loads(runner(queue_repo, "status", "--json").stdout)["steps"]}
    assert {step: row["status"] for step, row in rows.items()} == {
        "a": "claimed",
        "b": "waiting",
        "c": "ready",
        "d": "ready",
        "e": "invalid",
        "f": "invalid",
        "g": "invalid",
    }
    assert (rows["e"]["stored_status"], rows["f"]["stored_status"], rows["g"]["stored_status"]) == (
        "ready",
        "ready",
        None,
    )
    assert all(rows[step]["problems"] for step in "efg")


def test_status_options_it_does_not_know_go_to_the_full_command(queue_repo):
    plan(queue_repo)
    runner(queue_repo, "status")
    for args in (["--watch"], ["--every", "1"], ["--tag", "gpu"], ["--help"]):
        assert shortcut(queue_repo, "status", *args)[0] is False, args
    assert runner(queue_repo, "status", "--tag", "gpu", check=False).returncode == 2


def test_the_index_is_not_used_once_the_queue_moved(queue_repo):
    plan(queue_repo)
    runner(queue_repo, "ready")
    runner(queue_repo, "claim", "--id", "w1")  # moves the branch: a is claimed
    assert shortcut(queue_repo, "ready", "--json")[0] is False
    assert shortcut(queue_repo, "status", "--json")[0] is False
    assert json.loads(runner(queue_repo, "ready", "--json").stdout)["steps"] == []
    runner(queue_repo, "halt", "--by", "tester", "--reason", "maintenance")
    runner(queue_repo, "ready")
    answered, out, _ = shortcut(queue_repo, "ready", "--json")
    assert answered and json.loads(out) == {"halted": "maintenance", "steps": [], "held_back": [], "stuck": []}


def test_a_packed_branch_is_read_and_an_index_from_other_code_or_tampered_is_not_used(queue_repo):
    plan(queue_repo)
    runner(queue_repo, "ready")
    git(queue_repo, "pack-refs", "--all")  # the tip now lives in packed-refs only
    assert shortcut(queue_repo, "ready")[0] is True
    index = queue_repo / ".git" / "runner" / "plan-index.json"
    data = json.loads(index.read_text())
    index.write_text(json.dumps({**data, "code": ["an older runner"]}))
    assert shortcut(queue_repo, "ready")[0] is False
    index.write_text(json.dumps({**data, "steps": [["a", "plans/steps/a.md", {"priority": "high"}]]}))  # tampered
    assert shortcut(queue_repo, "ready")[0] is False
    assert runner(queue_repo, "ready", "--json").returncode == 0


def test_a_clone_fetches_first_and_answers_from_the_index_only_while_the_fetched_tip_is_the_one_it_read(tmp_path):
    _, (mine, theirs) = make_remote(tmp_path, clones=2)
    runner(mine, "init")
    set_config(mine, detect=False)
    plan(mine)
    full = runner(mine, "ready", "--json").stdout
    answered, quick, loaded = shortcut(mine, "ready", "--json")
    assert answered and quick == full and loaded == []
    runner(theirs, "claim", "--id", "w2")  # the remote moves: `a` is claimed on another clone
    assert shortcut(mine, "ready", "--json")[0] is False  # the fetch brought a tip the index was not read at
    moved = runner(mine, "ready", "--json").stdout
    assert [
        row["step"] for row in json.loads(moved)["steps"]
    ] == []  # a claimed, b waits on it, c is an agent's, d backs off
    answered, quick, _ = shortcut(mine, "ready", "--json")
    assert answered and quick == moved
    assert shortcut(mine, "ready", "--remote", "origin")[0] is False  # a named remote: the full command


def test_options_the_shortcut_does_not_know_go_to_the_full_command(queue_repo):
    plan(queue_repo)
    runner(queue_repo, "ready")
    for args in (["--help"], ["--bogus"], ["--tag"], ["--queue-branch", "elsewhere"]):
        assert shortcut(queue_repo, "ready", *args)[0] is False, args
    assert "Usage" in runner(queue_repo, "ready", "--help").stdout
    assert runner(queue_repo, "ready", "--bogus", check=False).returncode == 2


def help_run(cache: Path, *args: str, columns: int = 100) -> tuple[str, bool]:
    """`runner ARGS` in a fresh process with `cache` as XDG_CACHE_HOME: (its output, whether it
    imported typer, i.e. rendered the help itself)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cache), "COLUMNS": str(columns)}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "runner", *args], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, any(line.split("|")[-1].strip() == "typer" for line in proc.stderr.splitlines())


def test_help_is_printed_from_the_last_rendering_while_nothing_it_is_made_of_changed(tmp_path):
    cache = tmp_path / "cache"
    rendered, loaded_typer = help_run(cache, "--help")
    assert loaded_typer and "Usage: python -m runner [OPTIONS] COMMAND" in rendered and "install-schedule" in rendered
    for args in (["--help"], ["-h"], []):
        assert help_run(cache, *args) == (rendered, False), args
    narrow, loaded_typer = help_run(cache, "--help", columns=60)  # click wraps to the terminal: rendered again
    assert loaded_typer and narrow != rendered and max(map(len, narrow.splitlines())) <= 58
    assert help_run(cache, "--help", columns=60) == (narrow, False)
    saved = cache / "runner" / "help.json"
    data = json.loads(saved.read_text())
    saved.write_text(json.dumps({**data, "key": [["runner 0.0.1"], *data["key"][1:]]}))  # from other code
    assert help_run(cache, "--help", columns=60) == (narrow, True)


def test_help_is_printed_when_it_cannot_be_kept(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    for _ in range(2):
        out, loaded_typer = help_run(blocked, "--help")
        assert loaded_typer and out.startswith("Usage: python -m runner")
