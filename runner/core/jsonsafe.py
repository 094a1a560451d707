"""JSON read from what others wrote (a verifier's verdict, a commit's trailers, a heartbeat),
read so that hostile input is refused as invalid and never crashes a reader: nesting is
bounded before the parser recurses, a number too long to convert is an error like any other,
and a key given twice is ambiguous (a verdict whose last "pass" wins is not a verdict)."""

from __future__ import annotations

import json
import re
from typing import Any

from runner.core.limits import MAX_JSON_DEPTH

_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET_RE = re.compile(r"[\[\]{}]")


class JsonError(ValueError):
    """JSON runner will not read, with why."""


def depth(text: str) -> int:
    """How deeply `text`'s arrays and objects nest (strings skipped)."""
    deepest = level = 0
    for match in _BRACKET_RE.finditer(_STRING_RE.sub('""', text)):
        level += 1 if match.group() in "[{" else -1
        deepest = max(deepest, level)
    return deepest


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise JsonError(f"the key {key[:40]!r} appears twice (ambiguous)")
        found[key] = value
    return found


def loads(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """json.loads, or JsonError (a ValueError) saying what is wrong."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if ("[" in text or "{" in text) and depth(text) > max_depth:
        raise JsonError(f"nested deeper than {max_depth} levels")
    try:
        return json.loads(text, object_pairs_hook=_unique)
    except JsonError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:  # e.g. a number of 5,000 digits
        raise JsonError(" ".join(str(exc).split())[:200] or type(exc).__name__) from None
