"""`touches:`: the files a step says it changes, as globs (issue 32, point 2). With `[queue]
touches_exclusive` (the default), a worker does not claim a ready step whose globs overlap
those of a step that is claimed: two steps that would change the same files do not run at
once, so their records do not conflict. It is a scheduling preference that never deadlocks:
the held step waits only for a holder, which ends (done, failed, released or taken over).

A glob is a path relative to the repository, `/`-separated: `*`, `?` and `[...]` match within
one path segment, `**` matches any number of segments, and a glob with no wildcard names a
file or a whole folder (`src/parser` covers `src/parser/lexer.py`). Two globs overlap when a
path could match both; the check errs towards "overlap" (the steps then run one after the
other) and never says two globs are apart when a path matches both.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from runner.core.limits import MAX_GLOB_BYTES, MAX_TOUCHES

_WILD = re.compile(r"[*?\[]")


def glob_problems(key: str, value: Any) -> list[str]:
    """What is wrong with a `touches:` value (a list of relative globs), one line each."""
    if not isinstance(value, list) or not all(isinstance(glob, str) for glob in value):
        return [f"{key} must be a list of globs (paths relative to the repository, e.g. src/parser/**)"]
    if len(value) > MAX_TOUCHES:
        return [f"{key} lists {len(value)} globs, over the {MAX_TOUCHES} a step may declare"]
    problems = []
    for glob in value:
        parts = glob.split("/")
        if not glob.strip() or len(glob.encode("utf-8", "surrogatepass")) > MAX_GLOB_BYTES:
            problems.append(f"{key}: {glob[:40]!r} must be a glob of 1 to {MAX_GLOB_BYTES} bytes")
        elif glob.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", glob) or ".." in parts or "\\" in glob:
            problems.append(f"{key}: {glob!r} must be a relative path inside the repository, written with /")
    return problems


def _segments(glob: str) -> tuple[str, ...]:
    parts = [part for part in glob.strip().split("/") if part not in ("", ".")]
    if parts and not any(_WILD.search(part) for part in parts):
        parts.append("**")  # a plain path is a file or a folder: everything below it too
    return tuple(parts)


def covers(glob: str, path: str) -> bool:
    """Does `glob` match the repository path `path`?"""
    return _match(_segments(glob), tuple(path.split("/")))


@lru_cache(maxsize=4096)
def _match(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    if not pattern:
        return not path
    if pattern[0] == "**":
        return _match(pattern[1:], path) or (bool(path) and _match(pattern, path[1:]))
    return bool(path) and fnmatch.fnmatchcase(path[0], pattern[0]) and _match(pattern[1:], path[1:])


def overlap(a: str, b: str) -> bool:
    """Could one path match both globs?"""
    return _overlap(_segments(a), _segments(b))


@lru_cache(maxsize=4096)
def _overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    if not a or not b:
        return a == b or all(part == "**" for part in a + b)
    if a[0] == "**" or b[0] == "**":
        double, other = (a, b) if a[0] == "**" else (b, a)
        return _overlap(double[1:], other) or _overlap(double, other[1:])
    return _segment_overlap(a[0], b[0]) and _overlap(a[1:], b[1:])


def _segment_overlap(a: str, b: str) -> bool:
    """Could one path segment match both patterns? Exact for a plain name; otherwise the
    parts before the first wildcard and after the last must agree (errs towards yes)."""
    wild_a, wild_b = _WILD.search(a), _WILD.search(b)
    if not wild_a or not wild_b:
        return fnmatch.fnmatchcase(a, b) if not wild_a else fnmatch.fnmatchcase(b, a)
    head_a, head_b = a[: wild_a.start()], b[: wild_b.start()]
    tail_a, tail_b = re.split(r"[*?\]]", a)[-1], re.split(r"[*?\]]", b)[-1]
    return (head_a.startswith(head_b)
            or head_b.startswith(head_a)) and (tail_a.endswith(tail_b) or tail_b.endswith(tail_a))


def overlapping(mine: Iterable[str], theirs: Iterable[str]) -> tuple[str, str] | None:
    """The first pair of globs, one of each list, that overlap; None when they are apart."""
    theirs = list(theirs)
    return next(((m, t) for m in mine for t in theirs if overlap(m, t)), None)


def outside(globs: Iterable[str], paths: Iterable[str]) -> list[str]:
    """The paths that no glob covers."""
    globs = list(globs)
    return [path for path in paths if not any(covers(glob, path) for glob in globs)]
