"""Conflict markers a resolver left behind (a resolve pass, or an agent resolving its hand-in):
every line that git's own check (`git diff --check`) calls a conflict marker, `<<<<<<<`,
`|||||||`, `=======` or `>>>>>>>` at the file's conflict-marker-size (7 unless .gitattributes
says otherwise; longer runs too, as git writes for nested conflicts) followed by a space or the
line's end, and found in neither parent's version of the file: a file that legitimately holds
such a line (a reST underline of `=`) keeps it. Deleting only the `<<<<<<<` and `>>>>>>>` lines
leaves `=======` and both sides, and is caught."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from runner.store import Workspace

DEFAULT_SIZE = 7
MARKERS_LEFT = (
    "Conflict markers are left in {paths}: lines of <<<<<<<, |||||||, ======= or >>>>>>> that neither side of the "
    "merge has. Resolve each conflict so that both this step's change and the work on the new tip are kept, remove "
    "every marker line, and hand it in again."
)
MARKER_CHARS = b"<|=>"


def is_marker(line: bytes, size: int = DEFAULT_SIZE) -> bool:
    """A line of at least `size` of one marker character, then whitespace or nothing."""
    if len(line) < size or line[0] not in MARKER_CHARS:
        return False
    run = len(line) - len(line.lstrip(line[:1]))
    return run >= size and (run == len(line) or line[run : run + 1].isspace())


def marker_lines(data: bytes | None, size: int = DEFAULT_SIZE) -> set[bytes]:
    return {line.rstrip(b"\r") for line in (data or b"").split(b"\n") if is_marker(line, size)}


def marker_sizes(store: Workspace, worktree: Path, paths: Iterable[str]) -> dict[str, int]:
    """Each path's conflict-marker-size, as git reads its attributes in the worktree."""
    paths = list(paths)
    sizes = dict.fromkeys(paths, DEFAULT_SIZE)
    for path, value in store.attribute(worktree, paths, "conflict-marker-size").items():
        if value.isdigit() and int(value) > 0:
            sizes[path] = int(value)
    return sizes


def markers_left(store: Workspace, worktree: Path, paths: Iterable[str], sides: Iterable[str]) -> list[str]:
    """The paths whose worktree file holds a conflict-marker line that neither `sides` (the
    merge's parents) has in that file."""
    paths, sides = list(paths), list(sides)
    sizes = marker_sizes(store, worktree, paths)
    left = []
    for path in paths:
        try:
            data = (worktree / path).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue  # resolved by deleting it
        found = marker_lines(data, sizes[path])
        for side in sides:
            if found:
                found -= marker_lines(store.file_at(side, path), sizes[path])
        if found:
            left.append(path)
    return left
