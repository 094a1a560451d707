"""Issue 48's attacks (the third round), each repeated against the real thing: a hooked remote,
real runner processes, a real board on 127.0.0.1. Each test keeps the promise its name makes,
and its docstring names the attack it repeats."""

from __future__ import annotations

from conftest import git
from hooked import QUEUE, clone, refused, remote, template  # noqa: F401 - template and remote are fixtures
from runner.queue.queue import author_for
from runner.store import FORCE, RefUpdate


def test_a_ref_named_like_a_folder_of_runners_refs_is_refused_with_its_reason(remote, tmp_path):
    """Attack 4: a push of refs/heads/runner/steps (a folder of runner's step branches) was refused
    by an internal UnboundLocalError, the reason lost."""
    store = clone(remote, tmp_path / "clone").store
    junk = store.make_commit([], {"junk.txt": b"x\n"}, "block the step branches\n", author_for("mallory"))
    said = refused(remote, lambda: store.publish([RefUpdate("refs/heads/runner/steps", junk, FORCE)]),
                   "refs/heads/runner/steps: named like a folder of runner's refs (refs/heads/runner/steps",
                   ref="refs/heads/runner/steps")
    assert "hook failed" not in said and "UnboundLocalError" not in said
    assert git(remote, "rev-parse", "--verify", "-q", QUEUE)
