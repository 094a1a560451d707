"""`runner` and `python -m runner`: answers what it can without loading the command line
(the version; the help it printed last; `runner ready` and `runner status` on an unchanged
local queue, see runner.commands.quick) and hands everything else to runner.cli."""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:
        from runner import __version__

        print(f"runner {__version__}")
        return
    if args in ([], ["--help"], ["-h"]):
        from runner.commands.quick import answer_help

        if answer_help():
            return
    if args[:1] and args[0] in ("ready", "status"):
        from runner.commands.quick import answer

        if answer(args[0], args[1:]):
            return
    from runner.cli import main as run

    run(args)


if __name__ == "__main__":
    main()
