"""The second round of breaks (issue 30): each found by attacking runner as a user, a hostile
client or a hostile agent would, each repeated here against real repositories and processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.repos import (
    ENV_PATH,
    ROOT,
    add_step,
    edit,
    git,
    make_remote,
    queue_history,
    runner,
    runner_json,
    set_config,
    start_worker,
    statuses,
    step_file,
    tick,
    wait_for,
)

from runner.core.stepfile import parse_step

# --- a typo removes a promise ------------------------------------------------------------------

TYPOS = {
    "requires_aproval": ("true", "requires_approval"),
    "depend_on": ("[01-a]", "depends_on"),
    "max_attempt": ("1", "max_attempts"),
    "tag": ("[gpu]", "tags"),
    "Title": ("Hello", "title"),
}


@pytest.mark.parametrize("typo", TYPOS)
def test_a_key_close_to_a_known_one_makes_the_step_invalid_with_did_you_mean(typo):
    value, meant = TYPOS[typo]
    step = parse_step(
        "plans/steps/02-b.md", f'---\nstep: 02-b\ntitle: B\nrun: ["true"]\n{typo}: {value}\n---\n'.encode()
    )
    assert f"did you mean {meant}?" in "; ".join(step.problems)


def test_people_keep_their_own_keys():
    step = parse_step(
        "plans/steps/02-b.md",
        b'---\nstep: 02-b\ntitle: B\nrun: ["true"]\nowner: ana\nticket: JIRA-1\nestimate: 3d\n---\n',
    )
    assert step.problems == []


def test_a_mistyped_gate_is_refused_by_validate_import_and_never_claimed(queue_repo, tmp_path):
    path, data = step_file("01-deploy", "Deploy")
    edit(
        queue_repo,
        {path: data.replace(b"---\n", b"---\nrequires_aproval: true\n", 1).replace(b"---\nrequires", b"---\nrequires")},
    )
    checked = runner(queue_repo, "validate", check=False)
    assert checked.returncode == 2 and "did you mean requires_approval?" in checked.stderr
    assert tick(queue_repo)["sentinel"] != "STEP_COMPLETE"
    assert statuses(queue_repo)["01-deploy"] == "invalid"

    folder = tmp_path / "plan"
    folder.mkdir()
    (folder / "02-ship.md").write_text('---\nstep: 02-ship\ntitle: Ship\ndepend_on: [01-deploy]\nrun: ["true"]\n---\n')
    imported = runner(queue_repo, "import", str(folder), check=False)
    assert imported.returncode == 2 and "did you mean depends_on?" in imported.stderr


def test_the_hook_refuses_a_plan_edit_with_a_mistyped_key(tmp_path):
    from support.hooked import hooked_remote, push_commit, refused, seed

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
    edit(
        queue_repo,
        {path: data.replace(b"\\e", b"\\x1b").replace(b"title: ", b'title: "', 1).replace(b"red\n", b'red"\n', 1)},
    )
    edit(queue_repo, {"plans/notes.txt": b"x"}, f"a person's commit {ESCAPES}")
    for args in (["status"], ["show", "01-a"], ["graph"], ["log"], ["validate"]):
        said = runner(queue_repo, *args, check=False)
        assert "\x1b" not in said.stdout + said.stderr and "\x07" not in said.stdout + said.stderr, args
    assert "\\x1b[31mred" in runner(queue_repo, "show", "01-a").stdout


def test_rich_markup_in_queue_text_is_shown_as_text(queue_repo):
    """A title like "[/bold] x" must not be read as rich markup (it crashed `status` on a terminal);
    doctor's config errors keep their [table] names."""
    add_step(queue_repo, "01-a", "[bold]not bold[/bold] [/] done")
    code = (
        "import sys; sys.argv=['runner','status','--repo',sys.argv[1]]; sys.stdout.isatty=lambda: True; "
        "from runner.__main__ import main; main()"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code, str(queue_repo)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )
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
    queue.store.publish(
        [RefUpdate("refs/heads/runner/queue", queue.store.make_commit([tip], files, "by hand", author_for("ana")), tip)]
    )


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
    return [
        "sh",
        "-c",
        (
            f'sh -c "echo \\$\\$ >> {pids}; exec sleep 300" & setsid sh -c "echo \\$\\$ >> {pids}; exec sleep 300" & '
            f"echo $$ >> {pids}; {then}"
        ),
    ]


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
    add_step(
        queue_repo,
        "01-daemonise",
        run=tree_script(pids, then=f'while [ "$(wc -l < {pids})" -lt 3 ]; do sleep 0.1; done'),
    )
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    wait_for(lambda: all(dead(pid) for pid in started(pids)), timeout=15)


def test_sigterm_of_a_tick_gives_the_step_back_within_the_grace_period_and_ends_its_tree(queue_repo, tmp_path):
    set_config(queue_repo, detect=False, grace_period="1s")
    pids = tmp_path / "pids"
    add_step(queue_repo, "01-hang", run=tree_script(pids), timeout="10m")
    ticking = subprocess.Popen(
        [sys.executable, "-m", "runner", "tick", "--id", "w1", "--json", "--repo", str(queue_repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV_PATH,
    )
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
    _bare, (clone,) = make_remote(tmp_path)
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


@pytest.mark.parametrize(
    "ref",
    [
        "refs/heads/runner/steps",
        "refs/heads/runner",
        "refs/heads/runner/steps/01-a/x",
        "refs/heads/runner/queue/x",
        "refs/heads/runner/integration/x",
        "refs/runner/heartbeats",
        "refs/runner/heartbeats/w1/x",
    ],
)
def test_the_hook_refuses_refs_that_would_block_runners_own(tmp_path, ref):
    from support.hooked import hooked_remote, seed

    bare = hooked_remote(tmp_path / "remote.git")
    queue = seed(bare, tmp_path / "clone")
    tip = queue.snapshot().tip
    pushed = subprocess.run(
        ["git", "push", "--porcelain", str(bare), f"{tip}:{ref}"],
        cwd=tmp_path / "clone",
        capture_output=True,
        text=True,
    )
    assert pushed.returncode != 0 and "runner refused" in pushed.stderr, (ref, pushed.stderr)
    assert git(bare, "rev-parse", "--verify", "-q", ref, check=False) == ""
    other = subprocess.run(
        ["git", "push", "--porcelain", str(bare), f"{tip}:refs/heads/feature/x"],
        cwd=tmp_path / "clone",
        capture_output=True,
        text=True,
    )
    assert other.returncode == 0, other.stderr  # people's own branches stay theirs


# --- faults of runner itself are bounded -------------------------------------------------------------


def test_faults_of_runner_back_off_and_a_few_in_a_row_hold_the_step_for_a_person(queue_repo):
    set_config(queue_repo, detect=False, max_attempts=3)
    add_step(queue_repo, "01-a")
    fault = {"RUNNER_FAIL_AT": "after-step"}
    for n, later in ((1, 0), (2, 7200)):
        report = json.loads(
            runner(
                queue_repo,
                "tick",
                "--id",
                "w1",
                "--json",
                check=False,
                env={**fault, "RUNNER_CLOCK_OFFSET": str(later)},
            ).stdout.splitlines()[-1]
        )
        assert report["outcome"] == "fault", report
        step = runner_json(queue_repo, "show", "01-a")
        assert step["status"] == "ready" and step["faults_in_a_row"] == n and not step.get("failures"), step
        assert step["not_before"], "a fault backs off as a failure would"
        assert (
            tick(queue_repo, env={**fault, "RUNNER_CLOCK_OFFSET": str(later)})["sentinel"] == "SKIP"
        )  # not before its backoff
    report = json.loads(
        runner(
            queue_repo, "tick", "--id", "w1", "--json", check=False, env={**fault, "RUNNER_CLOCK_OFFSET": "90000"}
        ).stdout.splitlines()[-1]
    )
    assert report["sentinel"] == "STEP_BLOCKED", report
    step = runner_json(queue_repo, "show", "01-a")
    assert (
        step["status"] == "review"
        and "3 faults of runner in a row" in step["last_error"]
        and "InjectedFault" in step["last_error"]
    )
    runner(queue_repo, "approve", "01-a", "--by", "alice")  # a person decides: try again
    assert tick(queue_repo, env={"RUNNER_CLOCK_OFFSET": "90000"})["sentinel"] == "STEP_COMPLETE"
    assert "faults_in_a_row: null" in git(
        queue_repo, "show", "runner/queue:plans/steps/01-a.md"
    ) or "faults_in_a_row" not in runner_json(queue_repo, "show", "01-a")


# --- sizes nothing bounded -----------------------------------------------------------------------------

MB2 = "x" * (2 * 1024 * 1024)


def test_an_agents_two_megabyte_step_failed_line_is_clipped_in_the_step_file_and_the_commit(queue_repo):
    add_step(
        queue_repo,
        "01-a",
        run=["python3", "-c", f"print('STEP_FAILED: ' + 'x' * {len(MB2)} + ' the end')"],
        max_attempts=1,
    )
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_FAILED"
    text = git(queue_repo, "show", "runner/queue:plans/steps/01-a.md")
    assert len(text) < 16 * 1024 and "bytes clipped" in text and "the end" in text
    assert runner(queue_repo, "validate").returncode == 0  # the step file stays valid
    assert len(git(queue_repo, "log", "-1", "--format=%B", "runner/queue")) < 64 * 1024


def test_a_verifiers_five_megabyte_reasons_and_a_long_reason_are_clipped(queue_repo, tmp_path):
    verdict = tmp_path / "verdict.py"
    verdict.write_text(
        "import json\nprint(json.dumps({'pass': False, 'score': 0.1, 'reasons': ['y' * 5_000_000, 'z'] * 3}))\n"
    )
    set_config(queue_repo, detect=False, max_attempts=1, max_fix_attempts=0, verifier=[sys.executable, str(verdict)])
    add_step(queue_repo, "01-a")
    assert tick(queue_repo)["sentinel"] == "STEP_FAILED"
    assert len(git(queue_repo, "show", "runner/queue:plans/steps/01-a.md")) < 64 * 1024
    assert runner(queue_repo, "validate").returncode == 0
    runner(queue_repo, "retry", "01-a", "--by", "alice")
    runner(queue_repo, "abort", "01-a", "--reason", "w" * 120_000, "--by", "alice")
    assert len(git(queue_repo, "show", "runner/queue:plans/steps/01-a.md")) < 64 * 1024


def test_notes_roll_within_their_bound_and_an_agent_appends_at_most_a_few_kib(queue_repo, tmp_path):
    from runner.core.limits import MAX_NOTES_APPEND_BYTES, MAX_NOTES_BYTES

    edit(queue_repo, {"plans/NOTES.md": ("old fact\n" * (MAX_NOTES_BYTES // 9 - 100)).encode()})
    writer = ["python3", "-c", "import sys; open(sys.argv[1], 'a').write('new fact\\n' * 400000)", "{notes_file}"]
    add_step(queue_repo, "01-a", run=writer)
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    notes = git(queue_repo, "show", "runner/queue:plans/NOTES.md")
    assert len(notes.encode()) <= MAX_NOTES_BYTES and notes.startswith("(Older notes were trimmed")
    assert notes.count("new fact") * 9 <= MAX_NOTES_APPEND_BYTES and "bytes clipped" in notes


def test_a_prompt_too_long_for_an_argument_is_passed_as_a_file(queue_repo, tmp_path):
    edit(
        queue_repo, {"plans/NOTES.md": ("a fact worth keeping\n" * 10_000).encode()}
    )  # ~210 KB: over Linux's 128 KiB an argument
    seen = tmp_path / "seen"
    add_step(queue_repo, "01-a", run=["sh", "-c", f'printf %s "$1" > {seen}', "sh", "{prompt}"])
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    said = seen.read_text()
    assert "too long to pass as an argument" in said
    path = said.split("in the file ", 1)[1].split(". Read", 1)[0]
    assert "a fact worth keeping" in Path(path).read_text()


def test_the_hook_bounds_heartbeats_event_messages_and_files(tmp_path):
    from support.hooked import hooked_remote, push_commit, refused, seed

    from runner.core.codec import encode_beat
    from runner.queue.queue import author_for
    from runner.store import RefUpdate

    bare = hooked_remote(tmp_path / "remote.git")
    queue = seed(bare, tmp_path / "clone")
    store, beat = queue.store, "refs/runner/heartbeats/w1"
    huge = store.make_commit(
        [],
        {},
        encode_beat("w1", {"state": "idle", "junk": "j" * (30 * 1024 * 1024)}),
        author_for("w1"),
        base_tree="4b825dc642cb6eb9a060e54bf8d69288fbee4904",
    )
    refused(bare, lambda: store.publish([RefUpdate(beat, huge, None)]), "a heartbeat's message is at most", ref=beat)
    cargo = store.make_commit([], {"big.bin": os.urandom(1024 * 1024)}, "cargo", author_for("w1"))
    riding = store.make_commit(
        [cargo],
        {},
        encode_beat("w1", {"state": "idle"}),
        author_for("w1"),
        base_tree="4b825dc642cb6eb9a060e54bf8d69288fbee4904",
    )
    refused(
        bare, lambda: store.publish([RefUpdate(beat, riding, None)]), "parent is the heartbeat it replaces", ref=beat
    )
    refused(
        bare,
        lambda: push_commit(queue, {"plans/NOTES.md": b"n" * (600 * 1024)}, "notes", author="alice"),
        "over its bound",
    )
    refused(
        bare,
        lambda: push_commit(queue, {"plans/root.md": b"r"}, "m" * (300 * 1024), author="alice"),
        "commit message is over",
    )


# --- a fast writer, and takeovers on a busy queue ---------------------------------------------------


def test_a_claim_outpaced_by_a_writer_that_never_pauses_still_pushes_every_two_seconds():
    from runner.queue.backoff import MAX_DEFERRAL, Deferral

    deferral = Deferral()
    assert [deferral.wait(True, t) for t in (0.0, 1.0, MAX_DEFERRAL - 0.01)] == [True, True, True]
    assert deferral.wait(True, MAX_DEFERRAL) is False  # pushes once, however fast the writer
    assert deferral.wait(True, MAX_DEFERRAL + 0.1) is True  # and may wait again after that try
    assert deferral.wait(False, MAX_DEFERRAL + 0.2) is False


def test_a_busy_daemon_takes_over_a_silent_holders_step_within_a_few_leases(queue_repo):
    """Claiming its next step in the push of its last record, a daemon never looked at expired
    claims while ready steps remained: a cut-off holder's step waited for the whole drain."""
    from runner.queue.queue import open_queue

    set_config(queue_repo, detect=False, lease="2s")
    add_step(queue_repo, "00-ghost", run=["true"])
    open_queue(queue_repo).claim("ghost", "ghost.1", {"host": "elsewhere", "pid": 1}, step_id="00-ghost")
    for n in range(1, 25):
        add_step(queue_repo, f"s{n:02d}", run=["sleep", "0.4"])
    worker = start_worker(queue_repo, "w1", "--once")
    worker.communicate(timeout=180)
    moves = [(e["Event"], e["Step"]) for e in queue_history(queue_repo) if e.get("Event") in ("claim", "takeover")]
    taken = moves.index(("takeover", "00-ghost"))
    assert taken < moves.index(("claim", "s20")), moves  # found while most of the plan was still ready


def test_worker_once_takes_back_a_claim_it_could_not_record_and_drains(tmp_path):
    """The remote went away for longer than half a lease while a step was recorded: `--once`
    exited with ready steps left and its own claim left to a lease. It waits, takes the claim
    back and drains, as the daemon does."""
    import threading

    bare, (clone,) = make_remote(tmp_path)
    runner(clone, "init")
    set_config(clone, detect=False, lease="4s")
    away = tmp_path / "remote.away"
    add_step(clone, "01-a", run=["sh", "-c", f'[ "$RUNNER_ATTEMPT" != 1 ] || mv {bare} {away}'])
    add_step(clone, "02-b")

    log = clone / ".git" / "runner" / "logs" / "worker-w1.log"

    def bring_back():
        wait_for(away.exists, timeout=120, every=0.05)
        # past the patience of the record and of the release after it: the worker said it could not give the step back
        wait_for(lambda: log.exists() and "could not give 01-a back" in log.read_text(), timeout=120)
        away.rename(bare)

    helper = threading.Thread(target=bring_back, daemon=True)
    helper.start()
    worker = start_worker(clone, "w1", "--once")
    out, err = worker.communicate(timeout=180)
    helper.join(timeout=10)
    assert worker.returncode == 0, out + err
    assert statuses(clone) == {"01-a": "done", "02-b": "done"}, out + err


# --- what the record and the gate table say --------------------------------------------------------


def test_the_records_runs_say_a_failed_verdict_failed(queue_repo, tmp_path):
    verdict = tmp_path / "verdict.py"
    verdict.write_text("import json\nprint(json.dumps({'pass': False, 'score': 0.2, 'reasons': ['no']}))\n")
    set_config(queue_repo, detect=False, max_attempts=1, max_fix_attempts=0, verifier=[sys.executable, str(verdict)])
    add_step(queue_repo, "01-a")
    assert tick(queue_repo)["sentinel"] == "STEP_FAILED"
    runs = json.loads(queue_history(queue_repo)[-1]["Runs"])
    assert [r["result"] for r in runs if r["name"] == "verify"] == ["fail"], runs


def test_a_verdict_with_a_key_twice_is_refused_as_ambiguous():
    from runner.worker.roles import VerdictError, parse_verdict

    with pytest.raises(VerdictError, match="twice"):
        parse_verdict('{"pass": false, "score": 0.1, "pass": true}')
    with pytest.raises(VerdictError):
        parse_verdict('{"pass": true, "score": 1' + "0" * 5000 + "}")
    with pytest.raises(VerdictError):
        parse_verdict('{"pass": true, "score": 1, "reasons": ' + "[" * 5000 + "]" * 5000 + "}")


def test_a_format_gate_that_cannot_run_says_not_run_and_why(queue_repo, tmp_path):
    set_config(queue_repo, detect=True)
    add_step(queue_repo, "01-py", run=["sh", "-c", "echo '[project]' > pyproject.toml"])
    empty = tmp_path / "bin"
    empty.mkdir()
    for tool in ("sh", "git", "setpriv", "python3", "echo"):
        if found := __import__("shutil").which(tool):
            (empty / tool).symlink_to(found)
    report = tick(queue_repo, env={"PATH": str(empty)})
    gates = {g["name"]: g for g in report["gates"]}
    assert gates["format"]["result"] == "not run" and "no formatter installed" in gates["format"]["detail"], report[
        "gates"
    ]


def test_tick_step_names_the_holders_attempt_and_a_mistyped_step_is_bad_input(queue_repo):
    add_step(queue_repo, "01-a")
    runner(queue_repo, "claim", "01-a", "--id", "w9")
    held = runner(queue_repo, "tick", "--id", "w1", "--step", "01-a")
    assert "attempt None" not in held.stdout and "attempt 1" in held.stdout, held.stdout
    for args in (["tick", "--id", "w1", "--step", "01-zz"], ["claim", "01-zz", "--id", "w1"]):
        typo = runner(queue_repo, *args, check=False)
        assert typo.returncode == 2 and "no step '01-zz'" in typo.stderr, (args, typo.stderr)


def test_after_a_retry_the_note_no_longer_says_the_attempts_are_spent(queue_repo):
    add_step(queue_repo, "01-a", run=["false"], max_attempts=1)
    assert tick(queue_repo)["sentinel"] == "STEP_FAILED"
    assert "attempts spent" in runner_json(queue_repo, "show", "01-a")["last_error"]
    runner(queue_repo, "retry", "01-a", "--by", "alice")
    note = runner_json(queue_repo, "show", "01-a")["last_error"]
    assert (
        "attempts spent" not in note
        and note.startswith("retried by alice; the last failure: ")
        and "exit code 1" in note
    )


def test_install_schedule_that_activated_nothing_exits_1(queue_repo, tmp_path):
    import shutil

    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("git", "sh"):
        (tools / tool).symlink_to(shutil.which(tool))
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "home" / ".config"), "PATH": str(tools)}
    done = runner(queue_repo, "install-schedule", "--os", "systemd", "--id", "host-a", check=False, env=env)
    assert done.returncode == 1 and "not activated" in done.stderr and "systemctl --user enable --now" in done.stdout, (
        done
    )
    quiet = runner(
        queue_repo, "install-schedule", "--os", "systemd", "--id", "host-a", "--no-activate", check=False, env=env
    )
    assert quiet.returncode == 0, quiet.stderr


def test_pointing_runner_at_nothing_is_a_usage_error_with_what_to_do(tmp_path, repo):
    outside = runner(tmp_path, "status", check=False)
    assert outside.returncode == 2 and "not inside a git repository (run `git init`" in outside.stderr
    for args in (["status"], ["ready"], ["add", "x", "--id", "01-x", "--run", "true"]):
        before = runner(repo, *args, check=False)
        assert before.returncode == 2 and "run `runner init` first" in before.stderr, (args, before.stderr)
    bad_remote = runner(repo, "status", "--remote", "nope", check=False)
    assert bad_remote.returncode == 2 and "no remote named 'nope'" in bad_remote.stderr
    assert len((outside.stderr + bad_remote.stderr).strip().splitlines()) == 2  # one line each


def test_without_identities_only_the_holders_own_host_takes_its_live_claim_over(tmp_path):
    from support.hooked import claim, hooked_remote, refused, seed

    from runner.core.machine import Event, Kind
    from runner.core.model import utc_now

    bare = hooked_remote(tmp_path / "remote.git")
    queue = seed(bare, tmp_path / "clone")
    claim(queue, "w1", "04-d")  # w1's claim, from host "elsewhere", alive

    def takeover_from(host: str):
        def build(snap):
            step = snap.plan.find("04-d")
            return queue.step_change(
                snap,
                Event(
                    Kind.TAKEOVER,
                    "w1",
                    utc_now(),
                    step="04-d",
                    attempt=step.attempt + 1,
                    replaces=step.attempt,
                    incarnation="w1.forged",
                    holder={"host": host},
                    lease="1h",
                ),
            )

        return lambda: queue.publish(build, "w1")

    refused(bare, takeover_from("mallorys-laptop"), "a live claim is not taken over")
    takeover_from("elsewhere")()  # the holder's own host: an earlier tick of it that could not record
    assert queue.snapshot().plan.find("04-d").attempt == 2
