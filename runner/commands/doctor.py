"""`runner doctor`: what is wrong with this machine or repository, and what to do about it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

MIN_GIT = (2, 38)


def _check(name: str, result: str, detail: str) -> dict[str, Any]:
    return {"name": name, "result": result, "detail": detail}


def git_version() -> dict[str, Any]:
    try:
        out = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    except OSError:
        return _check("git", "fail", "git is not installed (install git 2.38 or newer)")
    match = re.search(r"(\d+)\.(\d+)", out)
    version = tuple(int(x) for x in match.groups()) if match else (0, 0)
    if version < MIN_GIT:
        return _check("git", "fail", f"{out.strip()}: runner needs git {MIN_GIT[0]}.{MIN_GIT[1]} or newer")
    return _check("git", "ok", out.strip())


def run_checks(repo: Path, remote: str | None, queue_branch: str) -> list[dict[str, Any]]:
    from runner.store.git import GitError
    from runner.core.model import BadInput
    from runner.queue.queue import NotInitialised, open_queue

    checks = [_check("python", "ok", sys.version.split()[0]), git_version()]
    try:
        queue = open_queue(repo, remote=None if remote == "none" else (remote or "auto"), branch=queue_branch)
    except GitError as exc:
        return checks + [_check("repository", "fail", str(exc))]
    store = queue.store
    checks.append(_check("repository", "ok", str(store.workdir)))
    if store.remote:
        try:
            store.remote_branches()
            checks.append(_check("remote", "ok", f"{store.remote} ({store.remote_url}) answers"))
        except GitError as exc:
            return checks + [_check("remote", "fail", f"{exc} (check the URL, network and credentials)")]
    else:
        checks.append(_check("remote", "warn", "no remote: workers on this machine share this repository"))
    try:
        snap = queue.snapshot()
    except NotInitialised as exc:
        return checks + [_check("queue", "fail", str(exc))]
    except BadInput as exc:
        return checks + [_check("queue", "fail", "; ".join(exc.problems))]
    checks.append(_check("queue", "ok", f"{queue_branch} @ {snap.tip[:10]}, {len(snap.plan.steps)} valid steps"))
    problems = snap.plan.problems
    checks.append(_check("plan", "fail" if problems else "ok", f"{len(problems)} problem(s): runner validate" if problems else "sound"))
    integration = snap.config.integration_branch
    store.fetch([integration])
    checks.append(
        _check("integration", "ok", f"{integration} exists")
        if store.tip(integration)
        else _check("integration", "fail", f"no {integration} branch: run `runner init`")
    )
    if snap.plan.halted:
        checks.append(_check("halt", "warn", f"queue halted: {snap.plan.halted} (runner resume)"))
    checks.append(resources(store.runner_dir, snap.config))
    return checks


def resources(folder: Path, config) -> dict[str, Any]:
    import psutil

    memory = psutil.virtual_memory().available
    disk = shutil.disk_usage(folder).free
    detail = f"{memory >> 20} MiB memory and {disk >> 20} MiB disk free"
    if memory < config.min_free_memory or disk < config.min_free_disk:
        return _check("resources", "fail", detail + " (below the [worker] floor in runner.toml: ticks will skip)")
    return _check("resources", "ok", detail)
