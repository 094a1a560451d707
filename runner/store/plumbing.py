"""PlumbingStore: the Store over a git repository through git's own commands alone, for a
command that reads a little and exits (`runner claim`, `heartbeat`, `complete` from a script
or a harness's loop). pygit2's import costs a fresh process about 35 ms beyond the standard
library runner loads anyway; the dozen small git commands a claim needs here cost about 20.
It is a Store, not a Workspace: `workspace()` opens a GitStore (pygit2) for a caller that
needs worktrees, merges or history, once, and says so by its name.

Objects are read through one `git cat-file --batch` process (runner.store.catfile) and written
by `git hash-object` and `git mktree`; refs are read from git's own files (runner.store.reffiles:
no process), or, where those cannot say (a reftable), listed once by `git for-each-ref` and
again after this store fetches or moves any; a local ref transaction is one `git update-ref
--stdin`. tests/test_store.py holds it to the same contract as the others.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from runner.store import (
    FORCE,
    Author,
    Change,
    CommitInfo,
    Conflict,
    FileEntry,
    NoSuchPlace,
    Outcome,
    RefUpdate,
    StoreError,
    Workspace,
    remote,
)
from runner.store.catfile import GITLINK, HEX, LINK, TREE, CatFile, Entry, is_blob, tree_diff
from runner.store.gitcli import run_git
from runner.store.reffiles import UNSURE, RefFiles
from runner.store.remote import chosen_remote

_MOVED = re.compile(
    r"cannot lock ref '(?P<ref>[^']+)': (?!Unable to create).*(but expected|already exists|"
    r"unable to resolve|is missing)"
)


def _commits_between(store: PlumbingStore, old: str | None, new: str) -> list[CommitInfo]:
    """Every commit reachable from `new` and not from `old` (all parents), oldest first (the
    last answer kept: the hook's checks ask twice for each ref of a push)."""
    if store._between[0] == (old, new):
        return list(store._between[1])
    chain: list[CommitInfo] = []
    at = new
    while old and len(chain) < 16 and at != old and store.object_type(at) == "commit":
        if len(store.commit(at).parents) != 1:
            break
        chain.append(store.commit(at))
        at = store.commit(at).parents[0]
    if old and at == old:  # a short line of single-parent commits on top of old: no git process
        store._between = ((old, new), chain[::-1])
        return chain[::-1]
    listed = (
        run_git(
            store.git_dir,
            "rev-list",
            "--topo-order",
            "--reverse",
            new,
            *([f"^{old}"] if old else []),
            "--",
            env=store.objects_env,
        )
        .stdout.decode()
        .split()
    )
    found = [store.commit(oid) for oid in listed]
    store._between = ((old, new), found)
    return list(found)


# The board's questions: their module is imported when asked, not by every one-shot command and hook.
def _diff(store: PlumbingStore, old: str, new: str, fork: bool = False) -> bytes:
    from runner.store import gitdiff

    return gitdiff.diff(store.git_dir, old, new, fork)


def _would_merge(store: PlumbingStore, ours: str, theirs: str) -> str | Conflict:
    from runner.store import gitdiff

    return gitdiff.would_merge(store.git_dir, ours, theirs)


def _reflog(store: PlumbingStore, ref: str) -> list[tuple[str, str, int]]:
    """(old, new, time) of a ref's recorded updates, newest first (empty without a reflog),
    read from the file git appends them to (a reftable repository asks git's own store)."""
    if (store.git_dir / "reftable").exists():
        return store.workspace().reflog(ref)  # no file to read: git's own ref store, through pygit2
    try:
        lines = (store.git_dir / "logs" / ref).read_bytes().splitlines()
    except OSError:
        return []
    found = []
    for line in reversed(lines):
        head = line.split(b"\t", 1)[0].split(b" ")
        if len(head) >= 4 and head[-2].isdigit():
            found.append((head[0].decode(), head[1].decode(), int(head[-2])))
    return found


def _discovered(path: str | Path) -> tuple[Path, int, Path]:
    """(git dir, bytes of an object id, work tree or the git dir when bare) of the repository at `path`."""
    if not Path(path).is_dir():
        raise NoSuchPlace(f"{Path(path).resolve()} is not inside a git repository (run `git init`, or pass --repo)")
    where = ["rev-parse", "--path-format=absolute", "--git-common-dir", "--show-object-format"]
    found = run_git(path, *where, "--show-toplevel", check=False)
    if found.returncode != 0:  # a bare repository has no top level
        found = run_git(path, *where, check=False)
    lines = found.stdout.decode(errors="replace").splitlines()
    if found.returncode != 0 or len(lines) < 2:
        raise NoSuchPlace(f"{Path(path).resolve()} is not inside a git repository (run `git init`, or pass --repo)")
    git_dir = Path(lines[0]).resolve()
    return git_dir, 32 if lines[1] == "sha256" else 20, Path(lines[2]) if len(lines) > 2 else git_dir


class PlumbingStore:
    def __init__(
        self,
        path: str | Path = ".",
        remote: str | None = "auto",
        objects_env: Mapping[str, str] | None = None,
        known: tuple[Path, int, Path] | None = None,
    ):
        """`objects_env`: where git finds objects beyond the repository's own (a push's
        quarantine, for the server's hook: runner.store.plumbing.receiving); `known`: (git dir,
        id bytes, work tree) when the caller knows them (the hook runs in the git dir)."""
        self.objects_env = dict(objects_env or {})
        self.git_dir, self.id_bytes, self.workdir = known or _discovered(path)
        self.state_dir = self.git_dir / "runner"
        self.state_dir.mkdir(exist_ok=True)
        urls = _remote_urls(self.git_dir) if remote is not None else {}
        self.remote = remote = chosen_remote(remote, urls)
        self.remote_url = urls[remote] if remote else None
        self.view_lags = False
        self._refs: dict[str, str] | None = None  # every ref, by git for-each-ref: what the files cannot say
        self._ref_files = RefFiles(self.git_dir)
        self._between: tuple[tuple[str | None, str] | None, list[CommitInfo]] = (None, [])
        self.objects = CatFile(self.git_dir, self.id_bytes, self.objects_env)
        self._workspace: Workspace | None = None  # a GitStore, opened when a caller asks for one
        self._email: str | None = None  # user.email, read when a commit is made ("": none)

    def workspace(self) -> Workspace:
        """A GitStore on this repository, for worktrees, merges and history (pygit2 is imported then)."""
        if self._workspace is None:
            from runner.store.git import GitStore

            self._workspace = GitStore(self.git_dir, remote=self.remote)
        return self._workspace

    def private(self) -> PlumbingStore:
        return PlumbingStore(self.git_dir, remote=self.remote, objects_env=self.objects_env)

    # --- refs: read from git's files (runner.store.reffiles); what they cannot say, from every
    # ref listed at once by for-each-ref, listed again after this store moves or fetches any ---

    def _listed(self) -> dict[str, str]:
        if self._refs is None:
            out = run_git(self.git_dir, "for-each-ref", "--format=%(objectname) %(refname)").stdout
            self._refs = {name: oid for oid, _, name in (line.partition(" ") for line in out.decode().splitlines())}
        return self._refs

    def _moved(self) -> None:
        self._refs = None

    view_ref = remote.view_ref

    def ref(self, ref: str) -> str | None:
        found = self._ref_files.value(ref)
        return self._listed().get(ref) if found == UNSURE else found

    def ref_names_under(self, prefix: str) -> set[str]:
        if self._ref_files.readable:
            return self._ref_files.under(prefix)
        return {name for name in self._listed() if name.startswith(prefix)}

    tip = remote.tip
    heartbeat = remote.heartbeat
    heartbeats = remote.heartbeats

    def local_head(self) -> str | None:
        found = run_git(self.workdir, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
        if found.returncode != 0:
            return None  # unborn, or no HEAD
        return found.stdout.decode().strip() or None

    # --- objects -----------------------------------------------------------------------

    def read(self, oid: str) -> bytes:
        raw = self.objects.raw(oid)
        if raw is None or raw[0] != "blob":
            raise StoreError(f"{oid} is not a blob")
        return raw[1]

    def commit(self, oid: str) -> CommitInfo:
        parsed = self.objects.parsed(oid)
        if parsed is None or parsed[0] != "commit":
            raise StoreError(f"{oid} is not a commit of this clone (fetch it, or it was never pushed)")
        return parsed[1]

    def raw_commit(self, oid: str) -> bytes:
        self.commit(oid)
        raw = self.objects.raw(oid)
        assert raw is not None
        return raw[1]

    def object_type(self, oid: str) -> str | None:
        raw = self.objects.parsed(oid)
        return raw[0] if raw is not None else None

    def _entry(self, commit: str, path: str) -> tuple[str, str] | None:
        """(mode, id) at `path` of a commit's tree; the root tree for ""."""
        node: tuple[str, str] | None = (TREE, self.commit(commit).tree)
        for name in path.split("/") if path else []:
            if node is None or node[0] != TREE:
                return None
            node = next(((mode, oid) for mode, entry, oid in self._tree(node[1]) if entry == name), None)
        return node

    def _tree(self, oid: str) -> list[Entry]:
        parsed = self.objects.parsed(oid)
        if parsed is None or parsed[0] != "tree":
            raise StoreError(f"{oid} is not a tree of this clone")
        return parsed[1]

    def file_at(self, commit: str | None, path: str) -> bytes | None:
        if commit is None:
            return None
        entry = self._entry(commit, path)
        return self.read(entry[1]) if entry is not None and is_blob(entry[0]) else None

    def entry_at(self, commit: str, path: str) -> FileEntry | None:
        entry = self._entry(commit, path) if path else None
        return FileEntry(path, entry[1], entry[0] == LINK) if entry is not None and is_blob(entry[0]) else None

    def tree_id(self, commit: str, path: str = "") -> str | None:
        entry = self._entry(commit, path)
        return entry[1] if entry is not None and entry[0] == TREE else None

    def list_files(self, commit: str, prefix: str) -> list[FileEntry]:
        top = self.tree_id(commit, prefix)
        return list(self._files(top, prefix)) if top is not None else []

    def _files(self, tree: str, base: str) -> Iterator[FileEntry]:
        for mode, name, oid in self._tree(tree):
            path = f"{base}/{name}" if base else name
            if mode == TREE:
                yield from self._files(oid, path)
            elif is_blob(mode):
                yield FileEntry(path, oid, mode == LINK)

    def diff_trees(self, old_tree: str, new_tree: str) -> list[Change]:
        return tree_diff(self._tree, old_tree, new_tree)

    def changed_paths(self, commit: str) -> list[str]:
        info = self.commit(commit)
        if not info.parents:
            return [entry.path for entry in self.list_files(commit, "")]
        return [change.path for change in self.diff_trees(self.commit(info.parents[0]).tree, info.tree)]

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        if ancestor == descendant:
            return True
        if not (HEX.fullmatch(ancestor) and HEX.fullmatch(descendant)):
            return False
        if self.object_type(descendant) == "commit" and ancestor in self.commit(descendant).parents:
            return True  # a push of one commit: no git process for what its parent line says
        return (
            run_git(
                self.git_dir, "merge-base", "--is-ancestor", ancestor, descendant, check=False, env=self.objects_env
            ).returncode
            == 0
        )

    commits_between = _commits_between
    reflog = _reflog

    diff = _diff
    would_merge = _would_merge

    # --- writing objects -----------------------------------------------------------------

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
            base_tree = self.commit(parents[0]).tree
        tree = (self._write_tree(base_tree, files) if files else base_tree) or self._mktree({})
        # Written whole, as pygit2 writes it: `git commit-tree` would trim a name's ends ("w1." -> "w1"),
        # and sign it when the user's configuration says so.
        now = time.time()
        minutes = time.localtime(now).tm_gmtoff // 60
        zone = f"{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"
        who = f"{author.name} <{self.configured_email() or author.email}> {int(now)} {zone}"
        body = "".join(
            [
                f"tree {tree}\n",
                *[f"parent {parent}\n" for parent in parents],
                f"author {who}\n",
                f"committer {who}\n\n",
                message,
            ]
        )
        return self._write_object("commit", body.encode("utf-8"))

    def configured_email(self) -> str | None:
        """This repository's `user.email` (its config, the user's, the system's), read once when a commit is made."""
        if self._email is None:
            found = run_git(self.git_dir, "config", "--get", "user.email", check=False)
            self._email = found.stdout.decode(errors="replace").strip() if found.returncode == 0 else ""
        return self._email or None

    def _write_tree(self, base: str | None, files: Mapping[str, bytes | None]) -> str | None:
        """`base` with `files` written in, only the subtrees on their paths rebuilt; None when
        nothing is left in it."""
        here: dict[str, bytes | None] = {}
        below: dict[str, dict[str, bytes | None]] = {}
        for path, data in files.items():
            head, _, rest = path.partition("/")
            if rest:
                below.setdefault(head, {})[rest] = data
            else:
                here[head] = data
        entries = {name: (mode, oid) for mode, name, oid in self._tree(base)} if base else {}
        for name, data in here.items():
            if data is None:
                entries.pop(name, None)
            else:
                entries[name] = ("100644", self._write_object("blob", data))
        for name, sub in below.items():
            mode, oid = entries.get(name, ("", ""))
            subtree = self._write_tree(oid if mode == TREE else None, sub)
            if subtree is None:
                entries.pop(name, None)
            else:
                entries[name] = (TREE, subtree)
        return self._mktree(entries) if entries else None

    def _write_object(self, kind: str, data: bytes) -> str:
        """An object of `kind` written as it is (git checks its form first)."""
        return run_git(self.git_dir, "hash-object", "-t", kind, "-w", "--stdin", input=data).stdout.decode().strip()

    def _mktree(self, entries: Mapping[str, tuple[str, str]]) -> str:
        kinds = {TREE: "tree", GITLINK: "commit"}
        listing = b"".join(
            f"{mode} {kinds.get(mode, 'blob')} {oid}\t".encode() + name.encode("utf-8", "surrogateescape") + b"\0"
            for name, (mode, oid) in entries.items()
        )
        return run_git(self.git_dir, "mktree", "-z", input=listing).stdout.decode().strip()

    # --- moving refs and fetching (runner.store.remote) ----------------------------------

    def publish(self, updates: list[RefUpdate]) -> Outcome:
        try:
            return remote.publish(self, updates)
        finally:
            self._moved()

    def fetch(self, branches: list[str], heartbeats: bool = False) -> None:
        self._moved()  # with no remote, a fetch is a read of what is here now
        remote.fetch(self, branches, heartbeats)

    def remote_branches(self) -> dict[str, str]:
        return remote.remote_branches(self)

    def remote_tip(self, branch: str) -> str | None:
        return remote.remote_tip(self, branch)

    def write_refs(self, updates: list[RefUpdate]) -> None:
        """One local ref transaction (runner.store.remote): Moved, or RefWriteError."""
        zero = "0" * (2 * self.id_bytes)
        lines = ["start"]
        for update in updates:
            old = [] if update.old == FORCE else [update.old or zero]
            if update.new is None:
                lines.append(" ".join(["delete", update.ref, *old]))
            else:
                lines.append(" ".join(["update", update.ref, update.new, *old]))
        lines += ["prepare", "commit"]
        try:
            done = run_git(
                self.git_dir,
                "update-ref",
                "-m",
                "runner",
                "--stdin",
                input="".join(line + "\n" for line in lines).encode(),
                check=False,
            )
        finally:
            self._moved()
        if done.returncode != 0:
            err = done.stderr.decode(errors="replace").strip()
            if moved := _MOVED.search(err):
                raise remote.Moved(moved["ref"])
            raise remote.RefWriteError(err)

    def mirror_refs(self, refs: Mapping[str, str | None]) -> None:
        self.write_refs([RefUpdate(local, new, FORCE) for local, new in refs.items()])


def _remote_urls(git_dir: Path) -> dict[str, str]:
    """Each remote's name and URL, as `git remote -v` would say them."""
    found = run_git(git_dir, "config", "-z", "--get-regexp", r"^remote\..*\.url$", check=False).stdout
    urls: dict[str, str] = {}
    for record in found.decode(errors="replace").split("\0"):
        key, _, url = record.partition("\n")
        if key.startswith("remote.") and key.endswith(".url") and len(key) > len("remote..url"):
            urls.setdefault(key[len("remote.") : -len(".url")], url)
    return urls


def known_repository(git_dir: Path, workdir: Path | None = None) -> tuple[Path, int, Path]:
    """(git dir, bytes of an object id, work tree) of a repository whose git dir the caller
    knows, read from its config file (no git process): the server's hook, a one-shot listing.
    OSError when the config cannot be read."""
    config = (git_dir / "config").read_text(errors="replace")
    sha256 = re.search(r"(?im)^\s*objectformat\s*=\s*sha256\s*$", config) is not None
    return git_dir, 32 if sha256 else 20, workdir or git_dir


def receiving(path: str | Path) -> PlumbingStore:
    """The server's repository during pre-receive: the pushed objects wait in a quarantine
    folder that git names in the hook's environment; its reads look there too."""
    import os

    names = ("GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_QUARANTINE_PATH")
    found = {
        name: os.path.abspath(value) if name != "GIT_ALTERNATE_OBJECT_DIRECTORIES" else value
        for name in names
        if (value := os.environ.get(name))
    }
    try:
        known = known_repository(Path(path).resolve())  # git runs the hook in the repository's git dir
    except OSError:
        return PlumbingStore(path, remote=None, objects_env=found)
    return PlumbingStore(path, remote=None, objects_env=found, known=known)
