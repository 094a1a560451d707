"""Fleet metrics in Prometheus' text exposition format (version 0.0.4): the queue as one
snapshot shows it (steps by status, stuck steps, workers by liveness, what the plan spent),
and, in a worker's file, what that worker did since it started (ticks and their seconds,
claims, lost races, steps by outcome and their seconds, fix-loop and resolve passes, usage and
cost, the server hook's refusals).

`[worker] metrics_file`: a worker rewrites the file after each tick, atomically (a temporary
file renamed over it), for node_exporter's textfile collector; a path it cannot write is a
warning each tick, never a stop. The board serves the queue's part at GET /metrics.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.core.usage import Spend, plan_spend, runs_spend
from runner.queue.snapshot import Snapshot
from runner.queue.stuck import stuck_steps
from runner.queue.workers import worker_rows

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STATUSES = ("ready", "waiting", "blocked", "claimed", "review", "done", "failed", "invalid")

Sample = tuple[dict[str, str], float]
Family = tuple[str, str, str, list[Sample]]  # name, type, help, samples


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


def render(families: list[Family]) -> str:
    lines = []
    for name, kind, helptext, samples in families:
        if kind == "counter":
            name += "_total"  # a counter's samples end in _total (its family is named without)
        lines.append(f"# HELP {name} {helptext}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            suffix = ""
            if kind == "summary" and "__suffix" in labels:
                labels = dict(labels)
                suffix = labels.pop("__suffix")
            body = ",".join(f'{k}="{_label(str(v))}"' for k, v in sorted(labels.items()))
            lines.append(f"{name}{suffix}{{{body}}} {_number(value)}" if body else f"{name}{suffix} {_number(value)}")
    return "\n".join(lines) + "\n"


def queue_families(snap: Snapshot) -> list[Family]:
    plan = snap.plan
    counts = {status: 0 for status in STATUSES}
    for step in [*plan.steps.values(), *plan.invalid]:
        status = plan.derived_status(step)
        counts[status] = counts.get(status, 0) + 1
    workers: dict[str, int] = {"alive": 0, "late": 0, "gone": 0}
    for row in worker_rows(snap):
        workers[row["liveness"]] = workers.get(row["liveness"], 0) + 1
    spent = plan_spend(plan)
    return [
        (
            "runner_steps",
            "gauge",
            "Steps of the plan by status (waiting, blocked and invalid derived).",
            [({"status": s}, n) for s, n in sorted(counts.items())],
        ),
        (
            "runner_steps_stuck",
            "gauge",
            "Steps no live worker will take (runner ready says why).",
            [({}, len(stuck_steps(snap)))],
        ),
        (
            "runner_workers",
            "gauge",
            "Workers by the liveness of their heartbeat.",
            [({"liveness": state}, n) for state, n in sorted(workers.items())],
        ),
        ("runner_plan_halted", "gauge", "1 while the queue is halted.", [({}, 1 if plan.halted else 0)]),
        *_spend_families("runner_plan", "the plan's steps", spent),
    ]


def _spend_families(prefix: str, whose: str, spent: Spend) -> list[Family]:
    return [
        (f"{prefix}_usd", "gauge", f"Money {whose} spent on agent runs, where known.", [({}, round(spent.usd, 6))]),
        (
            f"{prefix}_tokens",
            "gauge",
            f"Tokens {whose} spent on agent runs.",
            [({"direction": "input"}, spent.input_tokens), ({"direction": "output"}, spent.output_tokens)],
        ),
        (
            f"{prefix}_agent_runs",
            "gauge",
            f"Agent runs of {whose} (those of unknown usage included).",
            [({}, spent.runs)],
        ),
    ]


@dataclass
class WorkerCounts:
    """What a worker (every slot of a daemon together) did since it started."""

    worker: str
    ticks: int = 0
    tick_seconds: float = 0.0
    claims: int = 0
    lost_claims: int = 0
    refusals: int = 0
    steps: dict[str, int] = field(default_factory=dict)  # outcome -> count
    step_seconds: float = 0.0
    fix_passes: int = 0
    resolve_passes: int = 0
    spent: Spend = field(default_factory=Spend)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def tick(self, result: Any, seconds: float, refused: bool = False) -> None:
        """Count one tick's TickResult (runner.worker.report)."""
        with self.lock:
            self.ticks += 1
            self.tick_seconds += seconds
            self.refusals += int(refused or (result.outcome == "fault" and "refused" in (result.reason or "")))
            if result.outcome == "lost":
                self.lost_claims += 1
            report = result.report
            if result.step is None or report is None:
                return
            self.claims += 1
            self.steps[result.outcome] = self.steps.get(result.outcome, 0) + 1
            self.step_seconds += seconds
            names = [r.get("name") for r in report.runs if isinstance(r, dict)]
            self.fix_passes += max(names.count("implement") - 1, 0)
            self.resolve_passes += names.count("resolve")
            self.spent = _added(self.spent, runs_spend(report.runs))

    def families(self, races_lost: int) -> list[Family]:
        w = {"worker": self.worker}
        with self.lock:
            return [
                ("runner_worker_ticks", "counter", "Ticks of this worker.", [(w, self.ticks)]),
                (
                    "runner_worker_tick_seconds",
                    "summary",
                    "Seconds spent in ticks.",
                    [
                        ({**w, "__suffix": "_sum"}, round(self.tick_seconds, 3)),
                        ({**w, "__suffix": "_count"}, self.ticks),
                    ],
                ),
                ("runner_worker_claims", "counter", "Steps this worker claimed and ran.", [(w, self.claims)]),
                (
                    "runner_worker_lost_races",
                    "counter",
                    "Publishes that lost the compare-and-swap, built again.",
                    [(w, races_lost)],
                ),
                (
                    "runner_worker_lost_claims",
                    "counter",
                    "Claims lost while the step ran (aborted or taken over).",
                    [(w, self.lost_claims)],
                ),
                ("runner_worker_hook_refusals", "counter", "Pushes the server hook refused.", [(w, self.refusals)]),
                (
                    "runner_worker_steps",
                    "counter",
                    "Steps run, by how they ended.",
                    [({**w, "outcome": o}, n) for o, n in sorted(self.steps.items())],
                ),
                (
                    "runner_worker_step_seconds",
                    "summary",
                    "Seconds of the ticks that ran a step.",
                    [
                        ({**w, "__suffix": "_sum"}, round(self.step_seconds, 3)),
                        ({**w, "__suffix": "_count"}, self.claims),
                    ],
                ),
                (
                    "runner_worker_fix_passes",
                    "counter",
                    "Fix-loop passes: implement runs after an attempt's first.",
                    [(w, self.fix_passes)],
                ),
                (
                    "runner_worker_resolve_passes",
                    "counter",
                    "Resolve passes on a result whose merge conflicted.",
                    [(w, self.resolve_passes)],
                ),
                *[
                    (name, kind, helptext, [({**w, **labels}, v) for labels, v in samples])
                    for name, kind, helptext, samples in _spend_families(
                        "runner_worker", "this worker's steps", self.spent
                    )
                ],
            ]


def _added(total: Spend, more: Spend) -> Spend:
    from dataclasses import fields

    return Spend(**{f.name: getattr(total, f.name) + getattr(more, f.name) for f in fields(Spend)})


def write(path: Path, text: str) -> None:
    """Replace `path` with `text` at once (OSError when it cannot be written)."""
    path = path.expanduser()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
