"""`runner import DIR`: bring plans people already write onto the queue branch.

Two layouts: the plan-authoring one (`NN-slug.md` files with `step`, `title`,
`depends_on`, `status`, maybe beside NOTES.md and handoffs/) and a DAG folder
(`root.md` plus `step-<n>.md` files with `id`, `name`, `depends_on`). Files keep their
bytes, except that runner-managed keys are normalised (a status runner does not know
becomes its nearest runner status). Only regular files inside the folder are read:
a symlink, a FIFO or a device named *.md is refused, never followed or waited on.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from runner.core.errors import BadInput
from runner.core.ids import worker_id_problem
from runner.core.layout import FANOUT_FROM, HANDOFFS_DIR, NOTES_FILE, ROOT_FILE, STEPS_DIR, new_step_path
from runner.core.limits import MAX_STEP_BYTES
from runner.core.model import STORED_STATUSES, Status, parse_time
from runner.core.plan import Plan
from runner.core.stepfile import FRONTMATTER_LINE, load_yaml, parse_step, set_fields, split_frontmatter

STATUS_ALIASES = {
    "todo": Status.READY,
    "pending": Status.READY,
    "open": Status.READY,
    "not_started": Status.READY,
    "in_progress": Status.CLAIMED,
    "in-progress": Status.CLAIMED,
    "completed": Status.DONE,
    "complete": Status.DONE,
    "blocked": Status.READY,
    "error": Status.FAILED,
}
SKIPPED_NAMES = ("root.md", "NOTES.md", "README.md")


def regular_file_problem(path: Path, inside: Path) -> str | None:
    """Why `path` is not a regular file inside `inside` (never follows a link, never opens a FIFO)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        return f"{path}: cannot be read ({exc.strerror})"
    if stat.S_ISLNK(mode):
        return f"{path}: is a symlink (plan files must be regular files inside the folder)"
    if not stat.S_ISREG(mode):
        return f"{path}: is not a regular file"
    if inside.resolve() not in path.resolve().parents:
        return f"{path}: is outside {inside} (reached through a symlinked folder)"
    return None


def read_regular(path: Path, inside: Path, limit: int = MAX_STEP_BYTES) -> bytes:
    if problem := regular_file_problem(path, inside):
        raise BadInput(problem)
    no_follow = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    with open(path, "rb", opener=lambda p, flags: os.open(p, flags | no_follow)) as handle:
        data = handle.read(limit + 1)
    return data


def find_plan_files(folder: Path) -> tuple[dict[str, Path], dict[str, Path], Path]:
    """(step files by their path below the steps folder, other files by queue path, the folder)."""
    folder = folder.resolve()
    if not folder.is_dir():
        raise BadInput(f"{folder}: not a folder")
    steps_dir = folder
    if (folder / "steps").is_dir():
        steps_dir = folder / "steps"
    elif (folder / "plans" / "steps").is_dir():
        folder = folder / "plans"
        steps_dir = folder / "steps"
    extras: dict[str, Path] = {}
    for name, target in (("root.md", ROOT_FILE), ("NOTES.md", NOTES_FILE)):
        for base in (folder, steps_dir, steps_dir.parent):
            if os.path.lexists(base / name):
                extras[target] = base / name
                break
    for base in (folder / "handoffs", steps_dir.parent / "handoffs"):
        if base.is_dir() and not base.is_symlink():
            for path in sorted(base.glob("*.md")):
                extras[f"{HANDOFFS_DIR}/{path.name}"] = path
    steps: dict[str, Path] = {}
    for path in sorted(steps_dir.rglob("*.md")):
        relative = path.relative_to(steps_dir)
        if path.name in SKIPPED_NAMES or "handoffs" in relative.parts:
            continue
        steps[relative.as_posix()] = path
    if not steps:
        raise BadInput(f"{folder}: no step files (*.md) found")
    return steps, extras, folder


def import_files(folder: Path, existing: Plan, progress=None) -> tuple[dict[str, bytes], list[str]]:
    """The files to commit and a summary; BadInput listing every problem found.
    `progress(done, total)` hears how far the reading is."""
    step_paths, extras, root = find_plan_files(folder)
    fanned = len(existing.steps) + len(existing.invalid) + len(step_paths) >= FANOUT_FROM or _is_fanned(existing)
    files: dict[str, bytes] = {}
    sources: dict[str, Path] = {}
    parsed = []
    problems: list[str] = []
    for number, (relative, source) in enumerate(step_paths.items(), 1):
        if progress and (number % 250 == 0 or number == len(step_paths)):
            progress(number, len(step_paths))
        if problem := regular_file_problem(source, root):
            problems.append(problem)
            continue
        data = normalise(read_regular(source, root))
        step = parse_step(f"{STEPS_DIR}/{relative}", data)
        dag_id = step.meta.get("id") if "step" not in step.meta else None
        if dag_id is not None and str(dag_id) != step.id:
            # A DAG plan names files step-<n>.md and puts the id inside: file it under its id.
            step = parse_step(f"{STEPS_DIR}/{dag_id}.md", data)
        if step.problems:
            problems += [f"{source}: {p}" for p in step.problems]
            continue
        if (there := existing.find(step.id)) is not None:
            problems.append(f"{source}: step {step.id!r} is already on the queue ({there.path})")
            continue
        queue_path = new_step_path(step.id, fanned) if fanned or dag_id is not None else f"{STEPS_DIR}/{relative}"
        files[queue_path] = data
        sources[queue_path] = source
        parsed.append(parse_step(queue_path, data))
    merged = Plan.build([*existing.steps.values(), *parsed])
    for step in merged.invalid:
        if step.path in files:
            problems += [f"{sources.get(step.path, step.path)}: {p}" for p in step.problems]
    for queue_path, source in extras.items():
        try:
            files[queue_path] = read_regular(source, source.parent)
        except BadInput as exc:
            problems += exc.problems
    if problems:
        raise BadInput(problems)
    return files, [f"{len(parsed)} steps", *(p for p in extras)]


def _is_fanned(plan: Plan) -> bool:
    step = next(iter(plan.steps.values()), None)
    return step is not None and step.path == new_step_path(step.id, True)


def normalise(data: bytes) -> bytes:
    """Map statuses of other tools to runner's. A claim keeps its assignee and time (a claim
    older than the lease, never seen heartbeating, is taken over at once); one that does
    not name a worker runner could hold becomes ready."""
    try:
        text = data.decode("utf-8")
        parts = split_frontmatter(text)
        meta = (load_yaml(parts[0], FRONTMATTER_LINE) or {}) if parts is not None else None
    except Exception:  # noqa: BLE001 (every fault ends here, reported, never a traceback for the user)
        return data  # parse_step reports what is wrong with it
    if not isinstance(meta, dict):
        return data
    status = meta.get("status", Status.READY)
    updates: dict[str, Any] = {}
    if status not in STORED_STATUSES:
        updates["status"] = status = STATUS_ALIASES.get(str(status).lower(), Status.READY)
    holder_ok = worker_id_problem(meta.get("assignee")) is None and parse_time(meta.get("claimed_at")) is not None
    if status == Status.CLAIMED and not holder_ok:
        updates["status"] = status = Status.READY
    if status != Status.CLAIMED and (meta.get("assignee") or meta.get("claimed_at")):
        updates.update({"assignee": None, "claimed_at": None})
    return set_fields(text, updates).encode("utf-8") if updates else data
