"""The client's check (pre-commit): a commit that adds or changes plan files must pass
`runner validate` for those files; a changed runner.toml must follow the schema."""

from __future__ import annotations

import sys
from pathlib import Path

from runner.core.errors import BadInput
from runner.core.layout import CONFIG_FILE, is_step_file
from runner.core.plan import Plan
from runner.core.treefiles import StepFiles


def staged_problems(repo_path: str | Path = ".") -> list[str]:
    """`runner validate` for the plan files a commit adds or changes, read from the index."""
    from runner.store.choice import open_store

    store = open_store(repo_path, remote=None)
    files = StepFiles(store)
    entries, changed = store.workspace().staged_files()
    problems: list[str] = []
    if CONFIG_FILE in changed:
        try:
            files.config(next(store.read(e.oid) for e in entries if e.path == CONFIG_FILE))
        except BadInput as exc:
            problems += exc.problems
    if not any(is_step_file(name) for name in changed):
        return problems
    steps = [files.step(e.path, e.oid, e.link) for e in entries if is_step_file(e.path)]
    plan = Plan.build(steps)
    return problems + [f"{s.path}: {p}" for s in plan.invalid if s.path in changed for p in s.problems]


def run_pre_commit(repo_path: str | Path = ".") -> int:
    problems = staged_problems(repo_path)
    if problems:
        print(f"runner: the commit is blocked, {len(problems)} problem(s) in plan files:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
    return 1 if problems else 0
