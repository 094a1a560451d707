"""One store contract (issue 34, point 2), as huey runs every storage against the same tests:
each test here runs on the in-memory store, on a git repository of its own, and (where the
contract is about the queue's home) on a clone of a bare remote. runner.store.Store (refs,
objects, commits, publish, fetch) is the contract every store keeps, the plumbing store too;
runner.store.Workspace (worktrees, the index, merges, history, gc) the one GitStore and
MemoryStore keep besides (issue 47.1): each store runs exactly the tests of what it claims.
A method a caller uses and this suite does not hold the stores to is a defect.

A "home" is a store and what the test needs around it: a second writer on the same queue
(another clone, another handle, the same dict), and a way to stage a file for a commit.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner.store import (
    ABSENT,
    FORCE,
    Author,
    Change,
    Conflict,
    FileEntry,
    Lost,
    Merged,
    RefUpdate,
    Store,
    StoreError,
    Won,
    Workspace,
)
from runner.store.choice import open_store
from runner.store.memory import MemoryStore

ALICE = Author("alice", "alice@example.com")
ZERO = "0" * 40
BRANCH = "refs/heads/runner/queue"


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


@dataclass
class Home:
    kind: str
    store: Any  # a Store; a Workspace too for the homes of WORKSPACES
    writer: Callable[[], Store]  # another writer on the same queue
    stage: Callable[[str, bytes], None]  # put a file in the index being committed
    tmp: Path


def memory_home(tmp: Path) -> Home:
    store = MemoryStore(tmp / "state")

    def stage(path: str, data: bytes) -> None:
        store.index[path] = data

    return Home("memory", store, lambda: store, stage, tmp)


def git_stage(workdir: Path) -> Callable[[str, bytes], None]:
    def stage(path: str, data: bytes) -> None:
        (workdir / path).parent.mkdir(parents=True, exist_ok=True)
        (workdir / path).write_bytes(data)
        git(workdir, "add", path)

    return stage


def git_home(tmp: Path, one_shot: bool = False) -> Home:
    repo = tmp / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    kind = "plumbing" if one_shot else "git"
    return Home(
        kind,
        open_store(repo, remote=None, one_shot=one_shot),
        lambda: open_store(repo, remote=None, one_shot=one_shot),
        git_stage(repo),
        tmp,
    )


def git_remote_home(tmp: Path, one_shot: bool = False) -> Home:
    bare = tmp / "remote.git"
    git(tmp, "init", "-q", "--bare", str(bare))
    for name in ("mine", "theirs"):
        git(tmp, "clone", "-q", str(bare), str(tmp / name))
    kind = "plumbing-remote" if one_shot else "git-remote"
    return Home(
        kind,
        open_store(tmp / "mine", one_shot=one_shot),
        lambda: open_store(tmp / "theirs", one_shot=one_shot),
        git_stage(tmp / "mine"),
        tmp,
    )


# The plumbing store (git's commands, no pygit2: what `runner claim` opens) is held to the same contract.
HOMES = {
    "memory": memory_home,
    "git": git_home,
    "git-remote": git_remote_home,
    "plumbing": lambda tmp: git_home(tmp, one_shot=True),
    "plumbing-remote": lambda tmp: git_remote_home(tmp, one_shot=True),
}


WORKSPACES = (
    "memory",
    "git",
    "git-remote",
)  # the stores that are a Workspace too (the plumbing store opens a GitStore)


@pytest.fixture(params=list(HOMES))
def home(request, tmp_path: Path) -> Home:
    """Every store: a test of what runner.store.Store promises."""
    return HOMES[request.param](tmp_path)


@pytest.fixture(params=list(WORKSPACES))
def workspace(request, tmp_path: Path) -> Home:
    """The stores that are a Workspace: a test of what runner.store.Workspace adds."""
    return HOMES[request.param](tmp_path)


@pytest.fixture(params=["memory", "git", "plumbing"])
def local_home(request, tmp_path: Path) -> Home:
    """A store that is the queue's home itself: its own refs are the queue's."""
    return HOMES[request.param](tmp_path)


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def commit(store: Store, files: dict[str, bytes | None], parents: list[str] = (), message: str = "a commit\n") -> str:
    return store.make_commit(list(parents), files, message, ALICE)


def create(store: Store, ref: str, new: str) -> None:
    assert store.publish([RefUpdate(ref, new, ABSENT)]) == Won()


# --- objects ---------------------------------------------------------------------------------


def test_objects_are_named_as_git_names_them(home: Home):
    store = home.store
    first = commit(store, {"plans/steps/a.md": b"---\nstep: a\n---\n", "runner.toml": b""})
    entry = store.entry_at(first, "plans/steps/a.md")
    assert entry == FileEntry("plans/steps/a.md", blob_id(b"---\nstep: a\n---\n"))
    assert store.read(entry.oid) == b"---\nstep: a\n---\n"
    assert [store.object_type(oid) for oid in (first, store.tree_id(first), entry.oid, "1" * 40)] == [
        "commit",
        "tree",
        "blob",
        None,
    ]
    same = commit(store, {"runner.toml": b"", "plans/steps/a.md": b"---\nstep: a\n---\n"}, message="another\n")
    assert store.tree_id(same) == store.tree_id(first) and same != first  # the same files are the same tree


def test_files_folders_and_commits_read_back(home: Home):
    store = home.store
    first = commit(
        store, {"plans/steps/a.md": b"a", "plans/steps/deep/b.md": b"b", "runner.toml": b"t"}, message="first\n"
    )
    assert store.file_at(first, "plans/steps/deep/b.md") == b"b"
    assert (
        store.file_at(first, "plans/steps") is None
        and store.file_at(first, "nope") is None
        and store.file_at(None, "runner.toml") is None
    )
    assert store.entry_at(first, "plans") is None and store.entry_at(first, "nope.md") is None
    assert (
        store.tree_id(first, "plans/steps") is not None
        and store.tree_id(first, "runner.toml") is None
        and store.tree_id(first, "nope") is None
    )
    assert sorted(e.path for e in store.list_files(first, "plans/steps")) == [
        "plans/steps/a.md",
        "plans/steps/deep/b.md",
    ]
    assert store.list_files(first, "nope") == [] and store.list_files(first, "runner.toml") == []
    info = store.commit(first)
    assert (info.id, info.parents, info.tree, info.message, info.author) == (
        first,
        (),
        store.tree_id(first),
        "first\n",
        "alice",
    )
    assert isinstance(info.time, int)
    assert sorted(store.changed_paths(first)) == ["plans/steps/a.md", "plans/steps/deep/b.md", "runner.toml"]
    raw = store.raw_commit(first)
    assert raw.startswith(f"tree {info.tree}\n".encode()) and raw.endswith(b"\n\nfirst\n") and b"\nparent " not in raw
    with pytest.raises(StoreError):
        store.read(first)
    with pytest.raises(StoreError):
        store.commit(store.tree_id(first))


def test_a_commit_names_its_author_exactly_as_given(home: Home):
    """A worker id may end in a dot; git's own commit commands trim such ends of a name (and
    the server hook then finds an author that is not the actor the commit names)."""
    made = home.store.make_commit([], {"a.md": b"a"}, "one\n", Author("w1.", "w1.@host-a"))
    assert home.store.commit(made).author == "w1."
    email = home.store.configured_email() or "w1.@host-a"  # git's own commits would carry user.email too
    assert f"\nauthor w1. <{email}> ".encode() in home.store.raw_commit(made)


def test_a_commit_carries_the_repositorys_configured_email(home: Home):
    """Not a made-up one (issue 46): a git repository's user.email, read once by each store."""
    store, expected = home.writer(), "w1@host-a"  # the memory store has no configuration
    if home.kind != "memory":
        git(store.workdir, "config", "user.email", "alice@example.org")
        store, expected = home.writer(), "alice@example.org"
    assert (store.configured_email() or "w1@host-a") == expected
    made = store.make_commit([], {"a.md": b"a"}, "one\n", Author("w1", "w1@host-a"))
    assert f"\nauthor w1 <{expected}> ".encode() in store.raw_commit(made)


def test_a_commit_on_a_parent_changes_only_what_it_names(home: Home):
    store = home.store
    first = commit(store, {"a/x.md": b"x", "b/y.md": b"y", "c.md": b"c"})
    second = commit(store, {"a/x.md": None, "b/y.md": b"y2", "d/e.md": b"e"}, [first], message="second\n")
    assert store.commit(second).parents == (first,)
    assert store.tree_id(second, "a") is None  # a folder left empty is gone, as git has no empty trees
    assert store.file_at(second, "c.md") == b"c" and store.file_at(first, "b/y.md") == b"y"  # nothing is rewritten
    assert sorted(store.changed_paths(second)) == ["a/x.md", "b/y.md", "d/e.md"]
    changes = sorted(store.diff_trees(store.tree_id(first), store.tree_id(second)), key=lambda c: c.path)
    assert changes == [
        Change("a/x.md", None, "D"),
        Change("b/y.md", blob_id(b"y2"), "M"),
        Change("d/e.md", blob_id(b"e"), "A"),
    ]
    on_tree = store.make_commit([second], {"c.md": b"c2"}, "on a tree\n", ALICE, base_tree=store.tree_id(first))
    assert (
        store.file_at(on_tree, "a/x.md") == b"x" and store.file_at(on_tree, "c.md") == b"c2"
    )  # base_tree, not the parent's
    assert (
        getattr(store, "_full", None) is None
    )  # the plumbing store did all this itself: a claim that lost a race imports no pygit2


def test_a_tree_diff_says_a_change_of_kind_as_a_deletion_and_an_addition(home: Home):
    store = home.store
    first = commit(store, {"f.md": b"f", "gone/a.md": b"a", "kept/b.md": b"b", "becomes-folder": b"x"})
    second = commit(
        store,
        {"gone/a.md": None, "f.md": b"f2", "becomes-folder": None, "becomes-folder/c.md": b"c", "new/d/e.md": b"e"},
        [first],
    )
    changes = sorted(
        store.diff_trees(store.tree_id(first), store.tree_id(second)), key=lambda c: (c.path, c.kind != "D")
    )
    assert changes == [
        Change("becomes-folder", None, "D"),
        Change("becomes-folder/c.md", blob_id(b"c"), "A"),
        Change("f.md", blob_id(b"f2"), "M"),
        Change("gone/a.md", None, "D"),
        Change("new/d/e.md", blob_id(b"e"), "A"),
    ]
    assert store.diff_trees(store.tree_id(second), store.tree_id(second)) == []


def history(store: Store) -> tuple[str, str, str, str, str]:
    """root, side, main, merge (of side into main), top."""
    root = commit(store, {"f": b"0"}, message="root\n")
    side = commit(store, {"g": b"side"}, [root], message="side\n")
    main = commit(store, {"f": b"1"}, [root], message="main\n")
    merge = commit(store, {"g": b"side"}, [main, side], message="merge\n")
    return root, side, main, merge, commit(store, {"f": b"2"}, [merge], message="top\n")


def test_a_log_follows_first_parents_newest_first(workspace: Home):
    root, _, main, merge, top = history(workspace.store)
    assert [c.id for c in workspace.store.log(top)] == [top, merge, main, root]


def test_history_reads_in_the_order_callers_rely_on(home: Home):
    store = home.store
    root, side, main, merge, top = history(store)
    assert store.is_ancestor(root, top) and store.is_ancestor(side, top) and store.is_ancestor(top, top)
    assert not store.is_ancestor(top, root) and not store.is_ancestor(side, main)
    between = [c.id for c in store.commits_between(main, top)]
    assert (
        sorted(between) == sorted([side, merge, top])
        and between[-1] == top
        and between.index(side) < between.index(merge)
    )
    everything = [c.id for c in store.commits_between(None, top)]
    assert everything[0] == root and everything[-1] == top and len(everything) == 5
    assert store.commit(merge).parents == (main, side)
    assert f"parent {main}\nparent {side}\n".encode() in store.raw_commit(merge)


def test_merges_fast_forward_combine_or_name_the_conflict(workspace: Home):
    store = workspace.store
    base = commit(store, {"a": b"a\n", "b": b"b\n", "c": b"c\n"})
    ours = commit(store, {"a": b"ours\n"}, [base])
    theirs = commit(store, {"b": b"theirs\n", "new": b"n\n"}, [base])
    assert store.merge(base, ours, "m\n", ALICE) == Merged(ours)  # ours is behind: a fast-forward
    merged = store.merge(ours, theirs, "merge theirs\n", ALICE)
    assert isinstance(merged, Merged) and store.commit(merged.commit).parents == (ours, theirs)
    assert [store.file_at(merged.commit, p) for p in ("a", "b", "c", "new")] == [b"ours\n", b"theirs\n", b"c\n", b"n\n"]
    clash = commit(store, {"a": b"clash\n", "c": None}, [base])
    assert store.merge(ours, clash, "m\n", ALICE) == Conflict(("a",))


def test_a_merge_keeps_a_deletion_made_on_the_other_side(workspace: Home):
    store = workspace.store
    base = commit(store, {"a": b"a\n", "gone": b"g\n"})
    ours = commit(store, {"a": b"ours\n"}, [base])
    theirs = commit(store, {"gone": None}, [base])
    merged = store.merge(ours, theirs, "merge theirs\n", ALICE)
    assert isinstance(merged, Merged)
    assert [e.path for e in store.list_files(merged.commit, "")] == ["a"] and store.file_at(
        merged.commit, "a"
    ) == b"ours\n"


def test_a_diff_and_a_merge_that_would_be_are_what_the_board_shows(home: Home):
    store = home.store
    base = commit(store, {"a": b"a\n", "b": b"b\n"})
    ours = commit(store, {"a": b"ours\n"}, [base])
    theirs = commit(store, {"b": b"theirs\n"}, [base])
    patch = store.diff(base, theirs).decode()
    assert "diff --git a/b b/b" in patch and "-b" in patch and "+theirs" in patch and "a/a" not in patch
    assert store.diff(ours, theirs, fork=True) == store.diff(base, theirs)  # from where theirs left ours
    assert store.diff(store.tree_id(base), store.tree_id(theirs)) == patch.encode()  # trees too
    tree = store.would_merge(ours, theirs)
    assert (
        isinstance(tree, str)
        and "+ours" in store.diff(theirs, tree).decode()
        and "+theirs" in store.diff(ours, tree).decode()
    )
    assert store.tip("runner/queue") is None and store.would_merge(
        ours, commit(store, {"a": b"clash\n"}, [base])
    ) == Conflict(("a",))


# --- refs: compare-and-swap, all or none -----------------------------------------------------------


def test_publish_moves_every_ref_or_none(home: Home):
    store = home.store
    one, two, three = (commit(store, {"f": bytes([n])}) for n in range(3))
    other = "refs/heads/runner/integration"
    assert store.tip("runner/queue") is None
    create(store, BRANCH, one)
    assert store.tip("runner/queue") == one and not store.view_lags
    assert store.publish([RefUpdate(BRANCH, two, ABSENT)]) == Lost(BRANCH)  # it exists now
    assert store.publish([RefUpdate(BRANCH, two, three)]) == Lost(BRANCH)  # not what it holds
    assert store.publish([RefUpdate(other, one, ABSENT), RefUpdate(BRANCH, three, two)]) == Lost(BRANCH)
    assert store.tip("runner/integration") is None and store.tip("runner/queue") == one  # neither moved
    assert store.publish([RefUpdate(other, one, ABSENT), RefUpdate(BRANCH, two, one)]) == Won()
    assert (store.tip("runner/integration"), store.tip("runner/queue")) == (one, two)
    assert store.publish([RefUpdate(BRANCH, three, FORCE)]) == Won() and store.tip("runner/queue") == three
    assert store.publish([RefUpdate(other, None, one)]) == Won() and store.tip("runner/integration") is None
    assert store.remote_branches() == {"runner/queue": three}  # asked of the queue's home


def test_a_second_writer_wins_the_race_and_fetch_shows_it(home: Home):
    store, theirs = home.store, home.writer()
    base = commit(store, {"f": b"base"})
    create(store, BRANCH, base)
    theirs.fetch(["runner/queue"])
    assert theirs.tip("runner/queue") == base
    their_move = commit(theirs, {"f": b"theirs"}, [base])
    assert theirs.publish([RefUpdate(BRANCH, their_move, base)]) == Won()
    assert store.remote_tip("runner/queue") == their_move  # the home's ref advertisement, before any fetch
    my_move = commit(store, {"f": b"mine"}, [base])
    assert store.publish([RefUpdate(BRANCH, my_move, base)]) == Lost(BRANCH)  # exactly one winner
    store.fetch(["runner/queue"])
    assert store.tip("runner/queue") == their_move and store.file_at(their_move, "f") == b"theirs"
    rebuilt = commit(store, {"f": b"mine"}, [their_move])
    assert store.publish([RefUpdate(BRANCH, rebuilt, their_move)]) == Won()


def test_heartbeats_are_refs_of_their_own(home: Home):
    store, theirs = home.store, home.writer()
    beat_one, beat_two = commit(store, {}, message="beat 1\n"), commit(store, {}, message="beat 2\n")
    create(store, "refs/runner/heartbeats/w1", beat_one)
    create(store, "refs/runner/heartbeats/w2", beat_two)
    assert store.heartbeat("w1") == beat_one and store.heartbeat("w3") is None
    assert store.heartbeats() == {"w1": beat_one, "w2": beat_two}
    theirs.fetch([], heartbeats=True)
    assert theirs.publish([RefUpdate("refs/runner/heartbeats/w2", None, beat_two)]) == Won()
    store.fetch([], heartbeats=True)
    assert store.heartbeats() == {"w1": beat_one}


def test_a_reflog_lists_a_refs_moves_newest_first(local_home: Home):
    store = local_home.store
    one, two = commit(store, {"f": b"1"}), commit(store, {"f": b"2"})
    create(store, BRANCH, one)
    assert store.publish([RefUpdate(BRANCH, two, one)]) == Won()
    log = store.reflog(BRANCH)
    assert [(old, new) for old, new, _ in log] == [(one, two), (ZERO, one)]
    assert log[0][2] >= log[1][2] and all(isinstance(when, int) for *_, when in log)
    assert store.ref(BRANCH) == two and store.ref("refs/heads/nope") is None and store.reflog("refs/heads/nope") == []


def test_a_fresh_repository_has_nothing_checked_out_and_a_private_handle_sees_the_same(home: Home):
    store = home.store
    assert store.local_head() is None
    first = commit(store, {"f": b"x"})
    create(store, BRANCH, first)
    other = store.private()
    assert other.tip("runner/queue") == first and other.file_at(first, "f") == b"x"
    assert isinstance(store.workspace().gc(), str) and store.tip("runner/queue") == first
    assert store.state_dir.is_dir() and store.workdir.is_dir()
    assert (store.remote is None) == (store.remote_url is None) == (not home.kind.endswith("-remote"))


# --- worktrees and the index -----------------------------------------------------------------------


def test_a_worktree_holds_a_commit_and_its_changes_become_a_tree(workspace: Home):
    home = workspace
    store = home.store
    base = commit(store, {"keep.txt": b"keep\n", "edit.txt": b"one\n", "gone.txt": b"bye\n", "src/m.py": b"x = 1\n"})
    path = home.tmp / "worktrees" / "a"
    store.add_worktree(path, base)
    assert (path / "src" / "m.py").read_bytes() == b"x = 1\n" and (path / "gone.txt").exists()
    (path / "edit.txt").write_bytes(b"one\ntwo\n")
    (path / "gone.txt").unlink()
    (path / "new" / "n.txt").parent.mkdir()
    (path / "new" / "n.txt").write_bytes(b"new\n")
    tree, changed = store.snapshot_worktree(path, base)
    assert changed == ["edit.txt", "gone.txt", "new/n.txt"]
    result = store.make_commit([base], {}, "the step's result\n", ALICE, base_tree=tree)
    assert store.file_at(result, "edit.txt") == b"one\ntwo\n" and store.file_at(result, "gone.txt") is None
    assert store.file_at(result, "keep.txt") == b"keep\n" and store.file_at(result, "new/n.txt") == b"new\n"
    patch = store.diff_text(path, base).decode()
    assert "diff --git a/edit.txt b/edit.txt" in patch and "+two" in patch and "-bye" in patch and "+new" in patch
    store.remove_worktree(path)
    store.prune_worktrees()
    assert not path.exists()


def test_staged_files_are_what_the_commit_being_made_holds(workspace: Home):
    home = workspace
    home.stage("plans/steps/a.md", b"---\nstep: a\n---\n")
    home.stage("notes.txt", b"n\n")
    entries, changed = home.store.staged_files()
    assert sorted(entries, key=lambda e: e.path) == [
        FileEntry("notes.txt", blob_id(b"n\n")),
        FileEntry("plans/steps/a.md", blob_id(b"---\nstep: a\n---\n")),
    ]
    assert changed == {"notes.txt", "plans/steps/a.md"}


# --- the contract is the protocol --------------------------------------------------------------------


def members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")} | set(
        vars(protocol).get("__annotations__", {})
    )


def test_each_store_implements_exactly_what_it_claims_and_callers_ask_for_no_other():
    import ast

    from runner.store.git import GitStore
    from runner.store.plumbing import PlumbingStore

    store_only, workspace_only = members(Store), members(Workspace)
    assert store_only and workspace_only and not store_only & workspace_only
    for implementation, claims in (
        (GitStore, store_only | workspace_only),
        (MemoryStore, store_only | workspace_only),
        (PlumbingStore, store_only),
    ):
        missing = sorted(
            name for name in claims if not hasattr(implementation, name) and name not in Store.__annotations__
        )
        assert missing == [], f"{implementation.__name__} lacks {missing}"
    # The plumbing store is a Store and nothing more: no member of the Workspace, nothing handed on.
    assert sorted(name for name in workspace_only if hasattr(PlumbingStore, name)) == [] and "__getattr__" not in vars(
        PlumbingStore
    )
    root = Path(__file__).resolve().parents[1] / "runner"
    asked = set()
    for path in root.rglob("*.py"):
        if path.parent.name == "store":
            continue  # the stores' own insides
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "store"
                or isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "store"
            ):
                asked.add(node.attr)
    assert sorted(asked - store_only - workspace_only) == [], "callers use store methods the contract does not name"


def test_the_plumbing_store_opens_its_workspace_only_when_asked(tmp_path: Path):
    home = git_home(tmp_path, one_shot=True)
    first = commit(home.store, {"f": b"x"})
    create(home.store, BRANCH, first)
    assert home.store._workspace is None  # nothing of pygit2 yet
    workspace = home.store.workspace()
    assert workspace is home.store.workspace() and type(workspace).__name__ == "GitStore"
    assert workspace.tip("runner/queue") == first and [c.id for c in workspace.log(first)] == [first]


@pytest.mark.parametrize("kind", ["git", "plumbing"])
def test_refs_read_the_same_loose_packed_deleted_or_symbolic(kind: str, tmp_path: Path):
    """Both git stores read ref files through runner.store.reffiles (no git process); what the
    files cannot say (a symbolic ref) is asked of git."""
    home = HOMES[kind](tmp_path)
    store = home.store
    one, two = commit(store, {"f": b"1"}), commit(store, {"f": b"2"})
    create(store, BRANCH, one)
    create(store, "refs/runner/heartbeats/w1", one)
    git(tmp_path / "repo", "pack-refs", "--all")
    assert store.private().tip("runner/queue") == one and store.private().heartbeats() == {"w1": one}
    assert (
        store.publish([RefUpdate(BRANCH, two, one)]) == Won() and store.private().tip("runner/queue") == two
    )  # loose again, over a packed one
    assert store.publish([RefUpdate("refs/runner/heartbeats/w1", None, one)]) == Won()
    assert store.private().heartbeats() == {} and store.private().heartbeat("w1") is None
    git(tmp_path / "repo", "symbolic-ref", "refs/heads/alias", BRANCH)
    assert store.private().ref("refs/heads/alias") == two
