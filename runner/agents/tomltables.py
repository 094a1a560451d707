"""Tables of a runner.toml edited in place: the text of some tables replaced, every other
byte (comments, order, other tables) kept as the person wrote it."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable

_HEADER_RE = re.compile(r"^\s*\[\[?\s*([^\[\]#]+?)\s*\]\]?\s*(#.*)?$")


def _line_states(lines: list[str]) -> list[bool]:
    """For each line: does it start at the top level (not inside a multi-line array, inline
    table or multi-line string)?"""
    states = []
    depth, in_ml = 0, ""
    for line in lines:
        states.append(depth == 0 and not in_ml)
        if depth == 0 and not in_ml and _HEADER_RE.match(line):
            continue
        i = 0
        while i < len(line):
            if in_ml:
                end = line.find(in_ml, i)
                if end < 0:
                    break
                i, in_ml = end + 3, ""
                continue
            ch = line[i]
            if ch == "#":
                break
            if line.startswith(('"""', "'''"), i):
                in_ml, i = line[i : i + 3], i + 3
                continue
            if ch in "\"'":
                j = i + 1
                while j < len(line) and line[j] != ch:
                    j += 2 if ch == '"' and line[j] == "\\" else 1
                i = j + 1
                continue
            if ch in "[{":
                depth += 1
            elif ch in "]}":
                depth = max(0, depth - 1)
            i += 1
    return states


def _table_name(header: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in header.split("."))


def segments(lines: list[str]) -> list[tuple[int, int, str]]:
    """(start, end, table name) of every table: its header, the comment lines right above it,
    and everything up to the next table's start. Lines before the first table are not a segment."""
    top = _line_states(lines)
    headers = [(i, _table_name(m.group(1))) for i, line in enumerate(lines) if top[i] and (m := _HEADER_RE.match(line))]
    starts = []
    previous_end = 0
    for index, name in headers:
        start = index
        while start > previous_end and top[start - 1] and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        starts.append((start, name))
        previous_end = index + 1
    return [
        (start, starts[k + 1][0] if k + 1 < len(starts) else len(lines), name) for k, (start, name) in enumerate(starts)
    ]


def replace_tables(toml_text: str, tables: str, replaced: Callable[[str], bool]) -> str:
    """Put `tables` (TOML text) in place of the tables of toml_text whose names are `replaced`,
    where the first of them was (else at the end). Every other byte stays."""
    lines = toml_text.splitlines(keepends=True)
    newline = "\r\n" if "\r\n" in toml_text else "\n"
    block = [line + newline for line in tables.rstrip("\n").split("\n")]
    out: list[str] = []
    placed = False
    cursor = 0
    for start, end, name in segments(lines):
        if not replaced(name):
            continue
        out += lines[cursor:start]
        cursor = end
        if not placed:
            segment = lines[start:end]
            out += block + segment[len(_rstrip_blank(segment)) :]  # keep the blank lines after it
            placed = True
    out += lines[cursor:]
    if not placed:
        if out and not out[-1].endswith("\n"):
            out[-1] += newline
        if out and out[-1].strip():
            out.append(newline)
        out += block
    result = "".join(out)
    try:
        tomllib.loads(result)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"runner.toml would not parse with these tables: {exc}") from exc
    return result


def _rstrip_blank(segment: list[str]) -> list[str]:
    end = len(segment)
    while end and not segment[end - 1].strip():
        end -= 1
    return segment[:end]
