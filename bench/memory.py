"""5. Memory: peak RSS of one `runner worker` (the real CLI daemon, --once) draining a
plan of no-op steps (local repository, subfolder layout, gates off).

A worker takes ~0.1-1 s per tick depending on plan size (see tick_phases and scale), so
draining all 10,000 steps with one worker takes far longer than this benchmark's budget.
The worker therefore runs for a fixed time on the full-size plan; RSS is sampled every
0.5 s against the number of steps done (from the worker's log), and reported as:
  peak RSS        measured (wait4 ru_maxrss) over the steps it did drain
  growth          least-squares slope of RSS vs steps done, MiB per 1,000 steps
  at full drain   peak + slope x steps left: an extrapolation, labelled as such
Baseline in the same run: RSS of a process that only imports runner's CLI and worker.
Then the same drain goes on inside this process (see `attribute`) to say where growth
lives: the Python heap (tracemalloc: e.g. Queue's parsed-step cache), libgit2's object
cache (GIT_OPT_GET_CACHED_MEMORY), or the rest (native allocations, fragmentation).

Full: a 10,000-step plan for 150 s. --quick: a 2,000-step plan for 20 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from common import PY, cli_env, goal, log, main_for, make_queue, run_python, table, workspace

MiB = 1024 * 1024


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope dy/dx."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if not sxx:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def drain_for(repo: Path, budget: float) -> dict:
    import psutil

    log_path = repo / ".git" / "runner" / "logs" / "worker-m1.log"
    err = open(repo.parent / "worker.err", "w")
    start = time.monotonic()
    proc = subprocess.Popen(
        [PY, "-m", "runner", "worker", "--id", "m1", "--once", "--interval", "0.2", "--repo", str(repo)],
        stdout=subprocess.DEVNULL, stderr=err, env=cli_env(),
    )
    ps = psutil.Process(proc.pid)
    samples: list[tuple[float, int, int]] = []  # (seconds, steps done, rss)
    done = 0
    offset = 0
    stopped = False
    status = None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        try:
            rss = ps.memory_info().rss
        except psutil.NoSuchProcess:
            rss = None
        if log_path.exists():
            with open(log_path, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            cut = chunk.rfind(b"\n") + 1
            done += chunk[:cut].count(b"-> done")
            offset += cut
        if rss:
            samples.append((time.monotonic() - start, done, rss))
        if not stopped and time.monotonic() - start > budget:
            proc.send_signal(signal.SIGTERM)  # finish the running step, claim nothing more, exit 0
            stopped = True
        time.sleep(0.5)
    elapsed = time.monotonic() - start
    worker_log = log_path.read_bytes().decode(errors="replace") if log_path.exists() else ""
    done = worker_log.count("-> done")
    proc.returncode = os.waitstatus_to_exitcode(status)
    err.close()
    return {
        "seconds": elapsed, "done": done, "maxrss": usage.ru_maxrss * 1024, "samples": samples, "exit": proc.returncode,
        "stopped_by_budget": stopped, "log_tail": worker_log.splitlines()[-5:],
        "stderr_tail": (repo.parent / "worker.err").read_text(errors="replace")[-1000:],
    }


def attribute(repo: Path, ticks: int) -> dict:
    """Where the growth lives: the same drain in this process, in two passes of `ticks`
    steps. Pass 1 reads RSS and libgit2's object cache (GIT_OPT_GET_CACHED_MEMORY); pass 2
    traces the Python heap (tracemalloc, which inflates RSS, hence the separate pass).
    Each growth is taken between the middle and the end of its pass, after gc, so a
    structure that is merely replaced each tick (the current plan) does not count."""
    import gc
    import tracemalloc

    import psutil
    import pygit2

    from runner.queue.queue import open_queue
    from runner.worker.tick import Worker

    queue = open_queue(repo)  # the same plan, less what the CLI worker drained
    worker = Worker(queue, "m2")
    me = psutil.Process()
    half = max(ticks // 2, 1)

    def run_half():
        for _ in range(half):
            worker.tick()
        gc.collect()

    run_half()  # warm-up: the first read of the whole plan is not growth
    rss0, cache0, entries0 = me.memory_info().rss, pygit2.option(pygit2.GIT_OPT_GET_CACHED_MEMORY)[0], len(queue._steps)
    run_half()
    rss1, cache1, entries1 = me.memory_info().rss, pygit2.option(pygit2.GIT_OPT_GET_CACHED_MEMORY)[0], len(queue._steps)
    tracemalloc.start()
    run_half()
    heap0 = tracemalloc.get_traced_memory()[0]
    run_half()
    heap1 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    per = 1000 / half / MiB
    rss = (rss1 - rss0) * per
    heap = (heap1 - heap0) * per
    cache = (cache1 - cache0) * per
    return {
        "ticks": 4 * half,
        "steps_per_pass_half": half,
        "rss_mib_per_1000": rss,
        "python_heap_mib_per_1000": heap,
        "libgit2_cache_mib_per_1000": cache,
        "rest_mib_per_1000": rss - heap - cache,
        "libgit2_cache_mib": cache1 / MiB,
        "parsed_step_cache_entries": entries1,
        "parsed_step_cache_entries_per_step": (entries1 - entries0) / half,
    }


def run(quick: bool = False) -> dict:
    steps = 2_000 if quick else 10_000
    budget = 20.0 if quick else 150.0
    _, import_rss = run_python("import runner.cli, runner.worker.tick, runner.queue.queue, pygit2, psutil, yaml")
    _, bare_rss = run_python("pass")
    with workspace("memory") as base:
        log(f"memory: one `runner worker --once` on a {steps:,}-step plan for up to {budget:.0f} s")
        repo, _ = make_queue(base, steps, layout="sub")
        res = drain_for(repo, budget)
        ticks = 40 if quick else 120
        log(f"memory: attributing growth in-process over {ticks} ticks")
        parts = attribute(repo, ticks)
    points = [(d, rss / MiB) for _, d, rss in res["samples"] if d >= 1]
    growth = slope(points)
    first = points[0][1] if points else None
    left = steps - res["done"]
    extrapolated = res["maxrss"] / MiB + (growth or 0) * left if growth is not None else None
    per_1000 = growth * 1000 if growth is not None else None
    rows = [
        ["python -c pass (baseline)", "", "", f"{bare_rss / MiB:.1f}", "", ""],
        ["import runner cli+worker (baseline)", "", "", f"{import_rss / MiB:.1f}", "", ""],
        [
            f"runner worker, {steps:,}-step plan",
            f"{res['done']:,} in {res['seconds']:.0f} s",
            f"{first:.1f}" if first else "-",
            f"{res['maxrss'] / MiB:.1f}",
            f"{per_1000:+.1f}" if per_1000 is not None else "-",
            f"{extrapolated:.0f} (extrapolated)" if res["done"] < steps and extrapolated else f"{res['maxrss'] / MiB:.1f} (measured)",
        ],
        [f"  same drain in-process ({parts['steps_per_pass_half']} steps measured): RSS", "", "", "", f"{parts['rss_mib_per_1000']:+.1f}", ""],
        ["    of which Python heap (tracemalloc)", "", "", "", f"{parts['python_heap_mib_per_1000']:+.1f}",
         f"parsed-step cache: {parts['parsed_step_cache_entries']:,} entries, +{parts['parsed_step_cache_entries_per_step']:.1f} per step"],
        ["    of which libgit2 object cache", "", "", "", f"{parts['libgit2_cache_mib_per_1000']:+.1f}", f"cache now {parts['libgit2_cache_mib']:.1f} MiB (default cap 256)"],
        ["    the rest (native allocations, fragmentation)", "", "", "", f"{parts['rest_mib_per_1000']:+.1f}", ""],
    ]
    drained_all = res["done"] >= steps
    return {
        "topic": "memory",
        "params": {"steps": steps, "budget_s": budget, "quick": quick},
        "data": {**res, "import_rss": import_rss, "bare_rss": bare_rss, "mib_per_1000_steps": per_1000, "extrapolated_peak_mib": extrapolated, "attribution": parts},
        "tables": [
            table(
                f"5. Memory of one worker draining no-op steps ({'--quick: 2,000-step plan, 20 s' if quick else '10,000-step plan, 150 s'})",
                ["process", "steps drained", "RSS after 1st step MiB", "peak RSS MiB", "growth MiB / 1,000 steps", f"peak at {steps:,} drained MiB"],
                rows,
                "" if drained_all else f"The worker drained {res['done']:,} of {steps:,} steps in the time budget; the last column extrapolates the measured growth.",
            )
        ],
        "goals": [
            goal(
                f"peak RSS of a worker draining {steps:,} steps" + (" (quick: fewer steps)" if quick else ""),
                f"{res['maxrss'] / MiB:.0f} MiB after {res['done']:,} steps" + ("" if drained_all or extrapolated is None else f"; ~{extrapolated:.0f} MiB at {steps:,} (extrapolated)"),
                "report",
                None,
                f"{res['maxrss'] / import_rss:.1f}x the import-only process ({import_rss / MiB:.0f} MiB); growth {per_1000:+.1f} MiB per 1,000 steps" if per_1000 is not None else "",
            )
        ],
    }


if __name__ == "__main__":
    main_for(run)
