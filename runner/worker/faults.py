"""Fault injection for the reliability suite: crash points (clock skew: runner.core.clock).

Driven by environment variables so that tests can kill a real worker process at an
exact point of the protocol:
  RUNNER_CRASH_AT=<point>[,<point>...]   SIGKILL this process when it reaches a point
  RUNNER_FAIL_AT=<point>[,<point>...]    raise there, as a bug of runner itself would
"""

from __future__ import annotations

import os
import signal

CRASH_POINTS = (
    "after-claim",  # the claim is on the branch, the step has not started
    "after-step",  # the step's pipeline finished, nothing recorded
    "before-record",  # the outcome (and its merge) is about to be published
    "after-record",  # the outcome and its merge are published
)
# Merge and record are one publish now: the old names stand for the same moments.
ALIASES = {"before-merge": "before-record", "after-merge": "after-record"}


class InjectedFault(RuntimeError):
    """A fault the reliability suite asked for (RUNNER_FAIL_AT)."""


def _wanted(variable: str, name: str) -> bool:
    wanted = os.environ.get(variable, "")
    return bool(wanted) and name in {ALIASES.get(point.strip(), point.strip()) for point in wanted.split(",")}


def crash_point(name: str) -> None:
    if _wanted("RUNNER_CRASH_AT", name):
        os.kill(os.getpid(), signal.SIGKILL)
    if _wanted("RUNNER_FAIL_AT", name):
        raise InjectedFault(f"injected fault at {name}")
