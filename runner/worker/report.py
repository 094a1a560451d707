"""What a tick says when it ends: one typed result (TickResult), with its fields as a dict
(as_dict); runner.commands.tickreport words it for people."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from runner.core.model import Sentinel, Status
from runner.core.stepfile import checklist, manual_checks
from runner.store import StoreError
from runner.worker.gates import PASS

STATUS_WORD: dict[str, str] = {
    Sentinel.STEP_COMPLETE: "completed",
    Sentinel.STEP_BLOCKED: "blocked",
    Sentinel.STEP_REJECTED: "failed",
    Sentinel.STEP_FAILED: "failed",
}


class TickOutcome(StrEnum):
    """What happened in a tick, when it is not the step's new status (a runner.core.model.Status)."""

    SKIP = "skip"
    NO_QUEUE = "no-queue"
    BLOCKED = "blocked"
    ERROR = "error"
    LOST = "lost"
    FAULT = "fault"
    REJECTED = "rejected"
    FIX = "fix"  # a hand-in not recorded: its checks failed, fixes are left
    RESOLVE = "resolve"  # a hand-in not recorded: its merge conflicts with the integration branch's new tip


O = TickOutcome
# Outcomes of a tick that did not go wrong: the daemon waits its interval after them.
IDLE_OUTCOMES = (O.SKIP, O.NO_QUEUE, O.BLOCKED, O.ERROR, O.LOST, O.FAULT)
FAILED_INSIDE = (O.ERROR, O.FAULT)  # a fault of the tick itself (exit 1), not of the step


@dataclass(frozen=True)
class Checklist:
    """N of M items of a checklist section that passed this run, each as [x] or [ ]."""

    items: tuple[tuple[str, bool], ...] = ()

    @property
    def passed(self) -> int:
        return sum(1 for _, ok in self.items if ok)

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "total": len(self.items),
            "items": [{"label": label, "passed": ok} for label, ok in self.items],
        }


def checklist_summary(step_text: str, gates, section: str, kind: str) -> Checklist:
    passed = {g.label for g in gates if g.section == kind and g.result == PASS}
    return Checklist(tuple((label, ticked or label in passed) for _, ticked, label, _ in checklist(step_text, section)))


@dataclass(frozen=True)
class StepReport:
    """What a run of a step did: the part of a result a person reads."""

    title: str
    final_status: str
    files_changed: list[str]
    automated_verification: Checklist
    automated_qa: Checklist
    qa_doc: str | None
    manual_checks_left: list[str]
    gates: list[dict[str, Any]]
    roles: list[dict[str, Any]]
    runs: list[dict[str, Any]] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    log: str | None = None

    @classmethod
    def of(
        cls, state, final_status: str, files: list[str], runs: list, log: str | None, qa_doc: str | None
    ) -> StepReport:
        step = state.step
        return cls(
            step.title,
            final_status,
            files,
            checklist_summary(step.text, state.gates, "Automated Verification", "check"),
            checklist_summary(step.text, state.gates, "Automated QA", "qa"),
            qa_doc,
            manual_checks(step.text),
            [g.as_dict() for g in state.gates],
            [r.as_dict() for r in state.roles],
            runs,
            list(state.faults),
            list(state.overrides),
            log,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "final_status": self.final_status,
            "files_changed": self.files_changed,
            "automated_verification": self.automated_verification.as_dict(),
            "automated_qa": self.automated_qa.as_dict(),
            "qa_doc": self.qa_doc,
            "manual_checks_left": self.manual_checks_left,
            "gates": self.gates,
            "roles": self.roles,
            "runs": self.runs,
            "faults": self.faults,
            "overrides": self.overrides,
            "log": self.log,
        }


@dataclass(frozen=True)
class HandIn:
    """An agent's hand-in that was not recorded (`runner submit`): what to fix, and what is left."""

    worktree: str
    feedback: str
    fixes_left: int
    review_rounds_left: int
    conflicts: tuple[str, ...] = ()


@dataclass(frozen=True)
class TickResult:
    """How a tick (or a hand-in) ended. `sentinel` is the word scripts match (SKIP,
    STEP_COMPLETE, STEP_BLOCKED, STEP_REJECTED, STEP_FAILED; None for a hand-in not recorded),
    `outcome` what happened (the step's new status, or skip, lost, error, fault, no-queue, fix,
    resolve)."""

    sentinel: str | None
    outcome: str
    worker: str
    reason: str | None = None
    step: str | None = None
    attempt: int | None = None
    will_retry: bool | None = None
    commit: str | None = None
    blocked: tuple[str, ...] = ()  # the steps that wait on failed ones, when nothing else can move
    report: StepReport | None = None
    hand_in: HandIn | None = None

    @property
    def status(self) -> str:
        return "not recorded" if self.hand_in else STATUS_WORD.get(self.sentinel or "", "skipped")

    @property
    def failed_inside(self) -> bool:
        return self.outcome in FAILED_INSIDE

    @property
    def idle(self) -> bool:
        return self.outcome in IDLE_OUTCOMES

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "sentinel": self.sentinel,
            "status": self.status,
            "outcome": self.outcome,
            "reason": self.reason,
            "worker": self.worker,
        }
        optional = {
            "step": self.step,
            "attempt": self.attempt,
            "commit": self.commit,
            "steps": list(self.blocked) or None,
        }
        data.update({key: value for key, value in optional.items() if value is not None})
        if self.report is not None:
            data.update(self.report.as_dict(), will_retry=self.will_retry, commit=self.commit)
        elif self.will_retry is not None:
            data["will_retry"] = self.will_retry
        if self.hand_in is not None:
            hand_in = self.hand_in
            data.update(
                worktree=hand_in.worktree,
                feedback=hand_in.feedback,
                fixes_left=hand_in.fixes_left,
                review_rounds_left=hand_in.review_rounds_left,
            )
            if hand_in.conflicts:
                data["conflicts"] = list(hand_in.conflicts)
        return data


def skip(
    worker: str, reason: str, outcome: str = TickOutcome.SKIP, step: str | None = None, attempt: int | None = None
) -> TickResult:
    return TickResult(Sentinel.SKIP, outcome, worker, reason, step, attempt)


def lost(queue, worker: str, step_id: str, attempt: int, reason: str) -> TickResult:
    """The claim went away under a worker: taken over (SKIP), or aborted by a person (STEP_REJECTED)."""
    try:
        step = queue.snapshot().plan.steps.get(step_id)
    except StoreError:
        step = None
    last_error = str(step.meta.get("last_error") or "") if step else ""
    if step is not None and step.status == Status.FAILED and last_error.startswith("aborted by"):
        return TickResult(Sentinel.STEP_REJECTED, TickOutcome.REJECTED, worker, last_error, step_id, attempt)
    return skip(worker, reason, TickOutcome.LOST, step_id, attempt)
