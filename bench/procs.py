"""Processes started per tick (issue 16 point 1, goal <= 4), git's own helpers included.

How: `strace -f -e trace=execve` follows a `runner worker --once` through every fork, so
each program run under it is counted: git and what git starts by itself (upload-pack,
receive-pack, index-pack, pack-objects, `gc --auto`, `maintenance run --auto`, hooks,
shells), and the step's command. The worker drains N no-op steps, then runs once more on
the drained queue; per tick = (execs of the drain - execs of the idle run) / N, so the
worker's own start-up and its last idle poll cancel out. strace slows the processes down;
counts do not change with speed.

Reported for a bare remote reached by path (a fresh clone) and for a local repository.
The goal's figure is what runner itself starts per tick (issue 16 counted "11 processes per
tick, 53 counting git's own helpers"): its git calls, told by the options every one of them
starts with (`git -c gc.auto=0 ...`, runner/store/gitcli.py). The detail gives the count with
git's own helpers on both sides of the transport, and with the step's own command (`true`,
the user's work, the same for any queue).
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

from common import (
    RUNNER,
    cold_copy,
    env,
    error_text,
    figure,
    git,
    log,
    main_for,
    new_queue,
    queue_events,
    run,
    workspace,
)
from peers import harness

STEPS = 30
EXEC = re.compile(r'^(\d+)\s+execve\("([^"]*)", \[(.*?)\]')


RUNNERS_GIT = ["-c", "gc.auto=0"]  # how every git call of runner's begins


def program(path: str, argv: str) -> str:
    """A readable name: `git fetch`, `git-upload-pack`, `sh`, `true`, ...; runner's own git
    calls are named `runner: git <command>`."""
    args = re.findall(r'"((?:[^"\\]|\\.)*)"', argv)
    name = Path(path).name
    if name == "git" and args[1:3] == RUNNERS_GIT:
        return "runner: " + program(path, argv.replace('"-c", "gc.auto=0", ', "", 1))
    if name == "git":
        rest = iter(args[1:])
        for arg in rest:
            if arg in ("-C", "-c"):
                next(rest, None)
            elif not arg.startswith("-"):
                return f"git {arg}"
        return "git"
    return name


def count_execs(trace: Path) -> Counter:
    """Successful execve calls in an strace -f log, by program (resumed calls included)."""
    counts, pending = Counter(), {}
    for line in trace.read_text(errors="replace").splitlines():
        if m := EXEC.match(line):
            pid, name = m.group(1), program(m.group(2), m.group(3))
            if "<unfinished" in line:
                pending[pid] = name
            elif line.rstrip().endswith("= 0"):
                counts[name] += 1
        elif "<... execve resumed>" in line and line.rstrip().endswith("= 0"):
            counts[pending.pop(line.split()[0], "?")] += 1
    return counts


def traced_worker(repo: Path, trace: Path, cache: Path) -> Counter:
    run(
        [
            shutil.which("strace"),
            "-f",
            "-qq",
            "-e",
            "trace=execve",
            "-e",
            "signal=none",
            "-o",
            trace,
            RUNNER,
            "worker",
            "--id",
            "p1",
            "--once",
            "--interval",
            "0.2",
            "--repo",
            repo,
        ],
        env=env(cache),
    )
    return count_execs(trace)


def per_tick(repo: Path, audited: Path) -> Counter:
    """Execs of STEPS ticks by program: a traced drain less a traced idle run."""
    drain = traced_worker(repo, repo.parent / "drain.trace", repo.parent / "cache")
    done = sum(1 for e in queue_events(audited) if e.get("event") == "complete")
    if done != STEPS:
        raise RuntimeError(f"the traced worker completed {done} of {STEPS} steps")
    idle = traced_worker(repo, repo.parent / "idle.trace", repo.parent / "cache")
    diff = Counter(drain)
    diff.subtract(idle)
    return +diff


def measure(quick: bool = False, peers: bool = False) -> dict:
    figures = []
    data = {}
    strace, why = harness.find_strace(peers)
    if not strace:
        return {
            "topic": "procs",
            "figures": [
                figure(f"processes per tick, {m}", None, "", ("<=", 4), error=why) for m in ("bare remote", "local")
            ],
        }
    with workspace("procs") as base:
        for mode in ("bare remote", "local"):
            name = f"processes per tick, {mode}"
            try:
                log(f"procs: {mode}, {STEPS} no-op steps under strace -f")
                repo, bare = new_queue(base / mode.replace(" ", "-"), STEPS, remote=(mode != "local"))
                if bare:  # a fresh clone: nothing of runner's from the import
                    shutil.rmtree(repo)
                    git(base, "clone", "-q", str(bare), str(repo))
                else:
                    repo = cold_copy(repo, repo.parent / "cold")
                counts = per_tick(repo, bare or repo)
            except Exception as exc:
                figures.append(figure(name, None, "", ("<=", 4), error=error_text(exc)))
                continue
            ticks = STEPS
            total = sum(counts.values()) / ticks
            step_own = counts.get("true", 0) / ticks
            own = sum(n for p, n in counts.items() if p.startswith("runner: ")) / ticks
            top = ", ".join(f"{p} {n / ticks:.1f}" for p, n in counts.most_common(14))
            figures.append(
                figure(
                    name,
                    own,
                    "",
                    ("<=", 4),
                    detail=(
                        f"started by runner; {total - step_own:.1f} with git's own helpers "
                        f"(both sides of the transport), {total:.1f} with the step's `true` too; "
                        f"{STEPS} ticks under strace -f; by program: {top}"
                    ),
                )
            )
            data[mode] = {"per_tick_by_program": {p: n / ticks for p, n in counts.items()}, "ticks": ticks}
    return {
        "topic": "procs",
        "params": {"steps": STEPS, "how": "strace -f -e trace=execve, drain minus idle run"},
        "figures": figures,
        "data": data,
    }


if __name__ == "__main__":
    main_for(measure)
