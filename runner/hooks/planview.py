"""The queue as the hook reads it at any commit of a push: runner.toml, the index of step
files, parsed steps, the plan around a step. Each read is cached for the push; only the
files a commit touches (and their dependencies) are parsed."""

from __future__ import annotations

from runner.core.config import Config
from runner.core.errors import BadInput
from runner.core.layout import CONFIG_FILE, STEPS_DIR, is_step_file, step_id_of
from runner.core.model import Step
from runner.core.plan import Plan, dependencies_done
from runner.core.treefiles import StepFiles
from runner.hooks.cache import HookCache
from runner.store import Store, StoreError

ZERO = "0" * 40


class PlanView:
    def __init__(self, store: Store, cache: HookCache | None = None):
        """`cache`: what earlier pushes read (runner.hooks.cache), kept in the server's repository."""
        self.store = store
        self.files = StepFiles(store)  # every file a push's commits hold, parsed once
        self.cache = cache
        self._indexes: dict[str | None, dict[str, list[str]]] = {}
        self.parsed: dict[tuple[str, str], Step] = {}  # this push's steps, when a cache is kept

    def deps_done(self, parent: str, step: Step) -> bool:
        index = self.index(parent)

        def status_of(dep: str) -> str | None:
            paths = index.get(dep, [])
            found = self.parse(paths[0], self.blob(parent, paths[0])) if len(paths) == 1 else None
            return found.status if found is not None and not found.problems else None

        return dependencies_done(step, status_of)

    def plan_problems(self, commit: str, paths: list[str]) -> list[str]:
        """Plan.build problems of the given step files, from them, every file sharing their ids
        and their dependencies transitively: enough to find each of their problems."""
        index = self.index(commit)
        wanted, pending, seen, steps = set(paths), [step_id_of(p) for p in paths], set(), []
        while pending:
            step_id = pending.pop()
            if step_id in seen:
                continue
            seen.add(step_id)
            for path in index.get(step_id, []):
                step = self.parse(path, self.blob(commit, path)).copy()
                steps.append(step)
                if not step.problems:
                    pending += step.depends_on
        plan = Plan.build(steps)
        return [f"{s.path}: {p}" for s in plan.invalid if s.path in wanted for p in s.problems]

    def dependents_problems(self, commit: str, deleted: set[str]) -> list[str]:
        index = self.index(commit)
        gone = {step_id for step_id in deleted if step_id not in index}  # not merely moved
        problems = []
        for paths in index.values() if gone else ():
            for path in paths:
                step = self.parse(path, self.blob(commit, path))
                if missing := sorted(set(step.depends_on) & gone) if not step.problems else []:
                    problems.append(
                        f"deleting {', '.join(missing)} leaves {path} depending on a step that does not exist"
                    )
        return problems

    def config(self, commit: str | None, strict: bool = False) -> Config:
        """runner.toml at a commit (the defaults where it does not parse, or BadInput if `strict`)."""
        data = (self.store.file_at(commit, CONFIG_FILE) if commit else None) or b""
        try:
            return self.files.config(data)
        except BadInput:
            if strict:
                raise
            return Config()

    def index(self, commit: str) -> dict[str, list[str]]:
        """Step id -> paths of its step files at a commit (file names only: nothing parsed).
        Listed in full once per push; each commit after that is its parent's index with the
        step files it added or deleted, so a long push of a large plan costs what it changes."""
        tree = self.store.tree_id(commit, STEPS_DIR)
        if tree not in self._indexes:
            index = self.cache.index(tree) if self.cache is not None and tree is not None else None
            kept = index is not None
            index = index if index is not None else self.derived_index(commit, tree)
            if index is None:
                index = {}
                for entry in self.store.list_files(commit, STEPS_DIR):
                    if is_step_file(entry.path):
                        index.setdefault(step_id_of(entry.path), []).append(entry.path)
            if len(self._indexes) >= 4:  # commits are checked in order: only the last few are asked for again
                del self._indexes[next(iter(self._indexes))]
            self._indexes[tree] = index
            if self.cache is not None and tree is not None and not kept:
                self.cache.keep_index(tree, index)
        return self._indexes[tree]

    def derived_index(self, commit: str, tree: str | None) -> dict[str, list[str]] | None:
        """The index of a commit from its parent's (this push's or a cached one) and the step
        files the commit added or deleted: a claim's costs one diff, not every folder's listing."""
        parents = self.store.commit(commit).parents
        parent_tree = self.store.tree_id(parents[0], STEPS_DIR) if parents else None
        base = self._indexes.get(parent_tree)
        if base is None and parent_tree is not None and self.cache is not None:
            base = self.cache.index(parent_tree)
        if base is None or parent_tree is None or tree is None:
            return None
        index = dict(base)  # lists are replaced, never changed in place: the parent's index stays true
        for change in self.store.diff_trees(parent_tree, tree):
            path = f"{STEPS_DIR}/{change.path}"
            if change.kind in ("A", "D") and is_step_file(path):
                step_id = step_id_of(path)
                paths = [p for p in index.get(step_id, []) if p != path] + ([path] if change.kind == "A" else [])
                if paths:
                    index[step_id] = paths
                else:
                    index.pop(step_id, None)
        return index

    def blob(self, commit: str, path: str) -> str:
        entry = self.store.entry_at(commit, path)
        if entry is None:
            raise StoreError(f"no file {path} at {commit[:10]}")
        return entry.oid + ("@link" if entry.link else "")

    def parse(self, path: str, blob: str, link: bool = False) -> Step:
        """The step file `blob` at `path`: parsed in this push, or by an earlier one (the cache), or now."""
        link = link or blob.endswith("@link")
        blob = blob.removesuffix("@link")
        if link or self.cache is None:
            return self.files.step(path, blob, link)
        if (path, blob) not in self.parsed:
            step = self.cache.step(path, blob)
            if step is None:
                step = self.files.step(path, blob)
                self.cache.keep_step(blob, step)
            self.parsed[(path, blob)] = step
        return self.parsed[(path, blob)]

    def attempt_at(self, commit: str, path: str) -> int | None:
        if commit == ZERO or self.store.object_type(commit) != "commit":
            return None
        entry = self.store.entry_at(commit, path)
        found = self.parse(path, entry.oid) if entry is not None and not entry.link else None
        return found.attempt if found is not None and not found.problems else None
