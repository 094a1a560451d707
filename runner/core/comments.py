"""A reviewer's comments on lines of a step's result, declared once: what one is (the file, the
line or range of lines, the person's words, and those lines' text as the reviewer saw them),
how `FILE:LINE` / `FILE:START-END` is read, the bounds, the feedback the next attempt reads,
and whether that attempt addressed each one.

A comment is a dict (it travels in the `Runner-Comments` trailer as JSON and is kept in the
step file's `review_comments`): `{"file", "line", "end", "text", "line_text"}`. Every text in it
is hostile input (a browser or a terminal sent it): `normalized` bounds it and makes control
characters visible escapes, and is idempotent, so the hook's replay of a reject writes the
same step file byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from runner.core.limits import KIB, clip

MAX_COMMENTS = 30  # in one rejection
MAX_COMMENT_BYTES = 2 * KIB  # a comment's words
MAX_LINE_TEXT_BYTES = 1 * KIB  # the commented lines' text, as the reviewer saw them
MAX_PATH_BYTES = 256
MAX_RANGE = 200  # lines one comment may span
MAX_LINE = 10_000_000

_SPEC_RE = re.compile(r"(?P<file>.+):(?P<line>\d{1,8})(?:-(?P<end>\d{1,8}))?")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # tabs and line breaks stay


def _visible(text: str) -> str:
    return _CONTROL_RE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def path_problem(path: Any) -> str | None:
    """Why `path` is not a file of a repository a comment may name (None when it is)."""
    if not isinstance(path, str) or not path:
        return "names no file"
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        return f"a path of at most {MAX_PATH_BYTES} bytes"
    if _CONTROL_RE.search(path) or "\n" in path or "\t" in path:
        return "a path without control characters"
    if path.startswith(("/", "\\")) or ".." in re.split(r"[\\/]", path):
        return "a relative path inside the repository"
    return None


def parse_spec(spec: str) -> tuple[str, int, int]:
    """`FILE:LINE` or `FILE:START-END` -> (file, first line, last line); ValueError says why not."""
    match = _SPEC_RE.fullmatch(spec or "")
    if not match:
        raise ValueError(f"{_visible(spec)[:80]!r} is not FILE:LINE or FILE:START-END")
    path, line = match["file"], int(match["line"])
    end = int(match["end"]) if match["end"] else line
    if (why := path_problem(path)) is not None:
        raise ValueError(f"{_visible(spec)[:80]!r}: {why}")
    if line < 1 or end < line:
        raise ValueError(f"{spec!r}: lines count from 1, and a range ends at or after its start")
    if end - line + 1 > MAX_RANGE:
        raise ValueError(f"{spec!r}: a comment spans at most {MAX_RANGE} lines")
    return path, line, end


def make(path: str, line: int, end: int, text: str, line_text: str) -> dict[str, Any]:
    comment: dict[str, Any] = {"file": path, "line": line, "text": text, "line_text": line_text}
    if end != line:
        comment["end"] = end
    return normalized((comment,))[0]


def problems(comments: Any) -> list[str]:
    """Every problem of a list of comments as read from a trailer, a request or a step file."""
    if not isinstance(comments, (list, tuple)):
        return ["review comments must be a list"]
    found = [] if len(comments) <= MAX_COMMENTS else [f"at most {MAX_COMMENTS} review comments, not {len(comments)}"]
    for index, comment in enumerate(comments[:MAX_COMMENTS], 1):
        if not isinstance(comment, dict):
            found.append(f"comment {index} must be a table")
            continue
        if unknown := sorted(set(comment) - {"file", "line", "end", "text", "line_text"}):
            found.append(f"comment {index}: unknown keys {', '.join(map(repr, unknown))[:80]}")
        if (why := path_problem(comment.get("file"))) is not None:
            found.append(f"comment {index}: {why}")
        line: Any = comment.get("line")
        end: Any = comment.get("end", line)
        if not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_LINE for n in (line, end)):
            found.append(f"comment {index}: line (and end) must be whole numbers from 1")
        elif end < line or end - line + 1 > MAX_RANGE:
            found.append(f"comment {index}: a range ends at or after its start, at most {MAX_RANGE} lines")
        for key in ("text", "line_text"):
            if not isinstance(comment.get(key, ""), str):
                found.append(f"comment {index}: {key} must be text")
        if not str(comment.get("text") or "").strip():
            found.append(f"comment {index}: says nothing")
    return found


def normalized(comments: Any) -> tuple[dict[str, Any], ...]:
    """The comments within their bounds (idempotent): at most MAX_COMMENTS, each text clipped and
    its control characters escaped. Raises ValueError when they are not comments at all."""
    if found := problems(comments):
        raise ValueError("; ".join(found))
    out = []
    for comment in comments[:MAX_COMMENTS]:
        one: dict[str, Any] = {
            "file": comment["file"],
            "line": comment["line"],
            "text": clip(_visible(comment["text"]), MAX_COMMENT_BYTES),
            "line_text": clip(_visible(comment.get("line_text") or ""), MAX_LINE_TEXT_BYTES),
        }
        if comment.get("end", comment["line"]) != comment["line"]:
            one["end"] = comment["end"]
        out.append(one)
    return tuple(out)


def where(comment: dict[str, Any]) -> str:
    end = comment.get("end", comment["line"])
    return f"{comment['file']}:{comment['line']}" + (f"-{end}" if end != comment["line"] else "")


def lines_of(data: bytes | None, line: int, end: int) -> str | None:
    """Lines `line`..`end` of a file (None when the file or the lines are not there)."""
    if data is None:
        return None
    text = data.decode("utf-8", "replace").split("\n")
    if data.endswith(b"\n"):
        text.pop()
    if end > len(text):
        return None
    return "\n".join(text[line - 1 : end])


def section(comments: Any) -> str:
    """The comments as the next attempt reads them (in its feedback and its prompt)."""
    if not comments:
        return ""
    out = [f"## Review comments ({len(comments)}): address each one", ""]
    for index, comment in enumerate(comments, 1):
        out.append(f"{index}. {where(comment)}")
        if comment.get("line_text"):
            quoted = "\n".join("       > " + line for line in comment["line_text"].split("\n"))
            seen = "the lines as the reviewer saw them" if "end" in comment else "the line as the reviewer saw it"
            out.append(f"   {seen}:")
            out.append(quoted)
        out.append("   comment: " + comment["text"].replace("\n", "\n            "))
    return "\n".join(out)


def feedback_of(meta: dict[str, Any]) -> str:
    """What the next attempt is told: `last_error`, then the reviewer's comments on lines."""
    feedback = str(meta.get("last_error") or "")
    comments = meta.get("review_comments")
    if comments and not problems(comments):
        feedback = (feedback.rstrip() + "\n\n" if feedback else "") + section(comments)
    return feedback


def addressed(comment: dict[str, Any], now: bytes | None) -> bool:
    """Whether the next attempt addressed a comment: its lines changed (the file at that place no
    longer reads as the reviewer saw it, or the file is gone)."""
    return lines_of(now, comment["line"], comment.get("end", comment["line"])) != comment.get("line_text")


def report(comments: Any, read: Callable[[str], bytes | None]) -> str:
    """A handoff's section: "N of M addressed", then each comment with whether it was; `read(path)`
    gives a file of the new result (None when it is gone)."""
    if not comments or problems(comments):
        return ""
    marks = [addressed(c, read(c["file"])) for c in comments]
    lines = [f"{sum(marks)} of {len(marks)} addressed (a comment is addressed when its lines changed)", ""]
    for comment, done in zip(comments, marks):
        first = comment["text"].split("\n")[0][:200]
        lines.append(f"- [{'x' if done else ' '}] {where(comment)}: {first}")
    return "\n".join(lines)
