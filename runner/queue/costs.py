"""What the plan's agent runs cost, read from the queue's history: every record commit lists
its runs with their usage (the Runs trailer), its worker (the actor), its step and its day,
so the spend can be summed by step, worker, role or day. The step files keep each step's sum
(`usage`); the history is where the other cuts are."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from runner.core.codec import CodecError, decode
from runner.core.model import format_time
from runner.core.usage import Spend, Usage, from_record
from runner.store import Store

BY = ("step", "worker", "role", "day")


@dataclass(frozen=True)
class Charge:
    """One agent run as the history recorded it."""

    step: str
    worker: str
    role: str
    day: str
    usage: Usage | str  # a Usage, or UNKNOWN
    model: str | None = None

    def key(self, by: str) -> str:
        return str(getattr(self, by))


def charges(store: Store, tip: str, step_id: str | None = None, since: str | None = None) -> Iterator[Charge]:
    """Every agent run the queue's history recorded, newest first (after commit `since` only)."""
    for info in store.workspace().log(tip):
        if info.id == since:
            return
        if '"usage"' not in info.message:  # a commit with no run of an agent: not decoded
            continue
        try:
            event = decode(info.message).event
        except CodecError:
            continue
        if event is None or not event.step or not event.spec.holder or (step_id and event.step != step_id):
            continue
        for run in event.runs:
            usage = from_record(run.get("usage")) if isinstance(run, dict) else None
            if usage is None:
                continue
            yield Charge(
                event.step,
                event.actor,
                str(run.get("name", "?")).split(":", 1)[0],
                format_time(event.at)[:10],
                usage,
                run.get("model") if isinstance(run.get("model"), str) else None,
            )


def summed(found: list[Charge], by: str) -> dict[str, Spend]:
    groups: dict[str, Spend] = {}
    for charge in found:
        groups[charge.key(by)] = groups.get(charge.key(by), Spend()).add(charge.usage)
    return groups


def report(store: Store, tip: str, step_id: str | None = None, by: str = "step") -> dict[str, Any]:
    """`runner cost --json`: the total, each step's, and (with `by`) each worker's, role's or day's."""
    found = list(charges(store, tip, step_id))
    total = Spend()
    for charge in found:
        total = total.add(charge.usage)

    def rows(key: str) -> list[dict[str, Any]]:
        return [
            {key: name, **spend.as_json(), "money": spend.money()} for name, spend in sorted(summed(found, key).items())
        ]

    data: dict[str, Any] = {"total": {**total.as_json(), "money": total.money()}, "steps": rows("step")}
    if by != "step":
        data["by"], data["groups"] = by, rows(by)
    return data


class WorkerSpend:
    """Each worker's spend, for a long-lived reader (the board): the history read once, then
    only the commits a new tip added."""

    def __init__(self) -> None:
        self.tip: str | None = None
        self.groups: dict[str, Spend] = {}

    def at(self, store: Store, tip: str) -> dict[str, Spend]:
        if tip != self.tip:
            since = self.tip if self.tip and store.is_ancestor(self.tip, tip) else None
            groups = dict(self.groups) if since else {}
            for charge in charges(store, tip, since=since):
                groups[charge.worker] = groups.get(charge.worker, Spend()).add(charge.usage)
            self.tip, self.groups = tip, groups
        return self.groups
