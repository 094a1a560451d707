"""`runner ready` at 1,000 steps as a fresh process against Backlog.md's equivalent,
`backlog task list --ready --plain` on the same plan (issue 16 point 4, goal <= 0.2x),
and Taskmaster's `task-master next` beside it (reported, no goal).

The plan: 1,000 no-op steps in chains of 10 (step i depends on i-1), so 100 are ready and
dependencies are really evaluated; the same tasks and dependencies are written for each
peer in its own format. Interleaved round by round:
  runner ready          fresh process, the parse cache warm (what a person typing it sees)
  runner ready cold     a copy of the repository without `.git/runner/` and a fresh cache dir
  backlog, task-master  fresh processes (node), their own defaults
Every tool's output is checked once for the 100 ready ids.
"""

from __future__ import annotations

import itertools
import re

from common import (
    RUNNER,
    cold_copy,
    column,
    env,
    error_text,
    figure,
    interleave,
    judged_ratio,
    log,
    main_for,
    new_queue,
    ratios,
    run,
    summary,
    timed,
    workspace,
)
from peers import harness

STEPS, CHAINS = 1_000, 10


def count_ids(text: str, pattern: str) -> int:
    return len(set(re.findall(pattern, text)))


def measure(quick: bool = False, peers: bool = False) -> dict:
    rounds = 6 if quick else 20
    backlog, backlog_why = harness.find_npm_peer("backlog", peers)
    taskmaster, taskmaster_why = harness.find_npm_peer("taskmaster", peers)
    checks: dict[str, int] = {}
    with workspace("ready") as base:
        repo, _ = new_queue(base, STEPS, chains=CHAINS)
        cache, copies = base / "cache", itertools.count()
        variants = {"runner ready": lambda: timed([RUNNER, "ready", "--repo", repo], env=env(cache))}

        def cold() -> float:
            n = next(copies)
            return timed([RUNNER, "ready", "--repo", cold_copy(repo, base / f"cold{n}")], env=env(base / f"cache{n}"))

        variants["runner ready cold"] = cold
        checks["runner ready"] = count_ids(
            run([RUNNER, "ready", "--repo", repo], env=env(cache)).stdout.decode(), r"\bs\d{5}\b"
        )
        if backlog:
            try:
                project = harness.backlog_project(base / "backlog", backlog, STEPS, CHAINS)
                cmd = [backlog, "task", "list", "--ready", "--plain"]
                checks["backlog"] = count_ids(run(cmd, cwd=project).stdout.decode(), r"TASK-\d+")
                variants["backlog"] = lambda: timed(cmd, cwd=project)
            except Exception as exc:
                backlog, backlog_why = None, error_text(exc)
        if taskmaster:
            try:
                project_tm = harness.taskmaster_project(base / "taskmaster", taskmaster, STEPS, CHAINS)
                tm_cmd = [taskmaster, "next"]
                checks["task-master next"] = count_ids(
                    run(tm_cmd, cwd=project_tm).stdout.decode(), r"Next Task: #\d+|#\d+"
                )
                variants["task-master next"] = lambda: timed(tm_cmd, cwd=project_tm)
            except Exception as exc:
                taskmaster, taskmaster_why = None, error_text(exc)
        log(f"ready: {rounds} interleaved rounds of {', '.join(variants)}")
        try:
            results = interleave(variants, rounds)
        except Exception as exc:
            return {
                "topic": "ready",
                "figures": [
                    figure("`runner ready` at 1,000 steps vs Backlog.md", None, "x", ("<=", 0.2), error=error_text(exc))
                ],
            }
    warm, cold_s = summary(column(results, "runner ready")), summary(column(results, "runner ready cold"))
    own = f"runner ready {warm['median'] * 1000:.0f} ms warm, {cold_s['median'] * 1000:.0f} ms cold"
    name = "`runner ready` at 1,000 steps vs Backlog.md"
    if backlog:
        value, x, how = judged_ratio(results, "runner ready", "backlog", "<=")
        xc = summary(ratios(results, "runner ready cold", "backlog"))["median"]
        bl = summary(column(results, "backlog"))["median"]
        figures = [
            figure(
                name,
                value,
                "x",
                ("<=", 0.2),
                x,
                detail=f"fresh processes: {own} vs `backlog task list --ready --plain` {bl * 1000:.0f} ms; {how}; "
                f"cold {xc:.2f}x; ready ids listed: {checks}",
            )
        ]
    else:
        figures = [figure(name, None, "x", ("<=", 0.2), skipped=f"Backlog.md {backlog_why}", detail=own)]
    tm_name = "`runner ready` at 1,000 steps vs Taskmaster"
    if taskmaster:
        x = ratios(results, "runner ready", "task-master next")
        tm = summary(column(results, "task-master next"))["median"]
        figures.append(
            figure(tm_name, summary(x)["median"], "x", None, x, detail=f"`task-master next` {tm * 1000:.0f} ms")
        )
    else:
        figures.append(figure(tm_name, None, "x", skipped=f"Taskmaster {taskmaster_why}"))
    return {
        "topic": "ready",
        "params": {"steps": STEPS, "chains": CHAINS, "rounds": rounds},
        "figures": figures,
        "data": {"samples": {name: column(results, name) for name in variants}, "ready_ids_listed": checks},
    }


if __name__ == "__main__":
    main_for(measure)
