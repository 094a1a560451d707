"""What one attempt of a step is made of, for the pipeline and everything around it: its
state (what the pipeline knows and the commands see through their tokens), the runs the record
lists, the outcome it comes to, and the actions the pipeline asks of the world."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from runner.core.config import Config
from runner.core.limits import MAX_TEXT_BYTES
from runner.core.machine import Kind
from runner.core.model import Step
from runner.core.usage import UNKNOWN, Spend, Usage
from runner.worker.executor import RunResult
from runner.worker.gates import GateResult
from runner.worker.roles import Verdict

FAULT = "PIPELINE-FAULT"
WHAT = {
    "orient": "orient",
    "review": "independent review",
    "sweep": "edge-case sweep",
    "orchestrate": "orchestrate",
    "verify": "verifier",
    "resolve": "resolve",
    "context_floor": "context floor detector",
    "qa": "QA",
}


def named(paths, shown: int = 20) -> str:
    """Paths for a message: the first few, and how many more (a merge may conflict in thousands)."""
    paths = list(paths)
    return ", ".join(paths[:shown]) + (f" and {len(paths) - shown} more" if len(paths) > shown else "")


class ClaimLostDuringRun(Exception):
    """The claim went away while the step ran: nothing may be recorded."""


class LimitReached(Exception):
    """An agent run inside the gates (a QA scenario) ended on a provider's limit."""

    def __init__(self, name: str, result: RunResult):
        super().__init__(f"{name} hit a limit")
        self.name, self.result = name, result


MAX_FEEDBACK_BYTES = 4 * MAX_TEXT_BYTES  # what the next run of implement is told ({feedback}, {findings})


@dataclass
class Run:
    """One run of a command, role or gate: what the record commit lists."""

    name: str
    result: str  # pass | fail | not run
    seconds: float | None = None
    detail: str = ""
    usage: Any = None  # an agent run's: a Usage, UNKNOWN, or None (a gate, a plain command)
    model: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "result": self.result, "detail": self.detail[:200]}
        if self.seconds is not None:
            data["seconds"] = round(self.seconds, 1)
        if self.usage is not None:
            data["usage"] = self.usage.record() if isinstance(self.usage, Usage) else UNKNOWN
        if self.model:
            data["model"] = self.model[:100]
        return data


@dataclass
class State:
    """What the pipeline knows and the commands see through their tokens."""

    step: Step
    attempt: int
    config: Config  # runner.toml with the step's own overrides on top
    feedback: str = ""
    scores: list[float] = field(default_factory=list)
    spent_before: float = 0.0
    usage_before: Spend = field(default_factory=Spend)  # what the step's agent runs spent in earlier attempts
    plan_usd_before: float = 0.0  # what the plan's agent runs spent before this attempt (every step's)
    rung: int = 0  # the step's place on the model ladders
    verdict: Verdict | None = None
    findings: str = ""
    gates: list[GateResult] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    roles: list[GateResult] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)  # handoff sections
    implement_runs: int = 0
    resolves: int = 0  # resolve passes: the attempt brought onto an integration tip that moved
    fixes: int = 0  # fix-loop passes spent this attempt
    reviews: int = 0  # review rounds spent this attempt
    swept: bool = False
    context: str = ""  # the caller's context (`runner tick --context`): in every prompt and the handoff
    # faults of the sweep and the review: a person must look at the result
    holds: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    kind: Kind  # COMPLETE, FAIL, BLOCK or RELEASE
    reason: str | None = None
    permanent: bool = False
    hold: str | None = None  # a complete that a person must look at first
    review: str | None = None  # a block: what the person decides
    halt: str | None = None  # halt the queue with this reason (a verifier fault)
    fault: bool = False  # a release for a fault of runner itself
    rejected: bool = False  # a fail for good because the coder rejected the step (STEP_REJECTED)
    retry_at: datetime | None = None  # a release for a provider's limit: not before its reset
    account: str | None = None  # ...and the account it paused until then
    escalate: bool = False  # a fail on evidence (a failing gate or verdict): the next attempt moves up the ladder


class Actions(Protocol):
    def run(self, role: str, state: State) -> RunResult | None: ...  # None: the role is not configured
    def gates(self, state: State) -> list[GateResult]: ...
    def changed_files(self) -> list[str]: ...
    def elapsed(self) -> float: ...  # seconds this attempt has run
    def stopping(self) -> bool: ...  # the worker was asked to stop: give the step back
    def lost(self) -> bool: ...  # the claim went away
    # A resolve pass only (run_resolve):
    # git's merge of onto into ours' files: the paths left in conflict
    def merge_onto(self, ours: str, onto: str) -> tuple[str, ...]: ...
    def restart_at(self, onto: str) -> None: ...  # the worktree as a fresh checkout of onto
    # those of the paths that still hold a conflict-marker line neither side of the merge has
    def conflicts_left(self, paths: tuple[str, ...]) -> list[str]: ...
