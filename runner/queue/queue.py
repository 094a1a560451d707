"""The queue: read the plan at the branch tip, publish one transition per commit by compare-and-swap."""

from __future__ import annotations

import heapq
import json
import os
import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterable

from runner.core.config import DEFAULT_QUEUE_BRANCH, DEFAULT_TOML, Config, parse_config
from runner.store.git import EMPTY_TREE, HEARTBEAT_PREFIX, GitError, GitStore, Signer
from runner.queue.leases import Heartbeat, LeaseObserver, host_name, parse_heartbeat
from runner.core.ids import step_id_problem
from runner.core.model import BadInput, Step, format_duration, format_time, utc_now
from runner.core.plan import HALT_FILE, STEPS_DIR, Plan, sort_key
from runner.core.codec import commit_message, is_step_path, one_line, parse_trailers
from runner.core.machine import Event, transition
from runner.core.stepfile import parse_step, render_new_step, set_fields


PARSE_CACHE_VERSION = 1  # bump when parse_step's output changes
OUTCOME_TRIES = 200  # with backoff capped at 1 s: minutes of contention before an outcome gives up
PARSE_CACHE_MIN = 20  # new parses that make rewriting the on-disk cache worth it


class NotInitialised(GitError):
    pass


class Skip(Exception):
    """Nothing to do this time, with the reason (exit 0 for a tick, 3 for `claim`)."""


class LostRace(Exception):
    """Every compare-and-swap attempt lost to another writer."""


class Snapshot:
    """The queue at one commit. Heartbeats are read only when asked for (listing refs costs
    time in a repository with thousands of step branches)."""

    def __init__(self, tip: str, plan: Plan, config: Config, read_heartbeats: Callable[[], dict[str, Heartbeat]]):
        self.tip = tip
        self.plan = plan
        self.config = config
        self._read_heartbeats = read_heartbeats
        self._heartbeats: dict[str, Heartbeat] | None = None

    @property
    def heartbeats(self) -> dict[str, Heartbeat]:
        if self._heartbeats is None:
            self._heartbeats = self._read_heartbeats()
        return self._heartbeats


@dataclass
class Change:
    step_id: str
    event: str
    files: dict[str, bytes | None]
    message: str
    updates: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0


@dataclass
class Published:
    commit: str
    change: Change
    snapshot: Snapshot  # the snapshot the change was built on


class Queue:
    def __init__(self, store: GitStore, branch: str = DEFAULT_QUEUE_BRANCH, max_tries: int = 25):
        self.store = store
        self.branch = branch
        self.max_tries = max_tries
        self._steps: dict[str, Step] = {}  # blob id -> parsed step (parse each blob once)
        self._configs: dict[str, Config] = {}
        self._beats: dict[str, Heartbeat] = {}
        self.observer = LeaseObserver(store.runner_dir)
        self.races_lost = 0
        self.published: str | None = None  # the last commit this process published on the queue branch
        self._last: tuple[str | None, Plan] | None = None  # (plans/steps tree id, plan) of the last snapshot
        self._cache_path = store.runner_dir / "parsed-steps.json"
        self._cache_loaded = False
        self._parsed_new = 0

    # --- reading ---------------------------------------------------------------

    def fetch(self, extra_branches: Iterable[str] = ()) -> None:
        self.store.fetch([self.branch, *extra_branches], heartbeats=True)

    def snapshot(self, fetch: bool = True, also_fetch: Iterable[str] = ()) -> Snapshot:
        if fetch:
            self.fetch(also_fetch)
        tip = self.store.tip(self.branch)
        if self.published and tip != self.published and (tip is None or self.store.is_ancestor(tip, self.published)):
            tip = self.published  # our own push landed but the tracking ref could not be updated (busy)
        if tip is None:
            where = f"remote {self.store.remote}" if self.store.remote else "this repository"
            raise NotInitialised(f"no queue branch {self.branch!r} in {where}: run `runner init` first")
        return self.snapshot_at(tip)

    def snapshot_at(self, tip: str) -> Snapshot:
        halt = self.store.file_at(tip, HALT_FILE)
        halted = (halt.decode(errors="replace").strip() or "halted") if halt is not None else None
        steps_tree = self.store.tree_id(tip, STEPS_DIR)
        plan = self._updated_plan(steps_tree, halted) or self._built_plan(tip, halted)
        # Every transition leaves its old blob in the parse cache: a long-running worker rebuilds
        # (and so prunes) now and then instead of growing for ever.
        self._last = (steps_tree, plan) if len(self._steps) < 2 * len(plan.steps) + 1000 else None
        return Snapshot(tip=tip, plan=plan, config=self.config_at(tip), read_heartbeats=self.heartbeats)

    def _updated_plan(self, steps_tree: str | None, halted: str | None) -> Plan | None:
        """The last plan with only the changed step files re-read: a claim costs the same at
        10,000 steps as at 100 (transitions never change a plan's shape)."""
        if self._last is None or steps_tree is None or self._last[0] is None:
            return None
        last_tree, last_plan = self._last
        if last_tree == steps_tree:
            return Plan(steps=last_plan.steps, invalid=last_plan.invalid, halted=halted, order=last_plan.order, by_status=last_plan.by_status)
        changes = self.store.changed_blobs(last_tree, steps_tree)
        if changes is None or any(oid is None or kind != "M" or not is_step_path(path) for path, oid, kind in changes):
            return None
        return last_plan.updated([self._parse(f"{STEPS_DIR}/{path}", oid) for path, oid, _ in changes], halted)

    def _built_plan(self, tip: str, halted: str | None) -> Plan:
        self._load_parse_cache()
        entries = [(path, oid) for path, oid in self.store.tree_files(tip, STEPS_DIR) if is_step_path(path)]
        steps = [self._parse(path, oid) for path, oid in entries]
        if len(self._steps) > 2 * len(entries) + 1000:
            keep = {f"{path}\0{oid}" for path, oid in entries}
            self._steps = {key: step for key, step in self._steps.items() if key in keep}
        if self._parsed_new >= PARSE_CACHE_MIN:
            self._save_parse_cache([f"{path}\0{oid}" for path, oid in entries])
        return Plan.build(steps, halted=halted)

    def _load_parse_cache(self) -> None:
        """Parsed step files survive the process (keyed by path and blob id): a fresh `runner
        status` need not parse thousands of YAML frontmatters again."""
        if self._cache_loaded:
            return
        self._cache_loaded = True
        try:
            data = json.loads(self._cache_path.read_text())
        except (OSError, ValueError):
            return
        if data.get("version") != PARSE_CACHE_VERSION:
            return
        for key, (step_id, path, meta, text, problems) in data.get("steps", {}).items():
            self._steps.setdefault(key, Step(id=step_id, path=path, meta=meta, text=text, problems=problems))

    def _save_parse_cache(self, keys: list[str]) -> None:
        self._parsed_new = 0
        steps = {k: [s.id, s.path, s.meta, s.text, s.problems] for k in keys if (s := self._steps.get(k)) and len(s.text) < 65536}
        tmp = self._cache_path.with_suffix(f".{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps({"version": PARSE_CACHE_VERSION, "steps": steps}))
            os.replace(tmp, self._cache_path)
        except (OSError, TypeError, ValueError):
            tmp.unlink(missing_ok=True)  # a cache is an optimisation: never fail a command for it

    def _parse(self, path: str, oid: str) -> Step:
        key = f"{path}\0{oid}"
        cached = self._steps.get(key)
        if cached is None:
            self._parsed_new += 1
            if oid.endswith("@link"):
                stem = path.rsplit("/", 1)[-1].removesuffix(".md")
                cached = Step(id=stem, path=path, meta={}, text="", problems=["is a symlink (step files must be regular files)"])
            else:
                cached = parse_step(path, self.store.blob(oid))
            self._steps[key] = cached
        return Step(id=cached.id, path=cached.path, meta=cached.meta, text=cached.text, problems=list(cached.problems))

    def config_at(self, tip: str) -> Config:
        data = self.store.file_at(tip, "runner.toml")
        key = data.decode(errors="replace") if data is not None else ""
        if key not in self._configs:
            self._configs[key] = parse_config(key)
        return self._configs[key]

    def heartbeats(self) -> dict[str, Heartbeat]:
        beats = {}
        for worker, commit in self.store.refs_under(self.store.heartbeat_refs_prefix()).items():
            beat = self._beats.get(commit)
            if beat is None:
                if len(self._beats) > 10_000:
                    self._beats.clear()
                beat = parse_heartbeat(worker, commit, self.store.commit(commit).message)
                self._beats[commit] = beat
            beats[worker] = beat
        return beats

    # --- publishing --------------------------------------------------------------

    def publish(
        self, build: Callable[[Snapshot], Change], signer: Signer, snapshot: Snapshot | None = None, max_tries: int | None = None
    ) -> Published:
        """Build a change on the tip and compare-and-swap it in; rebuild on the new tip after a lost race."""
        snap = snapshot or self.snapshot()
        tries = max_tries or self.max_tries
        for attempt in range(tries):
            change = build(snap)
            commit = self.store.make_commit([snap.tip], change.files, change.message, signer)
            if self.store.publish(self.branch, commit, snap.tip):
                self.published = commit
                return Published(commit=commit, change=change, snapshot=snap)
            self.races_lost += 1
            time.sleep(_backoff(attempt, remote=bool(self.store.remote)))
            snap = self.snapshot()
        raise LostRace(f"lost {tries} compare-and-swap races in a row on {self.branch}; giving up this time")

    def transition_change(
        self,
        snap: Snapshot,
        step_id: str,
        event: Event,
        actor: str,
        now: datetime | None = None,
        extra_files: dict[str, bytes | None] | None = None,
        edit_text: Callable[[str], str] | None = None,
    ) -> Change:
        step = snap.plan.find(step_id)
        if step is None:
            raise BadInput(f"no step {step_id!r} on {self.branch} (see `runner status`)")
        if not step.valid:
            raise BadInput(f"{step.path} is invalid and cannot change state: {'; '.join(step.problems)}")
        event = _with_plan_context(event, snap, step)
        updates = transition(step.meta, event, actor, now or utc_now(), step_id)
        text = set_fields(step.text, updates)
        if edit_text:
            text = edit_text(text)
        attempt = int(updates.get("attempt", step.attempt) or 0)
        if event.kind == "takeover":
            attempt = int(updates.get("attempt") or step.attempt)
        subject = f"{event.kind} {step_id} (attempt {attempt}) by {actor}"
        if event.kind in ("approve", "reject", "retry", "abort"):
            subject = f"{event.kind} {step_id} by {actor}"
        trailers = {
            "Event": event.kind,
            "Step": step_id,
            "Worker": actor,
            "Attempt": attempt,
            "Replaces": event.attempt if event.kind == "takeover" else None,
            "Incarnation": event.incarnation,
            "Status": updates.get("status"),
            "Reason": one_line(event.reason) if event.reason else None,
        }
        files = {step.path: text.encode("utf-8"), **(extra_files or {})}
        return Change(step_id, event.kind, files, commit_message(subject, trailers), updates, attempt)

    def apply_event(self, step_id: str, event: Event, actor: str, **kwargs) -> Published:
        signer = signer_for(actor)
        # An outcome costs work to redo: keep trying far longer than a claim would.
        return self.publish(lambda snap: self.transition_change(snap, step_id, event, actor, **kwargs), signer, max_tries=OUTCOME_TRIES)

    # --- claiming ----------------------------------------------------------------

    def claim(
        self,
        worker: str,
        incarnation: str,
        holder: dict[str, Any],
        tags: Iterable[str] = (),
        step_id: str | None = None,
        snapshot: Snapshot | None = None,
    ) -> Published:
        """Claim the best step this worker may take (or `step_id`). Raises Skip when there is none."""
        tags = list(tags)

        def build(snap: Snapshot) -> Change:
            if snap.plan.halted:
                raise Skip(f"queue halted: {snap.plan.halted}")
            lease = format_duration(snap.config.lease)
            now = utc_now()
            for step, kind, reason in self.candidates(snap, worker, incarnation, tags, now):
                if step_id and step.id != step_id:
                    continue
                event = Event(
                    kind=kind,
                    attempt=step.attempt if kind == "takeover" else None,
                    incarnation=incarnation,
                    holder=holder,
                    lease=str(step.meta.get("lease") or lease) if kind == "takeover" else lease,
                    reason=reason,
                    default_max_attempts=snap.config.max_attempts,
                )
                return self.transition_change(snap, step.id, event, worker, now)
            raise Skip(self.why_nothing(snap, tags, step_id))

        return self.publish(build, signer_for(worker), snapshot)

    def candidates(self, snap: Snapshot, worker: str, incarnation: str, tags: list[str], now: datetime):
        """(step, 'claim' | 'takeover', reason) best first."""
        plan = snap.plan
        # Observe every claim (the observation file is shared by all workers on this host),
        # then keep those this worker may take over.
        claimed = list(plan.with_status("claimed"))
        expired = self.observer.expired_claims(claimed, snap.heartbeats, snap.config.lease) if claimed else {}
        for step in claimed:
            if step.holder.get("incarnation") == incarnation:
                # A worker claims only between steps: a claim of its own incarnation now was dropped
                # by an earlier tick that could not record (the remote was down, say).
                expired[step.id] = "abandoned by an earlier tick of this worker"
        takeovers = sorted(
            (
                (plan.steps[step_id], "takeover", reason)
                for step_id, reason in expired.items()
                if not plan.steps[step_id].tags or set(plan.steps[step_id].tags) <= set(tags)
            ),
            key=lambda item: sort_key(item[0]),
        )
        max_backoff = snap.config.backoff_cap * 1.25 + 60  # beyond any backoff runner writes, plus jitter
        ready = ((step, "claim", None) for step in plan.iter_ready(now, tags, max_backoff=max_backoff))
        return heapq.merge(ready, takeovers, key=lambda item: sort_key(item[0]))  # lazy: a claim needs the first

    def why_nothing(self, snap: Snapshot, tags: list[str], step_id: str | None) -> str:
        plan = snap.plan
        if step_id:
            step = plan.find(step_id)
            if step is None:
                return f"no step {step_id!r}"
            status = plan.derived_status(step)
            if status == "ready" and step.not_before and step.not_before > utc_now():
                return f"{step_id} backs off until {format_time(step.not_before)}"
            if status == "ready" and step.tags and not set(step.tags) <= set(tags):
                return f"{step_id} needs tags {step.tags}"
            return f"{step_id} is {status}"
        counts: dict[str, int] = {}
        for step in [*plan.steps.values(), *plan.invalid]:
            status = plan.derived_status(step)
            counts[status] = counts.get(status, 0) + 1
        backing_off = [s for s in plan.ready(utc_now(), tags, include_backoff=True) if s.not_before and s.not_before > utc_now()]
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no steps"
        if backing_off:
            summary += f"; {len(backing_off)} backing off"
        return f"nothing ready ({summary})"

    # --- heartbeats ------------------------------------------------------------

    def beat(self, worker: str, info: dict[str, Any]) -> str:
        """Move this worker's heartbeat ref: a commit chained on its previous beat."""
        ref = HEARTBEAT_PREFIX + worker
        signer = signer_for(worker)
        body = json.dumps({"worker": worker, "host": host_name(), "at": format_time(utc_now()), **info}, sort_keys=True)
        for _ in range(3):
            previous = self.store.ref_target(self.store.heartbeat_refs_prefix() + worker)
            commit = self.store.make_commit(
                [previous] if previous else [], {}, f"heartbeat {worker}\n\n{body}\n", signer, base_tree=EMPTY_TREE
            )
            if self.store.publish_ref(ref, commit, previous):
                return commit
            self.store.fetch([], heartbeats=True)
        raise LostRace(f"could not move the heartbeat ref of {worker}")

    # --- plan editing ---------------------------------------------------------------

    def init(self, actor: str) -> tuple[bool, str]:
        """Create the queue branch (and the integration branch). (created?, message)"""
        if self.store.remote:
            self.store.fetch([self.branch])
        tip = self.store.tip(self.branch)
        messages = []
        if tip is None:
            files = {
                "runner.toml": DEFAULT_TOML.encode(),
                "plans/root.md": b"# Plan\n\nWhat this plan is for, and what every step should know.\n",
                "plans/NOTES.md": b"# Notes\n\nDurable facts learned while running the plan.\n",
            }
            commit = self.store.make_commit([], files, commit_message("init runner queue", {"Event": "init"}), signer_for(actor))
            if not self.store.publish(self.branch, commit, None):
                raise LostRace("another process initialised the queue at the same time")
            messages.append(f"created queue branch {self.branch}")
        else:
            messages.append(f"queue branch {self.branch} already exists")
        config = self.config_at(self.store.tip(self.branch))
        messages.append(self.ensure_integration(config, actor))
        return tip is None, "; ".join(messages)

    def ensure_integration(self, config: Config, actor: str) -> str:
        branch = config.integration_branch
        if self.store.remote:
            self.store.fetch([branch])
        if self.store.tip(branch):
            return f"integration branch {branch} exists"
        head = None
        try:
            if not self.store.repo.head_is_unborn:
                head = str(self.store.repo.head.target)
        except GitError:
            head = None
        if head is None:
            head = self.store.make_commit([], {}, "start of integration\n", signer_for(actor), base_tree=EMPTY_TREE)
        self.store.publish(branch, head, None)
        return f"created integration branch {branch} at {head[:10]}"

    def add_files(self, files: dict[str, bytes | None], subject: str, actor: str, check: Callable[[Snapshot], None] | None = None) -> Published:
        """A person's plan edit (new steps, an import): validated against the plan it lands on."""

        def build(snap: Snapshot) -> Change:
            if check:
                check(snap)
            return Change(step_id="", event="edit", files=files, message=subject + "\n")

        return self.publish(build, signer_for(actor))

    def set_halt(self, reason: str | None, actor: str) -> Published:
        def build(snap: Snapshot) -> Change:
            if reason is None and not snap.plan.halted:
                raise Skip("the queue is not halted")
            kind = "halt" if reason is not None else "resume"
            content = (reason.strip() + "\n").encode() if reason is not None else None
            subject = f"{kind} queue by {actor}" + (f": {one_line(reason)}" if reason else "")
            return Change("", kind, {HALT_FILE: content}, commit_message(subject, {"Event": kind, "Worker": actor, "Reason": one_line(reason) if reason else None}))

        return self.publish(build, signer_for(actor))

    # --- audit ---------------------------------------------------------------------

    def log(self, step_id: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        tip = self.snapshot().tip
        entries = []
        for commit in self.store.walk(tip):
            trailers = parse_trailers(commit.message)
            if step_id and trailers.get("Step") != step_id and not _touches_step(self.store, commit, step_id):
                continue
            entries.append(
                {
                    "commit": str(commit.id),
                    "time": format_time(datetime.fromtimestamp(commit.commit_time).astimezone()),
                    "author": commit.author.name,
                    "event": trailers.get("Event", "edit"),
                    "step": trailers.get("Step"),
                    "worker": trailers.get("Worker"),
                    "attempt": int(trailers["Attempt"]) if trailers.get("Attempt", "").isdigit() else None,
                    "status": trailers.get("Status"),
                    "subject": commit.message.split("\n", 1)[0],
                }
            )
            if limit and len(entries) >= limit:
                break
        return entries


def _touches_step(store: GitStore, commit, step_id: str) -> bool:
    if not commit.parents:
        return False
    diff = commit.tree.diff_to_tree(commit.parents[0].tree)
    return any(
        (d.delta.new_file.path or "").endswith(f"/{step_id}.md") or (d.delta.old_file.path or "").endswith(f"/{step_id}.md")
        for d in diff
    )


def _with_plan_context(event: Event, snap: Snapshot, step: Step) -> Event:
    from dataclasses import replace

    return replace(
        event,
        deps_done=snap.plan.deps_done(step),
        halted=bool(snap.plan.halted),
        default_max_attempts=snap.config.max_attempts,
    )


def _backoff(attempt: int, remote: bool) -> float:
    """Full-jitter exponential backoff for a lost compare-and-swap."""
    base = 0.05 if remote else 0.005
    return random.uniform(0, min(1.0, base * (2**attempt)))


def retry_delay(config: Config, attempt: int) -> float:
    """Delay before a failed attempt may run again: exponential from config.backoff, +-20 % jitter."""
    delay = min(config.backoff_cap, config.backoff * (2 ** max(attempt - 1, 0)))
    return delay * random.uniform(0.8, 1.2)


def retry_at(config: Config, attempt: int) -> datetime:
    return utc_now() + timedelta(seconds=retry_delay(config, attempt))


def signer_for(actor: str) -> Signer:
    return Signer(name=actor, email=f"{actor}@{host_name()}".replace(" ", "-"))


def new_step_file(step_id: str, title: str, fields: dict[str, Any], body: str) -> tuple[str, bytes]:
    if problem := step_id_problem(step_id):
        raise BadInput(problem)
    return f"{STEPS_DIR}/{step_id}.md", render_new_step(step_id, title, fields, body).encode()


def open_queue(repo: str | Path = ".", remote: str | None = "auto", branch: str = DEFAULT_QUEUE_BRANCH) -> Queue:
    return Queue(GitStore(repo, remote=remote), branch=branch)
