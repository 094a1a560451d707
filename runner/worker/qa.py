"""Automated QA scenarios written without a command (a browser walkthrough, a screenshot diff):
with `[roles.qa]` configured, each is handed to that command with the scenario's text and
judged by its JSON verdict (the verifier's format), recorded pass or fail; without one it stays
"not run", never passed. A QA run that crashed, printed no verdict or changed the step's files
judged nothing: the scenario is "not run", flagged PIPELINE-FAULT, and the result is held for a
person (it is never a reason to run implement again)."""

from __future__ import annotations

from runner.worker.attempt import FAULT, named
from runner.worker.executor import RunResult
from runner.worker.gates import FAIL, NOT_RUN, PASS, GateResult
from runner.worker.roles import VerdictError, parse_verdict


def judge(name: str, label: str, result: RunResult | None, changed: list[str]) -> GateResult:
    """The gate of one scenario from its QA run (`changed`: the step's files the run changed)."""
    if result is None:
        return GateResult(name, NOT_RUN, "no [roles.qa] command to walk it through", section="qa", label=label)

    def fault(why: str) -> GateResult:
        return GateResult(name, NOT_RUN, f"{FAULT}: QA {why}", result.argv, result.duration, "qa", label)

    if result.cancelled:  # the claim went away or the worker is stopping: the pipeline's next run says which
        return GateResult(name, FAIL, result.describe(), result.argv, result.duration, "qa", label)
    if not result.ok:
        return fault(f"did not run ({result.describe()})")
    try:
        verdict = parse_verdict(result.output)
    except VerdictError as exc:
        return fault(f"did not run ({exc})")
    if changed:
        return fault(f"changed the step's files ({named(changed)}): its verdict is not taken")
    reasons = "".join(f"; {r}" for r in verdict.reasons)
    detail = f"[roles.qa] verdict: pass={str(verdict.passed).lower()}, score {verdict.score}{reasons}"
    if not verdict.passed and verdict.next_hint:
        detail += f"; next: {verdict.next_hint}"
    return GateResult(name, PASS if verdict.passed else FAIL, detail, result.argv, result.duration, "qa", label)
