"""The server's check of every push (pre-receive): runner's protocol, enforced where the
data lives.

The queue branch is linear and every new commit on it (all of old..new, not a first-parent
walk; a merge commit is refused) is checked: a runner commit is decoded by the one codec
(malformed, non-canonical messages are refused), its event replayed through the same state
machine and the same file writer the clients use, and the files it changed compared byte
for byte; a person's commit (a plan edit) may not touch a runner-managed field. Commits are
UTF-8 (author, message, file names, no other `encoding`) and hold no gitlinks. Runner's
other refs are type-checked (a commit of the expected shape: never a blob or a tag object),
fast-forward only, never deleted but as allowed. Who may push what comes from [hooks] of
runner.toml as it was before the push (see runner.hooks.people). With the hook installed it
is also the best observer of leases there is: a takeover is judged by the server's own
clock against when the holder's claim or heartbeat last reached it (the reflogs).
Each refusal is one line; the first bad commit of a push stops the check.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Iterable

from runner.core.codec import CodecError, decode, decode_beat
from runner.core.config import Config, parse_config
from runner.core.errors import BadInput
from runner.core.events import allowed_paths, context_for, halt_file, notes_after, write_step_event
from runner.core.layout import (
    CONFIG_FILE,
    DEFAULT_QUEUE_BRANCH,
    EMPTY_TREE,
    HALT_FILE,
    HEARTBEAT_PREFIX,
    NOTES_FILE,
    STEPS_DIR,
    branch_ref,
    is_step_file,
    step_id_of,
)
from runner.core.ids import worker_id_problem
from runner.core.machine import Event, Kind, TransitionError
from runner.core.model import MANAGED_KEYS, Step, parse_duration
from runner.core.plan import Plan
from runner.core.stepfile import parse_step
from runner.hooks.people import Pushers
from runner.store import CommitInfo, StoreError
from runner.store.git import GitStore

ZERO = "0" * 40
CLAIM_KEYS = ("assignee", "claimed_at", "lease", "holder")


def queue_branch_from_env() -> str:
    return os.environ.get("RUNNER_QUEUE_BRANCH") or DEFAULT_QUEUE_BRANCH


def label(commit: CommitInfo) -> str:
    subject = commit.message.split("\n", 1)[0].strip()
    return f"{commit.id[:10]} ({subject[:69] + '...' if len(subject) > 72 else subject})"


class PushCheck:
    """Checks the ref updates of one push. Caches parsed step files across its commits."""

    def __init__(self, repo_path: str | Path, pusher: str | None = None, queue_branch: str | None = None, now: float | None = None):
        self.store = GitStore.receiving(repo_path)
        self.queue_ref = branch_ref(queue_branch or queue_branch_from_env())
        self.pusher_override = pusher
        # The server's own clock, never a pusher's: RUNNER_CLOCK_OFFSET in a local pusher's
        # environment reaches this process and must not move it.
        self.now = now if now is not None else time.time()
        self._steps: dict[tuple[str, str], Step] = {}
        self._configs: dict[bytes, Config] = {}
        self._indexes: dict[str | None, dict[str, list[str]]] = {}
        self._merges: set[str] = set()  # integration tips the push's checked queue events record

    # --- the refs of a push -------------------------------------------------------------

    def check(self, updates: Iterable[tuple[str, str, str]]) -> list[str]:
        """Reasons to refuse the push of `updates` [(old, new, ref)]; empty to accept."""
        updates = list(updates)
        before = self.store.ref(self.queue_ref)
        # Who may do what, and which names are protected, come from the queue as it was before
        # this push: a push cannot grant itself an identity or switch a protection off. The
        # names the push leaves behind are protected too (read only from a commit: anything
        # else pushed there is refused below).
        try:
            config = self._config(before, strict=True)
        except BadInput as exc:
            # Never fall back to defaults here: that would switch identities and protections off.
            return [f"{CONFIG_FILE} on {self.queue_ref.removeprefix('refs/heads/')} does not parse ({exc.problems[0]}), so nothing "
                    "can be judged: an admin fixes it with the hook off (uninstall-hooks --server, push the fix, install-hooks --server)"]
        self.pushers = Pushers.of(config.hooks, self.pusher_override)
        self.lease = config.leases.lease
        queue_after = next((new for old, new, ref in updates if ref == self.queue_ref), before)
        after = self._config(queue_after) if queue_after and self.store.object_type(queue_after) == "commit" else config
        integration = {branch_ref(config.queue.integration_branch), branch_ref(after.queue.integration_branch)}
        prefixes = {branch_ref(config.queue.step_branch_prefix), branch_ref(after.queue.step_branch_prefix)}
        problems: list[str] = []
        for old, new, ref in sorted(updates, key=lambda update: update[2] != self.queue_ref):  # the queue first
            if ref == self.queue_ref:
                found = self.check_queue(old, new)
            elif ref in integration:
                found = self.check_integration(old, new)
            elif ref.startswith(HEARTBEAT_PREFIX):
                found = self.check_heartbeat(old, new, ref)
            elif any(ref.startswith(prefix) for prefix in prefixes):
                found = [p for p in [self.pushers.unknown()] if p] or (self._must_be("a commit", new, "commit") if new != ZERO else [])
            elif ref.startswith("refs/runner/"):
                found = ["runner keeps no such ref (only refs/runner/heartbeats/<worker>)"]
            else:
                found = []  # branches and tags people keep on the remote are theirs
            problems += [f"{ref}: {problem}" for problem in found]
        return problems + self._merges_landed(updates, integration)

    def _merges_landed(self, updates: list[tuple[str, str, str]], integration: set[str]) -> list[str]:
        """A queue event that records a merge is published with that merge (one atomic push):
        never a step recorded done whose change the integration branch does not hold."""
        moved = {ref: new for old, new, ref in updates}
        tips = [moved[ref] if ref in moved else self.store.ref(ref) for ref in integration]
        return [f"{self.queue_ref}: records merge {merge[:10]}, which the integration branch does not hold after this push"
                for merge in sorted(self._merges) if not any(tip and tip != ZERO and self.store.is_ancestor(merge, tip) for tip in tips)]

    def _must_be(self, what: str, oid: str, kind: str) -> list[str]:
        found = self.store.object_type(oid)
        if found != kind:
            return [f"must point at {what}, not {'a ' + found if found else 'a missing object'} ({oid[:10]})"]
        return []

    def _fast_forward(self, old: str, new: str) -> list[str]:
        if old in (ZERO, new) or self.store.is_ancestor(old, new):
            return []
        return [f"not a fast-forward: {new[:10]} does not contain {old[:10]} (this ref is never rewritten)"]

    def check_integration(self, old: str, new: str) -> list[str]:
        if new == ZERO:
            return ["the integration branch may not be deleted"]
        if problems := self._must_be("a commit", new, "commit") or self._fast_forward(old, new):
            return problems
        if self.pushers.configured and not self.pushers.is_person() and new not in self._merges:
            # Else a worker key could merge its own unapproved work without any queue event.
            return [f"{self.pushers.who()} moves the integration branch only in the push whose queue event records "
                    f"that merge (a complete that needs no approval); people merge by hand"]
        return []

    def check_queue(self, old: str, new: str) -> list[str]:
        if new == ZERO:
            return ["the queue branch may not be deleted"]
        problems = self._must_be("a commit", new, "commit") or self._fast_forward(old, new)
        if problems:
            return problems
        for commit in self.store.commits_between(None if old == ZERO else old, new):
            if problems := [f"{label(commit)}: {p}" for p in self.check_commit(commit, first=old == ZERO)]:
                return problems  # the commits after it were written on a state that cannot be
        return []

    # --- heartbeats -------------------------------------------------------------------------

    def check_heartbeat(self, old: str, new: str, ref: str) -> list[str]:
        worker = ref[len(HEARTBEAT_PREFIX):]
        if new == ZERO:
            return self._heartbeat_deletion(worker, ref)
        if problem := worker_id_problem(worker):
            return [f"not a heartbeat ref: {problem}"]
        problems = self._must_be("a heartbeat commit", new, "commit") or self._fast_forward(old, new)
        if problems:
            return problems
        commit = self.store.commit(new)
        if problem := self._encoding_problem(new):
            return [problem]
        info = decode_beat(commit.message)
        if info is None or info.get("worker") != worker or commit.tree != EMPTY_TREE:
            problems.append(f"{new[:10]} is not a heartbeat of {worker} (runner writes an empty tree and a JSON body naming the worker)")
        if problem := self.pushers.may_act_as(worker):
            problems.append(problem)
        return problems

    def _heartbeat_deletion(self, worker: str, ref: str) -> list[str]:
        if self.pushers.configured:
            problem = None if self.pushers.is_person() else self.pushers.may_act_as(worker)
            return [f"only {worker} itself or a person may delete its heartbeat: {problem}"] if problem else []
        # Live: its last beat reached this server within the queue's lease (not the lease the
        # beat itself names, which its writer could make endless).
        beats = self.store.reflog(ref)
        if beats and self.now - beats[0][2] < self.lease:
            return [f"{worker} beat {self.now - beats[0][2]:.0f}s ago: a live worker's heartbeat may not be deleted"]
        return []

    # --- one commit of the queue ------------------------------------------------------------

    def _encoding_problem(self, oid: str) -> str | None:
        """Runner's commits are UTF-8 through and through: names, message and no other encoding."""
        raw = self.store.raw_commit(oid)
        headers = raw.split(b"\n\n", 1)[0]
        for line in headers.split(b"\n"):
            if line.startswith(b"encoding ") and line[9:].strip().lower().replace(b"-", b"") != b"utf8":
                return f"the commit declares encoding {line[9:49].decode('ascii', 'replace')!r}: runner's commits are UTF-8"
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            where = "message" if exc.start > len(headers) else "author or committer"
            return f"the commit's {where} is not UTF-8 (byte {exc.start}): runner's commits are UTF-8"
        return None

    def check_commit(self, commit: CommitInfo, first: bool) -> list[str]:
        parent = commit.parents[0] if commit.parents else None
        if len(commit.parents) > 1:
            return ["the queue branch is linear: a merge commit is refused (rebase onto the queue instead)"]
        if parent is None and not first:
            return ["a second root commit on the queue branch"]
        if problem := self._encoding_problem(commit.id):
            return [problem]
        changes = self.store.diff_trees(self.store.commit(parent).tree if parent else EMPTY_TREE, commit.tree)
        if names := [c.path for c in changes if not is_utf8(c.path)]:
            return [f"a file name is not UTF-8: {ascii(names[0])}"]
        if links := [c.path for c in changes if c.oid is not None and not c.link and self.store.entry_at(commit.id, c.path) is None]:
            return [f"a gitlink (submodule) has no place on the queue branch: {', '.join(links[:5])}"]
        try:
            decoded = decode(commit.message)
        except CodecError as exc:
            return [f"not a well-formed runner commit: {exc}"]
        event = decoded.event
        if event is not None and event.actor != commit.author:
            return [f"the author ({commit.author!r}) is not the actor the commit names ({event.actor!r})"]
        if event is not None and event.kind == Kind.INIT and parent is not None:
            return ["Runner-Event init belongs to the first commit of the queue only"]
        if event is None or event.kind in (Kind.EDIT, Kind.INIT):
            return self.check_edit(parent, commit, changes, event)
        if event.kind in (Kind.HALT, Kind.RESUME):
            return self.check_halt(event, parent, commit, changes)
        return self.check_step_event(event, decoded.status, parent, commit, changes)

    def check_halt(self, event: Event, parent: str | None, commit: CommitInfo, changes) -> list[str]:
        problems = [p for p in [self.pushers.may_record(event)] if p]
        if others := [c.path for c in changes if c.path != HALT_FILE]:
            problems.append(f"a {event.kind} changes plans/HALT only, not {', '.join(others)}")
        halted_before = parent is not None and self.store.file_at(parent, HALT_FILE) is not None
        if event.kind == Kind.RESUME and not halted_before:
            problems.append("a resume of a queue that is not halted")
        if self.store.file_at(commit.id, HALT_FILE) != halt_file(event):
            problems.append(f"plans/HALT is not what a {event.kind} writes")
        return problems

    def check_step_event(self, event: Event, status: str | None, parent: str | None, commit: CommitInfo, changes) -> list[str]:
        if parent is None or not event.step:
            return [f"a {event.kind} changes a step that exists: it needs a parent and a Runner-Step"]
        paths = self._index(parent).get(event.step, [])
        if len(paths) != 1:
            return [f"Runner-Step {event.step} names {'no' if not paths else 'more than one'} step file"]
        path = paths[0]
        before = self._parse(path, self._blob(parent, path))
        if before.problems:
            return [f"{path} was invalid before this commit and cannot change state"]
        problems = [p for p in [self.pushers.may_record(event)] if p]
        if outside := sorted(c.path for c in changes if c.path not in allowed_paths(event, path)):
            problems.append(f"a {event.kind} may change only {', '.join(sorted(allowed_paths(event, path)))}, not {', '.join(outside)}")
        config = self._config(parent)
        context = context_for(config, self._deps_done(parent, before), self.store.file_at(parent, HALT_FILE) is not None)
        try:
            written = write_step_event(before, event, context)
        except TransitionError as exc:
            return problems + [f"{event.kind} by {event.actor} refused by the state machine: {exc}"]
        if written.status != status:
            problems.append(f"Runner-Status {status} is not the status a {event.kind} leads to ({written.status})")
        if self.store.file_at(commit.id, path) != written.text.encode("utf-8"):
            problems.append(f"{path} is not what a {event.kind} by {event.actor} writes")
        if event.notes and self.store.file_at(commit.id, NOTES_FILE) != notes_after(self.store.file_at(parent, NOTES_FILE), event):
            problems.append("plans/NOTES.md is not the notes file with the step's notes appended")
        if event.kind == Kind.TAKEOVER and (problem := self._live_holder(before, event, path, config.leases.lease)):
            problems.append(problem)
        if not problems and (merge := (event.result or {}).get("merge")):
            self._merges.add(str(merge))
        return problems

    def _live_holder(self, step: Step, event: Event, path: str, default_lease: float) -> str | None:
        """Refuse a takeover of a holder whose claim or heartbeat for this attempt reached this
        server within its lease, by this server's clock: the reflogs (core.logAllRefUpdates,
        set by install-hooks) say when each update arrived. A worker may always take over its
        own claim (an earlier tick of it that could not record)."""
        holder = step.assignee or ""
        if event.actor == holder or (self.pushers.configured and not self.pushers.is_person() and self.pushers.may_act_as(holder) is None):
            return None
        try:
            lease = parse_duration(step.meta.get("lease")) if step.meta.get("lease") else default_lease
        except ValueError:
            lease = default_lease
        since = self.now - lease
        for what, when in (("heartbeat", self._last_beat(step, holder, since)), ("claim", self._claim_arrived(step, path, since))):
            if when is not None:
                return (f"{holder}'s {what} for {step.id} attempt {step.attempt} reached this server {self.now - when:.0f}s ago, "
                        f"within its lease ({lease:.0f}s): a live claim is not taken over")
        return None

    def _last_beat(self, step: Step, holder: str, since: float) -> float | None:
        """When the holder's latest heartbeat for this attempt arrived, if after `since`."""
        for _, new, when in self.store.reflog(HEARTBEAT_PREFIX + holder):  # newest first
            if when < since:
                return None
            if new == ZERO or self.store.object_type(new) != "commit":
                continue
            info = decode_beat(self.store.commit(new).message) or {}
            if info.get("step") == step.id and info.get("attempt") == step.attempt:
                return when
        return None

    def _claim_arrived(self, step: Step, path: str, since: float) -> float | None:
        """When the queue update that brought this attempt's claim arrived, if after `since`."""
        for old, new, when in self.store.reflog(self.queue_ref):  # newest first
            if when < since:
                return None
            if self._attempt_at(new, path) == step.attempt and self._attempt_at(old, path) != step.attempt:
                return when
        return None

    def _attempt_at(self, commit: str, path: str) -> int | None:
        if commit == ZERO or self.store.object_type(commit) != "commit":
            return None
        entry = self.store.entry_at(commit, path)
        found = self._parse(path, entry.oid) if entry is not None and not entry.link else None
        return found.attempt if found is not None and not found.problems else None

    def check_edit(self, parent: str | None, commit: CommitInfo, changes, event: Event | None) -> list[str]:
        """A person's plan edit: titles, bodies, new steps, runner.toml; never a managed field."""
        problems = [p for p in [self.pushers.may_edit()] if p]
        if any(c.path == HALT_FILE for c in changes):
            problems.append("plans/HALT changes only with `runner halt` / `runner resume`")
        if any(c.path == CONFIG_FILE for c in changes):
            problems += self._config_problems(parent, commit.id)
        added = [c for c in changes if is_step_file(c.path) and c.oid is not None]
        deleted = {step_id_of(c.path): c for c in changes if is_step_file(c.path) and c.oid is None}
        sound = []
        for change in added:
            after = self._parse(change.path, change.oid, change.link)
            if after.problems:
                problems += [f"{change.path}: {p}" for p in after.problems]
                continue
            sound.append(change.path)
            origin = deleted.get(after.id)  # a step moved to another folder
            old_path = change.path if change.kind != "A" else (origin.path if origin else None)
            before = self._parse(old_path, self._blob(parent, old_path)) if old_path and parent else None
            if before is None or before.problems:
                problems += new_step_problems(after)
                continue
            if touched := [k for k in MANAGED_KEYS if before.meta.get(k) != after.meta.get(k)]:
                problems.append(f"{change.path}: changes runner-managed {', '.join(touched)} without a runner event"
                                " (use runner claim/complete/approve/retry...; people edit titles, bodies and other fields)")
        if sound:
            problems += self._plan_problems(commit.id, sound)
        if deleted:
            problems += self._dependents_problems(commit.id, set(deleted))
        return problems

    def _config_problems(self, parent: str | None, commit: str) -> list[str]:
        data = self.store.file_at(commit, CONFIG_FILE) or b""
        try:
            new = parse_config(data.decode("utf-8", errors="replace"))
        except BadInput as exc:
            return exc.problems
        old = self._config(parent)
        problems = []
        guarded = (old.hooks != new.hooks, old.queue.integration_branch != new.queue.integration_branch,
                   old.queue.step_branch_prefix != new.queue.step_branch_prefix)
        if any(guarded) and (problem := self.pushers.may_administer()):
            problems.append(problem)
        if old.harness.command and not new.harness.command:
            steps = [self._parse(p, self._blob(commit, p)) for paths in self._index(commit).values() for p in paths]
            problems += Plan.build(steps).unrunnable(False)
        return problems

    # --- the plan around a step -------------------------------------------------------------

    def _deps_done(self, parent: str, step: Step) -> bool:
        index = self._index(parent)
        for dep in step.depends_on:
            paths = index.get(dep, [])
            if len(paths) != 1:
                return False
            found = self._parse(paths[0], self._blob(parent, paths[0]))
            if found.problems or found.status != "done":
                return False
        return True

    def _plan_problems(self, commit: str, paths: list[str]) -> list[str]:
        """Plan.build problems of the given step files, from them, every file sharing their ids
        and their dependencies transitively: enough to find each of their problems."""
        index = self._index(commit)
        wanted, pending, seen, steps = set(paths), [step_id_of(p) for p in paths], set(), []
        while pending:
            step_id = pending.pop()
            if step_id in seen:
                continue
            seen.add(step_id)
            for path in index.get(step_id, []):
                step = self._parse(path, self._blob(commit, path)).copy()
                steps.append(step)
                if not step.problems:
                    pending += step.depends_on
        plan = Plan.build(steps)
        return [f"{s.path}: {p}" for s in plan.invalid if s.path in wanted for p in s.problems]

    def _dependents_problems(self, commit: str, deleted: set[str]) -> list[str]:
        index = self._index(commit)
        gone = {step_id for step_id in deleted if step_id not in index}  # not merely moved
        problems = []
        for paths in index.values() if gone else ():
            for path in paths:
                step = self._parse(path, self._blob(commit, path))
                if missing := sorted(set(step.depends_on) & gone) if not step.problems else []:
                    problems.append(f"deleting {', '.join(missing)} leaves {path} depending on a step that does not exist")
        return problems

    # --- cached reads -----------------------------------------------------------------------

    def _config(self, commit: str | None, strict: bool = False) -> Config:
        """runner.toml at a commit (the defaults where it does not parse, or BadInput if `strict`)."""
        data = (self.store.file_at(commit, CONFIG_FILE) if commit else None) or b""
        if data not in self._configs:
            try:
                self._configs[data] = parse_config(data.decode("utf-8", errors="replace"))
            except BadInput:
                if strict:
                    raise
                self._configs[data] = Config()
        return self._configs[data]

    def _index(self, commit: str) -> dict[str, list[str]]:
        """Step id -> paths of its step files at a commit (file names only: nothing parsed).
        Listed in full once per push; each commit after that is its parent's index with the
        step files it added or deleted, so a long push of a large plan costs what it changes."""
        tree = self.store.tree_id(commit, STEPS_DIR)
        if tree not in self._indexes:
            index = self._derived_index(commit, tree)
            if index is None:
                index = {}
                for entry in self.store.list_files(commit, STEPS_DIR):
                    if is_step_file(entry.path):
                        index.setdefault(step_id_of(entry.path), []).append(entry.path)
            if len(self._indexes) >= 4:  # commits are checked in order: only the last few are asked for again
                del self._indexes[next(iter(self._indexes))]
            self._indexes[tree] = index
        return self._indexes[tree]

    def _derived_index(self, commit: str, tree: str | None) -> dict[str, list[str]] | None:
        parents = self.store.commit(commit).parents
        parent_tree = self.store.tree_id(parents[0], STEPS_DIR) if parents else None
        base = self._indexes.get(parent_tree)
        if base is None or parent_tree is None or tree is None:
            return None
        index = dict(base)  # lists are replaced, never changed in place: the parent's index stays true
        for change in self.store.diff_trees(parent_tree, tree):
            path = f"{STEPS_DIR}/{change.path}"
            if change.kind in ("A", "D") and is_step_file(path):
                step_id = step_id_of(path)
                paths = [p for p in index.get(step_id, []) if p != path] + ([path] if change.kind == "A" else [])
                if paths:
                    index[step_id] = paths
                else:
                    index.pop(step_id, None)
        return index

    def _blob(self, commit: str, path: str) -> str:
        entry = self.store.entry_at(commit, path)
        if entry is None:
            raise StoreError(f"no file {path} at {commit[:10]}")
        return entry.oid + ("@link" if entry.link else "")

    def _parse(self, path: str, blob: str, link: bool = False) -> Step:
        link = link or blob.endswith("@link")
        blob = blob.removesuffix("@link")
        key = (path, blob)
        if key not in self._steps:
            if link:
                self._steps[key] = Step(step_id_of(path), path, {}, "", ["is a symlink (step files must be regular files)"])
            else:
                self._steps[key] = parse_step(path, self.store.read(blob))
        return self._steps[key]


def is_utf8(name: str) -> bool:
    """pygit2 hands a name that is not UTF-8 over with surrogate escapes."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def new_step_problems(step: Step) -> list[str]:
    """A step a person adds may carry any status `runner import` keeps (a plan half done
    elsewhere), and a claim another tool made, but never a claim of runner's own: only a
    runner claim starts a runner attempt."""
    if step.holder.get("incarnation"):
        return [f"{step.path}: a new step may not start with a runner claim; only runner claim starts an attempt"]
    return []


def parse_ref_updates(text: str) -> tuple[list[tuple[str, str, str]], list[str]]:
    """pre-receive's stdin: one `old new ref` line per ref. (updates, problems)"""
    updates, problems = [], []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 3:
            problems.append(f"cannot read ref update {line!r} (expected `old new ref`)")
        else:
            updates.append((parts[0], parts[1], parts[2]))
    return updates, problems


def run_pre_receive(stdin_text: str, repo_path: str | Path = ".", pusher: str | None = None) -> int:
    """The pre-receive hook: print every reason to refuse on stderr; 0 accepts the push."""
    updates, problems = parse_ref_updates(stdin_text)
    if not problems:
        try:
            problems = PushCheck(repo_path, pusher).check(updates)
        except Exception as exc:  # refuse rather than let an unchecked push through
            problems = [f"the runner hook failed ({type(exc).__name__}: {exc}); nothing was accepted"]
    for problem in problems:
        print(f"runner refused {problem}", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    """`python -m runner.hooks.server pre-receive|pre-commit`: what the installed hooks run,
    without the command line's start-up."""
    if argv == ["pre-receive"]:
        return run_pre_receive(sys.stdin.read(), ".")
    if argv == ["pre-commit"]:
        from runner.hooks.client import run_pre_commit

        return run_pre_commit(".")
    print("usage: python -m runner.hooks.server pre-receive|pre-commit", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
