"""How the pipeline's commands run for real: in the step's worktree, argv only, with the
tokens filled in, the environment set, a timeout, output captured, and the session
recorded so a takeover on this host can kill what a dead worker left running. Orient runs
in a throwaway worktree of its own: nothing it writes reaches the step's change.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.core.layout import without_repository_env
from runner.core.model import Step
from runner.store import Store
from runner.worker import executor, qa, sandbox, worktrees
from runner.worker.attempt import State
from runner.worker.executor import RunResult
from runner.worker.gates import GateResult, run_gates
from runner.worker.livelog import LiveOutput
from runner.worker.prompts import as_argument, current_phase, prompt_text, substitute, verdict_json, write


def has_conflict_markers(path: Path) -> bool:
    """A line git starts a conflict with (<<<<<<< ours) or ends it with (>>>>>>> theirs)."""
    try:
        with open(path, "rb") as handle:
            return any(line.startswith((b"<<<<<<< ", b">>>>>>> ")) for line in handle)
    except (FileNotFoundError, IsADirectoryError):
        return False  # resolved by deleting it


class AnyEvent:
    """Set when any of several events is set (the executor polls is_set)."""

    def __init__(self, *events: threading.Event):
        self.events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


class WorktreeActions:
    def __init__(self, store: Store, worker: str, worktree: Path, base: str, files_dir: Path, log_path: Path,
                 read_queue_file: Callable[[str], bytes | None], plan, cancel: threading.Event, lost: threading.Event,
                 stopping: threading.Event, sessions_dir: Path, default_timeout: float | None,
                 live: LiveOutput | None = None):
        self.store = store
        self.worker = worker
        self.worktree = worktree
        self.base = base
        self.files = files_dir  # this attempt's prompt, output and notes files
        self.log_path = log_path
        self.read_queue_file = read_queue_file
        self.plan = plan
        self.cancel = AnyEvent(cancel, lost)
        self._lost = lost
        self._stopping = stopping
        self.sessions_dir = sessions_dir
        self.default_timeout = default_timeout
        self.live = live or LiveOutput(log_path)  # what the heartbeat shows of the run in progress
        self.started = time.monotonic()
        self.notes_file = files_dir / "notes.md"
        self.artifact = files_dir / "implement.out"
        self.parents = [base]  # of the attempt's result commit (a resolve pass changes them)
        self.scenario = ""  # the Automated QA scenario [roles.qa] is walking through

    # -- what the pipeline asks --

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def stopping(self) -> bool:
        return self._stopping.is_set()

    def lost(self) -> bool:
        return self._lost.is_set()

    def changed_files(self) -> list[str]:
        return self.store.snapshot_worktree(self.worktree, self.base)[1]

    def commit(self, state: State) -> tuple[str | None, list[str]]:
        """The worktree as the attempt's result commit, and the paths it changes on its base."""
        return worktrees.commit(self.store, self.worker, state, self.worktree, self.base, self.parents)

    # -- a resolve pass: the result brought onto an integration tip that moved --

    def merge_onto(self, ours: str, onto: str) -> tuple[str, ...]:
        conflicted = self.store.merge_in_worktree(self.worktree, ours, onto)
        self.base, self.parents = onto, [onto, ours]  # the integration's line stays the first parent
        return conflicted

    def restart_at(self, onto: str) -> None:
        self.store.reset_worktree(self.worktree, onto)
        self.base, self.parents = onto, [onto]

    def conflicts_left(self, paths: tuple[str, ...]) -> list[str]:
        return [path for path in paths if has_conflict_markers(self.worktree / path)]

    def gates(self, state: State) -> list[GateResult]:
        walk = (lambda name, label: self.walk_through(name, label, state)) if state.config.roles.get("qa") else None
        return run_gates(self.worktree, state.step.text, state.step.get("required_outputs", []), state.config,
                         lambda name, argv: self.execute(name, argv, state, self.worktree, None), walk)

    def walk_through(self, name: str, scenario: str, state: State) -> GateResult:
        """An Automated QA scenario without a command, handed to [roles.qa] in the step's worktree."""
        before = self.store.snapshot_worktree(self.worktree, self.base)[0]
        self.scenario = scenario
        try:
            result = self.run("qa", state)
        finally:
            self.scenario = ""
        after = self.store.snapshot_worktree(self.worktree, self.base)[0]
        changed = sorted({c.path for c in self.store.diff_trees(before, after)}) if after != before else []
        return qa.judge(name, scenario, result, changed)

    def run(self, role: str, state: State) -> RunResult | None:
        argv = self.argv(role, state)
        if argv is None:
            return None
        output = self.artifact if role == "implement" else self.files / f"{role}.out"
        output.unlink(missing_ok=True)
        if role != "orient":
            return self.execute(role, argv, state, self.worktree, output, role)
        scratch = self.files / "orient-worktree"
        self.store.add_worktree(scratch, self.base)
        try:
            return self.execute(role, self.argv(role, state, scratch) or argv, state, scratch, output, role)
        finally:
            self.store.remove_worktree(scratch)
            shutil.rmtree(scratch, ignore_errors=True)

    # -- how --

    def argv(self, role: str, state: State, cwd: Path | None = None) -> list[str] | None:
        if role == "implement":
            command = state.step.get("run") or list(state.config.harness.command)
        elif role == "context_floor":
            command = list(state.config.brakes.context_floor)
        else:
            configured = state.config.roles.get(role)
            command = list(configured.command) if configured else None
        if not command:
            return None
        return substitute(list(command), self.tokens(role, state, cwd or self.worktree))

    def tokens(self, role: str, state: State, cwd: Path) -> dict:
        step: Step = state.step
        scenario = self.scenario if role == "qa" else ""
        tokens: dict[str, Any]
        prompt = lambda: prompt_text(role, self.read_queue_file, step.text, state.feedback, tokens, state.context,
                                     scenario)
        tokens = {
            "prompt_file": lambda: write(self.files / f"{role}.prompt.md", prompt()),
            "prompt": lambda: as_argument(prompt(), self.files / f"{role}.prompt.md"),
            "step_file": lambda: write(self.files / "step.md", step.text),
            "step": step.id,
            "title": step.title,
            "attempt": str(state.attempt),
            "cwd": str(cwd),
            "worktree": str(cwd),
            "worker": self.worker,
            "feedback": state.feedback,
            "output": str(self.artifact if role == "implement" else self.files / f"{role}.out"),
            "artifact": str(self.artifact),
            "notes_file": str(self.notes_file),
            "diff_file": lambda: self._diff(),
            "verdict": lambda: verdict_json(state.verdict),
            "findings": state.findings,
            "current_task": f"{step.id}: {step.title}",
            "current_phase": lambda: current_phase(self.plan, step.id),
            "context": state.context,
            "scenario": scenario,
        }
        return tokens

    def _diff(self) -> str:
        path = self.files / "change.diff"
        path.write_bytes(self.store.diff_text(self.worktree, self.base) if self.worktree.exists() else b"")
        return str(path)

    def env(self, state: State, cwd: Path) -> dict[str, str]:
        return {
            **without_repository_env(os.environ),  # the step's git finds its worktree
            "RUNNER_STEP": state.step.id,
            "RUNNER_ATTEMPT": str(state.attempt),
            "RUNNER_WORKER": self.worker,
            "RUNNER_WORKTREE": str(cwd),
        }

    def timeout(self, state: State, role: str | None = None) -> float | None:
        """The step's timeout, a role's own when shorter ([roles.*] timeout), and the step's budget left."""
        value = state.step.meta.get("timeout")
        if isinstance(value, str) and value.strip().lower() == "none":
            timeout = None
        else:
            from runner.core.model import parse_duration

            timeout = parse_duration(value) if value is not None else self.default_timeout
        own = state.config.roles[role].timeout if role in state.config.roles else None
        if own is not None:
            timeout = own if timeout is None else min(timeout, own)
        budget = state.config.brakes.step_budget
        if budget is not None:
            left = max(1.0, budget - state.spent_before - self.elapsed())
            timeout = left if timeout is None else min(timeout, left)
        return timeout

    def execute(self, name: str, argv: list[str], state: State, cwd: Path, output: Path | None,
                role: str | None = None) -> RunResult:
        stdout = output.with_suffix(".stdout") if output else None
        self.live.running(name, stdout)
        try:
            box, env = sandbox.wrap(state.config, role, cwd, self.files, self.store.state_dir, self.store.workdir,
                                    self.env(state, cwd))
            result = executor.run(argv, cwd, env, self.log_path, self.timeout(state, role),
                                  self.cancel, stdout,
                                  session_file=self.sessions_dir / f"{state.step.id}-a{state.attempt}.json",
                                  sandbox=box)
        finally:
            self.live.running(None)
        written = output.read_text(errors="replace") if output and output.exists() else ""
        printed = stdout.read_text(errors="replace") if stdout and stdout.exists() else ""
        result.output = written if written.strip() else printed
        executor.scrub(result, state.config.secrets)  # what it printed goes no further than the log with a secret in it
        if stdout and printed:
            with open(self.log_path, "a") as log:
                log.write(printed)
        return result
