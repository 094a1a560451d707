"""GitStore: the Store over a real git repository. Every git call runner makes is here.

The hot path (reading trees and blobs, building commits without an index or a working
tree, local ref transactions) uses pygit2. What needs the user's own git (fetch and push
with their credentials and ssh config, worktrees) drives the git CLI, never through a
shell, with git's automatic gc and maintenance off (`runner gc` does that on purpose).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pygit2

from runner.core.layout import HEARTBEAT_PREFIX
from runner.store import (
    FORCE,
    Author,
    Change,
    CommitInfo,
    Conflict,
    Failed,
    FileEntry,
    Lost,
    Merged,
    Outcome,
    RefUpdate,
    Refused,
    StoreError,
    Won,
)
from runner.store import locks

# libgit2 caches up to 256 MiB of objects by default; the trees a claim rewrites are what
# must stay cached, a long-running worker's memory must not grow with the plan.
pygit2.settings.cache_max_size(32 * 1024 * 1024)

QUIET_GIT = ("-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "core.askPass=", "-c", "credential.interactive=false")


def _git_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANG": "C"})
    return env


def run_git(cwd: str | Path, *args: str, check: bool = True, input: bytes | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run git (argv, never a shell). The one way runner starts a git process."""
    try:
        proc = subprocess.run(["git", *QUIET_GIT, *args], cwd=str(cwd), env=_git_env(), input=input, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise StoreError(f"git {' '.join(args[:2])} did not answer within {timeout:.0f}s") from exc
    except OSError as exc:
        raise StoreError(f"cannot run git: {exc.strerror} (install git 2.38 or newer)") from exc
    if check and proc.returncode != 0:
        raise StoreError(f"git {' '.join(args[:2])} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc


class GitStore:
    """A repository holding (or mirroring) the queue branch."""

    def __init__(self, path: str | Path = ".", remote: str | None = "auto"):
        try:
            found = pygit2.discover_repository(str(path))
        except pygit2.GitError:
            found = None
        if not found:
            raise StoreError(f"{Path(path).resolve()} is not inside a git repository (run `git init`, or pass --repo)")
        self.repo = pygit2.Repository(found)
        self.git_dir = Path(_common_dir(Path(self.repo.path)))
        self.workdir = Path(self.repo.workdir) if self.repo.workdir else self.git_dir
        self.state_dir = self.git_dir / "runner"
        self.state_dir.mkdir(exist_ok=True)
        names = list(self.repo.remotes.names())
        if remote == "auto":
            remote = "origin" if "origin" in names else None
        elif remote is not None and remote not in names:
            raise StoreError(f"no remote named {remote!r} (this repository has: {', '.join(names) or 'none'}; --remote none for local only)")
        self.remote = remote
        self.remote_url = self.repo.remotes[remote].url if remote else None

    @classmethod
    def receiving(cls, path: str | Path) -> "GitStore":
        """The server's repository during pre-receive: the pushed objects sit in a quarantine
        folder that git names in the environment, and libgit2 does not read it by itself."""
        store = cls(path, remote=None)
        folders = [os.environ.get("GIT_OBJECT_DIRECTORY", ""), *os.environ.get("GIT_ALTERNATE_OBJECT_DIRECTORIES", "").split(os.pathsep)]
        for folder in folders:
            if folder and os.path.isdir(folder):
                store.repo.odb.add_disk_alternate(os.path.abspath(folder))
        return store

    def private(self) -> "GitStore":
        """Another handle on the same repository (pygit2 objects are not shared across threads)."""
        return GitStore(self.git_dir, remote=self.remote)

    # --- refs -------------------------------------------------------------------

    def view_ref(self, ref: str) -> str:
        """The local ref that holds our view of a ref of the queue's home (tracking refs with a remote)."""
        if not self.remote:
            return ref
        if ref.startswith("refs/heads/"):
            return f"refs/remotes/{self.remote}/{ref[len('refs/heads/'):]}"
        if ref.startswith(HEARTBEAT_PREFIX):
            return f"refs/runner/remotes/{self.remote}/heartbeats/{ref[len(HEARTBEAT_PREFIX):]}"
        return ref

    def ref(self, ref: str) -> str | None:
        try:
            reference = self.repo.references.get(ref)
        except (pygit2.InvalidSpecError, ValueError):
            return None
        if reference is None:
            return None
        try:
            return str(reference.resolve().target)
        except (KeyError, pygit2.GitError):
            return None

    def tip(self, branch: str) -> str | None:
        return self.ref(self.view_ref("refs/heads/" + branch))

    def heartbeats(self) -> dict[str, str]:
        prefix = self.view_ref(HEARTBEAT_PREFIX + "x")[:-1]
        found = {}
        for name in self.repo.references:
            if name.startswith(prefix) and (target := self.ref(name)):
                found[name[len(prefix):]] = target
        return found

    def local_head(self) -> str | None:
        """The commit this clone has checked out, if any (where a new integration branch starts)."""
        try:
            return None if self.repo.head_is_unborn else str(self.repo.head.target)
        except pygit2.GitError:
            return None

    # --- objects ------------------------------------------------------------------

    def read(self, oid: str) -> bytes:
        obj = self.repo.get(oid)
        if not isinstance(obj, pygit2.Blob):
            raise StoreError(f"{oid} is not a blob")
        return obj.data

    def _commit(self, oid: str) -> pygit2.Commit:
        obj = self.repo.get(oid)
        if not isinstance(obj, pygit2.Commit):
            raise StoreError(f"{oid} is not a commit")
        return obj

    def commit(self, oid: str) -> CommitInfo:
        commit = self._commit(oid)
        return CommitInfo(
            id=str(commit.id),
            parents=tuple(str(p) for p in commit.parent_ids),
            tree=str(commit.tree_id),
            # As UTF-8 whatever the commit's `encoding` header says: runner writes UTF-8 only, and
            # a header naming an unknown codec must not crash every reader (the hook refuses it).
            message=commit.raw_message.decode("utf-8", errors="replace"),
            author=commit.author.raw_name.decode("utf-8", errors="replace"),
            time=commit.commit_time,
        )

    def object_type(self, oid: str) -> str | None:
        obj = self.repo.get(oid)
        return obj.type_str if obj is not None else None

    def _entry(self, commit: str, path: str):
        tree = self._commit(commit).tree
        if not path:
            return tree
        try:
            return tree[path]
        except KeyError:
            return None

    def file_at(self, commit: str | None, path: str) -> bytes | None:
        if commit is None:
            return None
        entry = self._entry(commit, path)
        return entry.data if isinstance(entry, pygit2.Blob) else None

    def entry_at(self, commit: str, path: str) -> FileEntry | None:
        """The blob at `path` of a commit, if a blob is there."""
        tree = self._commit(commit).tree
        try:
            entry = tree[path]
        except KeyError:
            return None
        if entry.type_str != "blob":
            return None
        return FileEntry(path, str(entry.id), entry.filemode == pygit2.GIT_FILEMODE_LINK)

    def raw_commit(self, oid: str) -> bytes:
        """A commit object as git stores it: its headers, a blank line, its message."""
        self._commit(oid)
        return self.repo.odb.read(oid)[1]

    def tree_id(self, commit: str, path: str = "") -> str | None:
        entry = self._entry(commit, path)
        return str(entry.id) if isinstance(entry, pygit2.Tree) else None

    def list_files(self, commit: str, prefix: str) -> list[FileEntry]:
        node = self._entry(commit, prefix)
        if not isinstance(node, pygit2.Tree):
            return []
        found: list[FileEntry] = []
        stack = [(prefix, node)]
        while stack:
            base, current = stack.pop()
            for entry in current:
                path = f"{base}/{entry.name}" if base else entry.name
                if entry.type_str == "tree":
                    stack.append((path, self.repo[entry.id]))
                elif entry.type_str == "blob":
                    found.append(FileEntry(path, str(entry.id), entry.filemode == pygit2.GIT_FILEMODE_LINK))
        return found

    def diff_trees(self, old_tree: str, new_tree: str) -> list[Change]:
        """What changed between two trees, in C: unchanged subtrees are skipped by id."""
        changes = []
        for delta in self.repo[old_tree].diff_to_tree(self.repo[new_tree]).deltas:
            kind = delta.status_char()
            path = delta.new_file.path or delta.old_file.path
            oid = None if kind == "D" else str(delta.new_file.id)
            changes.append(Change(path, oid, kind, delta.new_file.mode == pygit2.GIT_FILEMODE_LINK))
        return changes

    def changed_paths(self, commit: str) -> list[str]:
        info = self._commit(commit)
        if not info.parents:
            return [e.path for e in self.list_files(commit, "")]
        return [c.path for c in self.diff_trees(str(info.parents[0].tree_id), str(info.tree_id))]

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        try:
            return ancestor == descendant or self.repo.descendant_of(descendant, ancestor)
        except (pygit2.GitError, KeyError, ValueError):
            return False

    def commits_between(self, old: str | None, new: str) -> list[CommitInfo]:
        """Every commit reachable from `new` and not from `old` (all parents), oldest first."""
        walker = self.repo.walk(new, pygit2.GIT_SORT_TOPOLOGICAL | pygit2.GIT_SORT_REVERSE)
        if old:
            walker.hide(old)
        return [self.commit(str(c.id)) for c in walker]

    def reflog(self, ref: str) -> list[tuple[str, str, int]]:
        """(old, new, time) of a ref's recorded updates, newest first (empty without a reflog)."""
        try:
            reference = self.repo.references.get(ref)
            entries = list(reference.log()) if reference is not None else []
        except (pygit2.GitError, KeyError, ValueError):
            return []
        return [(str(e.oid_old), str(e.oid_new), e.committer.time) for e in entries]

    def log(self, tip: str) -> Iterator[CommitInfo]:
        walker = self.repo.walk(tip, pygit2.GIT_SORT_TOPOLOGICAL)
        walker.simplify_first_parent()
        for commit in walker:
            yield self.commit(str(commit.id))

    def make_commit(self, parents: list[str], files: dict[str, bytes | None], message: str, author: Author, base_tree: str | None = None) -> str:
        """A commit of `files` (path -> content, None deletes) on top of parents[0]'s tree (or base_tree)."""
        if base_tree is None and parents:
            base_tree = str(self._commit(parents[0]).tree_id)
        tree = self._write_tree(base_tree, files)
        sig = pygit2.Signature(author.name, author.email)
        return str(self.repo.create_commit(None, sig, sig, message, tree, parents))

    def _write_tree(self, base: str | None, files: dict[str, bytes | None]) -> pygit2.Oid:
        here: dict[str, bytes | None] = {}
        below: dict[str, dict[str, bytes | None]] = {}
        for path, data in files.items():
            head, _, rest = path.partition("/")
            if rest:
                below.setdefault(head, {})[rest] = data
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
        for name, sub in below.items():
            sub_base = str(base_tree[name].id) if base_tree is not None and name in base_tree and base_tree[name].type_str == "tree" else None
            sub_tree = self._write_tree(sub_base, sub)
            if len(self.repo[sub_tree]) == 0:
                if base_tree is not None and name in base_tree:
                    builder.remove(name)
            else:
                builder.insert(name, sub_tree, pygit2.GIT_FILEMODE_TREE)
        return builder.write()

    def merge(self, ours: str, theirs: str, message: str, author: Author) -> Merged | Conflict:
        """A merge commit of `theirs` into `ours`, built in memory (a fast-forward when possible)."""
        if self.is_ancestor(ours, theirs):
            return Merged(theirs)
        index = self.repo.merge_commits(ours, theirs)
        if index.conflicts is not None:
            return Conflict(tuple(sorted({(e[1] or e[2] or e[0]).path for e in index.conflicts})))
        tree = index.write_tree(self.repo)
        sig = pygit2.Signature(author.name, author.email)
        return Merged(str(self.repo.create_commit(None, sig, sig, message, tree, [ours, theirs])))

    # --- publishing: all refs or none ---------------------------------------------------

    def publish(self, updates: list[RefUpdate]) -> Outcome:
        outcome = self._push(updates) if self.remote else self._transaction(updates)
        if isinstance(outcome, Won) and self.remote:
            for update in updates:
                self._track(update.ref, update.new)
        return outcome

    def _transaction(self, updates: list[RefUpdate]) -> Outcome:
        """One local ref transaction: every ref locked, checked, then written."""
        for attempt in range(2):
            try:
                with self.repo.transaction() as txn:
                    for update in updates:
                        txn.lock_ref(update.ref)
                    for update in updates:
                        current = self.ref(update.ref)
                        if update.old != FORCE and current != update.old:
                            raise _Moved(update.ref)
                    for update in updates:
                        if update.new is None:
                            if self.ref(update.ref) is not None:
                                txn.remove(update.ref)
                        else:
                            txn.set_target(update.ref, update.new, message="runner")
                return Won()
            except _Moved as moved:
                return Lost(moved.ref)
            except (pygit2.GitError, OSError, ValueError) as exc:
                if attempt == 0 and locks.clear_stale(str(exc), self.git_dir, self.workdir):
                    continue
                if locks.lock_path(str(exc)):
                    return Lost(updates[0].ref)  # another process holds the ref's lock this instant
                return Failed(f"updating {', '.join(u.ref for u in updates)}: {exc}")
        return Failed("a stale lock file could not be removed")

    def _push(self, updates: list[RefUpdate]) -> Outcome:
        args = ["push", "--porcelain", "--atomic", "--no-verify"]
        for u in updates:
            if u.old != FORCE:
                args.append(f"--force-with-lease={u.ref}:{u.old or ''}")
        args.append(self.remote_url)
        args += [f"{'+' if u.old == FORCE else ''}{u.new or ''}:{u.ref}" for u in updates]
        try:
            proc = run_git(self.git_dir, *args, check=False, timeout=300)
        except StoreError as exc:
            return self._landed_or(updates, Failed(str(exc)))
        if proc.returncode == 0:
            return Won()
        outcome = _push_outcome(proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))
        return self._landed_or(updates, outcome) if isinstance(outcome, Failed) else outcome

    def _landed_or(self, updates: list[RefUpdate], outcome: Outcome) -> Outcome:
        """A push whose answer was lost may have landed: look at the remote before deciding."""
        try:
            there = self.remote_refs([u.ref for u in updates])
        except StoreError:
            return outcome
        if all(there.get(u.ref) == u.new for u in updates):
            return Won()
        return outcome

    def remote_refs(self, refs: list[str]) -> dict[str, str]:
        proc = run_git(self.git_dir, "ls-remote", self.remote_url, *refs, timeout=120)
        found = {}
        for line in proc.stdout.decode().splitlines():
            oid, _, name = line.partition("\t")
            found[name] = oid
        return found

    def remote_branches(self) -> dict[str, str]:
        return {ref.removeprefix("refs/heads/"): oid for ref, oid in self.remote_refs(["refs/heads/*"]).items()}

    def _track(self, ref: str, new: str | None) -> None:
        """Mirror a ref we just pushed into our view, so the next read needs no fetch."""
        local = self.view_ref(ref)
        if local == ref:
            return
        try:
            if new is None:
                if self.repo.references.get(local) is not None:
                    self.repo.references.delete(local)
            else:
                self.repo.references.create(local, new, force=True)
        except (pygit2.GitError, OSError, KeyError) as exc:
            locks.clear_stale(str(exc), self.git_dir, self.workdir)  # the next fetch brings it

    # --- fetching ---------------------------------------------------------------------

    def fetch(self, branches: list[str], heartbeats: bool = False) -> None:
        """Bring our view of `branches` (and every heartbeat ref) up to date in one round trip.
        A branch the remote does not have yet is not an error."""
        if not self.remote:
            return
        # A refspec with a '*' matches nothing without failing: a branch not there yet is fine.
        specs = [f"+refs/heads/{b}*:refs/remotes/{self.remote}/{b}*" for b in dict.fromkeys(branches)]
        # A heartbeat ref deleted on the remote must vanish from our view too: its worker chains
        # its next beat on what it sees, and a stale view would lose that race for ever.
        prune = ["--prune"] if heartbeats else []
        if heartbeats:
            specs.append(f"+{HEARTBEAT_PREFIX}*:{self.view_ref(HEARTBEAT_PREFIX + 'x')[:-1]}*")
        for attempt in range(5):
            proc = run_git(self.git_dir, "fetch", "--quiet", *prune, "--no-write-fetch-head", "--no-tags", self.remote_url, *specs, check=False)
            if proc.returncode == 0:
                return
            err = proc.stderr.decode(errors="replace")
            if locks.clear_stale(err, self.git_dir, self.workdir):
                continue
            # Another process sharing this clone updated the same tracking ref at that moment
            # (git names the ref it could not lock), or a neighbour's half-made worktree upset
            # fetch's checks: both pass on their own.
            if not (locks.lock_path(err) or "cannot lock ref" in err or "worktrees/" in err):
                raise StoreError(f"git fetch from {self.remote_url} failed: {err.strip()}")
            time.sleep(0.02 * (attempt + 1))
        # Another process sharing this clone keeps updating the same tracking refs: its view is
        # as fresh as ours would be, and a stale view is safe because every publish is a CAS.

    # --- worktrees ----------------------------------------------------------------------

    def _worktree_lock(self):
        """Worktree administration is not safe to run concurrently in one repository (a prune
        can delete another process's half-made worktree): workers on this host take turns."""
        from filelock import FileLock

        return FileLock(str(self.state_dir / "worktrees.lock"))

    def add_worktree(self, path: Path, commit: str) -> None:
        """A detached worktree: no branch is checked out, so a stale worktree of a crashed
        holder can never block the next attempt of the same step."""
        with self._worktree_lock():
            run_git(self.git_dir, "worktree", "add", "--force", "--quiet", "--detach", str(path), commit)

    def remove_worktree(self, path: Path) -> None:
        """Remove a worktree and its administrative files, in process (no git to start)."""
        import shutil

        with self._worktree_lock():
            shutil.rmtree(path, ignore_errors=True)
            for name in self.repo.list_worktrees():
                try:
                    worktree = self.repo.lookup_worktree(name)
                    if Path(worktree.path).resolve() == path.resolve():
                        worktree.prune(True)
                except (pygit2.GitError, KeyError, OSError):
                    continue

    def prune_worktrees(self) -> None:
        with self._worktree_lock():
            run_git(self.git_dir, "worktree", "prune", check=False)

    def snapshot_worktree(self, path: Path, base: str) -> tuple[str, list[str]]:
        """Stage everything in a worktree as `git add -A` would (.gitignore honoured), in
        process; the tree it makes and the paths that differ from `base`."""
        index = pygit2.Repository(str(path)).index
        index.read()
        index.add_all()
        for delta in index.diff_to_workdir().deltas:  # what add_all left: files deleted in the worktree
            if delta.status_char() == "D":
                index.remove(delta.old_file.path)
        index.write()
        tree = str(index.write_tree())
        changed = self.diff_trees(str(self._commit(base).tree_id), tree)
        return tree, sorted({c.path for c in changed})

    def diff_text(self, path: Path, base: str) -> bytes:
        run_git(path, "add", "-A")
        return run_git(path, "diff", "--cached", "--binary", base).stdout


class _Moved(Exception):
    def __init__(self, ref: str):
        super().__init__(ref)
        self.ref = ref


_PORCELAIN_RE = re.compile(r"^(?P<flag>.)\t(?P<spec>[^\t]*)\t(?P<summary>.*)$")


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
        reasons = [line[len("remote: "):].strip() for line in err.splitlines() if line.startswith("remote: ")]
        return Refused(tuple(r for r in reasons if r) or ("the remote's hook declined the push",))
    if lost and not failed:
        return Lost(lost[0])
    return Failed("git push failed: " + ("; ".join(failed) or err.strip() or "no answer"))


def _common_dir(git_dir: Path) -> str:
    common = git_dir / "commondir"
    if common.is_file():
        return str((git_dir / common.read_text().strip()).resolve())
    return str(git_dir.resolve())


def staged_files(store: GitStore) -> tuple[list[FileEntry], set[str]]:
    """(every file in the index being committed, the paths the commit adds or changes).
    `git commit -a` and `git commit PATH` stage into a temporary index named by GIT_INDEX_FILE."""
    names = run_git(store.workdir, "diff", "--cached", "--name-only", "-z", "--diff-filter=ACMRT").stdout.decode("utf-8", errors="replace")
    index_file = os.environ.get("GIT_INDEX_FILE")
    index = pygit2.Index(os.path.abspath(index_file)) if index_file else store.repo.index
    entries = [FileEntry(e.path, str(e.id), e.mode == pygit2.GIT_FILEMODE_LINK) for e in index]
    return entries, {name for name in names.split("\0") if name}
