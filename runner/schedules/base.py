"""What every OS scheduler provides (the `Scheduler` interface) and the values that pass
between the shared flow and the per-OS modules. Nothing here knows a particular OS."""

from __future__ import annotations

import os
import posixpath
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from runner.resources import fill, shipped

MODES = ("daemon", "tick")
UTF16_BOM = b"\xff\xfe"


@dataclass(frozen=True)
class ScheduleSpec:
    """Everything a schedule's files depend on, already validated. Written to the install
    record as JSON, so the fields added later have defaults (older records still load)."""

    scheduler: str
    worker_id: str
    mode: str
    interval: int | None  # tick: seconds between ticks; daemon: the worker's poll interval (None: its default)
    repo: str  # absolute, in the target OS's path rules
    python: str  # absolute, not resolved through symlinks
    env_file: str | None  # absolute
    home: str  # the user's home on the target computer (launchd's log folder)
    tags: tuple[str, ...] = ()
    grace: int | None = None  # daemon: seconds to finish a step after SIGTERM (None: runner.toml's)
    remote: str | None = None  # None: the worker's default (origin when it exists)
    queue_branch: str | None = None  # None: the default queue branch
    notify: bool = False  # the worker sends the queue's [notify] notices from this host (it opted in)
    slots: int = 1  # daemon: steps run at once (runner worker --slots)
    metrics_file: str | None = None  # daemon: absolute, in the target OS's path rules (runner worker --metrics-file)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", tuple(self.tags))  # a JSON record gives a list


@dataclass(frozen=True)
class RenderedFile:
    relpath: str  # '/'-separated, relative to the scheduler's install folder
    content: bytes


@dataclass(frozen=True)
class Command:
    argv: list[str]
    on_failure: str = "fail"  # "fail" (exit 1), "warn", or "ignore" when failing is expected
    windows: bool = False  # shown the way cmd.exe reads it

    def display(self) -> str:
        return subprocess.list2cmdline(self.argv) if self.windows else shlex.join(self.argv)


@dataclass
class OsState:
    """What the OS said about one schedule. None: the OS did not say."""

    enabled: bool | None = None
    running: bool | None = None
    failing: bool | None = None
    drifted: bool = False  # what the OS has loaded differs from the files
    answers: dict[str, str] = field(default_factory=dict)  # the OS's own words, for people
    problems: list[str] = field(default_factory=list)


def has_control_char(value: str) -> bool:
    """Unit files, plists and task files cannot carry these safely."""
    return any(ord(c) < 32 or ord(c) == 127 for c in value)


def as_text(content: bytes) -> str:
    """A rendered file's text: UTF-16LE after a BOM (task files), else UTF-8."""
    if content.startswith(UTF16_BOM):
        return content[len(UTF16_BOM) :].decode("utf-16-le")
    return content.decode("utf-8", errors="replace")


def role(mode: str) -> str:
    """The word that names a mode's units, labels and tasks, and the runner command it runs."""
    return "worker" if mode == "daemon" else "tick"


def worker_argv(spec: ScheduleSpec, log_file: str | None = None) -> list[str]:
    """`runner worker|tick` with every option the schedule carries, in one fixed order."""
    argv = [spec.python, "-m", "runner", role(spec.mode), "--id", spec.worker_id]
    for tag in spec.tags:
        argv += ["--tag", tag]
    if spec.mode == "daemon" and spec.interval is not None:
        argv += ["--interval", str(spec.interval)]
    if spec.grace is not None:
        argv += ["--grace", str(spec.grace)]
    if spec.remote is not None:
        argv += ["--remote", spec.remote]
    if spec.queue_branch is not None:
        argv += ["--queue-branch", spec.queue_branch]
    if spec.notify:
        argv += ["--notify"]
    if spec.slots != 1:
        argv += ["--slots", str(spec.slots)]
    if spec.metrics_file is not None:
        argv += ["--metrics-file", spec.metrics_file]
    argv += ["--repo", spec.repo]
    if log_file is not None:
        argv += ["--log-file", log_file]
    return argv


DEFAULT_GRACE = 30  # runner.toml's grace_period unless a team changes it


def stop_timeout(spec: ScheduleSpec) -> int:
    """How long the OS waits after SIGTERM: the worker's grace and a minute more."""
    return (spec.grace if spec.grace is not None else DEFAULT_GRACE) + 60


def template(*path: str) -> str:
    """A unit template from the top-level systemd/, launchd/ or schtasks/ folder (runner.resources)."""
    return shipped(*path)


def fill_template(values: dict[str, str], *path: str) -> str:
    text = fill(template(*path), values)
    return text.rstrip("\n") + "\n"  # an optional setting left empty at the end leaves no blank line


def ask(argv: list[str]) -> subprocess.CompletedProcess:
    """Run a read-only OS query; OSError or TimeoutExpired when it cannot run."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


class Scheduler:
    """One OS's scheduler. The shared flow (runner.schedules.flow) validates, writes,
    records, runs the commands and reports; a subclass says what differs per OS."""

    name: str  # systemd, launchd, schtasks
    platform: str  # the sys.platform it is native to
    tool: str  # the command that talks to it
    paths = posixpath  # the path rules of the OS it runs on
    min_interval = 1  # seconds between ticks
    max_interval: int | None = None

    # --- what this OS can carry -------------------------------------------------

    def problems(self, spec: ScheduleSpec) -> list[str]:
        """Values this OS's files cannot carry (beyond the shared checks)."""
        return []

    def target_home(self, repo: str) -> tuple[str, str | None]:
        """The user's home on another computer and, when it is a guess, a sentence saying so.
        Only launchd's files use it; the others need none."""
        return "", None

    # --- files ------------------------------------------------------------------

    def install_dir(self) -> Path:
        raise NotImplementedError

    def own_files(self, worker_id: str, mode: str) -> list[str]:
        """The files of one worker id alone, relative to install_dir."""
        raise NotImplementedError

    def shared_files(self, mode: str) -> list[str]:
        """Files shared by every worker id of a mode: removed with the last of them."""
        return []

    def render(self, spec: ScheduleSpec) -> list[RenderedFile]:
        raise NotImplementedError

    def prepare(self, spec: ScheduleSpec) -> None:
        """Create what the OS needs and will not create itself (log folders)."""

    # --- commands ---------------------------------------------------------------

    def activate(self, spec: ScheduleSpec, paths: list[Path], replaced: bool) -> list[Command]:
        """Commands that start the schedule; `replaced`: it existed and its files changed."""
        raise NotImplementedError

    def deactivate(self, worker_id: str, mode: str, links_removed: bool = False) -> list[Command]:
        """Commands that stop a schedule. `links_removed`: the enablement was undone by hand."""
        raise NotImplementedError

    # where a person puts the files `--output` wrote, on the computer they are for (None: they load where they are)
    load_folder: str | None = None

    def load_commands(self, spec: ScheduleSpec, files: list[RenderedFile]) -> list[str]:
        """The command lines that load files written with --output, once they are in load_folder
        (what install would run, but for a failure it expects), as that OS's shell reads them."""
        paths = [Path(self.paths.join(self.load_folder or "", f.relpath)) for f in files]
        return [command.display() for command in self.activate(spec, paths, False) if command.on_failure != "ignore"]

    def after_removal(self, worker_id: str, modes: list[str]) -> list[Command]:
        return []

    def undo_enablement(self, worker_id: str, mode: str) -> list[Path]:
        """When the OS cannot be asked, remove by hand what enabling left behind."""
        return []

    def unreachable(self) -> str | None:
        """Why this OS's scheduler cannot be asked from here, or None."""
        return None

    def warnings(self) -> list[str]:
        """What an operator should know after installing on this computer."""
        return []

    # --- status -----------------------------------------------------------------

    def query(self, spec: ScheduleSpec) -> OsState:
        """Ask the OS whether the schedule is enabled, running, failing or loaded stale."""
        raise NotImplementedError


def config_home() -> Path:
    """Where this user's configuration lives: %APPDATA%, or $XDG_CONFIG_HOME, or ~/.config."""
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming")
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".config"


def records_dir() -> Path:
    """Where install keeps what it was asked for (and, on Windows, the task XML)."""
    return config_home() / "runner" / "schedules"


def user_name() -> str | None:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError, AttributeError):
        return os.environ.get("USER") or os.environ.get("LOGNAME") or os.environ.get("USERNAME")
