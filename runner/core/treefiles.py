"""The files of a queue's trees as runner reads them: step files and runner.toml, each parsed
once per content (a blob id, the config's bytes). The one reader behind both views of a queue:
runner.queue.snapshot builds whole plans from it, the hooks (runner.hooks.planview, the
pre-commit check) only the files a push or a commit touches. It lives below the queue and the
hooks both (issue 47.1): the hooks never import the queue. It reads blobs from any store."""

from __future__ import annotations

from typing import Protocol

from runner.core.config import Config, parse_config
from runner.core.model import Step
from runner.core.stepfile import parse_step, symlinked_step

CONFIGS_KEPT = 16


class Blobs(Protocol):
    def read(self, oid: str) -> bytes: ...  # a blob's bytes (runner.store.Store.read)


class StepFiles:
    def __init__(self, store: Blobs, keep: int | None = None):
        """`keep`: how many parsed step files to keep, newest first (a step file is up to 1 MiB);
        None keeps every one (a push's worth)."""
        self.store = store
        self.keep = keep
        self._steps: dict[tuple[str, str], Step] = {}
        self._configs: dict[bytes, Config] = {}

    def step(self, path: str, oid: str, link: bool = False) -> Step:
        """The step file `oid` at `path`, whole; a symlink there is refused, never followed."""
        key = (path, oid)
        step = self._steps.pop(key, None)
        if step is None:
            step = symlinked_step(path) if link else parse_step(path, self.store.read(oid))
        self._steps[key] = step  # newest last
        if self.keep is not None and len(self._steps) > self.keep:
            del self._steps[next(iter(self._steps))]
        return step

    def config(self, data: bytes, where: str = "runner.toml") -> Config:
        """runner.toml from its bytes (BadInput listing every problem)."""
        if data not in self._configs:
            if len(self._configs) >= CONFIGS_KEPT:
                self._configs.clear()
            self._configs[data] = parse_config(data.decode("utf-8", errors="replace"), where)
        return self._configs[data]
