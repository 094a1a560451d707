"""A merge conflict on record is not a failure (issue 32, point 1): when the integration branch
moved and the record's merge conflicts, the attempt is brought onto the new tip (git's own
merge, else a resolve pass: `[roles.resolve]` or the step's command again on the new tip; then
the gates and the verifier again), recorded as runs of the same attempt, bounded by
`[brakes] max_resolve_attempts`; and the same for `runner approve` after the integration moved.

Real workers (`runner worker`, `runner tick`) on real repositories, bare remotes guarded by the
server hook with `[hooks] identities`; the conflicts are real git conflicts in one shared file."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from support.repos import ROOT, add_step, edit, git, queue_history, runner_json, statuses, tick, wait_for
from support.served import as_pusher, drain, served, served_statuses

from runner.core.config import DEFAULT_TOML

FAKE_AGENT = ROOT / "examples" / "agent-plan" / "fake-agent"
RESOLVER = [
    sys.executable,
    str(FAKE_AGENT),
    "resolve",
    "--prompt-file",
    "{prompt_file}",
]  # keeps both sides of each conflict


def config(max_resolve_attempts: int = 5, resolver: list[str] | None = None, extra: str = "") -> bytes:
    text = DEFAULT_TOML.replace("detect = true", "detect = false").replace(
        "max_resolve_attempts = 5", f"max_resolve_attempts = {max_resolve_attempts}"
    )
    if resolver:
        text += f"\n[roles.resolve]\ncommand = {json.dumps(resolver)}\n"
    return (text + extra).encode()


def append(line: str, wait_for_file: Path | None = None) -> list[str]:
    """A step's command: append `line` to shared.txt (after `wait_for_file` exists, when given)."""
    wait = f'until [ -e "{wait_for_file}" ]; do sleep 0.02; done; ' if wait_for_file else ""
    return ["sh", "-c", wait + f'echo "{line}" >> shared.txt']


def events(repo: Path) -> list[dict]:
    return [entry for entry in queue_history(repo) if "Step" in entry]


def runs_of(entry: dict) -> list[dict]:
    return json.loads(entry.get("Runs") or "[]")


def lines_merged(repo: Path, path: str = "shared.txt") -> list[str]:
    return git(repo, "show", f"runner/integration:{path}").splitlines()


def background_tick(repo: Path, worker: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "tick", "--id", worker, "--json", "--repo", str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def overtaken(repo: Path, tmp_path: Path) -> dict:
    """01-first starts, 02-second starts after it from the same tip and records first (both
    append to shared.txt), then 01-first records: its merge conflicts. 01's tick report."""
    go = tmp_path / "go"
    add_step(repo, "01-first", run=append("first", wait_for_file=go))
    add_step(repo, "02-second", run=append("second"))
    first = background_tick(repo, "w1")
    wait_for(lambda: statuses(repo)["01-first"] == "claimed")
    assert tick(repo, "w2")["sentinel"] == "STEP_COMPLETE"  # 02 merged: the integration branch moved under 01
    go.write_text("go\n")
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_a_step_whose_record_conflicts_runs_again_on_the_new_tip_without_a_fail(queue_repo, tmp_path):
    edit(queue_repo, {"runner.toml": config()})
    report = overtaken(queue_repo, tmp_path)
    assert report["sentinel"] == "STEP_COMPLETE", report
    assert sorted(lines_merged(queue_repo)) == ["first", "second"]
    complete = [e for e in events(queue_repo) if e["Step"] == "01-first" and e["Event"] == "complete"]
    assert [e["Attempt"] for e in complete] == ["1"] and not [e for e in events(queue_repo) if e["Event"] == "fail"]
    runs = runs_of(complete[0])
    names = [run["name"] for run in runs]
    assert names == ["implement", "resolve", "implement"], runs  # the command again, on the new tip, same attempt
    assert runs[1]["detail"].startswith("1 file (shared.txt) conflicted onto ")
    assert not runner_json(queue_repo, "show", "01-first")["meta"].get("failures")  # nothing spent
    assert "## Resolve" in git(queue_repo, "show", "runner/queue:plans/handoffs/01-first.md")


def test_a_resolve_role_resolves_the_conflict_hunk_and_the_step_never_runs_again(queue_repo, tmp_path):
    edit(queue_repo, {"runner.toml": config(resolver=RESOLVER)})
    report = overtaken(queue_repo, tmp_path)
    assert report["sentinel"] == "STEP_COMPLETE", report
    assert lines_merged(queue_repo) == ["first", "second"]  # the resolver keeps this step's side first
    complete = next(e for e in events(queue_repo) if e["Step"] == "01-first" and e["Event"] == "complete")
    runs = runs_of(complete)
    assert [run["name"] for run in runs] == ["implement", "resolve"], runs
    assert runs[1]["result"] == "pass" and runs[1]["detail"].startswith("1 file (shared.txt) onto ")
    # The result is a merge of the new tip (02's, first parent) and attempt 1's own change.
    second = next(e for e in events(queue_repo) if e["Step"] == "02-second" and e["Event"] == "complete")
    result = json.loads(complete["Result"])
    parents = git(queue_repo, "rev-list", "--parents", "-n", "1", result["commit"]).split()[1:]
    assert parents[0] == json.loads(second["Result"])["merge"] and len(parents) == 2
    assert git(queue_repo, "show", f"{parents[1]}:shared.txt") == "first"  # what attempt 1 made before the pass


def test_git_merges_what_the_record_could_not_and_no_resolver_runs(queue_repo, tmp_path):
    """A union merge driver in .gitattributes: the record's in-memory merge knows nothing of it,
    git's own merge in the worktree does; the step's command is not run again."""
    edit(queue_repo, {"runner.toml": config(resolver=["false"])})
    add_step(
        queue_repo, "00-attributes", run=["sh", "-c", "echo 'shared.txt merge=union' > .gitattributes; : > shared.txt"]
    )
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    report = overtaken(queue_repo, tmp_path)
    assert report["sentinel"] == "STEP_COMPLETE", report
    complete = next(e for e in events(queue_repo) if e["Step"] == "01-first" and e["Event"] == "complete")
    assert [(run["name"], run["result"]) for run in runs_of(complete)] == [("implement", "pass"), ("resolve", "pass")]
    assert "git merged the change onto" in runs_of(complete)[1]["detail"]
    assert sorted(lines_merged(queue_repo)) == ["first", "second"]


def test_a_resolver_that_leaves_markers_fails_the_attempt_and_nothing_is_merged(queue_repo, tmp_path):
    edit(queue_repo, {"runner.toml": config(resolver=["true"])})
    report = overtaken(queue_repo, tmp_path)
    assert report["sentinel"] == "STEP_FAILED" and "conflict markers in shared.txt" in report["reason"], report
    assert lines_merged(queue_repo) == ["second"]
    failed = next(e for e in events(queue_repo) if e["Step"] == "01-first" and e["Event"] == "fail")
    assert [(run["name"], run["result"]) for run in runs_of(failed)] == [("implement", "pass"), ("resolve", "fail")]


@pytest.mark.parametrize(
    "style, deleted",
    [("merge", "<>"), ("diff3", "<>"), ("diff3", "<=>")],
    ids=["leaves-the-separator", "leaves-the-base-section", "leaves-only-the-base-marker"],
)
def test_a_resolver_that_deletes_only_some_markers_fails_the_attempt_and_nothing_is_merged(
    queue_repo, tmp_path, style, deleted
):
    """Attack 3 (issue 48): a resolver deletes only the <<<<<<< and >>>>>>> lines (or the ======= too, in
    git's diff3 style), leaving the rest of the conflict and both sides; the record merged it."""
    git(queue_repo, "config", "merge.conflictStyle", style)
    script = "; ".join(f"/^{char * 7}/d" for char in deleted)
    edit(queue_repo, {"runner.toml": config(resolver=["sed", "-i", script, "shared.txt"])})
    report = overtaken(queue_repo, tmp_path)
    assert report["sentinel"] == "STEP_FAILED" and "conflict markers in shared.txt" in report["reason"], report
    assert lines_merged(queue_repo) == ["second"]


def test_a_marker_like_line_that_both_sides_already_held_is_kept_by_a_resolved_merge(queue_repo, tmp_path):
    """Attack 3's fix must not refuse a file that legitimately holds ======= (a reST underline) on both sides."""
    edit(queue_repo, {"runner.toml": config(resolver=RESOLVER)})
    add_step(queue_repo, "00-title", run=["sh", "-c", "printf 'Title\n=======\n' > shared.txt"])
    assert tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    report = overtaken(queue_repo, tmp_path)
    assert report["sentinel"] == "STEP_COMPLETE", report
    assert lines_merged(queue_repo) == ["Title", "=======", "first", "second"]


def test_with_no_resolve_passes_a_conflict_fails_the_attempt_as_before(queue_repo, tmp_path):
    edit(queue_repo, {"runner.toml": config(max_resolve_attempts=0)})
    report = overtaken(queue_repo, tmp_path)
    assert (
        report["sentinel"] == "STEP_FAILED"
        and "merge conflict with runner/integration in: shared.txt" in report["reason"]
    )
    assert lines_merged(queue_repo) == ["second"]


# --- real workers on a bare remote under the server hook, with identities --------------------------


def barrier(folder: Path, line: str = "$RUNNER_STEP", wave: int = 3) -> list[str]:
    """Append the step's line once `wave` steps have started: the first wave's steps all start
    from one integration tip, so all but the first to record must conflict."""
    folder.mkdir(exist_ok=True)
    script = (
        f'touch "$0/$RUNNER_STEP"; until [ "$(ls "$0" | wc -l)" -ge {wave} ]; do sleep 0.02; done; '
        f'echo "{line}" >> shared.txt'
    )
    return ["sh", "-c", script, str(folder)]


STEPS = [f"0{n}-line" for n in range(1, 7)]


@pytest.mark.parametrize("resolver", [None, RESOLVER], ids=["the-command-again", "a-resolve-agent"])
def test_six_steps_appending_to_one_file_on_three_workers_all_merge_without_a_fail(tmp_path, resolver):
    # A pass is needed only when another step merged meanwhile: 5 passes always suffice for 6 steps.
    toml = config(max_resolve_attempts=5, resolver=resolver)
    bare, alice = served(tmp_path, toml, {step: {"run": barrier(tmp_path / "started")} for step in STEPS})
    said = drain(bare, tmp_path)
    assert served_statuses(alice) == {step: "done" for step in STEPS}, said
    merged = git(bare, "show", "runner/integration:shared.txt").splitlines()
    assert sorted(merged) == STEPS  # every line, once, no conflict marker
    history = events(bare)
    assert {e["Event"] for e in history} == {"claim", "complete"}, history  # no fail, no release, no takeover
    completes = [e for e in history if e["Event"] == "complete"]
    assert sorted(e["Step"] for e in completes) == STEPS and {e["Attempt"] for e in completes} == {"1"}
    resolves = [(e["Step"], run) for e in completes for run in runs_of(e) if run["name"] == "resolve"]
    assert len(resolves) >= 2, said  # the first wave started from one tip: two of its three records conflicted
    for entry in completes:
        names = [run["name"] for run in runs_of(entry)]
        passes = names.count("resolve")
        # The command again on the new tip: one more implement run a pass; a resolve agent: never again.
        assert names.count("implement") == 1 + (passes if resolver is None else 0), names
    for step, run in resolves:
        assert run["result"] == "pass" and "(shared.txt)" in run["detail"], run


def test_an_approval_whose_merge_conflicts_goes_to_a_resolve_pass_then_back_to_review(tmp_path):
    steps = {step: {"run": append(step), "requires_approval": True} for step in STEPS[:3]}
    bare, alice = served(tmp_path, config(resolver=RESOLVER), steps)
    one = {"w1": "key-1"}  # none merges before a person approves: one worker makes all three on the same tip
    drain(bare, tmp_path, one)  # three results, each made on the same tip, none merged
    assert served_statuses(alice) == {step: "review" for step in STEPS[:3]}
    as_pusher("alice", "approve", STEPS[0], "--by", "alice", repo=alice)
    for step in STEPS[1:3]:
        approved = json.loads(as_pusher("alice", "approve", step, "--by", "alice", "--json", repo=alice).stdout)
        assert approved["status"] == "ready"
        shown = json.loads(as_pusher("alice", "show", step, "--json", repo=alice).stdout)
        assert (
            shown["meta"]["resolve"] is True
            and "a worker brings the result onto the new tip" in shown["meta"]["last_error"]
        )
    while waiting := [s for s, status in served_statuses(alice).items() if status != "done"]:
        drain(bare, tmp_path, one)
        assert {served_statuses(alice)[s] for s in waiting} == {"review"}  # a resolved result still waits for a person
        for step in waiting:
            as_pusher("alice", "approve", step, "--by", "alice", repo=alice)
    assert sorted(git(bare, "show", "runner/integration:shared.txt").splitlines()) == STEPS[:3]
    history = events(bare)
    assert "fail" not in {e["Event"] for e in history}
    later = [e for e in history if e["Event"] == "complete" and e["Attempt"] != "1"]
    assert {e["Step"] for e in later} == set(STEPS[1:3])
    for entry in later:  # each later attempt brought the approved result onto the new tip: nothing from scratch
        assert [run["name"] for run in runs_of(entry)] == ["resolve"], runs_of(entry)


def test_a_holder_that_loses_its_claim_during_a_resolve_pass_records_nothing_and_merges_nothing(queue_repo, tmp_path):
    """A person aborts the step while its resolver runs (the resolver itself calls `runner
    abort`, then resolves): the record is fenced off, the integration branch keeps only 02."""
    abort = [
        sys.executable,
        "-m",
        "runner",
        "abort",
        "01-first",
        "--reason",
        "not now",
        "--by",
        "alice",
        "--repo",
        str(queue_repo),
    ]
    resolver = [
        "sh",
        "-c",
        f'{shlex.join(abort)} && exec "$1" "$2" resolve --prompt-file "$0"',
        "{prompt_file}",
        sys.executable,
        str(FAKE_AGENT),
    ]
    edit(queue_repo, {"runner.toml": config(resolver=resolver)})
    report = overtaken(queue_repo, tmp_path)
    assert (report["sentinel"], report["outcome"]) == ("STEP_REJECTED", "rejected"), report  # the fence held
    assert lines_merged(queue_repo) == ["second"]
    assert statuses(queue_repo)["01-first"] == "failed"
    assert not [e for e in events(queue_repo) if e["Step"] == "01-first" and e["Event"] in ("complete", "fail")]


@pytest.mark.parametrize("passes", [1, 2])
def test_resolve_passes_are_bounded_and_a_conflict_past_them_fails_the_attempt(queue_repo, tmp_path, passes):
    """While 01's resolver runs, a third step is merged (the resolver ticks it itself): the
    record after the first pass conflicts again. One pass allowed: the attempt fails, naming
    it; two: the second pass brings it onto the newest tip."""
    other = [sys.executable, "-m", "runner", "tick", "--id", "w3", "--repo", str(queue_repo)]
    resolver = [
        "sh",
        "-c",
        f'{shlex.join(other)} >/dev/null && exec "$1" "$2" resolve --prompt-file "$0"',
        "{prompt_file}",
        sys.executable,
        str(FAKE_AGENT),
    ]
    edit(queue_repo, {"runner.toml": config(max_resolve_attempts=passes, resolver=resolver)})
    prepend = [
        "sh",
        "-c",
        "{ echo third; cat shared.txt; } > new.txt && mv new.txt shared.txt",
    ]  # where the resolver put 01's line
    add_step(queue_repo, "03-third", run=prepend, priority=-1)  # after 01 and 02 in claim order
    report = overtaken(queue_repo, tmp_path)
    complete_or_fail = next(
        e for e in events(queue_repo) if e["Step"] == "01-first" and e["Event"] in ("complete", "fail")
    )
    resolves = [run for run in runs_of(complete_or_fail) if run["name"] == "resolve"]
    if passes == 1:
        assert report["sentinel"] == "STEP_FAILED", report
        assert "merge conflict with runner/integration in: shared.txt after 1 resolve pass(es)" in report["reason"]
        assert len(resolves) == 1 and lines_merged(queue_repo) == ["third", "second"]
    else:
        assert report["sentinel"] == "STEP_COMPLETE", report
        assert len(resolves) == 2 and lines_merged(queue_repo) == ["first", "third", "second"]


@pytest.mark.parametrize("kind", ["git", "memory"])
def test_both_stores_merge_in_a_worktree_leaving_conflicts_between_markers_and_reset_it(tmp_path, kind):
    from support.repos import make_repo

    from runner.queue.queue import author_for
    from runner.store.git import GitStore
    from runner.store.memory import MemoryStore

    store = GitStore(make_repo(tmp_path / "repo"), remote=None) if kind == "git" else MemoryStore(tmp_path / "state")
    who = author_for("w1")
    base = store.make_commit([], {"f.txt": b"base\n", "g.txt": b"g\n"}, "base\n", who)
    ours = store.make_commit([base], {"f.txt": b"base\nours\n"}, "ours\n", who)
    theirs = store.make_commit([base], {"f.txt": b"base\ntheirs\n", "h.txt": b"h\n"}, "theirs\n", who)
    worktree = tmp_path / "wt"
    store.add_worktree(worktree, ours)
    assert store.merge_in_worktree(worktree, ours, theirs) == ("f.txt",)
    text = (worktree / "f.txt").read_text()
    assert text.startswith(("base\n<<<<<<< ", "<<<<<<< ")) and "ours\n=======\n" in text and "theirs\n>>>>>>> " in text
    store.reset_worktree(worktree, theirs)
    assert (worktree / "f.txt").read_text() == "base\ntheirs\n" and (worktree / "h.txt").exists()
