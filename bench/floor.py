"""Commands against git's floor: what git itself does for the same job, on the same bare remote,
interleaved (issue 35, points 1 and 3).

One bare remote holding a plan of 200 no-op steps (every one ready), reached by path, clones of
it, and a local queue of the same plan. Round by round, in a shuffled order:
  git publish   git's own compare-and-swap publish of the queue branch, one process after
                another as a shell runs them: fetch it, edit one line of a file (not a step),
                commit, push (refused unless it is a fast-forward). What any claim must do.
  fresh claim   `runner claim --id W` as a fresh process. Goal <= 2.0x git publish.
  python floor  the interpreter importing the standard library a claim needs (subprocess,
                json, dataclasses, re, ...), nothing of runner's: added to git publish, the
                least any fresh Python claim could cost (reported beside the goal, with where
                the claim's own time goes: its imports by package, from one run with
                `-X importtime`).
  claim         one claim in a long-lived process (bench/claimer.py), as a worker daemon
                claims: fetch, read, pick, build, publish. Goal <= 1.3x git publish.
  git tick      what a tick must do with git alone: that publish (the claim), a worktree of the
                integration branch, a commit there, and one atomic push of the queue branch
                and the integration branch (the record and its merge).
  tick          one `runner tick` in a long-lived process (claim, worktree, the step's `true`,
                record with its merge). Goal <= 1.3x git tick.
  ready         `runner ready` as a fresh process on the unchanged local queue. Goal <= 60 ms.
  ready, clone  `runner ready` on a clone of a second bare remote that nothing moves (it fetches
                first) beside `git fetch` there: what it costs beyond the fetch. Goal <= 60 ms.
                The same on the clone of the remote the claims above move (a plan read after
                every fetch), reported.

    python bench/floor.py [--quick]       (also run by bench/run.py)
"""

from __future__ import annotations

from pathlib import Path

from claim_scale import Claimer
from common import (
    RUNNER,
    RUNNER_PY,
    column,
    error_text,
    figure,
    git,
    interleave,
    judged_ratio,
    log,
    main_for,
    new_queue,
    run,
    runner,
    summary,
    timed,
    workspace,
)

STEPS = 200
# What any claim in Python imports before it does anything: the floor under runner's own imports.
CLAIM_STDLIB = "import subprocess, json, dataclasses, re, pathlib, typing, enum, datetime, tomllib, collections.abc"

GIT_PUBLISH = """set -e
git fetch -q origin runner/queue
git checkout -q -B runner/queue FETCH_HEAD
echo "$RANDOM $RANDOM" > floor.txt
git commit -q -a -m 'edit one line'
git push -q origin runner/queue
"""
GIT_TICK = (
    GIT_PUBLISH
    + """git fetch -q origin runner/integration
rm -rf ../tick-worktree && git worktree prune
git worktree add -q --detach ../tick-worktree FETCH_HEAD
(cd ../tick-worktree && echo "$RANDOM" > out.txt && git add out.txt && git commit -q -m 'the step')
echo "$RANDOM $RANDOM" > floor.txt
git commit -q -a -m 'record it'
git push -q --atomic origin runner/queue "$(git -C ../tick-worktree rev-parse HEAD):refs/heads/runner/integration"
"""
)


def git_clone_on_queue(bare: Path, path: Path) -> Path:
    """A plain clone with the queue branch checked out and one tracked file to edit."""
    git(bare.parent, "clone", "-q", "--branch", "runner/queue", str(bare), str(path))
    (path / "floor.txt").write_text("0\n")
    git(path, "add", "floor.txt")
    git(path, "commit", "-q", "-m", "a file git's own publish edits")
    git(path, "push", "-q", "origin", "runner/queue")
    return path


def measure(quick: bool = False, peers: bool = False) -> dict:
    rounds = 10 if quick else 30
    names = {
        "fresh claim": "fresh `runner claim` vs git's own publish, bare remote",
        "python floor": "least a fresh Python claim could cost vs git's publish",
        "claim": "in-process claim vs git's own publish, bare remote",
        "tick": "in-process tick vs git doing the same, bare remote",
        "ready": "`runner ready`, unchanged local queue, fresh process",
        "ready, clone": "`runner ready` on a clone, beyond its `git fetch`",
        "ready, busy clone": "`runner ready` on a clone of a moving queue, beyond its `git fetch`",
    }
    helpers: list[Claimer] = []
    with workspace("floor") as base:
        try:
            log(f"floor: {STEPS} steps on a bare remote and locally; git beside runner, {rounds} rounds")
            person, bare = new_queue(base / "plan", STEPS, remote=True)
            local, _ = new_queue(base / "local", STEPS)
            idle, _ = new_queue(base / "idle", STEPS, remote=True)
            for repo in (local, idle):
                runner("ready", repo=repo)  # the plan index a later `ready` answers from
            plain = git_clone_on_queue(bare, base / "git")
            clones = {name: base / name for name in ("fresh", "inproc", "ticker")}
            for clone in clones.values():
                git(base, "clone", "-q", str(bare), str(clone))
            claimer, ticker = Claimer(clones["inproc"], "w-in"), Claimer(clones["ticker"], "w-tick", "--tick")
            helpers = [claimer, ticker]
            variants = {
                "git publish": lambda: timed(["bash", "-c", GIT_PUBLISH], cwd=plain),
                "fresh claim": lambda: timed([RUNNER, "claim", "--id", "w-fresh", "--repo", clones["fresh"]]),
                "python floor": lambda: timed([RUNNER_PY, "-c", CLAIM_STDLIB]),
                "claim": claimer.claim,
                "git tick": lambda: timed(["bash", "-c", GIT_TICK], cwd=plain),
                "tick": ticker.claim,
                "ready": lambda: timed([RUNNER, "ready", "--repo", local]),
                "ready, clone": lambda: timed([RUNNER, "ready", "--repo", idle]),
                "git fetch": lambda: timed(["git", "fetch", "-q", "origin"], cwd=idle),
                "ready, busy clone": lambda: timed([RUNNER, "ready", "--repo", person]),
                "git fetch, busy": lambda: timed(["git", "fetch", "-q", "origin"], cwd=person),
            }
            for fn in variants.values():  # warm-up: the first read of each plan, git's first fetch
                fn()
            results = interleave(variants, rounds)
            imports = import_times(
                [RUNNER_PY, "-X", "importtime", "-m", "runner", "claim", "--id", "w-fresh", "--repo", clones["fresh"]]
            )
        except Exception as exc:
            return {
                "topic": "floor",
                "figures": [figure(name, None, "", error=error_text(exc)) for name in names.values()],
            }
        finally:
            for helper in helpers:
                helper.close()
    med = {name: summary(column(results, name))["median"] for name in results[0]}
    figures = []
    floor = [(r["python floor"] + r["git publish"]) / r["git publish"] for r in results]
    why = {
        "fresh claim": (
            "; a fresh Python process that has only imported what a claim needs is already "
            f'{summary(floor)["median"]:.2f}x ("least a fresh Python claim could cost"); '
            "bench/README.md says where the rest goes"
        )
    }
    for key, base, goal in (
        ("fresh claim", "git publish", 2.0),
        ("claim", "git publish", 1.3),
        ("tick", "git tick", 1.3),
    ):
        value, spread, how = judged_ratio(results, key, base, "<=")
        figures.append(
            figure(
                names[key],
                value,
                "x",
                ("<=", goal),
                spread,
                detail=(
                    f"{med[key] * 1000:.0f} vs {med[base] * 1000:.0f} ms "
                    f"(git as separate processes, as a shell runs them); {how}" + why.get(key, "")
                ),
            )
        )
    figures.append(
        figure(
            names["python floor"],
            summary(floor)["median"],
            "x",
            None,
            floor,
            detail=f"`python -c '{CLAIM_STDLIB}'` {med['python floor'] * 1000:.0f} ms, then git publish; "
            f"the fresh claim's imports, one run under -X importtime (which inflates them): {imports}",
        )
    )
    figures.append(
        figure(
            names["ready"],
            med["ready"],
            "ms",
            ("<=", 0.060),
            column(results, "ready"),
            detail="answered from the plan index an earlier `runner ready` kept (runner/commands/quick.py)",
        )
    )
    for key, fetch, goal in (
        ("ready, clone", "git fetch", ("<=", 0.060)),
        ("ready, busy clone", "git fetch, busy", None),
    ):
        beyond = [r[key] - r[fetch] for r in results]
        figures.append(
            figure(
                names[key],
                summary(beyond)["median"],
                "ms",
                goal,
                beyond,
                detail=(
                    f"`runner ready` {med[key] * 1000:.0f} ms (its fetch included), "
                    f"`git fetch` {med[fetch] * 1000:.0f} ms; per-round differences"
                ),
            )
        )
    return {
        "topic": "floor",
        "params": {"steps": STEPS, "rounds": rounds},
        "figures": figures,
        "data": {"samples": {k: column(results, k) for k in variants}},
    }


def import_times(cmd: list) -> str:
    """Where a fresh process's imports go, from one run under `-X importtime`: the total and
    the largest packages by their own time (runner by subpackage)."""
    proc = run(cmd, check=False)
    by_package: dict[str, int] = {}
    for line in proc.stderr.decode(errors="replace").splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            continue
        name = parts[2].strip()
        package = ".".join(name.split(".")[:2]) if name.startswith("runner.") else name.split(".")[0]
        by_package[package] = by_package.get(package, 0) + int(parts[0])
    largest = sorted(by_package.items(), key=lambda item: -item[1])[:6]
    total = sum(by_package.values()) / 1000
    return f"{total:.0f} ms in all; " + ", ".join(f"{name} {us / 1000:.1f}" for name, us in largest)


if __name__ == "__main__":
    main_for(measure)
