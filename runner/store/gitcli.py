"""Starting git: argv only (never a shell), C locale, no prompts, and git's automatic gc
and maintenance off for runner's own calls (runner gc does that on purpose)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from runner.core.layout import HEARTBEAT_PREFIX, heartbeats_seen_from, without_repository_env
from runner.store import StoreError

QUIET_GIT = (
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "core.askPass=",
    "-c",
    "credential.interactive=false",
)


def git_env(inherit_repository: bool = False, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ) if inherit_repository else without_repository_env(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANG": "C", **(extra or {})})
    return env


def run_git(
    cwd: str | Path,
    *args: str,
    check: bool = True,
    input: bytes | None = None,
    timeout: float = 600,
    inherit_repository: bool = False,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run git (argv, never a shell). The one way runner starts a git process. git works on
    the repository at `cwd`, not on one a GIT_DIR (or its kin) in runner's environment names:
    git sets them for its hooks, and a worker started from one must not fetch into, push from
    or check out over another repository. A hook's own git call inherits them. `env`: more
    variables (an author's name for commit-tree, say)."""
    try:
        proc = subprocess.run(
            ["git", *QUIET_GIT, *args],
            cwd=str(cwd),
            env=git_env(inherit_repository, env),
            input=input,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise StoreError(f"git {' '.join(args[:2])} did not answer within {timeout:.0f}s") from exc
    except OSError as exc:
        raise StoreError(f"cannot run git: {exc.strerror} (install git 2.38 or newer)") from exc
    if check and proc.returncode != 0:
        raise StoreError(f"git {' '.join(args[:2])} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc


def config_value(cwd: str | Path, key: str, kind: str | None = None) -> str | None:
    """git's configured value of `key` for the repository at `cwd` (its config, the user's, the
    system's); None when it is not set or git cannot say. `kind` ("bool", "int") has git
    normalise it."""
    try:
        done = run_git(cwd, "config", *([f"--{kind}"] if kind else []), "--get", key, check=False)
    except StoreError:
        return None
    return done.stdout.decode(errors="replace").strip() if done.returncode == 0 else None


def git_version() -> str:
    """What `git --version` says (StoreError when git cannot be started)."""
    return run_git(".", "--version").stdout.decode()


def fetch_args(remote_url: str, remote: str, branches: list[str], heartbeats: bool) -> list[str]:
    """git's arguments for one fetch of the queue's `branches` (and every heartbeat) from the
    remote called `remote` at `remote_url` into runner's view of it: by URL, so git's own
    configured refspecs never update anything else. A refspec with a '*' matches nothing
    without failing: a branch not there yet is fine. A heartbeat ref deleted on the remote
    must vanish from our view too (--prune): its worker chains its next beat on what it sees,
    and a stale view would lose that race for ever."""
    specs = [f"+refs/heads/{b}*:refs/remotes/{remote}/{b}*" for b in dict.fromkeys(branches)]
    if heartbeats:
        specs.append(f"+{HEARTBEAT_PREFIX}*:{heartbeats_seen_from(remote)}*")
    return [
        "fetch",
        "--quiet",
        *(["--prune"] if heartbeats else []),
        "--no-write-fetch-head",
        "--no-tags",
        remote_url,
        *specs,
    ]
