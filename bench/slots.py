"""Many agents on one host (issue 45, point 2): one daemon with `--slots 4` against four
daemons, side by side.

Each round makes two fresh queues of STEPS no-op steps (gates off) on a bare remote reached by
path, each drained from one clone: once by `runner worker --slots 4 --once`, once by four
`runner worker --once` processes with their own ids, in an order shuffled each round. The
figure is the drain time of the one daemon over that of the four (the ratio measured side by
side in each round; < 1 means the one daemon drains faster), with both rates and the CPU each
took (its processes and their reaped children: git included) beside it. There is no goal: the
slots buy one process, one heartbeat and one lock instead of four, and this says what that
costs or saves in drain time on this machine.

    python bench/slots.py [--quick]       (also run by bench/run.py)
"""

from __future__ import annotations

import resource
import subprocess
import time

from common import (
    RUNNER,
    env,
    error_text,
    figure,
    git,
    interleave,
    judged_ratio,
    log,
    main_for,
    new_queue,
    summary,
    workspace,
)

SLOTS = 4


def drain(base, name: str, steps: int, argvs: list[list[str]]) -> dict:
    """Seconds and CPU seconds to drain a fresh queue with these worker command lines."""
    folder = base / name
    folder.mkdir()
    _person, bare = new_queue(folder, steps, remote=True)
    clone = folder / "host"
    git(folder, "clone", "-q", str(bare), str(clone))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            [RUNNER, "worker", *argv, "--once", "--interval", "0.2", "--repo", str(clone)],
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for argv in argvs
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=900)
        if proc.returncode:
            raise RuntimeError(f"worker exited {proc.returncode}: {err.decode(errors='replace')[-300:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers and the git they ran, all reaped
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    seconds = time.monotonic() - started
    subjects = git(bare, "log", "--format=%s", "runner/queue").splitlines()
    done = sum(1 for s in subjects if s.startswith("complete "))
    claims = sum(1 for s in subjects if s.startswith("claim "))
    if done != steps or claims != steps:
        raise RuntimeError(f"{name}: {done} steps completed and {claims} claims for {steps} steps")
    return {"seconds": seconds, "rate": steps / seconds, "cpu_s": cpu}


def measure(quick: bool = False, peers: bool = False) -> dict:
    steps, rounds = (16, 2) if quick else (48, 3)
    name = f"one daemon --slots {SLOTS} vs {SLOTS} daemons: drain time ratio"
    with workspace("slots") as base:
        try:
            log(f"slots: {rounds} rounds of two drains of {steps} no-op steps (--slots {SLOTS} / {SLOTS} daemons)")
            counter = iter(range(1000))
            results = interleave(
                {
                    "slots": lambda: drain(
                        base, f"slots-{next(counter)}", steps, [["--id", "fleet", "--slots", str(SLOTS)]]
                    ),
                    "daemons": lambda: drain(
                        base, f"daemons-{next(counter)}", steps, [["--id", f"d{k}"] for k in range(SLOTS)]
                    ),
                },
                rounds,
            )
        except Exception as exc:
            return {"topic": "slots", "figures": [figure(name, None, "", error=error_text(exc))]}
    value, per_round, note = judged_ratio(results, "slots", "daemons", "<=", key=lambda r: r["seconds"])
    slots_rate = summary([r["slots"]["rate"] for r in results])["median"]
    daemons_rate = summary([r["daemons"]["rate"] for r in results])["median"]
    slots_cpu = summary([r["slots"]["cpu_s"] for r in results])["median"]
    daemons_cpu = summary([r["daemons"]["cpu_s"] for r in results])["median"]
    return {
        "topic": "slots",
        "params": {"steps": steps, "rounds": rounds, "slots": SLOTS},
        "figures": [
            figure(
                name,
                value,
                "x",
                None,
                per_round,
                detail=f"{note}; {slots_rate:.2f} steps/s with --slots {SLOTS} (CPU {slots_cpu:.1f} s), "
                f"{daemons_rate:.2f} steps/s with {SLOTS} daemons (CPU {daemons_cpu:.1f} s); {steps} no-op "
                "steps on a bare remote, one clone",
            ),
        ],
        "data": {"rounds": results},
    }


if __name__ == "__main__":
    main_for(measure)
