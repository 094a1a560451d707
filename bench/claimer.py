"""A claiming process for claim_scale.py: claims in one long-lived process, on request.

    <runner's python> bench/claimer.py --repo R --id W

Claims once (the cold read of the plan), prints `READY <seconds>`; then for every line
on stdin claims once more and prints its seconds, or `ERROR <text>` when a claim fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import InProcessClaimer, error_text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--id", required=True)
    args = parser.parse_args()
    try:
        claimer = InProcessClaimer(args.repo, args.id)
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
