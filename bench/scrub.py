"""What keeping secrets out of git costs a tick (issue 44).

A local queue of steps that each print 24 KiB of test-runner-like output (more than a heartbeat's
16 KiB tail) and fail with last words on stderr. Each round, in a shuffled order, one tick of each
kind in one long-lived process: claim, run, record the failure (its fault note, the handoff's log
tail), then the heartbeat that carries the full output tail, with runner's scrubber on and with it
swapped for one that changes nothing. The judged figure is the scrubber's share of such a tick:
the time spent inside it (every scrub, and the read of the result's files) over the unscrubbed
tick, medians (goal < 5%). Beside it, the difference of the two ticks' medians, which on a busy
machine is mostly noise of the step's own process.

Beside it, reported: the server hook's push protection on that record's push (the queue commit,
its handoff and step file, the heartbeat with its tail), read in-process from the reflogs.

    python bench/scrub.py [--quick]       (also run by bench/run.py)
"""

from __future__ import annotations

import json
import random
import time

from common import (
    InProcessLeakyTicker,
    commit_to_queue,
    error_text,
    figure,
    gates_off,
    interleave,
    log,
    main_for,
    new_project,
    runner,
    summary,
    workspace,
)

STEPS_PER_ROUND = 2  # scrubbed and not


def printer(seed: int) -> str:
    """A step's argv (JSON): 24 KiB of lines on stdout, then an error on stderr, exit 1."""
    rng = random.Random(seed)
    lines = [
        f"tests/test_mod{i}.py::test_case_{i} PASSED [{i % 100:3d}%] {rng.getrandbits(160):040x}" for i in range(300)
    ]
    script = (
        f"import sys; sys.stdout.write({chr(10).join(lines)!r} + chr(10)); "
        "sys.stderr.write('Error: the deploy failed: connection refused' + chr(10)); sys.exit(1)"
    )
    return json.dumps(["python3", "-c", script])


def measure(quick: bool = False, peers: bool = False) -> dict:
    rounds = 10 if quick else 30
    name = "secrets scrubbed: share of a tick that publishes a full output tail and a fault note"
    with workspace("scrub") as base:
        try:
            repo = new_project(base / "repo")
            runner("init", repo=repo)
            steps = {
                f"plans/steps/s{i:04d}.md": (
                    f"---\nstep: s{i:04d}\ntitle: prints\nmax_attempts: 1\nrun: {printer(i)}\n---\n"
                ).encode()
                for i in range(rounds * STEPS_PER_ROUND + 3)
            }
            commit_to_queue(repo, {**gates_off(repo), **steps}, "bench: steps that print and fail")
            log(f"scrub: {len(steps)} steps printing 24 KiB each, {rounds} rounds")
            ticker = InProcessLeakyTicker(repo, "w-scrub")
            ticker.tick(True), ticker.tick(False)  # warm-up: the shapes' cache, the plan's first read
            inside: list[float] = []

            def scrubbed() -> float:
                took = ticker.tick(True)
                inside.append(ticker.scrubbing)
                return took

            results = interleave({"scrubbed": scrubbed, "plain": lambda: ticker.tick(False)}, rounds)
            scan = push_protection_seconds(repo, ticker)
        except Exception as exc:
            return {"topic": "scrub", "figures": [figure(name, None, "%", error=error_text(exc))]}
    on, off = summary([r["scrubbed"] for r in results]), summary([r["plain"] for r in results])
    cost = summary(inside)["median"]
    share = cost / off["median"]
    return {
        "topic": "scrub",
        "params": {"rounds": rounds, "output_bytes": 24 * 1024},
        "figures": [
            figure(
                name,
                share,
                "%",
                ("<", 0.05),
                [took / r["plain"] for took, r in zip(inside, results)],
                detail=f"{cost * 1000:.2f} ms in the scrubber of a {off['median'] * 1000:.1f} ms tick (medians)",
            ),
            figure(
                "the same, as the difference of the two ticks' medians",
                (on["median"] - off["median"]) / off["median"],
                "%",
                None,
                [(r["scrubbed"] - r["plain"]) / r["plain"] for r in results],
                detail=f"a tick {on['median'] * 1000:.1f} ms scrubbed, {off['median'] * 1000:.1f} ms not",
            ),
            figure(
                "push protection: the hook's scan of one such tick's pushes",
                scan,
                "ms",
                detail="claim, heartbeat with the 16 KiB tail, record (step file, handoff, message), in-process",
            ),
        ],
        "data": {"samples": results},
    }


def push_protection_seconds(repo, ticker) -> float:
    """The median time of runner.hooks.protection over the ref updates of one more such tick."""
    from runner.hooks.protection import secrets_in_push

    store = ticker.worker.queue.store
    refs = ("refs/heads/runner/queue", f"refs/runner/heartbeats/{ticker.worker.id}")
    before = {ref: store.ref(ref) for ref in refs}
    ticker.tick(True)
    moves = [(before[ref] or "0" * 40, store.ref(ref) or "0" * 40, ref) for ref in refs]
    samples = []
    for _ in range(20):
        start = time.perf_counter()
        found = secrets_in_push(
            store, moves, "refs/heads/runner/queue", {"refs/heads/runner/integration"}, ["refs/heads/runner/steps/"], ()
        )
        samples.append(time.perf_counter() - start)
    if found:
        raise RuntimeError(f"the scrubbed record was refused: {found}")
    return summary(samples)["median"]


if __name__ == "__main__":
    main_for(measure)
