"""`touches:`: the files a step says it changes, as globs (issue 32, point 2). With `[queue]
touches_exclusive` (the default), a worker does not claim a ready step whose globs overlap
those of a step that is claimed: two steps that would change the same files do not run at
once, so their records do not conflict. It is a scheduling preference that never deadlocks:
the held step waits only for a holder, which ends (done, failed, released or taken over).

A glob is a path relative to the repository, `/`-separated: `*`, `?` and `[...]` match within
one path segment, `**` matches any number of segments, and a glob with no wildcard names a
file or a whole folder (`src/parser` covers `src/parser/lexer.py`). Two globs overlap when a
path could match both; the check errs towards "overlap" (the steps then run one after the
other) and never says two globs are apart when a path matches both. It walks the product of
the two globs' automata, so it costs at most the product of their segments (which
runner.core.limits bounds), never a backtracking search.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from runner.core.limits import MAX_GLOB_BYTES, MAX_GLOB_SEGMENTS, MAX_GLOB_STARS, MAX_TOUCH_SEGMENTS, MAX_TOUCHES

_WILD = re.compile(r"[*?\[]")


def glob_problems(key: str, value: Any) -> list[str]:
    """What is wrong with a `touches:` value (a list of relative globs), one line each."""
    if not isinstance(value, list) or not all(isinstance(glob, str) for glob in value):
        return [f"{key} must be a list of globs (paths relative to the repository, e.g. src/parser/**)"]
    if len(value) > MAX_TOUCHES:
        return [f"{key} lists {len(value)} globs, over the {MAX_TOUCHES} a step may declare"]
    problems, total = [], 0
    for glob in value:
        parts = glob.split("/")
        segments = [part for part in parts if part not in ("", ".")]
        total += len(segments)
        if not glob.strip() or len(glob.encode("utf-8", "surrogatepass")) > MAX_GLOB_BYTES:
            problems.append(f"{key}: {glob[:40]!r} must be a glob of 1 to {MAX_GLOB_BYTES} bytes")
        elif glob.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", glob) or ".." in parts or "\\" in glob:
            problems.append(f"{key}: {glob!r} must be a relative path inside the repository, written with /")
        elif len(segments) > MAX_GLOB_SEGMENTS or segments.count("**") > MAX_GLOB_STARS:
            stars = segments.count("**")
            problems.append(
                f"{key}: {glob[:40]!r} has {len(segments)} segments, {stars} of them `**`: a glob has at "
                f"most {MAX_GLOB_SEGMENTS}, and at most {MAX_GLOB_STARS} `**`"
            )
    if total > MAX_TOUCH_SEGMENTS and not problems:
        problems.append(
            f"{key}: its globs have {total} segments in all, over the {MAX_TOUCH_SEGMENTS} a step may "
            "declare (a claim compares them with every claimed step's)"
        )
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


class _Glob:
    """A glob's segments as the overlap check reads them: each `**`, or a pattern with its
    literal head and tail (a plain name is all head and tail)."""

    def __init__(self, segments: tuple[str, ...]):
        self.segments = segments
        self.star_at = [j for j, part in enumerate(segments) if part == "**"]
        self.stars = sum(1 << j for j in self.star_at)
        self.wild = [bool(_WILD.search(part)) for part in segments]
        self.ends = [_ends(part) for part in segments]

    def closed(self, mask: int) -> int:
        """`mask` (a set of positions) with the position after each `**` in it: `**` matches nothing too."""
        for j in self.star_at:  # in order: a run of them passes a position on
            if mask >> j & 1:
                mask |= 1 << (j + 1)
        return mask


@lru_cache(maxsize=4096)
def _compiled(segments: tuple[str, ...]) -> _Glob:
    return _Glob(segments)


@lru_cache(maxsize=65536)
def _overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """The product of the two globs' automata, one row of `a` at a time: row i holds, as a bit
    mask, the positions of `b` a path prefix can reach while `a` is at position i. Each row is
    made from the one before it (a `**` of `a` also from itself), so it costs len(a) * len(b)
    steps at most, never a backtracking search."""
    ga, gb = _compiled(a), _compiled(b)
    m = len(b)
    everything = (1 << (m + 1)) - 1
    row = gb.closed(1)
    for i, part in enumerate(a):
        if not row:
            return False
        if part == "**":  # any number of segments: b moves on from the first position reached, as far as it goes
            row = gb.closed(everything & ~((row & -row) - 1))
            continue
        nxt = row & gb.stars  # one of b's `**` takes the segment a's pattern takes
        patterns = row & ~gb.stars & ((1 << m) - 1)
        while patterns:
            low = patterns & -patterns
            if _parts_overlap(ga, i, gb, low.bit_length() - 1):
                nxt |= low << 1
            patterns ^= low
        row = gb.closed(nxt)
    return bool(row >> m & 1)


def _ends(part: str) -> tuple[str, str]:
    wild = _WILD.search(part)
    if not wild:
        return part, part
    return part[: wild.start()], re.split(r"[*?\]]", part)[-1]


def _parts_overlap(ga: _Glob, i: int, gb: _Glob, j: int) -> bool:
    """Could one path segment match both patterns? Exact for a plain name; otherwise the
    parts before the first wildcard and after the last must agree (errs towards yes)."""
    if not ga.wild[i] or not gb.wild[j]:
        return (
            fnmatch.fnmatchcase(ga.segments[i], gb.segments[j])
            if not ga.wild[i]
            else fnmatch.fnmatchcase(gb.segments[j], ga.segments[i])
        )
    (head_a, tail_a), (head_b, tail_b) = ga.ends[i], gb.ends[j]
    return (head_a.startswith(head_b) or head_b.startswith(head_a)) and (
        tail_a.endswith(tail_b) or tail_b.endswith(tail_a)
    )


def overlapping(mine: Iterable[str], theirs: Iterable[str]) -> tuple[str, str] | None:
    """The first pair of globs, one of each list, that overlap; None when they are apart."""
    return _first_overlap(tuple(mine), tuple(theirs))


@lru_cache(maxsize=1024)
def _first_overlap(mine: tuple[str, ...], theirs: tuple[str, ...]) -> tuple[str, str] | None:
    """Kept per pair of steps' globs: a daemon or the board decides the same pairs again."""
    return next(((m, t) for m in mine for t in theirs if overlap(m, t)), None)


def outside(globs: Iterable[str], paths: Iterable[str]) -> list[str]:
    """The paths that no glob covers."""
    globs = list(globs)
    return [path for path in paths if not any(covers(glob, path) for glob in globs)]
