"""Draining with the server's pre-receive hook against draining without it (issue 45 point 1).

  plain x1, plain x8     `runner worker --once` processes on fresh clones of a bare remote
  hooked x1, hooked x8   the same on a copy of that remote with `runner install-hooks --server`
  burst x16              16 workers at once on a hooked remote (the machine's cores are fewer):
                         every step must end done exactly once

Side by side in one run, interleaved round by round (bench/drain.py's rules: wall time from
spawning the first worker to the exit of the last, a copy of one freshly imported plan each
time, the queue branch audited after every drain). The hooked remote's hook runs through a
wrapper that logs its exit and its CPU time (sh's `times`) and gives it a cache folder of its
own (a server keeps its ~/.cache; the workers' is fresh per drain). Its CPU per accepted push
is set against git's own receive (after the first push the check runs in a child of the
warm checker, runner/hooks/warm.py, which no wrapper sees: the checker's CPU and its reaped
children's, read with psutil before and after each hooked drain, count as the hook's and the
drain's): `git push` of one claim's update to the plain remote (the
ref moved back first), client and receive-pack together, CPU measured the same way.

Goals: hooked >= 0.5x plain at 1 and at 8 workers; the burst 0 double claims, every step done.

    python bench/run.py --only hook_drain [--quick]
"""

from __future__ import annotations

import itertools
import resource
import shutil
import subprocess
from pathlib import Path

from common import (
    RUNNER,
    column,
    error_text,
    figure,
    filesystem_of,
    git,
    interleave,
    judged_ratio,
    load,
    log,
    main_for,
    new_queue,
    runner,
    summary,
    workspace,
)
from drain import audit, spawn_and_wait

STEPS = 100
BURST = 16

WRAPPER = """#!/bin/sh
# bench/hook_drain.py: runner's hook, its exit and CPU time logged; a server's own cache folder.
XDG_CACHE_HOME={cache}
export XDG_CACHE_HOME
"$0.measured" "$@"
code=$?
times > "$0.$$.times"  # in this shell, not a pipeline's subshell: the children's CPU is the hook's
echo "$code $(tail -n 1 "$0.$$.times")" >> {log}
rm -f "$0.$$.times"
exit $code
"""


def seconds(text: str) -> float:
    """sh's `times` figure (`0m0.123s`) in seconds."""
    minutes, _, rest = text.partition("m")
    return int(minutes) * 60 + float(rest.rstrip("s"))


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def checker_cpu() -> float:
    """CPU seconds of the hook's warm checkers (runner/hooks/warm.py) and the children they
    reaped, which ran the checks: detached from the push, no wrapper or rusage sees them."""
    import psutil

    total = 0.0
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] == "runner-checker" and proc.ppid() == 1:
                times = proc.cpu_times()
                total += times.user + times.system + times.children_user + times.children_system
        except psutil.Error:
            continue
    return total


class HookDrains:
    def __init__(self, base: Path):
        self.base = base
        self.runs = itertools.count()
        log(f"hook_drain: importing {STEPS} no-op steps (one bare remote, copied for every drain)")
        self.clone, self.bare = new_queue(base / "tpl", STEPS, remote=True)
        self.server_cache = base / "server-cache"
        self.server_cache.mkdir()

    def drain(self, workers: int, hooked: bool) -> dict:
        base = self.base / f"run{next(self.runs)}"
        base.mkdir()
        bare = base / "remote.git"
        shutil.copytree(self.bare, bare)
        hook_log = base / "hook.log"
        if hooked:
            runner("install-hooks", "--server", bare)
            hook = bare / "hooks" / "pre-receive"
            hook.rename(hook.with_name("pre-receive.measured"))
            hook.write_text(WRAPPER.format(cache=self.server_cache, log=hook_log))
            hook.chmod(0o755)
        repos = [base / f"w{i}" for i in range(workers)]
        for repo in repos:
            git(base, "clone", "-q", str(bare), str(repo))
        cmds = [
            [RUNNER, "worker", "--id", f"w{i + 1}", "--once", "--interval", "0.2", "--repo", repo]
            for i, repo in enumerate(repos)
        ]
        before, checkers = load(), checker_cpu()
        wall, cpu = spawn_and_wait(cmds, base)
        checks = checker_cpu() - checkers if hooked else 0.0
        cpu += checks
        result = {
            "workers": workers,
            "hooked": hooked,
            "filesystem": filesystem_of(base),
            "seconds": wall,
            "cpu_per_step": cpu / STEPS,
            "load": [before, load()],
            **audit(bare),
        }
        result["steps_per_s"] = result["done"] / wall
        if hooked:
            runs = [line.split() for line in hook_log.read_text().splitlines()]
            cpu_of = [(int(code), seconds(user) + seconds(system)) for code, user, system in runs]
            result["hook"] = {
                "runs": len(cpu_of),
                "accepted": sum(1 for code, _ in cpu_of if code == 0),
                "cpu": sum(c for _, c in cpu_of) + checks,
                "warm": checks,
                "cpu_accepted": sum(c for code, c in cpu_of if code == 0),
            }
        log(
            f"  {'hooked' if hooked else 'plain'} x{workers}: {result['steps_per_s']:.2f} steps/s, "
            f"{result['done']} done, {result['double_claims']} double claims"
            + (f", hook runs {result['hook']['runs']} ({result['hook']['accepted']} accepted)" if hooked else "")
        )
        shutil.rmtree(base, ignore_errors=True)
        return result

    def receive(self, pushes: int = 10) -> float:
        """CPU seconds of `git push` of one claim's update to a plain bare remote (client and
        receive-pack), the ref moved back before each."""
        base = self.base / f"run{next(self.runs)}"
        bare, clone = base / "remote.git", base / "clone"
        shutil.copytree(self.bare, bare)
        git(base, "clone", "-q", str(bare), str(clone))
        ref = "refs/heads/runner/queue"
        old = git(bare, "rev-parse", ref).strip()
        runner("claim", "--id", "w", "--repo", clone)
        new = git(bare, "rev-parse", ref).strip()
        total = 0.0
        for _ in range(pushes):
            git(bare, "update-ref", ref, old)
            start = children_cpu()
            subprocess.run(["git", "push", "-q", str(bare), f"{new}:{ref}"], cwd=clone, check=True, capture_output=True)
            total += children_cpu() - start
        shutil.rmtree(base, ignore_errors=True)
        return total / pushes


def measure(quick: bool = False, peers: bool = False) -> dict:
    rounds = 1 if quick else 3
    names = ("hooked vs plain drain, 1 worker", "hooked vs plain drain, 8 workers")
    with workspace("hook-drain", in_memory=True) as base:
        try:
            drains = HookDrains(base)
            variants = {
                "plain x1": lambda: drains.drain(1, False),
                "hooked x1": lambda: drains.drain(1, True),
                "plain x8": lambda: drains.drain(8, False),
                "hooked x8": lambda: drains.drain(8, True),
                "receive": drains.receive,
            }
            log(f"hook_drain: {rounds} interleaved round(s) of {', '.join(variants)}")
            results = interleave(variants, rounds)
            log(f"hook_drain: a burst of {BURST} workers on the hooked remote")
            burst = drains.drain(BURST, True)
        except Exception as exc:
            err = error_text(exc)
            return {"topic": "hook_drain", "figures": [figure(n, None, "x", (">=", 0.5), error=err) for n in names]}
    return {
        "topic": "hook_drain",
        "params": {"steps": STEPS, "rounds": rounds, "burst": BURST, "interval": 0.2},
        "figures": figures(results, burst),
        "data": {"rounds": results, "burst": burst},
    }


def figures(results: list[dict], burst: dict) -> list[dict]:
    rate = lambda r: r["steps_per_s"]
    rows = []
    for workers in (1, 8):
        hooked, plain = f"hooked x{workers}", f"plain x{workers}"
        value, per_round, how = judged_ratio(results, hooked, plain, ">=", max, rate)
        h, p = (summary([rate(r) for r in column(results, k)])["median"] for k in (hooked, plain))
        cpu_h, cpu_p = (summary([r["cpu_per_step"] for r in column(results, k)])["median"] for k in (hooked, plain))
        rows.append(
            figure(
                f"hooked vs plain drain, {workers} worker{'s' if workers > 1 else ''}, {STEPS} no-op steps",
                value,
                "x",
                (">=", 0.5),
                per_round,
                detail=f"{h:.2f} vs {p:.2f} steps/s; CPU per step {cpu_h * 1000:.0f} vs {cpu_p * 1000:.0f} ms; {how}",
            )
        )
    hooks = [r["hook"] for k in ("hooked x1", "hooked x8") for r in column(results, k)]
    accepted = sum(h["accepted"] for h in hooks)
    per_accepted = sum(h["cpu"] for h in hooks) / max(accepted, 1)
    own = sum(h["cpu_accepted"] for h in hooks) / max(accepted, 1)
    receive = summary(column(results, "receive"))["median"]
    rows.append(
        figure(
            "hook CPU per accepted push vs git's own push (client + receive-pack)",
            per_accepted / receive,
            "x",
            detail=f"hook {per_accepted * 1000:.0f} ms of CPU per accepted push, refusals and the warm checker's "
            f"checks included ({own * 1000:.0f} ms in the accepted hooks' own processes; {accepted} accepted of "
            f"{sum(h['runs'] for h in hooks)} runs); git push of one claim {receive * 1000:.0f} ms",
        )
    )
    bad = burst["double_claims"] + STEPS - burst["done"]
    rows.append(
        figure(
            f"burst of {BURST} hooked workers: double claims + steps not done",
            float(bad),
            "",
            ("<=", 0),
            detail=f"{burst['steps_per_s']:.2f} steps/s, {burst['seconds']:.0f} s; double claims "
            f"{burst['double_claims']}, done {burst['done']} of {STEPS}; other events "
            f"{burst['other_events'] or 'none'}; hook runs {burst['hook']['runs']} "
            f"({burst['hook']['accepted']} accepted); load {burst['load']}",
        )
    )
    return rows


if __name__ == "__main__":
    main_for(measure)
