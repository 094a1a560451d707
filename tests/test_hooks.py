"""Git hooks against real repositories: a bare remote with the pre-receive hook
installed by `runner install-hooks --server`, clones that push legal and forged
queue commits to it, and a working clone with the pre-commit hook."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner.store.git import GitStore, PushRefused
from runner.queue.leases import holder_info
from runner.core.model import utc_now
from runner.core.codec import commit_message, handoff_path
from runner.queue.queue import Queue, new_step_file, signer_for
from runner.core.machine import Event, transition
from runner.core.stepfile import set_fields

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
QUEUE = "refs/heads/runner/queue"
INTEGRATION = "refs/heads/runner/integration"
CHECKS = "## Changes\n\n#### Automated Verification:\n- [ ] passes: `true`\n\n#### Manual Verification:\n- [ ] reads well\n"


def runner(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=cwd, env=env or ENV, capture_output=True, text=True, timeout=120)


def git(cwd: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode:
        raise AssertionError(f"git {' '.join(args)}: {proc.stderr}")
    return proc.stdout.strip()


def tip(bare: Path, ref: str = QUEUE) -> str | None:
    return git(bare, "rev-parse", "--verify", "-q", ref, check=False) or None


def new_clone(bare: Path, path: Path) -> Queue:
    git(path.parent, "init", "-q", str(path))
    git(path, "remote", "add", "origin", str(bare))
    return Queue(GitStore(path))


def add_step(queue: Queue, step_id: str, **fields) -> None:
    body = fields.pop("body", "")
    path, data = new_step_file(step_id, step_id.split("-", 1)[1].title(), fields, body)
    queue.add_files({path: data}, f"add {step_id}", "alice")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A hooked remote holding a plan: 01-a (checklist) <- 02-b; 03-c needs approval; 04-d."""
    base = tmp_path_factory.mktemp("template")
    bare = base / "remote.git"
    git(base, "init", "-q", "--bare", str(bare))
    done = runner("install-hooks", "--server", str(bare), cwd=base)
    assert done.returncode == 0, done.stderr
    queue = new_clone(bare, base / "seed")
    queue.init("alice")  # the root commit and the integration branch pass the hook
    add_step(queue, "01-a", run=["true"], body=CHECKS)
    add_step(queue, "02-b", depends_on=["01-a"])
    add_step(queue, "03-c", requires_approval=True)
    add_step(queue, "04-d")
    return bare


@pytest.fixture
def remote(template: Path, tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    shutil.copytree(template, bare, symlinks=True)
    return bare


@pytest.fixture
def queue(remote: Path, tmp_path: Path) -> Queue:
    return new_clone(remote, tmp_path / "clone")


def claim(queue: Queue, worker: str, step_id: str):
    incarnation = f"{worker}.test"
    return queue.claim(worker, incarnation, holder_info(incarnation), step_id=step_id)


def push(queue: Queue, files: dict, message: str, parent: str | None = None, ref: str = QUEUE) -> str:
    parent = parent or queue.snapshot().tip
    commit = queue.store.make_commit([parent], files, message, signer_for("mallory"))
    assert queue.store.push([(ref, commit, parent)])
    return commit


def forge(queue: Queue, step_id: str, kind: str, actor: str, updates: dict | None = None, trailers: dict | None = None,
          edit=None, extra_files: dict | None = None, meta: dict | None = None, **event) -> str:
    """A transition commit built by hand: `updates` as given (or what `transition` writes
    with no plan context), then tampered with, then pushed."""
    snap = queue.snapshot()
    step = snap.plan.find(step_id)
    if updates is None:
        updates = transition({**step.meta, **(meta or {})}, Event(kind, **event), actor, utc_now(), step_id)
    text = set_fields(step.text, updates)
    if edit:
        text = edit(text)
    written = {"Event": kind, "Step": step_id, "Worker": actor, "Attempt": updates.get("attempt", step.attempt), "Status": updates.get("status")}
    message = commit_message(f"{kind} {step_id} by {actor}", {**written, **(trailers or {})})
    return push(queue, {step.path: text.encode(), **(extra_files or {})}, message, snap.tip)


def refused(remote: Path, action, *reasons: str, ref: str = QUEUE) -> str:
    before = tip(remote, ref)
    with pytest.raises(PushRefused) as info:
        action()
    for reason in reasons:
        assert reason in str(info.value)
    assert tip(remote, ref) == before
    return str(info.value)


# --- installing ------------------------------------------------------------------------------


def test_install_renders_the_interpreter_and_protects_refs(remote: Path):
    hook = remote / "hooks" / "pre-receive"
    text = hook.read_text()
    assert os.access(hook, os.X_OK)
    assert f"PYTHON={sys.executable}" in text and "-m runner.hooks.server pre-receive" in text
    # Repository-wide denyNonFastForwards would refuse a step branch's next attempt: the hook guards the protocol refs.
    assert git(remote, "config", "receive.denyNonFastForwards", check=False) == ""


def test_install_keeps_an_existing_server_hook_and_uninstall_restores_it(tmp_path: Path, monkeypatch):
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    original = "#!/bin/sh\nwhile read old new ref; do echo \"$ref\" >> \"$(dirname \"$0\")/seen\"; done\nexit ${REFUSE:-0}\n"
    (bare / "hooks" / "pre-receive").write_text(original)
    (bare / "hooks" / "pre-receive").chmod(0o755)
    assert runner("install-hooks", "--server", str(bare), cwd=tmp_path).returncode == 0
    assert (bare / "hooks" / "pre-receive.runner-saved").read_text() == original

    queue = new_clone(bare, tmp_path / "clone")
    queue.init("alice")
    assert "refs/heads/runner/queue" in (bare / "hooks" / "seen").read_text()  # the saved hook ran first

    monkeypatch.setenv("REFUSE", "1")  # the saved hook now refuses: so does the chain
    refused(bare, lambda: add_step(queue, "01-a"))
    monkeypatch.delenv("REFUSE")

    done = runner("uninstall-hooks", "--server", str(bare), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (bare / "hooks" / "pre-receive").read_text() == original
    assert not (bare / "hooks" / "pre-receive.runner-saved").exists()


def test_install_lists_every_bad_input(tmp_path: Path):
    (tmp_path / "work").mkdir()
    git(tmp_path, "init", "-q", str(tmp_path / "work"))
    done = runner("install-hooks", "--server", str(tmp_path / "missing"), "--repo", str(tmp_path / "nothing"), cwd=tmp_path)
    assert done.returncode == 2
    assert "missing: no such folder" in done.stderr and "nothing: no such folder" in done.stderr
    done = runner("install-hooks", "--server", str(tmp_path / "work"), cwd=tmp_path)
    assert done.returncode == 2 and "not a bare repository" in done.stderr


# --- what legal workers and people push -------------------------------------------------------


def test_a_real_tick_records_its_result_through_the_hook(remote: Path, queue: Queue):
    done = runner("tick", "--id", "w1", "--json", cwd=queue.store.workdir)
    assert done.returncode == 0, done.stderr
    step = queue.snapshot().plan.find("01-a")
    assert step.status == "done"
    assert "- [x] passes: `true`" in step.text and "- [ ] reads well" in step.text
    assert tip(remote, "refs/heads/runner/steps/01-a")


def test_every_transition_the_queue_writes_passes(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    queue.beat("w1", {"step": "01-a"})
    queue.beat("w1", {"step": "01-a"})  # heartbeat refs fast-forward
    queue.apply_event("01-a", Event("fail", attempt=1, reason="gate failed:\n  lint", retry_at=utc_now()), "w1")
    claim(queue, "w1", "01-a")
    queue.apply_event("01-a", Event("takeover", attempt=2, lease="1h", reason="lease expired"), "w2")
    queue.apply_event("01-a", Event("release", attempt=3, reason="stopping"), "w2")
    claim(queue, "w2", "01-a")
    handoff = {handoff_path("01-a"): b"---\nstep: 01-a\n---\ndone\n"}
    queue.apply_event("01-a", Event("complete", attempt=4, result={"commit": "abc"}), "w2", extra_files=handoff)
    claim(queue, "w3", "02-b")  # its dependency is done now
    claim(queue, "w1", "03-c")
    queue.apply_event("03-c", Event("complete", attempt=1), "w1")
    queue.apply_event("03-c", Event("reject", reason="needs tests"), "bob")
    claim(queue, "w1", "03-c")
    queue.apply_event("03-c", Event("complete", attempt=2), "w1")
    queue.apply_event("03-c", Event("approve"), "bob")
    claim(queue, "w1", "04-d")
    queue.apply_event("04-d", Event("fail", attempt=1, reason="broken", permanent=True), "w1")
    queue.apply_event("04-d", Event("retry"), "bob")
    queue.set_halt("maintenance", "bob")
    queue.set_halt(None, "bob")
    add_step(queue, "05-e", depends_on=["04-d"])
    plan = queue.snapshot().plan
    assert [plan.find(s).status for s in ("01-a", "02-b", "03-c", "04-d", "05-e")] == ["done", "claimed", "done", "ready", "ready"]
    assert not plan.problems


def test_pipeline_transitions_pass(remote: Path, queue: Queue):
    """Deviation, a held result with carried metrics, approve, and a person's abort."""
    claim(queue, "w1", "04-d")
    queue.apply_event("04-d", Event("deviation", attempt=1, reason="orient: the plan is stale"), "w1")
    queue.apply_event("04-d", Event("approve"), "bob")
    claim(queue, "w1", "04-d")
    metrics = {"scores": [0.4, 0.7], "spent": 12.5}
    queue.apply_event("04-d", Event("complete", attempt=2, hold=True, reason="PIPELINE-FAULT: independent review did not run", metrics=metrics), "w1")
    queue.apply_event("04-d", Event("approve"), "bob")
    queue.apply_event("03-c", Event("abort", reason="not needed"), "bob")
    plan = queue.snapshot().plan
    assert plan.find("04-d").status == "done" and plan.find("04-d").meta["scores"] == [0.4, 0.7]
    assert plan.find("03-c").status == "failed"


def test_racing_claim_processes_never_double_claim(remote: Path, queue: Queue, tmp_path: Path):
    workers = [f"w{n}" for n in range(1, 6)]
    procs = []
    for worker in workers:
        clone = tmp_path / f"clone-{worker}"
        new_clone(remote, clone)
        procs.append(subprocess.Popen([sys.executable, "-m", "runner", "claim", "--id", worker], cwd=clone, env=ENV,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    codes = [proc.wait(timeout=120) for proc in procs]
    claims = [e for e in queue.log(limit=0) if e["event"] == "claim"]
    claimed_steps = [e["step"] for e in claims]
    assert len(claimed_steps) == len(set(claimed_steps)) == 3  # 01-a, 03-c, 04-d were ready
    assert sorted(codes) == [0, 0, 0, 3, 3], [p.stderr.read() for p in procs]


def test_a_pre_existing_invalid_file_does_not_block_other_pushes(remote: Path, queue: Queue):
    direct = Queue(GitStore(remote, remote=None))  # writes into the remote without its hook
    direct.add_files({"plans/steps/99-bad.md": b"---\nstep: [oops\n---\n"}, "add a broken step", "alice")
    claim(queue, "w1", "01-a")
    add_step(queue, "05-e")


# --- what the server refuses ------------------------------------------------------------------


def test_the_queue_is_never_rewound_or_deleted(remote: Path, queue: Queue):
    start = queue.snapshot().tip
    claim(queue, "w1", "01-a")
    now = queue.snapshot().tip
    refused(remote, lambda: queue.store.push([(QUEUE, start, now)]), "not a fast-forward")
    refused(remote, lambda: queue.store.push([(QUEUE, "", now)]), "refs/heads/runner/queue: this branch may not be deleted")


def test_the_integration_branch_is_protected_like_the_queue(remote: Path, queue: Queue):
    queue.store.fetch(["runner/integration"])
    base = queue.store.tip("runner/integration")
    step = queue.store.make_commit([base], {"a.txt": b"a\n"}, "work\n", signer_for("w1"), base_tree=None)
    assert queue.store.push([(INTEGRATION, step, base)])
    refused(remote, lambda: queue.store.push([(INTEGRATION, base, step)]), "not a fast-forward", ref=INTEGRATION)
    refused(remote, lambda: queue.store.push([(INTEGRATION, "", step)]), "refs/heads/runner/integration: this branch may not be deleted", ref=INTEGRATION)


def test_heartbeat_refs_only_fast_forward(remote: Path, queue: Queue):
    ref = "refs/runner/heartbeats/w1"
    first = queue.beat("w1", {})
    queue.beat("w1", {})
    refused(remote, lambda: queue.store.push([(ref, first, tip(remote, ref))]), "not a fast-forward", ref=ref)


def test_a_commit_that_changes_two_steps(remote: Path, queue: Queue):
    snap = queue.snapshot()
    a, d = snap.plan.find("01-a"), snap.plan.find("04-d")
    claim_of = lambda step: transition(step.meta, Event("claim", lease="1h"), "w1", utc_now(), step.id)
    files = {a.path: set_fields(a.text, claim_of(a)).encode(), d.path: set_fields(d.text, claim_of(d)).encode()}
    message = commit_message("claim two", {"Event": "claim", "Step": "01-a", "Worker": "w1", "Attempt": 1})
    refused(remote, lambda: push(queue, files, message), "changes 2 step files (01-a, 04-d)")


def test_a_claim_whose_dependencies_are_not_done(remote: Path, queue: Queue):
    refused(remote, lambda: forge(queue, "02-b", "claim", "w1", lease="1h"), "02-b has dependencies that are not done")


def test_a_second_claim_while_one_holds(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    refused(remote, lambda: forge(queue, "01-a", "claim", "w2", meta={"status": "ready"}, lease="1h"), "01-a is claimed, not ready")


def test_holder_events_by_a_worker_that_does_not_hold_the_claim(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    for kind in ("complete", "fail", "release"):
        refused(remote, lambda: forge(queue, "01-a", kind, "w2", meta={"assignee": "w2"}, attempt=1, reason="x"), "01-a is held by 'w1', not 'w2'")


def test_an_old_incarnation_of_the_holder_may_not_record(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")  # held by incarnation w1.test
    refused(
        remote,
        lambda: forge(queue, "01-a", "complete", "w1", attempt=1, meta={"holder": {}}, trailers={"Incarnation": "w1.before-restart"}),
        "held by another incarnation of w1",
    )


def test_a_stale_attempt_may_not_record_and_attempts_never_go_back(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    queue.apply_event("01-a", Event("takeover", attempt=1, lease="1h", reason="lease expired"), "w1")  # w1 again, attempt 2
    stale = {"Attempt": 1}
    refused(remote, lambda: forge(queue, "01-a", "complete", "w1", attempt=2, trailers=stale), "attempt 1 was taken over and may not record anything")
    updates = {"status": "done", "assignee": None, "claimed_at": None, "lease": None, "holder": None, "attempt": 1}
    refused(remote, lambda: forge(queue, "01-a", "complete", "w1", updates=updates), "the attempt number goes backwards (2 -> 1)")


def test_trailers_that_do_not_describe_the_change(remote: Path, queue: Queue):
    refused(remote, lambda: forge(queue, "01-a", "claim", "w1", lease="1h", trailers={"Step": "04-d"}), "Runner-Step 04-d does not match the step file it changes (plans/steps/01-a.md)")
    refused(remote, lambda: forge(queue, "01-a", "claim", "w1", lease="1h", trailers={"Attempt": 7}), "Runner-Attempt 7 does not match the step's attempt 1")
    refused(remote, lambda: forge(queue, "01-a", "claim", "w1", lease="1h", trailers={"Status": "done"}), "Runner-Status done does not match the step's status claimed")
    refused(remote, lambda: forge(queue, "01-a", "claim", "w1", lease="1h", trailers={"Worker": "w2"}), "last_updated_by is 'w1'; a claim by w2 writes 'w2'")


def test_a_takeover_must_name_the_attempt_it_replaces(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    refused(remote, lambda: forge(queue, "01-a", "takeover", "w2", attempt=1, lease="1h"), "a takeover must name the attempt it replaces (Runner-Replaces)")
    refused(remote, lambda: forge(queue, "01-a", "takeover", "w2", attempt=1, lease="1h", trailers={"Replaces": 0}), "Runner-Replaces 0 is not the attempt being taken over (1)")


def test_a_transition_may_not_touch_anything_else(remote: Path, queue: Queue):
    retitled = lambda text: text.replace("title: A", "title: Something else")
    refused(remote, lambda: forge(queue, "01-a", "claim", "w1", lease="1h", edit=retitled), "a claim changes runner-managed fields only, not title")
    rewritten = lambda text: text.replace("reads well", "is fine")
    refused(remote, lambda: forge(queue, "01-a", "claim", "w1", lease="1h", edit=rewritten), "a claim may not change the step's text")
    refused(remote, lambda: forge(queue, "01-a", "claim", "w1", lease="1h", extra_files={"runner.toml": b""}), "a claim commit may change only 01-a's step file, not runner.toml")
    claim(queue, "w1", "01-a")
    manual = lambda text: text.replace("- [ ] reads well", "- [x] reads well")
    refused(remote, lambda: forge(queue, "01-a", "complete", "w1", attempt=1, edit=manual), "a complete may only tick Automated Verification boxes")


def test_a_claim_while_halted(remote: Path, queue: Queue):
    queue.set_halt("maintenance", "bob")
    refused(remote, lambda: forge(queue, "01-a", "claim", "w1", lease="1h"), "the queue is halted")


def test_edits_without_an_event_keep_managed_fields(remote: Path, queue: Queue):
    step = queue.snapshot().plan.find("04-d")
    done = set_fields(step.text, {"status": "done"}).encode()
    refused(remote, lambda: push(queue, {step.path: done}, "mark it done\n"), "plans/steps/04-d.md: changes runner-managed status without a Runner-Event trailer")
    path, data = new_step_file("05-e", "E", {"status": "claimed", "assignee": "w9"}, "")
    refused(remote, lambda: push(queue, {path: data}, "add 05-e\n"), "plans/steps/05-e.md: a new step may not start claimed (assignee)")
    refused(remote, lambda: push(queue, {"plans/HALT": b"stop\n"}, "halt by hand\n"), "plans/HALT changes only with `runner halt`")
    refused(remote, lambda: push(queue, {"plans/steps/01-a.md": None}, "drop 01-a\n"), "deleting 01-a leaves plans/steps/02-b.md depending on a step that does not exist")
    retitled = step.text.replace("title: D", "title: Dee").encode()
    push(queue, {step.path: retitled}, "retitle 04-d\n")  # people edit titles and bodies freely
    path, data = new_step_file("05-e", "E", {"status": "done"}, "")
    push(queue, {path: data}, "import 05-e, done elsewhere\n")
    push(queue, {path: None}, "drop 05-e\n")


def test_step_files_that_break_the_schema(remote: Path, queue: Queue):
    refused(remote, lambda: push(queue, {"plans/steps/05-e.md": b"---\nstep: 05-e\npriority: high\n---\n"}, "add 05-e\n"), "plans/steps/05-e.md: priority must be an integer")
    refused(remote, lambda: push(queue, {"plans/steps/05-e.md": b"---\nstep: [oops\n---\n"}, "add 05-e\n"), "plans/steps/05-e.md: bad YAML")
    refused(remote, lambda: push(queue, {"plans/steps/05-e.md": b"---\ndepends_on: [77-nope]\n---\n"}, "add 05-e\n"), "plans/steps/05-e.md: unknown dependency: 77-nope")
    cycle = {"plans/steps/05-e.md": b"---\ndepends_on: [06-f]\n---\n", "plans/steps/06-f.md": b"---\ndepends_on: [05-e]\n---\n"}
    refused(remote, lambda: push(queue, cycle, "add a cycle\n"), "dependency cycle: 05-e -> 06-f -> 05-e")
    refused(remote, lambda: push(queue, {"plans/steps/sub/04-d.md": b"---\ntitle: again\n---\n"}, "add a duplicate\n"), "duplicate step id '04-d'")


def test_every_commit_of_a_push_is_checked_not_only_the_tip(remote: Path, queue: Queue):
    snap = queue.snapshot()
    step = snap.plan.find("02-b")
    bad = set_fields(step.text, {"status": "done"}).encode()
    middle = queue.store.make_commit([snap.tip], {step.path: bad}, "sneak 02-b to done\n", signer_for("mallory"))
    fine = queue.store.make_commit([middle], {"plans/NOTES.md": b"notes\n"}, "notes\n", signer_for("mallory"))
    message = refused(remote, lambda: queue.store.push([(QUEUE, fine, snap.tip)]), "changes runner-managed status")
    assert middle[:10] in message and fine[:10] not in message


def test_identities_map_pushers_to_the_workers_they_may_act_as(remote: Path, queue: Queue, monkeypatch):
    toml = queue.store.file_at(queue.snapshot().tip, "runner.toml").decode()
    toml += '\n[hooks]\npusher_env = "GL_USERNAME"\nadmins = ["alice"]\n\n[hooks.identities]\nalice = ["host-a"]\nbob = ["host-b"]\n'
    push(queue, {"runner.toml": toml.encode()}, "who may act as whom\n")

    monkeypatch.setenv("GL_USERNAME", "bob")
    refused(remote, lambda: claim(queue, "host-a", "01-a"), "pusher 'bob' may act as host-b, not as worker 'host-a'")
    refused(remote, lambda: queue.beat("host-a", {}), "not as worker 'host-a'", ref="refs/runner/heartbeats/host-a")
    refused(remote, lambda: push(queue, {"runner.toml": toml.replace('"host-b"', '"host-a"').encode()}, "me too\n"), "only [hooks] admins may change the [hooks] table")
    claim(queue, "host-b", "04-d")
    queue.set_halt("maintenance", "bob")  # a person event: any known pusher

    monkeypatch.setenv("GL_USERNAME", "carol")
    refused(remote, lambda: queue.set_halt(None, "carol"), "pusher 'carol' is not listed in [hooks.identities]")
    monkeypatch.setenv("GL_USERNAME", "alice")
    queue.set_halt(None, "alice")
    claim(queue, "host-a", "01-a")


def test_the_check_is_also_a_function_and_a_hidden_command(remote: Path, queue: Queue):
    from runner.hooks.server import check_push

    snap = queue.snapshot()
    step = snap.plan.find("02-b")
    bad = queue.store.make_commit([snap.tip], {step.path: set_fields(step.text, {"status": "done"}).encode()}, "x\n", signer_for("m"))
    assert queue.store.push([("refs/heads/runner/steps/02-b", bad, None)])  # step branches pass unchecked
    assert check_push(remote, snap.tip, bad, "refs/heads/runner/steps/02-b") == []
    reasons = check_push(remote, snap.tip, bad, QUEUE)
    assert len(reasons) == 1 and "changes runner-managed status without a Runner-Event trailer" in reasons[0]
    done = subprocess.run([sys.executable, "-m", "runner", "hook-pre-receive"], cwd=remote, env=ENV, capture_output=True,
                          text=True, input=f"{snap.tip} {bad} {QUEUE}\n")
    assert done.returncode == 1 and "changes runner-managed status" in done.stderr


# --- the client's pre-commit hook --------------------------------------------------------------


def test_pre_commit_blocks_invalid_step_files_and_keeps_an_existing_hook(tmp_path: Path):
    repo = tmp_path / "plan"
    git(tmp_path, "init", "-q", str(repo))
    git(repo, "config", "user.name", "alice")
    git(repo, "config", "user.email", "alice@example.com")
    steps = repo / "plans" / "steps"
    steps.mkdir(parents=True)
    (steps / "01-a.md").write_text("---\nstep: 01-a\ntitle: A\n---\n")
    original = "#!/bin/sh\necho ran >> \"$(git rev-parse --git-dir)/ran\"\nexit ${REFUSE:-0}\n"
    (repo / ".git" / "hooks" / "pre-commit").write_text(original)
    (repo / ".git" / "hooks" / "pre-commit").chmod(0o755)
    done = runner("install-hooks", "--repo", str(repo), cwd=tmp_path)
    assert done.returncode == 0, done.stderr

    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "a sound plan")
    assert (repo / ".git" / "ran").exists()

    (steps / "02-b.md").write_text("---\nstep: 02-b\ndepends_on: [09-missing]\n---\n")
    (steps / "03-c.md").write_text("---\nstep: [oops\n---\n")
    git(repo, "add", ".")
    blocked = subprocess.run(["git", "commit", "-q", "-m", "broken"], cwd=repo, capture_output=True, text=True, env=ENV)
    assert blocked.returncode != 0
    assert "plans/steps/02-b.md: unknown dependency: 09-missing" in blocked.stderr
    assert "plans/steps/03-c.md: bad YAML" in blocked.stderr

    (steps / "03-c.md").write_text("---\nstep: 03-c\n---\n")
    (steps / "02-b.md").write_text("---\nstep: 02-b\ndepends_on: [01-a]\n---\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "fixed")

    (steps / "01-a.md").write_text("---\nstep: 01-a\npriority: high\n---\n")
    blocked = subprocess.run(["git", "commit", "-q", "-a", "-m", "commit -a uses a temporary index"], cwd=repo, capture_output=True, text=True)
    assert blocked.returncode != 0 and "plans/steps/01-a.md: priority must be an integer" in blocked.stderr
    git(repo, "checkout", "--", ".")

    (steps / "04-d.md").write_text("---\nstep: 04-d\n---\n")
    git(repo, "add", ".")
    refuse = subprocess.run(["git", "commit", "-q", "-m", "x"], cwd=repo, capture_output=True, text=True, env={**os.environ, "REFUSE": "1"})
    assert refuse.returncode != 0  # the saved hook runs first and may refuse

    assert runner("uninstall-hooks", "--repo", str(repo), cwd=tmp_path).returncode == 0
    assert (repo / ".git" / "hooks" / "pre-commit").read_text() == original
