"""`runner completion bash|zsh|fish`: the script that makes a shell complete runner's commands
and options, and the completion requests that script makes (typer's, on click's machinery).

A request is `runner` started with _RUNNER_COMPLETE in its environment and no arguments (the
words typed so far are in other variables): runner.__main__ sends it here before its fast
answers, and the command line builds every command for it (runner.cli.main)."""

from __future__ import annotations

from typing import Annotated

import typer

PROGRAM, COMPLETE_VAR = "runner", "_RUNNER_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


def completion(shell: Annotated[str, typer.Argument(help="bash, zsh or fish.", show_default=False)]) -> None:
    """Print the shell completion script for runner.

    bash: eval "$(runner completion bash)" in ~/.bashrc. zsh: eval "$(runner completion zsh)"
    in ~/.zshrc, after compinit. fish: runner completion fish >
    ~/.config/fish/completions/runner.fish. It completes command names and their options."""
    import click.shell_completion
    from typer.completion import completion_init

    from runner.core.errors import BadInput

    if shell not in SHELLS:
        raise BadInput(f"{shell!r}: runner completes in {', '.join(SHELLS)}")
    completion_init()
    script = click.shell_completion.get_completion_class(shell)
    assert script is not None
    typer.echo(script(click.Command(PROGRAM), {}, PROGRAM, COMPLETE_VAR).source().strip())


def complete(app: typer.Typer) -> None:
    """Answer the completion request this process was started for (a shell's script asks)."""
    from typer.completion import completion_init

    completion_init()
    app([], prog_name=PROGRAM, complete_var=COMPLETE_VAR)
