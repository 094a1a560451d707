"""An idle fleet: what it costs while nothing is ready, and how fast it takes a new step
(issue 35, point 2).

24 `runner worker` daemons (8 on each of 3 clones of one bare remote reached by path), with
runner.toml's defaults (`[worker] interval = "30s"`, `watch = "2s"`), idle on a queue whose
only step is done. For WINDOW seconds:
- git's CPU for the fleet: every git process the workers start (the ref advertisement of the
  queue branch each watches, the fetch each interval, the idle heartbeats' pushes) with the
  remote's side of each (upload-pack, receive-pack), as a share of one core. A child's CPU
  reaches its parent when it is reaped, so it is read from the workers' reaped-children
  times: client and server together, an upper bound for what the remote pays. Goal < 10%.
- the workers' own CPU (Python waking to ask), reported.
Then, ready to claim: a person adds a step from another clone; the time from `runner add`
returning (the step is on the remote) to the remote's queue branch showing its claim,
median of N trials. Goal <= 2 s.

    python bench/fleet.py [--quick]       (also run by bench/run.py)
"""

from __future__ import annotations

import random
import signal
import subprocess
import time

import psutil
from common import RUNNER, env, error_text, figure, git, log, main_for, new_queue, runner, summary, workspace

WORKERS, CLONES = 24, 3


def cpu(procs: list[psutil.Process]) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of these processes so far."""
    own = children = 0.0
    for proc in procs:
        times = proc.cpu_times()
        own += times.user + times.system
        children += times.children_user + times.children_system
    return own, children


def claimed_after(bare, step: str, since: float, timeout: float = 120.0) -> float:
    """Seconds from `since` until the remote's queue branch records the claim of `step`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        subjects = git(bare, "log", "-3", "--format=%s", "runner/queue").splitlines()
        if any(s.startswith(f"claim {step}") for s in subjects):
            return time.monotonic() - since
        time.sleep(0.02)
    raise RuntimeError(f"no worker claimed {step} within {timeout:.0f} s")


def measure(quick: bool = False, peers: bool = False) -> dict:
    window, trials = (20.0, 3) if quick else (60.0, 7)
    names = ("idle fleet: git CPU, 24 workers on one bare remote", "idle fleet: a new step claimed after")
    with workspace("fleet") as base:
        procs: list[subprocess.Popen] = []
        try:
            log(f"fleet: {WORKERS} idle workers on {CLONES} clones for {window:.0f} s, then {trials} steps added")
            person, bare = new_queue(base, 1, remote=True)
            runner("worker", "--id", "drainer", "--once", "--interval", "0.2", repo=person)
            clones = [base / f"host-{i}" for i in range(CLONES)]
            for clone in clones:
                git(base, "clone", "-q", str(bare), str(clone))
            procs = [
                subprocess.Popen(
                    [RUNNER, "worker", "--id", f"w{i:02d}", "--repo", clones[i % CLONES]],
                    env=env(),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for i in range(WORKERS)
            ]
            watched = [psutil.Process(p.pid) for p in procs]
            time.sleep(10.0)  # each has started, looked once and found nothing
            own_before, git_before = cpu(watched)
            started = time.monotonic()
            time.sleep(window)
            own_after, git_after = cpu(watched)
            elapsed = time.monotonic() - started
            git_share, own_share = (git_after - git_before) / elapsed, (own_after - own_before) / elapsed
            waits = []
            for n in range(trials):
                time.sleep(random.uniform(3.0, 6.0))  # idle again, each at its own point of its watch
                runner("add", f"fleet step {n}", "--id", f"fleet-{n}", "--run", "true", repo=person)
                waits.append(claimed_after(bare, f"fleet-{n}", time.monotonic()))
        except Exception as exc:
            return {"topic": "fleet", "figures": [figure(name, None, "", error=error_text(exc)) for name in names]}
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
    wait = summary(waits)
    return {
        "topic": "fleet",
        "params": {"workers": WORKERS, "clones": CLONES, "window_s": window, "trials": trials},
        "figures": [
            figure(
                names[0],
                git_share,
                "%",
                ("<", 0.10),
                detail=f"git {git_share * 100:.1f}% of one core (client and remote side), the workers' own Python "
                f"{own_share * 100:.1f}%, over {elapsed:.0f} s; defaults: interval 30 s, watch 2 s",
            ),
            figure(
                names[1],
                wait["median"],
                "ms",
                ("<=", 2.0),
                waits,
                detail=f"from `runner add` returning to the remote's queue branch recording the claim, {trials} trials",
            ),
        ],
        "data": {"waits": waits, "git_cpu_share": git_share, "own_cpu_share": own_share},
    }


if __name__ == "__main__":
    main_for(measure)
