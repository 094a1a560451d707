"""One worker process for the drain benchmark: the real daemon loop (Worker.run_forever
with --once semantics), plus a few wrappers that timestamp what it publishes.

    python bench/drain_worker.py --repo R --id W [--interval 0.2]

Prints READY once set up, waits for a line on stdin (the start signal, so every
worker starts together), drains, then prints one line `BENCH-RESULT {json}`:
  events       [(unix time, event, step, attempt)] for every commit it published
  claim_races  compare-and-swap races lost inside Queue.claim
  races        races lost in any publish (claim, record)
  maxrss       peak RSS in bytes
  time_by_leaf seconds spent in each wrapped operation (common.PhaseClock), e.g. backoff sleep
Unlike `runner worker --once`, a tick that lost every race (outcome skip, reason
"lost every race") does not end the loop: the benchmark wants the queue drained.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common (which puts the working copy first)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--id", required=True)
    parser.add_argument("--interval", type=float, default=0.2)
    args = parser.parse_args()

    from common import PhaseClock
    from runner.queue.queue import open_queue
    from runner.worker.tick import Worker

    clock = PhaseClock()
    clock.instrument_tick()  # where the worker's time goes: backoff sleeps, pushes, fetches, ...

    queue = open_queue(args.repo)
    worker = Worker(queue, args.id)
    events: list[tuple[float, str, str, int]] = []
    counts = {"claim_races": 0, "lost_every_race": 0, "ticks": 0, "errors": 0}

    publish = queue.publish

    def timestamped_publish(*args, **kwargs):
        published = publish(*args, **kwargs)
        events.append((time.time(), published.change.event, published.change.step_id, published.change.attempt))
        return published

    queue.publish = timestamped_publish

    claim = queue.claim

    def counted_claim(*a, **kw):
        before = queue.races_lost
        try:
            return claim(*a, **kw)
        finally:
            counts["claim_races"] += queue.races_lost - before

    queue.claim = counted_claim

    print("READY", flush=True)
    sys.stdin.readline()
    started = time.time()

    # Worker.run_forever(interval, once=True), minus signal handling, but going on after a lost-every-race tick.
    worker.lock.acquire(timeout=0)
    try:
        worker.beat(worker.queue, None, None, state="idle")
        while True:
            report = worker._tick_with_grace()
            counts["ticks"] += 1
            reason = str(report.get("reason") or "")
            if report.get("outcome") == "error":
                counts["errors"] += 1
                print(f"tick error: {reason}", file=sys.stderr, flush=True)
            if report["sentinel"] == "SKIP":
                outcome = report.get("outcome")
                if reason.startswith("lost every race"):
                    counts["lost_every_race"] += 1
                elif outcome == "error":
                    if counts["errors"] >= 5:
                        break
                elif outcome != "lost":
                    break  # nothing ready for us: drained (what --once does)
                time.sleep(args.interval)
    finally:
        worker.beat(worker.queue, None, None, state="stopped")
        worker.lock.release()
    finished = time.time()
    totals, git_calls = clock.take()
    by_leaf: dict[str, float] = {}
    for (top, path), seconds in totals.items():
        leaf = path.rsplit(" > ", 1)[-1]
        by_leaf[leaf] = by_leaf.get(leaf, 0.0) + seconds
    result = {
        "time_by_leaf": by_leaf,
        "git_calls": {sub: len(v) for sub, v in git_calls.items()},
        "worker": args.id,
        "started": started,
        "finished": finished,
        "events": events,
        "races": queue.races_lost,
        "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        **counts,
    }
    print("BENCH-RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
