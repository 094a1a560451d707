"""What the board's pages show, as JSON-ready data read from one snapshot of the queue: the
home page (what needs a person, the plan, its graph, the workers) and a step's page (its
file, its result's diff, every run of every attempt, the verdict, the handoff, the manual
checks left, its history and its live output). Read only: nothing here writes or runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from runner.board import diffs
from runner.board.graph import layout
from runner.core.errors import BadInput
from runner.core.layout import EMPTY_TREE, HALT_FILE, handoff_path
from runner.core.machine import KINDS, TABLE
from runner.core.model import Status, utc_now
from runner.core.stepfile import manual_checks
from runner.core.usage import Spend, plan_spend, run_note, runs_spend
from runner.queue.audit import log
from runner.queue.costs import WorkerSpend
from runner.queue.livelog import step_output
from runner.queue.notices import WHY_REVIEW
from runner.queue.queue import Queue
from runner.queue.snapshot import Snapshot
from runner.queue.stuck import stuck_steps
from runner.queue.workers import worker_rows
from runner.store import Conflict, Store, StoreError

MAX_DIFF_BYTES = 512 * 1024  # a step page shows at most this much of a diff (and says so)
HISTORY = 200  # the newest queue commits a step's page lists
RECORDS = ("complete", "fail", "block", "release")  # the events that carry an attempt's runs
PERSON_KINDS = [kind for kind, spec in KINDS.items() if spec.person and spec.step]


def actions_for(status: str) -> list[str]:
    """The person's events the state machine takes from a stored status (the board offers
    them; the queue still decides)."""
    return [str(kind) for kind in PERSON_KINDS if (status, kind) in TABLE]


def row(snap: Snapshot, step) -> dict[str, Any]:
    valid = step.valid
    return {
        "step": step.id,
        "title": step.title,
        "status": snap.plan.derived_status(step),
        "assignee": step.assignee,
        "attempt": step.attempt if valid else None,
        "failures": step.get("failures"),
        "depends_on": step.depends_on if valid else [],
        "priority": step.priority if valid else None,
        "tags": step.tags if valid else [],
        "review": step.get("review"),
        "last_error": step.get("last_error"),
        "since": step.get("last_updated") or step.get("claimed_at"),
        "problems": list(step.problems),
        "usage": Spend.from_meta(step.get("usage")).as_json() if step.get("usage") is not None else None,
    }


_WORKER_SPEND = WorkerSpend()  # the board is one long-lived process on one clone


def home(queue: Queue, snap: Snapshot, since_halt: str | None = None) -> dict[str, Any]:
    plan = snap.plan
    workers = worker_rows(snap)
    by_worker = _WORKER_SPEND.at(queue.store, snap.tip)
    for worker in workers:
        spend = by_worker.get(worker["worker"])
        worker["spent"] = {**spend.as_json(), "money": spend.money()} if spend else None
    spent = plan_spend(plan)
    steps = [row(snap, step) for step in sorted([*plan.steps.values(), *plan.invalid], key=lambda s: (s.id, s.path))]
    counts: dict[str, int] = {}
    for entry in steps:
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    return {
        "queue": queue.branch,
        "tip": snap.tip,
        "remote": queue.store.remote,
        "halted": plan.halted,
        "counts": counts,
        "needs": needs_you(snap, steps, workers, since_halt),
        "steps": steps,
        "graph": layout(plan),
        "workers": workers,
        "spent": {**spent.as_json(), "money": spent.money(), "budget": snap.config.brakes.plan_budget_usd},
        "paused": [pause.as_json() for _, pause in sorted(snap.pauses(utc_now()).items())],
    }


def needs_you(
    snap: Snapshot, steps: list[dict[str, Any]], workers: list[dict[str, Any]], since_halt: str | None
) -> list[dict[str, Any]]:
    """What waits for a person, each with why and since when: agents configured without plan-wide
    approval, the halted queue, steps in review, steps failed for good, workers gone while holding
    a claim."""
    found = []
    if warning := snap.config.agents_without_approval():
        found.append(
            {
                "kind": "warning",
                "step": None,
                "title": "Agents' results merge without a person",
                "why": warning,
                "since": None,
            }
        )
    if snap.plan.halted:
        found.append(
            {
                "kind": "halted",
                "step": None,
                "title": "The queue is halted",
                "why": snap.plan.halted,
                "since": since_halt,
            }
        )
    for entry in steps:
        if entry["status"] == Status.REVIEW:
            why = WHY_REVIEW.get(str(entry["review"] or "result"), "a person must decide")
            detail = entry["last_error"] if entry["review"] != "result" or entry["last_error"] else None
            found.append(
                {
                    "kind": "review",
                    "step": entry["step"],
                    "title": entry["title"],
                    "why": why + (f": {detail}" if detail else ""),
                    "since": entry["since"],
                }
            )
        elif entry["status"] == Status.FAILED:
            found.append(
                {
                    "kind": "failed",
                    "step": entry["step"],
                    "title": entry["title"],
                    "why": f"failed for good: {entry['last_error'] or 'no reason recorded'}",
                    "since": entry["since"],
                }
            )
    for step_id, why in stuck_steps(snap).items():
        found.append(
            {
                "kind": "stuck",
                "step": step_id,
                "title": snap.plan.steps[step_id].title,
                "why": f"no live worker will take it: {why}",
                "since": None,
            }
        )
    for worker in workers:
        if worker["liveness"] == "gone" and worker["step"]:
            found.append(
                {
                    "kind": "worker-gone",
                    "step": worker["step"],
                    "title": f"{worker['worker']} is gone",
                    "why": f"{worker['worker']} (on {worker['host'] or 'an unknown host'}) stopped beating while "
                    f"holding {worker['step']}: "
                    "a worker takes it over when its lease runs out, or abort it",
                    "since": worker["last_beat"],
                }
            )
    return found


def step_page(queue: Queue, snap: Snapshot, step_id: str) -> dict[str, Any]:
    step = snap.plan.find(step_id)
    if step is None:
        raise BadInput(f"no step {step_id!r} (see `runner status`)")
    step = step.full()
    entries = log(queue.store, snap.tip, step_id, HISTORY)
    handoff = queue.store.file_at(snap.tip, handoff_path(step.path))
    return {
        **row(snap, step),
        "path": step.path,
        "file": step.text,
        "meta": {k: v for k, v in step.meta.items()},
        "actions": actions_for(step.get("status", Status.READY)) if step.valid else [],
        "diff": result_diff(queue, snap, step),
        "attempts": attempts(entries),
        "verdict": step.get("last_verdict"),
        "spent": Spend.from_meta(step.get("usage")).describe() if step.get("usage") is not None else None,
        "handoff": handoff.decode("utf-8", "replace") if handoff else None,
        "manual": manual_checks(step.text),
        "history": [
            {k: e[k] for k in ("time", "event", "actor", "attempt", "status", "reason", "commit", "subject")}
            for e in entries
        ],
        "live": step_output(snap, step_id),
    }


def attempts(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every recorded attempt, newest first, with each run (name, result, seconds, detail)."""
    return [
        {
            "attempt": e["attempt"],
            "event": e["event"],
            "status": e["status"],
            "actor": e["actor"],
            "time": e["time"],
            "reason": e["reason"],
            "spent": runs_spend(e["runs"]).describe(),
            "runs": [{**run, "spent": run_note(run)} for run in e["runs"]],
        }
        for e in entries
        if e["event"] in RECORDS
    ]


def result_diff(queue: Queue, snap: Snapshot, step) -> dict[str, Any]:
    """The step's result against the integration branch: for a result waiting in review,
    exactly what approve would merge into the integration branch's tip now (a conflict is
    named); once merged, what the merge brought; otherwise the change against where it forked."""
    integration = snap.config.queue.integration_branch
    result = step.get("result") if isinstance(step.get("result"), dict) else {}
    commit, merge = result.get("commit"), result.get("merge")
    store = queue.store
    found: dict[str, Any] = {
        "against": integration,
        "kind": None,
        "text": "",
        "clipped": 0,
        "conflict": [],
        "note": None,
        "commit": commit,
        "files": [],
        "more": 0,
        "comments": step.get("review_comments") or [],
    }
    tip = snap.tips.get(integration)
    if merge and _has(store, merge):
        found.update(kind="merged", note=f"what the merge {merge[:10]} brought into {integration}")
        return _diff(store, found, _parent(store, merge), merge)
    if not commit:
        found["note"] = "no result recorded yet"
        return found
    if not _has(store, commit):
        found["note"] = f"the result {commit[:10]} is not on this clone yet (its branch was not fetched)"
        return found
    waiting = step.get("status") == Status.REVIEW and (step.get("review") or "result") == "result"
    if waiting and tip:
        try:
            merged = store.would_merge(tip, commit)
        except StoreError:
            merged = None  # git could not say: the result against where it forked, below
        if isinstance(merged, Conflict):
            found.update(
                kind="conflict",
                conflict=list(merged.paths),
                note=f"approve would not merge: it conflicts with {integration} in these files",
            )
            return _diff(store, found, tip, commit, fork=True)
        if merged is not None:
            found.update(kind="would-merge", note=f"exactly what approve would merge into {integration} ({tip[:10]})")
            return _diff(store, found, tip, merged)
    found.update(kind="result", note=f"the result {commit[:10]} against where it left {integration}")
    return _diff(store, found, tip, commit, fork=True) if tip else _diff(store, found, _parent(store, commit), commit)


def _has(store: Store, oid: str) -> bool:
    return store.object_type(oid) == "commit"


def _parent(store: Store, commit: str) -> str:
    """A commit's first parent (git's commit^1); the empty tree for a root commit."""
    parents = store.commit(commit).parents
    return parents[0] if parents else EMPTY_TREE


def _diff(store: Store, found: dict[str, Any], old: str, new: str, fork: bool = False) -> dict[str, Any]:
    try:
        data = store.diff(old, new, fork)
    except StoreError as exc:
        found["note"] = str(exc)
        return found
    if len(data) > MAX_DIFF_BYTES:
        found["clipped"] = len(data) - MAX_DIFF_BYTES
        data = data[:MAX_DIFF_BYTES]
    found["text"] = data.decode("utf-8", "replace")
    found.update(diffs.parse(found["text"]))
    return found


def halted_since(queue: Queue, snap: Snapshot) -> str | None:
    """When the queue was halted: the time of the newest commit that wrote plans/HALT (in this
    host's time zone)."""
    if not snap.plan.halted:
        return None
    store = queue.store
    for info in store.workspace().log(snap.tip):  # the queue's own commits: one line of first parents
        before = store.entry_at(info.parents[0], HALT_FILE) if info.parents else None
        if store.entry_at(info.id, HALT_FILE) != before:
            return datetime.fromtimestamp(info.time).astimezone().isoformat()
    return None
