"""runner.toml's tables about people and what reaches beyond the queue: who may push what
([hooks]), whom runner tells ([notify]), what never leaves a worker ([secrets]), what a model's
tokens cost ([prices.*]). runner.core.config assembles them with the others into one schema."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner.core import configvalues as v
from runner.core.configvalues import key

Words = tuple[str, ...]  # a list of names


@dataclass(frozen=True)
class Hooks:
    pusher_env: str | None = key(
        None, v.optional_text, "the variable the git server sets to the pusher's name (e.g. GL_USERNAME)", '""'
    )
    people: Words = key(
        (), v.strings, "pushers who are people: only they approve, reject, retry, abort, resume, edit the plan", "[]"
    )
    admins: Words = key((), v.strings, "people who may also change [hooks] and the branch names", "[]")
    identities: dict[str, Words] = key({}, v.identities, "pusher -> the worker ids they may act as", "{}")


@dataclass(frozen=True)
class Price:
    input: float = key(0.0, v.price, "US dollars per million tokens sent (not read from a cache)")
    output: float = key(0.0, v.price, "per million tokens received (reasoning included)")
    cache_read: float | None = key(
        None, v.price, "per million tokens read from the provider's cache (default: input)", "input"
    )
    cache_write: float | None = key(None, v.price, "per million tokens written to its cache (default: input)", "input")


NOTICE_EVENTS = ("needs-you", "failed", "halted", "drained", "worker-gone", "paused", "stuck")


def _notice_events(value: Any) -> Words:
    events = v.strings(value)
    if unknown := [e for e in events if e not in NOTICE_EVENTS]:
        raise ValueError(f"unknown event {unknown[0]!r} (events: {', '.join(NOTICE_EVENTS)})")
    return events


@dataclass(frozen=True)
class Notify:
    command: Words = key(
        (),
        v.argv,
        "argv run for each notice, never by a shell; tokens {event} {step} {title} {status} {actor} {reason} {message} "
        "{queue}",
        "[]",
    )
    urls: Words = key(
        (),
        v.strings,
        'notification URLs, sent with apprise (pip install apprise); "env:NAME" reads them from that variable on the '
        "host that records",
        "[]",
    )
    events: Words = key(
        NOTICE_EVENTS,
        _notice_events,
        "what is notified: needs-you, failed (for good), halted, drained (nothing left to run), worker-gone (its claim "
        "taken over), paused (a provider's limit paused an account), stuck (a step no live worker can take)",
    )
    timeout: float = key(
        30.0,
        v.duration,
        "a notice still running after this long is killed and logged; it never holds up a tick",
        '"30s"',
    )


@dataclass(frozen=True)
class Secrets:
    env: Words = key(
        (),
        v.strings,
        "environment variables whose values never leave the worker (beside every name holding TOKEN, SECRET, "
        "PASSWORD or API_KEY, or ending in _KEY): redacted from what a step printed",
        "[]",
    )
    allow: Words = key(
        (), v.strings, "known false positives: texts never redacted, refused by the hook or held for a person", "[]"
    )
