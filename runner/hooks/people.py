"""Who pushes: people or workers. With [hooks] identities configured, each pusher (named by
the variable [hooks] pusher_env, which the git server sets) is either a worker key mapped to
the worker ids it may act as, or a person ([hooks] people; admins are people too). Person
events (approve, reject, retry, abort, resume, plan edits, a claim that ignores
dependencies) come only from people; a worker key can never push them. Without identities
the hook cannot tell who pushes, and enforces the protocol but not people vs workers."""

from __future__ import annotations

import os
from dataclasses import dataclass

from runner.core.config import Hooks
from runner.core.machine import Event, Kind


@dataclass(frozen=True)
class Pushers:
    hooks: Hooks
    pusher: str | None

    @classmethod
    def of(cls, hooks: Hooks, override: str | None = None) -> "Pushers":
        pusher = override if override is not None else (os.environ.get(hooks.pusher_env) if hooks.pusher_env else None)
        return cls(hooks, pusher)

    @property
    def configured(self) -> bool:
        return bool(self.hooks.identities)

    def who(self) -> str:
        return f"pusher {self.pusher!r}" if self.pusher else f"an unnamed pusher (${self.hooks.pusher_env or 'pusher_env'} is not set)"

    def _unknown(self) -> str | None:
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
        if problem := self._unknown():
            return problem
        if self.is_person() or worker in self.hooks.identities.get(self.pusher or "", ()):
            return None
        allowed = ", ".join(self.hooks.identities.get(self.pusher or "", ())) or "no worker"
        return f"{self.who()} may act as {allowed}, not as worker {worker!r}"

    def may_record(self, event: Event) -> str | None:
        """May this pusher push a commit of `event`?"""
        if not self.configured:
            return None
        if event.spec.person or (event.kind == Kind.CLAIM and event.ignore_deps):
            return self.may_edit() and f"{event.kind} is a person's event: {self.who()} is not in [hooks] people"
        return self.may_act_as(event.actor)

    def may_edit(self) -> str | None:
        if not self.configured:
            return None
        return self._unknown() or (None if self.is_person() else f"only people edit the plan: {self.who()} is a worker key")

    def may_administer(self) -> str | None:
        if not self.configured:
            return None
        if self.pusher is not None and self.pusher in self.hooks.admins:
            return None
        return f"only [hooks] admins may change [hooks] or the branch names ({self.who()})"
