"""Install, uninstall and status, the same for every OS: write the files where the OS
looks for them, keep a record of what was asked for, run the OS's commands (never a
command of another OS), and ask the OS how the schedule is doing.

Every worker id owns a fixed set of files and a record of the spec it was installed
with, so uninstall removes exactly those and status can re-render what install
would write. Files shared by the worker ids of a mode go with the last of them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from runner.core.errors import BadInput, RunnerError
from runner.core.ids import worker_id_problem
from runner.schedules import registry
from runner.schedules.base import MODES, Command, RenderedFile, Scheduler, ScheduleSpec, config_home, records_dir
from runner.schedules.options import Target

NO_ACTIVATE_ENV = "RUNNER_SCHEDULE_NO_ACTIVATE"


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
    not_activated: str | None = None  # activation was asked for and could not be done: why
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# --- records ----------------------------------------------------------------


def record_path(scheduler: Scheduler, worker_id: str) -> Path:
    return records_dir() / f"{scheduler.name}-{worker_id}.json"


def read_record(scheduler: Scheduler, worker_id: str) -> ScheduleSpec | None:
    try:
        data = json.loads(record_path(scheduler, worker_id).read_text(encoding="utf-8"))
        return ScheduleSpec(**data["spec"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_record(spec: ScheduleSpec, scheduler: Scheduler, paths: list[Path]) -> None:
    record = {"spec": asdict(spec), "files": [str(p) for p in paths]}
    _write_if_changed(record_path(scheduler, spec.worker_id), (json.dumps(record, indent=2) + "\n").encode("utf-8"))


def installed_modes(scheduler: Scheduler, worker_id: str) -> list[str]:
    folder = scheduler.install_dir()
    return [m for m in MODES if any((folder / rel).exists() for rel in scheduler.own_files(worker_id, m))]


# --- running the OS's commands --------------------------------------------


def os_blocker(scheduler: Scheduler) -> str | None:
    """Why this OS's scheduler cannot be asked from here, or None."""
    if scheduler is not registry.native():
        return f"{scheduler.name} is not this computer's scheduler"
    if shutil.which(scheduler.tool) is None:
        return f"{scheduler.tool} was not found"
    return scheduler.unreachable()


def activation_blocker(scheduler: Scheduler, activate: bool) -> str | None:
    """Why OS commands will not run now, or None when they will."""
    if scheduler is registry.native():
        if not activate:
            return "activation was skipped (--no-activate)"
        if os.environ.get(NO_ACTIVATE_ENV, "") not in ("", "0"):
            return f"activation was skipped ({NO_ACTIVATE_ENV} is set)"
    return os_blocker(scheduler)


def _run(command: Command, outcome: Outcome) -> None:
    try:
        done = subprocess.run(command.argv, capture_output=True, text=True, timeout=180, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        reason = f"could not run: {exc}"
    else:
        outcome.ran.append(command)
        if done.returncode == 0:
            return
        reason = f"failed with exit code {done.returncode}: {(done.stderr or done.stdout).strip() or 'no output'}"
    if command.on_failure == "fail":
        raise RunnerError(f"`{command.display()}` {reason}")
    if command.on_failure == "warn":
        outcome.warnings.append(f"`{command.display()}` {reason}")


def _run_all(commands: list[Command], outcome: Outcome, blocker: str | None) -> None:
    if outcome.dry_run:
        outcome.would_run += commands
    elif blocker is not None:
        outcome.to_run += commands
        outcome.skipped_because = blocker
    else:
        for command in commands:
            _run(command, outcome)


# --- files ------------------------------------------------------------------


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


def _put(files: list[RenderedFile], folder: Path, outcome: Outcome) -> bool:
    """Write (or preview) the files into folder; True when one that existed changed."""
    replaced = False
    for file in files:
        path = folder / file.relpath
        if outcome.dry_run:
            outcome.previews.append((path, file.content))
            continue
        existed = path.exists()
        if _write_if_changed(path, file.content):
            outcome.written.append(path)
            replaced = replaced or existed
        else:
            outcome.unchanged.append(path)
    return replaced


def _remove_file(path: Path, outcome: Outcome) -> None:
    if not outcome.dry_run:
        path.unlink(missing_ok=True)
    outcome.removed.append(path)


def _remove_empty_dirs(folder: Path, *, stop: Path, outcome: Outcome) -> None:
    """Remove `folder` and its parents while they are empty, up to (not including) `stop`."""
    if outcome.dry_run:
        return
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


# --- install / uninstall ----------------------------------------------------------


def install(
    target: Target, *, output_dir: str | os.PathLike | None = None, dry_run: bool = False, activate: bool = True
) -> Outcome:
    """Write the schedule's files where its OS looks for them (or into output_dir) and start it."""
    spec, scheduler = target.spec, registry.get(target.spec.scheduler)
    outcome = Outcome(dry_run=dry_run, warnings=list(target.assumed))
    files = scheduler.render(spec)
    if output_dir is not None:
        _put(files, Path(output_dir), outcome)
        outcome.notes.append("nothing was installed: the files were only written")
        held = "files" if len(files) > 1 else "file"
        where = (
            f"copy the files in {output_dir} into {scheduler.load_folder} (keeping their folders), then run"
            if scheduler.load_folder
            else f"run, in the folder that holds the {held}"
        )
        outcome.notes.append(f"to load it on the computer it is for, {where}:")
        outcome.notes += [f"  {line}" for line in scheduler.load_commands(spec, files)]
        return outcome
    if not target.here and not dry_run:
        raise BadInput(
            "this schedule is for another computer: pass --output DIR to write its files, or --dry-run to print them"
        )
    blocker = None if dry_run else activation_blocker(scheduler, activate)
    if blocker is not None and blocker == os_blocker(scheduler):
        outcome.not_activated = blocker  # it was asked for and could not be done
    for other in installed_modes(scheduler, spec.worker_id):
        if other != spec.mode:  # one schedule per worker id: the new mode replaces the old
            outcome.notes.append(f"replacing the {other} schedule of worker {spec.worker_id}")
            _remove_mode(scheduler, spec.worker_id, other, outcome, blocker)
            _run_all(scheduler.after_removal(spec.worker_id, [other]), outcome, blocker)
    folder = scheduler.install_dir()
    replaced = _put(files, folder, outcome)
    paths = [folder / f.relpath for f in files]
    if not dry_run:
        scheduler.prepare(spec)
        _write_record(spec, scheduler, paths)
    _run_all(scheduler.activate(spec, paths, replaced), outcome, blocker)
    if not dry_run:
        outcome.warnings += scheduler.warnings()
    return outcome


def _check_id(worker_id: str) -> None:
    if reason := worker_id_problem(worker_id):
        raise BadInput(reason)


def uninstall(scheduler_name: str | None, worker_id: str, *, dry_run: bool = False, activate: bool = True) -> Outcome:
    """Stop a worker's schedule and remove exactly the files install wrote for it."""
    scheduler = registry.get(scheduler_name)
    _check_id(worker_id)
    outcome = Outcome(dry_run=dry_run)
    blocker = None if dry_run else activation_blocker(scheduler, activate)
    modes = installed_modes(scheduler, worker_id)
    for mode in modes:
        _remove_mode(scheduler, worker_id, mode, outcome, blocker)
    record = record_path(scheduler, worker_id)
    if record.exists():
        _remove_file(record, outcome)
        _remove_empty_dirs(record.parent, stop=config_home(), outcome=outcome)
    if modes:
        _run_all(scheduler.after_removal(worker_id, modes), outcome, blocker)
    else:
        outcome.notes.append(f"no {scheduler.name} schedule is installed for worker {worker_id}: nothing to remove")
    return outcome


def _remove_mode(scheduler: Scheduler, worker_id: str, mode: str, outcome: Outcome, blocker: str | None) -> None:
    """Stop one mode's schedule of one worker and delete its files."""
    by_hand = [] if outcome.dry_run or blocker is None else scheduler.undo_enablement(worker_id, mode)
    _run_all(scheduler.deactivate(worker_id, mode, links_removed=bool(by_hand)), outcome, blocker)
    folder = scheduler.install_dir()
    for path in [folder / rel for rel in scheduler.own_files(worker_id, mode)] + by_hand:
        if path.exists() or path.is_symlink():
            _remove_file(path, outcome)
        _remove_empty_dirs(path.parent, stop=folder, outcome=outcome)
    own = set(scheduler.own_files(worker_id, mode))
    others = [p for p in folder.glob(scheduler.own_files("*", mode)[0]) if p.relative_to(folder).as_posix() not in own]
    for relpath in scheduler.shared_files(mode):
        if (folder / relpath).exists() and not others:
            _remove_file(folder / relpath, outcome)


# --- status -------------------------------------------------------------------


def status(scheduler_name: str | None, worker_id: str) -> dict:
    """Installed, enabled, running, failing, drifted, and healthy only when the OS said so."""
    scheduler = registry.get(scheduler_name)
    _check_id(worker_id)
    report: dict = {
        "scheduler": scheduler.name,
        "id": worker_id,
        "mode": None,
        "installed": False,
        "enabled": None,
        "running": None,
        "failing": None,
        "drifted": False,
        "healthy": False,
        "os_asked": False,
        "os_not_asked_because": None,
        "os_answers": {},
        "files": [],
        "problems": [],
    }
    folder = scheduler.install_dir()
    spec = read_record(scheduler, worker_id)
    if spec is None:
        leftovers = [
            folder / rel for m in MODES for rel in scheduler.own_files(worker_id, m) if (folder / rel).exists()
        ]
        report["files"] = [{"path": str(p), "state": "unrecorded"} for p in leftovers]
        report["problems"].append(
            "files of this worker exist without a record of their install: run uninstall-schedule, then "
            "install-schedule"
            if leftovers
            else f"no {scheduler.name} schedule is installed for worker {worker_id}: run install-schedule"
        )
        return report
    report.update(installed=True, mode=spec.mode, spec=asdict(spec))
    _check_files(scheduler, spec, report)
    reason = os_blocker(scheduler)
    if reason is None:
        try:
            state = scheduler.query(spec)
        except (OSError, subprocess.TimeoutExpired) as exc:
            reason = f"{scheduler.tool} did not answer ({exc})"
        else:
            report.update(
                os_asked=True,
                enabled=state.enabled,
                running=state.running,
                failing=state.failing,
                os_answers=state.answers,
            )
            report["drifted"] = report["drifted"] or state.drifted
            report["problems"] += state.problems
    if reason is not None:
        report["os_not_asked_because"] = reason
        report["problems"].append(f"{reason}, so whether the schedule is enabled, running or failing is unknown")
    report["healthy"] = (
        report["os_asked"]
        and not report["drifted"]
        and report["enabled"] is True
        and report["running"] is True
        and report["failing"] is False
    )
    return report


def _check_files(scheduler: Scheduler, spec: ScheduleSpec, report: dict) -> None:
    """Do the files hold what install would write now? Anything else has drifted."""
    folder = scheduler.install_dir()
    try:
        expected = scheduler.render(spec)
    except BadInput as exc:
        report["problems"] += [f"cannot render the schedule again: {p}" for p in exc.problems]
        report["drifted"] = True
        return
    for file in expected:
        path = folder / file.relpath
        try:
            state = "matches" if path.read_bytes() == file.content else "differs"
        except OSError:
            state = "missing"
        report["files"].append({"path": str(path), "state": state})
        if state != "matches":
            report["drifted"] = True
            report["problems"].append(f"{path} {state}: re-run install-schedule to rewrite it")
    if not os.path.exists(spec.python):
        report["drifted"] = True
        report["problems"].append(
            f"the interpreter {spec.python} no longer exists: re-run install-schedule with --python"
        )
