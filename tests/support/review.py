"""The review surface: a hooked remote with people and worker keys, clones, a board, a browser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from support.repos import ENV_PATH, git, wait_for

BROWSER = "/usr/bin/chromium"


BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


PEOPLE_ENV = {"RUNNER_PUSHER": "alice"}


WORKER_ENV = {"w1": {"RUNNER_PUSHER": "key-a"}, "w2": {"RUNNER_PUSHER": "key-b"}}


def review_remote(
    tmp: Path, steps: tuple = (), notify: list[str] | None = None, extra_toml: str = "", live_log: str = "0.2s"
) -> tuple[Path, Path]:
    """A bare remote under runner's hook with [hooks] identities (people alice and bob, worker
    keys key-a as w1 and key-b as w2), its queue made and `steps` ((id, fields) pairs) added by
    alice, with `notify` as its [notify] command and heartbeats that carry a running step's
    output every `live_log`; and alice's clone, where git's user.name is alice. The caller's process must push as
    alice: monkeypatch.setenv("RUNNER_PUSHER", "alice") first (a local push hands its
    environment to the hook, as a git host names its users)."""
    from runner.core.config import DEFAULT_TOML
    from support.hooked import IDENTITIES, add_steps, clone, hooked_remote

    assert os.environ.get("RUNNER_PUSHER") == "alice", "push as alice: monkeypatch.setenv('RUNNER_PUSHER', 'alice')"
    bare = hooked_remote(tmp / "remote.git")
    laptop = tmp / "laptop"
    queue = clone(bare, laptop)
    git(laptop, "config", "user.name", "alice")
    toml = DEFAULT_TOML.replace("detect = true", "detect = false").replace(
        "[notify]\ncommand = []", f"[notify]\ncommand = {json.dumps(notify or [])}"
    )
    toml = toml.replace('live_log = "5s"', f'live_log = "{live_log}"')
    queue.init("alice", files={"runner.toml": (toml + IDENTITIES + extra_toml).encode()})
    if steps:
        add_steps(queue, *[(step_id, dict(fields)) for step_id, fields in steps])
    return bare, laptop


def worker_clone(bare: Path, path: Path) -> Path:
    """Another machine's clone of the queue's remote, for a worker."""
    git(bare.parent, "clone", "-q", str(bare), str(path))
    return path


def start_board(repo: Path, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, str, Path]:
    """`runner board --port 0` on `repo` as its person would start it (from the clone, so
    git's user.name there names them); (the process, the address it printed, its stderr file)."""
    out, err = (
        repo.parent / f"board-{os.getpid()}-{time.monotonic_ns()}.out",
        repo.parent / f"board-{time.monotonic_ns()}.err",
    )
    with open(out, "w") as stdout, open(err, "w") as stderr:  # the board keeps its own copies of both
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "board", "--port", "0", "--every", "0.3", *args],
            cwd=repo,
            stdout=stdout,
            stderr=stderr,
            env={**ENV_PATH, **PEOPLE_ENV, **(env or {})},
        )

    def address():
        if proc.poll() is not None:
            raise AssertionError(f"runner board exited {proc.returncode}: {err.read_text()}")
        line = next((l for l in out.read_text().splitlines() if l.startswith("runner board")), None)
        return line.split(" on ", 1)[1].strip() if line else None

    return proc, wait_for(address, timeout=60, every=0.1), err


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
