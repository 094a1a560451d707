"""Start-up of commands people type all day (issue 15 point 4), as fresh processes of the
`runner` console script, interleaved round by round with `python -c pass` on the same
interpreter, bytecode compiled first (as an install leaves it) and checked.

  runner --version, runner --help          goal < 100 ms (--help: from the second run on, printed from the
                                           help the first kept in the cache folder)
  runner status, 100 steps, local plan     goal < 250 ms (warm: a second run, answered from the plan index
                                           the first saved, as `watch runner status` is)
  runner --help cold                       report: a fresh cache folder
  runner status cold                       report: a copy with no `.git/runner/`, fresh cache dir
"""

from __future__ import annotations

import itertools

from common import (
    RUNNER,
    RUNNER_PY,
    cold_copy,
    column,
    compile_bytecode,
    env,
    error_text,
    figure,
    interleave,
    log,
    main_for,
    new_queue,
    ratios,
    summary,
    timed,
    workspace,
)


def measure(quick: bool = False, peers: bool = False) -> dict:
    rounds = 10 if quick else 30
    bytecode = compile_bytecode()
    with workspace("startup") as base:
        repo, _ = new_queue(base, 100)
        cache = base / "cache"
        copies = itertools.count()

        def status_cold() -> float:
            n = next(copies)
            return timed([RUNNER, "status", "--repo", cold_copy(repo, base / f"cold{n}")], env=env(base / f"cache{n}"))

        variants = {
            "python -c pass": lambda: timed([RUNNER_PY, "-c", "pass"]),
            "runner --version": lambda: timed([RUNNER, "--version"]),
            "runner --help": lambda: timed([RUNNER, "--help"], env=env(cache)),
            "runner --help cold": lambda: timed([RUNNER, "--help"], env=env(base / f"cache{next(copies)}")),
            "runner status (100 steps)": lambda: timed([RUNNER, "status", "--repo", repo], env=env(cache)),
            "runner status cold (100 steps)": status_cold,
        }
        try:
            for fn in variants.values():  # warm-up: page cache, .pyc, the status parse cache
                fn()
        except Exception as exc:
            return {
                "topic": "startup",
                "figures": [figure("start-up", None, "ms", error=error_text(exc))],
                "data": {"bytecode": bytecode},
            }
        log(f"startup: {rounds} interleaved rounds of {len(variants)} commands")
        results = interleave(variants, rounds)
    py = column(results, "python -c pass")
    figures = []
    for name, goal_s in (
        ("runner --version", 0.100),
        ("runner --help", 0.100),
        ("runner --help cold", None),
        ("runner status (100 steps)", 0.250),
        ("runner status cold (100 steps)", None),
    ):
        samples = column(results, name)
        med = summary(samples)["median"]
        x = ratios(results, name, "python -c pass")
        figures.append(
            figure(
                f"start-up: `{name}`" + (" warm" if goal_s and name != "runner --version" else ""),
                med,
                "ms",
                ("<", goal_s) if goal_s else None,
                samples,
                detail=(
                    f"{summary(x)['median']:.1f}x `python -c pass` ({summary(py)['median'] * 1000:.0f} ms), "
                    f"per-round {min(x):.1f}-{max(x):.1f}x"
                ),
            )
        )
    return {
        "topic": "startup",
        "params": {"rounds": rounds},
        "figures": figures,
        "data": {"bytecode": bytecode, "samples": {name: column(results, name) for name in variants}},
    }


if __name__ == "__main__":
    main_for(measure)
