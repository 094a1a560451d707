"""Notices ([notify] in runner.toml): after a publish that records one of these events, the
process that published it (worker, CLI or board) hands it to the notifier, once:

- needs-you: a step went to review (approval, a deviation, a block, a held review fault);
- failed: a step failed for good, not by a person's hand;
- halted: the queue halted (a person's halt, a verifier that faulted, the plan's budget spent);
- paused: a provider's usage limit paused an account that was not paused (runner.core.accounts);
- drained: the change left nothing to run (no step ready, claimed or waiting) where
  something was before it;
- worker-gone: a worker's claim was taken over (it was gone while holding the step).

The notifier is a detached process (runner.queue.notifier): a command that fails or hangs is
killed at [notify] timeout and logged in .git/runner/logs/notify.log, and never holds up or
fails the publish that sent it.

[notify] comes from the queue branch, and a notifier runs its command (and sends to its URLs)
on whatever host records the event, a person's laptop included. So a host runs them only when
it opted in, by a setting of its own that no push can change (`opted_in`); else the notices
are logged as not sent. With [hooks] identities, only admins change [notify] (the hook)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.core.layout import without_repository_env
from runner.core.machine import Kind
from runner.core.model import Status
from runner.queue.processes import TAG

if TYPE_CHECKING:
    from runner.queue.change import Published
    from runner.queue.queue import Queue

OPT_IN_ENV = "RUNNER_NOTIFY"  # 1: this process sends; 0: it does not, whatever git's config says
OPT_IN_KEY = "runner.notify"  # git config (the clone's, or the user's): true to send from this host
NOT_OPTED_IN = (
    "not sent: [notify] comes from the queue branch, and this host has not opted in to run it "
    f"(`git config {OPT_IN_KEY} true` in this clone, {OPT_IN_ENV}=1, or a worker's --notify)"
)
WHY_REVIEW = {
    "result": "its result waits for your approval",
    "deviation": "orient reported a major deviation",
    "blocked": "implement says it is blocked",
    "budget": "its agent runs spent its budget",
}
_started: list[subprocess.Popen] = []  # notifiers not yet reaped


def notices_of(queue: Queue, published: Published) -> list[dict[str, Any]]:
    """The notices a published change calls for, by the [notify] of the queue it was built on."""
    change, before = published.change, published.snapshot
    event = change.event
    if event is None:
        return []
    wanted = before.config.notify.events
    step = before.plan.find(event.step) if event.step else None
    reason = " ".join((event.reason or change.updates.get("last_error") or "").split())
    base = {
        "step": event.step or "",
        "title": step.title if step else "",
        "status": change.status or "",
        "actor": event.actor,
        "reason": reason,
        "queue": queue.branch,
        "commit": published.commit,
    }
    found = []

    def add(name: str, message: str) -> None:
        if name in wanted:
            found.append({"event": name, **base, "message": message})

    if event.kind == Kind.HALT:
        add("halted", f"the queue halted by {event.actor}: {reason}")
    if event.account and event.account not in before.pauses(event.at):  # one notice a pause, not one a worker
        add("paused", f"account {event.account} is paused by a provider's limit: {reason}")
    if event.kind == Kind.TAKEOVER and step is not None:
        add(
            "worker-gone",
            f"{step.assignee} was gone while holding {step.id} (attempt {event.replaces}); {event.actor} took it over",
        )
    if change.status == Status.REVIEW:
        why = WHY_REVIEW.get(str(change.updates.get("review") or "result"), "a person must decide")
        add("needs-you", f"{event.step} needs you: {why}" + (f" ({reason})" if reason else ""))
    if change.status == Status.FAILED and not event.spec.person:
        add("failed", f"{event.step} failed for good" + (f": {reason}" if reason else ""))
    if (
        event.step
        and change.status in (Status.DONE, Status.FAILED, Status.REVIEW)
        and "drained" in wanted
        and (counts := drained(queue, published))
    ):
        add("drained", "the plan drained: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    return found


def drained(queue: Queue, published: Published) -> dict[str, int] | None:
    """The plan's status counts when the change left nothing to run (no step ready, claimed or
    waiting) where something was before it, else None."""
    plan, step_id = published.snapshot.plan, published.change.event.step if published.change.event else None
    for status in (Status.READY, Status.CLAIMED):
        # A step without dependencies that is ready or claimed runs: no need to read further.
        if any(sid != step_id and sid not in (plan.dependent or ()) for sid in plan.by_status.get(status, ())):
            return None
    counts = queue.reader.snapshot_at(published.commit, fetched=False).plan.status_counts()
    if _runs(counts):
        return None
    step = plan.steps.get(step_id or "")
    return counts if (step is not None and step.status == Status.CLAIMED) or _runs(plan.status_counts()) else None


def _runs(counts: dict[str, int]) -> bool:
    return any(counts.get(status) for status in (Status.READY, Status.CLAIMED, "waiting"))


def opted_in(store) -> bool:
    """Does this host run the notifiers the queue's [notify] names? Only when it says so itself:
    RUNNER_NOTIFY in this process's environment (1 or 0), else git's config runner.notify (the
    clone's own, or the user's; never the queue's)."""
    said = os.environ.get(OPT_IN_ENV, "").strip().lower()
    if said in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return said in ("1", "true", "yes", "on")
    from runner.store.gitcli import config_value

    return config_value(store.workdir, OPT_IN_KEY, "bool") == "true"


def notify(queue: Queue, published: Published) -> None:
    """Send the notices `published` calls for, when this host opted in. Never raises: a notice
    must not fail a record."""
    from runner.queue.notifier import write

    log = queue.store.state_dir / "logs" / "notify.log"
    try:
        notices = notices_of(queue, published)
        if notices and not opted_in(queue.store):
            log.parent.mkdir(parents=True, exist_ok=True)
            write(log, f"{', '.join(n['event'] for n in notices)} of {published.commit[:10]}: {NOT_OPTED_IN}")
            return
        send(queue.store, published.snapshot.config.notify, notices)
    except Exception as exc:  # noqa: BLE001 - logged; the event itself is published
        write(log, f"could not send the notices of {published.commit[:10]}: {exc}")


def send(store, settings, notices: list[dict[str, Any]]) -> None:
    """Start the notifier for each notice, detached: its own session, nothing waited for."""
    for proc in list(_started):
        if proc.poll() is not None:
            _started.remove(proc)
    if not notices:
        return
    log = store.state_dir / "logs" / "notify.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = without_repository_env(os.environ)
    env.pop(TAG, None)  # its own lifetime (its timeout), not that of a step command that recorded the event
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")]))
    for notice in notices:
        payload = json.dumps(
            {
                "notice": notice,
                "log": str(log),
                "command": list(settings.command),
                "urls": list(settings.urls),
                "timeout": settings.timeout,
            }
        )
        _started.append(
            subprocess.Popen(
                [sys.executable, "-m", "runner.queue.notifier", payload],
                cwd=str(store.workdir),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
