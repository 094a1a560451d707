"""The queue core against real git: CLI, compare-and-swap races, leases and takeover, bad input;
the reader's policy on the in-memory store."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from support.memory import fresh, memory_queue
from support.repos import (
    ENV_PATH,
    ROOT,
    add_step,
    edit,
    git,
    make_remote,
    make_repo,
    queue_history,
    runner,
    runner_json,
    set_config,
    step_file,
)

PASS_TIME = {"RUNNER_MONOTONIC_OFFSET": "3600"}  # an observer an hour later, without sleeping

CLAIM_LOOP = """
import sys
from runner.queue.change import LostRace, Skip
from runner.queue.queue import open_queue
from runner.queue.leases import new_incarnation, holder_info
from runner.core.machine import Kind
repo, worker = sys.argv[1], sys.argv[2]
queue = open_queue(repo)
claimed = []
while True:
    incarnation = new_incarnation(worker)
    try:
        published = queue.claim(worker, incarnation, holder_info())
    except Skip:
        break
    except LostRace:
        continue
    step = published.change.event.step
    queue.event(step, Kind.COMPLETE, worker, incarnation=incarnation)
    claimed.append(step)
print(" ".join(claimed))
print("races_lost", queue.races_lost)
"""


def race(repos: list[Path], workers: int) -> list[str]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIM_LOOP, str(repos[i % len(repos)]), f"w{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
        )
        for i in range(workers)
    ]
    claimed = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        claimed += out.splitlines()[0].split()
    return claimed


def assert_claimed_exactly_once(repo: Path, step_ids: list[str], branch: str = "runner/queue") -> None:
    history = queue_history(repo, branch)
    claims = Counter(e["Step"] for e in history if e.get("Event") == "claim")
    completes = Counter(e["Step"] for e in history if e.get("Event") == "complete")
    assert claims == Counter({s: 1 for s in step_ids}), "a step was claimed twice or never"
    assert completes == claims
    for entry in history:  # one transition per commit, each with its attempt
        if entry.get("Event") in ("claim", "complete"):
            assert entry["Attempt"] == "1"


def test_race_of_8_processes_on_a_bare_remote_claims_every_step_exactly_once(tmp_path):
    bare, clones = make_remote(tmp_path, clones=4)
    runner(clones[0], "init")
    ids = [f"s{n:03d}" for n in range(24)]  # three a process: every claim and record after the first races
    edit(clones[0], dict(step_file(i, f"step {i}") for i in ids), "add steps")
    claimed = race(clones, workers=8)
    assert sorted(claimed) == ids
    git(clones[0], "fetch", "-q", "origin")
    assert_claimed_exactly_once(bare, ids)


def test_race_of_8_processes_sharing_one_repository_without_a_remote(queue_repo):
    ids = [f"s{n:03d}" for n in range(24)]
    edit(queue_repo, dict(step_file(i) for i in ids), "add steps")
    claimed = race([queue_repo], workers=8)
    assert sorted(claimed) == ids
    assert_claimed_exactly_once(queue_repo, ids)


# A writer that moves the queue branch every few milliseconds, straight in the bare remote
# (no step changes: each commit keeps its parent's tree), until the stop file appears.
HOT_WRITER = r"""
cd "$1"
while [ ! -e "$2" ]; do
  tip=$(git rev-parse refs/heads/runner/queue)
  next=$(git commit-tree -p "$tip" -m "a busy writer" "$tip^{tree}")
  git update-ref refs/heads/runner/queue "$next" "$tip" 2>/dev/null
done
"""


FRESH_CLAIMS = r"""
code=0
while [ "$code" -eq 0 ]; do "$1" -m runner claim --id "$2" --repo "$3" --json >> "$4"; code=$?; done
[ "$code" -eq 3 ]  # nothing left to claim; anything else (a lost race given up, a fault) fails the test
"""


@pytest.mark.parametrize("where", ["bare remote", "one repository"])
def test_fresh_runner_claim_processes_racing_claim_every_step_exactly_once(tmp_path, where):
    """`runner claim` as scripts call it, each a fresh process on the plumbing store (git's own
    commands: the push's lease over a remote, one `update-ref --stdin` transaction locally)."""
    if where == "bare remote":
        home, repos = make_remote(tmp_path, clones=3)
    else:
        home = make_repo(tmp_path / "repo")
        repos = [home]
    runner(repos[0], "init")
    ids = [f"s{n:02d}" for n in range(12)]
    edit(repos[0], dict(step_file(step_id) for step_id in ids), "12 steps")
    outs = [tmp_path / f"w{n}.jsonl" for n in range(6)]
    procs = [
        subprocess.Popen(
            ["bash", "-c", FRESH_CLAIMS, "claims", sys.executable, f"w{n}", str(repos[n % len(repos)]), str(out)],
            stderr=subprocess.PIPE,
            text=True,
            env=ENV_PATH,
        )
        for n, out in enumerate(outs)
    ]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    lines = [json.loads(line) for out in outs if out.exists() for line in out.read_text().splitlines()]
    said = [line["step"] for line in lines if line.get("ok") is not False]
    assert sorted(said) == ids
    # each loop ended on its one failure, a JSON object under --json: nothing left to claim
    assert [line["code"] for line in lines if line.get("ok") is False] == [3] * len(outs)
    claims = Counter(e["Step"] for e in queue_history(home) if e.get("Event") == "claim")
    assert claims == Counter({step_id: 1 for step_id in ids})


def test_a_claim_that_lost_a_race_waits_while_the_queue_moves_faster_than_it_can_claim(tmp_path, monkeypatch):
    """Against a writer faster than a claim's fetch, build and push, every push would lose:
    the claim only fetches until the branch slows down, then wins at once."""
    from runner.queue import backoff
    from runner.queue.change import LostRace
    from runner.queue.leases import holder_info, new_incarnation
    from runner.queue.queue import Queue
    from runner.store.git import GitStore

    # A claim outpaced this long pushes once anyway (a writer that never pauses must not starve
    # the others): on a loaded machine six tries can take that long, so it is out of the way here.
    monkeypatch.setattr(backoff, "MAX_DEFERRAL", 600.0)

    bare, (clone,) = make_remote(tmp_path)
    runner(clone, "init")
    edit(clone, dict([step_file("s1")]), "add a step")
    queue = Queue(GitStore(clone, remote="auto"), max_tries=6)
    before = queue.snapshot(branches=queue.branches())
    stop = tmp_path / "stop"
    writer = subprocess.Popen(["bash", "-c", HOT_WRITER, "hot-writer", str(bare), str(stop)])
    try:
        while git(bare, "rev-parse", "refs/heads/runner/queue") == before.tip:
            assert writer.poll() is None
        with pytest.raises(LostRace, match="more tries waited while it moved faster than a claim takes"):
            queue.claim("w1", new_incarnation("w1"), holder_info(), snapshot=before)
        # Without the deferral each of the six tries pushes and loses; with it, most are fetches. How
        # many pushed depends on when the writer was scheduled (a loaded machine pauses it), so the
        # bound is the one that cannot be met without the deferral.
        assert queue.races_lost < 6, "a claim kept pushing against a writer it could not beat"
    finally:
        stop.touch()
        writer.wait(timeout=30)
    claimed = queue.claim("w1", new_incarnation("w1"), holder_info())
    assert claimed.change.event.step == "s1"


def test_cli_tour(queue_repo):
    repo = queue_repo
    runner(repo, "add", "Set up the DB", "--id", "01-db", "--run", '["make", "db"]')
    runner(
        repo,
        "add",
        "API layer",
        "--id",
        "02-api",
        "--depends-on",
        "01-db",
        "--priority",
        "5",
        "--tag",
        "linux",
        "--run",
        "make api",
    )
    status = runner_json(repo, "status")
    assert {s["step"]: s["status"] for s in status["steps"]} == {"01-db": "ready", "02-api": "waiting"}
    assert [s["step"] for s in runner_json(repo, "ready")["steps"]] == ["01-db"]
    claim = runner_json(repo, "claim", "--id", "host-a")
    assert claim == {**claim, "step": "01-db", "event": "claim", "attempt": 1, "status": "claimed"}
    assert runner(repo, "claim", "--id", "host-b", check=False).returncode == 3
    runner(repo, "heartbeat", "01-db", "--id", "host-a")
    workers = runner_json(repo, "workers")["workers"]
    assert workers[0]["worker"] == "host-a" and workers[0]["step"] == "01-db"
    refused = runner(repo, "complete", "01-db", "--id", "host-b", check=False)
    assert refused.returncode == 1 and "held by 'host-a'" in refused.stderr
    runner(repo, "complete", "01-db", "--id", "host-a")
    assert runner(repo, "claim", "--id", "host-b", check=False).returncode == 3  # 02-api needs tag linux
    assert runner_json(repo, "claim", "--id", "host-b", "--tag", "linux")["step"] == "02-api"
    runner(repo, "fail", "02-api", "--id", "host-b", "--reason", "flaky", "--permanent")
    assert runner_json(repo, "show", "02-api")["status"] == "failed"
    runner(repo, "retry", "02-api", "--by", "alice")
    runner(repo, "halt", "--reason", "maintenance")
    halted = runner(repo, "claim", "--id", "host-b", "--tag", "linux", check=False)
    assert halted.returncode == 3 and "halted" in halted.stderr
    runner(repo, "resume")
    log = runner_json(repo, "log")["entries"]
    assert [e["event"] for e in log[:4]] == ["resume", "halt", "retry", "fail"]
    assert [e["event"] for e in runner_json(repo, "log", "01-db")["entries"]][:3] == ["complete", "claim", "edit"]
    assert "02-api" in runner(repo, "log").stdout
    graph = runner(repo, "graph").stdout
    assert "flowchart TD" in graph and "s_01_db --> s_02_api" in graph


def test_a_git_dir_in_the_environment_never_turns_runner_to_another_repository(tmp_path):
    """git sets GIT_DIR for its hooks: `runner claim` started from a hook of another
    repository still fetches and pushes its own clone, and leaves that repository as it was."""
    bare, (clone,) = make_remote(tmp_path)
    runner(clone, "init")
    runner(clone, "add", "A", "--id", "01-a", "--run", '["true"]')
    other = tmp_path / "other"
    git(tmp_path, "init", "-q", "-b", "main", str(other))
    git(other, "commit", "-q", "--allow-empty", "-m", "other")
    before = git(other, "for-each-ref"), git(other, "count-objects")
    runner(
        clone,
        "claim",
        "--id",
        "w1",
        env={"GIT_DIR": str(other / ".git"), "GIT_INDEX_FILE": str(other / ".git" / "index")},
    )
    assert queue_history(bare)[-1]["Event"] == "claim"
    assert (git(other, "for-each-ref"), git(other, "count-objects")) == before


def test_claim_commit_changes_only_managed_lines_and_main_checkout_is_untouched(queue_repo):
    add_step(queue_repo, "01-db", body="Body text\n")
    (queue_repo / "dirty.txt").write_text("uncommitted work\n")
    before = git(queue_repo, "status", "--porcelain")
    runner(queue_repo, "claim", "--id", "host-a")
    assert git(queue_repo, "status", "--porcelain") == before
    assert git(queue_repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    diff = git(queue_repo, "diff", "runner/queue~1", "runner/queue")
    removed = [l for l in diff.splitlines() if l.startswith("-") and not l.startswith("---")]
    added = [l[1:].split(":")[0] for l in diff.splitlines() if l.startswith("+") and not l.startswith("+++")]
    assert removed == []
    assert set(added) <= {
        "status",
        "assignee",
        "claimed_at",
        "lease",
        "attempt",
        "holder",
        "last_updated",
        "last_updated_by",
    }
    message = git(queue_repo, "log", "-1", "--format=%B", "runner/queue")
    assert message.startswith("claim 01-db (attempt 1) by host-a -> claimed")
    assert "Runner-Event: claim\nRunner-Step: 01-db\nRunner-Actor: host-a\nRunner-Attempt: 1" in message


def test_takeover_after_lease_expiry_fences_the_stale_holder(queue_repo):
    set_config(queue_repo, lease="2s", detect=False)
    add_step(queue_repo, "01-db")
    # The holder "ran" on another host: only the lease can free it.
    from runner.queue.queue import open_queue

    queue = open_queue(queue_repo)
    queue.claim("host-a", "host-a.old", {"host": "elsewhere", "pid": 1})
    assert runner(queue_repo, "claim", "--id", "host-b", check=False).returncode == 3  # first sighting starts the clock
    taken = runner_json(queue_repo, "claim", "--id", "host-b", env=PASS_TIME)
    assert taken["event"] == "takeover" and taken["attempt"] == 2
    stale = runner(queue_repo, "complete", "01-db", "--id", "host-a", check=False)
    assert stale.returncode == 1 and "held by 'host-b'" in stale.stderr
    message = git(queue_repo, "log", "-1", "--format=%B", "runner/queue")
    assert "Runner-Replaces: 1" in message


def test_live_heartbeats_keep_a_claim_and_silence_loses_it(queue_repo):
    set_config(queue_repo, lease="2s", detect=False)
    add_step(queue_repo, "01-db")
    from runner.queue.queue import open_queue

    queue = open_queue(queue_repo)
    queue.claim("host-a", "host-a.1", {"host": "elsewhere", "pid": 1})
    for hour in range(1, 5):  # each observation an hour after the last, with a beat in between
        queue.beat("host-a", {"step": "01-db", "attempt": 1, "incarnation": "host-a.1"})
        assert (
            runner(
                queue_repo, "claim", "--id", "host-b", check=False, env={"RUNNER_MONOTONIC_OFFSET": str(hour * 3600)}
            ).returncode
            == 3
        )
    taken = runner_json(queue_repo, "claim", "--id", "host-b", env={"RUNNER_MONOTONIC_OFFSET": str(5 * 3600)})
    assert taken["event"] == "takeover"


CLAIM_AND_EXIT = """
import sys
from runner.queue.queue import open_queue
from runner.queue.leases import new_incarnation, holder_info
incarnation = new_incarnation("host-a")
open_queue(sys.argv[1]).claim("host-a", incarnation, holder_info())
"""


def test_dead_holder_on_this_host_is_taken_over_at_once_and_restart_is_a_new_incarnation(queue_repo):
    add_step(queue_repo, "01-db")
    # A worker process claims with its pid and start time, then dies.
    subprocess.run(
        [sys.executable, "-c", CLAIM_AND_EXIT, str(queue_repo)],
        check=True,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    again = runner_json(queue_repo, "claim", "--id", "host-a")  # same id, new incarnation
    assert again["event"] == "takeover" and again["attempt"] == 2
    show = runner_json(queue_repo, "show", "01-db")
    assert "gone" in show["last_error"]


def test_crashes_count_as_attempts(queue_repo):
    add_step(queue_repo, "01-db", max_attempts=2)
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", CLAIM_AND_EXIT, str(queue_repo)], check=True, env=env)  # attempt 1 dies
    subprocess.run([sys.executable, "-c", CLAIM_AND_EXIT, str(queue_repo)], check=True, env=env)  # attempt 2 dies
    last = runner_json(queue_repo, "claim", "--id", "host-a")
    assert last["status"] == "failed"
    assert runner_json(queue_repo, "show", "01-db")["status"] == "failed"


BAD_FILES = {
    "bad-yaml.md": b"---\ntitle: [oops\n---\n",
    "wrong-id.md": b"---\nstep: other\n---\n",
    "latin1.md": b"---\ntitle: caf\xe9\n---\n",
    "cyc-a.md": b"---\ndepends_on: [cyc-b]\n---\n",
    "cyc-b.md": b"---\ndepends_on: [cyc-a]\n---\n",
    "unknown-dep.md": b"---\ndepends_on: [ghost]\n---\n",
    "huge.md": b"---\ntitle: big\n---\n" + b"x" * (1024 * 1024 + 10),
    "dup.md": b"---\ntitle: one\n---\n",
    "sub/dup.md": b"---\ntitle: two\n---\n",
}


def test_bad_input_is_listed_never_claimed_and_the_rest_still_runs(queue_repo):
    files = {f"plans/steps/{name}": data for name, data in BAD_FILES.items()}
    files["plans/steps/good.md"] = b'---\ntitle: fine\nrun: ["true"]\n---\n'
    edit(queue_repo, files, "a plan with problems")
    result = runner(queue_repo, "validate", check=False)
    assert result.returncode == 2
    for name in BAD_FILES:
        assert name in result.stderr, name
    for reason in (
        "bad YAML",
        "does not match the file name",
        "not UTF-8",
        "dependency cycle",
        "unknown dependency",
        "1 MiB",
        "duplicate step id",
    ):
        assert reason in result.stderr, reason
    status = {s["step"]: s for s in runner_json(queue_repo, "status")["steps"]}
    assert status["bad-yaml"]["status"] == "invalid" and status["bad-yaml"]["problems"]
    assert runner_json(queue_repo, "claim", "--id", "w")["step"] == "good"
    assert runner(queue_repo, "claim", "--id", "w2", check=False).returncode == 3


def test_add_refuses_bad_ids_and_unknown_dependencies_with_exit_2(queue_repo):
    for bad in ("../etc", "a/b", "Upper", "a..b"):
        result = runner(queue_repo, "add", "x", "--id", bad, check=False)
        assert result.returncode == 2, bad
    result = runner(queue_repo, "add", "x", "--id", "ok", "--depends-on", "ghost", check=False)
    assert result.returncode == 2 and "unknown dependency" in result.stderr
    assert runner(queue_repo, "claim", "--id", "bad/id", check=False).returncode == 2


def test_import_plan_authoring_layout(queue_repo, tmp_path):
    plans = tmp_path / "plans"
    (plans / "steps").mkdir(parents=True)
    (plans / "NOTES.md").write_text("notes\n")
    (plans / "steps" / "01-setup.md").write_text(
        "---\nstep: 01-setup\ntitle: Setup\nstatus: pending\nrun: [make]\n---\nbody\n"
    )
    (plans / "steps" / "02-model.md").write_text(
        "---\nstep: 02-model\ntitle: Model\ndepends_on: [01-setup]\nstatus: ready\nrun: [make]\n---\n"
    )
    runner(queue_repo, "import", str(plans / "steps"))
    status = {s["step"]: s["status"] for s in runner_json(queue_repo, "status")["steps"]}
    assert status == {"01-setup": "ready", "02-model": "waiting"}
    assert git(queue_repo, "show", "runner/queue:plans/NOTES.md") == "notes"
    assert (
        git(queue_repo, "show", "runner/queue:plans/steps/02-model.md")
        == (plans / "steps" / "02-model.md").read_text().strip()
    )


def test_import_dag_layout(queue_repo, tmp_path):
    dag = tmp_path / "dag"
    dag.mkdir()
    (dag / "root.md").write_text("# the plan\n")
    (dag / "step-1.md").write_text("---\nid: step-1\nname: First\ndepends_on: []\nrun: [make]\n---\nDo it.\n")
    (dag / "step-2.md").write_text(
        "---\nid: step-2\nname: Second\ndepends_on: [step-1]\nstatus: in_progress\nassignee: bob\nrun: [make]\n---\n"
    )
    runner(queue_repo, "import", str(dag))
    rows = {s["step"]: s for s in runner_json(queue_repo, "status")["steps"]}
    assert rows["step-1"]["title"] == "First" and rows["step-1"]["status"] == "ready"
    assert rows["step-2"]["status"] == "waiting" and rows["step-2"]["assignee"] is None
    assert git(queue_repo, "show", "runner/queue:plans/root.md") == "# the plan"


def test_import_with_problems_imports_nothing(queue_repo, tmp_path):
    steps = tmp_path / "steps"
    steps.mkdir()
    (steps / "01-ok.md").write_text("---\ntitle: ok\nrun: [make]\n---\n")
    (steps / "02-bad.md").write_text("---\ndepends_on: [nope]\nrun: [make]\n---\n")
    before = git(queue_repo, "rev-parse", "runner/queue")
    result = runner(queue_repo, "import", str(steps), check=False)
    assert result.returncode == 2 and "02-bad.md" in result.stderr and "unknown dependency" in result.stderr
    assert git(queue_repo, "rev-parse", "runner/queue") == before


def test_doctor_names_what_is_wrong(repo, queue_repo):
    missing = runner(repo.parent / "repo", "doctor", "--remote", "none", check=False)
    assert missing.returncode == 0, missing.stdout  # queue_repo is this same repository, initialised
    fresh = repo.parent / "fresh"
    from support.repos import make_repo

    make_repo(fresh)
    result = runner(fresh, "doctor", "--json", check=False)
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert result.returncode == 1 and checks["queue"]["result"] == "fail" and "runner init" in checks["queue"]["detail"]
    if sys.platform.startswith("linux"):  # how step commands start: setpriv, or the slow fork when it is missing
        import shutil

        assert checks["setpriv"]["result"] == ("ok" if shutil.which("setpriv") else "warn")


def test_version_and_help_answer_outside_a_repository(repo):
    out = subprocess.run(
        [sys.executable, "-m", "runner", "--version"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.startswith("runner ")
    helptext = subprocess.run(
        [sys.executable, "-m", "runner", "--help"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    ).stdout
    for command in ("init", "claim", "tick", "worker", "install-schedule"):
        assert command in helptext


def test_incremental_snapshots_agree_with_a_full_rebuild(tmp_path):
    """The reader's policy, on the in-memory store."""
    from runner.core.machine import Kind
    from runner.core.model import utc_now

    queue = memory_queue(tmp_path, {"a": {}, "b": {"depends_on": ["a"]}, "c": {"depends_on": ["b"]}})

    def views():
        full = fresh(queue).snapshot().plan
        warm = queue.snapshot().plan
        return (
            {s: warm.derived_status(warm.find(s)) for s in "abc"},
            {s: full.derived_status(full.find(s)) for s in "abc"},
        )

    queue.claim("w", "w.1", {})
    queue.event("a", Kind.COMPLETE, "w", incarnation="w.1")
    warm, rebuilt = views()
    assert warm == rebuilt == {"a": "done", "b": "ready", "c": "waiting"}
    # A person rewires c to depend on a only: the shape changed, so the plan is rebuilt.
    step = queue.snapshot().plan.find("c")
    text = step.text.replace("depends_on: [b]", "depends_on: [a]")
    queue.edit(lambda snap: {step.path: text.encode()}, "rewire c", "tester")
    warm, rebuilt = views()
    assert warm == rebuilt == {"a": "done", "b": "ready", "c": "ready"}
    assert [s.id for s in queue.snapshot().plan.ready(utc_now())] == ["b", "c"]


def test_the_queue_after_its_own_commit_is_read_at_the_paths_it_wrote_not_by_a_tree_diff(queue_repo, monkeypatch):
    """After a claim or an event this process published, the next snapshot looks the written
    step files up; a commit made elsewhere (a person's edit) is still found by the diff, and
    both views agree with a fresh read."""
    from runner.core.machine import Kind
    from runner.queue.queue import open_queue

    for step_id in ("a", "b", "c"):
        add_step(queue_repo, step_id)
    queue = open_queue(queue_repo)
    queue.snapshot()
    diffs = []
    real_diff = queue.store.diff_trees
    monkeypatch.setattr(queue.store, "diff_trees", lambda old, new: diffs.append(new) or real_diff(old, new))

    def statuses(q):
        plan = q.snapshot().plan
        return {s: plan.derived_status(plan.find(s)) for s in "abc"}

    queue.claim("w", "w.1", {})
    queue.event("a", Kind.COMPLETE, "w", incarnation="w.1")
    assert statuses(queue) == statuses(open_queue(queue_repo)) == {"a": "done", "b": "ready", "c": "ready"}
    assert diffs == []
    step = queue.snapshot().plan.find("c").full()
    edit(queue_repo, {step.path: (step.text + "\nA person's note.\n").encode()}, "a person's edit")
    assert statuses(queue) == statuses(open_queue(queue_repo))
    assert len(diffs) == 1 and "A person's note." in queue.snapshot().plan.find("c").full().text


def test_a_held_plan_keeps_only_the_index_of_each_step_and_reads_the_rest_from_its_file(queue_repo):
    import tracemalloc

    from runner.core.model import INDEX_KEYS
    from runner.queue.queue import open_queue

    body = "Long instructions.\n" * 600  # ~11 KB a step, like real step files
    edit(
        queue_repo,
        {
            f"plans/steps/s{n:03d}.md": (
                f'---\ntitle: s{n}\nrun: ["true"]\nnotes: {{owner: team-{n}}}\n---\n{body}'
            ).encode()
            for n in range(200)
        },
    )
    cache = queue_repo / ".git" / "runner" / "parsed-steps.jsonl"
    open_queue(queue_repo).snapshot()  # imports what a snapshot needs (not counted below) and writes the cache
    for source in ("read from the parse cache on disk", "parsed now"):
        assert cache.exists()
        if source == "parsed now":
            cache.unlink()
        tracemalloc.start()
        plan = open_queue(queue_repo).snapshot().plan
        held, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert held < 200 * len(body) / 4, f"{source}: the plan holds {held} bytes, about the step bodies' size"
        step = plan.steps["s007"]
        assert step.is_lean and set(step.index) <= INDEX_KEYS and "notes" not in step.index
        assert step.get("notes") == {"owner": "team-7"} and step.text.endswith(body)  # read again from its blob
        assert step.full().meta == {"title": "s7", "run": ["true"], "notes": {"owner": "team-7"}}


def test_a_held_step_costs_a_few_hundred_bytes_with_no_dict_or_list_of_its_own(queue_repo):
    """At 10,000 steps a dict and two lists a step were a fifth of a worker's memory: a lean
    step keeps its index values in a tuple beside a key order shared by steps with the same
    keys, shares values many steps hold (run, tags) and its empty problems, and the reader
    keys it by its blob alone. Asking still gives lists back, never a shared one."""
    import gc
    import tracemalloc

    from runner.queue.queue import open_queue

    steps = 2000
    edit(
        queue_repo,
        {
            f"plans/steps/s{n:04d}.md": (
                f'---\ntitle: s{n}\nrun: ["make", "check"]\ntags: [web]\ndepends_on: []\n---\n'
            ).encode()
            for n in range(steps)
        },
    )
    open_queue(queue_repo).snapshot()  # imports what a snapshot needs (not counted below)
    (queue_repo / ".git" / "runner" / "parsed-steps.jsonl").unlink()
    tracemalloc.start()
    queue = open_queue(queue_repo)
    plan = queue.snapshot().plan
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # id, path, blob id and title strings alone are ~270 bytes a step; 913 before, 512 now.
    assert held / steps < 650, f"{held / steps:.0f} bytes a step"
    a, b = plan.steps["s0001"], plan.steps["s0002"]
    assert a.is_lean and b.is_lean
    owned = [o for o in gc.get_referents(a) if isinstance(o, (dict, list)) and o not in gc.get_referents(b)]
    assert owned == []
    assert a.get("run") == ["make", "check"] and a.tags == ["web"] and a.depends_on == [] and a.title == "s1"
    a.get("run").append("x")  # a caller's list is its own
    assert b.get("run") == ["make", "check"] and a.index == {
        "title": "s1",
        "run": ["make", "check"],
        "tags": ["web"],
        "depends_on": [],
    }
    assert queue.reader._steps[a._blob] is a


def test_a_step_read_whole_again_soon_is_not_parsed_again_and_only_a_few_are_kept(queue_repo, monkeypatch):
    """A tick asks for its own step whole four times (claim, run, record, merge): the reader
    keeps the last few whole steps, not every one (a step file may be 1 MiB)."""
    from runner.core import treefiles as stepfiles
    from runner.queue.queue import open_queue

    edit(
        queue_repo,
        {
            f"plans/steps/s{n}.md": f'---\ntitle: s{n}\nrun: ["true"]\nnotes: n{n}\n---\nbody {n}\n'.encode()
            for n in range(8)
        },
    )
    parsed = []
    real = stepfiles.parse_step
    monkeypatch.setattr(stepfiles, "parse_step", lambda path, data: parsed.append(path) or real(path, data))
    plan = open_queue(queue_repo).snapshot().plan
    parsed.clear()
    first = plan.steps["s0"].full()
    assert (
        plan.steps["s0"].full() is first and plan.steps["s0"].get("notes") == "n0" and parsed == ["plans/steps/s0.md"]
    )
    for n in range(1, 8):
        assert plan.steps[f"s{n}"].text.endswith(f"body {n}\n")
    assert plan.steps["s0"].full() is not first and len(parsed) == 9  # pushed out by newer reads, parsed again


def test_two_step_files_with_the_same_bytes_are_two_steps_each_at_its_path(tmp_path):
    """The reader keys what it parsed by blob: one blob at two paths must still be two steps
    (on the in-memory store, whose blob ids are git's)."""
    same = b'---\ntitle: twin\nrun: ["true"]\n---\n'
    queue = memory_queue(tmp_path)
    fresh(queue).edit(lambda snap: {"plans/steps/a.md": same, "plans/steps/b.md": same}, "twins", "tester")
    for _ in range(2):  # parsed now, then from what the reader and the parse cache kept
        for plan in (queue.snapshot().plan, fresh(queue).snapshot().plan):
            assert {s.id: s.path for s in plan.steps.values()} == {"a": "plans/steps/a.md", "b": "plans/steps/b.md"}
            assert plan.invalid == []


def test_the_reader_forgets_parsed_versions_no_longer_on_the_branch(tmp_path, monkeypatch):
    """The reader's policy, on the in-memory store."""
    from runner.core.machine import Kind
    from runner.queue import snapshot

    monkeypatch.setattr(snapshot, "STALE_PARSES", 4)
    queue = memory_queue(tmp_path)
    fresh(queue).edit(
        lambda snap: {
            f"plans/steps/s{n:02d}.md": f'---\ntitle: s{n}\nrun: ["true"]\n---\n'.encode() for n in range(12)
        },
        "plan",
        "tester",
    )
    for n in range(10):  # every claim and every completion leaves an old version behind
        queue.claim("w", f"w.{n}", {})
        queue.event(f"s{n:02d}", Kind.COMPLETE, "w", incarnation=f"w.{n}")
        assert len(queue.reader._steps) <= 12 + 4 + 1
    warm, full = queue.snapshot().plan, fresh(queue).snapshot().plan
    assert {s.id: s.status for s in warm.steps.values()} == {s.id: s.status for s in full.steps.values()}
    assert sum(s.status == "done" for s in warm.steps.values()) == 10


@pytest.mark.parametrize("in_c", [False, True], ids=["walked", "big trees in C"])
def test_the_tree_diff_says_what_libgit2s_diff_says_for_every_kind_of_change(tmp_path, monkeypatch, in_c):
    """diff_trees skips subtrees with the same id itself (libgit2 walks into every one); the
    hooks judge commits by it, so it must agree with libgit2 on every change there is."""
    import pygit2

    from runner.store import git as gitstore
    from runner.store import trees

    if in_c:
        monkeypatch.setattr(trees, "DIFF_IN_C", 3)
    repo = tmp_path / "r"
    git(tmp_path, "init", "-q", str(repo))

    def commit(files: dict[str, bytes | str], gitlinks: dict[str, str] | None = None) -> str:
        for old in repo.iterdir():
            if old.name != ".git":
                subprocess.run(["rm", "-rf", str(old)], check=True)
        for path, data in files.items():
            target = repo / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(data, str):  # a symlink to data
                target.symlink_to(data)
            else:
                target.write_bytes(data)
                target.chmod(0o755 if path.endswith(".sh") else 0o644)
        git(repo, "read-tree", "--empty")  # a gitlink of the commit before would keep its folder out
        git(repo, "add", "-A")
        for path, oid in (gitlinks or {}).items():
            git(repo, "update-index", "--add", "--cacheinfo", f"160000,{oid},{path}")
        git(repo, "commit", "-q", "--allow-empty", "-m", "c")
        return git(repo, "rev-parse", "HEAD^{tree}").strip()

    def stored(command: list[str], data: bytes) -> str:
        return (
            subprocess.run(["git", *command], cwd=repo, input=data, capture_output=True, check=True)
            .stdout.decode()
            .strip()
        )

    folder_of_x = stored(["mktree"], f"100644 blob {stored(['hash-object', '-w', '--stdin'], b'x')}\tx\n".encode())
    same = {f"big/{n:02d}/f{m}.md": f"{n} {m}".encode() for n in range(12) for m in range(3)}
    one = commit(
        {
            **same,
            "a/b/c.md": b"c",
            "a/b/d.md": b"d",
            "gone/x": b"x",
            "f2d": b"file",
            "d2f/x": b"x",
            "blob2link": b"t",
            "link2blob": "t",
            "run.sh": b"#!",
            "chmod": b"m",
            "moved.md": b"m",
            "a-b": b"1",
            "a.b": b"1",
        },
        {"sub": "1" * 40, "sub2blob": "2" * 40, "sub2dir": folder_of_x},
    )  # a gitlink and then a folder: one id, two types
    two = commit(
        {
            **same,
            "big/05/f1.md": b"changed",
            "a/b/c.md": b"c2",
            "a/b/new.md": b"n",
            "f2d/x": b"x",
            "d2f": b"file",
            "blob2link": "t",
            "link2blob": b"t",
            "run.sh": b"#!v2",
            "chmod.sh": b"m",
            "elsewhere/moved.md": b"m",
            "a/b.md": b"2",
            "a-b": b"2",
            "sub2blob": b"b",
            "sub2dir/x": b"x",
        },
        {"sub": "3" * 40},
    )
    store = gitstore.GitStore(repo, remote=None)
    reference = [
        (
            d.status_char(),
            d.new_file.path or d.old_file.path,
            None if d.status_char() == "D" else str(d.new_file.id),
            d.new_file.mode == pygit2.GIT_FILEMODE_LINK,
        )
        for d in store.repo[one].diff_to_tree(store.repo[two]).deltas
    ]
    ours = [(c.kind, c.path, c.oid, c.link) for c in store.diff_trees(one, two)]
    assert sorted(ours) == sorted(reference)
    assert [c.path for c in store.diff_trees(one, two)] == sorted(c.path for c in store.diff_trees(one, two))
    assert {k for k, *_ in ours} == {"A", "D", "M"} and len(ours) > 20
    assert store.diff_trees(one, one) == [] and sorted((c.kind, c.path) for c in store.diff_trees(two, one)) == sorted(
        ({"A": "D", "D": "A"}.get(k, k), p) for k, p, *_ in reference
    )
    empty = (
        "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # a root commit's parent tree in the hook: not stored, known to git
    )
    from_nothing = {("A", d.new_file.path) for d in store.repo[empty].diff_to_tree(store.repo[one]).deltas}
    assert {(c.kind, c.path) for c in store.diff_trees(empty, one)} == from_nothing and len(from_nothing) > 40


def test_a_worktree_half_registered_by_a_killed_worker_is_forgotten_by_the_next(tmp_path):
    """A worker killed (kill -9) between locking a new worktree's administrative folder and
    checking it out leaves a locked folder git never prunes; the next worktree made on the
    host removes it. A worktree a person locked, or git's own, stays."""
    import signal

    from runner.store import git as gitstore

    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(repo, "commit", "-q", "--allow-empty", "-m", "c")
    commit = git(repo, "rev-parse", "HEAD")
    admin = repo / ".git" / "worktrees"
    killed = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import os, signal
from pathlib import Path
from runner.store import git as gitstore, worktrees
store = gitstore.GitStore({str(repo)!r}, remote=None)
with worktrees._worktree_lock(store):
    worktrees.Path.write_text = lambda self, text, *a, **k: (
        os.kill(os.getpid(), signal.SIGKILL) if self.name == "gitdir" else Path.open(self, "w").write(text)
    )
    worktrees._register(Path({str(admin)!r}), Path({str(tmp_path / "wt" / "dead")!r}), {commit!r})
""",
        ],
        cwd=str(Path(__file__).resolve().parents[1]),
    )
    assert killed.wait(timeout=60) == -signal.SIGKILL
    assert (admin / "dead" / "locked").exists() and not (admin / "dead" / "gitdir").exists()
    git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "wt" / "kept"), commit)
    git(repo, "worktree", "lock", "--reason", "initializing", str(tmp_path / "wt" / "kept"))
    git(repo, "worktree", "prune")
    assert (admin / "dead").exists()  # what git leaves

    gitstore.GitStore(repo, remote=None).add_worktree(tmp_path / "wt" / "next", commit)
    assert not (admin / "dead").exists()
    assert (admin / "kept" / "locked").read_text().strip() == "initializing" and (admin / "next").is_dir()
    assert git(tmp_path / "wt" / "next", "rev-parse", "HEAD") == commit


@pytest.mark.parametrize("setting", ["plain", "filter and hook", "sparse checkout"])
def test_an_attempts_worktree_is_the_one_git_worktree_add_makes(tmp_path, monkeypatch, setting):
    """runner registers a step's worktree itself and starts one `git checkout` (not the three
    gits of `git worktree add`): git must see the same worktree, with git's own checkout
    (filter drivers, hooks), and settings runner does not copy go to `git worktree add`."""
    import pygit2

    from runner.store import git as gitstore

    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("print('app')\n")
    (repo / "docs.md").write_text("docs\n")
    if setting == "filter and hook":
        (repo / ".gitattributes").write_text("*.md filter=upper\n")
        git(repo, "config", "filter.upper.smudge", "tr a-z A-Z")
        git(repo, "config", "filter.upper.clean", "tr A-Z a-z")
        hook = repo / ".git" / "hooks" / "post-checkout"
        hook.write_text('#!/bin/sh\ntouch "$PWD/.checked-out"\n')
        hook.chmod(0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "c")
    if setting == "sparse checkout":
        git(repo, "sparse-checkout", "set", "src")
    commit = git(repo, "rev-parse", "HEAD")
    store = gitstore.GitStore(repo, remote=None)

    def made_by(path: Path) -> dict:
        files = sorted(str(f.relative_to(path)) for f in path.rglob("*") if f.is_file() and f.name != ".git")
        return {
            "files": files,
            "docs": (path / "docs.md").read_text() if (path / "docs.md").exists() else None,
            "status": git(path, "status", "--porcelain", "--ignored"),
            "head": git(path, "rev-parse", "HEAD"),
            "detached": git(path, "symbolic-ref", "-q", "HEAD", check=False) == "",
        }

    ours, theirs = tmp_path / "wt" / "ours", tmp_path / "wt" / "theirs"
    with monkeypatch.context() as env:  # a worker started from a git hook: the main worktree must stay as it is
        env.setenv("GIT_DIR", str(repo / ".git"))
        store.add_worktree(ours, commit)
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main" and git(repo, "status", "--porcelain") == ""
    git(repo, "worktree", "add", "-q", "--detach", str(theirs), commit)
    assert made_by(ours) == {**made_by(theirs), "head": commit}
    if setting == "filter and hook":
        assert made_by(ours)["docs"] == "DOCS\n" and ".checked-out" in made_by(ours)["files"]
    listed = git(repo, "worktree", "list", "--porcelain")
    assert f"worktree {ours.resolve()}\nHEAD {commit}\ndetached" in listed and "locked" not in listed
    git(repo, "worktree", "prune")
    assert store.repo.lookup_worktree(ours.name).path.rstrip("/") == str(ours.resolve())
    store.remove_worktree(ours)
    assert not ours.exists() and str(ours.resolve()) not in git(repo, "worktree", "list", "--porcelain")
    store.add_worktree(ours, commit)  # the same path again: a fresh worktree, under a new name if the old one lingers
    assert made_by(ours)["status"] == made_by(theirs)["status"] and isinstance(
        store.repo.lookup_worktree(ours.name), pygit2.Worktree
    )


def test_looking_refs_and_files_up_again_and_again_keeps_no_memory(queue_repo):
    """pygit2 keeps a reference to every name string it is asked to look up; a worker asks
    for the same few thousand names on every tick, so it must ask with one string a name."""
    import gc
    import tracemalloc

    from runner.store import Author
    from runner.store.git import GitStore

    store = GitStore(queue_repo, remote=None)
    tip = store.tip("runner/queue")

    def lookups(i: int) -> None:
        store.tip(f"runner/steps/s{i % 20}")  # missing refs, as a step branch is before its first run
        store.file_at(tip, f"plans/{'NOTES'}.md")
        store.make_commit([tip], {f"plans/steps/s{i % 20}.md": b"x"}, "m", Author("a", "a@example.com"))

    def held() -> int:
        """Blocks allocated under lookups() and still held. Blocks, not bytes: sys.intern's
        table, grown large by other tests in this process, may be resized once meanwhile."""
        gc.collect()
        mine = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, __file__, all_frames=True)])
        return sum(stat.count for stat in mine.statistics("filename"))

    lookups(0)
    tracemalloc.start(8)
    for i in range(100):
        lookups(i)
    before = held()
    for i in range(2000):
        lookups(i)
    grown = held() - before
    tracemalloc.stop()
    assert grown < 100, f"{grown} objects kept by 2,000 rounds of the same 20 names"


def test_heartbeats_are_listed_from_loose_and_packed_refs_alike(tmp_path):
    """The store lists heartbeat refs from their folder and packed-refs (not by walking
    every ref): what it lists is what git lists, after a pack, a new beat and a deletion."""
    from runner.queue.queue import open_queue
    from runner.store.git import GitStore

    bare, (clone,) = make_remote(tmp_path)
    runner(clone, "init")
    queue = open_queue(clone)
    for worker in ("w1", "w2", "w3"):
        queue.beat(worker, {})
    git(bare, "pack-refs", "--all")
    queue.beat("w4", {})  # loose, beside the packed ones
    queue.beat("w1", {})  # loose again over its packed line
    git(bare, "update-ref", "-d", "refs/runner/heartbeats/w2")  # gone from packed-refs
    git(clone, "pack-refs", "--all")
    runner(clone, "status")  # fetches the heartbeats into this clone's view

    def listed(repo: Path, prefix: str) -> dict[str, str]:
        lines = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", prefix).splitlines()
        return {name[len(prefix) :]: oid for name, oid in (line.split() for line in lines)}

    assert GitStore(bare, remote=None).heartbeats() == listed(bare, "refs/runner/heartbeats/")
    view = GitStore(clone).heartbeats()
    assert view == listed(clone, "refs/runner/remotes/origin/heartbeats/") and set(view) == {"w1", "w3", "w4"}
    assert GitStore(clone).heartbeat("w1") == view["w1"] and GitStore(clone).heartbeat("w2") is None


def test_a_large_plan_is_fanned_out_and_so_are_its_handoffs(queue_repo, tmp_path):
    from runner.core.layout import FANOUT_FROM, new_step_path

    folder = tmp_path / "steps"
    folder.mkdir()
    for n in range(FANOUT_FROM):
        (folder / f"s{n:04d}.md").write_text(f'---\ntitle: step {n}\nrun: ["true"]\n---\n')
    runner(queue_repo, "import", str(folder))
    path = new_step_path("s0000", fanned=True)
    assert path.count("/") == 3 and git(queue_repo, "cat-file", "-t", f"runner/queue:{path}") == "blob"
    folders = git(queue_repo, "ls-tree", "-d", "--name-only", "runner/queue:plans/steps/").splitlines()
    largest = max(
        len(git(queue_repo, "ls-tree", "--name-only", f"runner/queue:plans/steps/{name}").splitlines())
        for name in folders
    )
    assert largest < 16  # no tree a claim rewrites grows with the plan
    runner(queue_repo, "tick", "--id", "w1")
    done = runner_json(queue_repo, "status")["steps"]
    first = next(s for s in done if s["status"] == "done")
    handoff = first["path"].replace("plans/steps/", "plans/handoffs/")
    assert git(queue_repo, "cat-file", "-t", f"runner/queue:{handoff}") == "blob"


def test_runner_claim_runs_without_the_command_line_framework_or_pygit2_and_says_what_the_full_command_says(queue_repo):
    for step_id in ("01-a", "02-b"):
        add_step(queue_repo, step_id)
    probe = (
        "import sys, runpy; sys.argv = ['runner', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('runner', run_name='__main__')\n"
        "finally:\n"
        "    print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click', 'rich', 'pygit2')), "
        "file=sys.stderr)"
    )
    quick = subprocess.run(
        [sys.executable, "-c", probe, "claim", "--id", "w1", "--repo", str(queue_repo)],
        capture_output=True,
        text=True,
        env={**ENV_PATH},
    )
    assert quick.returncode == 0 and quick.stdout.startswith("claim 01-a (attempt 1) -> claimed  ["), quick
    assert (
        quick.stderr.strip().splitlines()[-1] == "[]"
    )  # neither typer nor rich was imported, nor pygit2 (git's commands read and write)
    full = runner(queue_repo, "claim", "--id", "w1", "--by", "alice")  # --by: an option only the full command takes
    assert full.stdout.startswith("claim 02-b (attempt 1) -> claimed  [")
    for args, code, said in (
        (["--id", "w1"], 3, "error: nothing ready (2 claimed)"),
        (["03-c", "--id", "w1"], 2, "error: no step '03-c' (see `runner status`)"),
    ):
        quick_no = subprocess.run(
            [sys.executable, "-m", "runner", "claim", *args, "--repo", str(queue_repo)],
            capture_output=True,
            text=True,
            env=ENV_PATH,
        )
        full_no = runner(queue_repo, "claim", *args, "--by", "alice", check=False)
        assert (
            (quick_no.returncode, quick_no.stderr.strip())
            == (full_no.returncode, full_no.stderr.strip())
            == (code, said)
        )


def test_heartbeat_and_complete_run_without_the_command_line_framework_or_pygit2_and_say_what_the_full_command_says(
    queue_repo,
):
    for step_id in ("01-a", "02-b"):
        add_step(queue_repo, step_id)
        runner(queue_repo, "claim", step_id, "--id", "w1")
    probe = (
        "import sys, runpy; sys.argv = ['runner', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('runner', run_name='__main__')\n"
        "finally:\n"
        "    print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click', 'rich', 'pygit2')), "
        "file=sys.stderr)"
    )
    full_cli = "import sys; from runner.cli import main; main(sys.argv[1:])"

    def both(*args: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
        """`runner ARGS` for 01-a through the shortcut, and for 02-b (or the same step, when told) through typer."""
        quick = subprocess.run(
            [sys.executable, "-c", probe, *args, "--repo", str(queue_repo)],
            capture_output=True,
            text=True,
            env=ENV_PATH,
        )
        other = [arg.replace("01-a", "02-b") for arg in args] if "01-a" in args else list(args)
        full = subprocess.run(
            [sys.executable, "-c", full_cli, *other, "--repo", str(queue_repo)],
            capture_output=True,
            text=True,
            env=ENV_PATH,
        )
        assert quick.stderr.strip().splitlines()[-1] == "[]", (
            quick.stderr
        )  # neither typer, rich nor pygit2 was imported
        return quick, full

    for command, said in (
        ("heartbeat", "heartbeat 01-a (attempt 1) by w1"),
        ("complete", "complete 01-a (attempt 1) -> done  ["),
    ):
        quick, full = both(command, "01-a", "--id", "w1")
        assert quick.returncode == full.returncode == 0 and quick.stdout.startswith(said), quick
        assert full.stdout.startswith(said.replace("01-a", "02-b"))
    quick, full = both("heartbeat", "01-a", "--id", "w1", "--json")
    assert quick.returncode == full.returncode == 2 and "cannot renew 01-a" in quick.stderr
    for args, code in ((["complete", "03-c", "--id", "w1"], 2), (["heartbeat", "03-c", "--id", "w1"], 2)):
        quick, full = both(*args)
        assert (quick.returncode, quick.stderr.strip().splitlines()[:-1]) == (
            full.returncode,
            full.stderr.strip().splitlines(),
        ) and quick.returncode == code
