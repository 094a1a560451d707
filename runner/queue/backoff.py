"""How long to wait: after a lost compare-and-swap (full jitter, a fraction of a second), and
before a failed step may run again (exponential from [leases] backoff, with jitter)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from runner.core.config import Config
from runner.core.model import utc_now


def race_backoff(attempt: int, remote: bool) -> float:
    """Full-jitter exponential backoff for a lost compare-and-swap."""
    base = 0.05 if remote else 0.005
    return random.uniform(0, min(1.0, base * (2**attempt)))


def retry_delay(config: Config, failures: int) -> float:
    """Delay before a failed step may run again: exponential from [leases] backoff, +-20 % jitter."""
    delay = min(config.leases.backoff_cap, config.leases.backoff * (2 ** max(failures - 1, 0)))
    return delay * random.uniform(0.8, 1.2)


def retry_at(config: Config, failures: int) -> datetime:
    """When a failed step may run again, rounded up to the second `not_before` is written to:
    truncated, a 2 s backoff could come out as 1 s or none."""
    moment = utc_now() + timedelta(seconds=retry_delay(config, failures))
    return moment + timedelta(microseconds=1_000_000 - moment.microsecond) if moment.microsecond else moment
