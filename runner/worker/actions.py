"""How the pipeline's commands run for real: in the step's worktree, argv only, with the
tokens filled in, the environment set, a timeout, output captured, and the session
recorded so a takeover on this host can kill what a dead worker left running. Orient runs
in a throwaway worktree of its own: nothing it writes reaches the step's change.
"""

from __future__ import annotations

import os
import shlex
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from runner.core.accounts import Agent, agent_of
from runner.core.agentoutput import read_output
from runner.core.layout import without_repository_env
from runner.core.model import Step, utc_now
from runner.core.usage import Usage
from runner.queue.snapshot import Snapshot
from runner.store import Workspace
from runner.worker import executor, hostguard, qa, sandbox, worktrees
from runner.worker.attempt import LimitReached, State
from runner.worker.executor import RunResult
from runner.worker.gates import GateResult, run_gates
from runner.worker.livelog import LiveOutput
from runner.worker.markers import markers_left
from runner.worker.prompts import as_argument, current_phase, prompt_text, substitute, verdict_json, write


class AnyEvent:
    """Set when any of several events is set (the executor polls is_set)."""

    def __init__(self, *events: threading.Event):
        self.events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


@dataclass(frozen=True, kw_only=True)
class Where:
    """Where an attempt's commands run and what they write: the step's worktree and the commit it
    was made at, this attempt's files (prompts, outputs, notes), its log, and the folder of the
    session records a takeover on this host reads to kill what a dead holder left running."""

    worker: str
    worktree: Path
    base: str
    files: Path
    log_path: Path
    sessions_dir: Path


@dataclass(frozen=True, kw_only=True)
class Stops:
    """What ends an attempt early, each named where it is made: `cancel` (the grace period spent
    or a second signal: the running command is killed), `lost` (the heartbeat lost the claim) and
    `stopping` (the worker claims nothing more: the pipeline takes no further pass)."""

    cancel: threading.Event
    lost: threading.Event
    stopping: threading.Event


class WorktreeActions:
    """What the pipeline does in an attempt's worktree (`where`), read against the queue at
    `snap` (its plan, and the prompts and notes on its tip), ended early by `stops`."""

    def __init__(self, store: Workspace, where: Where, stops: Stops, snap: Snapshot, live: LiveOutput | None = None):
        self.store = store
        self.worker = where.worker
        self.worktree = where.worktree
        self.base = where.base
        self.files = where.files  # this attempt's prompt, output and notes files
        self.log_path = where.log_path
        self.read_queue_file: Callable[[str], bytes | None] = lambda path: store.file_at(snap.tip, path)
        self.plan = snap.plan
        self.cancel = AnyEvent(stops.cancel, stops.lost)
        self._lost = stops.lost
        self._stopping = stops.stopping
        self.sessions_dir = where.sessions_dir
        self.live = live or LiveOutput(where.log_path)  # what the heartbeat shows of the run in progress
        self.started = time.monotonic()
        self.notes_file = where.files / "notes.md"
        self.artifact = where.files / "implement.out"
        self.parents = [where.base]  # of the attempt's result commit (a resolve pass changes them)
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
        return markers_left(self.store, self.worktree, paths, self.parents)

    def gates(self, state: State) -> list[GateResult]:
        walk = (lambda name, label: self.walk_through(name, label, state)) if state.config.roles.get("qa") else None
        return run_gates(
            self.worktree,
            state.step.text,
            state.step.get("required_outputs", []),
            state.config,
            lambda name, argv: self.gate(name, argv, state),
            walk,
        )

    def gate(self, name: str, argv: list[str], state: State) -> RunResult:
        """A gate or test command, within this host's `[worker] max_parallel_gates` (runner.worker.hostguard)."""
        with hostguard.gate_slot(state.config.worker.max_parallel_gates, self.say, self.cancel):
            return self.execute(name, argv, state, self.worktree, None)

    def say(self, line: str) -> None:
        try:
            with open(self.log_path, "a") as log:
                log.write(line + "\n")
        except OSError:
            pass

    def walk_through(self, name: str, scenario: str, state: State) -> GateResult:
        """An Automated QA scenario without a command, handed to [roles.qa] in the step's worktree."""
        before = self.store.snapshot_worktree(self.worktree, self.base)[0]
        self.scenario = scenario
        try:
            result = self.run("qa", state)
        finally:
            self.scenario = ""
        if result is not None and result.limit is not None:
            raise LimitReached(name, result)
        after = self.store.snapshot_worktree(self.worktree, self.base)[0]
        changed = sorted({c.path for c in self.store.diff_trees(before, after)}) if after != before else []
        judged = qa.judge(name, scenario, result, changed)
        return replace(judged, usage=result.usage, model=result.model) if result is not None else judged

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
        prompt = lambda: prompt_text(
            role, self.read_queue_file, step.text, state.feedback, tokens, state.context, scenario
        )
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
            "model": self.model(role, state),
        }
        return tokens

    def agent(self, role: str, state: State) -> Agent | None:
        return agent_of(state.config, state.step.get("run"), role)

    def model(self, role: str, state: State) -> str:
        """The role's rung of its model ladder (`models`): the step's rung, or its top one."""
        agent = self.agent(role, state)
        return agent.models[min(state.rung, len(agent.models) - 1)] if agent and agent.models else ""

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
            # an agent CLI's own telemetry, attributed to the step, attempt and worker
            "OTEL_RESOURCE_ATTRIBUTES": ",".join(
                filter(
                    None,
                    [
                        os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "").strip(","),
                        f"runner.step={state.step.id}",
                        f"runner.attempt={state.attempt}",
                        f"runner.worker={quote(self.worker, safe='')}",
                    ],
                )
            ),
        }

    def timeout(self, state: State, role: str | None = None) -> float | None:
        """The step's timeout, a role's own when shorter ([roles.*] timeout), and the step's budget left."""
        value = state.step.meta.get("timeout")
        if isinstance(value, str) and value.strip().lower() == "none":
            timeout = None
        else:
            from runner.core.model import parse_duration

            timeout = parse_duration(value) if value is not None else state.config.worker.default_timeout
        own = state.config.roles[role].timeout if role in state.config.roles else None
        if own is not None:
            timeout = own if timeout is None else min(timeout, own)
        budget = state.config.brakes.step_budget
        if budget is not None:
            left = max(1.0, budget - state.spent_before - self.elapsed())
            timeout = left if timeout is None else min(timeout, left)
        return timeout

    def execute(
        self, name: str, argv: list[str], state: State, cwd: Path, output: Path | None, role: str | None = None
    ) -> RunResult:
        stdout = output.with_suffix(".stdout") if output else None
        self.live.running(f"{name}: {shlex.join(argv)}", stdout)  # the run, and its command as a shell would read it
        printed = ""
        try:
            box, env = sandbox.wrap(
                state.config, role, cwd, self.files, self.store.state_dir, self.store.workdir, self.env(state, cwd)
            )
            result = executor.run(
                argv,
                cwd,
                env,
                self.log_path,
                self.timeout(state, role),
                self.cancel,
                stdout,
                session_file=self.sessions_dir / f"{state.step.id}-a{state.attempt}.json",
                sandbox=box,
            )
            written = output.read_text(errors="replace") if output and output.exists() else ""
            printed = stdout.read_text(errors="replace") if stdout and stdout.exists() else ""
            result.output = written if written.strip() else printed
            if role is not None:  # an agent's JSON is read whole, before the scrub replaces anything in it
                self.read(result, role, state, printed, written)
            executor.scrub(result, state.config.secrets)  # what it printed goes no further than the log
        finally:
            self.live.joined(printed if stdout else "")  # the run ends as its stdout joins the log
        return result

    def read(self, result: RunResult, role: str, state: State, printed: str, written: str) -> None:
        """An agent role's answer, usage (priced from [prices] when its CLI gave no money) and
        limit, as its `output` reader reads them."""
        agent = self.agent(role, state)
        if agent is None:
            return
        ended = None if result.timed_out or result.cancelled or result.error else result.returncode
        reading = read_output(agent.output, printed, written, result.stderr, ended, utc_now())
        result.output = reading.answer
        filled = self.model(role, state) or None
        usage = reading.usage
        if isinstance(usage, Usage):
            usage = replace(usage, model=usage.model or filled).priced(state.config.prices)
        result.usage, result.limit, result.account = usage, reading.limit, agent.account
        result.model = usage.model if isinstance(usage, Usage) and usage.model else filled
