"""A bare remote under the server hook with [hooks] identities, drained by real workers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.repos import ENV_PATH, git, make_repo, runner, start_worker, step_file

SERVED_WORKERS = {"w1": "key-1", "w2": "key-2", "w3": "key-3"}


SERVED_IDENTITIES = """
[hooks]
pusher_env = "RUNNER_PUSHER"
people = ["alice"]
admins = ["alice"]

[hooks.identities]
key-1 = ["w1"]
key-2 = ["w2"]
key-3 = ["w3"]
"""


def as_pusher(pusher: str, *args: str, repo: Path) -> subprocess.CompletedProcess:
    """The real CLI as `pusher` (a local push hands the pusher's environment to the hook)."""
    return runner(repo, *args, env={"RUNNER_PUSHER": pusher})


def served(tmp_path: Path, toml: bytes, steps: dict[str, dict]) -> tuple[Path, Path]:
    """A bare remote guarded by runner's hook (`install-hooks --server`), its queue set up by
    alice (an admin) with this runner.toml, identities for w1..w3, and these steps.
    (the remote, alice's clone)"""
    from runner.queue.queue import open_queue

    project = make_repo(tmp_path / "project")
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(project), str(bare))
    installed = subprocess.run(
        [sys.executable, "-m", "runner", "install-hooks", "--server", str(bare)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=ENV_PATH,
        timeout=120,
    )
    assert installed.returncode == 0, installed.stderr
    alice = tmp_path / "alice"
    git(tmp_path, "clone", "-q", str(bare), str(alice))
    queue = open_queue(alice)
    queue.init("alice")
    files = {"runner.toml": toml + SERVED_IDENTITIES.encode()}
    for step_id, fields in steps.items():
        path, data = step_file(
            step_id, step_id, fields.get("body", ""), **{k: v for k, v in fields.items() if k != "body"}
        )
        files[path] = data
    queue.edit(lambda snap: files, "the plan, people and worker keys", "alice")
    return bare, alice


def drain(bare: Path, tmp_path: Path, workers: dict[str, str] = SERVED_WORKERS) -> dict[str, str]:
    """Each worker, with its own clone and key, drains what it can (`runner worker --once`);
    what each printed. Every push must have been accepted by the hook."""
    procs = {}
    for worker, key in workers.items():
        clone = tmp_path / worker
        if not clone.exists():
            git(tmp_path, "clone", "-q", str(bare), str(clone))
        procs[worker] = start_worker(clone, worker, "--once", env={"RUNNER_PUSHER": key})
    said = {}
    for worker, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        said[worker] = out + err
        assert proc.returncode == 0, said
    assert not [w for w, text in said.items() if "refused" in text], said
    return said


def served_statuses(alice: Path) -> dict[str, str]:
    return {
        s["step"]: s["status"] for s in json.loads(as_pusher("alice", "status", "--json", repo=alice).stdout)["steps"]
    }
