"""Moving refs, all or none, and fetching: one local ref transaction, or one atomic push
with a lease per ref whose answer is read from git's porcelain output (and looked up on the
remote when it was lost); fetches of the queue's branches and heartbeats in one round trip;
our view of the home's refs (tracking refs when there is a remote).

For both git stores (runner.store.git over pygit2, runner.store.plumbing over git's own
commands), which write local refs their own way: `store.write_refs(updates)` (the local
transaction, each ref checked against its expected old value) and `store.mirror_refs({local:
new})` (tracking refs set after a push)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeAlias

from runner.core.errors import LOST_RACE
from runner.core.layout import HEARTBEAT_PREFIX, heartbeat_ref, heartbeats_seen_from
from runner.store import FORCE, Failed, Lost, NoSuchPlace, Outcome, RefUpdate, Refused, StoreError, Won, locks
from runner.store.gitcli import fetch_args, run_git

if TYPE_CHECKING:
    from runner.store.git import GitStore
    from runner.store.plumbing import PlumbingStore

    GitLike: TypeAlias = "GitStore | PlumbingStore"


def chosen_remote(remote: str | None, names: Iterable[str]) -> str | None:
    """The remote a store works with: "auto" is origin when there is one (else none), a name
    must be one of this repository's `names`, None is this repository alone."""
    names = list(names)
    if remote == "auto":
        return "origin" if "origin" in names else None
    if remote is not None and remote not in names:
        raise NoSuchPlace(
            f"no remote named {remote!r} (this repository has: {', '.join(names) or 'none'}; "
            "--remote none for local only)"
        )
    return remote


def view_ref(store: GitLike, ref: str) -> str:
    """The local ref that holds our view of a ref of the queue's home (tracking refs with a remote)."""
    if not store.remote:
        return ref
    if ref.startswith("refs/heads/"):
        return f"refs/remotes/{store.remote}/{ref[len('refs/heads/') :]}"
    if ref.startswith(HEARTBEAT_PREFIX):
        return heartbeats_seen_from(store.remote) + ref[len(HEARTBEAT_PREFIX) :]
    return ref


def tip(store: GitLike, branch: str) -> str | None:
    return store.ref(view_ref(store, "refs/heads/" + branch))


def heartbeat(store: GitLike, worker: str) -> str | None:
    return store.ref(view_ref(store, heartbeat_ref(worker)))


def heartbeats(store: GitLike) -> dict[str, str]:
    """worker id -> the commit of its last beat, as we see them."""
    prefix = view_ref(store, HEARTBEAT_PREFIX + "x")[:-1]
    found = {name[len(prefix) :]: store.ref(name) for name in store.ref_names_under(prefix)}
    return {worker: target for worker, target in found.items() if target}


def publish(store: GitLike, updates: list[RefUpdate]) -> Outcome:
    outcome = _push(store, updates) if store.remote else _transaction(store, updates)
    if isinstance(outcome, Won) and store.remote and not _track(store, updates):
        store.view_lags = True  # the next read fetches first (Queue.snapshot)
    return outcome


def name_clash(store: GitLike, ref: str) -> str | None:
    """The ref that keeps `ref` from being created (git stores refs as paths: `runner/steps`
    and `runner/steps/01-a` cannot both exist), or None. libgit2 would write both."""
    parts = ref.split("/")
    for end in range(2, len(parts)):
        if store.ref(parent := "/".join(parts[:end])) is not None:
            return parent
    return next(iter(sorted(store.ref_names_under(ref + "/"))), None)


def clash_failure(ref: str, other: str) -> Refused:
    """A ref runner needs is blocked by a name someone else gave a ref: not a lost race (it
    would be lost for ever) nor a failure to try again, a refusal that says what to remove."""
    branch = other.removeprefix("refs/heads/")
    return Refused(
        (
            (
                f"cannot create {ref}: {other} exists, and git keeps refs as paths, so both cannot "
                f"(a branch named like "
                f"runner's own refs?); remove or rename it: git push <remote> --delete {branch} (and git branch -D "
                f"{branch})"
            ),
        )
    )


def _transaction(store: GitLike, updates: list[RefUpdate]) -> Outcome:
    """One local ref transaction: every ref locked, checked, then written."""
    for update in updates:
        if update.new is not None and store.ref(update.ref) is None and (other := name_clash(store, update.ref)):
            return clash_failure(update.ref, other)
    for attempt in range(2):
        try:
            store.write_refs(updates)
            return Won()
        except Moved as moved:
            return Lost(moved.ref)
        except RefWriteError as exc:
            if attempt == 0 and locks.clear_stale(str(exc), store.git_dir, store.workdir):
                continue
            if locks.lock_path(str(exc)):
                return Lost(updates[0].ref)  # another process holds the ref's lock this instant
            return Failed(f"updating {', '.join(u.ref for u in updates)}: {exc}")
    return Failed("a stale lock file could not be removed")


def _push(store: GitLike, updates: list[RefUpdate]) -> Outcome:
    args = ["push", "--porcelain", "--atomic", "--no-verify"]
    for u in updates:
        if u.old != FORCE:
            args.append(f"--force-with-lease={u.ref}:{u.old or ''}")
    args.append(_url(store))
    args += [f"{'+' if u.old == FORCE else ''}{u.new or ''}:{u.ref}" for u in updates]
    try:
        proc = run_git(store.git_dir, *args, check=False, timeout=300)
    except StoreError as exc:
        return _landed_or(store, updates, Failed(str(exc)))
    if proc.returncode == 0:
        return Won()
    outcome = _push_outcome(proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))
    return _landed_or(store, updates, outcome) if isinstance(outcome, Failed) else outcome


def _landed_or(store: GitLike, updates: list[RefUpdate], outcome: Outcome) -> Outcome:
    """A push whose answer was lost may have landed: look at the remote before deciding."""
    try:
        there = remote_refs(store, [u.ref for u in updates])
    except StoreError:
        return outcome
    if all(there.get(u.ref) == u.new for u in updates):
        return Won()
    return outcome


def remote_refs(store: GitLike, refs: list[str]) -> dict[str, str]:
    proc = run_git(store.git_dir, "ls-remote", _url(store), *refs, timeout=120)
    found = {}
    for line in proc.stdout.decode().splitlines():
        oid, _, name = line.partition("\t")
        found[name] = oid
    return found


def remote_branches(store: GitLike) -> dict[str, str]:
    """The branches of the queue's home as it answers now: the remote's, or this repository's."""
    if not store.remote:
        return {
            name.removeprefix("refs/heads/"): target
            for name in store.ref_names_under("refs/heads/")
            if (target := store.ref(name))
        }
    return {ref.removeprefix("refs/heads/"): oid for ref, oid in remote_refs(store, ["refs/heads/*"]).items()}


def remote_tip(store: GitLike, branch: str) -> str | None:
    """Where `branch` points in the queue's home now, from its ref advertisement alone (what an
    idle worker asks every few seconds: no objects move, and git's protocol v2 sends only the
    ref asked for)."""
    if not store.remote:
        return store.tip(branch)
    ref = "refs/heads/" + branch
    return remote_refs(store, [ref]).get(ref)


def _track(store: GitLike, updates: list[RefUpdate]) -> bool:
    """Mirror the refs we just pushed into our view, so the next read needs no fetch. False when
    a tracking ref was busy (another process's fetch holds its lock): the view lags."""
    try:
        store.mirror_refs(
            {local: update.new for update in updates if (local := store.view_ref(update.ref)) != update.ref}
        )
        return True
    except RefWriteError as exc:
        locks.clear_stale(str(exc), store.git_dir, store.workdir)
        return False


def fetch(store: GitLike, branches: list[str], heartbeats: bool = False) -> None:
    """Bring our view of `branches` (and every heartbeat ref) up to date in one round trip.
    A branch the remote does not have yet is not an error."""
    if not store.remote:
        return
    args = fetch_args(_url(store), store.remote, branches, heartbeats)
    store.view_lags = False
    for attempt in range(5):
        proc = run_git(store.git_dir, *args, check=False)
        if proc.returncode == 0:
            return
        err = proc.stderr.decode(errors="replace")
        if locks.clear_stale(err, store.git_dir, store.workdir):
            continue
        # Another process sharing this clone updated the same tracking ref at that moment
        # (git names the ref it could not lock), or a neighbour's half-made worktree upset
        # fetch's checks: both pass on their own.
        if not (locks.lock_path(err) or "cannot lock ref" in err or "worktrees/" in err):
            raise StoreError(f"git fetch from {store.remote_url} failed: {err.strip()}")
        time.sleep(0.02 * (attempt + 1))
    # Another process sharing this clone keeps updating the same tracking refs: its view is
    # as fresh as ours would be, and a stale view is safe because every publish is a CAS.


class Moved(Exception):
    """A ref of a local transaction was not at its expected old value."""

    def __init__(self, ref: str):
        super().__init__(ref)
        self.ref = ref


class RefWriteError(Exception):
    """A local ref could not be written (git's or libgit2's message: it may name a lock file)."""


_PORCELAIN_RE = re.compile(r"^(?P<flag>.)\t(?P<spec>[^\t]*)\t(?P<summary>.*)$")
# What the remote's git says when a ref cannot be created because another's name is its path.
_CLASH_RE = re.compile(
    r"cannot lock ref '(?P<ref>[^']+)': (?:'(?P<other>[^']+)' exists; cannot create|"
    r"there is a non-empty directory '(?:[^']*/)?(?P<dir>refs/[^']+)' blocking)"
)


def _push_outcome(out: str, err: str) -> Outcome:
    """Read `git push --porcelain`'s per-ref lines: which ref failed, and why."""
    lost, refused, failed = [], False, []
    for line in out.splitlines():
        match = _PORCELAIN_RE.match(line)
        if not match or match["flag"] != "!":
            continue
        ref = match["spec"].rpartition(":")[2]
        summary = match["summary"]
        if summary.startswith("[rejected]"):
            if "atomic push failed" not in summary:
                lost.append(ref)  # stale info, fetch first, non-fast-forward: another writer was first
        elif summary.startswith("[remote rejected]"):
            if "hook declined" in summary:
                refused = True
            elif "lock" in summary or "failed to update ref" in summary or "transaction failed" in summary:
                # The remote's own ref transaction found a ref moved or locked between its lease
                # check and its update: another push landed at that moment.
                lost.append(ref)
            elif "atomic push failed" not in summary:
                failed.append(f"{ref}: {summary}")
        else:
            failed.append(f"{ref}: {summary}")
    if refused:
        reasons = [line[len("remote: ") :].strip() for line in err.splitlines() if line.startswith("remote: ")]
        if lost_at := [r for r in reasons if r.startswith(LOST_RACE)]:
            # The server's hook saw the ref moved before replaying anything (runner.hooks.races):
            # git would have rejected the update after the hook; the same lost race.
            return Lost(lost_at[0][len(LOST_RACE) :].split()[0])
        return Refused(tuple(r for r in reasons if r) or ("the remote's hook declined the push",))
    if clash := _CLASH_RE.search(err):
        return clash_failure(clash["ref"], clash["other"] or clash["dir"])
    if lost and not failed:
        return Lost(lost[0])
    return Failed("git push failed: " + ("; ".join(failed) or err.strip() or "no answer"))


def _url(store: GitLike) -> str:
    if store.remote_url is None:  # callers ask only a store with a remote
        raise StoreError("this repository has no remote to reach")
    return store.remote_url
