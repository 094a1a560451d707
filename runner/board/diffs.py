"""A step's diff as the board shows it: per file (its status, what it adds and deletes), each
hunk's lines numbered on both sides, so a reviewer can comment on a line of the result; and a
whole file of the result on demand (context beyond the hunks). Read only, bounded."""

from __future__ import annotations

import re
from typing import Any

from runner.core.comments import path_problem
from runner.core.errors import BadInput

MAX_FILE_BYTES = 512 * 1024  # a whole file shown on demand
MAX_FILES = 300  # files listed from one diff (the rest are counted)
_HUNK_RE = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)")
_GIT_RE = re.compile(r"diff --git a/(.*) b/(.*)")


def parse(text: str) -> dict[str, Any]:
    """`git diff` output -> {"files": [{path, old_path, status, binary, adds, dels, hunks}], "more": n}."""
    files: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    hunk: dict[str, Any] | None = None
    old = new = 0
    more = 0
    for line in text.split("\n"):
        if line.startswith("diff --git "):
            if len(files) >= MAX_FILES:
                more += 1
                current = hunk = None
                continue
            match = _GIT_RE.fullmatch(line)
            path = match.group(2) if match else line[len("diff --git ") :]
            current = {
                "path": path,
                "old_path": match.group(1) if match else path,
                "status": "modified",
                "binary": False,
                "adds": 0,
                "dels": 0,
                "hunks": [],
            }
            files.append(current)
            hunk = None
            continue
        if current is None:
            continue
        if hunk is None:
            if line.startswith("new file mode"):
                current["status"] = "added"
            elif line.startswith("deleted file mode"):
                current["status"] = "deleted"
            elif line.startswith("rename from "):
                current["status"], current["old_path"] = "renamed", line[len("rename from ") :]
            elif line.startswith("rename to "):
                current["path"] = line[len("rename to ") :]
            elif line.startswith("Binary files "):
                current["binary"] = True
            elif line.startswith("+++ ") and line[4:] != "/dev/null":
                current["path"] = line[6:] if line.startswith("+++ b/") else current["path"]
        if (match := _HUNK_RE.fullmatch(line)) is not None:
            old, new = int(match.group(1)), int(match.group(3))
            hunk = {"header": line, "lines": []}
            current["hunks"].append(hunk)
            continue
        if hunk is None or line.startswith("\\"):
            continue
        if line.startswith("+"):
            hunk["lines"].append({"kind": "add", "old": None, "new": new, "text": line[1:]})
            new += 1
            current["adds"] += 1
        elif line.startswith("-"):
            hunk["lines"].append({"kind": "del", "old": old, "new": None, "text": line[1:]})
            old += 1
            current["dels"] += 1
        elif line.startswith(" ") or line == "":
            if line == "" and not hunk["lines"]:
                continue
            hunk["lines"].append({"kind": "ctx", "old": old, "new": new, "text": line[1:]})
            old += 1
            new += 1
    for entry in files:  # a trailing empty context line is the split's, not the file's
        for each in entry["hunks"]:
            while each["lines"] and each["lines"][-1]["kind"] == "ctx" and each["lines"][-1]["text"] == "":
                each["lines"].pop()
    return {"files": files, "more": more}


def whole_file(store, commit: str | None, path: str) -> dict[str, Any]:
    """A file of the result, whole (clipped at MAX_FILE_BYTES): {"path", "lines", "clipped", "binary"}."""
    if (why := path_problem(path)) is not None:
        raise BadInput(f"path {path[:80]!r}: {why}")
    if not commit:
        raise BadInput("this step has no result yet")
    try:
        data = store.file_at(commit, path)
    except Exception:  # noqa: BLE001 - git cannot read it: the result does not have it
        data = None
    if data is None:
        raise BadInput(f"{path} is not in the result {commit[:10]}")
    clipped = max(0, len(data) - MAX_FILE_BYTES)
    binary = b"\0" in data[:8000]
    text = "" if binary else data[:MAX_FILE_BYTES].decode("utf-8", "replace")
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return {"path": path, "commit": commit, "lines": lines, "clipped": clipped, "binary": binary}
