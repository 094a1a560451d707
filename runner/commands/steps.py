"""Commands that move one step by hand (the same events a worker records) and the queue's
halt switch: claim, heartbeat, release, complete, fail; approve, reject, retry, abort;
halt, resume."""

from __future__ import annotations

from typing import Annotated

import typer

from runner.commands import plain
from runner.commands.common import By, Tags, Target, WorkerId, check_worker_id, emit, person
from runner.commands.plain import report
from runner.core.machine import Kind

StepArg = Annotated[str, typer.Argument(help="The step.")]
Reason = Annotated[str, typer.Option("--reason", help="Why (kept in last_error and the commit).")]


def claim(
    target: Target,
    worker: WorkerId,
    step_id: Annotated[str | None, typer.Argument(help="A particular step (default: the best ready one).")] = None,
    tag: Tags = [],
    ignore_deps: Annotated[
        bool,
        typer.Option(
            "--ignore-deps", help="A person's override: claim STEP although its dependencies are not done (needs --by)."
        ),
    ] = False,
    by: Annotated[str | None, typer.Option("--by", help="The person behind --ignore-deps.")] = None,
) -> None:
    """Claim a step for worker --id.

    The best ready step, or STEP. Exit 3 when nothing can be taken.

    A STEP named here is taken even while it backs off after a failure (a person asked for it).

    The claim lives by its lease: renew it with `runner heartbeat`, or let
    `runner tick --id ID --step STEP` run it."""
    plain.claim(target, step_id, worker, tag, ignore_deps, by)


def heartbeat(target: Target, step_id: StepArg, worker: WorkerId) -> None:
    """Renew worker --id's lease on STEP.

    It moves refs/runner/heartbeats/<id>; no queue commit."""
    plain.heartbeat(target, step_id, worker)


def release(target: Target, step_id: StepArg, worker: WorkerId, reason: Reason = "released") -> None:
    """Give STEP back to the queue.

    It is ready again at once; no attempt is spent."""
    from runner.commands.agentwork import given_back

    check_worker_id(worker)
    if given_back(target, step_id, worker, reason):  # taken with `runner work`: its worktree and keeper end too
        return
    report(target, target.queue(one_shot=True).event(step_id, Kind.RELEASE, worker, reason=reason))


def complete(target: Target, step_id: StepArg, worker: WorkerId) -> None:
    """Record STEP as done.

    Or in review, when it needs a person's approval."""
    plain.complete(target, step_id, worker)


def fail(
    target: Target,
    step_id: StepArg,
    worker: WorkerId,
    reason: Reason = "failed",
    permanent: Annotated[bool, typer.Option("--permanent", help="Do not retry: failed at once.")] = False,
) -> None:
    """Record a failure of STEP.

    It is ready again after a backoff, or failed when its attempts are spent or with --permanent."""
    from runner.commands.agentwork import given_back
    from runner.queue.backoff import retry_at

    check_worker_id(worker)
    if given_back(target, step_id, worker, reason, fail=True, permanent=permanent):  # taken with `runner work`
        return
    queue = target.queue()
    snap = queue.snapshot()
    step = snap.plan.find(step_id)
    when = retry_at(snap.config, int(step.meta.get("failures") or 0) + 1 if step else 1)
    report(target, queue.event(step_id, Kind.FAIL, worker, reason=reason, permanent=permanent, retry_at=when))


def approve(target: Target, step_id: StepArg, by: By = None) -> None:
    """Approve a step in review.

    Its result is merged and it is done (a merge that conflicts
    sends it to a worker that brings it onto the new tip, then back to review when it needs
    approval); a reported deviation or block goes ahead for its next attempt."""
    from runner.queue import merging

    report(target, merging.approve(target.queue(one_shot=True), step_id, person(by, target.repo)))


def reject(
    target: Target,
    step_id: StepArg,
    reason: Annotated[
        str | None,
        typer.Option(
            "--reason", help="Your feedback: the next attempt reads it (for a deviation: what to do instead)."
        ),
    ] = None,
    comment: Annotated[
        list[str] | None,
        typer.Option(
            "--comment",
            metavar="FILE:LINE TEXT",
            help="A comment on a line of the result (FILE:START-END for a range), its text after it; "
            "repeat it. The next attempt reads each with the line's text, and its handoff says which it "
            "addressed.",
        ),
    ] = None,
    texts: Annotated[
        list[str] | None,
        typer.Argument(metavar="", hidden=True, show_default=False, help="Each --comment's text, in order."),
    ] = None,
    by: By = None,
    abort: Annotated[bool, typer.Option("--abort", help="Fail the step for good instead.")] = False,
) -> None:
    """Reject a step in review.

    It is ready again with your reason and comments as feedback (failed with --abort).
    Nothing is merged."""
    from runner.queue import review

    given, problems = review.specs(review.paired(comment or [], texts or []))
    queue = target.queue(one_shot=True)
    report(target, review.reject(queue, step_id, person(by, target.repo), reason, given, abort, problems))


def retry(target: Target, step_id: StepArg, by: By = None) -> None:
    """Send a failed step back to ready.

    With a fresh budget of attempts."""
    report(target, target.queue(one_shot=True).event(step_id, Kind.RETRY, person(by, target.repo)))


def abort(target: Target, step_id: StepArg, reason: Reason, by: By = None) -> None:
    """Stop a step for good.

    Ready, claimed or in review -> failed. A worker running it stops and records nothing."""
    report(target, target.queue(one_shot=True).event(step_id, Kind.ABORT, person(by, target.repo), reason=reason))


def halt(
    target: Target, reason: Annotated[str, typer.Option("--reason", help="Why: every worker shows it.")], by: By = None
) -> None:
    """Stop every worker from claiming.

    Each stops at its next tick, until `runner resume`."""
    target.queue(one_shot=True).set_halt(reason, person(by, target.repo))
    emit(target, {"halted": reason}, f"queue halted: {reason}")


def resume(target: Target, by: By = None) -> None:
    """Let workers claim again after `runner halt`."""
    from runner.queue.change import Skip

    try:
        target.queue(one_shot=True).set_halt(None, person(by, target.repo))
    except Skip as exc:
        emit(target, {"halted": None, "message": str(exc)}, str(exc))
        return
    emit(target, {"halted": None}, "queue resumed")
