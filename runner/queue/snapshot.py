"""Reading the queue: the plan, configuration and heartbeats at one commit of the branch.

Every step file is parsed once per blob: in memory for the life of the process, and on
disk (keyed by path, blob id and the version of the rules that judged it) so a fresh
`runner status` or `runner claim` need not parse thousands of frontmatters again: a process
that read a few new ones appends them, one that read many (or found the file mostly stale)
writes it afresh. What is kept of a sound step is lean (runner.core.model.Step.lean): its
index keys and its blob id, the rest read again when asked, so memory does not grow with what
the files say. After a transition only the changed files are read again, so a snapshot
costs about the same at 10,000 steps as at 100.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from runner.core.accounts import PAUSES_DIR, Pause, active_pauses
from runner.core.codec import decode_beat
from runner.core.config import Config
from runner.core.errors import EXIT_BAD_INPUT
from runner.core.layout import CONFIG_FILE, HALT_FILE, STEPS_DIR, is_step_path
from runner.core.model import Step
from runner.core.plan import Plan
from runner.core.treefiles import StepFiles
from runner.queue.leases import Beat
from runner.store import Change, Store, StoreError

PARSE_CACHE_MIN = 20  # new parses that make rewriting the on-disk cache worth it
STALE_PARSES = 256  # parsed versions of step files no longer on the branch, kept before a prune
MAX_BEATS = 10_000
RECENT_STEPS = 4  # whole steps kept (a step file is up to 1 MiB)
WRITTEN_KEPT = 8  # commits this process made on the branch, remembered with the paths they wrote


class NotInitialised(StoreError):
    """There is no queue branch yet: a usage error (exit 2; `runner init` first)."""

    exit_code = EXIT_BAD_INPUT


class Snapshot:
    """The queue at one commit, with the tips of the other branches read with it.
    Heartbeats are read only when asked for. `fetched`: read just after a fetch (or with no
    remote), so other workers' heartbeats are as fresh as they can be (leases are judged only
    on such a view)."""

    def __init__(
        self,
        tip: str,
        plan: Plan,
        config: Config,
        tips: dict[str, str | None],
        read_beats: Callable[[], dict[str, Beat]],
        fetched: bool = True,
        read_pauses: Callable[[], dict[str, bytes]] | None = None,
    ):
        self.tip = tip
        self.fetched = fetched
        self.plan = plan
        self.config = config
        self.tips = tips
        self._read_beats = read_beats
        self._beats: dict[str, Beat] | None = None
        self._read_pauses = read_pauses
        self._pause_files: dict[str, bytes] | None = None

    def pauses(self, now: datetime) -> dict[str, Pause]:
        """The accounts paused at `now` by a provider's limit (plans/pauses), read when first asked."""
        if self._pause_files is None:
            self._pause_files = self._read_pauses() if self._read_pauses else {}
        return active_pauses(self._pause_files, now) if self._pause_files else {}

    @property
    def beats(self) -> dict[str, Beat]:
        if self._beats is None:
            self._beats = self._read_beats()
        return self._beats


def _rules_version() -> str:
    """Changes whenever anything that judges a step file changes (runner's own code, any
    module of it, and PyYAML): a cached verdict of 'sound' never outlives the rules that
    gave it (runner.core.fingerprint)."""
    from runner.core.fingerprint import library_hash, package_hash

    return f"{package_hash()[:16]}-{library_hash('yaml/__init__.py', 'yaml/constructor.py', 'yaml/scanner.py')[:8]}"


class Reader:
    """Builds snapshots of one queue branch, keeping what it parsed."""

    def __init__(self, store: Store, branch: str):
        self.store = store
        self.branch = branch
        self._steps: dict[str, Step] = {}  # blob id -> the step parsed from it (at its path: see _cached)
        self._beats: dict[str, Beat] = {}
        self.files = StepFiles(store, keep=RECENT_STEPS)  # the whole steps read last, and runner.toml
        self._last: tuple[str | None, Plan] | None = None  # (plans/steps tree, plan) of the last snapshot
        self._written: dict[str, tuple[str, tuple[str, ...]]] = {}  # commit -> (its parent, the paths it wrote)
        self._cache_path = store.state_dir / "parsed-steps.jsonl"
        self._cache_loaded = False
        self._cache_lines = 0  # lines the file on disk held when it was read
        self._parsed_new: list[tuple[str, str]] = []  # (path, blob id) parsed since the cache was written
        self.malformed_beats: dict[str, str] = {}  # worker -> why its heartbeat ref was skipped

    def snapshot_at(self, tip: str, branches: Iterable[str] = (), fetched: bool = True) -> Snapshot:
        halt = self.store.file_at(tip, HALT_FILE)
        halted = (halt.decode(errors="replace").strip() or "halted") if halt is not None else None
        steps_tree = self.store.tree_id(tip, STEPS_DIR)
        plan = self._updated_plan(tip, steps_tree, halted) or self._built_plan(tip, halted)
        self._last = (steps_tree, plan)
        if len(self._steps) >= len(plan.steps) + len(plan.invalid) + STALE_PARSES:
            self._prune(plan)
        tips = {branch: self.store.tip(branch) for branch in branches}
        return Snapshot(tip, plan, self.config_at(tip), tips, self.beats, fetched, lambda: self.pause_files(tip))

    def pause_files(self, tip: str) -> dict[str, bytes]:
        """plans/pauses at `tip`: file name -> bytes (nothing read when the folder is not there)."""
        if self.store.tree_id(tip, PAUSES_DIR) is None:
            return {}
        return {
            entry.path.rsplit("/", 1)[-1]: self.store.read(entry.oid)
            for entry in self.store.list_files(tip, PAUSES_DIR)[:256]
            if not entry.link
        }

    def config_at(self, tip: str) -> Config:
        return self.files.config(self.store.file_at(tip, CONFIG_FILE) or b"", f"{CONFIG_FILE} on {self.branch}")

    def beats(self) -> dict[str, Beat]:
        """Every worker's last heartbeat. A ref that is not a heartbeat commit runner wrote
        (a blob pushed there, say) is skipped and reported, never a crash."""
        found = {}
        for worker, commit in self.store.heartbeats().items():
            beat = self._beats.get(commit)
            if beat is None:
                try:
                    info = decode_beat(self.store.commit(commit).message)
                except StoreError as exc:
                    info, why = None, str(exc)
                else:
                    why = "its commit is not a runner heartbeat"
                if info is None:
                    if worker not in self.malformed_beats:
                        print(f"runner: skipped the heartbeat ref of {worker!r}: {why}", file=sys.stderr)
                    self.malformed_beats[worker] = why
                    continue
                if len(self._beats) > MAX_BEATS:
                    self._beats.clear()
                beat = self._beats[commit] = Beat(worker, commit, info)
            found[worker] = beat
        return found

    # --- the plan ----------------------------------------------------------------------

    def wrote(self, commit: str, parent: str, paths: Iterable[str]) -> None:
        """`commit`, made by this process, is `parent` with `paths` written: read after its
        parent, the plan's changes are looked up at those paths, not found by a tree diff
        (at 10,000 steps the diff walks a folder of 256 folders)."""
        self._written[commit] = (parent, tuple(paths))
        while len(self._written) > WRITTEN_KEPT:
            del self._written[next(iter(self._written))]

    def _updated_plan(self, tip: str, steps_tree: str | None, halted: str | None) -> Plan | None:
        """The last plan with only the changed step files read again (transitions never
        change a plan's shape); None when it must be built from every file."""
        if self._last is None or steps_tree is None:
            return None
        last_tree, last_plan = self._last
        if last_tree is None:
            return None
        if last_tree == steps_tree:
            return last_plan.with_halt(halted)
        changes = self._written_changes(tip, last_tree)
        if changes is None:
            changes = self.store.diff_trees(last_tree, steps_tree)
        if any(c.kind != "M" or c.link or not is_step_path(c.path) for c in changes):
            return None
        return last_plan.updated(
            [self._parse(f"{STEPS_DIR}/{c.path}", c.oid) for c in changes if c.oid is not None], halted
        )

    def _written_changes(self, tip: str, last_tree: str) -> list[Change] | None:
        """The step files `tip` changed, when this process made it on the commit the last
        plan was read at: what is at each path it wrote. None otherwise, or when a path it
        wrote holds no file now (the diff then says what happened)."""
        written = self._written.get(tip)
        if written is None or self.store.tree_id(written[0], STEPS_DIR) != last_tree:
            return None
        prefix = STEPS_DIR + "/"
        changes = []
        for path in written[1]:
            if path.startswith(prefix):
                entry = self.store.entry_at(tip, path)
                if entry is None:
                    return None
                changes.append(Change(path[len(prefix) :], entry.oid, "M", entry.link))
        return changes

    def _built_plan(self, tip: str, halted: str | None) -> Plan:
        self._load_parse_cache()
        entries = [e for e in self.store.list_files(tip, STEPS_DIR) if is_step_path(e.path)]
        steps = [self._parse(e.path, e.oid, e.link) for e in entries]
        if len(self._parsed_new) >= PARSE_CACHE_MIN or self._cache_lines > len(entries) + STALE_PARSES:
            self._save_parse_cache([(e.path, e.oid) for e in entries])
        elif self._parsed_new:
            self._append_parse_cache()
        return Plan.build(steps, halted=halted)

    def _prune(self, plan: Plan) -> None:
        """Forget the parsed versions no plan step is (every transition leaves one behind)."""
        live = {id(step) for step in (*plan.steps.values(), *plan.invalid)}
        self._steps = {key: step for key, step in self._steps.items() if id(step) in live}

    def _cached(self, path: str, oid: str) -> Step | None:
        """The step parsed from blob `oid` at `path`. Keyed by the blob alone (a key a step
        costs memory at 10,000 steps): the same blob at another path is parsed again."""
        step = self._steps.get(oid)
        return step if step is not None and step.path == path else None

    def _parse(self, path: str, oid: str, link: bool = False) -> Step:
        cached = self._cached(path, oid)
        if cached is None:
            if len(self._parsed_new) < PARSE_CACHE_MIN:  # as many as make a rewrite worth it, no more
                self._parsed_new.append((path, oid))
            cached = self.files.step(path, oid, link)
            if cached.valid:
                cached = cached.lean(self, oid)
            self._steps[oid] = cached
        return cached  # shared: nothing changes a parsed step (Plan.build copies what it marks)

    def read_step(self, path: str, oid: str) -> Step:
        """The step in blob `oid`, whole (what a lean step reads when asked for more): one of
        the last few read, or parsed now. A tick asks for its own step four times."""
        return self.files.step(path, oid)

    def _load_parse_cache(self) -> None:
        """The file is runs of lines, each run after a line naming the rules that judged it
        (appends by processes of other versions may follow): a run of other rules is skipped."""
        if self._cache_loaded:
            return
        self._cache_loaded = True
        rules, ours = None, _rules_version()
        try:
            with open(self._cache_path) as handle:
                for line in handle:
                    self._cache_lines += 1
                    row = json.loads(line)
                    if isinstance(row, dict):
                        rules = row.get("rules")
                        continue
                    if rules != ours:
                        continue
                    path, oid, step_id, meta, text, problems = row
                    if text is None:  # a lean step: its index, its file read again when asked
                        step = Step.indexed(step_id, path, meta, self, oid)
                    else:
                        step = Step(step_id, path, meta, text, problems)
                    self._steps.setdefault(oid, step)
        except FileNotFoundError:
            pass
        except Exception:  # noqa: BLE001 (a cache that does not read (tampered, half written) is rebuilt)
            self._steps.clear()
            self._cache_lines = STALE_PARSES * 1000  # written afresh by the next build

    def _append_parse_cache(self) -> None:
        """The few steps this process parsed, at the end of the file in one write (appends of
        processes sharing a clone do not interleave)."""
        lines = [line for path, oid in self._parsed_new if (line := self._cache_line(path, oid))]
        self._parsed_new = []
        try:
            with open(self._cache_path, "a") as out:
                out.write(json.dumps({"rules": _rules_version()}) + "\n" + "".join(lines))
        except OSError:
            pass  # a cache is an optimisation: never fail a command for it
        self._cache_lines += len(lines) + 1

    def _save_parse_cache(self, keys: list[tuple[str, str]]) -> None:
        """One JSON line a step: one document of 10,000 would be built as ~250,000 pieces
        in memory first, and a worker's peak memory would be that, not its plan."""
        self._parsed_new = []
        tmp = self._cache_path.with_suffix(f".{os.getpid()}.tmp")
        try:
            with open(tmp, "w") as out:
                out.write(json.dumps({"rules": _rules_version()}) + "\n")
                out.writelines(line for path, oid in keys if (line := self._cache_line(path, oid)))
            os.replace(tmp, self._cache_path)
            self._cache_lines = len(keys) + 1
        except OSError:
            tmp.unlink(missing_ok=True)  # a cache is an optimisation: never fail a command for it

    def _cache_line(self, path: str, oid: str) -> str | None:
        """A parsed step as a line of the cache; None for one not worth keeping (a file over
        64 KiB) or that JSON cannot say (a YAML date in an invalid step): parsed again next time."""
        step = self._cached(path, oid)
        if step is None or (not step.is_lean and len(step.text) >= 65536):
            return None
        row: list[Any] = (
            [path, oid, step.id, step.index, None, []]
            if step.is_lean
            else [path, oid, step.id, step.meta, step.text, step.problems]
        )
        try:
            return json.dumps(row) + "\n"
        except (TypeError, ValueError):
            return None
