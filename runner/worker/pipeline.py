"""The step pipeline: orient -> implement -> gates -> verify -> fix loop -> orchestrate ->
sweep -> review, with its brakes. Pure given `Actions` (what runs the commands, the gates
and knows the clock), so its policy is tested in milliseconds with a scripted executor.

Faults never pass: a role or command that did not run, crashed or timed out ends the
attempt (an orient or implement fault is a retryable failure; a verifier fault halts the
queue or fails the attempt, as configured) or holds the result for a person (a sweep that
faulted, a review that faulted twice, a QA scenario [roles.qa] could not judge), flagged
PIPELINE-FAULT, never passed and never a reason to run the coder again. The fix loop is only
for gates that fail after a clean implement exit.
"""

from __future__ import annotations

from dataclasses import replace

from runner.core.limits import MAX_TEXT_BYTES, clip
from runner.core.machine import CONTEXT_HALT, REVIEW_BLOCKED, REVIEW_DEVIATION, VERIFIER_HALT, Kind
from runner.worker.attempt import (
    FAULT,
    MAX_FEEDBACK_BYTES,
    WHAT,
    Actions,
    ClaimLostDuringRun,
    LimitReached,
    Outcome,
    Run,
    State,
    named,
)
from runner.worker.brakes import limited, over_budget
from runner.worker.executor import RunResult
from runner.worker.gates import FAIL, NOT_RUN, PASS, GateResult, gate_failure_feedback
from runner.worker.roles import (
    VerdictError,
    context_eligibility,
    critical_findings,
    deviation_reported,
    final_sentinel,
    parse_verdict,
    plateaued,
    review_due,
    switch,
)

NOT_SWEPT = "not passed as swept"
RESOLVE_FEEDBACK = (
    "The integration branch moved while this step ran: merging its new tip ({where}) into this step's change conflicts "
    "in {paths}. The conflicts are left in those files between <<<<<<< and >>>>>>> lines. Resolve each one so that "
    "both this step's change and the work on the new tip are kept, remove every marker, and change nothing else."
)
RERUN_FEEDBACK = (
    "The integration branch moved while this step ran, and this step's change conflicted with its new tip ({where}) in "
    "{paths}. This run starts again from that tip: make the step's change on top of it."
)


def run_pipeline(state: State, actions: Actions) -> Outcome:
    try:
        return _Pipeline(state, actions).run()
    except _Stop as stop:
        return stop.outcome


def run_resolve(state: State, actions: Actions, onto: str, ours: str) -> Outcome:
    """A resolve pass: bring the change committed as `ours` onto the integration tip `onto`
    (docs/pipeline.md), then the gates and the verifier again."""
    try:
        return _resolve_pass(_Pipeline(state, actions), onto, ours)
    except _Stop as stop:
        return stop.outcome


def run_checks(state: State, actions: Actions) -> Outcome | str:
    """What follows one implement pass that someone else ran (an agent working the queue
    itself): gates, verify, orchestrate, sweep, review, with the same brakes. The outcome to
    record, or the feedback of another implement pass (the fix loop, the review rounds)."""
    try:
        return _Pipeline(state, actions).check()
    except _Stop as stop:
        return stop.outcome


class _Stop(Exception):
    def __init__(self, outcome: Outcome):
        self.outcome = outcome


class _Pipeline:
    def __init__(self, state: State, actions: Actions):
        self.s = state
        self.a = actions
        self.brakes = state.config.brakes

    # -- helpers --

    def role(self, name: str, about: str = "") -> RunResult | None:
        """Run a role (or implement) and put it on the record; stop on a lost claim or shutdown,
        on a spent budget (before it runs) and on a provider's limit (after)."""
        if name != "context_floor" and (spent := over_budget(self.s)):
            raise _Stop(spent)
        result = self.a.run(name, self.s)
        if self.a.lost():
            raise ClaimLostDuringRun(f"the claim of {self.s.step.id} attempt {self.s.attempt} was lost during {name}")
        if result is None:
            self.s.roles.append(GateResult(name, NOT_RUN, "not configured"))
            return None
        if result.cancelled and self.a.stopping():
            self.s.runs.append(Run(name, FAIL, result.duration, "stopped: the worker is shutting down"))
            raise _Stop(
                Outcome(
                    Kind.RELEASE,
                    reason="worker stopping: the step was given back before it finished (no attempt spent)",
                )
            )
        self.s.runs.append(
            Run(
                name,
                PASS if result.ok else FAIL,
                result.duration,
                about + result.describe(),
                result.usage,
                result.model,
            )
        )
        if result.limit is not None:
            raise _Stop(limited(self.s, WHAT.get(name, name), result))
        return result

    def fault(self, name: str, result: RunResult) -> str:
        line = f"{FAULT}: {WHAT.get(name, name)} did not run ({result.describe()})"
        self.s.faults.append(line)
        self.s.roles.append(GateResult(name, FAIL, line, result.argv, result.duration))
        return line

    def budget(self) -> None:
        budget = self.brakes.step_budget
        spent = self.s.spent_before + self.a.elapsed()
        if budget is not None and spent >= budget:
            why = f"budget: {spent:.0f}s spent of the step's {budget:.0f}s budget across attempts"
            raise _Stop(Outcome(Kind.FAIL, reason=why, permanent=True))

    # -- the flow --

    def run(self) -> Outcome:
        self.budget()
        self.context_floor()
        self.orient()
        while True:
            self.implement()
            checked = self.check()
            if isinstance(checked, Outcome):
                return checked

    def gates(self) -> None:
        if spent := over_budget(self.s):  # a QA scenario may run an agent
            raise _Stop(spent)
        try:
            self.s.gates = self.a.gates(self.s)
        except LimitReached as hit:
            self.s.runs.append(
                Run(hit.name, FAIL, hit.result.duration, hit.result.describe(), hit.result.usage, hit.result.model)
            )
            raise _Stop(limited(self.s, hit.name, hit.result)) from None

    def check(self) -> Outcome | str:
        """After a clean implement: the outcome, or the feedback of the next implement pass."""
        self.gates()
        for gate in self.s.gates:
            if gate.result != NOT_RUN:
                self.s.runs.append(Run(gate.name, gate.result, gate.seconds, gate.detail, gate.usage, gate.model))
            elif gate.detail.startswith(FAULT):  # a QA scenario [roles.qa] could not judge
                self.s.runs.append(Run(gate.name, NOT_RUN, gate.seconds, gate.detail, gate.usage, gate.model))
                self.s.faults.append(gate.detail)
        failure = gate_failure_feedback(self.s.gates) or self.verify()
        self.budget()
        if failure:
            if self.s.fixes >= self.brakes.max_fix_attempts:
                return Outcome(Kind.FAIL, reason=failure, escalate=True)
            self.s.fixes += 1
            self.s.feedback = clip(failure, MAX_FEEDBACK_BYTES)
            return self.s.feedback
        self.orchestrate()
        if not self.s.swept:
            self.sweep()
            self.s.swept = True
        critical = self.review()
        if not critical:
            return self.completed()
        if self.s.reviews >= self.brakes.max_review_attempts:
            return Outcome(
                Kind.FAIL,
                reason=f"review found critical issues after {self.s.reviews} review round(s): "
                + "; ".join(critical)[:1000],
                escalate=True,
            )
        self.s.reviews += 1
        self.s.swept = False  # the fix is new work: the sweep looks at it again
        self.s.feedback = clip(
            "The independent review found critical issues:\n" + "\n".join(critical), MAX_FEEDBACK_BYTES
        )
        return self.s.feedback

    def completed(self) -> Outcome:
        """The result, held for a person when a role or QA scenario that should have looked at it did not."""
        unjudged = [
            f"{g.detail}; not passed" for g in self.s.gates if g.result == NOT_RUN and g.detail.startswith(FAULT)
        ]
        if holds := self.s.holds + unjudged:
            return Outcome(Kind.COMPLETE, hold=clip("awaiting a person: " + "; ".join(holds), MAX_TEXT_BYTES))
        return Outcome(Kind.COMPLETE)

    def context_floor(self) -> None:
        """The seed's context floor, before any agent runs (docs/pipeline.md)."""
        if self.s.config.brakes.context_floor and (halt := below_floor(self.s, self.role("context_floor"))):
            raise _Stop(halt)

    def orient(self) -> None:
        result = self.role("orient")
        if result is None:
            return
        self.s.notes["Orient"] = result.output
        if not result.ok:
            raise _Stop(Outcome(Kind.FAIL, reason=self.fault("orient", result)))
        deviation = deviation_reported(result.output)
        if not deviation:
            self.s.roles.append(GateResult("orient", PASS, "no major deviation", result.argv, result.duration))
            return
        why = None
        if self.s.step.meta.get("approved"):
            why = "approved by a person (the deviation was decided for this attempt)"
        elif not self.s.config.pipeline.deviation_gate:
            why = "deviation gate off"
        elif variable := switch("autoapprove"):
            why = f"skipped by {variable}=1"
            self.s.overrides.append(f"{variable}=1 skipped the deviation gate: {deviation}")
        if why:
            self.s.roles.append(
                GateResult("orient", PASS, f"major deviation ({deviation}); {why}", result.argv, result.duration)
            )
            return
        self.s.roles.append(GateResult("orient", FAIL, f"major deviation: {deviation}", result.argv, result.duration))
        raise _Stop(
            Outcome(Kind.BLOCK, reason=f"orient reported a major deviation: {deviation}", review=REVIEW_DEVIATION)
        )

    def implement(self) -> None:
        self.s.implement_runs += 1
        result = self.role("implement")
        if result is None:
            raise _Stop(
                Outcome(
                    Kind.FAIL,
                    permanent=True,
                    reason=f"{self.s.step.id} has no `run:` argv and runner.toml has no [harness] command",
                )
            )
        self.s.notes["Implement output"] = result.output
        if not result.ok:
            self.budget()  # a run cut short by the step's budget is the budget's failure
            # Never run again in a worktree a crashed run may have half changed: the next
            # attempt starts from a fresh worktree, with this failure as its feedback.
            raise _Stop(Outcome(Kind.FAIL, reason=f"implement did not finish cleanly: {result.describe()}"))
        said, why = final_sentinel(result.output) or ("", "")
        if said == "STEP_BLOCKED":
            raise _Stop(Outcome(Kind.BLOCK, reason=f"implement is blocked: {why}", review=REVIEW_BLOCKED))
        if said in ("STEP_FAILED", "CODER_FAILED"):
            raise _Stop(Outcome(Kind.FAIL, reason=f"implement failed: {why or 'the coder said FAILED'}"))
        if said == "CODER_REJECTED":  # the coder (or the person at its own gate) refused the step: no attempt will do
            raise _Stop(
                Outcome(
                    Kind.FAIL,
                    reason=f"rejected by the coder: {why or 'it said REJECTED'}",
                    permanent=True,
                    rejected=True,
                )
            )
        if said == "CODER_COMPLETE":
            self.s.runs[-1].detail += ", CODER_COMPLETE"

    def verify(self) -> str | None:
        """Run the verifier; the feedback of a verdict that did not pass, or None."""
        result = self.role("verify")
        if result is None:
            return None
        why = None if result.ok else f"the verifier did not run cleanly ({result.describe()})"
        if why is None:
            try:
                self.s.verdict = parse_verdict(result.output)
            except VerdictError as exc:
                why = str(exc)
        verdict = self.s.verdict if why is None else None
        # The record's run says what the verdict said, not only that the command exited 0.
        self.s.runs[-1] = replace(
            self.s.runs[-1],
            result=PASS if verdict and verdict.passed else FAIL,
            detail=f"verdict: pass={str(verdict.passed).lower()}, score {verdict.score}" if verdict else why or "",
        )
        if why is not None:
            self.s.faults.append(f"{FAULT}: verifier: {why}")
            self.s.roles.append(GateResult("verify", FAIL, why, result.argv, result.duration))
            if self.s.config.pipeline.halt_on_verifier_fault:
                raise _Stop(
                    Outcome(
                        Kind.RELEASE,
                        reason=f"verifier fault: {why} (the queue is halted)",
                        halt=f"{VERIFIER_HALT}{why}",
                    )
                )
            raise _Stop(Outcome(Kind.FAIL, reason=f"verifier fault: {why}"))
        assert verdict is not None
        self.s.scores.append(verdict.score)
        window = self.brakes.score_plateau_window
        self.s.scores = self.s.scores[-(window + 1) * 4 :]
        self.s.roles.append(
            GateResult(
                "verify",
                PASS if verdict.passed else FAIL,
                f"score {verdict.score}: " + "; ".join(verdict.reasons),
                result.argv,
                result.duration,
            )
        )
        if plateaued(self.s.scores, window):
            raise _Stop(
                Outcome(
                    Kind.FAIL,
                    permanent=True,
                    reason=f"plateau: the verifier's score has not improved over the last {window} runs "
                    f"({self.s.scores[-window - 1 :]})",
                )
            )
        return None if verdict.passed else verdict.feedback()

    def orchestrate(self) -> None:
        result = self.role("orchestrate")
        if result is None:
            return
        self.s.notes["Orchestrate"] = result.output
        if not result.ok:
            raise _Stop(Outcome(Kind.FAIL, reason=self.fault("orchestrate", result)))
        self.s.roles.append(GateResult("orchestrate", PASS, "ran", result.argv, result.duration))

    def sweep(self) -> None:
        result = self.role("sweep")
        if result is None:
            return
        # what an earlier sweep said was about the work before the review's fix
        self.s.holds = [hold for hold in self.s.holds if not hold.endswith(NOT_SWEPT)]
        self.s.roles = [r for r in self.s.roles if r.name != "sweep"]
        # the result goes on, to be held for a person: never passed as swept, never a reason to implement again
        if not result.ok:
            self.s.holds.append(f"{self.fault('sweep', result)}; {NOT_SWEPT}")
            return
        self.s.notes["Sweep findings"] = result.output
        self.s.roles.append(
            GateResult(
                "sweep", PASS, f"{len(result.output.splitlines())} lines of findings", result.argv, result.duration
            )
        )

    def review(self) -> list[str]:
        """The independent review when due (run again once if it faults): its critical findings;
        when it could not run, none, and the result is held for a person."""
        role = self.s.config.roles.get("review")
        if role is None:
            self.s.roles.append(GateResult("review", NOT_RUN, "not configured"))
            return []
        if variable := switch("skip_review"):
            self.s.overrides.append(f"{variable}=1 skipped the independent review")
            self.s.roles.append(GateResult("review", NOT_RUN, f"skipped by {variable}=1"))
            return []
        due = review_due(role, self.a.changed_files())
        if not due:
            self.s.roles.append(
                GateResult(
                    "review", NOT_RUN, f"not due (fewer than {role.min_files} files changed, no boundary crossed)"
                )
            )
            return []
        result = self.role("review")
        if result is not None and not result.ok:
            result = self.role("review")
        if result is None or not result.ok:
            line = self.fault("review", result) if result else f"{FAULT}: independent review did not run"
            self.s.holds.append(f"{line}, twice; not passed as reviewed")
            return []
        self.s.notes["Review"] = result.output
        critical = critical_findings(result.output)
        self.s.findings = clip("\n".join(critical) or result.output, MAX_FEEDBACK_BYTES)
        self.s.roles = [r for r in self.s.roles if r.name != "review"]
        self.s.roles.append(
            GateResult(
                "review",
                FAIL if critical else PASS,
                f"{len(critical)} critical finding(s)" if critical else f"reviewed ({due})",
                result.argv,
                result.duration,
            )
        )
        return critical


def below_floor(state: State, result: RunResult | None) -> Outcome | None:
    """The context floor detector's answer: None when the model's context is large enough for
    this work; when it is not, or the detector cannot say, a release that halts the queue."""
    try:
        if result is None or not result.ok:
            raise ValueError(f"it did not run ({result.describe() if result else 'no command'})")
        eligible, said = context_eligibility(result.output)
    except ValueError as exc:
        line = f"{FAULT}: {WHAT['context_floor']}: {exc}"
        state.faults.append(line)
        state.roles.append(
            GateResult(
                "context_floor", FAIL, line, result.argv if result else None, result.duration if result else None
            )
        )
        return Outcome(
            Kind.RELEASE,
            reason=f"context floor: the detector gave no answer, the queue is halted ({exc})",
            halt=f"{CONTEXT_HALT}: the detector gave no answer ({exc})",
        )
    detail = f"loop_mode_eligible={str(eligible).lower()}" + (f" ({said})" if said else "")
    state.roles.append(GateResult("context_floor", PASS if eligible else FAIL, detail, result.argv, result.duration))
    if eligible:
        return None
    state.runs[-1].result = FAIL
    return Outcome(
        Kind.RELEASE,
        reason=f"context floor: the model's context is below the floor ({detail}), the queue is halted for a person",
        halt=CONTEXT_HALT + (f": {said}" if said else ""),
    )


def _resolve_pass(p: _Pipeline, onto: str, ours: str) -> Outcome:
    """Bring the attempt onto the moved integration tip: git's merge, else [roles.resolve] on
    the conflicts, else the step's own command again on the new tip; then its checks again."""
    p.s.resolves += 1
    p.budget()
    where = f"onto {onto[:10]}"
    conflicted = p.a.merge_onto(ours, onto)
    paths = named(conflicted)
    files = f"{len(conflicted)} file{'s' if len(conflicted) > 1 else ''} ({paths})"
    if not conflicted:
        how = f"git merged the change {where} cleanly"
        p.s.runs.append(Run("resolve", PASS, None, how))
    elif p.s.config.roles.get("resolve"):
        p.s.feedback = RESOLVE_FEEDBACK.format(where=where, paths=paths)
        result = p.role("resolve", f"{files} {where}: ")
        if result is None or not result.ok:
            raise _Stop(
                Outcome(Kind.FAIL, reason=p.fault("resolve", result) if result else f"{FAULT}: resolve did not run")
            )
        if left := p.a.conflicts_left(conflicted):
            p.s.runs[-1].result = FAIL
            raise _Stop(Outcome(Kind.FAIL, reason=f"resolve left conflict markers in {named(left)} ({where})"))
        how = f"[roles.resolve] resolved {paths} {where}"
    else:  # no resolver: the step's own command makes its change again, on the new tip
        p.a.restart_at(onto)
        how = f"{paths} conflicted {where}: implement ran again on it"
        p.s.runs.append(Run("resolve", PASS, None, f"{files} conflicted {where}: implement runs again on it"))
        p.s.feedback = RERUN_FEEDBACK.format(where=where, paths=paths)
        p.implement()
    p.s.roles.append(GateResult("resolve", PASS, how))
    p.s.roles = [r for r in p.s.roles if r.name != "verify"]  # the verdict that counts is this pass's
    p.gates()
    p.s.runs += [Run(g.name, g.result, g.seconds, g.detail, g.usage, g.model) for g in p.s.gates if g.result != NOT_RUN]
    failure = gate_failure_feedback(p.s.gates) or p.verify()
    p.budget()
    if failure:
        return Outcome(Kind.FAIL, reason=f"after the resolve pass {where}: {failure}")
    return p.completed()
