"""The second round of breaks (issue 30): each found by attacking runner as a user, a hostile
client or a hostile agent would, each repeated here against real repositories and processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ENV_PATH, ROOT, add_step, edit, git, make_remote, runner, runner_json, set_config, start_worker, statuses, step_file, tick, wait_for
from runner.core.stepfile import parse_step

# --- a typo removes a promise ------------------------------------------------------------------

TYPOS = {"requires_aproval": ("true", "requires_approval"), "depend_on": ("[01-a]", "depends_on"),
         "max_attempt": ("1", "max_attempts"), "tag": ("[gpu]", "tags"), "Title": ("Hello", "title")}


@pytest.mark.parametrize("typo", TYPOS)
def test_a_key_close_to_a_known_one_makes_the_step_invalid_with_did_you_mean(typo):
    value, meant = TYPOS[typo]
    step = parse_step("plans/steps/02-b.md", f"---\nstep: 02-b\ntitle: B\nrun: [\"true\"]\n{typo}: {value}\n---\n".encode())
    assert f"did you mean {meant}?" in "; ".join(step.problems)


def test_people_keep_their_own_keys():
    step = parse_step("plans/steps/02-b.md", b"---\nstep: 02-b\ntitle: B\nrun: [\"true\"]\nowner: ana\nticket: JIRA-1\nestimate: 3d\n---\n")
    assert step.problems == []


def test_a_mistyped_gate_is_refused_by_validate_import_and_never_claimed(queue_repo, tmp_path):
    path, data = step_file("01-deploy", "Deploy")
    edit(queue_repo, {path: data.replace(b"---\n", b"---\nrequires_aproval: true\n", 1).replace(b"---\nrequires", b"---\nrequires")})
    checked = runner(queue_repo, "validate", check=False)
    assert checked.returncode == 2 and "did you mean requires_approval?" in checked.stderr
    assert tick(queue_repo)["sentinel"] != "STEP_COMPLETE"
    assert statuses(queue_repo)["01-deploy"] == "invalid"

    folder = tmp_path / "plan"
    folder.mkdir()
    (folder / "02-ship.md").write_text("---\nstep: 02-ship\ntitle: Ship\ndepend_on: [01-deploy]\nrun: [\"true\"]\n---\n")
    imported = runner(queue_repo, "import", str(folder), check=False)
    assert imported.returncode == 2 and "did you mean depends_on?" in imported.stderr


def test_the_hook_refuses_a_plan_edit_with_a_mistyped_key(tmp_path):
    from hooked import hooked_remote, push_commit, refused, seed

    bare = hooked_remote(tmp_path / "remote.git")
    queue = seed(bare, tmp_path / "clone")
    path, data = step_file("05-e", "E")
    typo = data.replace(b"title: E\n", b"title: E\nmax_attempt: 1\n")
    refused(bare, lambda: push_commit(queue, {path: typo}, "add 05-e", author="alice"), "did you mean max_attempts?")


# --- terminal escapes and markup from the queue ---------------------------------------------------

ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31mred"


def test_control_characters_in_a_title_are_refused_and_never_reach_the_terminal(queue_repo):
    refused = runner(queue_repo, "add", ESCAPES, "--id", "01-a", "--run", "true", check=False)
    assert refused.returncode == 2 and "control characters" in refused.stderr
    path, data = step_file("01-a", ESCAPES.replace("\x1b", "\\e"))
    edit(queue_repo, {path: data.replace(b"\\e", b"\\x1b").replace(b"title: ", b"title: \"", 1).replace(b"red\n", b"red\"\n", 1)})
    edit(queue_repo, {"plans/notes.txt": b"x"}, f"a person's commit {ESCAPES}")
    for args in (["status"], ["show", "01-a"], ["graph"], ["log"], ["validate"]):
        said = runner(queue_repo, *args, check=False)
        assert "\x1b" not in said.stdout + said.stderr and "\x07" not in said.stdout + said.stderr, args
    assert "\\x1b[31mred" in runner(queue_repo, "show", "01-a").stdout


def test_rich_markup_in_queue_text_is_shown_as_text(queue_repo):
    """A title like "[/bold] x" must not be read as rich markup (it crashed `status` on a terminal);
    doctor's config errors keep their [table] names."""
    add_step(queue_repo, "01-a", "[bold]not bold[/bold] [/] done")
    code = ("import sys; sys.argv=['runner','status','--repo',sys.argv[1]]; sys.stdout.isatty=lambda: True; "
            "from runner.__main__ import main; main()")
    shown = subprocess.run([sys.executable, "-c", code, str(queue_repo)], capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "[bold]not bold[/bold] [/] done" in shown.stdout
    plain_git_commit(queue_repo, {"runner.toml": b'[hooks]\npeople = ["alice"]\n[hooks.identities]\nkey-a = ["w1"]\n'})
    doctor = runner(queue_repo, "doctor", check=False)
    assert "[hooks] identities needs pusher_env" in doctor.stdout, doctor.stdout


def plain_git_commit(repo: Path, files: dict) -> None:
    """A commit on the queue branch as a person makes it with plain git: nothing checks it."""
    from runner.queue.queue import author_for, open_queue
    from runner.store import RefUpdate

    queue = open_queue(repo, remote=None)
    tip = queue.snapshot().tip
    queue.store.publish([RefUpdate("refs/heads/runner/queue", queue.store.make_commit([tip], files, "by hand", author_for("ana")), tip)])


def test_the_documented_default_pusher_env_is_accepted(queue_repo):
    set_config(queue_repo, detect=False, extra='\n[hooks]\npusher_env = ""\n')
    assert runner(queue_repo, "validate").returncode == 0


# --- processes that outlive their worker ----------------------------------------------------------

def dead(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def tree_script(pids: Path, then: str = "sleep 300") -> list[str]:
    """A step that starts a grandchild in its session and a child that leaves it (setsid), each
    writing its pid, then `then`."""
    return ["sh", "-c", f'sh -c "echo \\$\\$ >> {pids}; exec sleep 300" & setsid sh -c "echo \\$\\$ >> {pids}; exec sleep 300" & '
                        f'echo $$ >> {pids}; {then}']


def started(pids: Path, count: int = 3) -> list[int]:
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == count)
    return [int(p) for p in pids.read_text().split()]


def test_the_whole_tree_a_step_starts_dies_with_its_worker_on_kill_9(queue_repo, tmp_path):
    pids = tmp_path / "pids"
    add_step(queue_repo, "01-hang", run=tree_script(pids), timeout="10m")
    victim = start_worker(queue_repo, "host-a", env={"RUNNER_HOST": "far-away"})  # no takeover on this host helps
    family = started(pids)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    wait_for(lambda: all(dead(pid) for pid in family), timeout=15)


def test_what_a_step_leaves_running_ends_with_the_step(queue_repo, tmp_path):
    pids = tmp_path / "pids"
    add_step(queue_repo, "01-daemonise", run=tree_script(pids, then=f'while [ "$(wc -l < {pids})" -lt 3 ]; do sleep 0.1; done'))
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    wait_for(lambda: all(dead(pid) for pid in started(pids)), timeout=15)


def test_sigterm_of_a_tick_gives_the_step_back_within_the_grace_period_and_ends_its_tree(queue_repo, tmp_path):
    set_config(queue_repo, detect=False, grace_period="1s")
    pids = tmp_path / "pids"
    add_step(queue_repo, "01-hang", run=tree_script(pids), timeout="10m")
    ticking = subprocess.Popen([sys.executable, "-m", "runner", "tick", "--id", "w1", "--json", "--repo", str(queue_repo)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV_PATH)
    family = started(pids)
    ticking.send_signal(signal.SIGTERM)
    out, err = ticking.communicate(timeout=60)
    assert ticking.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["sentinel"] == "SKIP"
    step = runner_json(queue_repo, "show", "01-hang")
    assert step["status"] == "ready" and not step.get("failures"), step  # given back, nothing spent
    wait_for(lambda: all(dead(pid) for pid in family), timeout=15)


# --- refs named like runner's own -------------------------------------------------------------------

def test_a_branch_named_like_runners_refs_is_a_clear_failure_not_a_lost_race(tmp_path):
    """`runner/steps` on the remote blocks every `runner/steps/<id>` (git keeps refs as paths):
    the record says what to remove, at once, instead of losing 200 races while it heartbeats."""
    bare, (clone,) = make_remote(tmp_path)
    runner(clone, "init")
    set_config(clone, detect=False, requires_approval=True)  # the record creates the step's branch
    add_step(clone, "01-a")
    git(clone, "push", "-q", "origin", "HEAD:refs/heads/runner/steps")
    report = json.loads(runner(clone, "tick", "--id", "w1", "--json", check=False).stdout.splitlines()[-1])
    assert "cannot create refs/heads/runner/steps/01-a: refs/heads/runner/steps exists" in report["reason"], report
    assert "lost" not in report["reason"]
    assert "--delete runner/steps" in report["reason"]


def test_a_local_ref_named_like_runners_refs_is_a_clear_failure(queue_repo):
    set_config(queue_repo, detect=False, requires_approval=True)
    add_step(queue_repo, "01-a")
    git(queue_repo, "branch", "runner/steps")
    git(queue_repo, "pack-refs", "--all")  # libgit2 alone would write runner/steps/01-a beside a packed runner/steps
    report = json.loads(runner(queue_repo, "tick", "--id", "w1", "--json", check=False).stdout.splitlines()[-1])
    assert "cannot create refs/heads/runner/steps/01-a: refs/heads/runner/steps exists" in report["reason"], report
    assert git(queue_repo, "for-each-ref", "--format=%(refname)", "refs/heads/runner/steps/") == ""


@pytest.mark.parametrize("ref", ["refs/heads/runner/steps", "refs/heads/runner", "refs/heads/runner/steps/01-a/x",
                                 "refs/heads/runner/queue/x", "refs/heads/runner/integration/x", "refs/runner/heartbeats",
                                 "refs/runner/heartbeats/w1/x"])
def test_the_hook_refuses_refs_that_would_block_runners_own(tmp_path, ref):
    from hooked import hooked_remote, seed

    bare = hooked_remote(tmp_path / "remote.git")
    queue = seed(bare, tmp_path / "clone")
    tip = queue.snapshot().tip
    pushed = subprocess.run(["git", "push", "--porcelain", str(bare), f"{tip}:{ref}"], cwd=tmp_path / "clone", capture_output=True, text=True)
    assert pushed.returncode != 0 and "runner refused" in pushed.stderr, (ref, pushed.stderr)
    assert git(bare, "rev-parse", "--verify", "-q", ref, check=False) == ""
    other = subprocess.run(["git", "push", "--porcelain", str(bare), f"{tip}:refs/heads/feature/x"], cwd=tmp_path / "clone", capture_output=True, text=True)
    assert other.returncode == 0, other.stderr  # people's own branches stay theirs


# --- faults of runner itself are bounded -------------------------------------------------------------

def test_faults_of_runner_back_off_and_a_few_in_a_row_hold_the_step_for_a_person(queue_repo):
    set_config(queue_repo, detect=False, max_attempts=3)
    add_step(queue_repo, "01-a")
    fault = {"RUNNER_FAIL_AT": "after-step"}
    for n, later in ((1, 0), (2, 7200)):
        report = json.loads(runner(queue_repo, "tick", "--id", "w1", "--json", check=False,
                                   env={**fault, "RUNNER_CLOCK_OFFSET": str(later)}).stdout.splitlines()[-1])
        assert report["outcome"] == "fault", report
        step = runner_json(queue_repo, "show", "01-a")
        assert step["status"] == "ready" and step["faults_in_a_row"] == n and not step.get("failures"), step
        assert step["not_before"], "a fault backs off as a failure would"
        assert tick(queue_repo, env={**fault, "RUNNER_CLOCK_OFFSET": str(later)})["sentinel"] == "SKIP"  # not before its backoff
    report = json.loads(runner(queue_repo, "tick", "--id", "w1", "--json", check=False,
                               env={**fault, "RUNNER_CLOCK_OFFSET": "90000"}).stdout.splitlines()[-1])
    assert report["sentinel"] == "STEP_BLOCKED", report
    step = runner_json(queue_repo, "show", "01-a")
    assert step["status"] == "review" and "3 faults of runner in a row" in step["last_error"] and "InjectedFault" in step["last_error"]
    runner(queue_repo, "approve", "01-a", "--by", "alice")  # a person decides: try again
    assert tick(queue_repo, env={"RUNNER_CLOCK_OFFSET": "90000"})["sentinel"] == "STEP_COMPLETE"
    assert "faults_in_a_row: null" in git(queue_repo, "show", "runner/queue:plans/steps/01-a.md") or \
        "faults_in_a_row" not in runner_json(queue_repo, "show", "01-a")
