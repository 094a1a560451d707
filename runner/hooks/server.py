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
from collections.abc import Iterable
from pathlib import Path

from runner.core.codec import decode_beat
from runner.core.errors import BadInput
from runner.core.ids import step_id_problem, worker_id_problem
from runner.core.layout import CONFIG_FILE, DEFAULT_QUEUE_BRANCH, EMPTY_TREE, HEARTBEAT_PREFIX, branch_ref
from runner.core.limits import MAX_HEARTBEAT_BYTES
from runner.hooks.cache import HookCache
from runner.hooks.commits import CommitCheck
from runner.hooks.people import Pushers
from runner.hooks.planview import ZERO, PlanView
from runner.hooks.protection import secrets_in_push
from runner.store import CommitInfo
from runner.store.choice import open_store


def queue_branch_from_env() -> str:
    return os.environ.get("RUNNER_QUEUE_BRANCH") or DEFAULT_QUEUE_BRANCH


def label(commit: CommitInfo) -> str:
    subject = commit.message.split("\n", 1)[0].strip()
    return f"{commit.id[:10]} ({subject[:69] + '...' if len(subject) > 72 else subject})"


class PushCheck:
    """Checks the ref updates of one push. Caches parsed step files across its commits."""

    def __init__(
        self,
        repo_path: str | Path,
        pusher: str | None = None,
        queue_branch: str | None = None,
        now: float | None = None,
        cache: bool = True,
    ):
        self.store = open_store(repo_path, receiving=True)
        self.queue_ref = branch_ref(queue_branch or queue_branch_from_env())
        self.pusher_override = pusher
        # The server's own clock, never a pusher's: RUNNER_CLOCK_OFFSET in a local pusher's
        # environment reaches this process and must not move it.
        self.now = now if now is not None else time.time()
        self.plans = PlanView(self.store, HookCache(self.store.state_dir) if cache else None)
        if self.plans.cache is not None:
            self.plans.cache.prune()

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
            config = self.plans.config(before, strict=True)
        except BadInput as exc:
            # Never fall back to defaults here: that would switch identities and protections off.
            return [
                (
                    f"{CONFIG_FILE} on {self.queue_ref.removeprefix('refs/heads/')} does not parse "
                    f"({exc.problems[0]}), "
                    "so nothing can be judged: an admin fixes it with the hook off "
                    "(uninstall-hooks --server, push the fix, install-hooks --server)"
                )
            ]
        self.pushers = Pushers.of(config.hooks, self.pusher_override)
        self.commits = CommitCheck(self.store, self.plans, self.pushers, self.queue_ref, self.now)
        self.lease = config.leases.lease
        queue_after = next((new for old, new, ref in updates if ref == self.queue_ref), before)
        after = (
            self.plans.config(queue_after)
            if queue_after and self.store.object_type(queue_after) == "commit"
            else config
        )
        integration = {branch_ref(config.queue.integration_branch), branch_ref(after.queue.integration_branch)}
        prefixes = {branch_ref(config.queue.step_branch_prefix), branch_ref(after.queue.step_branch_prefix)}
        problems: list[str] = []
        for old, new, ref in sorted(updates, key=lambda update: update[2] != self.queue_ref):  # the queue first
            if new != ZERO and (clash := _clash(ref, [self.queue_ref, *integration, HEARTBEAT_PREFIX, *prefixes])):
                found = [clash]
            elif ref == self.queue_ref:
                found = self.check_queue(old, new)
            elif ref in integration:
                found = self.check_integration(old, new)
            elif ref.startswith(HEARTBEAT_PREFIX):
                found = self.check_heartbeat(old, new, ref)
            elif prefix := next((p for p in prefixes if ref.startswith(p)), None):
                found = self.check_step_branch(new, ref[len(prefix) :])
            elif ref.startswith("refs/runner/"):
                found = ["runner keeps no such ref (only refs/runner/heartbeats/<worker>)"]
            else:
                found = []  # branches and tags people keep on the remote are theirs
            problems += [f"{ref}: {problem}" for problem in found]
        allow = {*config.secrets.allow, *after.secrets.allow}
        problems += secrets_in_push(self.store, updates, self.queue_ref, integration, prefixes, allow)
        return problems + self._merges_landed(updates, integration)

    def check_step_branch(self, new: str, step: str) -> list[str]:
        """A step's branch holds its holder's change: with identities, a worker key moves it only
        in the push that records an outcome of that step (never another step's branch)."""
        if new != ZERO and (problem := step_id_problem(step)):
            return [f"not a step branch: {problem} (a name under runner's step branches blocks the step's own)"]
        if problem := self.pushers.unknown():
            return [problem]
        if self.pushers.configured and not self.pushers.is_person() and step not in self.commits.recorded:
            return [f"{self.pushers.who()} moves a step's branch only in the push that records that step's outcome"]
        return self._must_be("a commit", new, "commit") if new != ZERO else []

    def _merges_landed(self, updates: list[tuple[str, str, str]], integration: set[str]) -> list[str]:
        """A queue event that records a merge is published with that merge (one atomic push):
        never a step recorded done whose change the integration branch does not hold."""
        moved = {ref: new for old, new, ref in updates}
        tips = [moved[ref] if ref in moved else self.store.ref(ref) for ref in integration]
        return [
            f"{self.queue_ref}: records merge {merge[:10]}, which the integration branch does not hold after this push"
            for merge in sorted(self.commits.merges)
            if not any(tip and tip != ZERO and self.store.is_ancestor(merge, tip) for tip in tips)
        ]

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
        if self.pushers.configured and not self.pushers.is_person() and new not in self.commits.merges:
            # Else a worker key could merge its own unapproved work without any queue event.
            return [
                (
                    f"{self.pushers.who()} moves the integration branch only in the push whose queue event records "
                    "that merge (a complete that needs no approval); people merge by hand"
                )
            ]
        return []

    def check_queue(self, old: str, new: str) -> list[str]:
        if new == ZERO:
            return ["the queue branch may not be deleted"]
        problems = self._must_be("a commit", new, "commit") or self._fast_forward(old, new)
        if problems:
            return problems
        for commit in self.store.commits_between(None if old == ZERO else old, new):
            if problems := [f"{label(commit)}: {p}" for p in self.commits.check(commit, first=old == ZERO)]:
                return problems  # the commits after it were written on a state that cannot be
        return []

    # --- heartbeats -------------------------------------------------------------------------

    def check_heartbeat(self, old: str, new: str, ref: str) -> list[str]:
        worker = ref[len(HEARTBEAT_PREFIX) :]
        if new == ZERO:
            return self._heartbeat_deletion(worker, ref)
        if problem := worker_id_problem(worker):
            return [f"not a heartbeat ref: {problem}"]
        problems = self._must_be("a heartbeat commit", new, "commit") or self._fast_forward(old, new)
        if problems:
            return problems
        commit = self.store.commit(new)
        if problem := self.commits.encoding_problem(new):
            return [problem]
        if len(commit.message.encode("utf-8")) > MAX_HEARTBEAT_BYTES:
            return [f"a heartbeat's message is at most {MAX_HEARTBEAT_BYTES // 1024} KiB"]
        if list(commit.parents) != ([] if old == ZERO else [old]):
            # Else any commit (and its 20 MB of blobs) would ride to every clone that fetches heartbeats.
            return ["a heartbeat commit's parent is the heartbeat it replaces (or none for a new one)"]
        info = decode_beat(commit.message)
        if info is None or info.get("worker") != worker or commit.tree != EMPTY_TREE:
            problems.append(
                f"{new[:10]} is not a heartbeat of {worker} (runner writes an empty tree and a JSON body naming the "
                "worker)"
            )
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


def _clash(ref: str, names: list[str]) -> str | None:
    """Why `ref` would block one of runner's refs: git keeps refs as paths, so a ref named like
    a folder of runner's names (`runner/steps`), or one under runner's own branch names, makes
    git refuse runner's updates for good."""
    for name in names:
        if name.startswith(ref + "/"):
            return (
                f"named like a folder of runner's refs ({name.rstrip('/')}...): git could not keep both; runner's "
                "would be blocked"
            )
        if not name.endswith("/") and ref.startswith(name + "/"):
            return f"under runner's {name}: git could not keep both; runner's would be blocked"
    return None


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
        except Exception as exc:  # noqa: BLE001 (refuse rather than let an unchecked push through)
            problems = [f"the runner hook failed ({type(exc).__name__}: {exc}); nothing was accepted"]
    for problem in problems:
        print(f"runner refused {problem}", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    """`python -m runner.hooks.server pre-receive|pre-commit`: what the installed hooks run,
    without the command line's start-up."""
    if argv == ["pre-receive"]:  # a hook installed before the early refusal (install-hooks --server again)
        return run_pre_receive(sys.stdin.read(), ".")
    if argv == ["pre-commit"]:
        from runner.hooks.client import run_pre_commit

        return run_pre_commit(".")
    print("usage: python -m runner.hooks.server pre-receive|pre-commit", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
