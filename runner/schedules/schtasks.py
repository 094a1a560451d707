"""Task Scheduler (Windows): one task per worker id, registered from an XML file.

`schtasks /Create /XML` wants UTF-16LE with a byte-order mark; the templates are
UTF-8 so that they read well, and render() encodes them. Task Scheduler keeps no
output, so the worker writes its own log (--log-file).
"""

from __future__ import annotations

import csv
import ntpath
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from xml.sax.saxutils import escape

from runner.schedules.base import (
    UTF16_BOM,
    Command,
    OsState,
    RenderedFile,
    Scheduler,
    ScheduleSpec,
    ask,
    fill_template,
    records_dir,
    role,
    worker_argv,
)

MAX_PATH = 260
TASK_NS = {"t": "http://schemas.microsoft.com/windows/2004/02/mit/task"}
RUNNING, NOT_YET_RUN = 0x41301, 0x41303  # a task's Last Result while it runs, before its first run


def task_name(worker_id: str, mode: str) -> str:
    return f"runner\\{role(mode)}-{worker_id}"


def log_file(worker_id: str, mode: str, here: bool) -> str:
    name = f"runner-{role(mode)}-{worker_id}.log"
    if here and os.environ.get("LOCALAPPDATA"):
        return os.path.join(os.environ["LOCALAPPDATA"], "runner", "logs", name)
    # Elsewhere: Task Scheduler expands the variable when it runs the task.
    return "%LOCALAPPDATA%\\runner\\logs\\" + name


def iso_duration(seconds: int) -> str:
    """xs:duration the way Task Scheduler writes them: 300 -> PT5M."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    time_part = "".join(f"{n}{unit}" for n, unit in ((hours, "H"), (minutes, "M"), (secs, "S")) if n)
    text = "P" + (f"{days}D" if days else "") + (f"T{time_part}" if time_part else "")
    return text if text != "P" else "PT0S"


class Schtasks(Scheduler):
    name = "schtasks"
    platform = "win32"
    tool = "schtasks"
    paths = ntpath
    min_interval = 60  # Task Scheduler repeats a task at most once a minute
    max_interval = 31 * 24 * 3600  # the schema's limit for a repetition

    def problems(self, spec: ScheduleSpec) -> list[str]:
        problems = []
        # Task Scheduler expands %VAR% in a task's command line and has no escape for it.
        values = [("the interpreter", spec.python), ("the repository path", spec.repo)]
        values += [("a tag", tag) for tag in spec.tags] + [
            ("the remote", spec.remote or ""),
            ("the queue branch", spec.queue_branch or ""),
        ]
        for what, value in values:
            if "%" in value:
                problems.append(
                    f"{what} {value!r} contains %, which Task Scheduler would expand as an environment variable: use a "
                    "value without it"
                )
        if len(spec.python) > MAX_PATH:
            problems.append(f"the interpreter path is longer than Task Scheduler's {MAX_PATH} characters")
        if spec.env_file is not None:
            problems.append(
                "Task Scheduler cannot give a task environment variables, so --env-file does not work with --os "
                "schtasks: set them for your user instead (setx NAME value) and install without --env-file"
            )
        return problems

    def install_dir(self) -> Path:
        return records_dir()

    def own_files(self, worker_id: str, mode: str) -> list[str]:
        return [f"runner-{role(mode)}-{worker_id}.xml"]

    def render(self, spec: ScheduleSpec) -> list[RenderedFile]:
        argv = self.argv(spec)
        values = {
            "DESCRIPTION": f"runner {role(spec.mode)} {spec.worker_id}",
            "URI": "\\" + task_name(spec.worker_id, spec.mode),
            "COMMAND": argv[0],
            # The interpreter splits its own command line by the MSVC rules list2cmdline follows.
            "ARGUMENTS": subprocess.list2cmdline(argv[1:]),
            "INTERVAL": iso_duration(spec.interval) if spec.mode == "tick" and spec.interval is not None else "",
        }
        text = fill_template({k: escape(v) for k, v in values.items()}, "schtasks", f"{role(spec.mode)}.xml")
        return [RenderedFile(self.own_files(spec.worker_id, spec.mode)[0], UTF16_BOM + text.encode("utf-16-le"))]

    def argv(self, spec: ScheduleSpec) -> list[str]:
        return worker_argv(spec, log_file=log_file(spec.worker_id, spec.mode, here=sys.platform == "win32"))

    def prepare(self, spec: ScheduleSpec) -> None:
        Path(log_file(spec.worker_id, spec.mode, here=True)).parent.mkdir(parents=True, exist_ok=True)

    def activate(self, spec: ScheduleSpec, paths: list[Path], replaced: bool) -> list[Command]:
        return [
            Command(
                ["schtasks", "/Create", "/XML", str(paths[0]), "/TN", task_name(spec.worker_id, spec.mode), "/F"],
                windows=True,
            )
        ]

    def deactivate(self, worker_id: str, mode: str, links_removed: bool = False) -> list[Command]:
        return [
            Command(["schtasks", "/Delete", "/TN", task_name(worker_id, mode), "/F"], on_failure="warn", windows=True)
        ]

    def query(self, spec: ScheduleSpec) -> OsState:
        name = task_name(spec.worker_id, spec.mode)
        state = OsState()
        done = ask(["schtasks", "/Query", "/TN", name, "/XML"])
        if done.returncode != 0:
            state.answers[f"query {name}"] = "not registered"
            state.enabled = state.running = False
            state.problems.append(f"task {name} is not registered: re-run install-schedule")
            return state
        # the text, without its encoding
        task = ET.fromstring(re.sub(r"^\s*<\?xml[^>]*\?>", "", done.stdout.lstrip("\ufeff")))
        state.enabled = (task.findtext("t:Settings/t:Enabled", "true", TASK_NS) or "true").strip().lower() == "true"
        if not state.enabled:
            state.problems.append(f"task {name} is disabled: run schtasks /Change /TN {name} /ENABLE")
        exec_ = task.find("t:Actions/t:Exec", TASK_NS)
        argv = self.argv(spec)
        registered = (
            (exec_.findtext("t:Command", "", TASK_NS), exec_.findtext("t:Arguments", "", TASK_NS))
            if exec_ is not None
            else None
        )
        if registered != (argv[0], subprocess.list2cmdline(argv[1:])):
            state.drifted = True
            state.problems.append(f"task {name} runs another command than its file: re-run install-schedule")
        # The verbose CSV's 7th column is Last Result, a number in every language.
        verbose = ask(["schtasks", "/Query", "/TN", name, "/FO", "CSV", "/V", "/NH"])
        rows = [row for row in csv.reader(verbose.stdout.splitlines()) if len(row) > 6]
        try:
            last = int(rows[0][6]) if rows else None
        except ValueError:
            last = None
        state.answers[f"query {name}"] = (
            f"{'enabled' if state.enabled else 'disabled'}, last result {last if last is not None else 'unknown'}"
        )
        state.running = last == RUNNING if spec.mode == "daemon" else state.enabled
        if spec.mode == "daemon" and not state.running:
            state.problems.append(
                f"task {name} is not running now: it starts within a minute if enabled; run schtasks /Run /TN {name}"
            )
        state.failing = None if last is None else last not in (0, RUNNING, NOT_YET_RUN)
        if state.failing:
            state.problems.append(
                f"task {name} last exited with {last}: see {log_file(spec.worker_id, spec.mode, here=True)}"
            )
        return state
