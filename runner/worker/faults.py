"""Fault injection for the reliability suite: crash points (clock skew: runner.core.clock).

Driven by environment variables so that tests can kill a real worker
process at an exact point of the protocol, or run it with a skewed clock:
  RUNNER_CRASH_AT=<point>[,<point>...]   SIGKILL this process when it reaches a point
  RUNNER_CLOCK_OFFSET=<seconds>          this process's clock is off by that much
"""

from __future__ import annotations

import os
import signal

CRASH_POINTS = (
    "after-claim",  # the claim is on the branch, the step has not started
    "after-step",  # the step's command finished, gates not run, nothing recorded
    "before-record",  # the outcome commit is built, not yet published
    "before-merge",  # the step's commit exists, the integration branch has not moved
    "after-merge",  # merged into integration, outcome not yet recorded
)


def crash_point(name: str) -> None:
    wanted = os.environ.get("RUNNER_CRASH_AT")
    if wanted and name in wanted.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
