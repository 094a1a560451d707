"""The server hook near git's own cost (issue 45 point 1), against real repositories: a push
that lost its race is refused before any replay and its pusher retries as after git's own
rejection; the hook's cache of parsed plans is rebuilt from git when it is stale or corrupt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.hooked import ENV, QUEUE, claim, clone, tip
from support.repos import git

from runner.queue.queue import Queue
from runner.store import Lost
from runner.store.remote import _push_outcome


def hold_first_push(remote: Path, gate: Path) -> None:
    """A hook of the server's own, which runner's runs first: the first push it sees waits at
    the server, after git read its ref updates, until `gate/go` exists (`gate/arrived` says it
    is there)."""
    gate.mkdir()
    saved = remote / "hooks" / "pre-receive.runner-saved"
    saved.write_text(f"""#!/bin/sh
cat >/dev/null
if mkdir "{gate}/held" 2>/dev/null; then
    touch "{gate}/arrived"
    while [ ! -e "{gate}/go" ]; do sleep 0.01; done
fi
exit 0
""")
    saved.chmod(0o755)


def wait_for(path: Path, proc: subprocess.Popen) -> None:
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        subprocess.run(["sleep", "0.01"], check=True)


def test_a_push_that_lost_its_race_is_refused_before_any_replay(remote: Path, queue: Queue, tmp_path: Path):
    hold_first_push(remote, tmp_path / "gate")
    late = tmp_path / "late"
    clone(remote, late)
    git(late, "fetch", "-q", "origin", "runner/queue")
    seen = tip(remote)
    junk = git(late, "commit-tree", "-p", seen, "-m", "not a runner commit", f"{seen}^{{tree}}")
    push = subprocess.Popen(
        ["git", "push", "--porcelain", f"--force-with-lease={QUEUE}:{seen}", "origin", f"{junk}:{QUEUE}"],
        cwd=late,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(tmp_path / "gate" / "arrived", push)
    claim(queue, "w1", "01-a")  # lands while the first push waits at the server
    (tmp_path / "gate" / "go").touch()
    out, err = push.communicate(timeout=120)
    assert push.returncode != 0
    # Refused for its race, not replayed (a replay would refuse the commit for what it is).
    assert "remote: lost a race: refs/heads/runner/queue is at" in err, err
    assert "not a well-formed runner commit" not in err
    assert _push_outcome(out, err) == Lost(QUEUE)


def test_a_claim_that_loses_in_the_hook_retries_and_nothing_is_recorded_twice(
    remote: Path, queue: Queue, tmp_path: Path
):
    hold_first_push(remote, tmp_path / "gate")
    loser = tmp_path / "loser"
    clone(remote, loser)
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "claim", "--id", "w2"],
        cwd=loser,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(tmp_path / "gate" / "arrived", proc)
    claim(queue, "w1", "01-a")  # the step the waiting claim chose (the first ready)
    (tmp_path / "gate" / "go").touch()
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "refused" not in err and "lost a race" not in err  # no error shown: a race lost is retried
    claims = [(e["step"], e["actor"], e["attempt"]) for e in queue.log() if e["event"] == "claim"]
    assert [c for c in claims if c[0] == "01-a"] == [("01-a", "w1", 1)]
    assert len({c[0] for c in claims}) == len(claims) == 2  # w2 took another step, once, attempt 1
    assert [c[2] for c in claims if c[1] == "w2"] == [1]


# --- the hook's cache (runner.hooks.cache) ---------------------------------------------------


def cached(remote: Path, kind: str) -> dict[str, Path]:
    """The hook's cache files of `kind` (steps, index) in the remote: blob or tree id -> file."""
    return {path.stem: path for path in (remote / "runner" / "hook-cache").glob(f"*/{kind}/*/*.json")}


def retitle(queue: Queue, step_id: str, title: str) -> str:
    """A person's edit of a step's title; the new file's blob id."""

    def files(snap):
        step = snap.plan.find(step_id)
        return {step.path: step.text.replace(f"title: {step.title}", f"title: {title}", 1).encode()}

    queue.edit(files, f"retitle {step_id}", "alice")
    snap = queue.snapshot()
    return queue.store.entry_at(snap.tip, snap.plan.find(step_id).path).oid


def test_the_hook_reads_a_changed_step_file_again_and_serves_the_unchanged_from_its_cache(remote: Path, queue: Queue):
    first = retitle(queue, "04-d", "Dee")
    second = retitle(queue, "04-d", "Delta")  # a changed file is a new blob: read again, never the cached one
    assert {first, second} <= set(cached(remote, "steps"))
    claim(queue, "w1", "04-d")  # replayed on the file as it is now: the hook compares the result byte for byte
    assert queue.snapshot().plan.find("04-d").title == "Delta"
    assert queue.snapshot().plan.find("04-d").status == "claimed"
    assert cached(remote, "index")  # the steps tree's index, for the next push's parent


def test_a_corrupt_cache_file_is_ignored_and_written_again(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a")
    files = {**cached(remote, "steps"), **cached(remote, "index")}
    assert files
    for path in files.values():
        path.write_text('{"half written')
    snap = queue.snapshot()
    blob = queue.store.entry_at(snap.tip, snap.plan.find("04-d").path).oid
    assert blob in files  # parsed by the push that added it
    claim(queue, "w2", "04-d")  # judged from git's objects, as with no cache at all
    assert json.loads(cached(remote, "steps")[blob].read_text())[1] == "04-d"  # written afresh
    assert sorted(e["step"] for e in queue.log() if e["event"] == "claim") == ["01-a", "04-d"]


def test_the_hook_reads_through_gits_commands_without_pygit2(remote: Path, queue: Queue):
    claim(queue, "w1", "01-a", beat=False)
    new = tip(remote)
    old = git(remote, "rev-parse", f"{new}^")
    git(remote, "update-ref", QUEUE, old)  # the claim's update, judged again as the hook judged it
    script = (
        "import sys; from pathlib import Path; from runner.hooks.races import checked; "
        "code = checked(sys.stdin.read(), Path('.').resolve()); print(code, 'pygit2' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=remote,
        env={**ENV, "GIT_DIR": "."},
        input=f"{old} {new} {QUEUE}\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split() == ["0", "False"], done.stderr


def test_under_its_lock_the_hook_refuses_a_lost_race_without_importing_the_check(remote: Path, queue: Queue):
    before = tip(remote)
    claim(queue, "w1", "01-a", beat=False)
    script = (
        "import sys; from pathlib import Path; from runner.hooks.races import checked; "
        "code = checked(sys.stdin.read(), Path('.').resolve()); print(code, 'runner.hooks.server' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=remote,
        env={**ENV, "GIT_DIR": "."},
        input=f"{before} {'1' * 40} {QUEUE}\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split() == ["1", "False"], done.stderr
    assert done.stderr.startswith(f"lost a race: {QUEUE} is at {tip(remote)[:10]}, not {before[:10]}")
