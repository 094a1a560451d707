"""The clocks runner reads, with the seams tests and the chaos suite use on real processes:
RUNNER_CLOCK_OFFSET=<seconds> skews the wall clock (a host whose clock is wrong, or jumps);
RUNNER_MONOTONIC_OFFSET=<seconds> moves the monotonic clock on (time passing, without
sleeping). Durations and lease expiry use the monotonic clock, which no wall-clock step
can move."""

from __future__ import annotations

import os
import time


def _offset(name: str) -> float:
    try:
        return float(os.environ.get(name, "0"))
    except ValueError:
        return 0.0


def wall_clock() -> float:
    return time.time() + _offset("RUNNER_CLOCK_OFFSET")


def monotonic() -> float:
    return time.monotonic() + _offset("RUNNER_MONOTONIC_OFFSET")
