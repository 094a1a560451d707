"""The vocabulary of runner: steps, statuses, durations, timestamps."""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, cast


class Status(StrEnum):
    """What a step file's `status:` may say (the state machine moves between these)."""

    READY = "ready"
    CLAIMED = "claimed"
    REVIEW = "review"
    DONE = "done"
    FAILED = "failed"


STORED_STATUSES = tuple(s.value for s in Status)


class Sentinel(StrEnum):
    """The word a tick's (or a hand-in's) last line starts with: what scripts match (docs/protocol.md)."""

    SKIP = "SKIP"
    STEP_COMPLETE = "STEP_COMPLETE"
    STEP_BLOCKED = "STEP_BLOCKED"
    STEP_REJECTED = "STEP_REJECTED"
    STEP_FAILED = "STEP_FAILED"


_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")


def parse_duration(value: Any) -> float:
    """'90s', '10m', '1h30m', '2d', or a number of seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"negative duration: {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"not a duration: {value!r}")
    text = value.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    pos, total = 0, 0.0
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    for match in _DURATION_RE.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * units[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 10m, 1h30m)")
    return total


def format_duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds % 3600 == 0 and seconds:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0 and seconds:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def utc_now() -> datetime:
    from runner.core.clock import wall_clock

    return datetime.fromtimestamp(wall_clock(), UTC).replace(microsecond=0)


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return None


# The frontmatter keys a lean step keeps (see Step.lean): what plans, claims, leases and the
# listings read for many steps at once. Anything else is read from the file when asked for.
INDEX_KEYS = frozenset(
    (
        "status",
        "title",
        "name",
        "priority",
        "depends_on",
        "tags",
        "run",
        "requires_approval",
        "assignee",
        "attempt",
        "failures",
        "lease",
        "claimed_at",
        "not_before",
        "holder",
        "last_updated",
        "last_error",
        "touches",  # a claim compares a ready step's globs with every claimed step's
        "agent",  # `agent: self`: a worker's claim leaves it for an agent you run yourself
        "usage",  # a plan's spend is the sum of its steps' (the plan budget, the listings)
    )
)


SHARED_VALUES = frozenset(("status", "depends_on", "run", "tags", "assignee"))  # the same few values in many steps
_SHARED_LISTS: dict[tuple[str, ...], tuple[str, ...]] = {}  # past 65,536 values, a list is kept as its own tuple
_SHAPES: dict[tuple[str, ...], dict[str, int]] = {}  # the keys of a lean step's index -> their positions
_NO_SHAPE: dict[str, int] = {}  # a full step's (never changed)


def _shared(value: Any) -> Any:
    """One object for a value many steps hold; a list becomes a tuple (Step.get gives a list back)."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        value = tuple(sys.intern(item) for item in value)
        if len(_SHARED_LISTS) < 65536:
            return _SHARED_LISTS.setdefault(value, value)
    return value


def _shape_of(keys: tuple[str, ...]) -> dict[str, int]:
    shape = _SHAPES.get(keys)
    if shape is None:
        shape = _SHAPES[keys] = {key: position for position, key in enumerate(keys)}
    return shape


class Step:
    """One step as read from its file: `meta` is the whole frontmatter, `text` the whole file.

    A long-lived plan holds *lean* steps: the INDEX_KEYS of the frontmatter and the blob the
    file is in, so a worker's memory does not grow with the text and the result records of
    thousands of steps. Asking a lean step for its `meta`, `text` or another key reads the
    file again; callers that need them more than once take `full()` first. A lean step keeps
    its index as a tuple of values beside a key order shared by every step with the same keys,
    and shares its empty problems: a dict and a list a step were a fifth of a worker's memory
    at 10,000 steps.
    """

    __slots__ = ("_blob", "_meta", "_shape", "_source", "_text", "id", "path", "problems")

    def __init__(self, id: str, path: str, meta: dict[str, Any], text: str, problems: list[str] | None = None):
        self.id = id
        self.path = path
        self.problems = [] if problems is None else problems
        self._meta = meta
        self._text = text
        self._source: Any = None  # a lean step's reader: source.read_step(path, blob) -> Step
        self._blob = ""  # a lean step's blob id
        self._shape = _NO_SHAPE  # a lean step's index keys -> positions in _meta, a tuple

    def __repr__(self) -> str:
        return f"Step({self.id!r}, {self.path!r}{', lean' if self.is_lean else ''}, problems={self.problems!r})"

    @property
    def meta(self) -> dict[str, Any]:
        return self._meta if self._source is None else self.full()._meta

    @meta.setter
    def meta(self, value: dict[str, Any]) -> None:
        self._meta, self._source, self._shape = value, None, _NO_SHAPE

    @property
    def text(self) -> str:
        return self._text if self._source is None else self.full()._text

    @text.setter
    def text(self, value: str) -> None:
        self._text = value

    @property
    def is_lean(self) -> bool:
        return self._source is not None

    @property
    def index(self) -> dict[str, Any]:
        """The INDEX_KEYS of the frontmatter that have a value."""
        if self._source is not None:
            return {key: self.get(key) for key in self._shape}
        return {key: value for key in INDEX_KEYS if (value := self._meta.get(key)) is not None}

    def lean(self, source: Any, blob: str) -> Step:
        """This sound step as a lean one: its file is `blob`, which `source.read_step(path, blob)`
        parses again when asked."""
        return Step.indexed(self.id, self.path, self.index, source, blob)

    @staticmethod
    def indexed(id: str, path: str, index: dict[str, Any], source: Any, blob: str) -> Step:
        """A lean step from its index (values many steps hold are shared, not one copy a step)."""
        index = {key: _shared(value) if key in SHARED_VALUES else value for key, value in index.items()}
        step = Step(sys.intern(id), path, tuple(index.values()), "", problems=())  # type: ignore[arg-type]
        step._source, step._blob, step._shape = source, blob, _shape_of(tuple(index))
        return step

    def full(self) -> Step:
        """This step with its whole frontmatter and text (itself unless lean)."""
        return self if self._source is None else self._source.read_step(self.path, self._blob)

    def copy(self) -> Step:
        """A step whose problems list the caller may extend (meta and text are shared, never mutated)."""
        step = Step(self.id, self.path, self._meta, self._text, list(self.problems))
        step._source, step._blob, step._shape = self._source, self._blob, self._shape
        return step

    def get(self, key: str, default: Any = None) -> Any:
        if self._source is None:
            value = self._meta.get(key)
        elif key in INDEX_KEYS:
            position = self._shape.get(key)
            # a lean step's meta is the index's tuple
            value = None if position is None else cast(tuple, self._meta)[position]
            if type(value) is tuple:
                value = list(value)
        else:
            value = self.full()._meta.get(key)
        return default if value is None else value

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def status(self) -> str:
        return self.get("status", Status.READY)

    @property
    def title(self) -> str:
        return str(self.get("title") or self.get("name") or self.id)

    @property
    def depends_on(self) -> list[str]:
        deps = self.get("depends_on", [])
        return [deps] if isinstance(deps, str) else list(deps)

    @property
    def priority(self) -> int:
        return int(self.get("priority", 0))

    @property
    def tags(self) -> list[str]:
        tags = self.get("tags", [])
        return [tags] if isinstance(tags, str) else [str(t) for t in tags]

    @property
    def self_serve(self) -> bool:
        """`agent: self`: an agent you run yourself takes it (`runner work`, `runner mcp`); no worker runs it."""
        return self.get("agent") == "self"

    @property
    def attempt(self) -> int:
        return int(self.get("attempt", 0))

    @property
    def assignee(self) -> str | None:
        return self.get("assignee")

    @property
    def holder(self) -> dict[str, Any]:
        holder = self.get("holder")
        return holder if isinstance(holder, dict) else {}

    @property
    def not_before(self) -> datetime | None:
        return parse_time(self.get("not_before"))

    @property
    def claimed_at(self) -> datetime | None:
        return parse_time(self.get("claimed_at"))

    @property
    def requires_approval(self) -> bool:
        return bool(self.get("requires_approval", False))
