"""`runner install-hooks` / `uninstall-hooks`, and the hidden commands the installed hooks run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from runner.core.errors import BadInput
from runner.core.layout import DEFAULT_QUEUE_BRANCH

Server = Annotated[
    Path | None,
    typer.Option(
        "--server", help="A bare repository (the remote): install the pre-receive hook that checks every push."
    ),
]
Clone = Annotated[
    Path | None,
    typer.Option(
        "--repo",
        help="A working clone: install the pre-commit hook that validates step files (default without --server: the "
        "current one).",
    ),
]
Branch = Annotated[
    str, typer.Option("--queue-branch", envvar="RUNNER_QUEUE_BRANCH", help="The queue branch the server hook protects.")
]


def _targets(server: Path | None, repo: Path | None) -> tuple[Path | None, Path | None]:
    """(bare repository, working clone): --repo, or the current folder when --server is not given."""
    from runner.hooks.install import target_problems

    clone = repo if repo is not None or server is not None else Path(".")
    if problems := target_problems(server, clone):
        raise BadInput(problems)
    return server, clone


def install_hooks(server: Server = None, repo: Clone = None, queue_branch: Branch = DEFAULT_QUEUE_BRANCH) -> None:
    """Install runner's git hooks.

    The server's push check (--server BARE) and/or a clone's pre-commit check.

    An existing hook is kept as <hook>.runner-saved and runs first; uninstall-hooks restores it.
    On the server this also keeps reflogs of runner's refs (the hook judges leases by them) and
    received objects packed."""
    from runner.hooks.install import install_client, install_server

    server, clone = _targets(server, repo)
    messages = install_server(server, queue_branch) if server is not None else []
    messages += install_client(clone) if clone is not None else []
    for message in messages:
        typer.echo(message)


def uninstall_hooks(server: Server = None, repo: Clone = None) -> None:
    """Remove runner's git hooks.

    And restore the hooks that were there before."""
    from runner.hooks.install import uninstall_client, uninstall_server

    server, clone = _targets(server, repo)
    messages = uninstall_server(server) if server is not None else []
    messages += uninstall_client(clone) if clone is not None else []
    for message in messages:
        typer.echo(message)


def hook_pre_receive() -> None:
    """Run by the installed pre-receive hook: `old new ref` lines on stdin."""
    from runner.hooks.server import run_pre_receive

    raise typer.Exit(run_pre_receive(sys.stdin.read(), "."))


def hook_pre_commit() -> None:
    """Run by the installed pre-commit hook in a working clone."""
    from runner.hooks.client import run_pre_commit

    raise typer.Exit(run_pre_commit("."))
