"""Liveness of claims: heartbeats, incarnations, and leases judged by our own clock.

A lease is never judged by comparing another machine's timestamps with ours.
This host remembers when it first saw each claim's current liveness evidence
(the holder's heartbeat commit, or the claim itself when no heartbeat exists)
and calls the lease expired when that evidence has not changed for longer than
the lease by this host's clock. A holder that ran on this host is dead at once
when its pid is gone or belongs to another process (pid + start time).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.core.clock import wall_clock
from runner.core.model import Step, parse_duration


def host_name() -> str:
    """This host's name in claims. RUNNER_HOST overrides it where hostnames are not unique
    (containers cloned from one image); a holder is judged by pid only on its own host."""
    return os.environ.get("RUNNER_HOST") or socket.gethostname()


def process_start_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def new_incarnation(worker: str) -> str:
    return f"{worker}.{secrets.token_hex(4)}"


def holder_info(incarnation: str, with_pid: bool = True) -> dict[str, Any]:
    if not with_pid:
        return {"host": host_name(), "incarnation": incarnation}
    started = process_start_time(os.getpid()) or time.time()
    return {"host": host_name(), "pid": os.getpid(), "started": round(started, 2), "incarnation": incarnation}


@dataclass
class Heartbeat:
    worker: str
    commit: str
    info: dict[str, Any]


def parse_heartbeat(worker: str, commit: str, message: str) -> Heartbeat:
    try:
        info = json.loads(message.split("\n\n", 1)[1] if "\n\n" in message else message)
    except (ValueError, IndexError):
        info = {}
    return Heartbeat(worker=worker, commit=commit, info=info if isinstance(info, dict) else {})


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


class LeaseObserver:
    """This host's memory of when it first saw each claim's liveness evidence."""

    def __init__(self, runner_dir: Path, clock=wall_clock):
        self.path = runner_dir / "observed.json"
        self.clock = clock

    def expired_claims(self, claimed: list[Step], heartbeats: dict[str, Heartbeat], default_lease: float) -> dict[str, str]:
        """step id -> reason, for claims whose holder is gone or whose lease ran out."""
        if not claimed:
            return {}
        now = self.clock()
        gone: dict[str, str] = {}
        seen = self._load()
        keep = {}
        for step in claimed:
            key = f"{step.id}#{step.attempt}"
            evidence = self._evidence(step, heartbeats)
            entry = seen.get(key)
            if not entry or entry.get("evidence") != evidence:
                entry = {"evidence": evidence, "since": now}
            keep[key] = entry
            reason = local_holder_gone(step.holder)
            if reason:
                gone[step.id] = reason
                continue
            lease = _lease_of(step, default_lease)
            quiet = now - entry["since"]
            if quiet > lease:
                gone[step.id] = f"no heartbeat seen for {quiet:.0f}s (lease {lease:.0f}s)"
        if keep != seen:
            # No lock: two workers writing at once can only lose a fresh sighting, which then
            # starts later, and a later start only delays a takeover (the safe direction).
            self._save(keep)
        return gone

    @staticmethod
    def _evidence(step: Step, heartbeats: dict[str, Heartbeat]) -> str:
        beat = heartbeats.get(step.assignee or "")
        incarnation = step.holder.get("incarnation")
        # Only a beat for this very step counts: an idle worker's beats say nothing of a claim it dropped.
        if beat and beat.info.get("step") == step.id and (not incarnation or beat.info.get("incarnation") == incarnation):
            return beat.commit
        return f"claim:{step.attempt}"

    def _load(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def _save(self, data: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)


def _lease_of(step: Step, default: float) -> float:
    try:
        return parse_duration(step.meta.get("lease")) if step.meta.get("lease") else default
    except ValueError:
        return default
