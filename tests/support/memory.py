"""Queues on the in-memory store: policy tests that need no git."""

from __future__ import annotations

from pathlib import Path


def memory_queue(tmp_path: Path, steps: dict[str, dict] | None = None, config: str = ""):
    """An initialised queue on runner.store.memory.MemoryStore, with `steps` (id -> extra fields) added."""
    from runner.core.layout import new_step_path
    from runner.core.stepfile import render_new_step
    from runner.queue.queue import Queue
    from runner.store.memory import MemoryStore

    queue = Queue(MemoryStore(tmp_path))
    queue.init("alice", files={"runner.toml": config.encode()} if config else {})
    if steps:
        queue.edit(
            lambda snap: {
                new_step_path(sid, False): render_new_step(sid, sid, {"run": ["x"], **fields}, "").encode()
                for sid, fields in steps.items()
            },
            "plan",
            "alice",
        )
    return queue


def fresh(queue):
    """Another reader of the same queue (a fresh process's view): what it parsed is its own."""
    from runner.queue.queue import Queue

    return Queue(queue.store, branch=queue.branch)
