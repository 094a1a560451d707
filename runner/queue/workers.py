"""Who is working, from facts: each worker's last heartbeat (state, pid, host, incarnation,
start time, the lease in force, its last step), judged against its lease; on this host a
dead pid is gone at once. A step is shown as current only while the worker holds it."""

from __future__ import annotations

from typing import Any

from runner.core.clock import wall_clock
from runner.core.codec import beat_claims
from runner.core.layout import heartbeat_ref
from runner.core.model import Status, parse_time
from runner.queue.change import LostRace, PushRefused
from runner.queue.leases import host_name, process_start_time
from runner.queue.snapshot import Snapshot
from runner.store import RefUpdate, Refused, Store, Won

DAY = 86400.0


def beat_age(info: dict[str, Any]) -> float | None:
    """Seconds since the beat, by its own timestamp (a display: liveness decisions never use it)."""
    moment = parse_time(info.get("at"))
    return None if moment is None else max(0.0, wall_clock() - moment.timestamp())


def liveness(info: dict[str, Any], lease: float) -> str:
    """alive, late or gone."""
    if info.get("state") == "stopped":
        return "gone"
    if info.get("host") == host_name() and isinstance(info.get("pid"), int):
        started = process_start_time(info["pid"])
        recorded = info.get("process_started")
        if started is None or (isinstance(recorded, (int, float)) and abs(started - recorded) > 1.0):
            return "gone"
    age = beat_age(info)
    if age is None:
        return "late"
    return "alive" if age <= lease / 2 else "late" if age <= lease else "gone"


def worker_rows(snap: Snapshot) -> list[dict[str, Any]]:
    rows = []
    for worker, beat in sorted(snap.beats.items()):
        info = beat.info
        lease = float(info.get("lease") or snap.config.leases.lease)
        held = [s for s in snap.plan.with_status(Status.CLAIMED) if s.assignee == worker]
        current = next(
            (s for s in held if s.attempt == info.get("attempt") and s.id == info.get("step")),
            held[0] if held else None,
        )
        state = liveness(info, lease)
        rows.append(
            {
                "worker": worker,
                "liveness": state,
                "state": info.get("state"),
                "host": info.get("host"),
                "pid": info.get("pid"),
                "incarnation": info.get("incarnation"),
                "step": current.id if current else None,
                "claims": [c["step"] for c in beat_claims(info)],  # a daemon with --slots runs several
                "attempt": current.attempt if current else None,
                "last": info.get("last"),
                "ticks": info.get("ticks"),
                "started": info.get("started"),
                "last_beat": info.get("at"),
                "beat_age_s": round(age, 1) if (age := beat_age(info)) is not None else None,
                "lease_s": lease,
                "commit": beat.commit,
            }
        )
    return rows


def prunable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Workers gone for longer than a day."""
    return [r for r in rows if r["liveness"] == "gone" and (r["beat_age_s"] or 0) > DAY]


def forget(store: Store, beats: dict[str, str]) -> None:
    """Delete the heartbeat refs of workers that are gone (worker -> the beat we saw)."""
    if not beats:
        return
    outcome = store.publish([RefUpdate(heartbeat_ref(worker), None, commit) for worker, commit in beats.items()])
    if isinstance(outcome, Refused):
        raise PushRefused(str(outcome))
    if not isinstance(outcome, Won):
        raise LostRace(f"a worker beat again while it was being pruned ({outcome}); run it again")
