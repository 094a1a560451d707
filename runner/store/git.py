"""GitStore: the Store over a real git repository. Every git call runner makes is here.

The hot path (reading trees and blobs, building commits without an index or a working
tree, local ref transactions) uses pygit2. What needs the user's own git (fetch and push
with their credentials and ssh config, worktrees) drives the git CLI, never through a
shell, with git's automatic gc and maintenance off (`runner gc` does that on purpose).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pygit2
from pygit2.enums import SortMode

from runner.store import (
    FORCE,
    Author,
    Change,
    CommitInfo,
    Conflict,
    FileEntry,
    Merged,
    NoSuchPlace,
    Outcome,
    RefUpdate,
    StoreError,
    gitdiff,
    remote,
    trees,
    worktrees,
)
from runner.store.gitcli import run_git
from runner.store.reffiles import RefFiles
from runner.store.remote import chosen_remote

# libgit2 caches up to 256 MiB of objects by default, but no tree over 4 KiB: the steps
# folder of a large flat plan (370 KB at 10,000 steps) was parsed again on every read. The
# trees a claim reads and rewrites stay cached; a long-running worker's memory stays flat
# (every tick adds commits and trees the cache would otherwise keep).
pygit2.settings.cache_max_size(8 * 1024 * 1024)
pygit2.settings.cache_object_limit(pygit2.enums.ObjectType.TREE, 4 * 1024 * 1024)


def lookup_name(text: str) -> str:
    """A ref name or tree path as pygit2 should be given it. pygit2 (1.20, 1.21) keeps a
    reference to every name string a ref lookup or a tree lookup is given, so a fresh string
    a call leaks: ~1 MiB per 1,000 ticks of a worker. An interned string is one per name,
    however often it is looked up."""
    return sys.intern(text)


def _write_refs(store: GitStore, updates: list[RefUpdate]) -> None:
    """One local ref transaction (runner.store.remote): Moved, or RefWriteError."""
    try:
        with store.repo.transaction() as txn:
            for update in updates:
                txn.lock_ref(update.ref)
            for update in updates:
                if update.old != FORCE and store.ref(update.ref) != update.old:
                    raise remote.Moved(update.ref)
            for update in updates:
                if update.new is None:
                    if store.ref(update.ref) is not None:
                        txn.remove(update.ref)
                else:
                    txn.set_target(update.ref, update.new, message="runner")
    except (pygit2.GitError, OSError, ValueError) as exc:
        raise remote.RefWriteError(str(exc)) from exc


def _mirror_refs(store: GitStore, refs: Mapping[str, str | None]) -> None:
    """Set (or delete) tracking refs after a push (runner.store.remote): RefWriteError."""
    try:
        for local, new in refs.items():
            if new is None:
                if store.ref(local) is not None:
                    store.repo.references.delete(local)
            else:
                store.repo.references.create(local, new, force=True)
    except (pygit2.GitError, OSError, KeyError) as exc:
        raise remote.RefWriteError(str(exc)) from exc


class GitStore:
    """A repository holding (or mirroring) the queue branch."""

    # The worktree methods: each is the function of the same name in runner.store.worktrees.
    add_worktree = worktrees.add_worktree
    remove_worktree = worktrees.remove_worktree
    prune_worktrees = worktrees.prune_worktrees
    snapshot_worktree = worktrees.snapshot_worktree
    diff_text = worktrees.diff_text
    merge_in_worktree = worktrees.merge_in_worktree
    reset_worktree = worktrees.reset_worktree
    staged_files = worktrees.staged_files
    attribute = worktrees.attribute

    def __init__(self, path: str | Path = ".", remote: str | None = "auto"):
        try:
            found = pygit2.discover_repository(str(path))
        except pygit2.GitError:
            found = None
        if not found:
            raise NoSuchPlace(f"{Path(path).resolve()} is not inside a git repository (run `git init`, or pass --repo)")
        self.repo = pygit2.Repository(found)
        self.git_dir = Path(_common_dir(Path(self.repo.path)))
        self.workdir = Path(self.repo.workdir) if self.repo.workdir else self.git_dir
        self.state_dir = self.git_dir / "runner"
        self.state_dir.mkdir(exist_ok=True)
        self.remote = remote = chosen_remote(remote, (name for name in self.repo.remotes.names() if name))
        self.remote_url = self.repo.remotes[remote].url if remote else None
        self.view_lags = False  # a push landed but our tracking refs could not follow it
        self._ref_files = RefFiles(self.git_dir)  # the names under a prefix (runner.store.reffiles)
        self._email: str | None = None  # user.email, read when a commit is made ("": none)

    def private(self) -> GitStore:
        """Another handle on the same repository (pygit2 objects are not shared across threads)."""
        return GitStore(self.git_dir, remote=self.remote)

    def workspace(self) -> GitStore:
        return self  # a Workspace itself

    # --- refs -------------------------------------------------------------------

    view_ref = remote.view_ref

    def ref(self, ref: str) -> str | None:
        try:
            reference = self.repo.references.get(lookup_name(ref))
        except (pygit2.InvalidSpecError, ValueError):
            return None
        if reference is None:
            return None
        try:
            return str(reference.resolve().target)
        except (KeyError, pygit2.GitError):
            return None

    def ref_names_under(self, prefix: str) -> set[str]:
        return self._ref_files.under(prefix)

    tip = remote.tip
    heartbeat = remote.heartbeat
    heartbeats = remote.heartbeats

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
            raise StoreError(f"{oid} is not a commit of this clone (fetch it, or it was never pushed)")
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
        return obj.type_str if (obj := self.repo.get(oid)) is not None else None

    def _entry(self, commit: str, path: str) -> pygit2.Object | None:
        tree = self._commit(commit).tree
        if not path:
            return tree
        try:
            return tree[lookup_name(path)]
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
            entry = tree[lookup_name(path)]
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
                path = f"{base}/{entry.name}" if base else f"{entry.name}"
                if entry.type_str == "tree":
                    stack.append((path, trees.tree_of(self.repo, entry.id)))
                elif entry.type_str == "blob":
                    found.append(FileEntry(path, str(entry.id), entry.filemode == pygit2.GIT_FILEMODE_LINK))
        return found

    def diff_trees(self, old_tree: str, new_tree: str) -> list[Change]:
        return trees.diff(self.repo, old_tree, new_tree)

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
        walker = self.repo.walk(new, SortMode.TOPOLOGICAL | SortMode.REVERSE)
        if old:
            walker.hide(old)
        return [self.commit(str(c.id)) for c in walker]

    def reflog(self, ref: str) -> list[tuple[str, str, int]]:
        """(old, new, time) of a ref's recorded updates, newest first (empty without a reflog)."""
        try:
            reference = self.repo.references.get(lookup_name(ref))
            entries = list(reference.log()) if reference is not None else []
        except (pygit2.GitError, KeyError, ValueError):
            return []
        return [(str(e.oid_old), str(e.oid_new), e.committer.time) for e in entries]

    def diff(self, old: str, new: str, fork: bool = False) -> bytes:
        return gitdiff.diff(self.git_dir, old, new, fork)

    def would_merge(self, ours: str, theirs: str) -> str | Conflict:
        return gitdiff.would_merge(self.git_dir, ours, theirs)

    def log(self, tip: str) -> Iterator[CommitInfo]:
        walker = self.repo.walk(tip, SortMode.TOPOLOGICAL)
        walker.simplify_first_parent()
        for commit in walker:
            yield self.commit(str(commit.id))

    def make_commit(
        self,
        parents: list[str],
        files: Mapping[str, bytes | None],
        message: str,
        author: Author,
        base_tree: str | None = None,
    ) -> str:
        """A commit of `files` (path -> content, None deletes) on top of parents[0]'s tree (or base_tree)."""
        if base_tree is None and parents:
            base_tree = str(self._commit(parents[0]).tree_id)
        tree = write_tree(self.repo, base_tree, files)
        sig = pygit2.Signature(author.name, self.configured_email() or author.email)
        return str(self.repo.create_commit(None, sig, sig, message, tree, parents))

    def configured_email(self) -> str | None:
        """This repository's `user.email` (its config, the user's, the system's), read once."""
        if self._email is None:
            try:
                self._email = str(self.repo.config["user.email"]).strip()
            except (KeyError, ValueError):
                self._email = ""
        return self._email or None

    def merge(self, ours: str, theirs: str, message: str, author: Author) -> Merged | Conflict:
        """A merge commit of `theirs` into `ours`, built in memory (a fast-forward when possible)."""
        self._commit(ours)  # a StoreError naming what this clone lacks, not a KeyError
        # A step's result usually sits right on the tip it started from: no history walk then.
        if ours in map(str, self._commit(theirs).parent_ids) or self.is_ancestor(ours, theirs):
            return Merged(theirs)
        index = self.repo.merge_commits(ours, theirs)
        if index.conflicts is not None:
            return Conflict(tuple(sorted({(e[1] or e[2] or e[0]).path for e in index.conflicts})))
        tree = index.write_tree(self.repo)
        sig = pygit2.Signature(author.name, self.configured_email() or author.email)
        return Merged(str(self.repo.create_commit(None, sig, sig, message, tree, [ours, theirs])))

    # --- moving refs and fetching (runner.store.remote) ---------------------------------

    def publish(self, updates: list[RefUpdate]) -> Outcome:
        return remote.publish(self, updates)

    write_refs = _write_refs  # runner.store.remote's local ref transaction
    mirror_refs = _mirror_refs

    def fetch(self, branches: list[str], heartbeats: bool = False) -> None:
        remote.fetch(self, branches, heartbeats)

    def remote_branches(self) -> dict[str, str]:
        return remote.remote_branches(self)

    def remote_tip(self, branch: str) -> str | None:
        return remote.remote_tip(self, branch)

    def gc(self) -> str:
        """Pack and prune this clone (runner's own git calls never start git's auto-gc)."""
        worktrees.prune_worktrees(self)
        run_git(self.git_dir, "gc", "--quiet", timeout=3600)
        return f"packed {self.git_dir}"


def write_tree(repo: pygit2.Repository, base: str | None, files: Mapping[str, bytes | None]) -> pygit2.Oid:
    """A tree: `base` with `files` (path -> content, None deletes) written in, only the subtrees
    on their paths rebuilt (a claim rewrites a few small trees, whatever the plan's size)."""
    here: dict[str, bytes | None] = {}
    below: dict[str, dict[str, bytes | None]] = {}
    for path, data in files.items():
        head, _, rest = path.partition("/")
        head = lookup_name(head)
        if rest:
            below.setdefault(head, {})[rest] = data
        else:
            here[head] = data
    base_tree = trees.tree_of(repo, base) if base else None
    builder = repo.TreeBuilder(base_tree) if base_tree is not None else repo.TreeBuilder()
    for name, data in here.items():
        if data is None:
            if base_tree is not None and name in base_tree:
                builder.remove(name)
        else:
            builder.insert(name, repo.create_blob(data), pygit2.GIT_FILEMODE_BLOB)
    for name, sub in below.items():
        sub_base = (
            str(base_tree[name].id)
            if base_tree is not None and name in base_tree and base_tree[name].type_str == "tree"
            else None
        )
        sub_tree = write_tree(repo, sub_base, sub)
        if len(trees.tree_of(repo, sub_tree)) == 0:
            if base_tree is not None and name in base_tree:
                builder.remove(name)
        else:
            builder.insert(name, sub_tree, pygit2.GIT_FILEMODE_TREE)
    return builder.write()


def _common_dir(git_dir: Path) -> str:
    common = git_dir / "commondir"
    if common.is_file():
        return str((git_dir / common.read_text().strip()).resolve())
    return str(git_dir.resolve())
