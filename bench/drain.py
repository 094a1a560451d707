"""Draining 200 no-op steps with real `runner worker --once` processes (issue 16 points 3 and 6).

  remote x1, remote x8   a bare remote reached by path, one fresh clone per worker
  local x1               one repository, no remote
  local x1 disk          the same on the disk, reported beside it (common.MEMORY_FS says why)
  procrastinate          the same 200 no-op jobs, one worker (concurrency 1) on PostgreSQL,
                         fastest of 5 (bench/peers; skipped with the reason when absent)

The drains, and procrastinate's PostgreSQL, run on tmpfs when the machine has one, so both
sides write to the same place. Every run starts from a copy of the same freshly imported
plan (no `.git/runner/`, fresh clones), and the variants are interleaved round by round.
Throughput is steps done divided by the wall time from spawning the first worker to the exit
of the last one: process start-up and the last idle poll count, for runner and
procrastinate alike. CPU per step is the user+system time of the workers and every git
process under them. The queue branch is audited after each runner drain: every step claimed
once and completed once.

Goals: 8 workers >= 0.6x of 1 (remote); 1 worker >= 0.05x procrastinate (remote) and
>= 0.2x (local).
"""

from __future__ import annotations

import contextlib
import itertools
import resource
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

from common import (
    MEMORY_FS,
    RUNNER,
    cold_copy,
    column,
    env,
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
    queue_events,
    run,
    summary,
    workspace,
)
from peers import harness

STEPS = 200
TIMEOUT = 1800
PEER_REPEATS = 5


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def spawn_and_wait(cmds: list[list], base: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of processes started together, each logging to
    base/p<i>.log; each must exit 0."""
    cpu0, start = children_cpu(), time.perf_counter()
    logs = [base / f"p{i}.log" for i in range(len(cmds))]
    procs = []
    for cmd, path in zip(cmds, logs):
        with open(path, "wb") as out:
            procs.append(
                subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT, env=env(base / "cache"))
            )
    try:
        for proc, path in zip(procs, logs):
            proc.wait(timeout=max(start + TIMEOUT - time.perf_counter(), 1))
            if proc.returncode:
                raise RuntimeError(
                    f"{Path(cmds[0][0]).name} exited {proc.returncode}: {path.read_text(errors='replace')[-600:]}"
                )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"drain did not finish within {TIMEOUT} s") from None
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return time.perf_counter() - start, children_cpu() - cpu0


def audit(repo: Path) -> dict:
    """From the queue branch: steps done, (step, attempt) pairs claimed more than once,
    events other than claim and complete (fail, release, takeover, ...; not the plan's
    init and import edit)."""
    events = queue_events(repo)
    claims = Counter((e.get("step"), e.get("attempt")) for e in events if e.get("event") in ("claim", "takeover"))
    return {
        "done": len({e.get("step") for e in events if e.get("event") == "complete"}),
        "double_claims": sum(n - 1 for n in claims.values() if n > 1),
        "other_events": dict(
            Counter(e["event"] for e in events if e.get("event") not in ("claim", "complete", "init", "edit", None))
        ),
    }


class Drains:
    def __init__(self, base: Path, disk: Path, procrastinate: tuple[Path, str] | None):
        self.base = base
        self.disk = disk
        self.runs = itertools.count()
        log(f"drain: importing {STEPS} no-op steps (bare remote and local templates)")
        _, self.bare = new_queue(base / "tpl-remote", STEPS, remote=True)
        self.local, _ = new_queue(base / "tpl-local", STEPS)
        self.procrastinate = procrastinate

    def _dir(self, on_disk: bool = False) -> Path:
        path = (self.disk if on_disk else self.base) / f"run{next(self.runs)}"
        path.mkdir()
        return path

    def runner(self, workers: int, remote: bool, on_disk: bool = False) -> dict:
        base = self._dir(on_disk)
        if remote:
            bare = base / "remote.git"
            shutil.copytree(self.bare, bare)
            repos = [base / f"w{i}" for i in range(workers)]
            for repo in repos:
                git(base, "clone", "-q", str(bare), str(repo))
            audited = bare
        else:
            repos = [cold_copy(self.local, base / "repo")]
            audited = repos[0]
        cmds = [
            [RUNNER, "worker", "--id", f"w{i + 1}", "--once", "--interval", "0.2", "--repo", repo]
            for i, repo in enumerate(repos)
        ]
        before = load()
        wall, cpu = spawn_and_wait(cmds, base)
        result = {
            "workers": workers,
            "remote": remote,
            "filesystem": filesystem_of(base),
            "seconds": wall,
            "cpu_per_step": cpu / STEPS,
            "load": [before, load()],
            **audit(audited),
        }
        result["steps_per_s"] = result["done"] / wall
        log(
            f"  runner {'remote' if remote else 'local'} x{workers} ({result['filesystem']}): "
            f"{result['steps_per_s']:.2f} steps/s, {result['done']} done, CPU {cpu / STEPS * 1000:.0f} ms/step"
        )
        shutil.rmtree(base, ignore_errors=True)
        return result

    def peer(self) -> dict:
        """procrastinate's drain, the fastest of PEER_REPEATS: it lasts under a second, so
        one spike of load could halve it and flatter runner. A failure of the peer is its
        row's, not the topic's."""
        py, dsn = self.procrastinate
        script = Path(harness.__file__).parent / "procrastinate_drain.py"
        runs = []
        try:
            for _ in range(PEER_REPEATS):
                base = self._dir()
                run([py, script, "prepare", "--dsn", dsn, "--jobs", str(STEPS)])
                wall, _ = spawn_and_wait([[py, script, "work", "--dsn", dsn]], base)
                runs.append({"seconds": wall, "done": int((base / "p0.log").read_text().split()[-1])})
        except Exception as exc:
            return {"error": error_text(exc)}
        best = max(runs, key=lambda r: r["done"] / r["seconds"])
        log(f"  procrastinate x1: {best['done'] / best['seconds']:.2f} jobs/s (fastest of {PEER_REPEATS})")
        return {**best, "steps_per_s": best["done"] / best["seconds"], "repeats": runs}


def measure(quick: bool = False, peers: bool = False) -> dict:
    rounds = 1 if quick else 3
    py, why = harness.find_procrastinate(peers)
    bindir, pg_why = harness.find_postgres(peers) if py else (None, None)
    why = why or pg_why
    with workspace("drain", in_memory=True) as base, workspace("drain-disk") as disk, contextlib.ExitStack() as stack:
        dsn = None
        if py and bindir:
            try:
                dsn = stack.enter_context(
                    harness.running_postgres(bindir, MEMORY_FS if filesystem_of(base) == "tmpfs" else None)
                )
            except Exception as exc:
                why = f"PostgreSQL did not start: {error_text(exc)}"
        try:
            drains = Drains(base, disk, (py, dsn) if dsn else None)
            variants = {
                "remote x1": lambda: drains.runner(1, True),
                "remote x8": lambda: drains.runner(8, True),
                "local x1": lambda: drains.runner(1, False),
                "local x1 disk": lambda: drains.runner(1, False, on_disk=True),
            }
            if dsn:
                variants["procrastinate"] = drains.peer
            log(f"drain: {rounds} interleaved round(s) of {', '.join(variants)}")
            results = interleave(variants, rounds)
        except Exception as exc:
            err = error_text(exc)
            return {
                "topic": "drain",
                "figures": [
                    figure("8 workers vs 1, 200 no-op steps, bare remote", None, "x", (">=", 0.6), error=err),
                    figure("no-op drain, 1 worker vs procrastinate", None, "x", (">=", 0.05), error=err),
                ],
            }
    return {
        "topic": "drain",
        "params": {"steps": STEPS, "rounds": rounds, "interval": 0.2, "filesystem": filesystem_of(base)},
        "figures": figures(results, why),
        "data": {"rounds": results},
    }


def figures(results: list[dict], peer_why: str | None) -> list[dict]:
    rate = lambda r: r["steps_per_s"]
    one, eight, local = (
        summary([r["steps_per_s"] for r in column(results, k)])["median"]
        for k in ("remote x1", "remote x8", "local x1")
    )
    cpu1, cpu8 = (
        summary([r["cpu_per_step"] for r in column(results, k)])["median"] for k in ("remote x1", "remote x8")
    )
    runs = [r for rnd in results for k, r in rnd.items() if k != "procrastinate"]
    where = f"on {column(results, 'remote x1')[0]['filesystem']}"
    value, x, how = judged_ratio(results, "remote x8", "remote x1", ">=", max, rate)
    rows = [
        figure(
            "8 workers vs 1, 200 no-op steps, bare remote",
            value,
            "x",
            (">=", 0.6),
            x,
            detail=(
                f"{where}: {eight:.2f} vs {one:.2f} steps/s; "
                f"CPU per step {cpu1 * 1000:.0f} -> {cpu8 * 1000:.0f} ms; {how}"
            ),
        )
    ]
    for key, target in (("remote x1", 0.05), ("local x1", 0.2)):
        name = f"no-op drain, 1 worker vs procrastinate, {'bare remote' if key.startswith('remote') else 'local'}"
        own = summary([r["steps_per_s"] for r in column(results, key)])["median"]
        peer_errors = [r["error"] for r in column(results, "procrastinate") if "error" in r]
        if peer_why or not column(results, "procrastinate") or peer_errors:
            rows.append(
                figure(
                    name,
                    None,
                    "x",
                    (">=", target),
                    skipped=f"procrastinate {peer_why or 'failed: ' + peer_errors[0]}",
                    detail=f"runner {own:.2f} steps/s",
                )
            )
            continue
        value, x, how = judged_ratio(results, key, "procrastinate", ">=", max, rate)
        peer = summary([r["steps_per_s"] for r in column(results, "procrastinate")])["median"]
        rows.append(
            figure(
                name,
                value,
                "x",
                (">=", target),
                x,
                detail=f"{where}, both: runner {own:.2f} vs procrastinate on PostgreSQL {peer:.1f} steps/s; {how}",
            )
        )
    disk = summary([r["steps_per_s"] for r in column(results, "local x1 disk")])["median"]
    rows.append(
        figure(
            "no-op drain, 1 worker, local, on disk vs the run above",
            disk / local,
            "x",
            detail=f"{disk:.2f} vs {local:.2f} steps/s; this VM's ext4 has no journal (bench/common.py, MEMORY_FS)",
        )
    )
    bad = sum(r["double_claims"] for r in runs)
    short = sum(STEPS - r["done"] for r in runs)
    other = Counter()
    for r in runs:
        other.update(r["other_events"])
    rows.append(
        figure(
            "drains: double claims + steps not done",
            float(bad + short),
            "",
            ("<=", 0),
            detail=(
                f"queue branch audit of {len(runs)} drains; double claims {bad}, not done {short}; "
                f"other events {dict(other) or 'none'}"
            ),
        )
    )
    return rows


if __name__ == "__main__":
    main_for(measure)
