"""What the server's hook keeps between pushes, in the repository it guards
(runner/hook-cache/): the step files it parsed, by blob id, and the index of the step files
of each plans/steps tree it read, by tree id. Every push is a new process; without this each
one listed every folder of a fanned-out plan and imported PyYAML to parse again the step it
replays. A push now reads from git only what changed since the pushes before it.

Everything here is an answer git's objects give again: a file that does not read (half
written, tampered with, from other rules) is ignored and written afresh, and a write that
fails is skipped. Answers are kept under the rules that gave them (runner.core.fingerprint:
runner's source files as they are installed, and PyYAML's); the folders of other rules are
removed by the day's prune.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from runner.core.model import Step

INDEXES_KEPT = 8  # steps trees: the queue's last few states, each the next push's parent
MAX_CACHED_TEXT = 65536  # a step file longer than this is parsed again when asked
PRUNE_EVERY = 86400.0  # seconds between passes that remove what no push read for PRUNE_AFTER
PRUNE_AFTER = 14 * 86400.0


def rules() -> str:
    from runner.core.fingerprint import library_hash, package_stamp

    return f"{package_stamp()[:16]}-{library_hash('yaml/__init__.py', 'yaml/constructor.py', 'yaml/scanner.py')[:8]}"


class HookCache:
    def __init__(self, state_dir: Path):
        self.top = state_dir / "hook-cache"
        self.root = self.top / rules()

    def _file(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / f"{key}.json"

    def _read(self, path: Path) -> Any:
        try:
            return json.loads(path.read_bytes())
        except (OSError, ValueError):
            return None

    def _write(self, path: Path, value: Any) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(value))
            os.replace(tmp, path)
        except (OSError, TypeError, ValueError):
            pass  # a cache is an optimisation: never refuse a push for it

    # --- the index of a steps tree: step id -> its files' paths --------------------------

    def index(self, tree: str) -> dict[str, list[str]] | None:
        found = self._read(self._file("index", tree))
        if not isinstance(found, dict) or not all(
            isinstance(v, list) and all(isinstance(p, str) for p in v) for v in found.values()
        ):
            return None
        return found

    def keep_index(self, tree: str, index: dict[str, list[str]]) -> None:
        self._write(self._file("index", tree), index)
        folder = self.root / "index"
        try:
            kept = sorted(folder.glob("*/*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
            for old in kept[INDEXES_KEPT:]:
                old.unlink(missing_ok=True)
        except OSError:
            pass

    # --- parsed step files -----------------------------------------------------------------

    def step(self, path: str, blob: str) -> Step | None:
        row = self._read(self._file("steps", blob))
        if not (
            isinstance(row, list)
            and len(row) == 5
            and row[0] == path
            and isinstance(row[1], str)
            and isinstance(row[2], dict)
            and isinstance(row[3], str)
            and isinstance(row[4], list)
        ):
            return None  # not this step (the same blob at another path is parsed again), or not readable
        return Step(row[1], path, row[2], row[3], [str(p) for p in row[4]])

    def keep_step(self, blob: str, step: Step) -> None:
        row = [step.path, step.id, step.meta, step.text, step.problems]
        try:
            if len(step.text) >= MAX_CACHED_TEXT or json.loads(json.dumps(row)) != row:
                return  # JSON cannot say it as it is (a YAML date, a number for a key): parsed again
        except (TypeError, ValueError):
            return
        self._write(self._file("steps", blob), row)

    # --- housekeeping ----------------------------------------------------------------------

    def prune(self) -> None:
        """Once a day: the folders of other rules, and the files no push read for two weeks."""
        stamp = self.top / "pruned"
        try:
            if stamp.exists() and time.time() - stamp.stat().st_mtime < PRUNE_EVERY:
                return
            self.top.mkdir(parents=True, exist_ok=True)
            stamp.touch()
            import shutil

            for other in self.top.iterdir():
                if other.is_dir() and other != self.root:
                    shutil.rmtree(other, ignore_errors=True)
            cutoff = time.time() - PRUNE_AFTER
            for path in (self.root / "steps").glob("*/*.json"):
                if path.stat().st_atime < cutoff and path.stat().st_mtime < cutoff:
                    path.unlink(missing_ok=True)
        except OSError:
            pass
