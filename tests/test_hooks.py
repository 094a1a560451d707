"""Git hooks against real repositories: a bare remote with the pre-receive hook installed by
`runner install-hooks --server`, clones that push legal and forged queue commits to it, and
a working clone with the pre-commit hook. Forged commits are written by runner's own writer
(`write_step_event`, `encode`) and then tampered with, so each test changes one thing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.hooked import (
    ENV,
    INTEGRATION,
    QUEUE,
    accepted,
    claim,
    cli,
    clone,
    forge,
    push_commit,
    record,
    refused,
    tip,
)
from support.repos import git, queue_moves, step_file

from runner.core.config import DEFAULT_TOML
from runner.core.machine import Context, Kind
from runner.core.model import utc_now
from runner.core.stepfile import set_fields
from runner.queue.merging import approve
from runner.queue.queue import Queue, author_for
from runner.store import RefUpdate
from runner.store.git import GitStore

# --- installing ------------------------------------------------------------------------------


def test_install_renders_the_interpreter_and_sets_up_the_receiving_side(remote: Path):
    hook = remote / "hooks" / "pre-receive"
    text = hook.read_text()
    assert os.access(hook, os.X_OK)
    assert f"PYTHON={sys.executable}" in text and "-m runner.hooks.races pre-receive" in text
    # Repository-wide denyNonFastForwards would refuse a step branch's next attempt: the hook guards the protocol refs.
    assert git(remote, "config", "receive.denyNonFastForwards", check=False) == ""
    assert git(remote, "config", "core.logAllRefUpdates") == "always"  # the hook judges leases by reflogs
    assert git(remote, "config", "receive.unpackLimit") == "1"  # every push kept as one pack


def test_install_keeps_an_existing_server_hook_and_uninstall_restores_it(tmp_path: Path, monkeypatch):
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    original = '#!/bin/sh\nwhile read old new ref; do echo "$ref" >> "$(dirname "$0")/seen"; done\nexit ${REFUSE:-0}\n'
    (bare / "hooks" / "pre-receive").write_text(original)
    (bare / "hooks" / "pre-receive").chmod(0o755)
    assert cli("install-hooks", "--server", str(bare), cwd=tmp_path).returncode == 0
    assert (bare / "hooks" / "pre-receive.runner-saved").read_text() == original

    queue = clone(bare, tmp_path / "clone")
    queue.init("alice")
    assert "refs/heads/runner/queue" in (bare / "hooks" / "seen").read_text()  # the saved hook ran first

    monkeypatch.setenv("REFUSE", "1")  # the saved hook now refuses: so does the chain
    refused(bare, lambda: push_commit(queue, dict([step_file("01-a")]), "add 01-a\n", author="alice"))
    monkeypatch.delenv("REFUSE")

    done = cli("uninstall-hooks", "--server", str(bare), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (bare / "hooks" / "pre-receive").read_text() == original
    assert not (bare / "hooks" / "pre-receive.runner-saved").exists()


def test_install_lists_every_bad_input(tmp_path: Path):
    (tmp_path / "work").mkdir()
    git(tmp_path, "init", "-q", str(tmp_path / "work"))
    done = cli(
        "install-hooks", "--server", str(tmp_path / "missing"), "--repo", str(tmp_path / "nothing"), cwd=tmp_path
    )
    assert done.returncode == 2
    assert "missing: no such folder" in done.stderr and "nothing: no such folder" in done.stderr
    done = cli("install-hooks", "--server", str(tmp_path / "work"), cwd=tmp_path)
    assert done.returncode == 2 and "not a bare repository" in done.stderr


# --- what legal workers and people push -------------------------------------------------------


def test_a_real_tick_records_its_result_through_the_hook(remote: Path, queue: Queue):
    done = cli("tick", "--id", "w1", "--json", cwd=queue.store.workdir)
    assert done.returncode == 0, done.stderr
    step = queue.snapshot().plan.find("01-a")
    assert step.status == "done"
    assert "- [x] passes: `true`" in step.text and "- [ ] reads well" in step.text
    assert tip(remote, "refs/heads/runner/steps/01-a") is None  # merged: deleted in the push that records it
    assert tip(remote, "refs/runner/heartbeats/w1")


def test_a_daemons_record_and_next_claim_pass_the_hook_in_one_push(remote: Path, queue: Queue):
    before = len(queue_moves(remote))  # install-hooks --server keeps a reflog: leases are judged on it
    done = cli(
        "worker",
        "--id",
        "w1",
        "--once",
        "--interval",
        "0.2",
        cwd=queue.store.workdir,
        env={"RUNNER_FETCH_AT_LEAST_EVERY": "3600"},
    )  # claims ahead however slow the machine's ticks are
    assert done.returncode == 0, done.stderr
    pushed = queue_moves(remote)[before:]
    # 03-c waits for a person; each record rode with the next claim, none was refused.
    assert pushed == ["claim 01-a", "claim 02-b", "claim 03-c", "claim 04-d", "complete 04-d"]
    assert {step.id: step.status for step in queue.snapshot().plan.steps.values()} == {
        "01-a": "done",
        "02-b": "done",
        "03-c": "review",
        "04-d": "done",
    }


def test_every_transition_the_queue_writes_passes(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    queue.beat("w1", {"step": "01-a", "attempt": 1})
    queue.beat("w1", {"step": "01-a", "attempt": 1})  # heartbeat refs fast-forward
    record(queue, Kind.FAIL, "w1", "01-a", reason="gate failed:\n  lint", retry_at=utc_now())
    claim(queue, "w1", "01-a")
    record(
        queue, Kind.TAKEOVER, "w1", "01-a", reason="abandoned by an earlier tick of this worker"
    )  # its own claim: always
    record(queue, Kind.RELEASE, "w1", "01-a", reason="stopping")
    claim(queue, "w2", "01-a")
    record(queue, Kind.COMPLETE, "w2", "01-a", ticked=("passes: `true`",), notes="01-a leaves a fact behind")
    claim(queue, "w3", "02-b")  # its dependency is done now
    claim(queue, "w1", "03-c")
    record(queue, Kind.COMPLETE, "w1", "03-c", notes="")  # empty notes leave plans/NOTES.md alone
    record(queue, Kind.REJECT, "bob", "03-c", reason="needs tests")
    claim(queue, "w1", "03-c")
    record(queue, Kind.COMPLETE, "w1", "03-c")
    approve(queue, "03-c", "bob")
    claim(queue, "w1", "04-d")
    record(queue, Kind.FAIL, "w1", "04-d", reason="broken", permanent=True)
    record(queue, Kind.RETRY, "bob", "04-d")
    queue.set_halt("maintenance", "bob")
    queue.set_halt(None, "bob")
    queue.edit(lambda snap: dict([step_file("05-e", depends_on=["04-d"])]), "add 05-e", "alice")
    plan = queue.snapshot().plan
    assert [plan.find(s).status for s in ("01-a", "02-b", "03-c", "04-d", "05-e")] == [
        "done",
        "claimed",
        "done",
        "ready",
        "ready",
    ]
    assert "01-a leaves a fact behind" in queue.store.file_at(queue.snapshot().tip, "plans/NOTES.md").decode()
    assert not plan.invalid


def test_pipeline_transitions_pass(remote: Path, queue: Queue):
    """A deviation, a held result with carried metrics, approve, and a person's abort."""
    claim(queue, "w1", "04-d")
    record(queue, Kind.BLOCK, "w1", "04-d", review="deviation", reason="orient: the plan is stale")
    approve(queue, "04-d", "bob")
    claim(queue, "w1", "04-d")
    record(
        queue,
        Kind.COMPLETE,
        "w1",
        "04-d",
        hold=True,
        reason="PIPELINE-FAULT: independent review did not run",
        metrics={"scores": [0.4, 0.7], "spent": 12.5},
    )
    approve(queue, "04-d", "bob")
    record(queue, Kind.ABORT, "bob", "03-c", reason="not needed")
    plan = queue.snapshot().plan
    assert plan.find("04-d").status == "done" and plan.find("04-d").meta["scores"] == [0.4, 0.7]
    assert plan.find("03-c").status == "failed"


def test_racing_claim_processes_never_double_claim(remote: Path, queue: Queue, tmp_path: Path):
    procs = []
    for worker in [f"w{n}" for n in range(1, 6)]:
        path = tmp_path / f"clone-{worker}"
        clone(remote, path)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "runner", "claim", "--id", worker],
                cwd=path,
                env=ENV,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = [(proc.wait(timeout=120), proc.stderr.read()) for proc in procs]
    assert sorted(code for code, _ in results) == [0, 0, 0, 3, 3], results
    claimed = [e["step"] for e in queue.log() if e["event"] == "claim"]
    assert len(claimed) == len(set(claimed)) == 3  # 01-a, 03-c, 04-d were ready


def test_a_pre_existing_invalid_file_does_not_block_other_pushes(remote: Path, queue: Queue):
    direct = Queue(GitStore(remote, remote=None))  # writes into the remote without its hook
    direct.edit(lambda snap: {"plans/steps/99-bad.md": b"---\nstep: [oops\n---\n"}, "add a broken step", "alice")
    broken = tip(remote)
    claim(queue, "w1", "01-a")
    queue.edit(lambda snap: dict([step_file("05-e")]), "add 05-e", "alice")
    # Both pushes landed on the remote, on top of the broken file, which is still there as it was.
    landed = git(remote, "rev-list", f"{broken}..{QUEUE}").split()
    assert len(landed) == 2, landed
    claimed = git(remote, "show", f"{QUEUE}:plans/steps/01-a.md")
    assert "status: claimed" in claimed and "assignee: w1" in claimed, claimed
    assert "step: 05-e" in git(remote, "show", f"{QUEUE}:plans/steps/05-e.md")
    assert git(remote, "show", f"{QUEUE}:plans/steps/99-bad.md") == "---\nstep: [oops\n---"


# --- what the server refuses ------------------------------------------------------------------


def test_the_queue_is_never_rewound_or_deleted(remote: Path, queue: Queue):
    start = queue.snapshot().tip
    claim(queue, "w1", "01-a")
    now = queue.snapshot().tip
    refused(remote, lambda: queue.store.publish([RefUpdate(QUEUE, start, now)]), "not a fast-forward")
    refused(
        remote,
        lambda: queue.store.publish([RefUpdate(QUEUE, None, now)]),
        "refs/heads/runner/queue: the queue branch may not be deleted",
    )


def test_the_integration_branch_is_protected_like_the_queue(remote: Path, queue: Queue):
    queue.store.fetch(["runner/integration"])
    base = queue.store.tip("runner/integration")
    work = queue.store.make_commit([base], {"a.txt": b"a\n"}, "work\n", author_for("w1"))
    accepted(queue.store.publish([RefUpdate(INTEGRATION, work, base)]))
    refused(
        remote, lambda: queue.store.publish([RefUpdate(INTEGRATION, base, work)]), "not a fast-forward", ref=INTEGRATION
    )
    refused(
        remote,
        lambda: queue.store.publish([RefUpdate(INTEGRATION, None, work)]),
        "the integration branch may not be deleted",
        ref=INTEGRATION,
    )


def test_heartbeat_refs_only_fast_forward(remote: Path, queue: Queue):
    ref = "refs/runner/heartbeats/w1"
    first = queue.beat("w1", {})
    latest = queue.beat("w1", {})
    refused(remote, lambda: queue.store.publish([RefUpdate(ref, first, latest)]), "not a fast-forward", ref=ref)


def test_a_commit_that_changes_two_steps(remote: Path, queue: Queue):
    snap = queue.snapshot()
    other = snap.plan.find("04-d")
    second_claim = set_fields(other.text, {"status": "claimed", "assignee": "w1", "attempt": 1}).encode()
    refused(
        remote,
        lambda: forge(queue, "01-a", "claim", files={other.path: second_claim}),
        "a claim may change only plans/steps/01-a.md, not plans/steps/04-d.md",
    )


def test_a_claim_whose_dependencies_are_not_done(remote: Path, queue: Queue):
    refused(
        remote,
        lambda: forge(queue, "02-b", "claim", context=Context(deps_done=True)),
        "02-b has dependencies that are not done",
    )


def test_a_second_claim_while_one_holds(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    refused(
        remote,
        lambda: forge(queue, "01-a", "claim", "w2", meta={"status": "ready"}),
        "01-a is claimed: a claim is allowed only when it is ready",
    )


def test_holder_events_by_a_worker_that_does_not_hold_the_claim(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    for kind in ("complete", "fail", "release"):
        refused(
            remote,
            lambda kind=kind: forge(queue, "01-a", kind, "w2", meta={"assignee": "w2", "holder": {}}, reason="x"),
            "the step is held by 'w1', not 'w2'",
        )


def test_an_old_incarnation_of_the_holder_may_not_record(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")  # held by incarnation w1.test
    refused(
        remote,
        lambda: forge(queue, "01-a", "complete", "w1", meta={"holder": {}}, incarnation="w1.before-restart"),
        "held by another incarnation of w1 (w1.test)",
    )


def test_a_stale_attempt_may_not_record_and_attempts_never_go_back(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    record(queue, Kind.TAKEOVER, "w1", "01-a")  # w1 again, attempt 2
    refused(
        remote,
        lambda: forge(queue, "01-a", "complete", "w1", attempt=1, meta={"attempt": 1}),
        "the step is at attempt 2; attempt 1 was taken over and may not record anything",
    )
    back = lambda text: set_fields(text, {"attempt": 1})
    refused(
        remote,
        lambda: forge(queue, "01-a", "complete", "w1", text=back),
        "plans/steps/01-a.md is not what a complete by w1 writes",
    )


def test_a_message_that_does_not_describe_the_change(remote: Path, queue: Queue):
    refused(
        remote,
        lambda: forge(queue, "01-a", "claim", says={"step": "04-d"}),
        "a claim may change only plans/steps/04-d.md, not plans/steps/01-a.md",
    )
    refused(
        remote, lambda: forge(queue, "01-a", "claim", says={"attempt": 7}), "a new claim of 01-a is attempt 1, not 7"
    )
    refused(
        remote,
        lambda: forge(queue, "01-a", "claim", status="done"),
        "Runner-Status done is not the status a claim leads to (claimed)",
    )
    refused(
        remote,
        lambda: forge(queue, "01-a", "claim", says={"actor": "w2"}),
        "the author ('w1') is not the actor the commit names ('w2')",
    )
    refused(
        remote,
        lambda: forge(queue, "01-a", "claim", says={"actor": "w2"}, author="w2"),
        "plans/steps/01-a.md is not what a claim by w2 writes",
    )
    refused(
        remote,
        lambda: forge(queue, "01-a", "claim", message=lambda m: m.replace("claim 01-a", "complete 01-a")),
        "not a well-formed runner commit: the message is not what runner writes",
    )
    refused(
        remote,
        lambda: forge(queue, "01-a", "claim", message=lambda m: m + "Runner-Event: complete\n"),
        "not a well-formed runner commit: trailer Runner-Event appears twice",
    )


def test_a_takeover_must_name_the_attempt_it_replaces(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    refused(
        remote,
        lambda: forge(queue, "01-a", "takeover", "w1", replaces=1, says={"replaces": None}),
        "a takeover must name the attempt it replaces (1), not None",
    )
    refused(
        remote,
        lambda: forge(queue, "01-a", "takeover", "w1", replaces=1, says={"replaces": 0}),
        "a takeover must name the attempt it replaces (1), not 0",
    )


def test_a_transition_may_not_touch_anything_else(remote: Path, queue: Queue):
    retitled = lambda text: text.replace("title: A", "title: Something else")
    refused(
        remote,
        lambda: forge(queue, "01-a", "claim", text=retitled),
        "plans/steps/01-a.md is not what a claim by w1 writes",
    )
    rewritten = lambda text: text.replace("reads well", "is fine")
    refused(
        remote,
        lambda: forge(queue, "01-a", "claim", text=rewritten),
        "plans/steps/01-a.md is not what a claim by w1 writes",
    )
    refused(
        remote,
        lambda: forge(queue, "01-a", "claim", files={"runner.toml": b""}),
        "a claim may change only plans/steps/01-a.md, not runner.toml",
    )
    claim(queue, "w1", "01-a")
    manual = lambda text: text.replace("- [ ] reads well", "- [x] reads well")
    refused(
        remote,
        lambda: forge(queue, "01-a", "complete", "w1", text=manual),
        "plans/steps/01-a.md is not what a complete by w1 writes",
    )
    refused(
        remote,
        lambda: forge(
            queue, "01-a", "complete", "w1", notes="a fact", files={"plans/NOTES.md": b"# Notes\n\nrewritten\n"}
        ),
        "plans/NOTES.md is not the notes file with the step's notes appended",
    )


def test_a_claim_while_halted(remote: Path, queue: Queue):
    queue.set_halt("maintenance", "bob")
    refused(remote, lambda: forge(queue, "01-a", "claim", context=Context(halted=False)), "the queue is halted")


def test_edits_without_an_event_keep_managed_fields(remote: Path, queue: Queue):
    step = queue.snapshot().plan.find("04-d")
    done = set_fields(step.text, {"status": "done"}).encode()
    refused(
        remote,
        lambda: push_commit(queue, {step.path: done}, "mark it done\n"),
        "plans/steps/04-d.md: changes runner-managed status without a runner event",
    )
    refused(
        remote,
        lambda: queue.edit(lambda snap: {step.path: done}, "mark it done", "alice"),
        "changes runner-managed status without a runner event",
    )
    path, data = step_file("05-e", holder={"incarnation": "w9.1"}, status="claimed", assignee="w9")
    refused(
        remote,
        lambda: push_commit(queue, {path: data}, "add 05-e\n"),
        "plans/steps/05-e.md: a new step may not start with a runner claim",
    )
    refused(
        remote,
        lambda: push_commit(queue, {"plans/HALT": b"stop\n"}, "halt by hand\n"),
        "plans/HALT changes only with `runner halt` / `runner resume`",
    )
    refused(
        remote,
        lambda: push_commit(queue, {"plans/steps/01-a.md": None}, "drop 01-a\n"),
        "deleting 01-a leaves plans/steps/02-b.md depending on a step that does not exist",
    )
    retitled = step.text.replace("title: D", "title: Dee").encode()
    accepted(push_commit(queue, {step.path: retitled}, "retitle 04-d\n"))  # people edit titles and bodies freely
    path, data = step_file("05-e", status="done")
    accepted(push_commit(queue, {path: data}, "import 05-e, done elsewhere\n"))
    accepted(push_commit(queue, {path: None}, "drop 05-e\n"))


def test_step_files_that_break_the_schema(remote: Path, queue: Queue):
    def add(files: dict) -> object:
        return push_commit(queue, files, "add steps\n")

    refused(
        remote,
        lambda: add({"plans/steps/05-e.md": b"---\nstep: 05-e\npriority: high\n---\n"}),
        "plans/steps/05-e.md: priority must be an integer",
    )
    refused(remote, lambda: add({"plans/steps/05-e.md": b"---\nstep: [oops\n---\n"}), "plans/steps/05-e.md: bad YAML")
    refused(
        remote,
        lambda: add({"plans/steps/05-e.md": b'---\nrun: ["true"]\ndepends_on: [77-nope]\n---\n'}),
        "plans/steps/05-e.md: unknown dependency: 77-nope",
    )
    cycle = {
        "plans/steps/05-e.md": b'---\nrun: ["true"]\ndepends_on: [06-f]\n---\n',
        "plans/steps/06-f.md": b'---\nrun: ["true"]\ndepends_on: [05-e]\n---\n',
    }
    refused(remote, lambda: add(cycle), "dependency cycle")
    refused(remote, lambda: add({"plans/steps/sub/04-d.md": b"---\ntitle: again\n---\n"}), "duplicate step id '04-d'")
    refused(
        remote,
        lambda: add({"runner.toml": (DEFAULT_TOML + '\n[brakes]\nmax_fix_attempts = "two"\n').encode()}),
        "runner.toml",
    )


def test_every_commit_of_a_push_is_checked_not_only_the_tip(remote: Path, queue: Queue):
    snap = queue.snapshot()
    step = snap.plan.find("02-b")
    bad = set_fields(step.text, {"status": "done"}).encode()
    middle = queue.store.make_commit([snap.tip], {step.path: bad}, "sneak 02-b to done\n", author_for("mallory"))
    fine = queue.store.make_commit([middle], {"plans/NOTES.md": b"notes\n"}, "notes\n", author_for("mallory"))
    said = refused(
        remote, lambda: queue.store.publish([RefUpdate(QUEUE, fine, snap.tip)]), "changes runner-managed status"
    )
    assert middle[:10] in said and fine[:10] not in said


def test_the_check_is_also_a_class_and_a_hidden_command(remote: Path, queue: Queue):
    from runner.hooks.server import PushCheck

    snap = queue.snapshot()
    step = snap.plan.find("02-b")
    bad = queue.store.make_commit(
        [snap.tip], {step.path: set_fields(step.text, {"status": "done"}).encode()}, "x\n", author_for("m")
    )
    accepted(
        queue.store.publish([RefUpdate("refs/heads/runner/steps/02-b", bad, None)])
    )  # step branches hold any commit
    assert PushCheck(remote).check([(snap.tip, bad, "refs/heads/runner/steps/02-b")]) == []
    reasons = PushCheck(remote).check([(snap.tip, bad, QUEUE)])
    assert len(reasons) == 1 and "changes runner-managed status without a runner event" in reasons[0]
    for command in (["-m", "runner", "hook-pre-receive"], ["-m", "runner.hooks.server", "pre-receive"]):
        done = subprocess.run(
            [sys.executable, *command],
            cwd=remote,
            env=ENV,
            capture_output=True,
            text=True,
            input=f"{snap.tip} {bad} {QUEUE}\n",
        )
        assert done.returncode == 1 and "changes runner-managed status" in done.stderr


# --- the client's pre-commit hook --------------------------------------------------------------


def test_pre_commit_blocks_invalid_step_files_and_keeps_an_existing_hook(tmp_path: Path):
    repo = tmp_path / "plan"
    git(tmp_path, "init", "-q", str(repo))
    git(repo, "config", "user.name", "alice")
    git(repo, "config", "user.email", "alice@example.com")
    steps = repo / "plans" / "steps"
    steps.mkdir(parents=True)
    (steps / "01-a.md").write_text('---\nstep: 01-a\ntitle: A\nrun: ["true"]\n---\n')
    original = '#!/bin/sh\necho ran >> "$(git rev-parse --git-dir)/ran"\nexit ${REFUSE:-0}\n'
    (repo / ".git" / "hooks" / "pre-commit").write_text(original)
    (repo / ".git" / "hooks" / "pre-commit").chmod(0o755)
    done = cli("install-hooks", "--repo", str(repo), cwd=tmp_path)
    assert done.returncode == 0, done.stderr

    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "a sound plan")
    assert (repo / ".git" / "ran").exists()

    (steps / "02-b.md").write_text('---\nstep: 02-b\nrun: ["true"]\ndepends_on: [09-missing]\n---\n')
    (steps / "03-c.md").write_text("---\nstep: [oops\n---\n")
    git(repo, "add", ".")
    blocked = subprocess.run(["git", "commit", "-q", "-m", "broken"], cwd=repo, capture_output=True, text=True, env=ENV)
    assert blocked.returncode != 0
    assert "plans/steps/02-b.md: unknown dependency: 09-missing" in blocked.stderr
    assert "plans/steps/03-c.md: bad YAML" in blocked.stderr

    (steps / "03-c.md").write_text('---\nstep: 03-c\nrun: ["true"]\n---\n')
    (steps / "02-b.md").write_text('---\nstep: 02-b\nrun: ["true"]\ndepends_on: [01-a]\n---\n')
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "fixed")

    (steps / "01-a.md").write_text('---\nstep: 01-a\nrun: ["true"]\npriority: high\n---\n')
    blocked = subprocess.run(
        ["git", "commit", "-q", "-a", "-m", "commit -a uses a temporary index"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert blocked.returncode != 0 and "plans/steps/01-a.md: priority must be an integer" in blocked.stderr
    git(repo, "checkout", "--", ".")

    (steps / "04-d.md").write_text('---\nstep: 04-d\nrun: ["true"]\n---\n')
    git(repo, "add", ".")
    refuse = subprocess.run(
        ["git", "commit", "-q", "-m", "x"], cwd=repo, capture_output=True, text=True, env={**os.environ, "REFUSE": "1"}
    )
    assert refuse.returncode != 0  # the saved hook runs first and may refuse

    assert cli("uninstall-hooks", "--repo", str(repo), cwd=tmp_path).returncode == 0
    assert (repo / ".git" / "hooks" / "pre-commit").read_text() == original
