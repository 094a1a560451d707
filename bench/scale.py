"""3. Scale with plan size: 100 / 1,000 / 10,000 steps, flat (plans/steps/<id>.md) and
in subfolders of 100 (plans/steps/g<NNN>/<id>.md). Steps form chains of 10 (step i
depends on i-1), so a tenth of them are ready and dependencies are really checked.
The repository is local, as after `runner import` (objects loose, no remote).

Per size and layout:
  claim commit     GitStore.make_commit of one claimed step file on the tip (the git
                   part of a claim: blob, trees on the path, commit; pygit2), 20-40 samples
  claim            Queue.claim in a warm process, local compare-and-swap (read plan,
                   pick, build, publish)
  push size        bytes and objects of `git pack-objects --revs --thin` for that commit
                   against its parent: what a push of one claim sends
  status / ready   `runner status` and `runner ready` (table output, piped) in a fresh process: cold = the first
                   run on the freshly written repository (OS page cache not dropped),
                   warm = repeats; and `ready` inside a warm process (snapshot + Plan.ready)
  git floor        `git ls-tree -r` of plans/steps piped into `git cat-file --batch`: reading
                   every step file with git alone; and `runner --version` start-up

--quick skips 10,000 steps in the flat layout, repeats the CLI runs once and runs
`runner status` at 10,000 steps only cold.

Goals: claim cost at 10,000 steps within 1.5x of 100 steps (subfolder layout);
warm `ready` under 50 ms at 10,000 steps.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from datetime import timedelta
from pathlib import Path

from common import (
    PY, cli_env, fmt_ms, fmt_x, git, goal, log, main_for, make_queue, ratio, run_cli, stats, table, timed, workspace,
)

SIZES = (100, 1_000, 10_000)
LAYOUTS = ("flat", "sub")


def git_read_floor(repo: Path) -> float:
    """Read every step blob with git alone: ls-tree -r | cat-file --batch."""
    start = time.perf_counter()
    listing = git(repo, "ls-tree", "-r", "runner/queue", "plans/steps").stdout
    oids = b"".join(line.split()[2] + b"\n" for line in listing.splitlines())
    out = subprocess.run(["git", "cat-file", "--batch"], cwd=repo, input=oids, capture_output=True, check=True).stdout
    elapsed = time.perf_counter() - start
    assert len(out) > len(oids)
    return elapsed


def pack_size(repo: Path, new: str, old: str) -> tuple[int, int]:
    """(bytes, objects) of the thin pack a push of `new` on top of `old` would send."""
    proc = subprocess.run(
        ["git", "pack-objects", "--revs", "--thin", "--stdout", "-q"], cwd=repo, input=f"{new}\n^{old}\n".encode(), capture_output=True, check=True
    )
    data = proc.stdout
    objects = int.from_bytes(data[8:12], "big") if data[:4] == b"PACK" else 0
    return len(data), objects


def measure(base: Path, size: int, layout: str, repeats: int, claims: int, commit_samples: int) -> dict:
    from runner.queue.leases import holder_info, new_incarnation
    from runner.core.model import utc_now
    from runner.queue.queue import open_queue
    from runner.core.machine import Event

    build, (repo, _) = timed(make_queue, base, size, layout, False, 10)
    res: dict = {"steps": size, "layout": layout, "create_s": build}

    # CLI, cold: the first process to read this repository.
    res["status_cold"] = run_cli(repo, "status")[0]
    res["ready_cold"] = run_cli(repo, "ready")[0]

    # In-process: cold snapshot (parses every file), then warm reads.
    queue = open_queue(repo)
    res["snapshot_cold"] = timed(queue.snapshot)[0]
    snap_warm, ready_warm, floor = [], [], []
    for _ in range(3 if repeats == 1 else 5):
        snap_warm.append(timed(queue.snapshot)[0])
        start = time.perf_counter()
        snap = queue.snapshot()
        ready = snap.plan.ready(utc_now())
        ready_warm.append(time.perf_counter() - start)
        floor.append(git_read_floor(repo))
    res["ready_count"] = len(ready)

    # Claim commits: the git part alone, then the whole claim, then what a push would send.
    worker = "scale-w"
    incarnation = new_incarnation(worker)
    holder = holder_info(incarnation)
    from runner.queue.queue import signer_for

    signer = signer_for(worker)
    commit_s, claim_s, pack_bytes, pack_objects = [], [], [], []
    queue.claim(worker, incarnation, holder)  # warm-up
    snap = queue.snapshot()
    ready = snap.plan.ready(utc_now())
    now = utc_now()
    for i in range(commit_samples):  # distinct content each time, so every blob and tree is really written
        step = ready[i % len(ready)]
        event = Event(kind="claim", incarnation=incarnation, holder=holder, lease="1h")
        change = queue.transition_change(snap, step.id, event, worker, now + timedelta(seconds=i))
        elapsed, commit = timed(queue.store.make_commit, [snap.tip], change.files, change.message, signer)
        commit_s.append(elapsed)
        if i < 5:
            size_b, objects = pack_size(repo, commit, snap.tip)
            pack_bytes.append(size_b)
            pack_objects.append(objects)
    for _ in range(claims):
        claim_s.append(timed(queue.claim, worker, incarnation, holder)[0])

    # CLI, warm: repeats, interleaved. (--quick at 10,000 steps: `status` only cold, it takes ~15 s.)
    status_warm, ready_cli_warm = [], []
    for _ in range(repeats):
        if not (repeats == 1 and size >= 10_000):
            status_warm.append(run_cli(repo, "status")[0])
        ready_cli_warm.append(run_cli(repo, "ready")[0])

    res.update(
        {
            "snapshot_warm": stats(snap_warm),
            "ready_inprocess_warm": stats(ready_warm),
            "git_read_floor": stats(floor),
            "claim_commit": stats(commit_s),
            "claim": stats(claim_s),
            "push_bytes": statistics.median(pack_bytes),
            "push_objects": statistics.median(pack_objects),
            "status_warm": stats(status_warm),
            "ready_cli_warm": stats(ready_cli_warm),
        }
    )
    return res


def run(quick: bool = False) -> dict:
    repeats = 1 if quick else 3
    claims = 6 if quick else 8
    results = []
    startup = []
    for _ in range(3 if quick else 5):
        start = time.perf_counter()
        subprocess.run([PY, "-m", "runner", "--version"], capture_output=True, env=cli_env(), check=True)
        startup.append(time.perf_counter() - start)
    for layout in LAYOUTS:
        for size in SIZES:
            if quick and layout == "flat" and size == SIZES[-1]:
                continue  # --quick: 10,000 flat is the slowest case and no goal is about it
            with workspace(f"scale-{layout}-{size}") as base:
                log(f"scale: {size} steps, {layout} layout")
                results.append(measure(base, size, layout, repeats, claims, 20 if quick else 40))

    def find(size, layout):
        return next(r for r in results if r["steps"] == size and r["layout"] == layout)

    claim_rows, read_rows = [], []
    for r in results:
        small = find(SIZES[0], r["layout"])
        claim_rows.append(
            [
                r["layout"], f"{r['steps']:,}",
                fmt_ms(r["claim_commit"]["median"], 2), fmt_ms(r["claim_commit"]["p95"], 2), fmt_x(ratio(r["claim_commit"]["median"], small["claim_commit"]["median"])),
                fmt_ms(r["claim"]["median"]), fmt_ms(r["claim"]["p95"]), fmt_x(ratio(r["claim"]["median"], small["claim"]["median"])),
                f"{r['push_bytes']:,.0f}", f"{r['push_objects']:.0f}",
            ]
        )
        read_rows.append(
            [
                r["layout"], f"{r['steps']:,}",
                fmt_ms(r["status_cold"], 0), fmt_ms(r["status_warm"]["median"], 0) if r["status_warm"]["n"] else "(skipped)", fmt_ms(r["ready_cold"], 0), fmt_ms(r["ready_cli_warm"]["median"], 0),
                fmt_ms(r["snapshot_cold"]), fmt_ms(r["ready_inprocess_warm"]["median"]), fmt_ms(r["ready_inprocess_warm"]["p95"]),
                fmt_ms(r["git_read_floor"]["median"]), fmt_x(ratio(r["ready_cli_warm"]["median"], r["git_read_floor"]["median"])),
            ]
        )
    sub_small, sub_big = find(SIZES[0], "sub"), find(SIZES[-1], "sub")
    commit_ratio = ratio(sub_big["claim_commit"]["median"], sub_small["claim_commit"]["median"])
    claim_ratio = ratio(sub_big["claim"]["median"], sub_small["claim"]["median"])
    big_ready = [r for r in results if r["steps"] == SIZES[-1]]
    goals = [
        goal(
            "claim commit at 10,000 steps within 1.5x of 100 (subfolders)",
            fmt_x(commit_ratio), "<= 1.50x", commit_ratio is not None and commit_ratio <= 1.5,
            f"make_commit {fmt_ms(sub_big['claim_commit']['median'], 2)} vs {fmt_ms(sub_small['claim_commit']['median'], 2)} ms; "
            f"push {sub_big['push_bytes']:,.0f} vs {sub_small['push_bytes']:,.0f} bytes",
        ),
        goal(
            "whole claim (Queue.claim, local) at 10,000 within 1.5x of 100 (subfolders)",
            fmt_x(claim_ratio), "<= 1.50x", claim_ratio is not None and claim_ratio <= 1.5,
            f"{fmt_ms(sub_big['claim']['median'])} vs {fmt_ms(sub_small['claim']['median'])} ms",
        ),
    ]
    for r in big_ready:
        goals.append(
            goal(
                f"warm `ready` < 50 ms at 10,000 ({r['layout']}), in a warm process",
                f"{fmt_ms(r['ready_inprocess_warm']['median'])} ms", "< 50 ms", r["ready_inprocess_warm"]["median"] < 0.05,
                "Queue.snapshot() + Plan.ready() repeated in one process (blob parse cache warm)",
            )
        )
        goals.append(
            goal(
                f"warm `ready` < 50 ms at 10,000 ({r['layout']}), `runner ready` fresh process",
                f"{fmt_ms(r['ready_cli_warm']['median'], 0)} ms", "< 50 ms", r["ready_cli_warm"]["median"] < 0.05,
                f"start-up alone (`runner --version`) {fmt_ms(statistics.median(startup), 0)} ms; git read floor {fmt_ms(r['git_read_floor']['median'], 0)} ms",
            )
        )
    return {
        "topic": "scale",
        "params": {"sizes": SIZES, "layouts": LAYOUTS, "repeats": repeats, "claims": claims, "group_size": 100, "chains": 10},
        "data": {"runs": results, "startup": stats(startup)},
        "tables": [
            table(
                "3a. Claim cost and push size vs plan size (x = ratio to 100 steps, same layout)",
                ["layout", "steps", "claim commit ms", "p95", "x 100", "Queue.claim ms", "p95", "x 100", "push bytes", "objects"],
                claim_rows,
                "claim commit = GitStore.make_commit only; Queue.claim = read plan + pick + build + local CAS, warm process.",
            ),
            table(
                f"3b. Reading the plan vs plan size (ms; `runner --version` start-up = {fmt_ms(statistics.median(startup), 0)} ms)",
                ["layout", "steps", "status cold", "status warm", "ready cold", "ready warm", "snapshot cold (in-proc)", "ready warm (in-proc)", "p95", "git read floor", "ready warm / git floor"],
                read_rows,
                "cold = first fresh process on a freshly written repository; warm = repeats. in-proc = inside one long-lived process.",
            ),
        ],
        "goals": goals,
    }


if __name__ == "__main__":
    main_for(run)
