"""OS schedules that keep a worker running without a person: systemd user units
(Linux), LaunchAgents (macOS) and Task Scheduler tasks (Windows).

- `base`: the `Scheduler` interface each OS implements (render its files, where they
  go, the commands that activate and deactivate them, how to ask the OS for status)
  and the values passed around (`ScheduleSpec`, `RenderedFile`, `Command`, `OsState`).
- `systemd`, `launchd`, `schtasks`: one module per OS; its templates are in the
  repository's top-level folder of the same name (runner.resources.shipped), filled
  with runner.resources.fill (@NAME@ placeholders).
- `options`: from the operator's options to a validated spec, for this computer
  (its repository checked with git) or another one (guesses said aloud).
- `flow`: install, uninstall and status, once for every OS.

Rendering is pure: a spec in, files out. Installing runs only this computer's
scheduler; --output writes another OS's files instead. This package never imports
the worker, the queue or the CLI.
"""

from runner.schedules.base import MODES, Command, OsState, RenderedFile, Scheduler, ScheduleSpec, worker_argv
from runner.schedules.flow import NO_ACTIVATE_ENV, Outcome, install, status, uninstall
from runner.schedules.options import Target, build_spec, choose_target
from runner.schedules.registry import NAMES, SCHEDULERS, get, native

__all__ = [
    "MODES",
    "NAMES",
    "NO_ACTIVATE_ENV",
    "SCHEDULERS",
    "Command",
    "OsState",
    "Outcome",
    "RenderedFile",
    "ScheduleSpec",
    "Scheduler",
    "Target",
    "build_spec",
    "choose_target",
    "get",
    "install",
    "native",
    "status",
    "uninstall",
    "worker_argv",
]
