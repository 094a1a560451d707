"""One protocol authority (issue 12's done-when): for every (status, event) pair the state
machine, the CLI and the server hook agree: all accept or all refuse.

- the machine: `transition` on the step as it is;
- the CLI: the `runner` command that records that event (none for block), run in-process
  on a clone of a hooked remote; it accepts when it records exactly that event;
- the hook: a commit of that event pushed to a hooked remote. Where the machine accepts,
  the commit is what runner writes; where it refuses, the commit is what a client that
  believed the step was in a status allowing the event would write.

Each status is built once with the queue API on a hooked remote (the claim arrived at the
server two hours ago, so its lease has passed by the server's clock too)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.hooked import ELSEWHERE, arriving, claim, clone, forge, hooked_remote, incarnation_of, record, seed
from typer.testing import CliRunner

from runner.cli import app
from runner.core.machine import KINDS, TABLE, Event, Kind, Status, TransitionError, transition
from runner.core.model import utc_now
from runner.queue.queue import Queue
from runner.store import Refused, Won

STEP = "04-d"  # in seed's plan: no dependencies; 03-c is the one that needs approval
KINDS_OF_STEP = [kind for kind in Kind if KINDS[kind].step]
HOLDER, TAKER, PERSON = "w1", "w2", "bob"
HOURS_2 = 2 * 3600

# What a client that believed the step was in `status` starts from.
BELIEVED = {
    Status.READY: {"status": "ready"},
    Status.CLAIMED: {"status": "claimed", "assignee": HOLDER, "holder": {"incarnation": incarnation_of(HOLDER)}},
    Status.REVIEW: {"status": "review", "review": "result"},
    Status.FAILED: {"status": "failed"},
}
FIELDS = {  # what each event carries besides its kind, actor, step and attempt
    Kind.BLOCK: {"review": "deviation", "reason": "the plan is stale"},
    Kind.FAIL: {"reason": "gate failed"},
    Kind.RELEASE: {"reason": "stopping"},
    Kind.REJECT: {"reason": "needs tests"},
    Kind.ABORT: {"reason": "not needed"},
}
COMMANDS = {  # the runner command that records each event
    Kind.CLAIM: ["claim", STEP, "--id", TAKER],
    Kind.TAKEOVER: ["claim", STEP, "--id", TAKER],  # a claim of a claimed step whose lease passed
    Kind.RELEASE: ["release", STEP, "--id", HOLDER, "--reason", "stopping"],
    Kind.FAIL: ["fail", STEP, "--id", HOLDER, "--reason", "gate failed"],
    Kind.COMPLETE: ["complete", STEP, "--id", HOLDER],
    Kind.APPROVE: ["approve", STEP, "--by", PERSON],
    Kind.REJECT: ["reject", STEP, "--reason", "needs tests", "--by", PERSON],
    Kind.RETRY: ["retry", STEP, "--by", PERSON],
    Kind.ABORT: ["abort", STEP, "--reason", "not needed", "--by", PERSON],
}


def actor_of(kind: Kind) -> str:
    return PERSON if KINDS[kind].person else TAKER if KINDS[kind].starts_attempt else HOLDER


def build(queue: Queue, status: Status) -> None:
    """Bring STEP to `status` the way workers and people do."""
    if status == Status.READY:
        return
    with arriving(HOURS_2):
        claim(queue, HOLDER, STEP)
    if status == Status.REVIEW:
        record(queue, Kind.COMPLETE, HOLDER, STEP, hold=True, reason="independent review did not run")  # a held result
    elif status == Status.DONE:
        record(queue, Kind.COMPLETE, HOLDER, STEP)
    elif status == Status.FAILED:
        record(queue, Kind.FAIL, HOLDER, STEP, reason="broken", permanent=True)


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    """status -> a hooked remote whose STEP is in that status."""
    built: dict[Status, Path] = {}

    def remote_in(status: Status) -> Path:
        if status not in built:
            base = tmp_path_factory.mktemp(str(status))
            bare = hooked_remote(base / "remote.git")
            build(seed(bare, base / "seed"), status)
            built[status] = bare
        return built[status]

    return remote_in


def copy(template: Path, folder: Path) -> Queue:
    bare = folder / "remote.git"
    shutil.copytree(template, bare, symlinks=True)
    return clone(bare, folder / "clone")


def event_for(kind: Kind, step) -> Event:
    fields = dict(FIELDS.get(kind, {}))
    if KINDS[kind].starts_attempt:
        fields.update(attempt=step.attempt + 1, incarnation=incarnation_of(TAKER), holder=ELSEWHERE, lease="1h")
        if kind == Kind.TAKEOVER:
            fields["replaces"] = step.attempt
    else:
        fields["attempt"] = step.attempt
        if KINDS[kind].holder:
            fields["incarnation"] = incarnation_of(HOLDER)
    return Event(kind, actor_of(kind), utc_now(), step=STEP, **fields)


def machine_accepts(queue: Queue, kind: Kind) -> bool:
    snap = queue.snapshot()
    step = snap.plan.find(STEP)
    try:
        transition(step.meta, event_for(kind, step), Queue.context(snap, step))
    except TransitionError:
        return False
    return True


def hook_accepts(queue: Queue, kind: Kind, machine: bool) -> bool:
    step = queue.snapshot().plan.find(STEP)
    event = event_for(kind, step)
    believed = {} if machine else BELIEVED[next(status for status, k in TABLE if k == kind)]
    fields = {
        name: getattr(event, name)
        for name in ("attempt", "replaces", "incarnation", "holder", "lease", "review", "reason")
        if getattr(event, name) is not None
    }
    outcome = forge(queue, STEP, kind, event.actor, meta=believed, **fields)
    assert isinstance(outcome, Won) or (
        isinstance(outcome, Refused) and "refused by the state machine" in str(outcome)
    ), outcome
    return isinstance(outcome, Won)


def cli_accepts(queue: Queue, kind: Kind) -> bool | None:
    if kind not in COMMANDS:
        return None
    snap = queue.snapshot()
    # The taker has watched the claim before: an hour later by its monotonic clock, the lease has passed.
    queue.observer.expired_claims(list(snap.plan.with_status("claimed")), snap.beats, snap.config.leases.lease)
    done = CliRunner().invoke(
        app, [*COMMANDS[kind], "--repo", str(queue.store.workdir)], env={"RUNNER_MONOTONIC_OFFSET": str(HOURS_2)}
    )
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    after = queue.snapshot()
    recorded = next(iter(queue.log(limit=1)), {}) if after.tip != snap.tip else {}
    return done.exit_code == 0 and recorded.get("event") == kind and recorded.get("step") == STEP


@pytest.mark.parametrize("kind", KINDS_OF_STEP, ids=str)
@pytest.mark.parametrize("status", list(Status), ids=str)
def test_the_machine_the_cli_and_the_hook_agree(states, tmp_path: Path, status: Status, kind: Kind):
    template = states(status)
    queue = copy(template, tmp_path / "hook")
    assert queue.snapshot().plan.find(STEP).status == status
    machine = machine_accepts(queue, kind)
    assert machine == ((status, kind) in TABLE)  # STEP's plan allows every pair the table lists
    hook = hook_accepts(queue, kind, machine)
    cli = cli_accepts(copy(template, tmp_path / "cli") if hook else queue, kind)
    assert hook == machine, f"the machine {'accepts' if machine else 'refuses'}, the hook does not"
    assert cli in (None, machine), f"the machine {'accepts' if machine else 'refuses'}, the CLI does not"
