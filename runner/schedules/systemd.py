"""systemd user units (Linux): shared template units and one drop-in per worker id.

The template units (runner-worker@.service, runner-tick@.service, runner-tick@.timer)
are the same for every worker; each worker id gets drop-ins beside them with its
command line, stop timeout, env file and tick period. `systemctl --user` enables and
starts the daemon's service or the tick's timer.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from runner.schedules.base import (
    Command,
    OsState,
    RenderedFile,
    Scheduler,
    ScheduleSpec,
    ask,
    config_home,
    fill_template,
    stop_timeout,
    template,
    user_name,
    worker_argv,
)

DROPIN = "runner.conf"
_PLAIN = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


def quote(arg: str, *, expand_env: bool = True) -> str:
    """One ExecStart= word that systemd reads back as exactly `arg`.

    % starts a specifier and $ a variable (systemd.service(5)), so they are
    doubled; a double-quoted word takes C escapes (systemd.syntax(7)). The
    executable itself is never variable-expanded, hence `expand_env`.
    """
    text = arg.replace("%", "%%")
    if expand_env:
        text = text.replace("$", "$$")
    if _PLAIN.fullmatch(arg):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def command_line(argv: list[str]) -> str:
    return " ".join([quote(argv[0], expand_env=False)] + [quote(a) for a in argv[1:]])


def unit(worker_id: str, mode: str) -> str:
    """The unit that install enables: the daemon's service or the tick's timer."""
    return f"runner-worker@{worker_id}.service" if mode == "daemon" else f"runner-tick@{worker_id}.timer"


def service(worker_id: str, mode: str) -> str:
    """The unit that runs the worker (for a tick, the one the timer starts)."""
    return f"runner-worker@{worker_id}.service" if mode == "daemon" else f"runner-tick@{worker_id}.service"


def timer_jitter(interval: int) -> int:
    return max(1, min(60, interval // 10))


class Systemd(Scheduler):
    name = "systemd"
    platform = "linux"
    load_folder = "~/.config/systemd/user"
    tool = "systemctl"

    def problems(self, spec: ScheduleSpec) -> list[str]:
        problems = []
        # systemd refuses executable names with quotes or backslashes, and would
        # expand ${...} in argv[0] (which it takes from the same word).
        bad = sorted(set(spec.python) & set("\"'\\$"))
        if bad:
            problems.append(
                f"systemd cannot run an interpreter whose path contains {' '.join(bad)}: {spec.python!r}; pass "
                "--python with another path to it (a symlink works)"
            )
        env_file = spec.env_file
        if env_file is not None and (env_file != env_file.rstrip() or env_file.endswith("\\")):
            problems.append(
                f"the env file path {env_file!r} ends with a space or a backslash, which a unit file cannot carry: "
                "rename it"
            )
        return problems

    def install_dir(self) -> Path:
        return config_home() / "systemd" / "user"

    def own_files(self, worker_id: str, mode: str) -> list[str]:
        if mode == "daemon":
            return [f"runner-worker@{worker_id}.service.d/{DROPIN}"]
        return [f"runner-tick@{worker_id}.service.d/{DROPIN}", f"runner-tick@{worker_id}.timer.d/{DROPIN}"]

    def shared_files(self, mode: str) -> list[str]:
        return ["runner-worker@.service"] if mode == "daemon" else ["runner-tick@.service", "runner-tick@.timer"]

    def render(self, spec: ScheduleSpec) -> list[RenderedFile]:
        files = [RenderedFile(name, template("systemd", name).encode("utf-8")) for name in self.shared_files(spec.mode)]
        service_dropin, *timer_dropin = self.own_files(spec.worker_id, spec.mode)
        environment_file = ""
        if spec.env_file is not None:
            # EnvironmentFile= takes the rest of the line as one path; only specifiers expand in it.
            environment_file = "EnvironmentFile=" + spec.env_file.replace("%", "%%")
        text = fill_template(
            {
                "WORKER_ID": spec.worker_id,
                "EXEC_START": command_line(worker_argv(spec)),
                "STOP_TIMEOUT": str(stop_timeout(spec)),
                "ENVIRONMENT_FILE": environment_file,
            },
            "systemd",
            "instance-service.conf",
        )
        files.append(RenderedFile(service_dropin, text.encode("utf-8")))
        if timer_dropin:
            assert spec.interval is not None  # a tick's spec always has one (options.build_spec)
            values = {
                "WORKER_ID": spec.worker_id,
                "INTERVAL": str(spec.interval),
                "JITTER": str(timer_jitter(spec.interval)),
            }
            files.append(
                RenderedFile(timer_dropin[0], fill_template(values, "systemd", "instance-timer.conf").encode("utf-8"))
            )
        return files

    def activate(self, spec: ScheduleSpec, paths: list[Path], replaced: bool) -> list[Command]:
        enabled = unit(spec.worker_id, spec.mode)
        commands = [
            Command(["systemctl", "--user", "daemon-reload"]),
            Command(["systemctl", "--user", "enable", "--now", enabled]),
        ]
        if replaced:  # enable --now leaves a running unit on its old settings
            commands.append(Command(["systemctl", "--user", "try-restart", enabled]))
        return commands

    def deactivate(self, worker_id: str, mode: str, links_removed: bool = False) -> list[Command]:
        units = [unit(worker_id, mode)] + ([service(worker_id, mode)] if mode == "tick" else [])
        if links_removed:
            return [Command(["systemctl", "--user", "stop", *units], on_failure="warn")]
        return [
            Command(["systemctl", "--user", "disable", "--now", units[0]], on_failure="warn"),
            *[Command(["systemctl", "--user", "stop", u], on_failure="warn") for u in units[1:]],
        ]

    def after_removal(self, worker_id: str, modes: list[str]) -> list[Command]:
        units = []
        for mode in modes:
            units += [service(worker_id, mode)] + ([unit(worker_id, mode)] if mode == "tick" else [])
        return [
            Command(["systemctl", "--user", "daemon-reload"], on_failure="warn"),
            # reset-failed complains about units that did not fail; it only clears `systemctl --failed`.
            Command(["systemctl", "--user", "reset-failed", *units], on_failure="ignore"),
        ]

    def undo_enablement(self, worker_id: str, mode: str) -> list[Path]:
        wants = "default.target.wants" if mode == "daemon" else "timers.target.wants"
        link = self.install_dir() / wants / unit(worker_id, mode)
        return [link] if link.is_symlink() else []

    def unreachable(self) -> str | None:
        try:
            probe = ask(["systemctl", "--user", "show-environment"])
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"systemctl --user did not answer ({exc})"
        if probe.returncode != 0:
            first = (probe.stderr.strip().splitlines() or ["no reason given"])[0]
            return f"systemctl --user cannot reach a user service manager here ({first})"
        return None

    def warnings(self) -> list[str]:
        """User units stop at logout and start only at login unless lingering is on."""
        user = user_name()
        if not user or Path("/var/lib/systemd/linger", user).exists():
            return []
        return [
            (
                f"lingering is off for {user}: the worker starts only when {user} logs in and stops at logout. "
                f"To run it "
                f"from boot without a login, run: loginctl enable-linger {user}"
            )
        ]

    def query(self, spec: ScheduleSpec) -> OsState:
        enabled_unit, runs = unit(spec.worker_id, spec.mode), service(spec.worker_id, spec.mode)
        state = OsState()
        is_enabled = ask(["systemctl", "--user", "is-enabled", enabled_unit]).stdout.strip() or "unknown"
        is_active = ask(["systemctl", "--user", "is-active", enabled_unit]).stdout.strip() or "unknown"
        state.answers[f"is-enabled {enabled_unit}"] = is_enabled
        state.answers[f"is-active {enabled_unit}"] = is_active
        state.enabled = is_enabled == "enabled"
        state.running = is_active == "active"
        if not state.enabled:
            state.problems.append(
                f"{enabled_unit} is {is_enabled}, not enabled: run systemctl --user enable --now {enabled_unit}"
            )
        if not state.running and is_active not in ("failed", "activating"):
            state.problems.append(f"{enabled_unit} is {is_active}: run systemctl --user start {enabled_unit}")
        units = [enabled_unit] + ([runs] if runs != enabled_unit else [])
        shown = ask(
            ["systemctl", "--user", "show", "--property=Id,ActiveState,SubState,Result,NeedDaemonReload", *units]
        )
        for block in shown.stdout.strip().split("\n\n"):
            props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
            name = props.get("Id", "?")
            if props.get("NeedDaemonReload") == "yes":
                state.drifted = True
                state.problems.append(
                    f"{name} changed on disk since systemd loaded it: run systemctl --user daemon-reload"
                )
            if name == runs:
                state.answers[f"show {runs}"] = (
                    f"{props.get('ActiveState')}/{props.get('SubState')}, result {props.get('Result')}"
                )
                if (
                    props.get("ActiveState") == "failed"
                    or props.get("SubState") == "auto-restart"
                    or props.get("Result", "success") != "success"
                ):
                    state.failing = True
                    state.problems.append(
                        f"{runs} failed (result {props.get('Result')}): see journalctl --user -u {runs}"
                    )
                else:
                    state.failing = False
        return state
