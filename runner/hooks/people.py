"""Who pushes: people or workers.

With [hooks] identities, the git server names each pusher in the variable [hooks] pusher_env
(per key: a forced command in authorized_keys, GL_USERNAME on GitLab, ...). A pusher is
either a worker key, mapped to the worker ids it may act as, or a person ([hooks] people;
[hooks] admins are people too). The hook then enforces, from runner.toml as it was before
the push:
- a worker key acts only as its own worker ids: the claims, takeovers, holder events
  (release, fail, complete, block), halts and heartbeats it pushes name one of them, and it
  deletes only their heartbeats;
- person events (approve, reject, retry, abort, resume, a claim with --ignore-deps) and
  every plan edit (steps, bodies, runner.toml) come only from people; a change of [hooks], of
  [notify] (a command and URLs the hosts that opted in run) or of the branch names only from
  admins;
- a worker key moves the integration branch only in the push whose queue event records
  that merge (a complete of a step that needs no approval): it cannot merge its own work
  past a review;
- a pusher the server does not name, or that is neither a worker key nor a person, pushes
  nothing to the queue, the integration branch, a step branch or a heartbeat.
A person's events may name any person (--by); people are trusted with each other's names.

Without identities the hook cannot tell who pushes. It still enforces the protocol: every
queue commit is one legal transition replayed byte for byte, by the holder, attempt and
incarnation the step file names (a fence against stale holders), the queue and integration
branches only fast-forward and are never deleted, runner's refs have the expected shape, a
live claim is not taken over and a live worker's heartbeat is not deleted. It does not
enforce who anyone is: any pusher may write any actor's name, so it may approve, reject,
retry, abort or resume as a person, record a holder event as the holder (whose name and
incarnation the step file shows), claim as any worker, edit the plan and runner.toml
(including [hooks]: turning identities on is open to everyone until they are on, and [notify]:
a host that opted in to notices runs its command), move the
integration branch forward with any commit, and delete a heartbeat that is not live.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from runner.core.config import Hooks
from runner.core.machine import Event, person_event


@dataclass(frozen=True)
class Pushers:
    hooks: Hooks
    pusher: str | None

    @classmethod
    def of(cls, hooks: Hooks, override: str | None = None) -> Pushers:
        pusher = override if override is not None else (os.environ.get(hooks.pusher_env) if hooks.pusher_env else None)
        return cls(hooks, pusher)

    @property
    def configured(self) -> bool:
        return bool(self.hooks.identities)

    def who(self) -> str:
        return (
            f"pusher {self.pusher!r}"
            if self.pusher
            else f"an unnamed pusher (${self.hooks.pusher_env or 'pusher_env'} is not set)"
        )

    def unknown(self) -> str | None:
        """Why this pusher is nobody runner knows (with identities configured), or None."""
        if not self.configured:
            return None
        if self.pusher is None:
            return f"cannot tell who pushes: {self.who()} and [hooks] identities is configured"
        if self.pusher not in self.hooks.identities and not self.is_person():
            return f"{self.who()} is neither a worker key in [hooks] identities nor a person in [hooks] people"
        return None

    def is_person(self) -> bool:
        return self.pusher is not None and (self.pusher in self.hooks.people or self.pusher in self.hooks.admins)

    def may_act_as(self, worker: str) -> str | None:
        if not self.configured:
            return None
        if problem := self.unknown():
            return problem
        if self.is_person() or worker in self.hooks.identities.get(self.pusher or "", ()):
            return None
        allowed = ", ".join(self.hooks.identities.get(self.pusher or "", ())) or "no worker"
        return f"{self.who()} may act as {allowed}, not as worker {worker!r}"

    def may_record(self, event: Event) -> str | None:
        """May this pusher push a commit of `event`?"""
        if not self.configured:
            return None
        if person_event(event):
            return self.may_edit() and f"{event.kind} is a person's event: {self.who()} is not in [hooks] people"
        return self.may_act_as(event.actor)

    def may_edit(self) -> str | None:
        if not self.configured:
            return None
        return self.unknown() or (
            None if self.is_person() else f"only people edit the plan: {self.who()} is a worker key"
        )

    def may_administer(self) -> str | None:
        if not self.configured:
            return None
        if self.pusher is not None and self.pusher in self.hooks.admins:
            return None
        return f"only [hooks] admins may change [hooks], [notify] or the branch names ({self.who()})"
