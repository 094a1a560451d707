"""`runner install-hooks` / `uninstall-hooks`, and the hidden commands the installed hooks run."""

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer


# Module-level: typer reads these annotations when it builds the commands.
Server = Annotated[
    Optional[Path],
    typer.Option("--server", help="A bare repository (the remote): install the pre-receive hook that checks every push."),
]
Clone = Annotated[
    Optional[Path],
    typer.Option("--repo", help="A working clone: install the pre-commit hook that validates step files (default without --server: the current one)."),
]
Branch = Annotated[
    str, typer.Option("--queue-branch", envvar="RUNNER_QUEUE_BRANCH", help="The queue branch the server hook protects.")
]


def _clone(server: Optional[Path], repo: Optional[Path]) -> Optional[Path]:
    """The working clone to act on: --repo, or the current folder when --server is not given."""
    return repo if repo is not None or server is not None else Path(".")


def _check_targets(server: Optional[Path], clone: Optional[Path]) -> None:
    from runner.hooks.server import target_problems
    from runner.core.model import BadInput

    if problems := target_problems(server, clone):
        raise BadInput(problems)


def register(app: typer.Typer) -> None:
    from runner.cli import handle_errors

    @app.command("install-hooks")
    @handle_errors
    def install_hooks(server: Server = None, repo: Clone = None, queue_branch: Branch = "runner/queue") -> None:
        """Install git hooks: the server's push check (--server BARE) and/or a clone's pre-commit check.

        An existing hook is kept as <hook>.runner-saved and runs first; uninstall-hooks restores it.
        """
        from runner.hooks.server import install_client, install_server

        clone = _clone(server, repo)
        _check_targets(server, clone)
        messages = install_server(server, queue_branch) if server is not None else []
        messages += install_client(clone) if clone is not None else []
        for message in messages:
            typer.echo(message)

    @app.command("uninstall-hooks")
    @handle_errors
    def uninstall_hooks(server: Server = None, repo: Clone = None) -> None:
        """Remove runner's hooks and restore the hooks (and server settings) that were there before."""
        from runner.hooks.server import uninstall_client, uninstall_server

        clone = _clone(server, repo)
        _check_targets(server, clone)
        messages = uninstall_server(server) if server is not None else []
        messages += uninstall_client(clone) if clone is not None else []
        for message in messages:
            typer.echo(message)

    @app.command("hook-pre-receive", hidden=True)
    def hook_pre_receive() -> None:
        """Run by the installed pre-receive hook: `old new ref` lines on stdin."""
        from runner.hooks.server import run_pre_receive

        raise typer.Exit(run_pre_receive(sys.stdin.read(), "."))

    @app.command("hook-pre-commit", hidden=True)
    def hook_pre_commit() -> None:
        """Run by the installed pre-commit hook in a working clone."""
        from runner.hooks.server import run_pre_commit

        raise typer.Exit(run_pre_commit("."))
