"""A plan: all step files at one queue commit, checked as a whole, with derived statuses."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from runner.core.model import Status, Step
from runner.core.touches import overlapping

if TYPE_CHECKING:
    from runner.core.config import Config


class IdSet:
    """A set of step ids that each transition changes by a few: a changed set keeps its
    predecessor's members and only what changed, folded into a new base once the changes
    pile up. Copying the 10,000-id ready set on every claim was a sixth of what a claim at
    10,000 steps costs more than one at 100."""

    __slots__ = ("_added", "_base", "_removed")
    FOLD = 64  # changes kept beside the base before they are folded into a new one

    def __init__(
        self, base: Iterable[str] = (), added: frozenset[str] = frozenset(), removed: frozenset[str] = frozenset()
    ):
        self._base = base if isinstance(base, frozenset) else frozenset(base)
        self._added = added  # not in the base
        self._removed = removed  # in the base

    def __contains__(self, sid: object) -> bool:
        return sid in self._added or (sid in self._base and sid not in self._removed)

    def __len__(self) -> int:
        return len(self._base) - len(self._removed) + len(self._added)

    def __iter__(self) -> Iterator[str]:
        removed = self._removed
        yield from (sid for sid in self._base if sid not in removed) if removed else self._base
        yield from self._added

    def changed(self, added: set[str], removed: set[str]) -> IdSet:
        """This set with `added` in and `removed` out (the two disjoint)."""
        base = self._base
        now_added = (self._added - removed) | {sid for sid in added if sid not in base}
        now_removed = (self._removed - added) | {sid for sid in removed if sid in base}
        if len(now_added) + len(now_removed) > self.FOLD:
            return IdSet((base - now_removed) | now_added)
        return IdSet(base, frozenset(now_added), frozenset(now_removed))


@dataclass
class Plan:
    steps: dict[str, Step]
    invalid: list[Step] = field(default_factory=list)  # steps that cannot be trusted, incl. duplicates
    halted: str | None = None  # the halt reason, when the queue is halted
    order: list[str] = field(default_factory=list)  # step ids in claim order (priority, then id)
    by_status: dict[str, IdSet] = field(default_factory=dict)  # stored status -> step ids
    dependent: frozenset[str] | None = None  # the steps with dependencies: only these can wait or be blocked
    # status -> a position in `order` before which no step has that status (learnt by with_status)
    first_at: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.order:
            self.order = [step.id for step in sorted(self.steps.values(), key=sort_key)]
        if self.dependent is None:
            self.dependent = frozenset(step.id for step in self.steps.values() if step.depends_on)
        if not self.by_status:
            ids: dict[str, set[str]] = {}
            for step in self.steps.values():
                ids.setdefault(step.status, set()).add(step.id)
            self.by_status = {status: IdSet(members) for status, members in ids.items()}

    def updated(self, changed: list[Step], halted: str | None) -> Plan | None:
        """This plan after `changed` steps were rewritten by transitions, without rebuilding it.

        None when a change could alter the plan's shape (validity, dependencies, order):
        then the caller builds the plan again from every file.
        """
        steps = dict(self.steps)
        moves: dict[str, tuple[set[str], set[str]]] = {}  # status -> (ids in, ids out)
        for new in changed:
            old = steps.get(new.id)
            if (
                old is None
                or new.problems
                or old.path != new.path
                or old.depends_on != new.depends_on
                or old.priority != new.priority
            ):
                return None
            moves.setdefault(old.status, (set(), set()))[1].add(old.id)
            moves.setdefault(new.status, (set(), set()))[0].add(new.id)
            steps[new.id] = new
        by_status = dict(self.by_status)
        joined = set()
        for status, (added, removed) in moves.items():
            by_status[status] = by_status.get(status, IdSet()).changed(added - removed, removed - added)
            if added - removed:
                joined.add(status)
        # A step leaving a status keeps that status's bound true; one joining it may sit before it.
        first_at = {status: at for status, at in self.first_at.items() if status not in joined}
        return Plan(
            steps=steps,
            invalid=self.invalid,
            halted=halted,
            order=self.order,
            by_status=by_status,
            dependent=self.dependent,
            first_at=first_at,
        )

    def with_halt(self, halted: str | None) -> Plan:
        return Plan(
            steps=self.steps,
            invalid=self.invalid,
            halted=halted,
            order=self.order,
            by_status=self.by_status,
            dependent=self.dependent,
            first_at=self.first_at,
        )

    def status_counts(self) -> dict[str, int]:
        """How many of the plan's sound steps have each derived status, looking only at the
        ready steps with dependencies (a drain prints this after every step)."""
        counts = {status: len(ids) for status, ids in self.by_status.items() if ids}
        ready = self.by_status.get(Status.READY, IdSet())
        for sid in self.dependent or ():
            if sid in ready and (status := self._ready_status(self.steps[sid], set())) != Status.READY:
                counts[Status.READY] -= 1
                counts[status] = counts.get(status, 0) + 1
        return {status: n for status, n in counts.items() if n}

    def with_status(self, status: str) -> Iterator[Step]:
        """Steps with this stored status, in claim order (lazily: a claim needs only the first).
        A few among many are sorted; many are found by walking the claim order."""
        ids = self.by_status.get(status, IdSet())
        if len(ids) * 16 < len(self.order):
            return iter(sorted((self.steps[sid] for sid in ids), key=sort_key))
        # Late in a drain the ready steps sit behind thousands of done ones: walk from the first.
        order, at = self.order, self.first_at.get(status, 0)
        while at < len(order) and order[at] not in ids:
            at += 1
        self.first_at[status] = at
        return (self.steps[sid] for sid in itertools.islice(order, at, None) if sid in ids)

    @classmethod
    def build(cls, parsed: Iterable[Step], halted: str | None = None) -> Plan:
        """The plan of these step files, checked as a whole. The steps are not changed: one
        that gains a problem here (a duplicate id, an unknown or cyclic dependency) is a copy."""
        by_id: dict[str, list[Step]] = {}
        for step in parsed:
            by_id.setdefault(step.id, []).append(step)
        steps: dict[str, Step] = {}
        invalid: list[Step] = []
        for step_id, copies in by_id.items():
            if len(copies) > 1:
                paths = ", ".join(sorted(s.path for s in copies))
                invalid += [_with_problem(copy, f"duplicate step id {step_id!r} ({paths})") for copy in copies]
            elif copies[0].problems:
                invalid.append(copies[0])
            else:
                steps[step_id] = copies[0]
        known = set(by_id)
        for step in list(steps.values()):
            if unknown := [d for d in step.depends_on if d not in known]:
                steps[step.id] = _with_problem(steps[step.id], f"unknown dependency: {', '.join(unknown)}")
            if step.id in step.depends_on:
                steps[step.id] = _with_problem(steps[step.id], "depends on itself")
        for cycle in _cycles(steps):
            for step_id in cycle:
                steps[step_id] = _with_problem(steps[step_id], f"dependency cycle: {' -> '.join(cycle + [cycle[0]])}")
        for step in list(steps.values()):
            if step.problems:
                invalid.append(steps.pop(step.id))
        invalid.sort(key=lambda s: s.path)
        return cls(steps=steps, invalid=invalid, halted=halted)

    @property
    def problems(self) -> list[str]:
        return [f"{s.path}: {p}" for s in self.invalid for p in s.problems]

    def unrunnable(self, has_harness: bool) -> list[str]:
        """Steps that would run with nothing to run: no `run:` argv and no [harness] command."""
        if has_harness:
            return []
        return [
            f"{s.path}: has no `run:` argv and runner.toml has no [harness] command "
            "(add `run: [...]` to the step (`runner add --run`), set [harness] command (runner init --agent NAME "
            "writes one), or give it `agent: self` (`runner add --agent self`) for an agent you run yourself: "
            "`runner work`)"
            for s in self.steps.values()
            if s.status in (Status.READY, Status.CLAIMED) and not s.get("run") and not s.self_serve
        ]

    def check(self, config: Config) -> list[str]:
        """Every problem of this plan under `config` (a runner.core.config.Config)."""
        return self.problems + self.unrunnable(bool(config.harness.command))

    def find(self, step_id: str) -> Step | None:
        if step_id in self.steps:
            return self.steps[step_id]
        return next((s for s in self.invalid if s.id == step_id), None)

    def derived_status(self, step: Step) -> str:
        if step.problems or step.id not in self.steps:
            return "invalid"
        if step.status != Status.READY:
            return step.status
        return self._ready_status(step, set())

    def _ready_status(self, step: Step, seen: set[str]) -> str:
        waiting = False
        for dep_id in step.depends_on:
            dep = self.steps.get(dep_id)
            if dep is None or dep.status == Status.FAILED:
                return "blocked"
            if dep.status == Status.READY and dep_id not in seen:
                seen.add(dep_id)
                if self._ready_status(dep, seen) == "blocked":
                    return "blocked"
            if dep.status != Status.DONE:
                waiting = True
        return "waiting" if waiting else Status.READY

    def touch_holders(self) -> list[Step]:
        """The claimed steps that declare `touches:` (what a ready step's globs are held against)."""
        return [step for step in self.with_status(Status.CLAIMED) if step.get("touches")]

    def held_back(self, step: Step, holders: list[Step] | None, by_agent: bool = False) -> str | None:
        """Why a ready step is not for this claimer now, or None: a step with `agent: self` is
        for an agent you run yourself, never a worker (`by_agent`: the claimer is such an agent);
        any step waits while a claimed one's `touches:` overlap its own (`holders`)."""
        if step.self_serve and not by_agent:
            return SELF_SERVE
        mine = step.get("touches")
        for other in (holders or ()) if mine else ():
            if other.id != step.id and (pair := overlapping(mine, other.get("touches"))):
                return f"its touches {pair[0]} overlap {pair[1]} of {other.id}, claimed by {other.assignee}"
        return None

    def deps_done(self, step: Step) -> bool:
        return dependencies_done(step, lambda d: self.steps[d].status if d in self.steps else None)

    def ready(self, now: datetime, tags: Iterable[str] | None = None, include_backoff: bool = False) -> list[Step]:
        """Steps a worker with `tags` may claim now, best first (priority, then id)."""
        return list(self.iter_ready(now, tags, include_backoff))

    def iter_ready(
        self,
        now: datetime,
        tags: Iterable[str] | None = None,
        include_backoff: bool = False,
        max_backoff: float | None = None,
    ) -> Iterator[Step]:
        """Claimable steps in claim order. A `not_before` further ahead than `max_backoff` was
        written by a host whose clock runs ahead of ours, and is not honoured."""
        worker_tags = set(tags or ())
        for step in self.with_status(Status.READY):
            if self.deps_done(step) and claimable(step, worker_tags, None if include_backoff else now, max_backoff):
                yield step


def lacking_tags(step: Step, tags: Iterable[str] | None) -> list[str]:
    """The tags `step` needs that a claimer with `tags` lacks, sorted: a step with tags goes only
    to a worker started with every one of them (`--tag`)."""
    return sorted(set(step.tags) - set(tags or ()))


def claimable(
    step: Step, tags: Iterable[str] | None, now: datetime | None = None, max_backoff: float | None = None
) -> bool:
    """May a claimer with `tags` take `step`, as far as the step itself says: it has every tag
    the step needs and, given `now`, the step's back-off after a failure is over (a `not_before`
    further ahead than `max_backoff` seconds was written by a host whose clock runs ahead of
    ours, and is not honoured). The step's status and what the plan around it holds back
    (dependencies, touches, agent: self, a paused account) are the plan's and the queue's."""
    if lacking_tags(step, tags):
        return False
    until = step.not_before
    return (
        now is None
        or until is None
        or until <= now
        or (max_backoff is not None and (until - now).total_seconds() > max_backoff)
    )


SELF_SERVE = (
    "for an agent you run yourself (agent: self: `runner work STEP --id ID` or the MCP tool claim takes it; "
    "workers leave it)"
)


def _with_problem(step: Step, problem: str) -> Step:
    found = step.copy()
    found.problems.append(problem)
    return found


def sort_key(step: Step) -> tuple[int, str]:
    return (-step.priority, step.id)


def _cycles(steps: dict[str, Step]) -> list[list[str]]:
    """Every dependency cycle among valid steps (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0

    for root in sorted(steps):
        if root in index:
            continue
        work = [(root, iter(steps[root].depends_on))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in steps:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(steps[child].depends_on)))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def dependencies_done(step: Step, status_of: Callable[[str], str | None]) -> bool:
    """The rule a claim needs (and the hook checks): every dependency is a sound step that is
    done. `status_of(id)` is its stored status, or None when there is no such sound step."""
    return all(status_of(dep) == Status.DONE for dep in step.depends_on)
