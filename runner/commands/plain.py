"""What commands share that needs no command-line framework: where the queue is (Target), who
a person is, and the claim,
heartbeat and complete that scripts and harnesses call in a loop. runner.commands.common
builds typer's options on these; runner.commands.quick runs those three with them alone,
without importing typer or rich.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.core.errors import BadInput


@dataclass(frozen=True)
class Target:
    repo: Path
    remote: str | None  # "auto", a name, or None (local only)
    branch: str
    json: bool = False

    @classmethod
    def of(cls, repo: Path, remote: str | None, branch: str, json_out: bool = False) -> Target:
        """From the shared options: --remote none means this repository only; no --remote, origin when there is one."""
        return cls(repo, None if remote and remote.lower() == "none" else (remote or "auto"), branch, json_out)

    def queue(self, one_shot: bool = False):
        from runner.queue.queue import open_queue

        return open_queue(self.repo, remote=self.remote, branch=self.branch, one_shot=one_shot)

    def snapshot(self):
        return self.queue(one_shot=True).snapshot()  # one read and out: git's commands, not pygit2's import


def say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def person(by: str | None, repo: Path = Path(".")) -> str:
    """Who acts: --by, else git's user.name in the repository acted on (--repo), else $USER;
    checked like every name in a commit."""
    from runner.core.ids import person_problem

    name = by
    if not name:
        from runner.store.gitcli import config_value

        name = config_value(repo, "user.name") or os.environ.get("USER") or "person"
    if problem := person_problem(name):
        raise BadInput(f"--by: {problem}")
    return name


def check_worker_id(worker: str) -> str:
    from runner.core.ids import worker_id_problem

    if problem := worker_id_problem(worker):
        raise BadInput(f"--id: {problem}")
    return worker


def emit(target: Target, data: dict[str, Any], text: str) -> None:
    """Print JSON with --json, else the text."""
    if target.json:
        from runner.commands.render import print_json

        print_json(data)
    else:
        print(text, flush=True)


def report(target: Target, published, **extra: Any) -> None:
    """What a step event published: the step, the event, the status it left, the commit (and `extra` facts)."""
    from runner.core.machine import Kind
    from runner.core.model import Sentinel, Status

    change = published.change
    event = change.event
    data = {
        "step": event.step,
        "event": str(event.kind),
        "attempt": event.attempt,
        "status": change.status,
        "commit": published.commit,
        **extra,
    }
    text = f"{event.kind} {event.step} (attempt {event.attempt}) -> {change.status}  [{published.commit[:10]}]"
    # a person ended it: at the deviation gate, or anywhere
    if event.kind in (Kind.ABORT, Kind.REJECT) and change.status == Status.FAILED:
        data["sentinel"] = Sentinel.STEP_REJECTED
        text += f"\n{Sentinel.STEP_REJECTED}: {change.updates.get('last_error') or 'aborted'}"
    emit(target, data, text)


def claim(
    target: Target, step_id: str | None, worker: str, tags: list[str], ignore_deps: bool = False, by: str | None = None
) -> None:
    """`runner claim`: the best ready step (or STEP) for `worker`; exit 3 when nothing can be taken."""
    from runner.queue.leases import holder_info, new_incarnation

    check_worker_id(worker)
    if ignore_deps and (not step_id or not by):
        raise BadInput("--ignore-deps overrides the dependencies of one step for a person: name the STEP and --by NAME")
    queue = target.queue(one_shot=True)  # a claim reads a little and exits: git's commands, not pygit2's import
    incarnation = new_incarnation(worker)
    # This process exits at once: the claim lives by its lease and heartbeats, not by our pid.
    facts = {"state": "claimed by hand", "incarnation": incarnation}
    published = queue.claim(
        worker,
        incarnation,
        holder_info(with_pid=False),
        tags=tags,
        step_id=step_id,
        beat=facts,
        by=person(by, target.repo) if ignore_deps else None,
        ignore_deps=ignore_deps,
    )
    # A claim by hand makes no worktree (`runner work` does): the one it has is the repository's own.
    report(target, published, worktree=None, repository=str(queue.store.workdir))


def heartbeat(target: Target, step_id: str, worker: str) -> None:
    """`runner heartbeat`: renew worker's lease on the step it holds (its heartbeat ref moves; no queue commit)."""
    from runner.core.machine import holds

    check_worker_id(worker)
    queue = target.queue(one_shot=True)
    step = queue.snapshot().plan.find(step_id)
    if step is None:
        raise BadInput(f"no step {step_id!r} (see `runner status`)")
    if why := holds(step.meta, worker, None):
        raise BadInput(f"{worker} cannot renew {step_id}: {why}")
    queue.beat(
        worker,
        {
            "state": "claimed by hand",
            "step": step_id,
            "attempt": step.attempt,
            "incarnation": step.holder.get("incarnation"),
        },
    )
    emit(
        target,
        {"step": step_id, "attempt": step.attempt, "worker": worker},
        f"heartbeat {step_id} (attempt {step.attempt}) by {worker}",
    )


def complete(target: Target, step_id: str, worker: str) -> None:
    """`runner complete`: record the step worker holds as done (or in review when it needs approval)."""
    from runner.core.machine import Kind

    check_worker_id(worker)
    report(target, target.queue(one_shot=True).event(step_id, Kind.COMPLETE, worker))
