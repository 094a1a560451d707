"""Names that reach refs, file names and commits: step ids, worker ids and people's
names. One function each, used by every command, the worker, the schedules and the hook.

Step and worker ids name refs (runner/steps/<id>, refs/runner/heartbeats/<id>) and
folders, so they follow git's ref-name rules on top of a safe character set: no
'..', no leading '.', no trailing '.' or '.lock', never '.' or '..' alone, and they
start with a letter or digit (never read as an option).
"""

from __future__ import annotations

import re

STEP_ID_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
WORKER_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
STEP_ID_RULE = "1 to 64 of a-z 0-9 . _ -, starting with a letter or digit"
WORKER_ID_RULE = "1 to 64 of A-Z a-z 0-9 . _ -, starting with a letter or digit"
MAX_PERSON = 100


def _ref_problem(value: str) -> str | None:
    if ".." in value:
        return "must not contain '..'"
    if value.endswith("."):
        return "must not end with '.'"
    if value.endswith(".lock"):
        return "must not end with '.lock' (git reserves it for lock files)"
    return None


def step_id_problem(step_id: object) -> str | None:
    """Why `step_id` is not a valid step id, or None."""
    if not isinstance(step_id, str) or not STEP_ID_RE.fullmatch(step_id):
        return f"step id {step_id!r} is not allowed: use {STEP_ID_RULE}"
    if problem := _ref_problem(step_id):
        return f"step id {step_id!r} {problem}"
    return None


def worker_id_problem(worker_id: object) -> str | None:
    """Why `worker_id` is not a valid worker id, or None."""
    if not isinstance(worker_id, str) or not WORKER_ID_RE.fullmatch(worker_id):
        return f"worker id {worker_id!r} is not allowed: use {WORKER_ID_RULE} (it names refs, files and units)"
    if problem := _ref_problem(worker_id):
        return f"worker id {worker_id!r} {problem}"
    return None


def person_problem(name: object) -> str | None:
    """Why `name` cannot stand for a person in a commit (--by), or None. Spaces are fine;
    line breaks, control characters and '<' '>' (they would forge a commit header) are not."""
    if not isinstance(name, str) or not name.strip():
        return "a person's name must not be empty"
    if name != name.strip():
        return f"name {name!r} must not start or end with spaces"
    if len(name) > MAX_PERSON:
        return f"name {name[:20]!r}... is longer than {MAX_PERSON} characters"
    if any(ord(c) < 32 or ord(c) == 127 for c in name) or "<" in name or ">" in name:
        return f"name {name!r} must not contain line breaks, control characters, '<' or '>'"
    return None
