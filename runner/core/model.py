"""The vocabulary of runner: steps, statuses, durations, timestamps."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any



STORED_STATUSES = ("ready", "claimed", "review", "done", "failed")
DERIVED_STATUSES = ("waiting", "blocked", "invalid")

# Keys only runner writes, in the order they are appended to a frontmatter.
MANAGED_KEYS = (
    "status",
    "assignee",
    "claimed_at",
    "lease",
    "attempt",
    "failures",
    "holder",
    "not_before",
    "last_error",
    "review",
    "approved",
    "result",
    "scores",
    "spent",
    "last_verdict",
    "last_updated",
    "last_updated_by",
)

MAX_STEP_BYTES = 1024 * 1024


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
    seconds = int(round(seconds))
    if seconds % 3600 == 0 and seconds:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0 and seconds:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def utc_now() -> datetime:
    from runner.core.clock import wall_clock

    return datetime.fromtimestamp(wall_clock(), timezone.utc).replace(microsecond=0)


def format_time(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return None


@dataclass
class Step:
    """One step as read from its file. `meta` is the whole frontmatter."""

    id: str
    path: str
    meta: dict[str, Any]
    text: str
    problems: list[str] = field(default_factory=list)

    def copy(self) -> "Step":
        """A step whose problems list the caller may extend (meta and text are shared, never mutated)."""
        return Step(id=self.id, path=self.path, meta=self.meta, text=self.text, problems=list(self.problems))

    def get(self, key: str, default: Any = None) -> Any:
        value = self.meta.get(key, default)
        return default if value is None else value

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def status(self) -> str:
        return self.get("status", "ready")

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
    def attempt(self) -> int:
        return int(self.get("attempt", 0))

    @property
    def assignee(self) -> str | None:
        return self.meta.get("assignee")

    @property
    def holder(self) -> dict[str, Any]:
        holder = self.meta.get("holder")
        return holder if isinstance(holder, dict) else {}

    @property
    def not_before(self) -> datetime | None:
        return parse_time(self.meta.get("not_before"))

    @property
    def claimed_at(self) -> datetime | None:
        return parse_time(self.meta.get("claimed_at"))

    @property
    def requires_approval(self) -> bool:
        return bool(self.get("requires_approval", False))


def step_duration(step: Step, key: str, default: float) -> float:
    value = step.meta.get(key)
    if value is None:
        return default
    return parse_duration(value)
