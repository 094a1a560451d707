"""One publish on the queue, under its one retry policy: build the change on the tip we know,
publish every ref it moves at once, and on a lost race read again and rebuild. A Publisher
owns the state of that loop (the snapshot it builds on, the tries, the waits, the change that
rides along); the Queue keeps what outlives one publish (its pace, the races it lost, the
last commit it published).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from runner.core.layout import branch_ref
from runner.queue.backoff import Deferral, race_backoff
from runner.queue.change import Change, LostRace, Published, PushRefused
from runner.queue.leases import author_for
from runner.queue.snapshot import Snapshot
from runner.store import Failed, RefUpdate, Refused, StoreError, Won

if TYPE_CHECKING:
    from runner.queue.queue import Queue

Build = Callable[[Snapshot], Change]
Then = Callable[[Snapshot, bool], Change]


class Publisher:
    """One publish of the change `build` makes, by `actor` (Queue.publish says what each option does)."""

    def __init__(
        self,
        queue: Queue,
        build: Build,
        actor: str,
        snapshot: Snapshot | None = None,
        tries: int | None = None,
        branches: Iterable[str] = (),
        patience: float = 0.0,
        then: Then | None = None,
        defer: bool = False,
    ):
        self.queue = queue
        self.store = queue.store
        self.build = build
        self.branches = list(branches)
        self.snap = snapshot or queue.snapshot(branches=self.branches)
        self.author = author_for(actor)
        self.tries = tries or queue.max_tries
        self.give_up = time.monotonic() + patience
        self.then = then
        self.defer = defer
        self.wait = 0.5  # before trying an unreachable remote again, doubled up to 10 s
        self.lost = False  # the last try lost a race
        self.waited = 0  # tries spent waiting for a fast writer to slow down (RefPace)
        self.deferral = Deferral()

    def run(self) -> Published:
        queue = self.queue
        for attempt in range(self.tries):
            if self.lost:
                time.sleep(
                    race_backoff(
                        attempt - 1, remote=bool(self.store.remote), outpaced=self.defer and queue.pace.outpaced()
                    )
                )
                self.fresh()
            began = time.monotonic()
            change = self.build(self.snap)  # Skip when nothing is left to claim, however busy the ref
            if self.deferral.wait(self.lost and self.defer and queue.pace.outpaced(), began):
                self.waited += 1
                continue  # racing a writer this fast only takes the CPU it needs
            self.lost = False
            snap = self.snap
            commit = self.store.make_commit([snap.tip], change.files, change.message, self.author)
            queue.reader.wrote(commit, snap.tip, change.files)
            following = self.following(commit, change, attempt > 0) if self.then else None
            outcome = self.store.publish(self.moves(commit, change, following))
            queue.pace.attempted(time.monotonic() - began)
            if isinstance(outcome, Won):
                queue.published = following.commit if following else commit
                return self.notified(Published(commit, change, snap, following))
            if isinstance(outcome, Refused):
                if following is not None:
                    self.then = None  # the server's rules refused the pair: the change alone, on the same tip
                    continue
                raise PushRefused(str(outcome))
            if isinstance(outcome, Failed):
                if time.monotonic() + self.wait > self.give_up:
                    raise StoreError(str(outcome))
                time.sleep(self.wait)
                self.wait = min(self.wait * 2, 10.0)
                self.fresh()
            else:
                queue.races_lost += 1
                self.lost = True
        waits = (
            f" (and {self.waited} more tries waited while it moved faster than a claim takes)" if self.waited else ""
        )
        raise LostRace(
            f"lost {self.tries - self.waited} compare-and-swap races in a row on {queue.branch}{waits}; "
            "giving up this time"
        )

    def fresh(self) -> None:
        """Read the queue (and the branches) again; the same snapshot while the remote is away."""
        try:
            self.snap = self.queue.snapshot(branches=self.branches)
        except StoreError:
            pass  # the remote is still away: try the same change again

    def moves(self, commit: str, change: Change, following: Published | None) -> list[RefUpdate]:
        """Every ref a publish moves, once each: the queue branch to its last new commit."""
        ref, tip = self.queue.ref, self.snap.tip
        refs = {update.ref: update for update in [RefUpdate(ref, commit, tip), *change.refs]}
        if following is not None:
            refs.update(
                {update.ref: update for update in [RefUpdate(ref, following.commit, tip), *following.change.refs]}
            )
        return list(refs.values())

    def following(self, commit: str, change: Change, after_lost_race: bool) -> Published | None:
        """The change `then` builds on the queue as `commit` (built on the snapshot) leaves it,
        committed after it; None when it builds none."""
        assert self.then is not None
        try:
            # Not a fetched view, whatever the snapshot was: no lease is judged on it, so it
            # claims only ready steps, never takes a holder over.
            after = self.queue.reader.snapshot_at(commit, fetched=False)
            moved = {update.ref: update.new for update in change.refs}
            after.tips = {branch: moved.get(branch_ref(branch), tip) for branch, tip in self.snap.tips.items()}
            following = self.then(after, after_lost_race)
        except Exception:  # noqa: BLE001 - only an extra: the change it rides with must not fail for it
            return None
        second = self.store.make_commit([commit], following.files, following.message, self.author)
        self.queue.reader.wrote(second, commit, following.files)
        return Published(second, following, after)

    def notified(self, published: Published) -> Published:
        """The process that published an event tells people of it, once ([notify] in runner.toml)."""
        settings = published.snapshot.config.notify
        if settings.command or settings.urls:
            from runner.queue.notices import notify

            notify(self.queue, published)
        return published
