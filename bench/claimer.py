"""A claiming process for claim_scale.py and floor.py: claims (or, with --tick, ticks) in
one long-lived process, on request.

    <runner's python> bench/claimer.py --repo R --id W [--tick]

Claims once (the cold read of the plan), prints `READY <seconds>`; then for every line
on stdin claims once more and prints its seconds, or `ERROR <text>` when a claim fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import InProcessClaimer, InProcessTicker, error_text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--id", required=True)
    parser.add_argument("--tick", action="store_true", help="a whole tick each time (runner.worker.tick.Worker.tick)")
    args = parser.parse_args()
    try:
        claimer = (InProcessTicker if args.tick else InProcessClaimer)(args.repo, args.id)
        print(f"READY {claimer.claim()}", flush=True)
    except Exception as exc:
        print(f"ERROR {error_text(exc)}", flush=True)
        return
    for _ in sys.stdin:
        try:
            print(claimer.claim(), flush=True)
        except Exception as exc:
            print(f"ERROR {error_text(exc)}", flush=True)


if __name__ == "__main__":
    main()
