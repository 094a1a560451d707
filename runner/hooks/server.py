"""Git hooks: the server's check of every push to the queue, the client's check of
plan files, and installing both without losing a hook that was there before.

The server hook (pre-receive) replays each pushed queue commit through the state
machine the workers use: it rebuilds the event from the commit's Runner-*
trailers and the step's new fields, applies `transition` to the step as it was
in the parent commit, and accepts the commit only when the result is exactly
what the commit wrote. Only the step files a commit changes are parsed (plus the
dependencies of a claimed step), so the check costs little on large plans.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import pygit2

from runner.core.config import DEFAULT_QUEUE_BRANCH, Config, parse_config
from runner.core.model import MANAGED_KEYS, BadInput, Step, parse_time
from runner.core.plan import HALT_FILE, STEPS_DIR, Plan
from runner.core.machine import EVENTS, HOLDER_EVENTS, Event, TransitionError, apply, transition
from runner.core.codec import handoff_path, is_step_file, one_line, parse_trailers, step_id_of
from runner.core.stepfile import body_of, checklist, parse_step

ZERO = "0" * 40
PERSON_EVENTS = ("approve", "reject", "retry", "halt", "resume")
HANDOFF_EVENTS = ("complete", "fail", "release", "deviation")
# A step a person adds may carry any status `runner import` keeps (a plan half
# done elsewhere), but never a claim: only `runner claim` starts an attempt.
CLAIM_KEYS = ("assignee", "claimed_at", "lease", "holder")
# Stands for the free-text reason an event carried: the hook cannot know it, so
# it matches whatever text the commit wrote in its place (see _match_reason).
REASON = "\x00reason\x00"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def queue_branch_from_env() -> str:
    return os.environ.get("RUNNER_QUEUE_BRANCH") or DEFAULT_QUEUE_BRANCH


# --- who may push what ([hooks] in runner.toml) ---------------------------------


@dataclass
class HookRules:
    """`[hooks] pusher_env`, `admins` and `[hooks.identities]` (pusher -> worker ids)."""

    pusher_env: str | None = None
    identities: dict[str, list[str]] | None = None
    admins: list[str] = field(default_factory=list)

    @classmethod
    def from_toml(cls, data: bytes | None) -> "HookRules":
        table = hooks_table(data)
        if not isinstance(table, dict):
            return cls()
        identities = table.get("identities")
        if isinstance(identities, dict):
            identities = {str(k): [str(w) for w in (v if isinstance(v, list) else [v])] for k, v in identities.items()}
        else:
            identities = None
        admins = table.get("admins") or []
        return cls(
            pusher_env=str(table["pusher_env"]) if table.get("pusher_env") else None,
            identities=identities,
            admins=[str(a) for a in admins] if isinstance(admins, list) else [str(admins)],
        )


def hooks_table(data: bytes | None) -> Any:
    """The [hooks] table of a runner.toml, or the text itself when it does not parse."""
    if data is None:
        return None
    try:
        return tomllib.loads(data.decode("utf-8")).get("hooks")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return data


# --- reading the repository ------------------------------------------------------


def open_repository(path: str | Path) -> pygit2.Repository:
    repo = pygit2.Repository(str(path))
    # During pre-receive the pushed objects sit in a quarantine directory that
    # git names in the environment; libgit2 does not read these variables itself.
    directories = [os.environ.get("GIT_OBJECT_DIRECTORY", "")]
    directories += os.environ.get("GIT_ALTERNATE_OBJECT_DIRECTORIES", "").split(os.pathsep)
    for directory in directories:
        if directory and os.path.isdir(directory):
            repo.odb.add_disk_alternate(os.path.abspath(directory))
    return repo


@dataclass(frozen=True)
class FileChange:
    path: str
    old: str | None  # blob id before, None when added
    new: str | None  # blob id after, None when deleted
    new_is_link: bool = False


def changed_files(repo: pygit2.Repository, parent: pygit2.Commit | None, commit: pygit2.Commit) -> list[FileChange]:
    if parent is None:
        diff = commit.tree.diff_to_tree(swap=True)
    else:
        diff = repo.diff(parent.tree, commit.tree)
    changes = []
    for delta in diff.deltas:
        old = None if delta.status_char() == "A" else str(delta.old_file.id)
        new = None if delta.status_char() == "D" else str(delta.new_file.id)
        changes.append(FileChange(delta.new_file.path or delta.old_file.path, old, new, delta.new_file.mode == pygit2.GIT_FILEMODE_LINK))
    return changes


def commit_label(commit: pygit2.Commit) -> str:
    subject = commit.message.split("\n", 1)[0].strip()
    if len(subject) > 72:
        subject = subject[:69] + "..."
    return f"{str(commit.id)[:10]} ({subject})"


# --- the server check --------------------------------------------------------------


class PushCheck:
    """Checks the ref updates of one push. Caches parsed blobs across its commits."""

    def __init__(self, repo_path: str | Path, pusher: str | None = None, queue_branch: str | None = None):
        self.repo = open_repository(repo_path)
        self.queue_ref = "refs/heads/" + (queue_branch or queue_branch_from_env())
        self.pusher_override = pusher
        self._steps: dict[tuple[str, str], Step] = {}
        self._configs: dict[str, Config] = {}
        self._step_index: dict[str, dict[str, list[str]]] = {}
        self.rules = HookRules()
        self.pusher: str | None = pusher

    # -- refs --

    def check(self, updates: Iterable[tuple[str, str, str]]) -> list[str]:
        """Reasons to refuse the push of `updates` [(old, new, ref)]; empty to accept."""
        updates = list(updates)
        current_queue = self._ref_target(self.queue_ref)
        queue_new = next((new for old, new, ref in updates if ref == self.queue_ref), None)
        queue_tip = queue_new if queue_new not in (None, ZERO) else current_queue
        # Who may act as whom is taken from the queue as it was before this push:
        # a push must not be able to grant itself the identities it uses.
        self.rules = HookRules.from_toml(self._file(current_queue or queue_tip, "runner.toml"))
        if self.rules.pusher_env and self.pusher_override is None:
            self.pusher = os.environ.get(self.rules.pusher_env)
        integration_ref = "refs/heads/" + self._config(queue_tip).integration_branch
        problems: list[str] = []
        for old, new, ref in updates:
            if ref == self.queue_ref:
                found = self.check_queue(old, new)
            elif ref == integration_ref:
                found = self._fast_forward_problems(old, new, may_delete=False)
            elif ref.startswith("refs/runner/heartbeats/"):
                found = self.check_heartbeat(old, new, ref)
            else:
                found = []  # step branches and anything else a person keeps on the remote
            problems += [f"{ref}: {problem}" for problem in found]
        return problems

    def _fast_forward_problems(self, old: str, new: str, may_delete: bool) -> list[str]:
        if new == ZERO:
            return [] if may_delete else ["this branch may not be deleted"]
        if old == ZERO or old == new:
            return []
        try:
            if self.repo.descendant_of(new, old):
                return []
        except (KeyError, ValueError, pygit2.GitError):
            pass
        return [f"not a fast-forward: {new[:10]} does not contain {old[:10]} (this ref is never rewritten)"]

    def check_heartbeat(self, old: str, new: str, ref: str) -> list[str]:
        problems = self._fast_forward_problems(old, new, may_delete=True)
        worker = ref.rsplit("/", 1)[-1]
        if new != ZERO and (problem := self._identity_problem("heartbeat", worker)):
            problems.append(problem)
        return problems

    def check_queue(self, old: str, new: str) -> list[str]:
        problems = self._fast_forward_problems(old, new, may_delete=False)
        if problems:
            return problems
        for commit in self._new_commits(old, new):
            problems += [f"{commit_label(commit)}: {problem}" for problem in self.check_commit(commit)]
        return problems

    def _new_commits(self, old: str, new: str) -> list[pygit2.Commit]:
        """The first-parent chain from `old` (exclusive) to `new`, oldest first."""
        commits = []
        commit = self.repo[new]
        while str(commit.id) != old:
            commits.append(commit)
            if not commit.parents:
                break
            commit = commit.parents[0]
        return commits[::-1]

    # -- one commit --

    def check_commit(self, commit: pygit2.Commit) -> list[str]:
        parent = commit.parents[0] if commit.parents else None
        trailers = parse_trailers(commit.message)
        kind = trailers.get("Event")
        changes = changed_files(self.repo, parent, commit)
        if kind is None or kind == "init":
            problems = self.check_edit(parent, commit, changes)
            if kind == "init" and parent is not None:
                problems.insert(0, "Runner-Event init belongs to the first commit of the queue only")
            return problems
        if kind in ("halt", "resume"):
            return self.check_halt(kind, parent, commit, changes, trailers)
        if kind in EVENTS:
            return self.check_transition(kind, parent, commit, changes, trailers)
        return [f"unknown Runner-Event {kind!r}"]

    def check_edit(self, parent: pygit2.Commit | None, commit: pygit2.Commit, changes: list[FileChange]) -> list[str]:
        """A person's plan edit: any title, body or new step, but no runner-managed field."""
        problems = []
        if problem := self._identity_problem("edit", None):
            problems.append(problem)
        if any(change.path == HALT_FILE for change in changes):
            problems.append("plans/HALT changes only with `runner halt` / `runner resume` (Runner-Event halt or resume)")
        if any(change.path == "runner.toml" for change in changes):
            problems += self._config_problems(parent, commit)
        step_changes = [c for c in changes if is_step_file(c.path) and c.new is not None]
        deleted = {step_id_of(c.path): c for c in changes if is_step_file(c.path) and c.new is None}
        sound = []
        for change in step_changes:
            after = self._parse_change(change)
            if after.problems:
                problems += [f"{change.path}: {p}" for p in after.problems]
                continue
            sound.append(change.path)
            origin = change if change.old else deleted.get(after.id)  # a step moved to another folder
            before = self._parse(origin.path, origin.old) if origin else None
            if before is None or before.problems:
                problems += new_step_problems(after)
                continue
            touched = [k for k in MANAGED_KEYS if before.meta.get(k) != after.meta.get(k)]
            if touched:
                problems.append(
                    f"{change.path}: changes runner-managed {', '.join(touched)} without a Runner-Event trailer"
                    " (use runner claim/complete/approve/retry...; people edit titles, bodies and other fields)"
                )
        if sound:
            problems += self._plan_problems(commit, sound)
        if deleted:
            problems += self._dependents_problems(commit, set(deleted))
        return problems

    def check_halt(self, kind: str, parent, commit, changes: list[FileChange], trailers: dict[str, str]) -> list[str]:
        problems = []
        others = [c.path for c in changes if c.path != HALT_FILE]
        if others:
            problems.append(f"a {kind} commit changes plans/HALT only, not {', '.join(others)}")
        halted_before = parent is not None and self._file(str(parent.id), HALT_FILE) is not None
        halted_after = self._file(str(commit.id), HALT_FILE) is not None
        if kind == "halt" and not halted_after:
            problems.append("a halt commit must write plans/HALT")
        if kind == "resume" and (halted_after or not halted_before):
            problems.append("a resume commit must remove plans/HALT")
        if problem := self._identity_problem(kind, trailers.get("Worker")):
            problems.append(problem)
        return problems

    def check_transition(self, kind: str, parent, commit, changes: list[FileChange], trailers: dict[str, str]) -> list[str]:
        """A step event: exactly one allowed transition of one step, described truly by its trailers."""
        step_id, actor = trailers.get("Step"), trailers.get("Worker")
        if parent is None:
            return [f"a {kind} commit needs a parent: it changes a step that exists"]
        if not step_id or not actor:
            return [f"Runner-Event {kind} needs Runner-Step and Runner-Worker trailers"]
        step_changes = [c for c in changes if is_step_file(c.path)]
        if len(step_changes) > 1:
            ids = ", ".join(sorted({step_id_of(c.path) for c in step_changes}))
            return [f"changes {len(step_changes)} step files ({ids}): one commit records one transition of one step"]
        problems = []
        allowed = {handoff_path(step_id)} if kind in HANDOFF_EVENTS else set()
        others = [c.path for c in changes if not is_step_file(c.path) and c.path not in allowed]
        if others:
            problems.append(f"a {kind} commit may change only {step_id}'s step file" + (" and handoff" if allowed else "") + f", not {', '.join(others)}")
        if step_changes:
            change = step_changes[0]
            if step_id_of(change.path) != step_id:
                return problems + [f"Runner-Step {step_id} does not match the step file it changes ({change.path})"]
            if change.old is None or change.new is None:
                return problems + [f"a {kind} commit may not add or delete a step file ({change.path})"]
            before, after = self._parse(change.path, change.old), self._parse_change(change)
        else:
            path = self._find_step(parent, step_id)
            if path is None:
                return problems + [f"Runner-Step {step_id} names no step file"]
            blob = str(parent.tree[path].id)
            before = after = self._parse(path, blob)
        if after.problems:
            return problems + [f"{after.path}: {p}" for p in after.problems]
        if before.problems:
            return problems + [f"{before.path} was invalid before this commit and cannot change state"]
        if problem := self._identity_problem(kind, actor):
            problems.append(problem)
        problems += trailer_problems(kind, trailers, before, after)
        problems += unchanged_content_problems(kind, before, after)
        problems += self._state_machine_problems(kind, actor, trailers, parent, before, after)
        return problems

    def _state_machine_problems(self, kind: str, actor: str, trailers, parent, before: Step, after: Step) -> list[str]:
        now = parse_time(after.meta.get("last_updated")) or EPOCH
        context = dict(
            deps_done=self._deps_done(parent, before) if kind == "claim" else True,
            halted=self._file(str(parent.id), HALT_FILE) is not None,
            default_max_attempts=self._config(str(parent.id)).max_attempts,
        )
        # Whether a failure or rejection was permanent is not written anywhere: try both.
        candidates = (False, True) if kind in ("fail", "reject") else (False,)
        found: list[str] | None = None
        for permanent in candidates:
            event = event_from_commit(kind, trailers, after, permanent, **context)
            try:
                updates = transition(before.meta, event, actor, now, before.id)
            except TransitionError as exc:
                return [f"{kind} by {actor} refused by the state machine: {exc}"]
            expected = apply(before.meta, updates)
            mismatches, reason = managed_mismatches(expected, after.meta, kind, actor)
            if not mismatches:
                written = trailers.get("Reason")
                if written and reason is not None and one_line(reason) != written:
                    return [f"Runner-Reason {written!r} does not match the reason written in last_error"]
                return []
            if found is None or expected.get("status") == after.meta.get("status"):
                found = mismatches
        return found or []

    # -- plan context --

    def _deps_done(self, parent: pygit2.Commit, step: Step) -> bool:
        """Every dependency is one valid step file that is done (as Plan.deps_done, parsing only those files)."""
        index = self._index(parent)
        for dep in step.depends_on:
            paths = index.get(dep, [])
            if len(paths) != 1:
                return False
            dep_step = self._parse(paths[0], str(parent.tree[paths[0]].id))
            if dep_step.problems or dep_step.status != "done":
                return False
        return True

    def _plan_problems(self, commit: pygit2.Commit, paths: list[str]) -> list[str]:
        """Plan.build problems (unknown or cyclic dependency, duplicate id) of the given step files.

        Builds the plan from those steps, every file sharing their ids, and their
        dependencies transitively: enough to find each of their problems.
        """
        index = self._index(commit)
        wanted = set(paths)
        pending = [step_id_of(p) for p in paths]
        seen: set[str] = set()
        steps: list[Step] = []
        while pending:
            step_id = pending.pop()
            if step_id in seen:
                continue
            seen.add(step_id)
            for path in index.get(step_id, []):
                step = self._parse(path, str(commit.tree[path].id))
                steps.append(Step(step.id, step.path, step.meta, step.text, list(step.problems)))
                if not step.problems:
                    pending += step.depends_on
        plan = Plan.build(steps)
        return [f"{s.path}: {p}" for s in plan.invalid if s.path in wanted for p in s.problems]

    def _dependents_problems(self, commit: pygit2.Commit, deleted: set[str]) -> list[str]:
        """Deleting a step that others depend on would leave them invalid. (Parses every step: deletions are rare.)"""
        index = self._index(commit)
        gone = {step_id for step_id in deleted if step_id not in index}  # not merely moved
        problems = []
        for paths in index.values() if gone else ():
            for path in paths:
                step = self._parse(path, str(commit.tree[path].id))
                missing = sorted(set(step.depends_on) & gone) if not step.problems else []
                if missing:
                    problems.append(f"deleting {', '.join(missing)} leaves {path} depending on a step that does not exist")
        return problems

    def _config_problems(self, parent, commit) -> list[str]:
        data = self._file(str(commit.id), "runner.toml")
        problems = []
        try:
            parse_config(data.decode("utf-8", errors="replace") if data else None)
        except BadInput as exc:
            problems += exc.problems
        old = self._file(str(parent.id), "runner.toml") if parent is not None else None
        if self.rules.identities is not None and hooks_table(old) != hooks_table(data) and self.pusher not in self.rules.admins:
            problems.append(f"only [hooks] admins may change the [hooks] table of runner.toml (pusher: {self.pusher!r})")
        return problems

    def _identity_problem(self, kind: str, worker: str | None) -> str | None:
        """With [hooks.identities], a pusher acts only as the worker ids listed for them."""
        identities = self.rules.identities
        if identities is None:
            return None
        if self.pusher is None:
            return f"cannot tell who pushes (${self.rules.pusher_env} is not set) and [hooks.identities] is configured"
        allowed = identities.get(self.pusher)
        if allowed is None:
            return f"pusher {self.pusher!r} is not listed in [hooks.identities]"
        if kind in PERSON_EVENTS or kind == "edit" or worker in allowed:
            return None
        return f"pusher {self.pusher!r} may act as {', '.join(allowed) or 'no worker'}, not as worker {worker!r}"

    # -- cached reads --

    def _ref_target(self, ref: str) -> str | None:
        try:
            return str(self.repo.references[ref].target)
        except (KeyError, pygit2.InvalidSpecError):
            return None

    def _file(self, commit_id: str | None, path: str) -> bytes | None:
        if commit_id is None or commit_id == ZERO:
            return None
        try:
            entry = self.repo[commit_id].tree[path]
        except KeyError:
            return None
        return entry.data if isinstance(entry, pygit2.Blob) else None

    def _config(self, commit_id: str | None) -> Config:
        data = self._file(commit_id, "runner.toml") or b""
        key = data.decode("utf-8", errors="replace")
        if key not in self._configs:
            try:
                self._configs[key] = parse_config(key)
            except BadInput:
                self._configs[key] = Config()
        return self._configs[key]

    def _parse(self, path: str, blob_id: str) -> Step:
        key = (path, blob_id)
        if key not in self._steps:
            self._steps[key] = parse_step(path, self.repo[blob_id].data)
        return self._steps[key]

    def _parse_change(self, change: FileChange) -> Step:
        if change.new_is_link:
            return Step(step_id_of(change.path), change.path, {}, "", ["is a symlink (step files must be regular files)"])
        return self._parse(change.path, change.new)

    def _index(self, commit: pygit2.Commit) -> dict[str, list[str]]:
        """Step id -> paths of the step files at a commit (file names only: nothing parsed)."""
        try:
            tree = commit.tree[STEPS_DIR]
        except KeyError:
            return {}
        key = str(tree.id)
        if key not in self._step_index:
            index: dict[str, list[str]] = {}
            stack = [(STEPS_DIR, tree)]
            while stack:
                base, node = stack.pop()
                for entry in node:
                    path = f"{base}/{entry.name}"
                    if entry.type_str == "tree":
                        stack.append((path, self.repo[entry.id]))
                    elif is_step_file(path):
                        index.setdefault(step_id_of(path), []).append(path)
            self._step_index[key] = index
        return self._step_index[key]

    def _find_step(self, commit: pygit2.Commit, step_id: str) -> str | None:
        paths = self._index(commit).get(step_id, [])
        return paths[0] if len(paths) == 1 else None


def event_from_commit(kind: str, trailers: dict[str, str], after: Step, permanent: bool, **context: Any) -> Event:
    """The event a commit claims to record, rebuilt from its trailers and the step's new fields."""
    holder = dict(after.meta.get("holder") or {}) if isinstance(after.meta.get("holder"), dict) else {}
    incarnation = holder.pop("incarnation", None)
    starts_claim = kind in ("claim", "takeover")
    attempt = None
    if kind == "takeover":
        attempt = _int(trailers.get("Replaces"))
    elif kind in HOLDER_EVENTS:
        attempt = _int(trailers.get("Attempt"))
    return Event(
        kind=kind,
        attempt=attempt,
        incarnation=incarnation if starts_claim else trailers.get("Incarnation"),
        holder=holder if starts_claim else {},
        lease=after.meta.get("lease") if starts_claim else None,
        reason=REASON,
        result=after.meta.get("result"),
        retry_at=parse_time(after.meta.get("not_before")),
        permanent=permanent,
        metrics={k: after.meta[k] for k in CARRIED_METRICS if k in after.meta} or None,
        hold=kind == "complete" and after.status == "review" and after.meta.get("last_error") is not None,
        **context,
    )


CARRIED_METRICS = ("scores", "spent")  # what a holder carries across attempts for the brakes


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def trailer_problems(kind: str, trailers: dict[str, str], before: Step, after: Step) -> list[str]:
    problems = []
    attempt = trailers.get("Attempt")
    if _int(attempt) is None:
        problems.append("Runner-Attempt trailer is missing or not a number")
    elif int(attempt) != after.attempt:
        problems.append(f"Runner-Attempt {attempt} does not match the step's attempt {after.attempt}")
    status = trailers.get("Status")
    if status and status != after.status:
        problems.append(f"Runner-Status {status} does not match the step's status {after.status}")
    if kind == "takeover":
        replaces = _int(trailers.get("Replaces"))
        if replaces is None:
            problems.append("a takeover must name the attempt it replaces (Runner-Replaces)")
        elif replaces != before.attempt:
            problems.append(f"Runner-Replaces {replaces} is not the attempt being taken over ({before.attempt})")
    if after.attempt < before.attempt:
        problems.append(f"the attempt number goes backwards ({before.attempt} -> {after.attempt})")
    return problems


def unchanged_content_problems(kind: str, before: Step, after: Step) -> list[str]:
    problems = []
    keys = (before.meta.keys() | after.meta.keys()) - set(MANAGED_KEYS)
    changed = sorted(k for k in keys if before.meta.get(k) != after.meta.get(k))
    if changed:
        problems.append(f"a {kind} changes runner-managed fields only, not {', '.join(changed)}")
    if body_of(before.text) != body_of(after.text) and not (kind == "complete" and only_ticks_checks(before.text, after.text)):
        allowed = " (a complete may only tick Automated Verification boxes)" if kind == "complete" else ""
        problems.append(f"a {kind} may not change the step's text{allowed}")
    return problems


def only_ticks_checks(before: str, after: str) -> bool:
    """True when `after`'s body is `before`'s with some unticked Automated Verification boxes ticked."""
    old_lines, new_lines = body_of(before).splitlines(), body_of(after).splitlines()
    if len(old_lines) != len(new_lines):
        return False
    unticked = {number for number, ticked, _, _ in checklist(before, "Automated Verification") if not ticked}
    for number, (old, new) in enumerate(zip(old_lines, new_lines)):
        if old != new and (number not in unticked or new != old.replace("[ ]", "[x]", 1)):
            return False
    return True


def managed_mismatches(expected: dict[str, Any], actual: dict[str, Any], kind: str, actor: str) -> tuple[list[str], str | None]:
    """(how the commit's managed fields differ from what the transition writes, the reason text found)."""
    problems, reason = [], None
    for key in MANAGED_KEYS:
        want, got = expected.get(key), actual.get(key)
        if isinstance(want, str) and REASON in want:
            captured = _match_reason(want, got)
            if captured is None:
                problems.append(f"{key} is {_show(got)}; a {kind} writes {_show(want.replace(REASON, '<reason>'))}")
            else:
                reason = captured
        elif want != got:
            problems.append(f"{key} is {_show(got)}; a {kind} by {actor} writes {_show(want)}")
    return problems, reason


def _match_reason(template: str, value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    before, _, after = template.partition(REASON)
    match = re.fullmatch(re.escape(before) + "(.+)" + re.escape(after), value, re.S)
    return match.group(1) if match else None


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def new_step_problems(step: Step) -> list[str]:
    held = [k for k in CLAIM_KEYS if step.meta.get(k) is not None]
    if step.status == "claimed" or held:
        return [f"{step.path}: a new step may not start claimed ({', '.join(held) or 'status'}); only runner claim starts an attempt"]
    return []


def check_push(repo_path: str | Path, old: str, new: str, ref: str, pusher: str | None = None) -> list[str]:
    """Reasons the server refuses moving `ref` from `old` to `new` (empty: accept)."""
    return PushCheck(repo_path, pusher).check([(old, new, ref)])


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


# --- the client check (pre-commit) ----------------------------------------------------


def staged_step_problems(repo_path: str | Path = ".") -> list[str]:
    """`runner validate` for the step files a commit adds or changes, read from the index."""
    repo_path = Path(repo_path)
    names = subprocess.run(
        ["git", "diff", "--cached", "--name-only", "-z", "--diff-filter=ACMRT"], cwd=repo_path, capture_output=True, check=True
    ).stdout.decode("utf-8", errors="replace")
    changed = {name for name in names.split("\0") if is_step_file(name)}
    if not changed:
        return []
    repo = pygit2.Repository(pygit2.discover_repository(str(repo_path)))
    # `git commit -a` and `git commit PATH` stage into a temporary index named by GIT_INDEX_FILE.
    index_file = os.environ.get("GIT_INDEX_FILE")
    index = pygit2.Index(os.path.abspath(index_file)) if index_file else repo.index
    steps = []
    for entry in index:
        if not is_step_file(entry.path):
            continue
        if entry.mode == pygit2.GIT_FILEMODE_LINK:
            steps.append(Step(step_id_of(entry.path), entry.path, {}, "", ["is a symlink (step files must be regular files)"]))
        else:
            steps.append(parse_step(entry.path, repo[entry.id].data))
    plan = Plan.build(steps)
    return [f"{s.path}: {p}" for s in plan.invalid if s.path in changed for p in s.problems]


def run_pre_commit(repo_path: str | Path = ".") -> int:
    problems = staged_step_problems(repo_path)
    if problems:
        print(f"runner: the commit is blocked, {len(problems)} problem(s) in plan files:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
    return 1 if problems else 0


# --- install / uninstall -------------------------------------------------------------

MARKER = "runner-hook:"  # a line of every hook runner installs
SAVED_SUFFIX = ".runner-saved"


def render_hook(name: str, queue_branch: str = DEFAULT_QUEUE_BRANCH) -> str:
    from runner.resources import fill, read_text

    runner_home = Path(__file__).absolute().parents[2]  # the folder that holds the runner package
    # sys.executable as it is (a venv's python is a symlink that must stay one).
    return fill(
        read_text("runner.hooks", "templates", name),
        {"PYTHON": shlex.quote(sys.executable), "RUNNER_HOME": shlex.quote(str(runner_home)), "QUEUE_BRANCH": shlex.quote(queue_branch)},
    )


def is_runner_hook(path: Path) -> bool:
    try:
        return path.is_file() and MARKER in path.read_text(errors="replace")
    except OSError:
        return False


def hooks_dir(repo: Path) -> Path:
    """The hooks folder git uses for a repository (honours core.hooksPath)."""
    out = subprocess.run(["git", "rev-parse", "--git-path", "hooks"], cwd=repo, capture_output=True, text=True, check=True)
    path = Path(out.stdout.strip())
    return path if path.is_absolute() else (repo / path).resolve()


def install_hook(folder: Path, name: str, text: str) -> str:
    """Write hook `name`, moving a hook that was there aside to chain it. Returns what happened."""
    folder.mkdir(parents=True, exist_ok=True)
    target, saved = folder / name, folder / (name + SAVED_SUFFIX)
    message = f"installed {target}"
    if (target.exists() or target.is_symlink()) and not is_runner_hook(target):
        if saved.exists() or saved.is_symlink():
            raise BadInput(f"{target} exists and so does {saved}: move one of them away, then install again")
        target.rename(saved)
        message += f" (the existing hook runs first, kept as {saved.name})"
    temporary = folder / (name + ".runner-tmp")
    temporary.write_text(text)
    temporary.chmod(0o755)
    temporary.replace(target)
    return message


def uninstall_hook(folder: Path, name: str) -> str:
    target, saved = folder / name, folder / (name + SAVED_SUFFIX)
    if not is_runner_hook(target):
        return f"{target}: no runner hook installed" + (" (left the hook that is there alone)" if target.exists() else "")
    target.unlink()
    if saved.exists() or saved.is_symlink():
        saved.rename(target)
        return f"removed the runner hook; restored the previous {name} hook"
    return f"removed {target}"


def target_problems(server: Path | None, clone: Path | None) -> list[str]:
    """Every problem with where hooks should go: a bare remote and/or a working clone."""
    problems = _repository_problems(server, bare=True) if server is not None else []
    return problems + (_repository_problems(clone, bare=False) if clone is not None else [])


def _repository_problems(path: Path, bare: bool) -> list[str]:
    if not path.exists():
        return [f"{path}: no such folder"]
    try:
        found = pygit2.discover_repository(str(path))
    except Exception:
        found = None
    if not found:
        return [f"{path}: not a git repository"]
    is_bare = pygit2.Repository(found).is_bare
    if bare and not is_bare:
        return [f"{path}: not a bare repository (the server hook belongs in the remote's bare repository; use --repo for a clone)"]
    if not bare and is_bare:
        return [f"{path}: a bare repository has no commits made in it (use --server for a remote)"]
    return []


def install_server(bare: Path, queue_branch: str = DEFAULT_QUEUE_BRANCH) -> list[str]:
    """Install the pre-receive hook. It enforces fast-forwards and refuses deletions of the queue,
    integration and heartbeat refs itself: git's receive.denyNonFastForwards is repository-wide and
    would also refuse the rewrite of a step branch by the next attempt of a step."""
    if problems := _repository_problems(bare, bare=True):
        raise BadInput(problems)
    return [install_hook(hooks_dir(bare), "pre-receive", render_hook("pre-receive", queue_branch))]


def uninstall_server(bare: Path) -> list[str]:
    if problems := _repository_problems(bare, bare=True):
        raise BadInput(problems)
    return [uninstall_hook(hooks_dir(bare), "pre-receive")]


def install_client(repo: Path) -> list[str]:
    if problems := _repository_problems(repo, bare=False):
        raise BadInput(problems)
    return [install_hook(hooks_dir(repo), "pre-commit", render_hook("pre-commit"))]


def uninstall_client(repo: Path) -> list[str]:
    if problems := _repository_problems(repo, bare=False):
        raise BadInput(problems)
    return [uninstall_hook(hooks_dir(repo), "pre-commit")]


def main(argv: list[str]) -> int:
    """`python -m runner.hooks.server pre-receive|pre-commit`: what the installed hook scripts run.

    The same checks as the hidden `runner hook-pre-receive` / `hook-pre-commit`
    commands, without the CLI's start-up (typer alone costs more than the check).
    """
    if argv == ["pre-receive"]:
        return run_pre_receive(sys.stdin.read(), ".")
    if argv == ["pre-commit"]:
        return run_pre_commit(".")
    print("usage: python -m runner.hooks.server pre-receive|pre-commit", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
