"""Every git call runner makes, in one place.

The hot path (reading trees and blobs, building commits without an index or a
working tree, local compare-and-swap of refs) uses pygit2. What needs the
user's own git (fetch and push with their credentials and ssh config,
worktrees) drives the git CLI, never through a shell.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pygit2

# libgit2 caches up to 256 MiB of objects by default; a worker draining a large plan
# reads each step blob once or twice, so a small cache costs nothing and bounds memory.
pygit2.settings.cache_max_size(32 * 1024 * 1024)

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
HEARTBEAT_PREFIX = "refs/runner/heartbeats/"
FORCE = "+"  # as the expected old value of a push: overwrite (a step branch only its holder writes)


class GitError(Exception):
    """git failed for a reason other than losing a race."""


class PushRefused(GitError):
    """The remote's hook refused the push: a protocol violation, not a lost race."""


def _git_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANG": "C"})
    return env


def run_git(cwd: str | Path, *args: str, check: bool = True, input: bytes | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        ["git", *args], cwd=str(cwd), env=_git_env(), input=input, capture_output=True, timeout=600
    )
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args[:3])} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc


@dataclass
class Signer:
    name: str
    email: str

    def signature(self) -> pygit2.Signature:
        return pygit2.Signature(self.name, self.email)


class GitStore:
    """A repository holding (or mirroring) the queue branch."""

    def __init__(self, path: str | Path = ".", remote: str | None = "auto"):
        try:
            found = pygit2.discover_repository(str(path))
        except Exception:
            found = None
        if not found:
            raise GitError(f"{Path(path).resolve()} is not inside a git repository (run `git init` first)")
        self.repo = pygit2.Repository(found)
        self.git_dir = Path(self._common_dir(Path(self.repo.path)))
        self.workdir = Path(self.repo.workdir) if self.repo.workdir else self.git_dir
        self.runner_dir = self.git_dir / "runner"
        self.runner_dir.mkdir(exist_ok=True)
        names = list(self.repo.remotes.names())
        if remote == "auto":
            remote = "origin" if "origin" in names else None
        elif remote is not None and remote not in names:
            raise GitError(f"no remote named {remote!r} (this repository has: {', '.join(names) or 'none'})")
        self.remote = remote
        self.remote_url = self.repo.remotes[remote].url if remote else None

    @staticmethod
    def _common_dir(git_dir: Path) -> str:
        common = git_dir / "commondir"
        if common.is_file():
            return str((git_dir / common.read_text().strip()).resolve())
        return str(git_dir.resolve())

    # --- refs ---------------------------------------------------------------

    def branch_ref(self, branch: str) -> str:
        """The local ref that holds our view of `branch` (a remote-tracking ref with a remote)."""
        if self.remote:
            return f"refs/remotes/{self.remote}/{branch}"
        return f"refs/heads/{branch}"

    def heartbeat_refs_prefix(self) -> str:
        if self.remote:
            return f"refs/runner/remotes/{self.remote}/heartbeats/"
        return HEARTBEAT_PREFIX

    def ref_target(self, ref: str) -> str | None:
        try:
            return str(self.repo.references[ref].target)
        except (KeyError, pygit2.InvalidSpecError):
            return None

    def tip(self, branch: str) -> str | None:
        return self.ref_target(self.branch_ref(branch))

    def refs_under(self, prefix: str) -> dict[str, str]:
        found = {}
        for name in self.repo.references:
            if name.startswith(prefix):
                target = self.ref_target(name)
                if target:
                    found[name[len(prefix) :]] = target
        return found

    def local_cas(self, ref: str, new: str, old: str | None) -> bool:
        """Compare-and-swap a local ref. False when another writer got there first."""
        try:
            if old is None:
                self.repo.references.create(ref, new, force=False)
            else:
                current = self.repo.references.get(ref)
                if current is None or str(current.target) != old:
                    return False
                current.set_target(new, "runner")
            return True
        except (pygit2.GitError, pygit2.AlreadyExistsError, ValueError, OSError) as exc:
            if _is_race(str(exc)):
                return False
            raise GitError(f"updating {ref}: {exc}") from exc

    def set_ref(self, ref: str, new: str) -> None:
        self.repo.references.create(ref, new, force=True)

    def set_own_ref(self, ref: str, new: str) -> None:
        """Overwrite a ref only the current holder writes (a step branch). A lock file there was
        left by a holder killed mid-write (a live one on this host would still hold the claim)."""
        try:
            self.set_ref(ref, new)
        except (pygit2.GitError, OSError):
            lock = self.git_dir / (ref + ".lock")
            if not lock.exists():
                raise
            lock.unlink(missing_ok=True)
            self.set_ref(ref, new)

    # --- objects --------------------------------------------------------------

    def blob(self, oid: str) -> bytes:
        return self.repo[oid].data

    def commit(self, oid: str) -> pygit2.Commit:
        return self.repo[oid]

    def tree_files(self, commit_oid: str, prefix: str) -> list[tuple[str, str]]:
        """(path, blob id) of every blob under `prefix` at a commit, recursively."""
        tree = self.repo[commit_oid].tree
        try:
            node = tree[prefix] if prefix else tree
        except KeyError:
            return []
        if not isinstance(node, pygit2.Tree):
            return []
        found: list[tuple[str, str]] = []
        stack = [(prefix, node)]
        while stack:
            base, current = stack.pop()
            for entry in current:
                path = f"{base}/{entry.name}" if base else entry.name
                if entry.type_str == "tree":
                    stack.append((path, self.repo[entry.id]))
                elif entry.type_str == "blob":
                    found.append((path, str(entry.id) + ("@link" if entry.filemode == pygit2.GIT_FILEMODE_LINK else "")))
        return found

    def tree_id(self, commit_oid: str, path: str) -> str | None:
        try:
            entry = self.repo[commit_oid].tree[path]
        except KeyError:
            return None
        return str(entry.id) if isinstance(entry, pygit2.Tree) else None

    def changed_blobs(self, old_tree: str, new_tree: str) -> list[tuple[str, str | None, str]] | None:
        """(path, new blob id or None if deleted, change) between two trees, in C: unchanged
        subtrees are skipped by id. None when a change is not a plain blob edit."""
        changes = []
        for delta in self.repo[old_tree].diff_to_tree(self.repo[new_tree]).deltas:
            kind = delta.status_char()
            if kind not in ("M", "A", "D") or delta.new_file.mode == pygit2.GIT_FILEMODE_LINK:
                return None
            changes.append((delta.new_file.path, None if kind == "D" else str(delta.new_file.id), kind))
        return changes

    def file_at(self, commit_oid: str | None, path: str) -> bytes | None:
        if commit_oid is None:
            return None
        try:
            entry = self.repo[commit_oid].tree[path]
        except KeyError:
            return None
        return entry.data if isinstance(entry, pygit2.Blob) else None

    def make_commit(
        self, parents: list[str], changes: dict[str, bytes | None], message: str, signer: Signer, base_tree: str | None = None
    ) -> str:
        """A commit of `changes` (path -> content, None deletes) on top of parents[0]'s tree."""
        if base_tree is None:
            base_tree = str(self.repo[parents[0]].tree.id) if parents else None
        tree = self._write_tree(base_tree, changes)
        sig = signer.signature()
        return str(self.repo.create_commit(None, sig, sig, message, tree, parents))

    def _write_tree(self, base: str | None, changes: dict[str, bytes | None]) -> pygit2.Oid:
        grouped: dict[str, dict[str, bytes | None]] = {}
        here: dict[str, bytes | None] = {}
        for path, data in changes.items():
            head, _, rest = path.partition("/")
            if rest:
                grouped.setdefault(head, {})[rest] = data
            else:
                here[head] = data
        base_tree = self.repo[base] if base else None
        builder = self.repo.TreeBuilder(base_tree) if base_tree is not None else self.repo.TreeBuilder()
        for name, data in here.items():
            if data is None:
                if base_tree is not None and name in base_tree:
                    builder.remove(name)
            else:
                builder.insert(name, self.repo.create_blob(data), pygit2.GIT_FILEMODE_BLOB)
        for name, sub in grouped.items():
            sub_base = None
            if base_tree is not None and name in base_tree and base_tree[name].type_str == "tree":
                sub_base = str(base_tree[name].id)
            sub_tree = self._write_tree(sub_base, sub)
            if len(self.repo[sub_tree]) == 0:
                if base_tree is not None and name in base_tree:
                    builder.remove(name)
            else:
                builder.insert(name, sub_tree, pygit2.GIT_FILEMODE_TREE)
        return builder.write()

    def merge_commits(self, ours: str, theirs: str) -> tuple[str | None, list[str]]:
        """Merge two commits in memory: (tree id, []) or (None, conflicting paths)."""
        index = self.repo.merge_commits(ours, theirs)
        if index.conflicts is not None:
            paths = sorted({(e[1] or e[2] or e[0]).path for e in index.conflicts})
            return None, paths
        return str(index.write_tree(self.repo)), []

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return ancestor == descendant or self.repo.descendant_of(descendant, ancestor)

    def walk(self, tip: str):
        """Commits from tip back to the root, newest first (first parent only)."""
        walker = self.repo.walk(tip, pygit2.GIT_SORT_TOPOLOGICAL)
        walker.simplify_first_parent()
        return walker

    # --- the remote -------------------------------------------------------------

    def fetch(self, branches: list[str], heartbeats: bool = False) -> None:
        """Fetch branches (and heartbeat refs) into our remote-tracking refs."""
        if not self.remote:
            return
        specs = [f"+refs/heads/{b}:refs/remotes/{self.remote}/{b}" for b in branches]
        if heartbeats:
            specs.append(f"+{HEARTBEAT_PREFIX}*:{self.heartbeat_refs_prefix()}*")
        for attempt in range(5):
            proc = run_git(self.git_dir, "fetch", "--quiet", "--no-write-fetch-head", "--no-tags", self.remote_url, *specs, check=False)
            if proc.returncode == 0:
                return
            err = proc.stderr.decode(errors="replace")
            if "couldn't find remote ref" in err:
                present = self.remote_branches()
                missing = [b for b in branches if b not in present]
                if missing:
                    kept = [s for s in specs if not any(s.startswith(f"+refs/heads/{b}:") for b in missing)]
                    if kept and kept != specs:
                        specs = kept
                        continue
                    return
            if not _is_race(err) and "worktrees/" not in err:
                # (a neighbour's half-made worktree can upset fetch's checks for a moment)
                raise GitError(f"git fetch from {self.remote_url} failed: {err.strip()}")
            time.sleep(0.02 * (attempt + 1))
        # Another process sharing this clone keeps updating the same tracking refs: its view is
        # as fresh as ours would be, and a stale view is safe because every publish is a CAS.

    def remote_branches(self) -> dict[str, str]:
        proc = run_git(self.git_dir, "ls-remote", "--heads", self.remote_url)
        found = {}
        for line in proc.stdout.decode().splitlines():
            oid, _, ref = line.partition("\t")
            found[ref.removeprefix("refs/heads/")] = oid
        return found

    def push(self, updates: list[tuple[str, str, str | None]]) -> bool:
        """Atomically compare-and-swap refs on the remote: [(ref, new, expected old, None, or FORCE)].

        True when every ref moved; False when we lost a race (the remote moved on).
        Raises PushRefused when the remote's hook declined, GitError for anything else.
        """
        args = ["push", "--porcelain", "--atomic", "--no-verify"]
        for ref, _, old in updates:
            if old != FORCE:
                args.append(f"--force-with-lease={ref}:{old or ''}")
        args.append(self.remote_url)
        args += [f"{'+' if old == FORCE else ''}{new}:{ref}" for ref, new, old in updates]
        proc = run_git(self.git_dir, *args, check=False)
        out = proc.stdout.decode(errors="replace")
        err = proc.stderr.decode(errors="replace")
        if proc.returncode == 0:
            for ref, new, _ in updates:
                self._track(ref, new)
            return True
        if "[remote rejected]" in out and _is_race(out + err) and "hook declined" not in out + err:
            return False  # the remote's own ref lock: another push landed between our lease check and update
        if "[remote rejected]" in out or "hook declined" in err:
            reasons = [line[len("remote: ") :].strip() for line in err.splitlines() if line.startswith("remote: ")]
            reasons = [r for r in reasons if r] or [line for line in out.splitlines() if "remote rejected" in line]
            raise PushRefused("the remote refused the push: " + "; ".join(reasons))
        if re.search(r"\[rejected\]|stale info|fetch first|non-fast-forward|atomic push failed", out + err):
            return False
        raise GitError(f"git push to {self.remote_url} failed: {err.strip() or out.strip()}")


    def _track(self, ref: str, new: str) -> None:
        """Mirror a ref we just pushed into our remote-tracking namespace."""
        if ref.startswith("refs/heads/"):
            local = f"refs/remotes/{self.remote}/{ref[len('refs/heads/'):]}"
        elif ref.startswith(HEARTBEAT_PREFIX):
            local = self.heartbeat_refs_prefix() + ref[len(HEARTBEAT_PREFIX) :]
        else:
            return
        try:
            self.set_ref(local, new)
        except (pygit2.GitError, OSError):
            pass  # another process is updating the same tracking ref; a later fetch fixes it

    def publish(self, branch: str, new: str, old: str | None) -> bool:
        """Compare-and-swap a branch: push with a lease, or update-ref locally."""
        ref = f"refs/heads/{branch}"
        if self.remote:
            return self.push([(ref, new, old)])
        return self.local_cas(ref, new, old)

    def publish_ref(self, ref: str, new: str, old: str | None) -> bool:
        if self.remote:
            return self.push([(ref, new, old)])
        return self.local_cas(ref, new, old)

    # --- worktrees --------------------------------------------------------------

    def worktree_lock(self):
        """Worktree administration is not safe to run concurrently in one repository (a prune
        can delete another process's half-made worktree): workers on this host take turns."""
        from filelock import FileLock

        return FileLock(str(self.runner_dir / "worktrees.lock"))

    def add_worktree(self, path: Path, start: str) -> None:
        """A detached worktree: no branch is checked out, so a stale worktree of a
        crashed holder can never block the next attempt of the same step."""
        with self.worktree_lock():
            run_git(self.git_dir, "worktree", "add", "--force", "--quiet", "--detach", str(path), start)

    def remove_worktree(self, path: Path) -> None:
        with self.worktree_lock():
            run_git(self.git_dir, "worktree", "remove", "--force", str(path), check=False)

    def prune_worktrees(self) -> None:
        with self.worktree_lock():
            run_git(self.git_dir, "worktree", "prune", check=False)


def _is_race(message: str) -> bool:
    message = message.lower()
    return any(
        needle in message
        for needle in ("lock", "does not match", "already exists", "expected", "but expected", "is at", "modified")
    )
