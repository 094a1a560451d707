"""The step state machine, declared once as data and used by the worker, the CLI and the
server hook alike. Pure: no git, no clock, no I/O. Everything a decision needs arrives in
the Event (the actor, the time, the attempt it holds) and the Context (the plan around
the step). Callers ask `transition` for the result; nobody predicts it.

    updates = transition(step.meta, event, context)   # the managed keys to write, or TransitionError
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from runner.core.accounts import is_account
from runner.core.errors import RunnerError
from runner.core.holding import attempt_of, failures_of, faults_in_a_row, holds, status_of
from runner.core.limits import MAX_NOTES_APPEND_BYTES, MAX_TEXT_BYTES, clip
from runner.core.model import Status, format_time
from runner.core.usage import Spend, runs_spend


class Kind(StrEnum):
    CLAIM = "claim"
    TAKEOVER = "takeover"
    RELEASE = "release"
    FAIL = "fail"
    COMPLETE = "complete"
    BLOCK = "block"
    APPROVE = "approve"
    REJECT = "reject"
    RETRY = "retry"
    ABORT = "abort"
    # Queue events: they change no step file.
    HALT = "halt"
    RESUME = "resume"
    EDIT = "edit"
    INIT = "init"


@dataclass(frozen=True)
class KindSpec:
    holder: bool = False  # only the holder of the current attempt may record it
    person: bool = False  # only a person may record it (the hook refuses it to worker identities)
    handoff: bool = False  # its commit writes plans/handoffs/<step>.md
    starts_attempt: bool = False  # a new attempt number (the fencing token) and a new holder
    step: bool = True  # it changes one step file


KINDS: dict[Kind, KindSpec] = {
    Kind.CLAIM: KindSpec(starts_attempt=True),
    Kind.TAKEOVER: KindSpec(starts_attempt=True),
    Kind.RELEASE: KindSpec(holder=True, handoff=True),
    Kind.FAIL: KindSpec(holder=True, handoff=True),
    Kind.COMPLETE: KindSpec(holder=True, handoff=True),
    Kind.BLOCK: KindSpec(holder=True, handoff=True),
    Kind.APPROVE: KindSpec(person=True),
    Kind.REJECT: KindSpec(person=True),
    Kind.RETRY: KindSpec(person=True),
    Kind.ABORT: KindSpec(person=True),
    Kind.HALT: KindSpec(person=True, step=False),  # (and a worker's halts of WORKER_HALTS: person_event)
    Kind.RESUME: KindSpec(person=True, step=False),
    Kind.EDIT: KindSpec(person=True, step=False),
    Kind.INIT: KindSpec(person=True, step=False),
}

S = Status
# (status before, event) -> the statuses it may lead to. Every pair not listed is refused.
TABLE: dict[tuple[Status, Kind], tuple[Status, ...]] = {
    (S.READY, Kind.CLAIM): (S.CLAIMED,),
    (S.CLAIMED, Kind.TAKEOVER): (S.CLAIMED, S.FAILED),
    (S.CLAIMED, Kind.RELEASE): (S.READY,),
    (S.CLAIMED, Kind.FAIL): (S.READY, S.FAILED),
    (S.CLAIMED, Kind.COMPLETE): (S.DONE, S.REVIEW),
    (S.CLAIMED, Kind.BLOCK): (S.REVIEW,),
    (S.REVIEW, Kind.APPROVE): (S.DONE, S.READY),
    (S.REVIEW, Kind.REJECT): (S.READY, S.FAILED),
    (S.FAILED, Kind.RETRY): (S.READY,),
    (S.READY, Kind.ABORT): (S.FAILED,),
    (S.CLAIMED, Kind.ABORT): (S.FAILED,),
    (S.REVIEW, Kind.ABORT): (S.FAILED,),
}

# The reasons of the halts a worker may record, each its pipeline's own: its verifier crashed or
# printed no verdict; the context floor's detector said the model's context is below the floor
# (or could not say it is not).
VERIFIER_HALT = "verifier_failed:"
CONTEXT_HALT = "human_intervention:context_below_floor"
BUDGET_HALT = "budget_exceeded:"  # the plan's agent runs spent its [brakes] plan_budget_usd
WORKER_HALTS = (VERIFIER_HALT, CONTEXT_HALT, BUDGET_HALT)

# What a step in review waits for (the `review` key).
REVIEW_RESULT, REVIEW_DEVIATION, REVIEW_BLOCKED, REVIEW_BUDGET = "result", "deviation", "blocked", "budget"


class TransitionError(RunnerError):
    """A transition the state machine refuses, with the reason (exit 1: the step is not in
    a state that allows it; `runner show` says which)."""


@dataclass(frozen=True)
class Event:
    """One event of one step (or of the queue), everything it carries. The commit codec
    writes exactly these fields into a commit message and reads them back."""

    kind: Kind
    actor: str  # a worker id, or a person's name for person events
    at: datetime  # written to last_updated (and claimed_at)
    step: str | None = None
    attempt: int | None = None  # holder events: the attempt held; claims: the new attempt; else the step's
    replaces: int | None = None  # takeover: the attempt taken over
    incarnation: str | None = None  # the worker process that holds (or takes) the claim
    holder: dict[str, Any] = field(default_factory=dict)  # claim: host, pid, started
    lease: str | None = None  # claim: the lease it was made under
    reason: str | None = None  # free text, clipped to MAX_TEXT_BYTES (it may be an agent's whole output)
    permanent: bool = False  # fail / reject: no retry
    retry_at: datetime | None = None  # fail / release: not before
    hold: bool = False  # complete, but a person must look (review did not run)
    fault: bool = False  # release: a fault of runner itself (a few in a row hold the step for a person)
    account: str | None = None  # release: a usage limit paused this account until retry_at (plans/pauses)
    review: str | None = None  # block: REVIEW_DEVIATION, REVIEW_BLOCKED or REVIEW_BUDGET
    result: dict[str, Any] | None = None  # complete: branch, commit; approve: merge
    metrics: dict[str, Any] | None = None  # scores / spent / last_verdict / rung the holder carries across attempts
    ticked: tuple[str, ...] = ()  # complete: Automated checks whose boxes it ticks
    notes: str | None = None  # complete: lines appended to plans/NOTES.md, clipped to MAX_NOTES_APPEND_BYTES
    ignore_deps: bool = False  # claim by a person who runs a step before its dependencies
    by: str | None = None  # the person behind a claim with ignore_deps
    runs: tuple[dict[str, Any], ...] = ()  # the record of every run of the attempt (not state)
    comments: tuple[dict[str, Any], ...] = ()  # reject: a reviewer's comments on lines (runner.core.comments)

    def __post_init__(self) -> None:
        # Every carried text is bounded where an event is made: by a worker, the CLI, or the
        # hook decoding a commit (clipping is idempotent, so a replay writes the same file).
        if self.reason is not None:
            object.__setattr__(self, "reason", clip(self.reason, MAX_TEXT_BYTES))
        if self.notes is not None:
            object.__setattr__(self, "notes", clip(self.notes, MAX_NOTES_APPEND_BYTES))
        if self.comments:
            from runner.core.comments import normalized

            object.__setattr__(self, "comments", normalized(self.comments))

    @property
    def spec(self) -> KindSpec:
        return KINDS[self.kind]


@dataclass(frozen=True)
class Context:
    """The plan around a step, as the caller reads it at the commit the event lands on."""

    deps_done: bool = True
    halted: bool = False
    lease: str | None = None  # runner.toml [leases] lease: every claim is made under it
    max_attempts: int = 3  # runner.toml [leases] max_attempts: a step's own value wins
    requires_approval: bool = False  # runner.toml [queue] requires_approval: a step's own value wins


CARRIED = ("scores", "spent", "last_verdict", "rung")  # what a holder carries across attempts for the brakes


def person_event(event: Event) -> bool:
    """Only a person may record it: a person's kind of event, a claim that ignores the
    dependencies, a halt but the pipeline's own (WORKER_HALTS)."""
    if event.kind == Kind.CLAIM:
        return event.ignore_deps
    if event.kind == Kind.HALT:
        return not (event.reason or "").startswith(WORKER_HALTS)
    return event.spec.person


def max_attempts_of(meta: dict[str, Any], context: Context) -> int:
    return int(meta.get("max_attempts") or context.max_attempts)


def transition(meta: dict[str, Any], event: Event, context: Context = Context()) -> dict[str, Any]:
    """The managed keys `event` writes into a step whose frontmatter is `meta`."""
    status = status_of(meta)
    if not event.spec.step:
        raise TransitionError(f"{event.kind} is a queue event, not a step event")
    targets = TABLE.get((status, event.kind))
    if targets is None:
        allowed = " or ".join(s for (s, k) in TABLE if k == event.kind)
        raise TransitionError(
            f"{event.step or 'the step'} is {status}: a {event.kind} is allowed only when it is {allowed}"
        )
    if event.spec.holder and (why := holds(meta, event.actor, event.attempt, event.incarnation)):
        raise TransitionError(f"{event.kind} by {event.actor} refused: {why}")
    if (event.fault or event.account) and event.kind != Kind.RELEASE:
        raise TransitionError("only a release gives a step back for a fault of runner itself or a provider's limit")
    updates = _RULES[event.kind](meta, event, context)
    if isinstance(updates.get("last_error"), str):  # a clipped reason and what a rule adds to it, within the bound
        updates["last_error"] = clip(updates["last_error"], MAX_TEXT_BYTES)
    updates.setdefault("status", targets[0])
    assert updates["status"] in targets, (status, event.kind, updates["status"])  # the table is the truth
    if event.spec.holder and not event.fault and faults_in_a_row(meta):
        updates["faults_in_a_row"] = None  # the holder got through: runner's faults are no longer in a row
    if event.spec.holder and event.metrics:
        updates.update({k: event.metrics[k] for k in CARRIED if k in event.metrics})  # CARRIED's order, not the dict's
    if event.spec.holder and meta.get("budget_waived"):
        updates["budget_waived"] = None  # a person's go-ahead over the budget lasts one attempt
    if event.spec.holder and (spent := runs_spend(event.runs)).runs:  # every recorded agent run of every attempt
        updates["usage"] = Spend.from_meta(meta.get("usage")).plus(spent).as_meta()
    updates.update(last_updated=format_time(event.at), last_updated_by=event.actor)
    return updates


def resulting_status(meta: dict[str, Any], event: Event, context: Context = Context()) -> Status:
    return Status(transition(meta, event, context)["status"])


# --- the rules, one per event kind ----------------------------------------------------


def _cleared_claim() -> dict[str, Any]:
    return {"assignee": None, "claimed_at": None, "lease": None, "holder": None}


def _new_claim(meta: dict[str, Any], event: Event, context: Context) -> dict[str, Any]:
    expected = attempt_of(meta) + 1
    if event.attempt != expected:
        raise TransitionError(f"a new claim of {event.step} is attempt {expected}, not {event.attempt}")
    if context.lease and event.lease != context.lease:
        raise TransitionError(f"a claim is made under the queue's lease ({context.lease}), not {event.lease!r}")
    holder = dict(event.holder)
    if event.incarnation:
        holder["incarnation"] = event.incarnation
    return {
        "status": Status.CLAIMED,
        "assignee": event.actor,
        "claimed_at": format_time(event.at),
        "lease": event.lease,
        "attempt": expected,
        "holder": holder or None,
        "not_before": None,
    }


def _claim(meta: dict[str, Any], event: Event, context: Context) -> dict[str, Any]:
    if context.halted:
        raise TransitionError("the queue is halted (runner resume to continue)")
    if not context.deps_done and not event.ignore_deps:
        raise TransitionError(f"{event.step} has dependencies that are not done")
    if event.ignore_deps and not event.by:
        raise TransitionError("only a person may claim a step before its dependencies are done (--by NAME)")
    return _new_claim(meta, event, context)


def _takeover(meta: dict[str, Any], event: Event, context: Context) -> dict[str, Any]:
    if context.halted:
        raise TransitionError("the queue is halted (runner resume to continue)")
    if event.replaces != attempt_of(meta):
        raise TransitionError(
            f"a takeover must name the attempt it replaces ({attempt_of(meta)}), not {event.replaces}"
        )
    # A holder that vanished (a crash, a lost host) counts as a failure: a step that kills
    # its worker ends failed instead of looping.
    failures = failures_of(meta) + 1
    lost = f"attempt {attempt_of(meta)} by {meta.get('assignee')} lost its holder: {event.reason or 'lease expired'}"
    if failures >= max_attempts_of(meta, context):
        return {
            "status": Status.FAILED,
            **_cleared_claim(),
            "failures": failures,
            "resolve": None,
            "last_error": lost + "; attempts spent",
        }
    return {**_new_claim(meta, event, context), "failures": failures, "last_error": lost}


def _release(meta: dict[str, Any], event: Event, context: Context) -> dict[str, Any]:
    if event.account and not (is_account(event.account) and event.retry_at):
        raise TransitionError(
            f"a release that pauses an account names it ({event.account!r}: letters, digits, '.', "
            "'_', '-') and until when (Runner-Retry-At)"
        )
    # A hand-back (a person's release, a shutdown, a runner error) spends no attempt; a fault
    # of runner itself is counted, so that a few in a row hold the step for a person.
    updates = {
        "status": Status.READY,
        **_cleared_claim(),
        "not_before": format_time(event.retry_at) if event.retry_at else None,
        "last_error": event.reason,
    }
    if event.fault:
        updates["faults_in_a_row"] = faults_in_a_row(meta) + 1
    return updates


def _fail(meta: dict[str, Any], event: Event, context: Context) -> dict[str, Any]:
    failures = failures_of(meta) + 1
    limit = max_attempts_of(meta, context)
    reason = event.reason or "failed"
    common = {**_cleared_claim(), "failures": failures, "result": event.result, "approved": None, "resolve": None}
    if event.permanent:
        return {"status": Status.FAILED, **common, "last_error": reason}
    if failures >= limit:
        return {
            "status": Status.FAILED,
            **common,
            "last_error": f"{reason} (failure {failures} of {limit}: attempts spent)",
        }
    return {
        "status": Status.READY,
        **common,
        "not_before": format_time(event.retry_at) if event.retry_at else None,
        "last_error": reason,
    }


def needs_person(meta: dict[str, Any], event: Event, context: Context = Context()) -> bool:
    """Does a complete wait in review for a person (approval required, or a held result)?
    Then nothing is merged until `runner approve`."""
    approval = meta.get("requires_approval")
    if approval is None:
        approval = context.requires_approval
    return bool(approval or event.hold)


def _complete(meta: dict[str, Any], event: Event, context: Context) -> dict[str, Any]:
    common = {**_cleared_claim(), "result": event.result, "approved": None, "resolve": None}
    if needs_person(meta, event, context):
        # Nothing is merged yet: the result waits on its step branch for a person.
        return {
            "status": Status.REVIEW,
            **common,
            "review": REVIEW_RESULT,
            "last_error": event.reason if event.hold else None,
        }
    if (event.result or {}).get("commit") and not (event.result or {}).get("merge"):
        raise TransitionError(
            f"a complete of {event.step} that needs no approval must name its merge into the integration branch"
        )
    return {"status": Status.DONE, **common, "last_error": None}


def _block(meta: dict[str, Any], event: Event, context: Context) -> dict[str, Any]:
    if event.review not in (REVIEW_DEVIATION, REVIEW_BLOCKED, REVIEW_BUDGET):
        raise TransitionError(
            f"a block says why a person must decide: {REVIEW_DEVIATION}, {REVIEW_BLOCKED} or {REVIEW_BUDGET}"
        )
    return {
        "status": Status.REVIEW,
        **_cleared_claim(),
        "review": event.review,
        "approved": None,
        "resolve": None,
        "last_error": event.reason or "a person must decide before the step goes on",
    }


def _approve(meta: dict[str, Any], event: Event, context: Context) -> dict[str, Any]:
    waiting = meta.get("review") or REVIEW_RESULT
    if waiting == REVIEW_BUDGET:  # go on over the budget, for the next attempt only
        return _over_budget(f"approved by {event.actor}: go on over the budget (for one attempt)")
    if waiting != REVIEW_RESULT:
        # A deviation or a blocked run: go ahead, for the next attempt only.
        return {
            "status": Status.READY,
            "review": None,
            "approved": True,
            "last_error": f"approved by {event.actor}: go ahead",
        }
    if event.reason:  # the merge into the integration branch conflicted: a worker resolves it onto the new tip
        return {
            "status": Status.READY,
            "review": None,
            "resolve": True,
            "last_error": f"approved by {event.actor}, but {event.reason}",
        }
    result: dict[str, Any] = meta["result"] if isinstance(meta.get("result"), dict) else {}
    merge = (event.result or {}).get("merge")
    if result.get("commit") and not merge:
        raise TransitionError("an approval of a result must name its merge into the integration branch")
    updates: dict[str, Any] = {"status": Status.DONE, "review": None, "last_error": None, "review_comments": None}
    if merge:
        updates["result"] = {**result, "merge": merge}
    return updates


def _over_budget(why: str) -> dict[str, Any]:
    return {"status": Status.READY, "review": None, "budget_waived": True, "last_error": why}


def _reject(meta: dict[str, Any], event: Event, context: Context) -> dict[str, Any]:
    # the reviewer's comments on lines are the next attempt's too (None: a rejection without any)
    return {**_rejected(meta, event), "review_comments": list(event.comments) or None}


def _rejected(meta: dict[str, Any], event: Event) -> dict[str, Any]:
    if not event.reason:
        raise TransitionError("a rejection needs a reason (it is the feedback for the next attempt)")
    if event.permanent:
        return {"status": Status.FAILED, "review": None, "last_error": f"rejected by {event.actor}: {event.reason}"}
    if meta.get("review") == REVIEW_BUDGET:
        return _over_budget(f"decided by {event.actor} (over the budget, for one attempt): {event.reason}")
    if (meta.get("review") or REVIEW_RESULT) != REVIEW_RESULT:
        # The person decided the deviation: their words guide the next implement run.
        return {
            "status": Status.READY,
            "review": None,
            "approved": True,
            "last_error": f"decided by {event.actor}: {event.reason}",
        }
    return {"status": Status.READY, "review": None, "last_error": f"rejected by {event.actor}: {event.reason}"}


_SPENT_RE = re.compile(r" \(failure \d+ of \d+: attempts spent\)$|; attempts spent$")


def _retry(meta: dict[str, Any], event: Event, context: Context) -> dict[str, Any]:
    # A fresh budget: the last failure stays as the next attempt's feedback, not as "attempts spent".
    last = _SPENT_RE.sub("", str(meta.get("last_error") or ""))
    return {
        "status": Status.READY,
        **_cleared_claim(),
        "not_before": None,
        "failures": 0,
        "last_error": f"retried by {event.actor}" + (f"; the last failure: {last}" if last else ""),
    }


def _abort(meta: dict[str, Any], event: Event, context: Context) -> dict[str, Any]:
    reason = f"aborted by {event.actor}" + (f": {event.reason}" if event.reason else "")
    return {"status": Status.FAILED, **_cleared_claim(), "review": None, "resolve": None, "last_error": reason}


_RULES = {
    Kind.CLAIM: _claim,
    Kind.TAKEOVER: _takeover,
    Kind.RELEASE: _release,
    Kind.FAIL: _fail,
    Kind.COMPLETE: _complete,
    Kind.BLOCK: _block,
    Kind.APPROVE: _approve,
    Kind.REJECT: _reject,
    Kind.RETRY: _retry,
    Kind.ABORT: _abort,
}


def apply(meta: dict[str, Any], updates: dict[str, Any]) -> dict[str, Any]:
    """The frontmatter after a transition (None values are absent/null)."""
    return {**meta, **updates}
