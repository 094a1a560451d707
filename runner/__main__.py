"""`runner` and `python -m runner`: answers what it can without loading the command line
(the version; the help it printed last; `runner ready` and `runner status` on an unchanged
local queue, see runner.commands.quick) and hands everything else to runner.cli."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        try:
            _main(sys.argv[1:])
        finally:
            sys.stdout.flush()  # here, where a reader that went away is handled, not at exit
    except KeyboardInterrupt:  # Ctrl-C before a command has its own handler (while importing, say): quiet, as git is
        sys.stderr.write("\n")
        sys.exit(130)
    except BrokenPipeError:  # `runner status | head` (the fast path prints outside any command's handler)
        from runner.commands.failures import closed_pipe

        sys.exit(closed_pipe())


def _main(args: list[str]) -> None:
    if args == ["--version"]:
        from runner import __version__

        print(f"runner {__version__}")
        return
    import os

    from runner.commands import output, quick

    output.install()  # queue text never reaches the terminal as escape sequences
    # (a shell's completion script starts `runner` with no arguments: not a request for the help)
    if "_RUNNER_COMPLETE" not in os.environ and quick.answer(args):
        return
    from runner.cli import main as run

    run(args)


if __name__ == "__main__":
    main()
