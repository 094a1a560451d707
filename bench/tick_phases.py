"""4. Tick overhead: one tick of a no-op step (claim, worktree, run `true`, gates off,
record, clean up), broken down by phase, in one long-lived process.

The library is timed from outside (common.PhaseClock wraps Worker / Queue / GitStore
methods; each phase's time excludes the wrapped calls inside it, which are listed
under it). Every git subprocess is counted by subcommand. Baselines measured in the
same run: raw `git worktree add` + `git worktree remove` of the same commit, spawning
`true`, and (with a remote) a no-op `git fetch` and a one-file `git push`.
"""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

from common import PhaseClock, clone, fmt_ms, fmt_x, git, goal, log, main_for, make_queue, ratio, stats, table, timed, workspace

PLAN_STEPS = 100


def raw_baselines(repo: Path, rounds: int, remote: bool) -> dict[str, list[float]]:
    """What git itself costs for the unavoidable parts of a tick."""
    import pygit2

    tip = git(repo, "rev-parse", "runner/integration" if not remote else "origin/runner/integration").stdout.decode().strip()
    out: dict[str, list[float]] = {"worktree add+remove": [], "spawn `true`": []}
    if remote:
        out.update({"git fetch (no-op)": [], "git push (1-file commit)": []})
        pyrepo = pygit2.Repository(str(repo))
        parent = None
    for i in range(rounds):
        path = repo.parent / f"raw-wt-{i}"
        add, _ = timed(git, repo, "worktree", "add", "--detach", "--quiet", str(path), tip)
        rm, _ = timed(git, repo, "worktree", "remove", "--force", str(path))
        out["worktree add+remove"].append(add + rm)
        out["spawn `true`"].append(timed(subprocess.run, ["true"], check=True)[0])
        if remote:
            blob = pyrepo.create_blob(f"{i}\n".encode())
            builder = pyrepo.TreeBuilder()
            builder.insert("f", blob, pygit2.GIT_FILEMODE_BLOB)
            sig = pygit2.Signature("Bench", "bench@example.com")
            parent = str(pyrepo.create_commit(None, sig, sig, "floor\n", builder.write(), [parent] if parent else []))
            out["git fetch (no-op)"].append(
                timed(git, repo, "fetch", "--quiet", "--no-write-fetch-head", "--no-tags", "origin", "+refs/heads/runner/queue:refs/remotes/origin/runner/queue")[0]
            )
            out["git push (1-file commit)"].append(timed(git, repo, "push", "--quiet", "--no-verify", "origin", f"{parent}:refs/heads/bench/floor")[0])
    return out


def measure(mode: str, ticks: int) -> dict:
    from runner.queue.queue import open_queue
    from runner.worker.tick import Worker

    with workspace(f"tick-{mode}") as base:
        repo, bare = make_queue(base, PLAN_STEPS, remote=(mode == "remote"))
        if bare:
            repo = clone(str(bare), base / "worker")
        worker = Worker(open_queue(repo), "t1")
        clock = PhaseClock()
        clock.instrument_tick()
        try:
            worker.tick()  # warm-up: first parse of the plan, imports on first use
            clock.take()
            per_tick = []
            for _ in range(ticks):
                elapsed, report = timed(worker.tick)
                if report.get("outcome") != "done":
                    raise RuntimeError(f"tick did not complete a step: {report}")
                totals, calls = clock.take()
                per_tick.append({"total": elapsed, "phases": totals, "git": calls})
        finally:
            clock.restore()
        baselines = raw_baselines(repo, max(5, ticks // 2), remote=bool(bare))
    return {"ticks": per_tick, "baselines": baselines}


def summarise(mode: str, raw: dict) -> tuple[list[list], dict]:
    ticks = raw["ticks"]
    totals = [t["total"] for t in ticks]
    tick_median = statistics.median(totals)
    tops: dict[str, list[float]] = {}
    leaves: dict[tuple[str, str], list[float]] = {}
    for t in ticks:
        per_top: dict[str, float] = {}
        for (top, leaf), value in t["phases"].items():
            per_top[top] = per_top.get(top, 0.0) + value
            leaves.setdefault((top, leaf), []).append(value)
        for top, value in per_top.items():
            tops.setdefault(top, []).append(value)
        tops.setdefault("(unwrapped tick code)", []).append(t["total"] - sum(t["phases"].values()))
    rows = [[mode, "TICK (Worker.tick)", fmt_ms(tick_median), fmt_ms(stats(totals)["p95"]), "100%", ""]]
    ordered = sorted(tops.items(), key=lambda kv: -statistics.median(kv[1]))
    slowest = None
    small = []
    for top, values in ordered:
        med = statistics.median(values)
        if slowest is None and not top.startswith("("):
            slowest = (top, med)
        if med < 0.001:
            small.append((top, med))
            continue
        rows.append([mode, top, fmt_ms(med), fmt_ms(stats(values)["p95"]), f"{100 * med / tick_median:.0f}%", ""])
        subs = sorted(((leaf, v) for (t, leaf), v in leaves.items() if t == top), key=lambda kv: -statistics.median(kv[1]))
        if len(subs) > 1:
            for leaf, v in subs:
                m = statistics.median(v) if len(v) == len(ticks) else sum(v) / len(ticks)
                if m >= max(0.001, 0.01 * tick_median):
                    rows.append([mode, f"    {leaf if leaf != top else '(own code)'}", fmt_ms(m), "", f"{100 * m / tick_median:.0f}%", ""])
    if small:
        total_small = sum(m for _, m in small)
        rows.append([mode, f"({len(small)} phases under 1 ms each)", fmt_ms(total_small), "", f"{100 * total_small / tick_median:.0f}%", ", ".join(t for t, _ in small)])
    git_rows = []
    git_counts: dict[str, list[float]] = {}
    for t in ticks:
        for sub, values in t["git"].items():
            git_counts.setdefault(sub, []).extend(values)
    git_per_tick = sum(len(v) for v in git_counts.values()) / len(ticks)
    git_time_per_tick = sum(sum(v) for v in git_counts.values()) / len(ticks)
    for sub, values in sorted(git_counts.items(), key=lambda kv: -sum(kv[1])):
        git_rows.append([mode, f"git {sub}", f"{len(values) / len(ticks):.1f}", fmt_ms(statistics.median(values)), fmt_ms(sum(values) / len(ticks))])
    git_rows.append([mode, "all git subprocesses", f"{git_per_tick:.1f}", "", fmt_ms(git_time_per_tick)])
    base_rows = []
    floor = 0.0
    for name, values in raw["baselines"].items():
        med = statistics.median(values)
        floor += med
        base_rows.append([mode, f"raw: {name}", fmt_ms(med), fmt_ms(stats(values)["p95"]), "", ""])
    base_rows.append([mode, "raw floor (sum of the above)", fmt_ms(floor), "", "", fmt_x(ratio(tick_median, floor)) + " tick/floor"])
    summary = {
        "tick": stats(totals),
        "slowest_phase": slowest[0] if slowest else None,
        "slowest_phase_median": slowest[1] if slowest else None,
        "git_subprocesses_per_tick": git_per_tick,
        "git_seconds_per_tick": git_time_per_tick,
        "raw_floor": floor,
        "tick_over_floor": ratio(tick_median, floor),
        "phases": {top: stats(v) for top, v in tops.items()},
        "leaves": {f"{top} / {leaf}": stats(v) for (top, leaf), v in leaves.items()},
        "git": {sub: {"per_tick": len(v) / len(ticks), **stats(v)} for sub, v in git_counts.items()},
        "baselines": {name: stats(v) for name, v in raw["baselines"].items()},
    }
    return rows + base_rows, {"git_rows": git_rows, **summary}


def run(quick: bool = False) -> dict:
    ticks = 8 if quick else 25
    data = {}
    rows: list[list] = []
    git_rows: list[list] = []
    goals = []
    for mode in ("local", "remote"):
        log(f"tick phases: {mode}, {ticks} ticks of a no-op step on a {PLAN_STEPS}-step plan")
        raw = measure(mode, ticks)
        mode_rows, summary = summarise(mode, raw)
        rows += mode_rows
        git_rows += summary.pop("git_rows")
        data[mode] = summary
        goals.append(
            goal(
                f"tick overhead visible by phase ({mode})",
                f"slowest: {summary['slowest_phase']} {fmt_ms(summary['slowest_phase_median'])} ms of {fmt_ms(summary['tick']['median'])} ms",
                "report",
                None,
                f"{summary['git_subprocesses_per_tick']:.0f} git subprocesses per tick, {fmt_ms(summary['git_seconds_per_tick'])} ms; "
                f"tick {fmt_x(summary['tick_over_floor'])} the raw git floor",
            )
        )
    return {
        "topic": "tick_phases",
        "params": {"ticks": ticks, "plan_steps": PLAN_STEPS},
        "data": data,
        "tables": [
            table(
                "4. Tick of a no-op step by phase (ms per tick; phases sorted by median; indented = what the phase spent inside)",
                ["mode", "phase", "median ms", "p95 ms", "share", "note"],
                rows,
                "A phase's indented lines are exclusive times of wrapped calls inside it; '(own code)' is the phase's Python outside them. "
                "Inner lines under 1 ms or 1% of the tick are hidden; everything is in the JSON.",
            ),
            table("4b. git subprocesses per tick", ["mode", "command", "calls/tick", "median ms/call", "ms/tick"], git_rows),
        ],
        "goals": goals,
    }


if __name__ == "__main__":
    main_for(run)
