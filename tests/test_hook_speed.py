"""The server hook near git's own cost (issue 45 point 1), against real repositories: a push
that lost its race is refused before any replay and its pusher retries as after git's own
rejection; the hook's cache of parsed plans is rebuilt from git when it is stale or corrupt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import git
from hooked import ENV, QUEUE, claim, clone, queue, remote, template, tip  # noqa: F401 (fixtures)
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
    push = subprocess.Popen(["git", "push", "--porcelain", f"--force-with-lease={QUEUE}:{seen}", "origin",
                             f"{junk}:{QUEUE}"], cwd=late, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    wait_for(tmp_path / "gate" / "arrived", push)
    claim(queue, "w1", "01-a")  # lands while the first push waits at the server
    (tmp_path / "gate" / "go").touch()
    out, err = push.communicate(timeout=120)
    assert push.returncode != 0
    # Refused for its race, not replayed (a replay would refuse the commit for what it is).
    assert "remote: lost a race: refs/heads/runner/queue is at" in err, err
    assert "not a well-formed runner commit" not in err
    assert _push_outcome(out, err) == Lost(QUEUE)


def test_a_claim_that_loses_in_the_hook_retries_and_nothing_is_recorded_twice(remote: Path, queue: Queue,
                                                                               tmp_path: Path):
    hold_first_push(remote, tmp_path / "gate")
    loser = tmp_path / "loser"
    clone(remote, loser)
    proc = subprocess.Popen([sys.executable, "-m", "runner", "claim", "--id", "w2"], cwd=loser, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(tmp_path / "gate" / "arrived", proc)
    claim(queue, "w1", "01-a")  # the step the waiting claim chose (the first ready)
    (tmp_path / "gate" / "go").touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "refused" not in err and "lost a race" not in err  # no error shown: a race lost is retried
    claims = [(e["step"], e["actor"], e["attempt"]) for e in queue.log() if e["event"] == "claim"]
    assert [c for c in claims if c[0] == "01-a"] == [("01-a", "w1", 1)]
    assert len({c[0] for c in claims}) == len(claims) == 2  # w2 took another step, once, attempt 1
    assert [c[2] for c in claims if c[1] == "w2"] == [1]
