"""Liveness of claims: holders, incarnations, heartbeats, and leases judged by this host.

A lease is never judged by comparing another machine's timestamps with ours, nor by a
wall-clock difference that a clock step could fake. This host remembers, on its
monotonic clock, when it first saw each claim's current liveness evidence (the holder's
heartbeat commit naming the step, or the claim itself) and calls the lease expired when
that evidence has not changed for longer than the lease. A holder that ran on this host
is dead at once when its pid is gone or belongs to another process (pid + start time).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.core.clock import monotonic, wall_clock
from runner.core.codec import beat_names
from runner.core.model import Step, parse_duration


def host_name() -> str:
    """This host's name in claims. RUNNER_HOST overrides it where hostnames are not unique
    (containers cloned from one image); a holder is judged by pid only on its own host."""
    return os.environ.get("RUNNER_HOST") or _system_host_name()


def _system_host_name() -> str:
    if hasattr(os, "uname"):
        return os.uname().nodename  # what socket.gethostname() reads, without importing socket and ssl's kin
    import socket

    return socket.gethostname()


def author_for(actor: str):
    """The git author of an actor's commits: its name, at this host."""
    from runner.store import Author

    return Author(name=actor, email=f"{actor}@{host_name()}".replace(" ", "-"))


def boot_id() -> str:
    """What changes when this host restarts (monotonic readings do not survive a restart)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        import psutil

        return str(int(psutil.boot_time()))


def process_start_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def new_incarnation(worker: str) -> str:
    return f"{worker}.{os.urandom(4).hex()}"


def holder_info(with_pid: bool = True) -> dict[str, Any]:
    if not with_pid:
        return {"host": host_name()}
    started = process_start_time(os.getpid()) or time.time()
    return {"host": host_name(), "pid": os.getpid(), "started": round(started, 2)}


@dataclass(frozen=True)
class Beat:
    """A worker's last heartbeat: the commit its ref points at and the facts it carries."""

    worker: str
    commit: str
    info: dict[str, Any]


def local_holder_gone(holder: dict[str, Any]) -> str | None:
    """Why a holder on this host is certainly dead, or None (alive, or not ours to judge)."""
    if holder.get("host") != host_name() or not isinstance(holder.get("pid"), int):
        return None
    pid = holder["pid"]
    started = process_start_time(pid)
    if started is None:
        return f"holder pid {pid} on {holder['host']} is gone"
    recorded = holder.get("started")
    if isinstance(recorded, (int, float)) and abs(started - recorded) > 1.0:
        return f"holder pid {pid} on {holder['host']} was reused by another process"
    return None


def lease_of(step: Step, default: float) -> float:
    try:
        return parse_duration(step.get("lease")) if step.get("lease") else default
    except ValueError:
        return default


class LeaseObserver:
    """This host's memory of when it first saw each claim's liveness evidence (kept in a
    file: every tick of every worker on this host shares it)."""

    def __init__(self, state_dir: Path, clock: Callable[[], float] = monotonic):
        self.path = state_dir / "observed.json"
        self.clock = clock

    def expired_claims(self, claimed: list[Step], beats: dict[str, Beat], default_lease: float) -> dict[str, str]:
        """step id -> reason, for claims whose holder is gone or whose lease ran out."""
        if not claimed:
            return {}
        now = self.clock()
        seen = self._load()
        keep: dict[str, Any] = {}
        gone: dict[str, str] = {}
        for step in claimed:
            key = f"{step.id}#{step.attempt}"
            evidence = _evidence(step, beats)
            entry = seen.get(key)
            if (
                not isinstance(entry, dict)
                or entry.get("evidence") != evidence
                or not isinstance(entry.get("since"), (int, float))
            ):
                entry = {"evidence": evidence, "since": now}
            keep[key] = entry
            lease = lease_of(step, default_lease)
            if reason := local_holder_gone(step.holder) or _foreign_stale(step, beats, lease):
                gone[step.id] = reason
            elif (quiet := now - entry["since"]) > lease:
                gone[step.id] = f"no heartbeat seen for {quiet:.0f}s (lease {lease:.0f}s)"
        if keep != seen:
            # No lock: two workers writing at once can only lose a fresh sighting, which then
            # starts later, and a later start only delays a takeover (the safe direction).
            self._save(keep)
        return gone

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}  # missing or tampered with: observing starts again (later, never sooner)
        if not isinstance(data, dict) or data.get("boot") != boot_id() or not isinstance(data.get("seen"), dict):
            return {}
        return data["seen"]

    def _save(self, seen: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps({"boot": boot_id(), "seen": seen}))
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)  # a full disk delays takeovers; it never causes one


def _evidence(step: Step, beats: dict[str, Beat]) -> str:
    beat = beats.get(step.assignee or "")
    # Only a beat for this very attempt counts: an idle worker's beats say nothing of a claim it dropped.
    if beat and beat_names(beat.info, step.id, step.attempt, step.holder.get("incarnation")):
        return beat.commit
    return f"claim:{step.attempt}"


def _foreign_stale(step: Step, beats: dict[str, Beat], lease: float) -> str | None:
    """A claim another tool wrote (no runner incarnation, no heartbeat ever seen for its
    assignee) is stale once its own claimed_at is older than the lease."""
    if step.holder.get("incarnation") or (step.assignee or "") in beats or step.claimed_at is None:
        return None
    age = wall_clock() - step.claimed_at.timestamp()
    if age > lease:
        return (
            f"claimed by {step.assignee} {age:.0f}s ago by another tool, and no runner heartbeat was ever seen for it"
        )
    return None
