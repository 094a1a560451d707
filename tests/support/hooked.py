"""A bare remote guarded by runner's pre-receive hook (installed by `runner install-hooks
--server`, as an admin would), the clones that push to it, and a forger: a commit of one
event written by the same code the clients use, then tampered with, then pushed.

Shared by test_hooks.py, test_attacks_server.py, test_identities.py and test_agreement.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner.core.codec import encode
from runner.core.events import write_step_event
from runner.core.machine import KINDS, Context, Event, Kind
from runner.core.model import Step, utc_now
from runner.queue.queue import Queue, author_for
from runner.store import Outcome, RefUpdate, Refused, Won
from runner.store.git import GitStore
from support import zygote
from support.repos import ROOT, git, step_file

QUEUE = "refs/heads/runner/queue"
INTEGRATION = "refs/heads/runner/integration"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
CHECKS = (
    "## Changes\n\n#### Automated Verification:\n- [ ] passes: `true`\n\n#### Manual Verification:\n- [ ] reads well\n"
)
ELSEWHERE = {"host": "elsewhere"}  # a holder on another host: judged by its lease, never by a local pid
# people alice (an admin) and bob; worker keys key-a (worker w1) and key-b (worker w2)
IDENTITIES = """
[hooks]
pusher_env = "RUNNER_PUSHER"
people = ["alice", "bob"]
admins = ["alice"]

[hooks.identities]
key-a = ["w1"]
key-b = ["w2"]
"""


def cli(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real `runner` command in a process of its own (no --repo added: some commands take none)."""
    return zygote.run(list(args), env={**ENV, **(env or {})}, cwd=cwd)


def hooked_remote(path: Path) -> Path:
    git(path.parent, "init", "-q", "--bare", str(path))
    done = cli("install-hooks", "--server", str(path), cwd=path.parent)
    assert done.returncode == 0, done.stderr
    return path


def clone(bare: Path, path: Path) -> Queue:
    """A new clone of the queue's remote (no checkout needed: runner reads the branch)."""
    git(path.parent, "init", "-q", str(path))
    git(path, "remote", "add", "origin", str(bare))
    return Queue(GitStore(path))


def tip(bare: Path, ref: str = QUEUE) -> str | None:
    return git(bare, "rev-parse", "--verify", "-q", ref, check=False) or None


def add_steps(queue: Queue, *steps: tuple[str, dict], actor: str = "alice") -> None:
    files = dict(
        step_file(step_id, step_id.split("-")[-1].title(), fields.pop("body", ""), **fields)
        for step_id, fields in steps
    )
    queue.edit(lambda snap: files, "add " + ", ".join(s for s, _ in steps), actor)


def seed(bare: Path, folder: Path) -> Queue:
    """The plan every test starts from: 01-a (with a checklist) <- 02-b; 03-c needs approval; 04-d."""
    queue = clone(bare, folder)
    queue.init("alice")  # the root commit and the integration branch pass the hook
    add_steps(
        queue,
        ("01-a", {"body": CHECKS}),
        ("02-b", {"depends_on": ["01-a"]}),
        ("03-c", {"requires_approval": True}),
        ("04-d", {}),
    )
    return queue


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("template")
    bare = hooked_remote(base / "remote.git")
    seed(bare, base / "seed")
    return bare


@pytest.fixture
def remote(template: Path, tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    shutil.copytree(template, bare, symlinks=True)
    return bare


@pytest.fixture
def queue(remote: Path, tmp_path: Path) -> Queue:
    return clone(remote, tmp_path / "clone")


# --- legal events, as runner writes them -----------------------------------------------------


def incarnation_of(worker: str) -> str:
    return f"{worker}.test"


def claim(queue: Queue, worker: str, step_id: str, beat: bool = True, **options):
    """`worker` claims `step_id` as a tick does: its heartbeat rides in the same push."""
    incarnation = incarnation_of(worker)
    facts = {"state": "running", "incarnation": incarnation} if beat else None
    return queue.claim(worker, incarnation, ELSEWHERE, step_id=step_id, beat=facts, **options)


def record(queue: Queue, kind: Kind, actor: str, step_id: str, **fields: Any):
    """One step event as the queue publishes it (holder events carry the holder's incarnation)."""
    if KINDS[kind].holder or KINDS[kind].starts_attempt:
        fields.setdefault("incarnation", incarnation_of(actor))
    if kind == Kind.TAKEOVER:

        def build(snap):
            step = snap.plan.find(step_id)
            event = Event(
                kind,
                actor,
                utc_now(),
                step=step_id,
                attempt=step.attempt + 1,
                replaces=step.attempt,
                holder=ELSEWHERE,
                lease="1h",
                **fields,
            )
            return queue.step_change(snap, event)

        return queue.publish(build, actor)
    return queue.event(step_id, kind, actor, **fields)


@contextmanager
def arriving(seconds_ago: float):
    """Pushes made inside reach the server `seconds_ago`, by its reflog: git dates a reflog
    entry with GIT_COMMITTER_DATE, and a local push hands the pusher's environment to the
    receiving side (over ssh a pusher cannot)."""
    saved = os.environ.get("GIT_COMMITTER_DATE")
    os.environ["GIT_COMMITTER_DATE"] = f"@{int(time.time() - seconds_ago)} +0000"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["GIT_COMMITTER_DATE"]
        else:
            os.environ["GIT_COMMITTER_DATE"] = saved


# --- forged commits ---------------------------------------------------------------------------


def forge(
    queue: Queue,
    step_id: str,
    kind: str,
    actor: str = "w1",
    *,
    meta: dict | None = None,
    context: Context | None = None,
    text: Callable[[str], str] | None = None,
    files: dict | None = None,
    says: dict | None = None,
    status: str | None = None,
    message: Callable[[str], str] | None = None,
    author: str | None = None,
    **fields: Any,
) -> Outcome:
    """Push a commit of one `kind` event on `step_id`, written by runner's own writer, then tampered with:
    meta: what the forger pretends the step's frontmatter was; context: the plan it pretends;
    text: edits the step file written; files: more files in the commit; says: event fields the
    message claims instead; status: the status the message claims; message: edits the message;
    author: the commit's author instead of the actor."""
    snap = queue.snapshot()
    step = snap.plan.find(step_id)
    kind = Kind(kind)
    if KINDS[kind].starts_attempt:
        fields.setdefault("attempt", step.attempt + 1)
        fields.setdefault("lease", "1h")
        fields.setdefault("holder", ELSEWHERE)
    else:
        fields.setdefault("attempt", step.attempt)
    if KINDS[kind].holder or KINDS[kind].starts_attempt:
        fields.setdefault("incarnation", incarnation_of(actor))
    event = Event(kind, actor, utc_now(), step=step_id, **fields)
    pretended = Step(step.id, step.path, {**step.meta, **(meta or {})}, step.text)
    written = write_step_event(pretended, event, context or Queue.context(snap, step))
    body = text(written.text) if text else written.text
    said = encode(replace(event, **(says or {})), status or written.status)
    said = message(said) if message else said
    commit = queue.store.make_commit(
        [snap.tip], {step.path: body.encode(), **(files or {})}, said, author_for(author or actor)
    )
    return queue.store.publish([RefUpdate("refs/heads/runner/queue", commit, snap.tip)])


def push_commit(queue: Queue, files: dict, message: str, author: str = "mallory", parent: str | None = None) -> Outcome:
    """A plain commit on the queue branch, as a person would make it with git."""
    parent = parent or queue.snapshot().tip
    commit = queue.store.make_commit([parent], files, message, author_for(author))
    return queue.store.publish([RefUpdate("refs/heads/runner/queue", commit, parent)])


def refused(remote: Path, action: Callable[[], Any], *reasons: str, ref: str = QUEUE) -> str:
    """Run `action` (a push); assert it was refused for each of `reasons` (substrings) and that
    `ref` on the remote did not move."""
    from runner.queue.change import PushRefused

    before = tip(remote, ref)
    try:
        outcome = action()
    except PushRefused as exc:
        said = str(exc)
    else:
        assert isinstance(outcome, Refused), f"expected a refusal, got {outcome!r}"
        said = str(outcome)
    for reason in reasons:
        assert reason in said, f"{reason!r} not in {said!r}"
    assert tip(remote, ref) == before
    return said


def accepted(outcome: Outcome) -> None:
    assert isinstance(outcome, Won), f"expected the push to land, got {outcome!r}"
