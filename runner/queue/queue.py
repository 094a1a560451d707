"""The queue: read the plan at the branch tip, publish one event per commit by
compare-and-swap. Every write (claims, records, merges, approvals, plan edits, heartbeats
that ride along) goes through `publish` and its one retry policy (runner.queue.publisher):
build the change on the tip we know, publish every ref it moves at once, and on a lost race
read again and rebuild.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from runner.core import secrets
from runner.core.codec import beat_with_claim, encode, encode_beat, map_beat_outputs
from runner.core.config import DEFAULT_TOML, Config, parse_config
from runner.core.errors import BadInput
from runner.core.events import allowed_paths, context_for, halt_file, side_files, write_step_event
from runner.core.layout import (
    CONFIG_FILE,
    DEFAULT_INTEGRATION_BRANCH,
    DEFAULT_QUEUE_BRANCH,
    EMPTY_TREE,
    HALT_FILE,
    NOTES_FILE,
    ROOT_FILE,
    branch_ref,
    handoff_path,
    heartbeat_ref,
)
from runner.core.machine import Context, Event, Kind
from runner.core.model import Step, format_duration, format_time, utc_now
from runner.queue.backoff import RefPace
from runner.queue.change import Change, LostRace, Published, PushRefused, Skip
from runner.queue.claims import candidates, why_nothing
from runner.queue.leases import LeaseObserver, author_for, host_name
from runner.queue.publisher import Publisher
from runner.queue.snapshot import NotInitialised, Reader, Snapshot
from runner.store import Failed, RefUpdate, Refused, Store, StoreError, Won
from runner.store.choice import open_store

OUTCOME_TRIES = 200  # with backoff capped at 1 s: minutes of contention before an outcome gives up


class Queue:
    def __init__(self, store: Store, branch: str = DEFAULT_QUEUE_BRANCH, max_tries: int = 25):
        self.store = store
        self.branch = branch
        self.ref = branch_ref(branch)
        self.max_tries = max_tries
        self.reader = Reader(store, branch)
        self.observer = LeaseObserver(store.state_dir)
        self.races_lost = 0
        self.pace = RefPace()
        self.published: str | None = None  # the last commit this process published on the queue branch

    # --- reading ---------------------------------------------------------------------

    def fetch(self, branches: Iterable[str] = ()) -> None:
        before, started = self.store.tip(self.branch), time.monotonic()
        self.store.fetch([self.branch, *branches], heartbeats=True)
        self.pace.read(self.store, before, self.store.tip(self.branch), started)

    def snapshot(self, fetch: bool = True, branches: Iterable[str] = ()) -> Snapshot:
        branches = list(branches)
        fetch = fetch or self.store.view_lags
        if fetch:
            self.fetch(branches)
        tip = self.store.tip(self.branch)
        if self.published and tip != self.published and (tip is None or self.store.is_ancestor(tip, self.published)):
            tip = self.published  # our own push landed but the tracking ref could not be updated (busy)
        if tip is None:
            where = f"remote {self.store.remote}" if self.store.remote else "this repository"
            raise NotInitialised(f"no queue branch {self.branch!r} in {where}: run `runner init` first")
        return self.reader.snapshot_at(tip, branches, fetched=fetch or not self.store.remote)

    def snapshot_at(self, tip: str, branches: Iterable[str] = ()) -> Snapshot:
        return self.reader.snapshot_at(tip, list(branches))

    @staticmethod
    def context(snap: Snapshot, step: Step) -> Context:
        return context_for(snap.config, snap.plan.deps_done(step), bool(snap.plan.halted))

    # --- publishing: the one retry policy -----------------------------------------------

    def publish(
        self,
        build: Callable[[Snapshot], Change],
        actor: str,
        snapshot: Snapshot | None = None,
        tries: int | None = None,
        branches: Iterable[str] = (),
        patience: float = 0.0,
        then: Callable[[Snapshot, bool], Change] | None = None,
        defer: bool = False,
    ) -> Published:
        """Build a change on the tip and publish it with every ref it moves, all or none; on a
        lost race read the queue (and `branches`) again and rebuild. With `patience`, a failure
        to reach the remote is tried again for that many seconds (an outcome costs work to redo;
        nothing was published, and a holder that lost its claim meanwhile is fenced off).

        `then(snapshot after the change, after a lost race)` builds a second change that rides
        in the same push, as the commit after it: a worker's next claim. It is best effort: when
        it builds nothing (Skip, or any error) or the server refuses the pair, the first change
        is published alone. With `defer` (a claim), a lost race is tried again only once the
        queue moves more slowly than one attempt takes (RefPace); until then a try is a
        fetch."""
        return Publisher(self, build, actor, snapshot, tries, branches, patience, then, defer).run()

    def step_change(
        self, snap: Snapshot, event: Event, handoff: bytes | None = None, refs: Iterable[RefUpdate] = ()
    ) -> Change:
        """The commit of one step event on this snapshot (TransitionError when refused)."""
        step = snap.plan.find(event.step or "")
        if step is None:
            raise BadInput(f"no step {event.step!r} on {self.branch} (see `runner status`)")
        if not step.valid:
            raise BadInput(f"{step.path} is invalid and cannot change state: {'; '.join(step.problems)}")
        event, handoff = _scrubbed(snap, event, handoff)
        written = write_step_event(step, event, self.context(snap, step))
        files: dict[str, bytes | None] = {step.path: written.text.encode("utf-8")}
        if handoff is not None and event.spec.handoff:
            files[handoff_path(step.path)] = handoff
        files.update(side_files(event, lambda path: self.store.file_at(snap.tip, path)))
        assert set(files) <= allowed_paths(event, step.path)
        return Change(files, written.message, event, written.status, written.updates, list(refs))

    def event(self, step_id: str, kind: Kind, actor: str, **fields: Any) -> Published:
        """A person's or holder's event on one step, as the CLI records it."""

        def build(snap: Snapshot) -> Change:
            step = snap.plan.find(step_id)
            attempt = step.attempt if step is not None and step.valid else None
            return self.step_change(snap, Event(kind, actor, utc_now(), step=step_id, attempt=attempt, **fields))

        # An outcome costs work to redo: keep trying far longer than a claim would.
        return self.publish(build, actor, tries=OUTCOME_TRIES)

    def branches(self, step_id: str | None = None) -> list[str]:
        """The integration branch (and the step's branch when a step is named), as runner.toml names them."""
        tip = self.store.tip(self.branch)
        if tip is None:
            return [DEFAULT_INTEGRATION_BRANCH]
        queue = self.reader.config_at(tip).queue
        return [queue.integration_branch] + ([queue.step_branch_prefix + step_id] if step_id else [])

    # --- claiming ------------------------------------------------------------------------

    def claim(
        self,
        worker: str,
        incarnation: str,
        holder: dict[str, Any],
        tags: Iterable[str] = (),
        step_id: str | None = None,
        snapshot: Snapshot | None = None,
        beat: dict[str, Any] | None = None,
        by: str | None = None,
        ignore_deps: bool = False,
        by_agent: bool = False,
    ) -> Published:
        """Claim the best step this worker may take (or `step_id`); Skip when there is none.
        The worker's heartbeat rides in the same push when `beat` is given. `by_agent`: an
        agent you run yourself claims (runner.queue.claims.candidates)."""
        tries: list[int] = []

        def build(snap: Snapshot) -> Change:
            spread = bool(tries)  # after a lost race, racers spread over the next best steps
            tries.append(1)
            return self.claim_change(
                snap, worker, incarnation, holder, tags, step_id, beat, by, ignore_deps, spread, by_agent
            )

        # A claim won after a lost race is built on a snapshot read again then: the integration
        # branch is read with it, so the step starts from its dependencies' merges.
        branches = list(snapshot.tips) if snapshot is not None else self.branches()
        return self.publish(build, by or worker, snapshot, branches=branches, defer=True)

    def claim_change(
        self,
        snap: Snapshot,
        worker: str,
        incarnation: str,
        holder: dict[str, Any],
        tags: Iterable[str] = (),
        step_id: str | None = None,
        beat: dict[str, Any] | None = None,
        by: str | None = None,
        ignore_deps: bool = False,
        spread: bool = False,
        by_agent: bool = False,
    ) -> Change:
        """The claim of the best step on this snapshot (Skip when there is none)."""
        tags = list(tags)
        if step_id is not None and snap.plan.find(step_id) is None:
            raise BadInput(f"no step {step_id!r} (see `runner status`)")  # a typo is bad input, not "nothing to take"
        if snap.plan.halted:
            raise Skip(f"queue halted: {snap.plan.halted}")
        now = utc_now()
        for step, kind, reason in candidates(
            self.observer, snap, worker, incarnation, tags, now, step_id, ignore_deps, spread, by_agent
        ):
            lease = format_duration(snap.config.leases.lease)
            event = Event(
                kind,
                worker,
                now,
                step=step.id,
                attempt=step.attempt + 1,
                replaces=step.attempt if kind == Kind.TAKEOVER else None,
                incarnation=incarnation,
                holder=holder,
                lease=lease,
                reason=reason,
                ignore_deps=ignore_deps,
                by=by,
            )
            refs = (
                [self.beat_update(worker, beat_with_claim(beat, step.id, step.attempt + 1, incarnation))]
                if beat is not None
                else []
            )
            return self.step_change(snap, event, refs=refs)
        raise Skip(why_nothing(snap, tags, step_id, ignore_deps, by_agent))

    # --- heartbeats ----------------------------------------------------------------------

    def beat_update(self, worker: str, info: dict[str, Any]) -> RefUpdate:
        """The move of this worker's heartbeat ref: a commit chained on its previous beat."""
        previous = self.store.heartbeat(worker)
        body = _beat_body(info)
        commit = self.store.make_commit(
            [previous] if previous else [], {}, encode_beat(worker, body), author_for(worker), base_tree=EMPTY_TREE
        )
        return RefUpdate(heartbeat_ref(worker), commit, previous)

    def beat(self, worker: str, info: dict[str, Any]) -> str:
        """Move this worker's heartbeat ref on its own (an idle worker, a long step)."""
        for _ in range(3):
            update = self.beat_update(worker, info)
            outcome = self.store.publish([update])
            if isinstance(outcome, Won):
                return update.new or ""
            if isinstance(outcome, Refused):
                raise PushRefused(str(outcome))
            if isinstance(outcome, Failed):
                raise StoreError(str(outcome))
            self.store.fetch([], heartbeats=True)  # ours moved (or vanished): chain on what is there
        raise LostRace(f"could not move the heartbeat ref of {worker}")

    # --- the plan as people edit it -------------------------------------------------------

    def init(self, actor: str, files: dict[str, bytes] | None = None) -> tuple[bool, str]:
        """Create the queue branch (and the integration branch). (created?, message)"""
        self.store.fetch([self.branch])
        tip = self.store.tip(self.branch)
        messages = []
        if tip is None:
            files = {
                CONFIG_FILE: DEFAULT_TOML.encode(),
                ROOT_FILE: b"# Plan\n\nWhat this plan is for, and what every step should know.\n",
                NOTES_FILE: b"# Notes\n\nDurable facts learned while running the plan.\n",
                **(files or {}),
            }
            message = encode(Event(Kind.INIT, actor, utc_now()))
            commit = self.store.make_commit([], files, message, author_for(actor))
            outcome = self.store.publish([RefUpdate(self.ref, commit, None)])
            if not isinstance(outcome, Won):
                raise LostRace(
                    f"could not create {self.branch}: {outcome or 'another process created it at the same time'}"
                )
            self.published = commit
            messages.append(f"created queue branch {self.branch}")
        else:
            messages.append(f"queue branch {self.branch} already exists")
        tip_now = self.store.tip(self.branch) or self.published
        assert tip_now is not None  # created above, or there already
        config = self.reader.config_at(tip_now)
        messages.append(self.ensure_integration(config, actor))
        return tip is None, "; ".join(messages)

    def ensure_integration(self, config: Config, actor: str) -> str:
        """The integration branch `config` names, created at this repository's HEAD (or an empty
        start) when it does not exist yet."""
        branch = config.queue.integration_branch
        self.store.fetch([branch])
        if self.store.tip(branch):
            return f"integration branch {branch} exists"
        head = self.store.local_head()
        if head is None:
            head = self.store.make_commit([], {}, "start of integration\n", author_for(actor), base_tree=EMPTY_TREE)
        outcome = self.store.publish([RefUpdate(branch_ref(branch), head, None)])
        if isinstance(outcome, Refused):
            raise PushRefused(str(outcome))
        return f"created integration branch {branch} at {head[:10]}"

    def edit(self, files: Callable[[Snapshot], dict[str, bytes | None]], summary: str, actor: str) -> Published:
        """A person's plan edit (new steps, an import, runner.toml): `files(snapshot)` builds and
        checks the files against the plan they land on (BadInput), again after a lost race."""

        def build(snap: Snapshot) -> Change:
            changed = files(snap)
            if (config := changed.get(CONFIG_FILE)) is not None:
                parse_config(config.decode("utf-8", errors="replace"))  # refused before any worker sees it
            return Change(changed, encode(Event(Kind.EDIT, actor, utc_now(), reason=summary)))

        return self.publish(build, actor)

    def set_halt(self, reason: str | None, actor: str) -> Published:
        def build(snap: Snapshot) -> Change:
            if reason is None and not snap.plan.halted:
                raise Skip("the queue is not halted")
            event = Event(Kind.HALT if reason is not None else Kind.RESUME, actor, utc_now(), reason=reason)
            event = secrets.scrub_event(event, secrets.for_config(snap.config.secrets))  # a verifier's last words
            return Change({HALT_FILE: halt_file(event)}, encode(event), event)

        return self.publish(build, actor)

    def log(self, step_id: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """The audit trail: the queue's events, newest first (one step's with `step_id`)."""
        from runner.queue.audit import log

        return log(self.store, self.snapshot().tip, step_id, limit)


def _beat_body(info: dict[str, Any]) -> dict[str, Any]:
    """A heartbeat's facts, each running step's output tail scrubbed (runner.worker.livelog made it)."""
    body = {"host": host_name(), "at": format_time(utc_now()), **info}
    return map_beat_outputs(body, secrets.for_config().scrub)


def _scrubbed(snap: Snapshot, event: Event, handoff: bytes | None) -> tuple[Event, bytes | None]:
    """What a step printed leaves through a step event (its reason, runs, verdict, notes, and
    the handoff): scrubbed here, once for every writer (runner.core.secrets)."""
    scrubber = secrets.for_config(snap.config.secrets)
    text = scrubber.scrub(handoff.decode("utf-8", "replace")).encode("utf-8") if handoff is not None else None
    return secrets.scrub_event(event, scrubber), text


def open_queue(
    repo: str | Path = ".", remote: str | None = "auto", branch: str = DEFAULT_QUEUE_BRANCH, one_shot: bool = False
) -> Queue:
    """The queue of a repository (for scripts and tests; the CLI builds it from its options).
    `one_shot`: for a command that reads a little and exits (runner.store.choice.open_store)."""
    return Queue(open_store(repo, remote=remote, one_shot=one_shot), branch=branch)
