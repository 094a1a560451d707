"""The clocks runner reads. Tests and the chaos suite skew the wall clock of a real
process with RUNNER_CLOCK_OFFSET=<seconds>; durations use the monotonic clock, which
no clock step can move."""

from __future__ import annotations

import os
import time


def clock_offset() -> float:
    try:
        return float(os.environ.get("RUNNER_CLOCK_OFFSET", "0"))
    except ValueError:
        return 0.0


def wall_clock() -> float:
    return time.time() + clock_offset()


def monotonic() -> float:
    return time.monotonic()
