"""OS schedules that keep a worker running without a person: systemd user
units (Linux), LaunchAgents (macOS) and Task Scheduler tasks (Windows).

Rendering is pure: a ScheduleSpec in, files out, from the templates in the
top-level folders systemd/, launchd/ and schtasks/. Installing writes those
files where the OS looks for them and runs the OS's own commands; it never
runs a command of another OS (--output writes that OS's files instead).

Every worker id owns a fixed set of files (its drop-ins, its plist, its task
XML) and a record of the options it was installed with, so uninstall removes
exactly those and schedule-status can re-render what install would write.
The systemd template units are shared by the worker ids of one mode and are
removed with the last of them.
"""

from __future__ import annotations

import json
import ntpath
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from runner.resources import data_dir

SCHEDULERS = ("systemd", "launchd", "schtasks")
MODES = ("daemon", "tick")
DEFAULT_INTERVAL = 300
NO_ACTIVATE_ENV = "RUNNER_SCHEDULE_NO_ACTIVATE"
WORKER_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
SYSTEMD_DROPIN = "runner.conf"
SCHTASKS_MIN_INTERVAL = 60
SCHTASKS_MAX_INTERVAL = 31 * 24 * 3600  # the schema's limit for a repetition
SCHTASKS_MAX_PATH = 260


class ScheduleInputError(ValueError):
    """Bad usage or bad input (exit code 2); `problems` lists each one."""

    def __init__(self, problems: str | list[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class ScheduleRuntimeError(RuntimeError):
    """An OS command failed (exit code 1)."""


@dataclass(frozen=True)
class ScheduleSpec:
    """Everything a schedule's files depend on, already validated."""

    scheduler: str
    worker_id: str
    mode: str
    interval: int | None  # seconds between ticks; None in daemon mode
    repo: str  # absolute
    python: str  # absolute, not resolved through symlinks
    env_file: str | None  # absolute
    home: str  # the user's home, for launchd's log paths


@dataclass(frozen=True)
class RenderedFile:
    relpath: str  # '/'-separated, relative to the scheduler's install folder
    content: bytes


@dataclass(frozen=True)
class Command:
    argv: list[str]
    on_failure: str = "fail"  # "fail" (exit 1), "warn", or "ignore" when failing is expected

    def display(self) -> str:
        if self.argv and self.argv[0] == "schtasks":
            return subprocess.list2cmdline(self.argv)
        return shlex.join(self.argv)


@dataclass
class Outcome:
    """What install or uninstall did, or (dry run) would do."""

    dry_run: bool = False
    written: list[Path] = field(default_factory=list)
    unchanged: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    previews: list[tuple[Path, bytes]] = field(default_factory=list)
    ran: list[Command] = field(default_factory=list)
    would_run: list[Command] = field(default_factory=list)  # dry run
    to_run: list[Command] = field(default_factory=list)  # activation skipped: the user's turn
    skipped_because: str | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# --- inputs ---------------------------------------------------------------


def native_scheduler() -> str | None:
    return {"linux": "systemd", "darwin": "launchd", "win32": "schtasks"}.get(sys.platform)


def check_worker_id(worker_id: str) -> str:
    if not WORKER_ID_RE.fullmatch(worker_id or ""):
        raise ScheduleInputError(_worker_id_problem(worker_id))
    return worker_id


def _worker_id_problem(worker_id: str) -> str:
    return (
        f"worker id {worker_id!r} is not allowed: use 1 to 64 characters "
        "from A-Z a-z 0-9 . _ - (it names files and units)"
    )


def _has_control_char(value: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in value)


def build_spec(
    *,
    worker_id: str,
    scheduler: str | None = None,
    mode: str = "daemon",
    interval: int | None = None,
    repo: str | os.PathLike | None = None,
    python: str | None = None,
    env_file: str | os.PathLike | None = None,
    home: str | os.PathLike | None = None,
) -> ScheduleSpec:
    """Validate and normalize the options; every problem is reported at once."""
    problems: list[str] = []
    scheduler = scheduler or native_scheduler()
    if scheduler not in SCHEDULERS:
        problems.append(
            f"no scheduler for platform {sys.platform!r}: pass --os systemd, launchd or schtasks"
            if scheduler is None
            else f"unknown scheduler {scheduler!r}: use systemd, launchd or schtasks"
        )
    if not WORKER_ID_RE.fullmatch(worker_id or ""):
        problems.append(_worker_id_problem(worker_id))
    if mode not in MODES:
        problems.append(f"unknown mode {mode!r}: use daemon or tick")
    if mode == "daemon" and interval is not None:
        problems.append("--interval applies to --mode tick only (a daemon runs ticks back to back)")
    if mode == "tick":
        interval = DEFAULT_INTERVAL if interval is None else interval
        problems += _interval_problems(scheduler, interval)

    target = scheduler if scheduler in SCHEDULERS else native_scheduler()
    repo_path = _absolute(repo if repo is not None else os.getcwd(), target)
    python = sys.executable if python is None else python
    env_path = _absolute(env_file, target) if env_file is not None else None
    problems += _path_problems("the interpreter", python, target)
    problems += _path_problems("the repository path", repo_path, target)
    if env_path is not None:
        problems += _path_problems("the env file path", env_path, target)
    if not problems:
        problems += _scheduler_value_problems(scheduler, python, repo_path, env_path)
    if problems:
        raise ScheduleInputError(problems)
    return ScheduleSpec(
        scheduler=scheduler,
        worker_id=worker_id,
        mode=mode,
        interval=interval if mode == "tick" else None,
        repo=repo_path,
        python=python,
        env_file=env_path,
        home=os.fspath(home) if home is not None else str(Path.home()),
    )


def _interval_problems(scheduler: str | None, interval: int) -> list[str]:
    if not isinstance(interval, int) or interval < 1:
        return [f"--interval must be a whole number of seconds, 1 or more (got {interval!r})"]
    if scheduler == "schtasks" and interval < SCHTASKS_MIN_INTERVAL:
        return [f"--interval {interval} is too short for Task Scheduler, which repeats a task at most once a minute: use --interval 60 or more"]
    if scheduler == "schtasks" and interval > SCHTASKS_MAX_INTERVAL:
        return [f"--interval {interval} is too long for Task Scheduler (31 days at most)"]
    return []


def _path_module(scheduler: str | None):
    """Paths follow the rules of the OS the schedule is for, which --output lets differ from this one."""
    return ntpath if scheduler == "schtasks" else posixpath


def _absolute(value: str | os.PathLike, scheduler: str | None) -> str:
    value = os.path.expanduser(os.fspath(value))
    module = _path_module(scheduler)
    if module is os.path:
        return os.path.abspath(value)
    return module.normpath(value)  # another OS's path: it must be absolute already


def _path_problems(what: str, value: str, scheduler: str | None) -> list[str]:
    if not value:
        return [f"{what} is empty"]
    if _has_control_char(value):
        return [f"{what} {value!r} contains a newline or another control character, which unit files, plists and task files cannot carry safely: use a path without them"]
    if not _path_module(scheduler).isabs(value):
        return [f"{what} {value!r} is not an absolute path"]
    return []


def _scheduler_value_problems(scheduler: str, python: str, repo: str, env_file: str | None) -> list[str]:
    problems = []
    if scheduler == "systemd":
        # systemd refuses executable names with quotes or backslashes, and would
        # expand ${...} in argv[0] (which it takes from the same word).
        bad = sorted(set(python) & set("\"'\\$"))
        if bad:
            problems.append(f"systemd cannot run an interpreter whose path contains {' '.join(bad)}: {python!r}; pass --python with another path to it (a symlink works)")
        if env_file is not None and (env_file != env_file.rstrip() or env_file.endswith("\\")):
            problems.append(f"the env file path {env_file!r} ends with a space or a backslash, which a unit file cannot carry: rename it")
    if scheduler == "schtasks":
        # Task Scheduler expands %VAR% in a task's command line and has no escape for it.
        for what, value in (("the interpreter", python), ("the repository path", repo)):
            if "%" in value:
                problems.append(f"{what} {value!r} contains %, which Task Scheduler would expand as an environment variable: use a path without it")
        if len(python) > SCHTASKS_MAX_PATH:
            problems.append(f"the interpreter path is longer than Task Scheduler's {SCHTASKS_MAX_PATH} characters")
        if env_file is not None:
            problems.append("Task Scheduler cannot give a task environment variables, so --env-file does not work with --os schtasks: set them for your user instead (setx NAME value) and install without --env-file")
    return problems


# --- rendering ------------------------------------------------------------


def role(mode: str) -> str:
    """The word that names a mode's units, labels and tasks."""
    return "worker" if mode == "daemon" else "tick"


def worker_argv(spec: ScheduleSpec, log_file: str | None = None) -> list[str]:
    argv = [spec.python, "-m", "runner", role(spec.mode), "--id", spec.worker_id, "--repo", spec.repo]
    if log_file is not None:
        argv += ["--log-file", log_file]
    return argv


def render(spec: ScheduleSpec) -> list[RenderedFile]:
    return {"systemd": render_systemd, "launchd": render_launchd, "schtasks": render_schtasks}[spec.scheduler](spec)


def _fill(template: Path, **values: str) -> str:
    text = template.read_text(encoding="utf-8").format_map(values)
    return text.rstrip("\n") + "\n"  # an optional setting left out leaves no blank line


# systemd -------------------------------------------------------------------

_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


def systemd_quote(arg: str, *, expand_env: bool = True) -> str:
    """One ExecStart= word that systemd reads back as exactly `arg`.

    % starts a specifier and $ a variable (systemd.service(5)), so they are
    doubled; a double-quoted word takes C escapes (systemd.syntax(7)). The
    executable itself is never variable-expanded, hence `expand_env`.
    """
    text = arg.replace("%", "%%")
    if expand_env:
        text = text.replace("$", "$$")
    if _SYSTEMD_PLAIN.fullmatch(arg):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_command_line(argv: list[str]) -> str:
    return " ".join([systemd_quote(argv[0], expand_env=False)] + [systemd_quote(a) for a in argv[1:]])


def systemd_unit(worker_id: str, mode: str) -> str:
    """The unit that install enables: the daemon's service or the tick's timer."""
    return f"runner-worker@{worker_id}.service" if mode == "daemon" else f"runner-tick@{worker_id}.timer"


def systemd_templates(mode: str) -> list[str]:
    return ["runner-worker@.service"] if mode == "daemon" else ["runner-tick@.service", "runner-tick@.timer"]


def systemd_dropins(worker_id: str, mode: str) -> list[str]:
    if mode == "daemon":
        return [f"runner-worker@{worker_id}.service.d/{SYSTEMD_DROPIN}"]
    return [f"runner-tick@{worker_id}.service.d/{SYSTEMD_DROPIN}", f"runner-tick@{worker_id}.timer.d/{SYSTEMD_DROPIN}"]


def timer_jitter(interval: int) -> int:
    return max(1, min(60, interval // 10))


def render_systemd(spec: ScheduleSpec) -> list[RenderedFile]:
    folder = data_dir("systemd")
    files = [RenderedFile(name, (folder / name).read_bytes()) for name in systemd_templates(spec.mode)]
    environment_file = ""
    if spec.env_file is not None:
        # EnvironmentFile= takes the rest of the line as one path; only specifiers expand in it.
        environment_file = "EnvironmentFile=" + spec.env_file.replace("%", "%%")
    service, *timer = systemd_dropins(spec.worker_id, spec.mode)
    service_text = _fill(
        folder / "instance-service.conf",
        worker_id=spec.worker_id,
        exec_start=systemd_command_line(worker_argv(spec)),
        environment_file=environment_file,
    )
    files.append(RenderedFile(service, service_text.encode("utf-8")))
    if timer:
        timer_text = _fill(
            folder / "instance-timer.conf",
            worker_id=spec.worker_id,
            interval=str(spec.interval),
            jitter=str(timer_jitter(spec.interval)),
        )
        files.append(RenderedFile(timer[0], timer_text.encode("utf-8")))
    return files


# launchd -------------------------------------------------------------------

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LAUNCHD_PATH = ("/opt/homebrew/bin", "/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin")


def launchd_label(worker_id: str, mode: str) -> str:
    return f"runner.{role(mode)}.{worker_id}"


def launchd_plist_name(worker_id: str, mode: str) -> str:
    return launchd_label(worker_id, mode) + ".plist"


def launchd_log_dir(home: str) -> str:
    return posixpath.join(home, "Library", "Logs", "runner")


def launchd_path(python: str) -> str:
    """launchd starts agents with PATH=/usr/bin:/bin:/usr/sbin:/sbin: no Homebrew git, no venv."""
    folders = [posixpath.dirname(python)] + [f for f in _LAUNCHD_PATH if f != posixpath.dirname(python)]
    return ":".join(folders)


def read_env_file(path: str) -> dict[str, str]:
    """NAME=value lines, as systemd reads an EnvironmentFile: '#' comments,
    an optional 'export ', values optionally in single or double quotes."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScheduleInputError(f"cannot read the env file {path}: {exc}") from None
    values: dict[str, str] = {}
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, equals, value = line.partition("=")
        name, value = name.strip(), _unquote_env_value(value.strip())
        if not equals or not _ENV_NAME.fullmatch(name):
            problems.append(f"{path}:{number}: expected NAME=value, where NAME is letters, digits and _")
        elif _has_control_char(value.replace("\t", " ")):
            problems.append(f"{path}:{number}: the value of {name} contains a control character, which a plist cannot carry")
        else:
            values[name] = value
    if problems:
        raise ScheduleInputError(problems)
    return values


def _unquote_env_value(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        inner = value[1:-1]
        return re.sub(r'\\(["\\$`])', r"\1", inner) if value[0] == '"' else inner
    return value


def render_launchd(spec: ScheduleSpec) -> list[RenderedFile]:
    import plistlib

    skeleton = json.loads((data_dir("launchd") / "agent.json").read_text(encoding="utf-8"))
    label = launchd_label(spec.worker_id, spec.mode)
    environment = {"PATH": launchd_path(spec.python), "PYTHONUNBUFFERED": "1"}
    if spec.env_file is not None:
        environment.update(read_env_file(spec.env_file))
    log_file = posixpath.join(launchd_log_dir(spec.home), label + ".log")
    agent = {
        **skeleton[spec.mode],
        "Label": label,
        "ProgramArguments": worker_argv(spec),
        "EnvironmentVariables": environment,
        "StandardOutPath": log_file,
        "StandardErrorPath": log_file,
    }
    if spec.mode == "tick":
        agent["StartInterval"] = spec.interval
    content = plistlib.dumps(agent, fmt=plistlib.FMT_XML, sort_keys=True)
    return [RenderedFile(launchd_plist_name(spec.worker_id, spec.mode), content)]


# Task Scheduler -----------------------------------------------------------

UTF16_BOM = b"\xff\xfe"


def schtasks_name(worker_id: str, mode: str) -> str:
    return f"runner\\{role(mode)}-{worker_id}"


def schtasks_file(worker_id: str, mode: str) -> str:
    return f"runner-{role(mode)}-{worker_id}.xml"


def windows_log_file(worker_id: str, mode: str) -> str:
    name = f"runner-{role(mode)}-{worker_id}.log"
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return os.path.join(os.environ["LOCALAPPDATA"], "runner", "logs", name)
    # Rendered on another OS: Task Scheduler expands the variable when it runs the task.
    return "%LOCALAPPDATA%\\runner\\logs\\" + name


def iso_duration(seconds: int) -> str:
    """xs:duration the way Task Scheduler writes them: 300 -> PT5M."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    time_part = "".join(f"{n}{unit}" for n, unit in ((hours, "H"), (minutes, "M"), (secs, "S")) if n)
    text = "P" + (f"{days}D" if days else "") + (f"T{time_part}" if time_part else "")
    return text if text != "P" else "PT0S"


def render_schtasks(spec: ScheduleSpec) -> list[RenderedFile]:
    from xml.sax.saxutils import escape

    argv = worker_argv(spec, log_file=windows_log_file(spec.worker_id, spec.mode))
    values = {
        "description": f"runner {role(spec.mode)} {spec.worker_id}",
        "uri": "\\" + schtasks_name(spec.worker_id, spec.mode),
        "command": argv[0],
        # The interpreter splits its own command line by the MSVC rules list2cmdline follows.
        "arguments": subprocess.list2cmdline(argv[1:]),
        "interval": iso_duration(spec.interval) if spec.interval else "",
    }
    template = data_dir("schtasks") / f"{role(spec.mode)}.xml"
    text = _fill(template, **{name: escape(value) for name, value in values.items()})
    return [RenderedFile(schtasks_file(spec.worker_id, spec.mode), UTF16_BOM + text.encode("utf-16-le"))]


# --- where files go -------------------------------------------------------


def config_home() -> Path:
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming")
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".config"


def records_dir() -> Path:
    """Where install keeps what it was asked for (and, on Windows, the task XML)."""
    return config_home() / "runner" / "schedules"


def install_dir(scheduler: str) -> Path:
    if scheduler == "systemd":
        return config_home() / "systemd" / "user"
    if scheduler == "launchd":
        return Path.home() / "Library" / "LaunchAgents"
    return records_dir()


def record_path(scheduler: str, worker_id: str) -> Path:
    return records_dir() / f"{scheduler}-{worker_id}.json"


def own_files(scheduler: str, worker_id: str, mode: str) -> list[str]:
    """The files that belong to one worker id alone (relative to install_dir)."""
    if scheduler == "systemd":
        return systemd_dropins(worker_id, mode)
    if scheduler == "launchd":
        return [launchd_plist_name(worker_id, mode)]
    return [schtasks_file(worker_id, mode)]


def installed_modes(scheduler: str, worker_id: str) -> list[str]:
    folder = install_dir(scheduler)
    return [m for m in MODES if any((folder / rel).exists() for rel in own_files(scheduler, worker_id, m))]


def read_record(scheduler: str, worker_id: str) -> ScheduleSpec | None:
    try:
        data = json.loads(record_path(scheduler, worker_id).read_text(encoding="utf-8"))
        return ScheduleSpec(**data["spec"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# --- OS commands ----------------------------------------------------------


def _gui_domain() -> str:
    return f"gui/{os.getuid()}" if hasattr(os, "getuid") else "gui/$(id -u)"


def activate_commands(spec: ScheduleSpec, files: list[Path], replaced: bool) -> list[Command]:
    """Commands that start the schedule; `replaced`: it existed and its files changed."""
    if spec.scheduler == "systemd":
        unit = systemd_unit(spec.worker_id, spec.mode)
        commands = [
            Command(["systemctl", "--user", "daemon-reload"]),
            Command(["systemctl", "--user", "enable", "--now", unit]),
        ]
        if replaced:  # enable --now leaves a running unit on its old settings
            commands.append(Command(["systemctl", "--user", "try-restart", unit]))
        return commands
    if spec.scheduler == "launchd":
        label = launchd_label(spec.worker_id, spec.mode)
        target = f"{_gui_domain()}/{label}"
        return [
            Command(["launchctl", "bootout", target], on_failure="ignore"),  # not loaded yet is fine
            Command(["launchctl", "enable", target]),
            Command(["launchctl", "bootstrap", _gui_domain(), str(files[0])]),
        ]
    name = schtasks_name(spec.worker_id, spec.mode)
    return [Command(["schtasks", "/Create", "/XML", str(files[0]), "/TN", name, "/F"])]


def deactivate_commands(scheduler: str, worker_id: str, mode: str, *, links_removed: bool = False) -> list[Command]:
    """Commands that stop a schedule. `links_removed`: uninstall deleted systemd's
    enablement links itself (systemctl was unreachable), so only stopping is left."""
    if scheduler == "systemd":
        units = [systemd_unit(worker_id, mode)] + ([f"runner-tick@{worker_id}.service"] if mode == "tick" else [])
        if links_removed:
            return [Command(["systemctl", "--user", "stop", *units], on_failure="warn")]
        return [
            Command(["systemctl", "--user", "disable", "--now", units[0]], on_failure="warn"),
            *[Command(["systemctl", "--user", "stop", unit], on_failure="warn") for unit in units[1:]],
        ]
    if scheduler == "launchd":
        return [Command(["launchctl", "bootout", f"{_gui_domain()}/{launchd_label(worker_id, mode)}"], on_failure="warn")]
    return [Command(["schtasks", "/Delete", "/TN", schtasks_name(worker_id, mode), "/F"], on_failure="warn")]


def after_removal_commands(scheduler: str, worker_id: str, modes: list[str]) -> list[Command]:
    if scheduler != "systemd":
        return []
    commands = [Command(["systemctl", "--user", "daemon-reload"], on_failure="warn")]
    units = []
    for mode in modes:
        units += [f"runner-{role(mode)}@{worker_id}.service"] + ([systemd_unit(worker_id, mode)] if mode == "tick" else [])
    # reset-failed complains about units that did not fail; it only clears `systemctl --failed`.
    return commands + [Command(["systemctl", "--user", "reset-failed", *units], on_failure="ignore")]


def _tool_missing_reason(scheduler: str) -> str | None:
    tool = {"systemd": "systemctl", "launchd": "launchctl", "schtasks": "schtasks"}[scheduler]
    if shutil.which(tool) is None:
        return f"{tool} was not found"
    if scheduler == "systemd":
        try:
            probe = subprocess.run(["systemctl", "--user", "show-environment"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"systemctl --user did not answer ({exc})"
        if probe.returncode != 0:
            first = (probe.stderr.strip().splitlines() or ["no reason given"])[0]
            return f"systemctl --user cannot reach a user service manager here ({first})"
    return None


def activation_blocker(scheduler: str, activate: bool) -> str | None:
    """Why OS commands will not run now, or None when they will."""
    if scheduler != native_scheduler():
        return f"{scheduler} is not this computer's scheduler"
    if not activate:
        return "activation was skipped (--no-activate)"
    if os.environ.get(NO_ACTIVATE_ENV, "") not in ("", "0"):
        return f"activation was skipped ({NO_ACTIVATE_ENV} is set)"
    return _tool_missing_reason(scheduler)


def _run(command: Command, outcome: Outcome) -> subprocess.CompletedProcess | None:
    try:
        done = subprocess.run(command.argv, capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as exc:
        done, reason = None, f"could not run: {exc}"
    else:
        outcome.ran.append(command)
        reason = f"failed with exit code {done.returncode}: {(done.stderr or done.stdout).strip() or 'no output'}"
        if done.returncode == 0:
            return done
    if command.on_failure == "fail":
        raise ScheduleRuntimeError(f"`{command.display()}` {reason}")
    if command.on_failure == "warn":
        outcome.warnings.append(f"`{command.display()}` {reason}")
    return done


def _run_all(commands: list[Command], outcome: Outcome, blocker: str | None, dry_run: bool) -> None:
    if dry_run:
        outcome.would_run += commands
    elif blocker is not None:
        outcome.to_run += commands
        outcome.skipped_because = blocker
    else:
        for command in commands:
            _run(command, outcome)


# --- install / uninstall / status -----------------------------------------


def _write_if_changed(path: Path, content: bytes) -> bool:
    """Write atomically; False when the file already holds `content`."""
    try:
        if path.read_bytes() == content:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(content)
    os.replace(temporary, path)
    return True


def install(spec: ScheduleSpec, *, output_dir: str | os.PathLike | None = None, dry_run: bool = False, activate: bool = True) -> Outcome:
    files = render(spec)
    if output_dir is not None:
        return _write_output(files, Path(output_dir), dry_run)
    if spec.scheduler != native_scheduler() and not dry_run:
        raise ScheduleInputError(
            f"{spec.scheduler} is not the scheduler of this computer ({sys.platform}), so it cannot be installed here: "
            "pass --output DIR to write its files, or --dry-run to print them"
        )
    if not dry_run:
        _check_local_inputs(spec)
    outcome = Outcome(dry_run=dry_run)
    blocker = None if dry_run else activation_blocker(spec.scheduler, activate)

    for other in installed_modes(spec.scheduler, spec.worker_id):
        if other != spec.mode:  # one schedule per worker id: the new mode replaces the old
            outcome.notes.append(f"replacing the {other} schedule of worker {spec.worker_id}")
            _remove_mode(spec.scheduler, spec.worker_id, other, outcome, blocker, dry_run)
            _run_all(after_removal_commands(spec.scheduler, spec.worker_id, [other]), outcome, blocker, dry_run)

    folder = install_dir(spec.scheduler)
    paths = [folder / f.relpath for f in files]
    replaced = False
    for file, path in zip(files, paths):
        if dry_run:
            outcome.previews.append((path, file.content))
            continue
        existed = path.exists()
        if _write_if_changed(path, file.content):
            outcome.written.append(path)
            replaced = replaced or existed
        else:
            outcome.unchanged.append(path)
    if not dry_run:
        _prepare_logs(spec)
        _write_record(spec, paths)
    _run_all(activate_commands(spec, paths, replaced), outcome, blocker, dry_run)
    if spec.scheduler == "systemd" and native_scheduler() == "systemd":
        warning = linger_warning()
        if warning:
            outcome.warnings.append(warning)
    return outcome


def _write_output(files: list[RenderedFile], folder: Path, dry_run: bool) -> Outcome:
    outcome = Outcome(dry_run=dry_run)
    for file in files:
        path = folder / file.relpath
        if dry_run:
            outcome.previews.append((path, file.content))
        elif _write_if_changed(path, file.content):
            outcome.written.append(path)
        else:
            outcome.unchanged.append(path)
    outcome.notes.append("nothing was installed: the files were only written")
    return outcome


def _check_local_inputs(spec: ScheduleSpec) -> None:
    problems = []
    if not os.path.isdir(spec.repo):
        problems.append(f"the repository {spec.repo} does not exist: pass --repo with the worker's checkout")
    if spec.env_file is not None and not os.path.isfile(spec.env_file):
        problems.append(f"the env file {spec.env_file} does not exist")
    if not os.path.exists(spec.python):
        problems.append(f"the interpreter {spec.python} does not exist")
    if problems:
        raise ScheduleInputError(problems)


def _prepare_logs(spec: ScheduleSpec) -> None:
    # launchd does not create the folder of StandardOutPath; the worker's --log-file may not either.
    if spec.scheduler == "launchd":
        Path(launchd_log_dir(spec.home)).mkdir(parents=True, exist_ok=True)
    elif spec.scheduler == "schtasks" and sys.platform == "win32":
        Path(windows_log_file(spec.worker_id, spec.mode)).parent.mkdir(parents=True, exist_ok=True)


def _write_record(spec: ScheduleSpec, paths: list[Path]) -> None:
    record = {"spec": asdict(spec), "files": [str(p) for p in paths]}
    _write_if_changed(record_path(spec.scheduler, spec.worker_id), (json.dumps(record, indent=2) + "\n").encode("utf-8"))


def linger_warning() -> str | None:
    """User units stop at logout and start only at login unless lingering is on."""
    user = _user_name()
    if not user or Path("/var/lib/systemd/linger", user).exists():
        return None
    return (
        f"lingering is off for {user}: the worker starts only when {user} logs in and stops at logout. "
        f"To run it from boot without a login, run: loginctl enable-linger {user}"
    )


def _user_name() -> str | None:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError, AttributeError):
        return os.environ.get("USER") or os.environ.get("LOGNAME")


def uninstall(scheduler: str | None, worker_id: str, *, dry_run: bool = False, activate: bool = True) -> Outcome:
    scheduler = scheduler or native_scheduler()
    if scheduler not in SCHEDULERS:
        raise ScheduleInputError(f"no scheduler for platform {sys.platform!r}: pass --os systemd, launchd or schtasks")
    check_worker_id(worker_id)
    outcome = Outcome(dry_run=dry_run)
    blocker = None if dry_run else activation_blocker(scheduler, activate)
    modes = installed_modes(scheduler, worker_id)
    for mode in modes:
        _remove_mode(scheduler, worker_id, mode, outcome, blocker, dry_run)
    record = record_path(scheduler, worker_id)
    if record.exists():
        _remove_file(record, outcome, dry_run)
        _remove_empty_dirs(record.parent, stop=config_home(), dry_run=dry_run)
    if modes:
        _run_all(after_removal_commands(scheduler, worker_id, modes), outcome, blocker, dry_run)
    else:
        outcome.notes.append(f"no {scheduler} schedule is installed for worker {worker_id}: nothing to remove")
    return outcome


def _remove_mode(scheduler: str, worker_id: str, mode: str, outcome: Outcome, blocker: str | None, dry_run: bool) -> None:
    """Stop one mode's schedule of one worker and delete its files."""
    links_removed = scheduler == "systemd" and blocker is not None and not dry_run
    _run_all(deactivate_commands(scheduler, worker_id, mode, links_removed=links_removed), outcome, blocker, dry_run)
    folder = install_dir(scheduler)
    for relpath in own_files(scheduler, worker_id, mode):
        path = folder / relpath
        if path.exists():
            _remove_file(path, outcome, dry_run)
        if scheduler == "systemd":
            _remove_empty_dirs(path.parent, stop=folder, dry_run=dry_run)
    if scheduler == "systemd":
        if links_removed:
            _remove_enablement_links(folder, worker_id, mode, outcome)
        for template in systemd_templates(mode):
            path = folder / template
            if path.exists() and not _other_systemd_instances(folder, worker_id, mode):
                _remove_file(path, outcome, dry_run)


def _other_systemd_instances(folder: Path, worker_id: str, mode: str) -> bool:
    own = set(systemd_dropins(worker_id, mode))
    pattern = systemd_dropins("*", mode)[0]
    return any(p.relative_to(folder).as_posix() not in own for p in folder.glob(pattern))


def _remove_enablement_links(folder: Path, worker_id: str, mode: str, outcome: Outcome) -> None:
    """Without a reachable systemctl, undo `enable` by hand (its links would dangle)."""
    unit = systemd_unit(worker_id, mode)
    wants = "default.target.wants" if mode == "daemon" else "timers.target.wants"
    link = folder / wants / unit
    if link.is_symlink():
        _remove_file(link, outcome, dry_run=False)
        _remove_empty_dirs(link.parent, stop=folder, dry_run=False)


def _remove_file(path: Path, outcome: Outcome, dry_run: bool) -> None:
    if not dry_run:
        path.unlink(missing_ok=True)
    outcome.removed.append(path)


def _remove_empty_dirs(folder: Path, *, stop: Path, dry_run: bool) -> None:
    """Remove `folder` and its parents while they are empty, up to (not including) `stop`."""
    if dry_run:
        return
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def status(scheduler: str | None, worker_id: str, *, query_os: bool = True) -> dict:
    """Is the schedule installed, do its files match what install would write
    now, and (when the OS can be asked) is it loaded and running?"""
    scheduler = scheduler or native_scheduler()
    if scheduler not in SCHEDULERS:
        raise ScheduleInputError(f"no scheduler for platform {sys.platform!r}: pass --os systemd, launchd or schtasks")
    check_worker_id(worker_id)
    report: dict = {
        "scheduler": scheduler,
        "id": worker_id,
        "installed": False,
        "up_to_date": False,
        "mode": None,
        "files": [],
        "os_state": None,
        "problems": [],
    }
    folder = install_dir(scheduler)
    spec = read_record(scheduler, worker_id)
    if spec is None:
        leftovers = [folder / rel for m in MODES for rel in own_files(scheduler, worker_id, m) if (folder / rel).exists()]
        report["files"] = [{"path": str(p), "state": "unrecorded"} for p in leftovers]
        if leftovers:
            report["problems"].append("files of this worker exist without a record of their install: run uninstall-schedule, then install-schedule")
        return report
    report["installed"] = True
    report["mode"] = spec.mode
    report["spec"] = asdict(spec)
    try:
        expected = render(spec)
    except ScheduleInputError as exc:
        report["problems"] += [f"cannot render the schedule again: {p}" for p in exc.problems]
        expected = []
    for file in expected:
        path = folder / file.relpath
        try:
            state = "matches" if path.read_bytes() == file.content else "differs"
        except OSError:
            state = "missing"
        report["files"].append({"path": str(path), "state": state})
        if state != "matches":
            report["problems"].append(f"{path} {state}: re-run install-schedule to rewrite it")
    if not os.path.exists(spec.python):
        report["problems"].append(f"the interpreter {spec.python} no longer exists: re-run install-schedule from the environment runner is installed in")
    if query_os and activation_blocker(scheduler, True) is None:
        report["os_state"] = _os_state(spec)
    report["up_to_date"] = bool(expected) and not report["problems"]
    return report


def _os_state(spec: ScheduleSpec) -> str:
    def ask(argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30)

    try:
        if spec.scheduler == "systemd":
            unit = systemd_unit(spec.worker_id, spec.mode)
            enabled = ask(["systemctl", "--user", "is-enabled", unit]).stdout.strip() or "unknown"
            active = ask(["systemctl", "--user", "is-active", unit]).stdout.strip() or "unknown"
            return f"{unit}: {enabled}, {active}"
        if spec.scheduler == "launchd":
            label = launchd_label(spec.worker_id, spec.mode)
            loaded = ask(["launchctl", "print", f"{_gui_domain()}/{label}"]).returncode == 0
            return f"{label}: {'loaded' if loaded else 'not loaded'}"
        name = schtasks_name(spec.worker_id, spec.mode)
        registered = ask(["schtasks", "/Query", "/TN", name]).returncode == 0
        return f"{name}: {'registered' if registered else 'not registered'}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
