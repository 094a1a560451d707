"""`runner import DIR`: bring plans people already write onto the queue branch.

Two layouts: the plan-authoring one (`NN-slug.md` files with `step`, `title`,
`depends_on`, `status`, maybe beside NOTES.md and handoffs/) and a DAG folder
(`root.md` plus `step-<n>.md` files with `id`, `name`, `depends_on`). Files
keep their bytes, except that runner-managed keys are normalised (a status
runner does not know, or a claim with no live holder, becomes ready).
"""

from __future__ import annotations

from pathlib import Path

from runner.core.model import STORED_STATUSES, BadInput
from runner.core.plan import HANDOFFS_DIR, STEPS_DIR, Plan
from runner.core.stepfile import parse_step, set_fields

STATUS_ALIASES = {
    "todo": "ready",
    "pending": "ready",
    "open": "ready",
    "not_started": "ready",
    "in_progress": "ready",
    "in-progress": "ready",
    "claimed": "ready",  # no live holder comes with an imported file
    "completed": "done",
    "complete": "done",
    "blocked": "ready",
    "error": "failed",
}


def find_plan_files(folder: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """(step files by queue path, other files by queue path)."""
    folder = folder.resolve()
    if not folder.is_dir():
        raise BadInput(f"{folder}: not a folder")
    steps_dir = folder
    extras: dict[str, Path] = {}
    if (folder / "steps").is_dir():
        steps_dir = folder / "steps"
    elif (folder / "plans" / "steps").is_dir():
        folder = folder / "plans"
        steps_dir = folder / "steps"
    for name, target in (("root.md", "plans/root.md"), ("NOTES.md", "plans/NOTES.md")):
        for base in (folder, steps_dir, steps_dir.parent):
            if (base / name).is_file():
                extras[target] = base / name
                break
    for base in (folder / "handoffs", steps_dir.parent / "handoffs"):
        if base.is_dir():
            for path in sorted(base.glob("*.md")):
                extras[f"{HANDOFFS_DIR}/{path.name}"] = path
    steps: dict[str, Path] = {}
    for path in sorted(steps_dir.rglob("*.md")):
        if path.name in ("root.md", "NOTES.md", "README.md") or "handoffs" in path.relative_to(steps_dir).parts:
            continue
        rel = path.relative_to(steps_dir).as_posix()
        steps[f"{STEPS_DIR}/{rel}"] = path
    if not steps:
        raise BadInput(f"{folder}: no step files (*.md) found")
    return steps, extras


def import_files(folder: Path, existing: Plan) -> tuple[dict[str, bytes], list[str]]:
    """The files to commit and a summary; BadInput listing every problem found."""
    step_paths, extras = find_plan_files(folder)
    files: dict[str, bytes] = {}
    parsed = []
    problems: list[str] = []
    for queue_path, source in step_paths.items():
        if source.is_symlink():
            problems.append(f"{source}: is a symlink (step files must be regular files)")
            continue
        data = normalise(source.read_bytes())
        step = parse_step(queue_path, data)
        declared = step.meta.get("step", step.meta.get("id"))
        if declared is not None and str(declared) != step.id and not step.problems[1:]:
            # A DAG plan names files step-<n>.md and puts the id inside: file it under its id.
            queue_path = queue_path.rsplit("/", 1)[0] + f"/{declared}.md"
            step = parse_step(queue_path, data)
        if step.problems:
            problems += [f"{source}: {p}" for p in step.problems]
            continue
        if existing.find(step.id):
            problems.append(f"{source}: step {step.id!r} is already on the queue ({existing.find(step.id).path})")
            continue
        files[queue_path] = data
        parsed.append(parse_step(queue_path, data))
    merged = Plan.build([*existing.steps.values(), *parsed])
    for step in merged.invalid:
        if step.path in files:
            problems += [f"{step_paths.get(step.path, step.path)}: {p}" for p in step.problems]
    if problems:
        raise BadInput(problems)
    for queue_path, source in extras.items():
        files[queue_path] = source.read_bytes()
    return files, [f"{len(parsed)} steps", *(p for p in extras)]


def normalise(data: bytes) -> bytes:
    """Map statuses of other tools to runner's; drop claims that have no live holder."""
    from runner.core.stepfile import load_yaml, split_frontmatter

    try:
        text = data.decode("utf-8")
        meta = load_yaml(split_frontmatter(text)[0]) or {}
    except Exception:
        return data  # parse_step reports what is wrong with it
    if not isinstance(meta, dict):
        return data
    status = meta.get("status", "ready")
    updates = {}
    if status not in STORED_STATUSES or status == "claimed":
        updates["status"] = STATUS_ALIASES.get(str(status).lower(), "ready")
    if updates.get("status", status) != "claimed" and (meta.get("assignee") or meta.get("claimed_at")):
        updates.update({"assignee": None, "claimed_at": None})
    return set_fields(text, updates).encode("utf-8") if updates else data
