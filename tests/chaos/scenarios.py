"""The scenarios: each builds a cluster, runs a plan under its faults, and returns the
checker's report plus what it observed on the way. Sizes come from `Size`: CI runs the
small one, RUNNER_CHAOS_FULL=1 the full one.
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chaos import checker
from chaos.checker import Report, Violation
from chaos.cluster import Cluster, StepSpec, machine_scale, make_plan, scaled_lease
from chaos.netns import Lab

FULL = os.environ.get("RUNNER_CHAOS_FULL", "") not in ("", "0")
SEED = int(os.environ.get("RUNNER_CHAOS_SEED", "0") or 0) or int(time.time()) % 100000


@dataclass
class Size:
    race_steps: int
    race_hosts: int
    race_workers_per_host: int
    kill_steps: int
    random_kills: int
    partition_steps: int
    partitions: int
    cut_step_leases: (
        int  # a step a cut hits lasts this many leases: longer than a takeover by a host busy with a step of its own
    )
    skew_steps: int
    netns_steps: int
    netns_workers_per_host: int
    netns_kills: int
    netns_partitions: int
    drain_timeout: float
    lease_s: float  # kill, partition and skew scenarios, on the reference machine (scaled_lease fits it to this one)


CI = Size(
    race_steps=24,
    race_hosts=4,
    race_workers_per_host=3,
    kill_steps=24,
    random_kills=2,
    partition_steps=9,
    partitions=2,
    cut_step_leases=3,
    skew_steps=6,
    netns_steps=12,
    netns_workers_per_host=2,
    netns_kills=1,
    netns_partitions=1,
    drain_timeout=150,
    lease_s=3.0,
)
FULL_SIZE = Size(
    race_steps=320,
    race_hosts=4,
    race_workers_per_host=4,
    kill_steps=120,
    random_kills=20,
    partition_steps=60,
    partitions=6,
    cut_step_leases=6,
    skew_steps=40,
    netns_steps=300,
    netns_workers_per_host=4,
    netns_kills=12,
    netns_partitions=6,
    drain_timeout=1800,
    lease_s=6.0,
)
SIZE = FULL_SIZE if FULL else CI


@dataclass
class Result:
    report: Report
    cluster: Cluster
    facts: dict[str, Any] = field(default_factory=dict)


def finish(
    cluster: Cluster,
    name: str,
    timeout: float,
    facts: dict[str, Any] | None = None,
    stuck_for: float | None = None,
    **overrides,
) -> Result:
    """Wait for the plan to drain, stop every worker, and run the checker."""
    drained = cluster.wait_drained(timeout, stuck=lambda: abandoned_only(cluster), stuck_for=stuck_for)
    cluster.stop()
    report = checker.check(cluster.inputs(name, **overrides))
    if not drained and not abandoned_only(cluster):
        _, states = cluster.terminal()
        stuck = {s: v for s, v in states.items() if v not in ("done", "failed", "blocked")}
        report.violations.append(
            Violation("terminal", f"the plan did not drain within {timeout:.0f}s: {dict(list(stuck.items())[:8])}")
        )
    for exit_ in cluster.unexpected_exits:
        text = exit_["stderr"]
        last = next(
            (line for line in reversed(text.splitlines()) if line.strip() and not line.startswith(("│", "╰", "╭"))),
            text[-200:],
        )
        report.violations.append(
            Violation(
                "crash",
                f"{exit_['worker']} pid {exit_['pid']} exited {exit_['rc']}: {last.strip()[:300]}\n{text[-2500:]}",
            )
        )
    report.stats["violations"] = len(report.violations)
    machine = machine_scale()
    report.stats["lease scale (git round trip, cores)"] = (
        f"x{machine['scale']:g} ({machine['round_trip_s'] * 1000:.0f} ms, {machine['cores']})"
    )
    report.stats["seed"] = SEED
    return Result(report, cluster, facts or {})


def abandoned_only(cluster: Cluster) -> bool:
    """True when every unfinished step is a claim its (live) holder gave up on after an error
    (checker.KNOWN_BUGS['abandoned-claim']): nothing more will happen, stop waiting."""
    _, states = cluster.terminal()
    unfinished = [s for s, v in states.items() if v not in ("done", "failed", "blocked")]
    if not unfinished:
        return False
    plan = cluster.plan_state()
    errors = checker.read_worker_logs(cluster.worker_logs()).errors_for
    return all(states[s] == "claimed" and (s, plan[s]["attempt"]) in errors for s in unfinished)


def random_killer(
    cluster: Cluster, count: int, every: tuple[float, float], rng: random.Random, stop: threading.Event
) -> threading.Thread:
    """SIGKILL a random live worker at random times, `count` times."""

    def loop() -> None:
        for _ in range(count):
            if stop.wait(rng.uniform(*every)):
                return
            live = [
                s
                for s in cluster.slots
                if s.want and s.proc is not None and s.proc.poll() is None and s.id in unarmed(cluster)
            ]
            if live:
                cluster.kill(rng.choice(live), how="random SIGKILL")

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def crashed(cluster: Cluster) -> set[str]:
    """Workers that died by their own SIGKILL: at their crash point, or by the poison step."""
    with cluster.lock:
        return {e["worker"] for e in cluster.events if e["kind"] == "kill" and "crash point" in e.get("how", "")}


def unarmed(cluster: Cluster) -> set[str]:
    """Workers whose running incarnation has no crash point armed (killing those would spoil it)."""
    with cluster.lock:
        return {s.id for s in cluster.slots if s.starts > len(s.first_envs)}


def running_now(
    cluster: Cluster, workers: set[str], steps: set[str] | None = None, exclude: set = frozenset()
) -> dict | None:
    """An execution by one of `workers` (of one of `steps`, not one of the (step, attempt)s in
    `exclude`) whose claim is still live on the remote: the worker is in the middle of it now."""
    runs = [
        r
        for r in cluster.exec_runs()
        if r["worker"] in workers and (steps is None or r["step"] in steps) and (r["step"], r["attempt"]) not in exclude
    ]
    if not runs:
        return None
    plan = cluster.plan_state()
    for run in reversed(runs):
        info = plan.get(run["step"])
        if (
            info
            and info["status"] == "claimed"
            and info["attempt"] == run["attempt"]
            and info["meta"].get("assignee") == run["worker"]
        ):
            return run
    return None


# --- races -------------------------------------------------------------------------------


def race(base: Path, size: Size = SIZE, seed: int = SEED) -> Result:
    """Many workers, several per clone, on a plan with dependencies; no faults at all: a
    takeover may only be of a holder whose heartbeats were late beyond the lease."""
    # idle workers poll every 0.5 s: a dozen Python processes polling every 0.2 s on two cores starve the busy ones
    cluster = Cluster(
        base,
        hosts=size.race_hosts,
        workers_per_host=size.race_workers_per_host,
        transport="path",
        lease=scaled_lease(20),
        interval=0.5,
    )
    try:
        cluster.configure()
        cluster.add_plan(make_plan(size.race_steps, seed, max_deps=2, window=max(12, size.race_steps // 6)))
        cluster.start()
        return finish(cluster, f"race: {len(cluster.slots)} workers, {size.race_steps} steps", size.drain_timeout)
    finally:
        cluster.close()


# --- kills ---------------------------------------------------------------------------------

CRASH_POINTS = ("after-claim", "after-step", "before-merge", "after-merge", "before-record")
POISON = (
    'printf "%s %s %s %s\\n" "$RUNNER_STEP" "$RUNNER_ATTEMPT" "$RUNNER_WORKER" "$PPID" >> "$1"; kill -9 $PPID; sleep 1'
)


def kills(base: Path, size: Size = SIZE, seed: int = SEED) -> Result:
    """SIGKILL workers at each crash point of the protocol, mid-step, at random times, and by a
    step that kills its own worker; every killed worker restarts with the same id."""
    rng = random.Random(seed)
    cluster = Cluster(
        base, hosts=3, workers_per_host=2, transport="path", lease=scaled_lease(size.lease_s), max_attempts=8
    )
    stop = threading.Event()
    try:
        cluster.configure()
        steps = make_plan(size.kill_steps, seed, max_deps=2, window=8, slow_every=3, slow_s=1.5)
        # its argv kills whoever runs it; nothing depends on it (a plan left blocked is test_chaos's
        # test_daemon_survives_a_plan_blocked_by_a_failed_step)
        poison = StepSpec("poison", [], 0, {"max_attempts": 2}, script=POISON)
        cluster.add_plan(steps + [poison])
        for slot, point in zip(cluster.slots, CRASH_POINTS):
            slot.first_envs = [{"RUNNER_CRASH_AT": point}]
        # Only the armed workers run, and none restarts, until each has reached its crash point: a
        # worker that starts late on a busy machine would otherwise find every step already taken.
        held = [s for s in cluster.slots if not s.first_envs]
        for slot in held:
            slot.want = False
        restart_delay, cluster.restart_delay = cluster.restart_delay, float("inf")
        cluster.start()
        armed = {s.id for s in cluster.slots if s.first_envs}
        cluster.wait_for(
            lambda: armed <= crashed(cluster),
            120 + 4 * size.lease_s * machine_scale()["scale"] * len(armed),  # a bound: each may wait out a lease
            what="every armed worker to reach its crash point",
        )
        with cluster.lock:
            cluster.restart_delay = restart_delay
            for slot in held:
                slot.want = True
        slow = {s.id for s in steps if s.sleep}
        run = cluster.wait_for(
            lambda: running_now(cluster, unarmed(cluster), slow), 90, what="a worker to run a slow step"
        )
        cluster.kill(cluster.slot(run["worker"]), how=f"SIGKILL during step {run['step']} attempt {run['attempt']}")
        killer = random_killer(cluster, size.random_kills, (2.0, 5.0), rng, stop)
        result = finish(
            cluster,
            f"kills: crash points, mid-step, random, poison; {size.kill_steps + 1} steps",
            size.drain_timeout,
            {"mid_step": run},
        )
        stop.set()
        killer.join(timeout=5)
        return result
    finally:
        stop.set()
        cluster.close()


# --- partitions ------------------------------------------------------------------------------


def partition_once(
    cluster: Cluster, slow: set[str], outlive_heal: bool, lease_s: float, used: set, sleeps: dict[str, float]
) -> dict[str, Any]:
    """Cut a host off while one of its workers runs a slow step; keep it cut until another host
    has taken the claim over (longer than a lease); heal before or after the step's end."""
    everyone = {s.id for s in cluster.slots}

    def next_run():  # each cut hits a step of its own
        run = running_now(cluster, everyone, slow - used)
        if run:
            return run
        states = cluster.terminal()[1]
        if all(states.get(step) in ("done", "failed") for step in slow - used):
            return {"none": True}  # every slow step is over: nothing left to cut in the middle of
        return None

    run = cluster.wait_for(
        next_run, 120 + max(sleeps.values(), default=0), what="a worker to run a slow step"
    )  # the previous one ends first
    if run.get("none"):
        return {"skipped": "no slow step left to run"}
    host = cluster.slot(run["worker"]).host
    t0 = time.monotonic()
    cluster.partition(host)
    key = (run["step"], run["attempt"])
    used.add(key[0])

    def taken_over() -> bool:
        info = cluster.plan_state().get(key[0])
        return bool(info) and (info["attempt"] > key[1] or info["status"] in ("done", "failed"))

    step_ends = (run.get("t") or time.time()) + sleeps.get(key[0], 0)
    try:
        # a bound, not a speed: the lease, plus a busy host's own step (as long as this one) before it looks
        cluster.wait_for(
            taken_over,
            60 + 2 * lease_s + sleeps.get(key[0], 0),
            what=f"a takeover of {key[0]} attempt {key[1]} while {host.name} is cut off",
        )
        took = time.monotonic() - t0
        if not outlive_heal:  # the cut-off step ends (and fails to record) while still cut off
            time.sleep(max(0.0, 3 * lease_s - (time.monotonic() - t0), step_ends + 1 - time.time()))
    finally:
        cluster.heal(host)
    return {
        "host": host.name,
        "worker": run["worker"],
        "step": key[0],
        "attempt": key[1],
        "takeover_after_s": round(took, 1),
        "cut_s": round(time.monotonic() - t0, 1),
        "step_still_running_at_heal": time.time() < step_ends,
    }


def partitions(
    base: Path,
    size: Size = SIZE,
    seed: int = SEED,
    transport: str = "daemon",
    lab: Lab | None = None,
    workers_per_host: int = 1,
    steps_n: int | None = None,
    n_partitions: int | None = None,
    kills_n: int = 0,
    name: str = "partitions (loopback git daemon)",
) -> Result:
    """Cut hosts off from the git server for longer than a lease while they hold a claim, then
    restore them: the cut-off worker must record nothing for the claim it lost."""
    rng = random.Random(seed)
    cluster = Cluster(
        base,
        hosts=3,
        workers_per_host=workers_per_host,
        transport=transport,
        lease=scaled_lease(size.lease_s),
        max_attempts=10,
        lab=lab,
    )
    lease_s = cluster.lease_s
    stop = threading.Event()
    try:
        cluster.configure()
        steps = make_plan(steps_n or size.partition_steps, seed, max_deps=1, window=6)
        cuts_wanted = n_partitions if n_partitions is not None else size.partitions
        previous = None
        for spec in steps[: 2 * cuts_wanted : 2]:
            # the steps a cut hits, one at a time: a cut in the middle of one outlasts a lease, and a heal
            # can come before its end even when the host that takes it over first finishes a step of its own
            spec.sleep = size.cut_step_leases * lease_s + 3
            if previous is not None and previous.id not in spec.depends_on:
                spec.depends_on = sorted({*spec.depends_on, previous.id})
            previous = spec
        if FULL:  # and slow steps beside them, so that cuts hit hosts with work in hand
            for spec in steps[2 * cuts_wanted :: 2]:
                spec.sleep = 3 * lease_s + 3
        cluster.add_plan(steps)
        slow = {s.id for s in steps[: 2 * cuts_wanted : 2]}
        cluster.start()
        killer = random_killer(cluster, kills_n, (3.0, 8.0), rng, stop) if kills_n else None
        cuts = []
        used: set = set()
        for n in range(cuts_wanted):
            try:
                cut = partition_once(
                    cluster,
                    slow,
                    outlive_heal=(n % 2 == 0),
                    lease_s=lease_s,
                    used=used,
                    sleeps={s.id: s.sleep for s in steps},
                )
            except TimeoutError as exc:
                cut = {"skipped": str(exc)}
            cuts.append(cut)
            if "skipped" in cut:
                break
        result = finish(
            cluster, f"{name}: {len(cluster.slots)} workers, {len(steps)} steps", size.drain_timeout, {"cuts": cuts}
        )
        stop.set()
        if killer:
            killer.join(timeout=5)
        return result
    finally:
        stop.set()
        cluster.close()


# --- clock skew --------------------------------------------------------------------------------

SKEW_S = 3 * 3600


def clock_skew(base: Path, size: Size = SIZE, seed: int = SEED) -> Result:
    """Two of three hosts run hours off (one ahead, one behind) on a plan of steps longer than
    the lease: no live claim may be taken over. Then the host with the true clock dies in the
    middle of a step: the skewed hosts must take it over, but only after the lease."""
    cluster = Cluster(
        base, hosts=3, workers_per_host=1, transport="path", lease=scaled_lease(size.lease_s), max_attempts=6
    )
    lease_s = cluster.lease_s
    try:
        cluster.configure()
        steps = make_plan(size.skew_steps, seed, max_deps=1, window=4)
        for index, spec in enumerate(steps):
            spec.sleep = lease_s + 2 if index % 2 == 0 else 0.0  # longer than the lease: only heartbeats keep them
        steps[0].sleep = 4 * lease_s + 4  # the honest host's step: watched by the skewed ones, then orphaned
        cluster.add_plan(steps)
        honest, ahead, behind = cluster.slots
        ahead.env["RUNNER_CLOCK_OFFSET"] = str(SKEW_S)
        behind.env["RUNNER_CLOCK_OFFSET"] = str(-SKEW_S)
        ahead.want = behind.want = False  # the true clock starts first and takes the first (slow) step
        cluster.start()
        slow = {s.id for s in steps if s.sleep}
        run = cluster.wait_for(
            lambda: running_now(cluster, {honest.id}, slow), 60, what="the honest host to run a slow step"
        )
        cluster.resume_worker(ahead)
        cluster.resume_worker(behind)
        watch_from = time.time()
        time.sleep(lease_s + 1)  # the skewed hosts watch the honest host's live claim for longer than a lease
        with cluster.lock:
            honest.want = False  # it stays dead: only the skewed hosts can take over
        held = cluster.plan_state()[run["step"]]
        cluster.kill(honest, how=f"SIGKILL during step {run['step']} (stays down)")
        watched = {
            "seconds": round(time.time() - watch_from, 1),
            "still_held": held["status"] == "claimed" and held["attempt"] == run["attempt"],
        }
        return finish(
            cluster,
            f"clock skew: hosts at +{SKEW_S // 3600}h and -{SKEW_S // 3600}h, {len(steps)} steps",
            size.drain_timeout,
            {"killed": run, "watched": watched, "lease_s": lease_s},
        )
    finally:
        cluster.close()


def skewed_backoff(base: Path, seed: int = SEED) -> Result:
    """A host whose clock is hours ahead fails a step once (backoff 2s) and then goes away:
    the other hosts must retry the step after the backoff, not hours later."""
    cluster = Cluster(
        base, hosts=2, workers_per_host=1, transport="path", lease=scaled_lease(3), max_attempts=4, backoff="2s"
    )
    try:
        cluster.configure()
        script = (
            'printf "%s %s %s %s\\n" "$RUNNER_STEP" "$RUNNER_ATTEMPT" "$RUNNER_WORKER" "$PPID" >> "$1"; '
            '[ "$RUNNER_ATTEMPT" != 1 ] || exit 7'
        )
        cluster.add_plan([StepSpec("flaky", script=script)])
        ahead, honest = cluster.slots
        ahead.env["RUNNER_CLOCK_OFFSET"] = str(SKEW_S)
        with cluster.lock:
            honest.want = False
        cluster.start()
        cluster.wait_for(
            lambda: cluster.plan_state()["flaky"]["meta"].get("last_error"),
            60,
            every=0.2,
            what="the first attempt to fail",
        )
        cluster.stop_worker(ahead)
        cluster.wait_for(
            lambda: ahead.proc is None or ahead.proc.poll() is not None, 30, what="the skewed host to stop"
        )
        not_before = cluster.plan_state()["flaky"]["meta"].get("not_before")
        cluster.resume_worker(honest)
        ahead_s = None
        if not_before:
            written = not_before if isinstance(not_before, datetime) else datetime.fromisoformat(str(not_before))
            ahead_s = round(written.replace(tzinfo=written.tzinfo or UTC).timestamp() - time.time())
        return finish(
            cluster,
            "skewed backoff: the failing host is 3h ahead",
            60,
            {"not_before": str(not_before), "ahead_of_true_clock_s": ahead_s},
        )
    finally:
        cluster.close()


# --- several hosts in network namespaces -----------------------------------------------------


def netns_hosts(base: Path, lab: Lab, size: Size = SIZE, seed: int = SEED) -> Result:
    """Three host namespaces and a git server namespace: races, kills and veth partitions."""
    return partitions(
        base,
        size,
        seed,
        transport="netns",
        lab=lab,
        workers_per_host=size.netns_workers_per_host,
        steps_n=size.netns_steps,
        n_partitions=size.netns_partitions,
        kills_n=size.netns_kills,
        name="network namespaces (3 hosts + git server)",
    )
