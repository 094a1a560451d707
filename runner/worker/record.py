"""Recording an attempt: the step's outcome, its handoff, the step branch, the merge into
the integration branch and the worker's heartbeat, published as one all-or-nothing move
of every ref. A holder that lost its claim can never leave a merge behind: the queue's
compare-and-swap fails and nothing moves.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from runner.core import comments
from runner.core.accounts import AGENT_ROLES, agent_of
from runner.core.machine import Event, Kind, faults_in_a_row, holds, needs_person, resulting_status
from runner.core.model import Sentinel, Status, utc_now
from runner.core.stepfile import manual_checks
from runner.core.usage import run_note
from runner.queue.backoff import retry_at
from runner.queue.change import ClaimLost, Published
from runner.queue.merging import merge_update, step_branch_update
from runner.queue.queue import OUTCOME_TRIES, Queue
from runner.queue.snapshot import Snapshot
from runner.store import Conflict
from runner.worker import executor
from runner.worker.attempt import Outcome, State, named
from runner.worker.gates import PASS
from runner.worker.handoff import GateEntry, HandoffMeta, fence, render_handoff
from runner.worker.leaks import held_for_secrets
from runner.worker.report import StepReport, TickResult

QA_SPEC_RE = re.compile(r"^\s*QA Spec:\s*(\S+)", re.MULTILINE)


def sentinel_for(kind: Kind, status: str, rejected: bool = False) -> Sentinel:
    """The line a tick ends with, from the step's status after the event (docs/protocol.md);
    `rejected`: the coder rejected the step (its fail is for good)."""
    if rejected and status == Status.FAILED:
        return Sentinel.STEP_REJECTED
    if status == Status.DONE:
        return Sentinel.STEP_COMPLETE
    if status == Status.REVIEW:
        return Sentinel.STEP_BLOCKED
    if kind == Kind.RELEASE:
        return Sentinel.SKIP
    return Sentinel.STEP_FAILED


def qa_doc(step_text: str) -> str | None:
    match = QA_SPEC_RE.search(step_text)
    return match.group(1) if match else None


class MergeConflict(Exception):
    """The record's merge conflicts because the integration branch moved to `onto`: nothing was
    published; the attempt may be brought onto that tip (a resolve pass) and recorded again."""

    def __init__(self, paths: tuple[str, ...], onto: str):
        super().__init__(f"merge conflict onto {onto[:10]} in {named(paths)}")
        self.paths, self.onto = paths, onto


class Recorder:
    """Publishes what one attempt came to."""

    def __init__(self, queue: Queue, worker: str, incarnation: str | None, beat: Any):
        self.queue = queue
        self.worker = worker
        self.incarnation = incarnation
        self.beat = beat  # (last step, attempt, status) -> the heartbeat facts after this record

    def event(
        self, state: State, outcome: Outcome, snap: Snapshot, result: str | None, notes: str | None, elapsed: float
    ) -> Event:
        metrics: dict[str, Any] = {}
        if state.scores:  # the plateau window, as the loop-runner keeps it
            metrics["scores"] = state.scores[-state.config.brakes.score_plateau_window :]
        if state.config.brakes.step_budget is not None:
            metrics["spent"] = round(state.spent_before + elapsed, 1)
        if state.verdict is not None:
            metrics["last_verdict"] = state.verdict.as_dict()
        ladder = max(
            (
                len(agent.models)
                for role in AGENT_ROLES
                if (agent := agent_of(state.config, state.step.get("run"), role))
            ),
            default=0,
        )
        if outcome.escalate and outcome.kind == Kind.FAIL and state.rung < ladder - 1:
            metrics["rung"] = state.rung + 1  # the next attempt runs the next model up: the evidence said fail
        failures = int(state.step.meta.get("failures") or 0)
        backoff = (
            failures + 1
            if outcome.kind == Kind.FAIL
            else faults_in_a_row(state.step.meta) + 1
            if outcome.fault
            else None
        )
        complete = outcome.kind == Kind.COMPLETE
        branch = snap.config.queue.step_branch_prefix + state.step.id
        return Event(
            outcome.kind,
            self.worker,
            utc_now(),
            step=state.step.id,
            attempt=state.attempt,
            incarnation=self.incarnation,
            reason=outcome.hold or outcome.reason,
            permanent=outcome.permanent,
            retry_at=outcome.retry_at or (retry_at(snap.config, backoff) if backoff else None),
            account=outcome.account,
            hold=bool(outcome.hold),
            fault=outcome.fault,
            review=outcome.review,
            result={"branch": branch, "commit": result} if result and complete else None,
            metrics=metrics or None,
            ticked=tuple(_checked_commands(state)) if complete else (),
            notes=notes if complete else None,
            runs=tuple(run.as_dict() for run in state.runs),
        )

    def record(
        self,
        state: State,
        outcome: Outcome,
        result: str | None,
        files: list[str],
        notes: str | None,
        log_path,
        elapsed: float,
        snapshot: Snapshot,
        then=None,
        resolve: bool = False,
    ) -> tuple[Published, str]:
        """Publish the attempt's outcome (and the change `then` builds after it, see Queue.publish);
        (what was published, the sentinel). A merge that conflicts fails the attempt, or with
        `resolve` raises MergeConflict (a resolve pass may still bring it onto the new tip)."""
        queue = self.queue
        integration = snapshot.config.queue.integration_branch
        outcome, result = held_for_secrets(queue.store, outcome, result, snapshot.config.secrets)

        def build(snap: Snapshot):
            step = snap.plan.steps.get(state.step.id)
            step = step and step.full()
            if step is None or (why := holds(step.meta, self.worker, state.attempt, self.incarnation)):
                raise ClaimLost(
                    f"not recording {state.step.id} attempt {state.attempt}: {why if step else 'the step is gone'}"
                )
            event = self.event(state, outcome, snap, result, notes, elapsed)
            context = queue.context(snap, step)
            refs = []
            # no result: nothing to merge
            if event.kind == Kind.COMPLETE and result and not needs_person(step.meta, event, context):
                update = merge_update(queue.store, snap, result, step.id, state.attempt, self.worker)
                if isinstance(update, Conflict) and resolve:
                    raise MergeConflict(update.paths, str(snap.tips[integration]))
                if isinstance(update, Conflict):
                    passes = f" after {state.resolves} resolve pass(es)" if state.resolves else ""
                    why = (
                        f"merge conflict with {integration} in: {named(update.paths)}{passes} "
                        "(the next attempt starts from its new tip)"
                    )
                    event = replace(
                        event,
                        kind=Kind.FAIL,
                        reason=why,
                        result=None,
                        ticked=(),
                        notes=None,
                        retry_at=retry_at(snap.config, int(step.meta.get("failures") or 0) + 1),
                    )
                    refs.append(step_branch_update(snap.config, step.id, result, done=False))
                else:
                    event = replace(event, result={**(event.result or {}), "merge": update.new})
                    refs += [update, step_branch_update(snap.config, step.id, result, done=True)]
            elif result:
                refs.append(step_branch_update(snap.config, step.id, result, done=False))
            status = str(resulting_status(step.meta, event, context))
            refs.append(queue.beat_update(self.worker, self.beat(step.id, state.attempt, status)))
            handoff = self.handoff(state, event, status, files, log_path, elapsed, outcome.rejected)
            return queue.step_change(snap, event, handoff, refs)

        patience = max(snapshot.config.leases.lease / 2, 5.0)  # a flaky remote must not cost the attempt's work
        published = queue.publish(
            build,
            self.worker,
            snapshot=snapshot,
            tries=OUTCOME_TRIES,
            branches=[integration],
            patience=patience,
            then=then,
        )
        return published, sentinel_for(published.event.kind, published.change.status or "", outcome.rejected)

    def handoff(
        self,
        state: State,
        event: Event,
        status: str,
        files: list[str],
        log_path,
        elapsed: float,
        rejected: bool = False,
    ) -> bytes:
        meta = HandoffMeta(
            step=state.step.id,
            attempt=state.attempt,
            worker=self.worker,
            outcome=str(status),
            gates=[GateEntry(g.name, str(g.result), g.detail[:500]) for g in [*state.gates, *state.roles]],
            files_changed=files,
            duration_s=round(max(elapsed, 0.0), 2),
            result_commit=(event.result or {}).get("commit"),
            sentinel=str(sentinel_for(event.kind, status, rejected)),
            reason=event.reason[:1000] if event.reason else None,
            overrides=state.overrides,
            faults=state.faults,
            verdict=state.verdict.as_dict() if state.verdict else None,
            qa_doc=qa_doc(state.step.text),
        )
        sections = {
            "Pipeline faults": "\n".join(state.faults),
            "Overrides": "\n".join(f"- {item}" for item in state.overrides),
            "Context from the caller": fence(state.context) if state.context.strip() else "",
            "Runs": "\n".join(
                f"- {r['name']}: {r['result']}"
                + (f" in {r['seconds']}s" if "seconds" in r else "")
                + (f" ({note})" if (note := run_note(r)) else "")
                for r in event.runs
            ),
            **{title: fence(text) for title, text in state.notes.items() if text.strip()},
            "Manual checks left": "\n".join(f"- [ ] {item}" for item in manual_checks(state.step.text)),
            "Review comments": comments.report(
                state.step.meta.get("review_comments"), lambda path: self._result_file(event, path)
            ),
            "Feedback given to the last run": state.feedback if state.implement_runs > 1 else "",
            "Log tail": fence(executor.tail(log_path)) if log_path.exists() else "",
        }
        return render_handoff(meta, sections)

    def _result_file(self, event: Event, path: str) -> bytes | None:
        """A file of this attempt's result (None: no result, or the file is not in it)."""
        commit = (event.result or {}).get("commit")
        try:
            return self.queue.store.file_at(commit, path) if commit else None
        except Exception:  # noqa: BLE001 - a path git cannot read is a file the result does not have
            return None


def outcome_report(
    sentinel: str, state: State, worker: str, published: Published, files: list[str], log_path
) -> TickResult:
    """The result of a recorded attempt, with its step report (Automated Verification N/M, QA,
    manual checks left, final status)."""
    event, status = published.event, str(published.change.status)
    return TickResult(
        sentinel,
        status,
        worker,
        event.reason,
        state.step.id,
        state.attempt,
        will_retry=(status == Status.READY) if event.kind == Kind.FAIL else None,
        commit=published.commit,
        report=StepReport.of(state, status, files, list(event.runs), str(log_path), qa_doc(state.step.text)),
    )


def _checked_commands(state: State) -> list[str]:
    """The checklist commands (Automated Verification and QA) that passed, as written in the step."""
    return [g.name.split(": ", 1)[1] for g in state.gates if g.section and g.result == PASS]
