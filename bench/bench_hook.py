"""What the server's pre-receive hook (`runner install-hooks --server`) costs a claim.

Two bare remotes holding the same plan of 1,000 no-op steps, one with the hook installed;
`runner claim --id W` as a fresh process against a clone of each, interleaved round by
round. The hook's cost per claim is the difference of the medians (every push a claim
makes, the heartbeat's included, goes through the hook). Reported, no goal.

    python bench/bench_hook.py [--quick]       (also run by bench/run.py)
"""

from __future__ import annotations

from common import (
    RUNNER,
    column,
    error_text,
    figure,
    interleave,
    log,
    main_for,
    new_queue,
    runner,
    summary,
    timed,
    workspace,
)

STEPS = 1_000


def measure(quick: bool = False, peers: bool = False) -> dict:
    rounds = 10 if quick else 30
    name = "server hook cost per `runner claim`"
    with workspace("hook") as base:
        try:
            log(f"bench_hook: two bare remotes of {STEPS:,} steps, one with the server hook")
            plain, _ = new_queue(base / "plain", STEPS, remote=True)
            hooked, bare = new_queue(base / "hooked", STEPS, remote=True)
            runner("install-hooks", "--server", bare)
            variants = {
                "plain": lambda: timed([RUNNER, "claim", "--id", "w", "--repo", plain]),
                "hooked": lambda: timed([RUNNER, "claim", "--id", "w", "--repo", hooked]),
            }
            for fn in variants.values():  # warm-up: the first read of each plan
                fn()
            results = interleave(variants, rounds)
        except Exception as exc:
            return {"topic": "bench_hook", "figures": [figure(name, None, "ms", error=error_text(exc))]}
    p, h = summary(column(results, "plain")), summary(column(results, "hooked"))
    return {
        "topic": "bench_hook",
        "params": {"steps": STEPS, "rounds": rounds},
        "figures": [
            figure(
                name,
                h["median"] - p["median"],
                "ms",
                None,
                [b - a for a, b in zip(column(results, "plain"), column(results, "hooked"))],
                detail=(
                    f"`runner claim` to a bare remote with `install-hooks --server` {h['median'] * 1000:.0f} ms, "
                    f"without {p['median'] * 1000:.0f} ms"
                ),
            )
        ],
        "data": {"samples": {k: column(results, k) for k in variants}},
    }


if __name__ == "__main__":
    main_for(measure)
