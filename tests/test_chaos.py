"""Proof under fire: real workers on real git remotes under races, kills, partitions,
clock skew and hostile input, each run judged by the history checker.

  .ci/chaos                                                                 # CI: the CI size, seeds 1101 and 2202
  .venv/bin/python -m pytest -q -n 0 -m chaos -s tests/test_chaos.py             # the CI size (a few minutes)
  RUNNER_CHAOS_FULL=1 .venv/bin/python -m pytest -q -n 0 -m chaos -s tests/...   # the full size (about 18 minutes)
  RUNNER_CHAOS_SEED=1234 ...                                                # replay a seed

Every test prints the checker's table (visible with -s) and writes it next to its
run as chaos-report.txt / .json; one summary line per run is printed at the end.
See tests/chaos/README.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pygit2
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos import checker, hostile, netns, scenarios
from chaos.cluster import Cluster, StepSpec, git, runner_cli, scaled_lease

pytestmark = pytest.mark.chaos

SUMMARY: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    yield
    plugins = request.config.pluginmanager
    reporter, capture = plugins.getplugin("terminalreporter"), plugins.getplugin("capturemanager")
    if reporter and capture and SUMMARY:
        with capture.global_and_fixture_disabled():  # the summary shows without -s too
            reporter.write_line("")
            reporter.write_line(f"chaos suite ({'full' if scenarios.FULL else 'CI'} size, seed {scenarios.SEED}):")
            for line in SUMMARY:
                reporter.write_line("  " + line)


def publish(report: checker.Report, where: Path, started: float) -> None:
    """Print the table, keep it beside the run, and add a summary line."""
    report.write(where / "chaos-report.txt")
    print("\n" + report.table() + f"\n(table: {where / 'chaos-report.txt'})")
    s = report.stats
    SUMMARY.append(
        f"{report.name}: {s['done / failed / blocked']} done/failed/blocked, kills {s['kills']}, "
        f"partitions {s['partitions']}, "
        f"claims {s['claims']}, takeovers {s['takeovers']} (dead {s['  of dead holders']}, "
        f"cut {s['  of cut-off holders']}, "
        f"late {s['  of live holders late beyond the lease']}, stolen {s['  of holders that beat in time (stolen)']}), "
        f"lease {s['lease (heartbeat every lease/3)']}, "
        f"heartbeat gap p50/p99/max {s['heartbeat gap p50 / p99 / max']}, "
        f"double executions {s['double executions (lost lease)']}, double recordings {s['double recordings']}, "
        f"stray merges {s['stray merges (lost attempts)']}, violations {s['violations']}, "
        f"known bugs allowed {s['known bugs allowed (RUNNER_CHAOS_ALLOW)']} "
        f"(run {s.get('duration', '?')}, test {time.monotonic() - started:.0f}s) -> {where / 'chaos-report.txt'}"
    )


def assert_clean(report: checker.Report) -> None:
    assert report.ok, "the delivery contract was broken:\n" + report.table()
    assert report.stats["double recordings"] == 0 and report.stats["  of holders that beat in time (stolen)"] == 0


# --- the checker can fail ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """One small real run with a takeover in it: the material the doctored histories start from."""
    base = tmp_path_factory.mktemp("baseline")
    cluster = Cluster(
        base, hosts=2, workers_per_host=1, transport="path", lease="30s"
    )  # only the pid check may take over
    try:
        cluster.configure()
        cluster.add_plan(
            [
                StepSpec("b1"),
                StepSpec("b2", ["b1"]),
                StepSpec("b3", ["b1"]),
                StepSpec("b4", ["b2", "b3"]),
                StepSpec("b5", ["b4"]),
            ]
        )
        first, second = cluster.slots
        first.first_envs = [{"RUNNER_CRASH_AT": "after-step"}]  # one takeover and one double execution
        second.want = False  # starts once the first has crashed with b1 in hand
        cluster.start()
        cluster.wait_for(lambda: any(e["kind"] == "kill" for e in cluster.events), 60, what="the crash after b1's step")
        cluster.resume_worker(second)
        result = scenarios.finish(cluster, "baseline for doctored histories", 120)
    finally:
        cluster.close()
    return result, base


def doctored(baseline, tmp_path: Path, name: str):
    """A copy of the baseline run (remote, logs, execution log) to plant a violation in."""
    result, base = baseline
    copy = tmp_path / name
    shutil.copytree(base, copy, symlinks=True)
    inputs = result.cluster.inputs(name)
    moved = lambda p: copy / Path(p).relative_to(base)
    inputs.repo = moved(inputs.repo)
    inputs.exec_log = moved(inputs.exec_log)
    inputs.worker_logs = [moved(p) for p in inputs.worker_logs]
    inputs.allowed_bugs = set()  # the checker's own tests allow no known bug, whatever RUNNER_CHAOS_ALLOW says
    return inputs


def test_the_baseline_run_is_clean_and_has_a_takeover(baseline, tmp_path):
    result, _ = baseline
    publish(result.report, tmp_path, time.monotonic())
    assert_clean(result.report)
    assert (
        result.report.stats["kills"] == 1
        and result.report.stats["takeovers"] == result.report.stats["  of dead holders"] == 1
    )


def plant_commit(repo_path: Path, path: str, edit, message: str, branch: str = "runner/queue") -> str:
    """Append a commit to a branch of the (copied) remote that rewrites one step file."""
    repo = pygit2.Repository(str(repo_path))
    tip = repo.references[f"refs/heads/{branch}"].peel(pygit2.Commit)
    text = tip.tree[path].data.decode()
    index = pygit2.Index()
    index.read_tree(tip.tree)
    index.add(pygit2.IndexEntry(path, repo.create_blob(edit(text).encode()), pygit2.GIT_FILEMODE_BLOB))
    sig = pygit2.Signature("mallory", "mallory@example.com")
    commit = repo.create_commit(f"refs/heads/{branch}", sig, sig, message, index.write_tree(repo), [tip.id])
    return str(commit)


def baseline_takeover(inputs: checker.RunInputs) -> tuple[checker.Attempt, checker.Checker]:
    """The baseline's one takeover, as the checker replayed it."""
    judged = checker.Checker(inputs)
    judged.run()
    taken = [a for a in judged.attempts.values() if a.ended == "takeover"]
    assert len(taken) == 1, taken
    return taken[0], judged


def delay_landings(repo_path: Path, ref: str, from_commit: str, by_s: float) -> None:
    """Make every update of `ref` from `from_commit` on land `by_s` seconds later, in the remote's
    reflog and in its landing-time log (as if the push had been that slow)."""
    reflog = repo_path / "logs" / ref
    lines, later = [], False
    for line in reflog.read_text().splitlines():
        head, tab, message = line.partition("\t")
        fields = head.split(" ")
        later = later or fields[1] == from_commit
        if later:
            fields[-2] = str(int(fields[-2]) + int(by_s))
        lines.append(" ".join(fields) + tab + message)
    reflog.write_text("\n".join(lines) + "\n")
    times = repo_path / checker.REF_TIMES
    lines, later = [], False
    for line in times.read_text().splitlines():
        at, old, new, name = line.split(" ")
        if name == ref:
            later = later or new == from_commit
            if later:
                at = f"{float(at) + int(by_s):.3f}"
        lines.append(f"{at} {old} {new} {name}")
    times.write_text("\n".join(lines) + "\n")


def plant_beats(repo_path: Path, holder: checker.Attempt, start: float, end: float, every: float) -> None:
    """Heartbeats of `holder`'s attempt that landed on the remote every `every` seconds in [start, end]."""
    repo = pygit2.Repository(str(repo_path))
    sig = pygit2.Signature(holder.worker, f"{holder.worker}@example.com")
    empty = repo.TreeBuilder().write()
    ref = checker.HEARTBEATS + holder.worker
    with open(repo_path / checker.REF_TIMES, "a") as log:
        at, n = start, 0
        while at <= end:
            info = {
                "step": holder.step,
                "attempt": holder.attempt,
                "incarnation": holder.incarnation,
                "pid": holder.pid,
                "state": "running",
            }
            commit = repo.create_commit(
                None,
                sig,
                sig,
                f"heartbeat {holder.worker}\n\n{json.dumps({'worker': holder.worker, 'n': n, **info})}\n",
                empty,
                [],
            )
            log.write(f"{at:.3f} {checker.ZERO} {commit} {ref}\n")
            at, n = at + every, n + 1


def test_checker_reports_planted_violations(baseline, tmp_path):
    """Each doctored copy of a clean run must be caught, by the rule that names the fault."""
    result, _ = baseline
    assert result.report.ok, result.report.table()
    found: dict[str, set[str]] = {}

    # 1. an outcome recorded by someone who does not hold the claim (a second `done`)
    inputs = doctored(baseline, tmp_path, "double-done")
    plant_commit(
        inputs.repo,
        "plans/steps/b5.md",
        lambda t: t.replace("last_updated_by: ", "last_updated_by: mallory-"),
        checker.forge_message("complete", "b5", "mallory", 1, "done"),
    )
    found["double-done"] = checker.check(inputs).rules()

    # 2. a claim of a step that is already done (two live claims / a claim without readiness)
    inputs = doctored(baseline, tmp_path, "claim-done")
    plant_commit(
        inputs.repo,
        "plans/steps/b1.md",
        lambda t: t.replace("status: done", "status: claimed").replace("assignee: null", "assignee: mallory"),
        checker.forge_message("claim", "b1", "mallory", 9, "claimed"),
    )
    found["claim-done"] = checker.check(inputs).rules()

    # 3. the remote's queue branch moved backwards (a force push)
    inputs = doctored(baseline, tmp_path, "rewrite")
    git(inputs.repo, "update-ref", "-m", "mallory force-pushes", "refs/heads/runner/queue", "refs/heads/runner/queue~3")
    found["rewrite"] = checker.check(inputs).rules()

    # 4. the integration branch lost the last merge (rewritten, and a done step missing)
    inputs = doctored(baseline, tmp_path, "integration")
    git(
        inputs.repo,
        "update-ref",
        "-m",
        "mallory drops a merge",
        "refs/heads/runner/integration",
        "refs/heads/runner/integration~1",
    )
    found["integration"] = checker.check(inputs).rules()

    # 5. a step that ran without a claim, and one attempt that ran twice
    inputs = doctored(baseline, tmp_path, "exec")
    with open(inputs.exec_log, "a") as log:
        log.write("b2 7 host-2 1 0\n")
    found["exec-unclaimed"] = checker.check(inputs).rules()
    inputs = doctored(baseline, tmp_path, "exec-twice")
    first = inputs.exec_log.read_text().splitlines()[0]
    with open(inputs.exec_log, "a") as log:
        log.write(first + "\n")
    found["exec-twice"] = checker.check(inputs).rules()

    # 6. a worker log claiming an outcome the queue does not hold (a phantom recording)
    inputs = doctored(baseline, tmp_path, "phantom")
    with open(inputs.worker_logs[0], "a") as log:
        log.write("2026-01-01T00:00:00Z TICK host-1 b3 attempt 4 -> done\n")
    found["phantom"] = checker.check(inputs).rules()

    # 7. the baseline's takeover (its holder's restarted worker saw the pid gone, well within the lease),
    # with the kill that justified it erased: a live claim stolen
    inputs = doctored(baseline, tmp_path, "stolen")
    inputs.events = [e for e in inputs.events if e["kind"] not in ("kill", "exit")]
    found["stolen"] = checker.check(inputs).rules()

    # 8. a plan whose dependency order the integration branch does not follow
    inputs = doctored(baseline, tmp_path, "order")
    inputs.expected_steps = {**inputs.expected_steps, "b1": ["b5"]}
    found["order"] = checker.check(inputs).rules()

    # 9. a step that never finished (the harness expected one more)
    inputs = doctored(baseline, tmp_path, "unfinished")
    inputs.expected_steps = {**inputs.expected_steps, "b6": []}
    found["unfinished"] = checker.check(inputs).rules()

    # 10. an attempt that lost its claim and still merged into integration
    inputs = doctored(baseline, tmp_path, "stray-merge")
    taken, _ = baseline_takeover(inputs)
    integration = pygit2.Repository(str(inputs.repo))
    tip = integration.references["refs/heads/runner/integration"].peel(pygit2.Commit)
    sig = pygit2.Signature(taken.worker, f"{taken.worker}@example.com")
    b1 = (
        integration.references["refs/heads/runner/queue"].peel(pygit2.Commit).tree / "plans/steps/b1.md"
    ).data.decode()
    merged = integration[re.search(r"commit: ([0-9a-f]{40})", b1).group(1)]  # its step branch went with its merge
    integration.create_commit(
        "refs/heads/runner/integration",
        sig,
        sig,
        f"merge b1 (attempt {taken.attempt}) again\n\nRunner-Step: b1\nRunner-Attempt: {taken.attempt}\n",
        tip.tree.id,
        [tip.id, merged.id],
    )
    report = checker.check(inputs)
    found["stray-merge"] = report.rules()
    assert report.stats["stray merges (lost attempts)"] == 1 and any(
        v.known_bug == "stray-merge" for v in report.violations
    ), report.table()

    expected = {
        "double-done": "claim",
        "claim-done": "overlap",
        "rewrite": "rewrite",
        "integration": "integration",
        "exec-unclaimed": "claim",
        "exec-twice": "claim",
        "phantom": "holder",
        "stolen": "overlap",
        "order": "integration",
        "unfinished": "terminal",
        "stray-merge": "integration",
    }
    print("\nplanted violation -> rules reported")
    for name in expected:
        print(f"  {name:15} -> {sorted(found[name])}")
    missed = {name: rule for name, rule in expected.items() if rule not in found[name]}
    assert not missed, f"the checker missed planted violations: {missed} (found {found})"
    # the doctored double `done` is counted once where it matters most
    inputs = doctored(baseline, tmp_path, "double-done-count")
    plant_commit(
        inputs.repo,
        "plans/steps/b5.md",
        lambda t: t + "\n",
        checker.forge_message("complete", "b5", "host-2", 1, "done"),
    )
    report = checker.check(inputs)
    assert report.stats["double recordings"] == 1, report.table()
    print(report.table())


def test_checker_judges_a_takeover_by_the_holders_heartbeats(baseline, tmp_path):
    """The same takeover, of a holder nobody killed, made to land a lease and more after the claim:
    legal when the holder's heartbeats stopped (they were late), a stolen claim when they kept landing."""
    inputs = doctored(baseline, tmp_path, "late")
    inputs.events = [e for e in inputs.events if e["kind"] not in ("kill", "exit")]
    taken, judged = baseline_takeover(inputs)
    lease = taken.lease_s
    signs = judged.evidence(taken)
    took = judged.landed(judged.queue_ref, taken.ended_commit)
    assert took.hi - signs[-1].lo < lease, "the baseline's takeover was not within the lease (the pid check)"
    delay_landings(inputs.repo, judged.queue_ref, taken.ended_commit, lease + 2)
    late = checker.check(inputs)
    print(late.table())
    assert late.ok, late.table()
    assert (
        late.stats["  of live holders late beyond the lease"] == 1
        and late.stats["heartbeat gaps longer than the lease"] >= 1
    )

    inputs = doctored(baseline, tmp_path, "beating")
    inputs.events = [e for e in inputs.events if e["kind"] not in ("kill", "exit")]
    taken, judged = baseline_takeover(inputs)
    delay_landings(inputs.repo, judged.queue_ref, taken.ended_commit, lease + 2)
    delayed = judged.landed(judged.queue_ref, taken.ended_commit).hi + lease + 2
    plant_beats(inputs.repo, taken, judged.evidence(taken)[-1].at + 1, delayed - 0.5, every=lease / 3)
    beating = checker.check(inputs)
    print(beating.table())
    assert "overlap" in beating.rules() and beating.stats["  of holders that beat in time (stolen)"] == 1, (
        beating.table()
    )


# --- the scenarios ----------------------------------------------------------------------------------


def test_race_of_many_workers_on_a_plan_with_dependencies(tmp_path):
    started = time.monotonic()
    result = scenarios.race(tmp_path)
    publish(result.report, tmp_path, started)
    assert_clean(result.report)
    stats = result.report.stats
    assert stats["workers"] >= 12 and stats["kills"] == 0
    # nobody died: a takeover could only be of a holder whose heartbeats were late beyond the lease (legal,
    # and the table says how late they were), and only such a takeover may run a step twice
    late = stats["  of live holders late beyond the lease"]
    assert stats["takeovers"] == late and stats["double executions (lost lease)"] <= late, result.report.table()
    assert stats["claims"] == stats["steps"] + stats["retries (fail/release)"]


def test_kills_at_every_crash_point_mid_step_and_at_random(tmp_path):
    started = time.monotonic()
    result = scenarios.kills(tmp_path)
    publish(result.report, tmp_path, started)
    assert_clean(result.report)
    events = result.cluster.events
    crashed = scenarios.crashed(result.cluster)
    armed = {s.id for s in result.cluster.slots if s.first_envs}
    assert armed <= crashed, f"workers armed with a crash point that never reached it: {armed - crashed}"
    assert result.report.stats["takeovers"] >= len(scenarios.CRASH_POINTS)
    mid = result.facts["mid_step"]  # the worker killed in the middle of a step lost that attempt to a takeover
    assert _ended_by_takeover(result, mid["step"], mid["attempt"]), mid
    if scenarios.SIZE.random_kills:
        assert any(e.get("how") == "random SIGKILL" for e in events), "no random kill happened"
    plan = result.cluster.plan_state()
    assert plan["poison"]["status"] == "failed" and plan["poison"]["attempt"] == 2, plan["poison"]["meta"]
    assert "attempts spent" in str(plan["poison"]["meta"].get("last_error"))


def test_daemon_survives_a_plan_blocked_by_a_failed_step(tmp_path):
    """Regression (39db7aa): print_report crashed with KeyError 'step' on the STEP_BLOCKED tick of a plan whose
    remaining steps wait on a failed one, and a supervised daemon crash-looped."""
    cluster = Cluster(tmp_path, hosts=1, workers_per_host=1, transport="path", max_attempts=1)
    try:
        cluster.configure()
        cluster.add_plan([StepSpec("dies", script="exit 3"), StepSpec("waits", ["dies"])])
        proc = runner_cli(
            cluster.hosts[0].clone,
            "worker",
            "--id",
            "host-1",
            "--once",
            "--interval",
            "0.2",
            "--grace",
            "2",
            check=False,
            timeout=60,
        )
        print(proc.stdout[-1500:], proc.stderr[-1500:])
        assert checker.terminal_state(cluster.plan_state()) == {"dies": "failed", "waits": "blocked"}
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (
            f"the daemon died (exit {proc.returncode}): {proc.stderr[-600:]}"
        )
    finally:
        cluster.close()


def test_partitions_on_loopback(tmp_path):
    started = time.monotonic()
    result = scenarios.partitions(tmp_path)
    publish(result.report, tmp_path, started)
    print("cuts:", json.dumps(result.facts["cuts"], indent=1))
    assert_clean(result.report)
    cuts = [c for c in result.facts["cuts"] if "step" in c]
    assert len(cuts) >= min(2, scenarios.SIZE.partitions), result.facts
    # once the host came back while its step still ran, once after the step had ended
    assert {c["step_still_running_at_heal"] for c in cuts} == {True, False}, cuts
    for cut in cuts:  # the lost attempt ended by a takeover: its holder recorded nothing
        assert _ended_by_takeover(result, cut["step"], cut["attempt"]), cut


def _events_of(result, step: str) -> list[checker.Message]:
    """What the queue branch recorded for one step, oldest first."""
    repo = pygit2.Repository(str(result.cluster.bare))
    walker = repo.walk(
        repo.references["refs/heads/runner/queue"].target, pygit2.GIT_SORT_TOPOLOGICAL | pygit2.GIT_SORT_REVERSE
    )
    return [m for m in (checker.read_event(c.message) for c in walker) if m.step == step]


def _ended_by_takeover(result, step: str, attempt: int) -> bool:
    """The attempt's claim ended by a takeover, and its holder recorded nothing for it."""
    events = _events_of(result, step)
    taken = any(m.kind == "takeover" and m.replaces == attempt for m in events)
    recorded = any(m.kind in checker.HOLDER_OUTCOMES and m.attempt == attempt for m in events)
    return taken and not recorded


def test_clock_skew_does_not_steal_live_claims(tmp_path):
    started = time.monotonic()
    result = scenarios.clock_skew(tmp_path)
    publish(result.report, tmp_path, started)
    # the checker judged every takeover by the holder's heartbeats: none of a holder that beat in time
    assert_clean(result.report)
    watched = result.facts["watched"]
    assert watched["still_held"] and watched["seconds"] > result.facts["lease_s"], (
        f"the skewed hosts did not watch the true-clock host's live claim for longer than a lease: {watched}"
    )
    killed = result.facts["killed"]
    assert _ended_by_takeover(result, killed["step"], killed["attempt"]), (
        "a skewed host must take over the dead host's claim"
    )
    stats = result.report.stats
    assert (
        stats["  of dead holders"] == 1 and stats["takeovers"] == 1 + stats["  of live holders late beyond the lease"]
    ), result.report.table()


def test_backoff_written_by_a_skewed_host_does_not_park_the_step(tmp_path):
    """Regression (39db7aa): not_before, written by a host 3 h ahead, parked the step for 3 h for everyone else."""
    started = time.monotonic()
    result = scenarios.skewed_backoff(tmp_path)
    publish(result.report, tmp_path, started)
    print("not_before written by the skewed host:", result.facts)
    assert_clean(result.report)
    facts = result.facts  # the skewed host did write a backoff hours ahead of the true clock ...
    assert (facts["ahead_of_true_clock_s"] or 0) > scenarios.SKEW_S / 2, facts
    flaky = result.cluster.plan_state()["flaky"]  # ... and the true-clock host retried the step anyway
    assert flaky["status"] == "done" and flaky["attempt"] == 2 and flaky["meta"].get("last_updated_by") == "host-2", (
        flaky["meta"]
    )


def test_hostile_step_files_are_refused_and_the_rest_drains(tmp_path):
    started = time.monotonic()
    canary = tmp_path / "canary"
    canary.mkdir()
    # text output: a plan left with only a blocked step once crashed print_report
    # (test_daemon_survives_a_plan_blocked_by_a_failed_step)
    cluster = Cluster(tmp_path / "run", hosts=2, workers_per_host=1, transport="path", lease="1m", max_attempts=2)
    try:
        cluster.configure()
        corpus = hostile.build(canary, cluster.exec_log)
        cluster.commit_files({**hostile.files_of(corpus.invalid), **corpus.valid}, "a plan with hostile files")
        cluster.steps = [StepSpec(sid, _deps_of(corpus, sid)) for sid in corpus.expect]
        # validate and status, as a person would run them
        validate = runner_cli(cluster.hosts[0].clone, "validate", "--json", check=False)
        assert validate.returncode == 2, validate.stdout + validate.stderr
        problems = json.loads(validate.stdout.strip().splitlines()[-1])["problems"]
        status = {}
        for row in json.loads(runner_cli(cluster.hosts[0].clone, "status", "--json").stdout.strip().splitlines()[-1])[
            "steps"
        ]:
            status.setdefault(row["step"], []).append(row)
        unreported = []
        print("\nhostile file -> reason reported by `runner validate`")
        for bad in corpus.invalid:
            lines = [p for p in problems if p.startswith(f"plans/steps/{bad.path}:")]
            reason = " | ".join(p.split(": ", 1)[1] for p in lines)
            print(f"  {bad.what:40} {bad.path[:28]:28} -> {reason[:110]}")
            if not lines or not any(word in reason.lower() for word in bad.reason):
                unreported.append((bad.path, bad.reason, reason))
            rows = status.get(bad.step_id, [])
            if not rows or any(r["status"] != "invalid" for r in rows if r["path"] == f"plans/steps/{bad.path}"):
                unreported.append((bad.path, "status invalid", [r["status"] for r in rows]))
        assert not unreported, f"hostile files not reported as invalid with their reason: {unreported}"
        cluster.start()
        result = scenarios.finish(
            cluster,
            f"hostile input: {len(corpus.invalid)} bad files, {len(corpus.expect)} steps that must run safely",
            scenarios.SIZE.drain_timeout,
            expected_invalid={b.step_id for b in corpus.invalid},
        )
    finally:
        cluster.close()
    publish(result.report, tmp_path, started)
    assert_clean(result.report)
    assert sorted(os.listdir(canary)) == [], "something ran that no step wrote as an argv"
    plan = result.cluster.plan_state()
    final = checker.terminal_state(plan, set(corpus.expect))
    assert final == corpus.expect
    ran = {r["step"] for r in checker.read_exec_log(result.cluster.exec_log)}
    assert ran == {s for s, v in corpus.expect.items() if v != "blocked"}
    for path, content in corpus.literal.items():  # titles and tokens arrive as they were written
        assert git(result.cluster.bare, "show", f"runner/integration:{path}") == content.rstrip("\n")


def _deps_of(corpus: hostile.Corpus, step_id: str) -> list[str]:
    meta = checker.frontmatter(corpus.valid[f"plans/steps/{step_id}.md"])
    return list(meta.get("depends_on") or [])


def test_required_outputs_outside_the_worktree_are_invalid(tmp_path):
    """Regression (39db7aa): required_outputs with an absolute path or `..` passed validation and were refused
    only by the gate, after the step had run."""
    cluster = Cluster(tmp_path / "run", hosts=1, workers_per_host=1, transport="path")
    try:
        corpus = hostile.build(tmp_path / "canary", cluster.exec_log)
        cluster.commit_files(hostile.files_of(corpus.tricky_outputs), "required_outputs that leave the worktree")
        validate = runner_cli(cluster.hosts[0].clone, "validate", "--json", check=False)
        problems = json.loads(validate.stdout.strip().splitlines()[-1])["problems"]
        print("validate:", validate.returncode, problems)
        for bad in corpus.tricky_outputs:
            lines = [p for p in problems if p.startswith(f"plans/steps/{bad.path}:")]
            assert lines and any(w in " ".join(lines).lower() for w in bad.reason), (bad.path, problems)
    finally:
        cluster.close()


# --- several hosts ---------------------------------------------------------------------------------


@pytest.fixture
def lab():
    why = netns.unavailable()
    if why:
        pytest.skip(f"network namespaces unavailable: {why} (the loopback scenarios cover the same protocol)")
    if not shutil.which("git") or subprocess.run(["git", "daemon", "--help"], capture_output=True).returncode not in (
        0,
        1,
    ):
        pytest.skip("git daemon is not installed")
    lab = netns.Lab(hosts=3).up()
    try:
        yield lab
    finally:
        lab.down()


def test_hosts_in_network_namespaces_with_kills_and_partitions(tmp_path, lab):
    started = time.monotonic()
    result = scenarios.netns_hosts(tmp_path, lab)
    publish(result.report, tmp_path, started)
    print("cuts:", json.dumps(result.facts["cuts"], indent=1))
    assert_clean(result.report)
    assert result.report.stats["partitions"] >= 1 and result.report.stats["kills"] >= 1
    for cut in [c for c in result.facts["cuts"] if "step" in c]:
        assert _ended_by_takeover(result, cut["step"], cut["attempt"]), cut


def test_workers_sharing_a_clone_do_not_break_each_others_fetches(tmp_path):
    """Regression (39db7aa): `git fetch` failed on a neighbour's half-made worktree and the error was
    recorded as a failed attempt. What workers on one clone do at the same time: two add and remove
    worktrees (a tick's prepare and cleanup), two fetch (snapshots, heartbeats). Up to 20 s; every git
    call must succeed."""
    import threading

    from runner.store.git import GitStore

    cluster = Cluster(tmp_path, hosts=1, workers_per_host=1, transport="path")
    clone = cluster.hosts[0].clone
    git(clone, "fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*")
    errors: list[str] = []
    done: Counter = Counter()
    deadline = time.monotonic() + 20

    def worktrees(worker: str) -> None:
        n = 0
        try:
            store = GitStore(clone)
            start = store.tip("runner/integration")
            while time.monotonic() < deadline and not errors:
                tree = tmp_path / "worktrees" / worker / f"s{n}-a1"
                tree.parent.mkdir(parents=True, exist_ok=True)
                store.add_worktree(tree, start)
                store.remove_worktree(tree)
                done["worktree"] += 1
                n += 1
        except Exception as exc:  # any failure is the finding
            errors.append(f"{worker} worktree {n}: {exc!r}")

    def fetches(worker: str) -> None:
        try:
            store = GitStore(clone)
            while time.monotonic() < deadline and not errors:
                store.fetch(["runner/queue", "runner/integration"], heartbeats=True)
                done["fetch"] += 1
        except Exception as exc:
            errors.append(f"{worker} fetch: {exc!r}")

    threads = [threading.Thread(target=worktrees, args=(f"host-1-w{i}",)) for i in (1, 2)]
    threads += [threading.Thread(target=fetches, args=(f"host-1-w{i}",)) for i in (3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cluster.close()
    print("calls:", dict(done), "errors:", errors[:3])
    assert not errors, f"a worker's git call failed because of its neighbour: {errors[0]}"
    assert done["worktree"] >= 2 and done["fetch"] >= 2, f"the neighbours hardly ran at the same time: {dict(done)}"


RECORD_PUSH = "refs/heads/runner/integration"  # only a record's push names it: the merge rides in it


def test_a_transient_error_while_recording_is_not_recorded_as_a_failure(tmp_path):
    """Regression (39db7aa): one failed push of a done step's record was recorded as a failed attempt, and the
    retry merged the step into integration a second time."""
    started = time.monotonic()
    cluster = Cluster(tmp_path, hosts=1, workers_per_host=1, transport="path", lease="1m")
    try:
        cluster.configure()
        cluster.add_plan([StepSpec("t1")])
        blip = cluster.git_shim(cluster.slots[0])
        blip.write_text(f"count 1 push {RECORD_PUSH}\n")
        cluster.start()
        result = scenarios.finish(cluster, "one failed record push", 60)
    finally:
        cluster.close()
    publish(result.report, tmp_path, started)
    assert blip.read_text().split()[:2] == ["count", "0"], "the record's push never failed"
    print(git(cluster.bare, "log", "--reverse", "--format=%h %s", "runner/queue"))
    print(git(cluster.bare, "log", "--first-parent", "--reverse", "--format=%h %s", "runner/integration"))
    assert_clean(result.report)  # among others: t1 merged into integration exactly once
    kinds = [m.kind for m in _events_of(result, "t1")]
    assert result.cluster.plan_state()["t1"]["status"] == "done" and "fail" not in kinds, kinds


def test_a_worker_that_cannot_record_does_not_abandon_its_claim(tmp_path):
    """Regression (39db7aa): after two failed recording pushes the live worker dropped its claim without releasing
    it, and its idle heartbeats kept the claim alive for ever."""
    started = time.monotonic()
    cluster = Cluster(tmp_path, hosts=2, workers_per_host=1, transport="path", lease=scaled_lease(6))
    try:
        cluster.configure()
        cluster.add_plan([StepSpec("t1")])
        holder, other = cluster.slots
        blip = cluster.git_shim(holder)
        blip.write_text(f"count 2 push {RECORD_PUSH}\n")
        other.want = False
        cluster.start()
        cluster.wait_for(lambda: cluster.plan_state()["t1"]["status"] != "ready", 30, what="the first claim")
        cluster.resume_worker(other)  # a second host, to take over what the first one drops
        result = scenarios.finish(cluster, "two failed record pushes", 40, stuck_for=10)
    finally:
        cluster.close()
    publish(result.report, tmp_path, started)
    # the holder's record push failed (twice, when the holder claims the step again after giving it back)
    assert int(blip.read_text().split()[1]) < 2, "the record's push never failed"
    print(git(cluster.bare, "log", "--reverse", "--format=%h %ad %s", "--date=format:%T", "runner/queue"))
    assert_clean(result.report)
    assert result.report.stats["takeovers"] == 0, (
        "the holder was alive and reachable: nobody should have had to take over"
    )
    kinds = [m.kind for m in _events_of(result, "t1")]  # every attempt ended by its holder's own record
    assert result.cluster.plan_state()["t1"]["status"] == "done" and kinds.count("claim") == len(
        [k for k in kinds if k in checker.HOLDER_OUTCOMES]
    ), kinds


def test_a_stale_step_branch_lock_left_by_a_kill_does_not_fail_the_step(tmp_path):
    """Regression (39db7aa): a `.lock` left on the step branch by a SIGKILLed holder failed every later attempt
    of that step on that clone until the step ended failed."""
    started = time.monotonic()
    cluster = Cluster(tmp_path, hosts=1, workers_per_host=1, transport="path", max_attempts=2)
    try:
        cluster.configure(keep_step_branches=True)  # the step's branch is written, not only deleted
        cluster.add_plan([StepSpec("t1")])
        refs = cluster.hosts[0].clone / ".git" / "refs"
        # what `kill -9` in the middle of a ref update left a minute ago, on each ref of the step's branch in the clone
        locks = [
            refs / "heads" / "runner" / "steps" / "t1.lock",
            refs / "remotes" / "origin" / "runner" / "steps" / "t1.lock",
        ]
        for lock in locks:
            lock.parent.mkdir(parents=True, exist_ok=True)
            lock.write_text("")
            os.utime(lock, (time.time() - 60, time.time() - 60))
        cluster.start()
        result = scenarios.finish(cluster, "a stale step-branch lock in the clone", 60)
    finally:
        cluster.close()
    publish(result.report, tmp_path, started)
    print(git(cluster.bare, "log", "--reverse", "--format=%h %s", "runner/queue"))
    assert any(not lock.exists() for lock in locks), "the worker never met the stale lock"
    assert_clean(result.report)
    t1 = result.cluster.plan_state()["t1"]
    assert t1["status"] == "done" and t1["attempt"] == 1 and result.report.stats["retries (fail/release)"] == 0, t1[
        "meta"
    ]


def test_a_claim_won_after_a_lost_race_starts_from_its_dependencies(tmp_path):
    """Regression (39db7aa): the worktree started from the integration tip fetched before the claim,
    without the dependency completed in between. Worker A's claim push is slow (its network), so it
    loses the race: meanwhile worker B claims the step A wanted and completes `d`. A re-reads the queue,
    finds `x` (which depends on `d`) ready, claims it, and must start from an integration tip with `d`."""
    cluster = Cluster(tmp_path, hosts=2, workers_per_host=1, transport="path")
    try:
        cluster.configure()
        cluster.add_plan(
            [StepSpec("y", extra={"priority": 10}), StepSpec("d", extra={"priority": 5}), StepSpec("x", ["d"])]
        )
        a, b = cluster.slots
        blip = cluster.git_shim(a)
        blip.write_text("sleep 6 push\n")  # A's first push (its claim of y) waits 6 s
        env = {"RUNNER_HOST": a.host.name, **a.env}
        a_tick = subprocess.Popen(
            [sys.executable, "-m", "runner", "tick", "--id", a.id, "--json", "--repo", str(a.host.clone)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **env},
        )
        cluster.wait_for(lambda: not blip.read_text().strip(), 30, what="A to reach its claim push")
        runner_cli(b.host.clone, "claim", "--id", "someone", "y", env={"RUNNER_HOST": "elsewhere"})
        runner_cli(
            b.host.clone, "tick", "--id", b.id, env={"RUNNER_HOST": b.host.name}
        )  # claims d, runs it, merges it, records it
        out, err = a_tick.communicate(timeout=120)
        print("A:", out[-600:], err[-600:])
        plan = cluster.plan_state()
        assert plan["d"]["status"] == "done" and plan["x"]["status"] == "done", {
            k: v["status"] for k, v in plan.items()
        }
        # A lost the race for y (someone else holds it) and won x afterwards
        assert plan["y"]["meta"].get("assignee") == "someone" and plan["x"]["meta"].get("last_updated_by") == a.id, (
            plan["x"]["meta"]
        )
        d_commit, x_commit = plan["d"]["meta"]["result"]["commit"], plan["x"]["meta"]["result"]["commit"]
        print(git(cluster.bare, "log", "--format=%h %p %s", "-1", x_commit))
        assert (
            subprocess.run(
                ["git", "-C", str(cluster.bare), "merge-base", "--is-ancestor", d_commit, x_commit]
            ).returncode
            == 0
        ), f"x ran on a tree without its dependency d: x's commit {x_commit[:10]} does not contain d's {d_commit[:10]}"
    finally:
        cluster.close()


LOCKING_HOOK = """#!/bin/sh
# post-receive on the remote: right after it accepted a push, hold the pushing clone's
# remote-tracking ref lock for a moment, as the clone's own concurrent `git fetch`
# (a heartbeat thread, a sibling worker) does many times a minute. Once per ref kind.
clone="$1"
while read old new ref; do
    case "$ref" in
        refs/heads/runner/queue) kind=claim; [ "$(git log -1 --format=%an "$new")" = "Chaos Harness" ] && continue ;;
        refs/heads/runner/integration) kind=merge ;;
        *) continue ;;
    esac
    [ -e "$clone/.git/lock-fired-$kind" ] && continue
    touch "$clone/.git/lock-fired-$kind"
    lock="$clone/.git/refs/remotes/origin/${ref#refs/heads/}.lock"
    mkdir -p "$(dirname "$lock")"
    : > "$lock"
    ( sleep 1.5; rm -f "$lock" ) >/dev/null 2>&1 &
done
exit 0
"""


def test_a_busy_tracking_ref_after_a_successful_push_is_not_an_error(tmp_path):
    """Regression (39db7aa): pygit2's OSError on a busy tracking ref escaped GitStore._track: the daemon died after
    a claim push that had landed, and a landed merge was recorded as a failure (then merged again)."""
    started = time.monotonic()
    cluster = Cluster(tmp_path, hosts=1, workers_per_host=1, transport="path", lease=scaled_lease(3))
    try:
        cluster.configure()
        cluster.add_plan([StepSpec("t1"), StepSpec("t2", ["t1"])])
        hook = cluster.bare / "hooks" / "post-receive"
        hook.write_text(LOCKING_HOOK.replace('clone="$1"', f'clone="{cluster.hosts[0].clone}"'))
        hook.chmod(0o755)
        cluster.start()
        result = scenarios.finish(cluster, "a busy tracking ref after a successful push", 60)
    finally:
        cluster.close()
    publish(result.report, tmp_path, started)
    fired = sorted(p.name for p in (cluster.hosts[0].clone / ".git").glob("lock-fired-*"))
    assert fired == ["lock-fired-claim", "lock-fired-merge"], fired
    assert not result.cluster.unexpected_exits, "the daemon died: " + "; ".join(result.report.notes)
    assert_clean(result.report)
    assert (
        result.report.stats["retries (fail/release)"] == 0 and result.report.stats["stray merges (lost attempts)"] == 0
    )
