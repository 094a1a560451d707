"""The scrubber: what a step printed is cleaned of secrets before it leaves the worker (a
heartbeat's output tail, a queue commit, a handoff, NOTES.md, a notice). Two kinds go:

- the values of the worker's secret environment variables: the names in `[secrets] env`, and
  every name that looks secret (TOKEN, SECRET, PASSWORD, API_KEY anywhere, or ending in _KEY),
  with the password of any URL in the environment (user:password@); each also as JSON, URL and
  base64 encode it. A value shorter than MIN_SECRET_CHARS is left alone: "true" or "1" would
  turn every output into redactions;
- token shapes (runner.core.shapes: detect-secrets' and a few more).

Each becomes `[redacted: NAME]` (the variable's name, or the shape's). A text cut from a longer
one (a log's tail, a reason clipped in the middle) may start or stop inside a secret: at a cut,
a piece of a secret value of at least MIN_FRAGMENT_CHARS goes too, and so does a long token-like
word, which no shape can recognise once it lost its start. `[secrets] allow` lists known false
positives, never redacted.
"""

from __future__ import annotations

import bisect
import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from runner.core.limits import CLIP_MARKER
from runner.core.machine import Event
from runner.core.shapes import TOKEN_CHARS, Shape, shapes

MIN_SECRET_CHARS = 8
MIN_FRAGMENT_CHARS = 6
CUT_TOKEN_CHARS = 20  # a token-like word this long at a cut is taken for a piece of a token
REDACTED = "[redacted: {}]"
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_?KEY|_KEY$")
_URL_PASSWORD = re.compile(r"[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]*:([^/\s@]+)@")
_CUT_WORD_START = re.compile(f"^[{TOKEN_CHARS}+=.]{{{CUT_TOKEN_CHARS},}}")
_CUT_WORD_END = re.compile(f"[{TOKEN_CHARS}+=.]{{{CUT_TOKEN_CHARS},}}$")
_MARKER = re.compile(re.escape(CLIP_MARKER).replace(r"\{cut:,\}", r"[0-9,]+"))


def looks_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(name.upper()))


def secret_values(environ: Mapping[str, str], names: Iterable[str] = ()) -> dict[str, str]:
    """{value: the variable's name} of the secrets in `environ`: the `names` given, names that
    look secret, and passwords in URLs; values shorter than MIN_SECRET_CHARS are not secrets."""
    wanted = set(names)
    found: dict[str, str] = {}
    for name, value in sorted(environ.items()):
        if (name in wanted or looks_secret(name)) and len(value) >= MIN_SECRET_CHARS:
            found.setdefault(value, name)
        for match in _URL_PASSWORD.finditer(value):
            if len(match.group(1)) >= MIN_SECRET_CHARS:
                found.setdefault(match.group(1), name)
    return found


def encodings(value: str) -> set[str]:
    """The ways a value is often printed: itself, JSON-escaped, URL-encoded, and base64 (its
    three alignments inside a longer encoded text, the characters that depend on neighbours
    left out)."""
    import base64
    from urllib.parse import quote

    found = {value, json.dumps(value, ensure_ascii=False)[1:-1], quote(value, safe="")}
    data = value.encode("utf-8")
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + data).decode("ascii")
        start = (shift * 4 + 2) // 3  # characters that hold a bit of what comes before
        core = encoded[start : (4 * (shift + len(data))) // 3]  # and not of what comes after
        if len(core) >= MIN_SECRET_CHARS:
            found.add(core)
    return {text for text in found if len(text) >= MIN_SECRET_CHARS}


@dataclass(frozen=True)
class Finding:
    start: int
    end: int
    name: str


class Scrubber:
    def __init__(
        self,
        values: Mapping[str, str],
        allow: Iterable[str] = (),
        token_shapes: Iterable[Shape] | Callable[[], Iterable[Shape]] = (),
    ):
        self.allow = frozenset(allow)
        variants: dict[str, str] = {}
        for value, name in values.items():
            if value not in self.allow:
                for text in encodings(value):
                    variants.setdefault(text, name)
        self.variants = sorted(variants.items(), key=lambda item: -len(item[0]))  # the longest first
        self._shapes = token_shapes  # read on the first text to scan: a claim scans none

    @functools.cached_property
    def shapes(self) -> tuple[Shape, ...]:
        return tuple(self._shapes() if callable(self._shapes) else self._shapes)

    @functools.cached_property
    def folded(self) -> bool:
        return any(shape.folded for shape in self.shapes)

    def findings(self, text: str) -> list[Finding]:
        """Every secret in `text` (overlaps merged), but what `[secrets] allow` lists."""
        spans: list[Finding] = []
        for variant, name in self.variants:
            at = text.find(variant)
            while at >= 0:
                spans.append(Finding(at, at + len(variant), name))
                at = text.find(variant, at + len(variant))
        lowered = text.lower() if self.folded else None
        for shape in self.shapes:
            spans += [
                Finding(start, end, shape.name)
                for start, end in shape.spans(text, lowered)
                if text[start:end] not in self.allow
            ]
        return _merged(spans)

    def scrub(self, text: str, cut_start: bool = False) -> str:
        """`text` with every secret replaced by `[redacted: NAME]`; `cut_start`: the text was cut
        from a longer one at its start (a tail), so it may begin inside a secret."""
        if not text:
            return text
        spans = self.findings(text)
        spans += self._at_cuts(text, cut_start)
        if not spans:
            return text
        out, at = [], 0
        for found in _merged(spans):
            out += [text[at : found.start], REDACTED.format(found.name)]
            at = found.end
        return "".join(out) + text[at:]

    def _at_cuts(self, text: str, cut_start: bool) -> list[Finding]:
        """Pieces of secrets at the places `text` was cut: its start (with `cut_start`) and
        around each clip marker (runner.core.limits.clip)."""
        found: list[Finding] = []
        starts = [0] if cut_start else []
        ends = []
        for marker in _MARKER.finditer(text):
            ends.append(marker.start())
            starts.append(marker.end())
        for at in starts:
            if (end := self._piece_after(text, at)) is not None:
                found.append(Finding(at, end, "cut"))
        for at in ends:
            if (start := self._piece_before(text, at)) is not None:
                found.append(Finding(start, at, "cut"))
        return found

    def _piece_after(self, text: str, at: int) -> int | None:
        for variant, _ in self.variants:
            for size in range(len(variant) - 1, MIN_FRAGMENT_CHARS - 1, -1):
                if text.startswith(variant[-size:], at):
                    return at + size
        word = _CUT_WORD_START.match(text[at : at + 4096])
        return at + word.end() if word and _random_looking(word.group()) else None

    def _piece_before(self, text: str, at: int) -> int | None:
        for variant, _ in self.variants:
            for size in range(len(variant) - 1, MIN_FRAGMENT_CHARS - 1, -1):
                if text.endswith(variant[:size], 0, at):
                    return at - size
        word = _CUT_WORD_END.search(text[max(0, at - 4096) : at])
        return at - len(word.group()) if word and _random_looking(word.group()) else None


def _random_looking(word: str) -> bool:
    """Two of lowercase, uppercase and digits: a token's piece (random characters almost never
    keep to one of them), not a word, a name or a row of one character."""
    return sum((any(c.islower() for c in word), any(c.isupper() for c in word), any(c.isdigit() for c in word))) >= 2


def _merged(spans: list[Finding]) -> list[Finding]:
    merged: list[Finding] = []
    for found in sorted(spans, key=lambda f: (f.start, -f.end)):
        if merged and found.start < merged[-1].end:
            last = merged[-1]
            merged[-1] = Finding(last.start, max(last.end, found.end), last.name)
        else:
            merged.append(found)
    return merged


def tail_text(data: bytes, cut: bool) -> tuple[str, bool]:
    """The text of a file's tail, and whether it still starts inside a line: read from the
    middle of a file (`cut`), it starts after its first line break when that is in its first
    half (as limits.clip_tail), so no secret is cut in two at its start but in a line longer
    than that (the caller scrubs such a tail with cut_start)."""
    if cut and 0 <= (newline := data.find(b"\n")) < len(data) // 2:
        return data[newline + 1 :].decode("utf-8", "replace"), False
    return data.decode("utf-8", "replace"), cut


def lines_holding(scrubber: Scrubber, lines: list[str], which: list[int] | None = None) -> list[tuple[int, str]]:
    """(line number, what) of the secrets in `lines` (only those `which` names), in one scan."""
    which = list(range(len(lines))) if which is None else which
    starts, at = [], 0
    for index in which:
        starts.append(at)
        at += len(lines[index]) + 1
    text = "\n".join(lines[index] for index in which)
    return [(which[bisect.bisect_right(starts, found.start) - 1] + 1, found.name) for found in scrubber.findings(text)]


def added_lines_holding(scrubber: Scrubber, old: bytes | None, new: bytes) -> list[tuple[int, str]]:
    """(line number, what) of the secrets in the lines `new` adds to `old` (a file's two
    versions); none in a binary file."""
    if b"\0" in new[:8192]:
        return []
    lines = new.decode("utf-8", "replace").splitlines()
    kept = set(old.decode("utf-8", "replace").splitlines()) if old else set()
    return lines_holding(scrubber, lines, [i for i, line in enumerate(lines) if line not in kept])


def scrubbed(value: Any, scrubber: Scrubber) -> Any:
    """Every text in `value` (a text, or lists and tables of them) scrubbed."""
    if isinstance(value, str):
        return scrubber.scrub(value)
    if isinstance(value, (list, tuple)):
        return type(value)(scrubbed(item, scrubber) for item in value)
    if isinstance(value, dict):
        return {key: scrubbed(item, scrubber) for key, item in value.items()}
    return value


def scrub_event(event: Event, scrubber: Scrubber) -> Event:
    """An event with the texts it carries from a step's output scrubbed (its reason, notes, runs
    and the verdict it keeps): what a queue commit, a step file, NOTES.md and a notice say."""
    return replace(
        event,
        reason=scrubbed(event.reason, scrubber),
        notes=scrubbed(event.notes, scrubber),
        runs=scrubbed(event.runs, scrubber),
        metrics=scrubbed(event.metrics, scrubber),
    )


# --- the scrubber of this process ---------------------------------------------------------

_made: dict[tuple, Scrubber] = {}
_last: list = [None]  # the [secrets] table last asked for


def for_config(section: Any = None, environ: Mapping[str, str] | None = None) -> Scrubber:
    """The scrubber of `section` ([secrets] of runner.toml; None: the one last asked for in this
    process) over this process's environment, made once per distinct input."""
    if section is None:
        section = _last[0]
    else:
        _last[0] = section
    names = tuple(getattr(section, "env", ()))
    allow = tuple(getattr(section, "allow", ()))
    values = secret_values(os.environ if environ is None else environ, names)
    key = (tuple(sorted(values.items())), allow)
    if key not in _made:
        if len(_made) > 16:
            _made.clear()
        _made[key] = Scrubber(values, allow, shapes)
    return _made[key]
