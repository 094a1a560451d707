"""Caches keyed by content (issue 34, point 6): the parse cache, the plan index of `runner
ready` / `status` and the saved `runner --help` are keyed by a hash of runner's own source
(runner.core.fingerprint) and their input (a step file's blob id, the queue's tip), never by
a hand-kept list of the files someone thought mattered. A change to any rule, anywhere in the
package, is read again.

The tests change a copy of the package, never the repository's own files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.repos import ROOT, edit, make_repo, runner

DEEP_STEP = b'---\ntitle: deep\nrun: ["true"]\nnotes: {a: {b: {c: {d: 1}}}}\n---\n'


def copy_package(tmp_path: Path) -> Path:
    """A copy of the runner package in a folder of its own, for PYTHONPATH; returns that folder."""
    code = tmp_path / "code"
    shutil.copytree(ROOT / "runner", code / "runner", ignore=shutil.ignore_patterns("__pycache__"))
    return code


def runner_from(code: Path, repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The CLI of the copy at `code`, started outside this checkout (`python -m` puts the
    current folder first on the path)."""
    done = subprocess.run(
        [sys.executable, "-m", "runner", *args, "--repo", str(repo)],
        cwd=repo.parent,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(code)},
    )
    assert not check or done.returncode == 0, (
        f"runner {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done


def change(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name} no longer says {old!r}"
    path.write_text(text.replace(old, new))


def test_the_package_hash_changes_with_every_module_and_nothing_else(tmp_path: Path):
    from runner.core.fingerprint import PACKAGE, package_hash, source_hash

    assert package_hash() == source_hash(PACKAGE) == source_hash(ROOT / "runner")
    package = copy_package(tmp_path) / "runner"
    before = source_hash(package)
    assert before == package_hash()
    modules = sorted(package.rglob("*.py"))
    assert len(modules) > 60
    seen = {before}
    for module in modules:
        original = module.read_bytes()
        module.write_bytes(original + b"\n")  # the smallest change there is
        changed = source_hash(package)
        assert changed not in seen, f"changing {module.relative_to(package)} left the hash as it was"
        seen.add(changed)
        module.write_bytes(original)
    assert source_hash(package) == before
    (package / "core" / "__pycache__").mkdir(exist_ok=True)
    (package / "core" / "__pycache__" / "stale.py").write_text("x = 1\n")
    (package / "agents" / "prompts" / "verify.md").write_text("not code\n")
    assert source_hash(package) == before  # compiled files and data are not the source
    (package / "core" / "extra.py").write_text("")
    assert source_hash(package) != before  # a new module is a change


def test_every_cache_key_follows_the_package(tmp_path: Path):
    code = copy_package(tmp_path)
    probe = (
        "import json; from runner.queue.snapshot import _rules_version; from runner.commands import quick; "
        "print(json.dumps([_rules_version(), quick.code_stamp(), quick._help_key()]))"
    )

    def keys() -> list:
        done = subprocess.run(
            [sys.executable, "-c", probe],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(code)},
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    first = keys()
    assert keys() == first  # the same code, the same keys
    for module, old, new in (
        ("core/yamlsafe.py", "MAX_YAML_DEPTH = 20", "MAX_YAML_DEPTH = 19"),
        ("worker/daemon.py", '"""', '"""A word more. '),
    ):
        change(code / "runner" / module, old, new)
        now = keys()
        assert all(a != b for a, b in zip(first[:3], now[:3])), f"a change to {module} left a cache key as it was"
        first = now


def test_a_changed_rule_is_never_answered_from_a_cache(tmp_path: Path):
    """The issue's case: lowering yamlsafe's depth limit must not leave 'plan is sound' in the
    parse cache, nor the step ready in the index `runner ready` answers from."""
    code = copy_package(tmp_path)
    repo = make_repo(tmp_path / "repo")
    runner_from(code, repo, "init")
    others = {f"plans/steps/s{n:02d}.md": b'---\ntitle: s\nrun: ["true"]\ndepends_on: [deep]\n---\n' for n in range(25)}
    edit(
        repo, {"plans/steps/deep.md": DEEP_STEP, **others}, "a step nested four deep, and enough to keep a parse cache"
    )

    assert runner_from(code, repo, "validate").stdout.strip() == "plan is sound"  # parsed, and cached
    for _ in range(2):  # the full command saves the index; the second answers from it
        assert [s["step"] for s in json.loads(runner_from(code, repo, "ready", "--json").stdout)["steps"]] == ["deep"]
    assert (repo / ".git" / "runner" / "parsed-steps.jsonl").exists() and (
        repo / ".git" / "runner" / "plan-index.json"
    ).exists()

    change(code / "runner" / "core" / "yamlsafe.py", "MAX_YAML_DEPTH = 20", "MAX_YAML_DEPTH = 3")
    refused = runner_from(code, repo, "validate", check=False)
    assert refused.returncode == 2 and "nests deeper than 3 levels" in refused.stderr, refused.stderr
    assert json.loads(runner_from(code, repo, "ready", "--json").stdout)["steps"] == []
    rows = {
        row["step"]: row["status"] for row in json.loads(runner_from(code, repo, "status", "--json").stdout)["steps"]
    }
    assert rows["deep"] == "invalid" and rows["s00"] == "blocked"


@pytest.mark.parametrize("command", ["ready", "status"])
def test_the_index_is_read_again_when_the_queue_moves(tmp_path: Path, command: str):
    """The other half of the key: the queue's tip. A step added after the index was saved shows."""
    repo = make_repo(tmp_path / "repo")
    runner(repo, "init")
    edit(repo, {"plans/steps/a.md": b'---\ntitle: a\nrun: ["true"]\n---\n'}, "add a")
    for _ in range(2):
        runner(repo, command, "--json")
    edit(repo, {"plans/steps/b.md": b'---\ntitle: b\nrun: ["true"]\n---\n'}, "add b")
    assert sorted(s["step"] for s in json.loads(runner(repo, command, "--json").stdout)["steps"]) == ["a", "b"]


def test_a_fresh_claim_appends_the_steps_it_parsed_and_the_next_parses_only_what_moved_since(tmp_path: Path):
    """A claim from a script's loop reads the plan from the cache: what one process parsed (the
    step the claim before it wrote) is appended, so the next one does not parse it again."""
    repo = make_repo(tmp_path / "repo")
    runner(repo, "init")
    edit(
        repo,
        {f"plans/steps/s{n:02d}.md": f'---\ntitle: step {n}\nrun: ["true"]\n---\n'.encode() for n in range(25)},
        "25 steps",
    )
    runner(repo, "validate")  # parses every step and writes the cache afresh
    cache = repo / ".git" / "runner" / "parsed-steps.jsonl"
    written = cache.read_text().splitlines()

    def blob(step: str) -> str:
        return subprocess.run(
            ["git", "rev-parse", f"runner/queue:plans/steps/{step}.md"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    claimed = [json.loads(runner(repo, "claim", "--id", f"w{n}", "--json").stdout)["step"] for n in range(3)]
    lines = cache.read_text().splitlines()
    assert lines[: len(written)] == written  # appended to, never written afresh for a step or two
    rows = [json.loads(line) for line in lines[len(written) :]]
    headers = [row for row in rows if isinstance(row, dict)]
    parsed = [row[1] for row in rows if isinstance(row, list)]
    # The second claim parsed the step the first wrote, the third the second's; each once.
    assert parsed == [blob(claimed[0]), blob(claimed[1])] and len(headers) == 2
