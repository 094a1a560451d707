"""Claim cost at 10,000 steps against 100 steps, in the layout `runner add`/`import` write
(fan-out folders from 256 steps on) and in subfolders of 100 (plans/steps/g<NNN>/<id>.md);
issue 16 point 2, goal <= 1.3x in both layouts. The flat layout of older runners and
hand-written plans (plans/steps/<id>.md) is reported beside, without a goal: there every
claim rewrites one tree of every step, 370 KB at 10,000.

Six local queues (no remote: the network would hide what plan size costs) of no-op steps,
every step ready, written with git alone so the layout is exactly the one named, on tmpfs
when the machine has one (common.MEMORY_FS says why; the figure names the filesystem). Per queue,
interleaved round by round across all four:
  in-process   one claim in a long-lived process (bench/claimer.py), as a worker daemon
               claims: read the plan, pick, build the commit, publish. The goal's figure.
  CLI          `runner claim --id W` as a fresh process (start-up included, so its ratio
               is diluted; shown beside, not judged).
The first in-process claim of each queue is its cold read of the plan (a repository
runner has never read) and is reported apart.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from common import (
    BENCH,
    RUNNER,
    RUNNER_PY,
    column,
    env,
    error_text,
    figure,
    filesystem_of,
    interleave,
    judged_ratio,
    log,
    main_for,
    new_layout_queue,
    ratios,
    summary,
    timed,
    workspace,
)

SIZES = (100, 10_000)
LAYOUTS = ("import", "sub", "flat")
NAMES = {"import": "the layout add/import write", "sub": "subfolders", "flat": "an old flat plan"}
GOALS = {"import": ("<=", 1.3), "sub": ("<=", 1.3), "flat": None}


class Claimer:
    def __init__(self, repo: Path, worker: str, *extra: str):
        self.proc = subprocess.Popen(
            [RUNNER_PY, BENCH / "claimer.py", "--repo", repo, "--id", worker, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env(),
            cwd=BENCH,
        )
        self.first = self._answer(self.proc.stdout.readline(), "READY ")

    @staticmethod
    def _answer(line: str, prefix: str = "") -> float:
        if not line.startswith(prefix) or line.startswith("ERROR"):
            raise RuntimeError(line.strip().removeprefix("ERROR ") or "claimer exited")
        return float(line[len(prefix) :])

    def claim(self) -> float:
        self.proc.stdin.write("claim\n")
        self.proc.stdin.flush()
        return self._answer(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def measure(quick: bool = False, peers: bool = False) -> dict:
    rounds = 12 if quick else 30
    with workspace("claim-scale", in_memory=True) as base:
        filesystem = filesystem_of(base)
        repos = {}
        for layout in LAYOUTS:
            for size in SIZES:
                log(f"claim_scale: writing {size:,} steps, {layout} layout")
                repos[(layout, size)] = new_layout_queue(base / f"{layout}-{size}", size, layout)
        claimers, errors = {}, {}
        for key, repo in repos.items():
            try:
                claimers[key] = Claimer(repo, "inproc")
            except Exception as exc:
                errors[key] = error_text(exc)
        variants = {}
        for (layout, size), repo in repos.items():
            if (layout, size) in claimers:
                variants[f"{layout} {size} in-process"] = claimers[(layout, size)].claim
            variants[f"{layout} {size} cli"] = lambda repo=repo: timed([RUNNER, "claim", "--id", "cli", "--repo", repo])
        log(f"claim_scale: {rounds} interleaved rounds of {len(variants)} claims")
        try:
            results = interleave(variants, rounds)
        except Exception as exc:
            return {
                "topic": "claim_scale",
                "figures": [figure("claim at 10,000 vs 100 steps", None, "x", error=error_text(exc))],
            }
        finally:
            for c in claimers.values():
                c.close()
    figures = []
    for layout in LAYOUTS:
        small, big = f"{layout} {SIZES[0]}", f"{layout} {SIZES[-1]}"
        name = f"claim at 10,000 vs 100 steps, {NAMES[layout]}"
        cli_x = ratios(results, f"{big} cli", f"{small} cli")
        cli = (
            f"`runner claim` fresh process {summary(cli_x)['median']:.2f}x "
            f"({summary(column(results, f'{big} cli'))['median'] * 1000:.0f} "
            f"vs {summary(column(results, f'{small} cli'))['median'] * 1000:.0f} ms)"
        )
        err = errors.get((layout, SIZES[0])) or errors.get((layout, SIZES[-1]))
        if err:
            figures.append(figure(name, None, "x", GOALS[layout], error=f"{err}; {cli}"))
            continue
        value, x, how = judged_ratio(results, f"{big} in-process", f"{small} in-process", "<=")
        b, s = (
            summary(column(results, f"{big} in-process"))["median"],
            summary(column(results, f"{small} in-process"))["median"],
        )
        figures.append(
            figure(
                name,
                value,
                "x",
                GOALS[layout],
                x,
                detail=(
                    f"on {filesystem}: in a long-lived process {b * 1000:.1f} vs {s * 1000:.1f} ms ({how}); "
                    f"first claim (cold plan read) {claimers[(layout, SIZES[-1])].first * 1000:.0f} "
                    f"vs {claimers[(layout, SIZES[0])].first * 1000:.0f} ms; {cli}"
                ),
            )
        )
    return {
        "topic": "claim_scale",
        "params": {"sizes": SIZES, "layouts": LAYOUTS, "rounds": rounds, "remote": None, "filesystem": filesystem},
        "figures": figures,
        "data": {
            "samples": {name: column(results, name) for name in variants},
            "first_claim": {f"{layout} {size}": c.first for (layout, size), c in claimers.items()},
            "errors": {f"{k[0]} {k[1]}": v for k, v in errors.items()},
        },
    }


if __name__ == "__main__":
    main_for(measure)
