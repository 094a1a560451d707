"""`runner doctor`: what is wrong with this machine or repository, and what to do about it."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

MIN_GIT = (2, 38)


def _check(name: str, result: str, detail: str) -> dict[str, Any]:
    return {"name": name, "result": result, "detail": detail}


def git_version() -> dict[str, Any]:
    from runner.store import StoreError
    from runner.store.gitcli import git_version as git_says

    try:
        out = git_says()
    except StoreError:
        return _check("git", "fail", "git is not installed (install git 2.38 or newer)")
    match = re.search(r"(\d+)\.(\d+)", out)
    version = tuple(int(x) for x in match.groups()) if match else (0, 0)
    if version < MIN_GIT:
        return _check("git", "fail", f"{out.strip()}: runner needs git {MIN_GIT[0]}.{MIN_GIT[1]} or newer")
    return _check("git", "ok", out.strip())


def step_start() -> list[dict[str, Any]]:
    """On Linux, whether step commands start by setpriv (cheap) or by forking the worker."""
    from runner.worker.executor import DIE_WITH_PARENT

    if not sys.platform.startswith("linux"):
        return []
    if DIE_WITH_PARENT:
        return [_check("setpriv", "ok", f"{DIE_WITH_PARENT[0]}: step commands start without copying the worker")]
    return [_check("setpriv", "warn", "not found: each step's command starts ~9 ms slower (install util-linux)")]


def run_checks(target) -> list[dict[str, Any]]:
    from runner.core.errors import BadInput
    from runner.queue.snapshot import NotInitialised
    from runner.store import StoreError

    checks = [_check("python", "ok", sys.version.split()[0]), git_version(), *step_start()]
    try:
        queue = target.queue()
    except StoreError as exc:
        return checks + [_check("repository", "fail", str(exc))]
    store = queue.store
    checks.append(_check("repository", "ok", str(store.workdir)))
    if store.remote:
        try:
            store.remote_branches()
            checks.append(_check("remote", "ok", f"{store.remote} ({store.remote_url}) answers"))
        except StoreError as exc:
            return checks + [_check("remote", "fail", f"{exc} (check the URL, network and credentials)")]
    else:
        checks.append(_check("remote", "warn", "no remote: workers on this machine share this repository"))
    try:
        snap = queue.snapshot(branches=queue.branches())
    except NotInitialised as exc:
        return checks + [_check("queue", "fail", str(exc))]
    except BadInput as exc:
        return checks + [_check("config", "fail", "; ".join(exc.problems) + " (fix runner.toml on the queue branch)")]
    checks.append(_check("queue", "ok", f"{target.branch} @ {snap.tip[:10]}, {len(snap.plan.steps)} valid steps"))
    checks.append(_check("config", "ok", "runner.toml follows the schema"))
    problems = snap.plan.check(snap.config)
    checks.append(
        _check(
            "plan",
            "fail" if problems else "ok",
            f"{len(problems)} problem(s): runner validate" if problems else "sound",
        )
    )
    integration = snap.config.queue.integration_branch
    checks.append(
        _check("integration", "ok", f"{integration} exists")
        if snap.tips.get(integration)
        else _check("integration", "fail", f"no {integration} branch: run `runner init`")
    )
    if snap.config.notify.command or snap.config.notify.urls:
        checks.append(notices(store))
    if snap.plan.halted:
        checks.append(_check("halt", "warn", f"queue halted: {snap.plan.halted} (runner resume)"))
    if queue.reader.malformed_beats:
        checks.append(
            _check(
                "heartbeats",
                "warn",
                "; ".join(f"{w}: {why}" for w, why in queue.reader.malformed_beats.items())
                + " (delete the ref on the remote)",
            )
        )
    checks.append(resources(store.state_dir, snap.config))
    checks.append(sandbox_check(snap.config))
    return checks


def notices(store) -> dict[str, Any]:
    """[notify] runs only where a host opted in (docs/protocol.md, section 10): say which this is."""
    from runner.queue.notices import OPT_IN_ENV, OPT_IN_KEY, opted_in

    if opted_in(store):
        return _check("notices", "ok", "this host sends [notify]'s notices (it opted in)")
    return _check(
        "notices",
        "ok",
        f"this host does not send [notify]'s notices: it has not opted in (`git config "
        f"{OPT_IN_KEY} true` or {OPT_IN_ENV}=1 where a worker should)",
    )


def sandbox_check(config) -> dict[str, Any]:
    """Whether steps run in the sandbox runner.toml asks for, and whether they could."""
    from runner.worker.sandbox import configured, unusable

    why = unusable()
    if configured(config):
        return (
            _check("sandbox", "fail", f"runner.toml asks for bwrap but {why}: workers here refuse to start")
            if why
            else _check("sandbox", "ok", 'steps run in bubblewrap ([worker] sandbox = "bwrap")')
        )
    if why:
        return _check("sandbox", "warn", f"steps run unsandboxed, and could not be here: {why}")
    return _check(
        "sandbox",
        "warn",
        "steps run unsandboxed as this user, with its files and keys (bubblewrap works "
        'here: set [worker] sandbox = "bwrap")',
    )


def resources(folder: Path, config) -> dict[str, Any]:
    import psutil

    memory = psutil.virtual_memory().available
    disk = shutil.disk_usage(folder).free
    detail = f"{memory >> 20} MiB memory and {disk >> 20} MiB disk free"
    if memory < config.worker.min_free_memory or disk < config.worker.min_free_disk:
        return _check("resources", "fail", detail + " (below the [worker] floor in runner.toml: ticks will skip)")
    return _check("resources", "ok", detail)


def doctor(target) -> None:
    """Check this machine and repository.

    Git, the remote, the queue, runner.toml, the plan, free resources."""
    import typer

    from runner.commands.output import cell
    from runner.commands.render import console, print_json

    checks = run_checks(target)
    if target.json:
        print_json({"checks": checks})
    else:
        out = console()
        for check in checks:
            mark = {"ok": "[green]  ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}[check["result"]]
            out.print(f"{mark}  {check['name']}: {cell(check['detail'])}", markup=True)
    if any(c["result"] == "fail" for c in checks):
        raise typer.Exit(1)


def gc(target) -> None:
    """Remove finished steps' worktrees, pack git objects.

    Prints what it freed. A worktree is removed unless its step is claimed at its attempt
    (`[worker] worktree_budget` does the same before a claim). runner's own git calls never
    start git's auto-gc (it would stall a tick): run this from a daily schedule instead."""
    import typer

    from runner.commands.render import print_json
    from runner.queue.snapshot import NotInitialised
    from runner.store import StoreError
    from runner.worker.hostguard import collect

    queue = target.queue()
    try:
        snap = queue.snapshot()
    except (NotInitialised, StoreError):
        snap = None  # no plan to judge by: no worktree is removed
    freed = collect(queue.store.workspace(), snap)
    packed = queue.store.workspace().gc()
    if target.json:
        print_json(
            {"worktrees": [{"path": p, "bytes": n} for p, n in freed], "bytes": sum(n for _, n in freed), "git": packed}
        )
        return
    for path, size in freed:
        typer.echo(f"removed {path} ({size >> 10} KiB)")
    typer.echo(f"freed {sum(n for _, n in freed) >> 20} MiB in {len(freed)} worktree(s); {packed}")
