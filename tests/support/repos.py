"""Real git repositories in temp folders and the runner CLI run on them as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from support import zygote

ROOT = Path(__file__).resolve().parents[2]


os.environ.update(
    {
        "GIT_AUTHOR_NAME": "Test Person",
        "GIT_AUTHOR_EMAIL": "person@example.com",
        "GIT_COMMITTER_NAME": "Test Person",
        "GIT_COMMITTER_EMAIL": "person@example.com",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
)


ENV_PATH = {**os.environ, "PYTHONPATH": str(ROOT)}


def git(cwd: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout.strip()


def runner(
    repo: Path, *args: str, check: bool = True, timeout: float = 120, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the real CLI in a process of its own, as a scheduler or a person would (support.zygote)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = zygote.run([*args, "--repo", str(repo)], env=full_env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"runner {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def runner_json(repo: Path, *args: str, env: dict | None = None) -> dict:
    proc = runner(repo, *args, "--json", env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("demo project\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial")
    return path


def make_remote(tmp: Path, clones: int = 1) -> tuple[Path, list[Path]]:
    """A bare remote with a main branch and `clones` working clones."""
    seed = make_repo(tmp / "seed")
    bare = tmp / "remote.git"
    git(tmp, "clone", "-q", "--bare", str(seed), str(bare))
    paths = []
    for index in range(clones):
        clone = tmp / f"clone{index}"
        git(tmp, "clone", "-q", str(bare), str(clone))
        paths.append(clone)
    return bare, paths


def set_config(repo: Path, extra: str = "", **values) -> None:
    """Edit runner.toml on the queue branch (a plan edit, as a person would commit it)."""
    from runner.core.config import DEFAULT_TOML

    text = DEFAULT_TOML
    replacements = {
        "detect": ("detect = true", "detect = {}"),
        "lease": ('lease = "1h"', 'lease = "{}"'),
        "max_attempts": ("max_attempts = 3", "max_attempts = {}"),
        "backoff": ('backoff = "30s"', 'backoff = "{}"'),
        "max_fix_attempts": ("max_fix_attempts = 2", "max_fix_attempts = {}"),
        "test": ("test = []", "test = {}"),
        "harness": ("[harness]\ncommand = []", "[harness]\ncommand = {}"),
        "requires_approval": ("requires_approval = false", "requires_approval = {}"),
        "grace_period": ('grace_period = "30s"', 'grace_period = "{}"'),
        "watch": ('watch = "2s"', 'watch = "{}"'),
        "step_budget": ('step_budget = "none"', 'step_budget = "{}"'),
        "score_plateau_window": ("score_plateau_window = 3", "score_plateau_window = {}"),
        "halt_on_verifier_fault": ("halt_on_verifier_fault = true", "halt_on_verifier_fault = {}"),
        "keep_worktree_on_failure": ("keep_worktree_on_failure = false", "keep_worktree_on_failure = {}"),
    }
    for key, value in values.items():
        if key == "verifier":
            extra += f"\n[roles.verify]\ncommand = {json.dumps(value)}\n"
            continue
        old, new = replacements[key]
        rendered = json.dumps(value) if not isinstance(value, str) or key in ("test", "harness") else value
        if isinstance(value, bool):
            rendered = "true" if value else "false"
        assert old in text, old
        text = text.replace(old, new.format(rendered))
    edit(repo, {"runner.toml": (text + extra).encode()}, "configure runner")


def edit(repo: Path, files: dict, summary: str = "edit the plan", remote: str | None = "auto") -> str:
    """A person's plan edit, committed and published as `runner add` would."""
    from runner.queue.queue import open_queue

    return open_queue(repo, remote=remote).edit(lambda snap: files, summary, "tester").commit


def step_file(step_id: str, title: str | None = None, body: str = "", **fields) -> tuple[str, bytes]:
    """(path, content) of a new step file; a step without `run:` gets a harmless one (run=None: none)."""
    from runner.core.layout import new_step_path
    from runner.core.stepfile import render_new_step

    fields.setdefault("run", ["true"])
    if fields["run"] is None:
        del fields["run"]
    return new_step_path(step_id, False), render_new_step(step_id, title or step_id, fields, body).encode()


def add_step(repo: Path, step_id: str, title: str | None = None, **fields) -> None:
    """Commit a step file straight onto the queue branch."""
    path, data = step_file(step_id, title, fields.pop("body", ""), **fields)
    edit(repo, {path: data}, f"add {step_id}")


def queue_moves(repo: Path, branch: str = "runner/queue") -> list[str]:
    """What each update of the queue branch in `repo` left at its tip, oldest first, from its
    reflog: "claim s1", "complete s2", ... (a bare remote keeps one with core.logAllRefUpdates)."""
    subjects = git(repo, "reflog", "show", "--format=%s", f"refs/heads/{branch}").splitlines()[::-1]
    return [subject.split(" (")[0] for subject in subjects]


def queue_history(repo: Path, branch: str = "runner/queue") -> list[dict]:
    """Every queue commit oldest first, with its trailers."""
    from runner.core.codec import trailers_of as parse_trailers

    out = git(repo, "log", "--reverse", "--format=%H%x00%B%x1e", branch)
    entries = []
    for record in out.split("\x1e"):
        record = record.strip()
        if not record:
            continue
        commit, _, message = record.partition("\x00")
        entries.append({"commit": commit, **parse_trailers(message)})
    return entries


def tick(repo: Path, worker: str = "w1", env: dict | None = None) -> dict:
    proc = runner(repo, "tick", "--id", worker, "--json", env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def start_worker(repo: Path, worker: str, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "worker", "--id", worker, "--repo", str(repo), "--interval", "0.2", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**ENV_PATH, **(env or {})},
    )


def wait_for(predicate, timeout: float = 60, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out waiting")


def statuses(repo: Path) -> dict[str, str]:
    return {s["step"]: s["status"] for s in runner_json(repo, "status")["steps"]}


def write_step(path: str) -> list[str]:
    return ["sh", "-c", f'echo "$RUNNER_STEP attempt $RUNNER_ATTEMPT" > {path}']


STUB = [sys.executable, str(Path(__file__).parents[1] / "stubs" / "role.py")]


def roles_toml(**roles: list[str]) -> str:
    """[roles.*] tables; the review always looks (min_files = 0) unless a test says otherwise."""
    text = ""
    for name, command in roles.items():
        text += f"\n[roles.{name}]\ncommand = {json.dumps(command)}\n" + ("min_files = 0\n" if name == "review" else "")
    return text


def handoff(repo: Path, step_id: str) -> str:
    return git(repo, "show", f"runner/queue:plans/handoffs/{step_id}.md")


WRITE = ["sh", "-c", 'echo "$1" >> out.txt', "sh", "{feedback}"]
