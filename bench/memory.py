"""Peak RSS of one `runner worker --once` draining a 1,000-step and a 10,000-step plan of
no-op steps (local, the layout `runner import` writes); issue 16 point 5, goal: the
10,000-step worker's peak <= 1.2x the 1,000-step one's.

The two workers run side by side (memory does not depend on speed, and both then see the
same machine). The peak is the worker process's own high-water mark (VmHWM in
/proc/PID/status, read every 0.5 s until it exits): git's child processes are not in it.
Full: both plans drained to the end (the 10,000 takes ~10-15 min here). --quick: each
worker stops after 1,000 ticks (`--max-ticks`), so the 10,000-step plan is drained only
to a tenth: that compares plan size at equal work, not a whole drain, and says so.
RSS is also sampled at each quarter of the run, to show whether it levels off.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from common import RUNNER, env, error_text, figure, log, main_for, new_queue, queue_events, workspace

SIZES = (1_000, 10_000)
TIMEOUT = 40 * 60


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM in bytes (empty once the process is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {
        line.split(":")[0]: int(line.split()[1]) * 1024
        for line in text.splitlines()
        if line.startswith(("VmRSS", "VmHWM"))
    }


def watch(procs: dict[int, subprocess.Popen]) -> dict[int, dict]:
    """Sample each process until all exit: peak and (seconds, rss) samples."""
    start = time.monotonic()
    seen = {size: {"peak": 0, "samples": []} for size in procs}
    while any(p.poll() is None for p in procs.values()):
        if time.monotonic() - start > TIMEOUT:
            for p in procs.values():
                p.terminate()
        for size, proc in procs.items():
            status = proc_status(proc.pid)
            if status and proc.poll() is None:
                seen[size]["peak"] = max(seen[size]["peak"], status.get("VmHWM", 0))
                seen[size]["samples"].append((time.monotonic() - start, status.get("VmRSS", 0)))
        time.sleep(0.5)
    for size, proc in procs.items():
        seen[size].update(seconds=seen[size]["samples"][-1][0] if seen[size]["samples"] else 0, exit=proc.returncode)
    return seen


def quarters(samples: list[tuple[float, int]]) -> list[float]:
    """RSS in MiB at 25, 50, 75 and 100% of the run."""
    if not samples:
        return []
    end = samples[-1][0]
    return [next(rss for t, rss in samples if t >= end * q) / 2**20 for q in (0.25, 0.5, 0.75, 1.0)]


def start_worker(base: Path, size: int, repo: Path, ticks: list[str]) -> subprocess.Popen:
    """`runner worker --once` on `repo`, its stderr in base/SIZE.err (the worker keeps its own copy
    of the file's descriptor, so ours closes once it has started)."""
    with open(base / f"{size}.err", "wb") as err:
        return subprocess.Popen(
            [RUNNER, "worker", "--id", f"m{size}", "--once", "--interval", "0.2", *ticks, "--repo", repo],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env(base / f"cache{size}"),
        )


def measure(quick: bool = False, peers: bool = False) -> dict:
    name = "worker peak RSS, 10,000 vs 1,000 steps"
    with workspace("memory") as base:
        try:
            repos = {}
            for size in SIZES:
                log(f"memory: importing {size:,} no-op steps")
                repos[size], _ = new_queue(base / str(size), size)
            ticks = ["--max-ticks", "1000"] if quick else []
            log(f"memory: two workers side by side ({'1,000 ticks each' if quick else 'each drains its whole plan'})")
            procs = {size: start_worker(base, size, repo, ticks) for size, repo in repos.items()}
            seen = watch(procs)
            for size in SIZES:
                if seen[size]["exit"]:
                    stderr = (base / f"{size}.err").read_text(errors="replace")
                    raise RuntimeError(f"worker on {size:,} steps exited {seen[size]['exit']}: {stderr[-600:]}")
                seen[size]["done"] = sum(1 for e in queue_events(repos[size]) if e.get("event") == "complete")
        except Exception as exc:
            return {"topic": "memory", "figures": [figure(name, None, "x", ("<=", 1.2), error=error_text(exc))]}
    small, big = seen[SIZES[0]], seen[SIZES[-1]]
    x = big["peak"] / small["peak"]
    q = lambda s: "/".join(f"{v:.0f}" for v in quarters(s["samples"]))
    detail = (
        f"{big['peak'] / 2**20:.1f} vs {small['peak'] / 2**20:.1f} MiB; "
        f"steps drained {big['done']:,} of 10,000 in {big['seconds']:.0f} s "
        f"vs {small['done']:,} of 1,000 in {small['seconds']:.0f} s; RSS at each quarter {q(big)} vs {q(small)} MiB"
    )
    if quick:
        detail = "quick: 1,000 ticks each, not a whole drain of 10,000; " + detail
    return {
        "topic": "memory",
        "params": {"sizes": SIZES, "quick_ticks": 1000 if quick else None},
        "figures": [
            figure(name, x, "x", ("<=", 1.2), detail=detail),
            figure(
                "worker peak RSS, 10,000-step plan", big["peak"], "MiB", None, detail=f"{big['done']:,} steps drained"
            ),
        ],
        "data": {str(size): seen[size] for size in SIZES},
    }


if __name__ == "__main__":
    main_for(measure)
