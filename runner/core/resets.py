"""When a provider's limit resets, read from the words its CLI printed: an epoch after a bar
(`Claude AI usage limit reached|1750708800`), a clock time with or without a date and a time
zone (`resets 9:20pm (Europe/Lisbon)`, `resets Apr 24, 4am (Asia/Tokyo)`, `try again at Aug
8th, 2026 12:30 PM`), or a wait (`try again in 3 days 6 hours 57 minutes`, `Your quota will
reset after 19h14m47s.`, `Suggested retry after 56s.`). A time without a zone is the worker's
own local time (the CLI ran on that host); a time without a date is its next occurrence.
Words that name no reset give None: the caller backs off instead."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo

_MONTHS = {
    m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)
}
_EPOCH = re.compile(r"\|\s*(\d{10})(?:\d{3})?\b")
_CLOCK = re.compile(
    r"(?:resets?|reset at|try again at|retry at|available at)\s+(?:on\s+)?"
    r"(?:(?P<month>[A-Za-z]{3})[a-z]*\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?:(?P<year>\d{4}),?\s+)?(?:at\s+)?)?"
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d\d))?\s*(?P<half>[ap]\.?m\.?)?"
    r"(?:\s*\((?P<zone>[A-Za-z_]+(?:/[A-Za-z0-9_+-]+)*)\))?",
    re.IGNORECASE,
)
_UNITS = {
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "hour": 3600,
    "hours": 3600,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "ms": 0.001,
}
_WAIT = re.compile(
    r"(?:reset after|retry after|retry in|try again in|resets in|reset in|wait)\s+"
    r"(?P<spec>(?:\d+(?:\.\d+)?\s*(?:days?|d|hours?|hrs?|h|minutes?|mins?|ms|m|seconds?|secs?|s)(?![a-z])"
    r"[\s,]*(?:and\s+)?)+)",
    re.IGNORECASE,
)
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)", re.IGNORECASE)


def local_zone() -> tzinfo:
    return datetime.now().astimezone().tzinfo or UTC


def _zone(name: str | None, default: tzinfo) -> tzinfo:
    if not name:
        return default
    if name.upper() in ("UTC", "GMT", "Z"):
        return UTC
    try:
        from zoneinfo import ZoneInfo

        return ZoneInfo(name)
    except (ValueError, KeyError, OSError, ImportError):  # an unknown zone: the worker's own time
        return default


def _clock(match: re.Match, now: datetime, local: tzinfo) -> datetime | None:
    hour, minute = int(match.group("hour")), int(match.group("minute") or 0)
    half = (match.group("half") or "").lower().replace(".", "")
    if half and not 1 <= hour <= 12 or hour > 23 or minute > 59 or not half and match.group("minute") is None:
        return None  # "resets 3" names no time
    if half:
        hour = hour % 12 + (12 if half == "pm" else 0)
    zone = _zone(match.group("zone"), local)
    here = now.astimezone(zone)
    if match.group("month"):
        month = _MONTHS.get(match.group("month").lower()[:3])
        if month is None:
            return None
        year = int(match.group("year") or here.year)
        try:
            moment = datetime(year, month, int(match.group("day")), hour, minute, tzinfo=zone)
        except ValueError:
            return None
        if moment < here - timedelta(days=1) and not match.group("year"):  # "Jan 2" said on Dec 31
            moment = moment.replace(year=year + 1)
        return moment.astimezone(UTC)
    moment = here.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if moment <= here:
        moment += timedelta(days=1)
    return moment.astimezone(UTC)


def _wait(spec: str) -> float:
    return sum(float(number) * _UNITS.get(unit.lower(), 0) for number, unit in _PART.findall(spec))


def reset_time(text: str, now: datetime, local: tzinfo | None = None) -> datetime | None:
    """The moment the words in `text` say the limit resets, in UTC; None when they name none."""
    local = local or local_zone()
    text = text[-8192:]  # the words are at the end of what a CLI printed
    if match := _EPOCH.search(text):
        return datetime.fromtimestamp(int(match.group(1)), UTC)
    for match in _CLOCK.finditer(text):
        if (moment := _clock(match, now, local)) is not None:
            return moment
    if match := _WAIT.search(text):
        seconds = _wait(match.group("spec"))
        if seconds > 0:
            return now + timedelta(seconds=seconds)
    return None
