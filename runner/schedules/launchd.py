"""LaunchAgents (macOS): one plist per worker id, loaded with `launchctl bootstrap`.

launchd has no env file of its own, so --env-file's values are copied into the plist
at install time, and it starts agents with a bare PATH, so the plist sets one.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path
from xml.sax.saxutils import escape

from runner.core.errors import BadInput
from runner.schedules.base import (
    Command,
    OsState,
    RenderedFile,
    Scheduler,
    ScheduleSpec,
    ask,
    fill_template,
    has_control_char,
    role,
    stop_timeout,
    user_name,
    worker_argv,
)

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SYSTEM_PATH = ("/opt/homebrew/bin", "/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin")


def label(worker_id: str, mode: str) -> str:
    return f"runner.{role(mode)}.{worker_id}"


def log_dir(home: str) -> str:
    return posixpath.join(home, "Library", "Logs", "runner")


def agent_path(python: str) -> str:
    """launchd starts agents with PATH=/usr/bin:/bin:/usr/sbin:/sbin: no Homebrew git, no venv."""
    folders = [posixpath.dirname(python)] + [f for f in _SYSTEM_PATH if f != posixpath.dirname(python)]
    return ":".join(folders)


def gui_domain() -> str:
    return f"gui/{os.getuid()}" if hasattr(os, "getuid") else "gui/$(id -u)"


def read_env_file(path: str) -> dict[str, str]:
    """NAME=value lines, as systemd reads an EnvironmentFile: '#' comments,
    an optional 'export ', values optionally in single or double quotes."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read the env file {path}: {exc}") from None
    values: dict[str, str] = {}
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        name, equals, value = line.partition("=")
        name, value = name.strip(), _unquote(value.strip())
        if not equals or not _ENV_NAME.fullmatch(name):
            problems.append(f"{path}:{number}: expected NAME=value, where NAME is letters, digits and _")
        elif has_control_char(value.replace("\t", " ")):
            problems.append(
                f"{path}:{number}: the value of {name} contains a control character, which a plist cannot carry"
            )
        else:
            values[name] = value
    if problems:
        raise BadInput(problems)
    return values


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        inner = value[1:-1]
        return re.sub(r'\\(["\\$`])', r"\1", inner) if value[0] == '"' else inner
    return value


def _lines(elements: list[str], depth: int = 2) -> str:
    return "\n".join("\t" * depth + element for element in elements)


def _string(value: str) -> str:
    return f"<string>{escape(value)}</string>"


def parse_print(text: str) -> dict:
    """The fields of `launchctl print gui/<uid>/<label>` that status needs."""
    fields: dict = {}
    arguments: list[str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if arguments is not None:
            if line == "}":
                fields["arguments"], arguments = arguments, None
            else:
                arguments.append(line)
        elif line == "arguments = {":
            arguments = []
        elif " = " in line and raw.startswith("\t") and not raw.startswith("\t\t"):
            key, value = line.split(" = ", 1)
            fields.setdefault(key, value)
    return fields


class Launchd(Scheduler):
    name = "launchd"
    platform = "darwin"
    load_folder = "~/Library/LaunchAgents"

    def load_commands(self, spec: ScheduleSpec, files: list[RenderedFile]) -> list[str]:
        # the user's GUI domain on that computer, as its shell finds it; the path as its shell expands it
        return [
            re.sub(r"'~/([\w@%+=:,./-]+)'", r"~/\1", line.replace(gui_domain(), "gui/$(id -u)"))
            for line in super().load_commands(spec, files)
        ]

    tool = "launchctl"

    def target_home(self, repo: str) -> tuple[str, str | None]:
        parts = repo.split("/")
        if len(parts) > 2 and parts[1] == "Users" and parts[2]:
            home = f"/Users/{parts[2]}"
        else:
            home = f"/Users/{user_name() or 'user'}"
        return home, f"assumed the home folder on the target Mac is {home}: logs go to {log_dir(home)}"

    def install_dir(self) -> Path:
        return Path.home() / "Library" / "LaunchAgents"

    def own_files(self, worker_id: str, mode: str) -> list[str]:
        return [label(worker_id, mode) + ".plist"]

    def render(self, spec: ScheduleSpec) -> list[RenderedFile]:
        environment = {"PATH": agent_path(spec.python), "PYTHONUNBUFFERED": "1"}
        if spec.env_file is not None:
            environment.update(read_env_file(spec.env_file))
        name = label(spec.worker_id, spec.mode)
        values = {
            "LABEL": escape(name),
            "PROGRAM_ARGUMENTS": _lines([_string(arg) for arg in worker_argv(spec)]),
            "ENVIRONMENT_VARIABLES": _lines(
                [f"<key>{escape(k)}</key>\n\t\t{_string(v)}" for k, v in sorted(environment.items())]
            ),
            "EXIT_TIMEOUT": str(stop_timeout(spec)),
            "LOG_FILE": escape(posixpath.join(log_dir(spec.home), name + ".log")),
            "INTERVAL": str(spec.interval),
        }
        text = fill_template(values, "launchd", f"{role(spec.mode)}.plist")
        return [RenderedFile(self.own_files(spec.worker_id, spec.mode)[0], text.encode("utf-8"))]

    def prepare(self, spec: ScheduleSpec) -> None:
        Path(log_dir(spec.home)).mkdir(parents=True, exist_ok=True)  # launchd does not create it

    def activate(self, spec: ScheduleSpec, paths: list[Path], replaced: bool) -> list[Command]:
        target = f"{gui_domain()}/{label(spec.worker_id, spec.mode)}"
        return [
            Command(["launchctl", "bootout", target], on_failure="ignore"),  # not loaded yet is fine
            Command(["launchctl", "enable", target]),
            Command(["launchctl", "bootstrap", gui_domain(), str(paths[0])]),
        ]

    def deactivate(self, worker_id: str, mode: str, links_removed: bool = False) -> list[Command]:
        return [Command(["launchctl", "bootout", f"{gui_domain()}/{label(worker_id, mode)}"], on_failure="warn")]

    def query(self, spec: ScheduleSpec) -> OsState:
        target = f"{gui_domain()}/{label(spec.worker_id, spec.mode)}"
        state = OsState()
        done = ask(["launchctl", "print", target])
        if done.returncode != 0:
            state.answers[f"print {target}"] = "not loaded"
            state.enabled = state.running = False
            state.problems.append(
                f"{target} is not loaded: run launchctl bootstrap {gui_domain()} "
                f"{self.install_dir() / self.own_files(spec.worker_id, spec.mode)[0]}"
            )
            return state
        fields = parse_print(done.stdout)
        status, last_exit = fields.get("state", "unknown"), fields.get("last exit code", "(never exited)")
        state.answers[f"print {target}"] = f"state {status}, last exit code {last_exit}"
        state.enabled = True
        # A tick agent is idle between ticks: loaded is running as a schedule.
        state.running = status == "running" if spec.mode == "daemon" else True
        if not state.running:
            state.problems.append(f"{target} is loaded but {status}")
        state.failing = last_exit not in ("0", "(never exited)")
        if state.failing:
            state.problems.append(f"{target} last exited with {last_exit}: see {log_dir(spec.home)}")
        if "arguments" in fields and fields["arguments"] != worker_argv(spec):
            state.drifted = True
            state.problems.append(f"{target} runs other arguments than its plist: re-run install-schedule to reload it")
        return state
