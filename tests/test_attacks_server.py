"""Issue 19's attacks on the server hook, each repeated against a real hooked remote: the
push is refused with its own one-line reason and the ref does not move. Where a reader
must survive without the hook, it is attacked without it too.

Time on the server: the hook judges a lease by when an update reached the server, as its
reflog recorded it; `arriving(seconds_ago)` makes an update arrive in the past (see tests/support/hooked.py)."""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pygit2
import pytest
from support.hooked import (
    IDENTITIES,
    INTEGRATION,
    QUEUE,
    accepted,
    arriving,
    claim,
    clone,
    forge,
    push_commit,
    record,
    refused,
    tip,
)
from support.repos import edit, git, make_remote, runner, step_file

from runner.core.config import DEFAULT_TOML
from runner.core.events import write_step_event
from runner.core.machine import Event, Kind
from runner.core.model import Step, utc_now
from runner.queue.queue import Queue, author_for
from runner.store import FORCE, RefUpdate
from runner.store.git import GitStore

BEAT = "refs/runner/heartbeats/w1"


@contextmanager
def pushing_as(pusher: str | None):
    """Pushes made inside come from `pusher`, as the git server names it in $RUNNER_PUSHER."""
    saved = os.environ.pop("RUNNER_PUSHER", None)
    if pusher is not None:
        os.environ["RUNNER_PUSHER"] = pusher
    try:
        yield
    finally:
        os.environ.pop("RUNNER_PUSHER", None)
        if saved is not None:
            os.environ["RUNNER_PUSHER"] = saved


def configure(queue: Queue, extra: str) -> None:
    queue.edit(lambda snap: {"runner.toml": (DEFAULT_TOML + extra).encode()}, "configure runner", "alice")


def commit_of(queue: Queue, parents: list[str], tree: str, message: str = "x\n", author: str = "mallory") -> str:
    repo = queue.store.repo
    sig = pygit2.Signature(author, f"{author}@example.com")
    return str(repo.create_commit(None, sig, sig, message, pygit2.Oid(hex=tree), [pygit2.Oid(hex=p) for p in parents]))


def raw_commit(queue: Queue, text: bytes) -> str:
    """A commit object written byte for byte (git fsck's rules, but any encoding)."""
    proc = subprocess.run(
        ["git", "hash-object", "-t", "commit", "-w", "--stdin"],
        cwd=queue.store.git_dir,
        input=text,
        capture_output=True,
        check=True,
    )
    return proc.stdout.decode().strip()


# --- 1, 2: the queue branch is linear, every new commit is checked -------------------------------


def test_a_rewind_disguised_as_a_fast_forward_is_refused(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    record(queue, Kind.COMPLETE, "w1", "01-a")
    snap = queue.snapshot()
    old = queue.store.commit(snap.tip).parents[0]  # 01-a still claimed there
    disguised = commit_of(queue, [old, snap.tip], queue.store.commit(old).tree, "merge\n")
    assert queue.store.is_ancestor(snap.tip, disguised)  # git calls it a fast-forward
    refused(
        remote,
        lambda: queue.store.publish([RefUpdate(QUEUE, disguised, snap.tip)]),
        "the queue branch is linear: a merge commit is refused",
    )


def test_forged_commits_merged_in_from_a_side_branch_are_refused(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    snap = queue.snapshot()
    step = snap.plan.find("01-a")
    believed = Step(
        step.id, step.path, {**step.meta, "assignee": "w2", "holder": {}}, step.text
    )  # w2 pretends it holds 01-a
    forged = write_step_event(
        believed, Event(Kind.COMPLETE, "w2", utc_now(), step="01-a", attempt=1), Queue.context(snap, step)
    )
    side = queue.store.make_commit([snap.tip], {step.path: forged.text.encode()}, forged.message, author_for("w2"))
    empty_merge = commit_of(queue, [snap.tip, side], queue.store.commit(snap.tip).tree, "merge\n")
    said = refused(
        remote,
        lambda: queue.store.publish([RefUpdate(QUEUE, empty_merge, snap.tip)]),
        "the step is held by 'w1', not 'w2'",
    )
    assert side[:10] in said  # the side branch's commit is checked like any other

    # Even commits that would pass one by one may not arrive through a merge.
    legal = queue.step_change(
        snap, Event(Kind.COMPLETE, "w1", utc_now(), step="01-a", attempt=1, incarnation="w1.test")
    )
    side = queue.store.make_commit([snap.tip], legal.files, legal.message, author_for("w1"))
    merge = commit_of(queue, [snap.tip, side], queue.store.commit(side).tree, "merge\n")
    refused(remote, lambda: queue.store.publish([RefUpdate(QUEUE, merge, snap.tip)]), "the queue branch is linear")


# --- 3: runner's refs are type-checked; readers skip a malformed heartbeat -----------------------


def test_a_blob_or_a_tag_or_a_foreign_commit_pushed_as_a_heartbeat_is_refused(remote: Path, queue: Queue):
    store = queue.store
    blob = str(store.repo.create_blob(b"not a heartbeat\n"))
    refused(
        remote,
        lambda: store.publish([RefUpdate(BEAT, blob, None)]),
        "must point at a heartbeat commit, not a blob",
        ref=BEAT,
    )
    tag = str(
        store.repo.create_tag(
            "t", pygit2.Oid(hex=queue.snapshot().tip), pygit2.GIT_OBJECT_COMMIT, pygit2.Signature("m", "m@x"), "tag\n"
        )
    )
    refused(
        remote,
        lambda: store.publish([RefUpdate(BEAT, tag, None)]),
        "must point at a heartbeat commit, not a tag",
        ref=BEAT,
    )
    refused(
        remote,
        lambda: store.publish([RefUpdate(BEAT, queue.snapshot().tip, None)]),
        "parent is the heartbeat it replaces",
        ref=BEAT,
    )
    other = "refs/runner/heartbeats/w2"
    beat = queue.beat("w1", {})
    refused(remote, lambda: store.publish([RefUpdate(other, beat, None)]), "is not a heartbeat of w2", ref=other)
    refused(
        remote,
        lambda: store.publish([RefUpdate("refs/runner/elsewhere", beat, None)]),
        "runner keeps no such ref",
        ref="refs/runner/elsewhere",
    )


def test_without_the_hook_readers_skip_and_report_a_malformed_heartbeat(tmp_path: Path):
    _bare, (repo,) = make_remote(tmp_path)  # no hook on this remote
    runner(repo, "init")
    edit(repo, dict([step_file("01-a"), step_file("02-b")]), "add steps")
    runner(repo, "claim", "--id", "w9")  # a claimed step: every tick reads the heartbeats
    blob = (
        subprocess.run(
            ["git", "hash-object", "-w", "--stdin"], cwd=repo, input=b"junk\n", capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    git(repo, "push", "-q", "origin", f"{blob}:refs/runner/heartbeats/evil")

    assert runner(repo, "status").returncode == 0
    for args in (["workers"], ["tick", "--id", "w1"]):
        done = runner(repo, *args)
        assert "skipped the heartbeat ref of 'evil'" in done.stderr, done.stderr
    assert "01-a" in runner(repo, "status").stdout


# --- 4: heartbeat deletion --------------------------------------------------------------------


def test_a_live_heartbeat_may_not_be_deleted_without_identities(remote: Path, queue: Queue):
    beat = queue.beat("w1", {"state": "idle"})
    refused(
        remote,
        lambda: queue.store.publish([RefUpdate(BEAT, None, beat)]),
        "a live worker's heartbeat may not be deleted",
        ref=BEAT,
    )
    with arriving(2 * 3600):
        quiet = queue.beat("w1", {"state": "idle"})  # its last beat reached the server two hours ago
    accepted(queue.store.publish([RefUpdate(BEAT, None, quiet)]))
    assert tip(remote, BEAT) is None


def test_with_identities_only_the_worker_itself_or_a_person_deletes_its_heartbeat(
    remote: Path, queue: Queue, tmp_path: Path
):
    configure(queue, IDENTITIES)
    with pushing_as("key-a"):
        beat = queue.beat("w1", {"state": "idle"})
    delete = lambda: queue.store.publish([RefUpdate(BEAT, None, beat)])
    for pusher, reason in (
        (
            "key-b",
            "only w1 itself or a person may delete its heartbeat: pusher 'key-b' may act as w2, not as worker 'w1'",
        ),
        ("carol", "pusher 'carol' is neither a worker key"),
        (None, "cannot tell who pushes"),
    ):
        with pushing_as(pusher):
            refused(remote, delete, reason, ref=BEAT)
    with pushing_as("key-a"):
        accepted(delete())
        again = queue.beat("w1", {"state": "idle"})
    person = clone(remote, tmp_path / "person")
    with pushing_as("bob"):
        accepted(person.store.publish([RefUpdate(BEAT, None, again)]))
    with pushing_as("key-a"):
        anew = queue.beat("w1", {"state": "idle"})  # a worker whose heartbeat vanished makes it anew
    assert tip(remote, BEAT) == anew


# --- 5: the integration branch's protection is not switched off in the same push ----------------


def test_renaming_the_integration_branch_does_not_unprotect_it_in_the_same_push(remote: Path, queue: Queue):
    queue.store.fetch(["runner/integration"])
    base = queue.store.tip("runner/integration")
    work = queue.store.make_commit([base], {"a.txt": b"a\n"}, "work\n", author_for("w1"))
    accepted(queue.store.publish([RefUpdate(INTEGRATION, work, base)]))
    elsewhere = queue.store.make_commit([base], {"b.txt": b"b\n"}, "other\n", author_for("w1"))
    accepted(queue.store.publish([RefUpdate("refs/heads/elsewhere", elsewhere, None)]))

    snap = queue.snapshot()
    renamed = (
        DEFAULT_TOML.replace('integration_branch = "runner/integration"', 'integration_branch = "elsewhere"')
    ).encode()
    edit_commit = queue.store.make_commit(
        [snap.tip], {"runner.toml": renamed}, "send merges elsewhere\n", author_for("mallory")
    )
    rename = RefUpdate(QUEUE, edit_commit, snap.tip)
    refused(
        remote,
        lambda: queue.store.publish([rename, RefUpdate(INTEGRATION, base, FORCE)]),
        f"{INTEGRATION}: not a fast-forward",
    )
    assert tip(remote, INTEGRATION) == work
    # The name the push leaves behind is protected too.
    refused(
        remote,
        lambda: queue.store.publish([rename, RefUpdate("refs/heads/elsewhere", base, FORCE)]),
        "refs/heads/elsewhere: not a fast-forward",
    )
    assert tip(remote, "refs/heads/elsewhere") == elsewhere


def test_with_identities_only_an_admin_changes_the_branch_names_or_hooks(remote: Path, queue: Queue):
    configure(queue, IDENTITIES)
    text = DEFAULT_TOML + IDENTITIES
    for changed in (
        text.replace('integration_branch = "runner/integration"', 'integration_branch = "elsewhere"'),
        text.replace('step_branch_prefix = "runner/steps/"', 'step_branch_prefix = "mine/"'),
        text.replace('key-b = ["w2"]', 'key-b = ["w2", "w1"]'),
    ):
        edit = lambda changed=changed: push_commit(
            queue, {"runner.toml": changed.encode()}, "change runner.toml\n", author="bob"
        )
        with pushing_as("bob"):
            refused(remote, edit, "only [hooks] admins may change [hooks], [notify] or the branch names (pusher 'bob')")
        with pushing_as("key-a"):
            refused(remote, edit, "only people edit the plan: pusher 'key-a' is a worker key")
    with pushing_as("alice"):
        accepted(
            push_commit(
                queue,
                {
                    "runner.toml": text.replace('"elsewhere"', '"x"')
                    .replace('key-b = ["w2"]', 'key-b = ["w2", "w3"]')
                    .encode()
                },
                "give key-b w3\n",
                author="alice",
            )
        )


# --- 6: a takeover of a live claim ------------------------------------------------------------


def takeover(queue: Queue, actor: str, step_id: str = "01-a"):
    """What a worker whose clock jumped ahead (or that does not wait) publishes: a takeover now."""
    return record(queue, Kind.TAKEOVER, actor, step_id, reason="lease expired")


def test_a_takeover_one_second_after_the_claim_is_refused(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")  # its heartbeat rides in the same push
    refused(
        remote,
        lambda: takeover(queue, "w2"),
        "w1's heartbeat for 01-a attempt 1 reached this server",
        "a live claim is not taken over",
    )
    claim(queue, "w1", "04-d", beat=False)  # no heartbeat: the claim's own arrival is the evidence
    refused(remote, lambda: takeover(queue, "w2", "04-d"), "w1's claim for 04-d attempt 1 reached this server")


def test_a_takeover_after_the_lease_passed_on_the_servers_clock_is_accepted(remote: Path, queue: Queue):
    with arriving(2 * 3600):
        claim(queue, "w1", "01-a")
    takeover(queue, "w2")
    assert queue.snapshot().plan.find("01-a").assignee == "w2"


def test_a_fresh_heartbeat_keeps_an_old_claim_alive(remote: Path, queue: Queue):
    with arriving(2 * 3600):
        claim(queue, "w1", "01-a")
    queue.beat("w1", {"state": "running", "step": "01-a", "attempt": 1})
    refused(remote, lambda: takeover(queue, "w2"), "w1's heartbeat for 01-a attempt 1 reached this server")


def test_a_fresh_heartbeat_of_a_daemon_with_slots_keeps_each_of_its_claims_alive(remote: Path, queue: Queue):
    with arriving(2 * 3600):
        claim(queue, "w1", "01-a")
        claim(queue, "w1", "04-d")
    queue.beat(
        "w1",
        {
            "state": "running",
            "step": "01-a",
            "attempt": 1,
            "claims": [{"step": "01-a", "attempt": 1}, {"step": "04-d", "attempt": 1}],
        },
    )
    refused(remote, lambda: takeover(queue, "w2", "04-d"), "w1's heartbeat for 04-d attempt 1 reached this server")


def test_a_worker_may_always_take_over_its_own_claim(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    takeover(queue, "w1")  # an earlier tick of w1 that could not record
    assert queue.snapshot().plan.find("01-a").attempt == 2


# --- Also: gitlinks, tag objects, bad encodings; the receiving side stays packed ------------------


def test_a_gitlink_on_the_queue_branch_is_refused(remote: Path, queue: Queue):
    snap = queue.snapshot()
    repo = queue.store.repo
    plans = repo[repo[snap.tip].tree["plans"].id]
    builder = repo.TreeBuilder(plans)
    builder.insert("vendor", pygit2.Oid(hex=snap.tip), pygit2.GIT_FILEMODE_COMMIT)
    root = repo.TreeBuilder(repo[snap.tip].tree)
    root.insert("plans", builder.write(), pygit2.GIT_FILEMODE_TREE)
    commit = commit_of(queue, [snap.tip], str(root.write()), "vendor a submodule\n")
    said = refused(
        remote,
        lambda: queue.store.publish([RefUpdate(QUEUE, commit, snap.tip)]),
        "a gitlink (submodule) has no place on the queue branch: plans/vendor",
    )
    assert "hook failed" not in said


def test_a_tag_object_on_runners_branches_is_refused(remote: Path, queue: Queue):
    snap = queue.snapshot()
    repo = queue.store.repo
    tag = str(
        repo.create_tag(
            "v1", pygit2.Oid(hex=snap.tip), pygit2.GIT_OBJECT_COMMIT, pygit2.Signature("m", "m@x"), "a tag\n"
        )
    )
    for ref in (QUEUE, INTEGRATION):
        said = refused(
            remote,
            lambda ref=ref: queue.store.publish([RefUpdate(ref, tag, FORCE)]),
            f"{ref}: must point at a commit, not a tag",
            ref=ref,
        )
        assert "hook failed" not in said
    accepted(queue.store.publish([RefUpdate("refs/tags/v1", tag, None)]))  # people's tags are theirs


@pytest.mark.parametrize(
    "what, raw, reason",
    [
        (
            "message",
            (
                b"tree {tree}\nparent {parent}\nauthor m <m@x> 1700000000 +0000\n"
                b"committer m <m@x> 1700000000 +0000\n\nbad \xff\xfe\n"
            ),
            "the commit's message is not UTF-8",
        ),
        (
            "author",
            (
                b"tree {tree}\nparent {parent}\nauthor M\xe9 <m@x> 1700000000 +0000\n"
                b"committer m <m@x> 1700000000 +0000\n\nfine\n"
            ),
            "the commit's author or committer is not UTF-8",
        ),
        (
            "encoding header",
            (
                b"tree {tree}\nparent {parent}\nauthor m <m@x> 1700000000 +0000\n"
                b"committer m <m@x> 1700000000 +0000\n"
                b"encoding ISO-8859-1\n\ncaf\xe9\n"
            ),
            "the commit declares encoding 'ISO-8859-1'",
        ),
        (
            "unknown encoding",
            (
                b"tree {tree}\nparent {parent}\nauthor m <m@x> 1700000000 +0000\n"
                b"committer m <m@x> 1700000000 +0000\n"
                b"encoding no-such-codec\n\nx\n"
            ),
            "the commit declares encoding 'no-such-codec'",
        ),
    ],
)
def test_a_commit_that_is_not_utf8_is_refused(remote: Path, queue: Queue, what: str, raw: bytes, reason: str):
    snap = queue.snapshot()
    tree = queue.store.commit(snap.tip).tree
    commit = raw_commit(queue, raw.replace(b"{tree}", tree.encode()).replace(b"{parent}", snap.tip.encode()))
    said = refused(remote, lambda: queue.store.publish([RefUpdate(QUEUE, commit, snap.tip)]), reason)
    assert "hook failed" not in said and len(said.splitlines()) == 1


def test_a_file_name_that_is_not_utf8_is_refused(remote: Path, queue: Queue):
    snap = queue.snapshot()
    store = queue.store
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=store.git_dir, input=b"x\n", capture_output=True, check=True
    ).stdout.strip()
    listing = subprocess.run(["git", "ls-tree", snap.tip], cwd=store.git_dir, capture_output=True, check=True).stdout
    listing += b"100644 blob " + blob + b"\tcaf\xe9.md\n"
    tree = (
        subprocess.run(["git", "mktree"], cwd=store.git_dir, input=listing, capture_output=True, check=True)
        .stdout.decode()
        .strip()
    )
    commit = commit_of(queue, [snap.tip], tree, "add a file\n")
    said = refused(
        remote, lambda: store.publish([RefUpdate(QUEUE, commit, snap.tip)]), "a file name is not UTF-8: 'caf\\udce9.md'"
    )
    assert "hook failed" not in said


def test_the_remote_keeps_what_it_receives_packed(remote: Path, queue: Queue):
    for step_id in ("01-a", "03-c", "04-d"):
        claim(queue, "w1", step_id)
    counts = dict(line.split(": ") for line in git(remote, "count-objects", "-v").splitlines())
    assert counts["count"] == "0" and int(counts["packs"]) >= 3


def test_a_runner_toml_that_does_not_parse_never_switches_identities_off(remote: Path, queue: Queue):
    configure(queue, IDENTITIES)
    direct = GitStore(remote, remote=None)  # written on the server without the hook (under an old runner's rules, say)
    before = direct.ref(QUEUE)
    broken = direct.make_commit(
        [before],
        {"runner.toml": (DEFAULT_TOML + IDENTITIES + "\n[nonsense]\nx = 1\n").encode()},
        "x\n",
        author_for("alice"),
    )
    accepted(direct.publish([RefUpdate(QUEUE, broken, before)]))
    with pushing_as("key-b"):  # with the defaults, key-b could act as w1
        refused(
            remote,
            lambda: queue.beat("w1", {}),
            "runner.toml on runner/queue does not parse",
            "nothing can be judged",
            ref=BEAT,
        )


# --- a step recorded done carries its merge in the same push -------------------------------------


def test_a_complete_that_names_a_merge_the_integration_branch_does_not_hold_is_refused(remote: Path, queue: Queue):
    claim(queue, "w1", "04-d")
    queue.store.fetch(["runner/integration"])
    base = queue.store.tip("runner/integration")
    change = queue.store.make_commit([base], {"d.txt": b"d\n"}, "04-d: D (attempt 1)\n", author_for("w1"))
    merge = queue.store.make_commit([base, change], {"d.txt": b"d\n"}, "merge 04-d\n", author_for("w1"))
    result = {"commit": change, "merge": merge}
    refused(
        remote,
        lambda: forge(queue, "04-d", "complete", "w1", result=result),
        "records merge",
        "which the integration branch does not hold after this push",
    )
    assert tip(remote, INTEGRATION) == base


def test_a_claim_under_an_endless_lease_is_refused(remote: Path, queue: Queue):
    from runner.core.machine import Context

    pretended = Context(lease="1000d")  # the forger writes as if the queue's lease were endless
    refused(
        remote,
        lambda: forge(queue, "01-a", "claim", "w1", lease="1000d", context=pretended),
        "a claim is made under the queue's lease (1h), not '1000d'",
    )
