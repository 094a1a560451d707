"""The value types of runner.toml's keys: each parser takes what TOML gave and returns the
typed value or raises ValueError with what is wrong; `key` declares a field with its parser,
its comment and its TOML default (runner.core.config's tables are made of them)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import field
from typing import Any

from runner.core.model import parse_duration


def as_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {value!r}")
    return value


def at_least(minimum: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be a whole number, not {value!r}")
        if value < minimum:
            raise ValueError(f"must be {minimum} or more, not {value}")
        return value

    return parse


def text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty string, not {value!r}")
    return value


def optional_text(value: Any) -> str | None:
    """Text, or "" for none (as the default is written)."""
    if value == "":
        return None
    return text(value)


def one_of(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(map(repr, choices))}, not {value!r}")
        return value

    return parse


def optional_one_of(*choices: str) -> Callable[[Any], str | None]:
    """One of `choices`, or "" for none (as the default is written)."""
    parse = one_of(*choices)
    return lambda value: None if value == "" else parse(value)


def duration(value: Any) -> float:
    return parse_duration(value)


def optional_duration(value: Any) -> float | None:
    """A duration, or "none" for no limit."""
    if isinstance(value, str) and value.strip().lower() == "none":
        return None
    return parse_duration(value)


def argv(value: Any) -> tuple[str, ...]:
    """An argv list of strings (a string is split like a shell would, never run by one)."""
    if value in ("", []):
        return ()
    if isinstance(value, str):
        return tuple(shlex.split(value))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"must be an argv list of strings, not {value!r}")


def strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"must be a list of strings, not {value!r}")


def folders(value: Any) -> tuple[str, ...]:
    names = strings(value)
    if bad := [name for name in names if not name.startswith(("/", "~/"))]:
        raise ValueError(f"must name folders by absolute paths or ~/..., not {', '.join(map(repr, bad))}")
    return names


def parse_size(value: Any) -> int:
    units = {"b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 1000, "mb": 1000**2, "gb": 1000**3}
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    text = str(value).strip().lower().replace(" ", "")
    for unit in sorted(units, key=len, reverse=True):
        number = text[: -len(unit)]
        if text.endswith(unit) and number.replace(".", "", 1).isdigit():
            return int(float(number) * units[unit])
    if text.isdigit():
        return int(text)
    raise ValueError(f"not a size: {value!r} (use e.g. 512MiB)")


def identities(value: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict):
        raise ValueError("must be a table: pusher = [worker ids]")
    found = {}
    for pusher, ids in value.items():
        ids = [ids] if isinstance(ids, str) else ids
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError(f"{pusher}: must be a list of worker ids")
        found[str(pusher)] = tuple(ids)
    return found


def key(default: Any, parse: Callable[[Any], Any], doc: str, toml: str | None = None) -> Any:
    """A runner.toml key: its default, its parser, its comment, and how the default is written."""
    written = toml if toml is not None else toml_literal(default)
    factory = (lambda: type(default)(default)) if isinstance(default, (dict, list)) else None  # a copy each
    metadata = {"parse": parse, "doc": doc, "toml": written}
    return field(default_factory=factory, metadata=metadata) if factory else field(default=default, metadata=metadata)


def toml_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


# --- the tables -----------------------------------------------------------------------


def optional_money(value: Any) -> float | None:
    """US dollars, 0 or more; "none" for no limit."""
    if isinstance(value, str) and value.strip().lower() == "none":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 10**9:
        raise ValueError(f'must be an amount of US dollars, 0 or more (or "none"), not {value!r}')
    return float(value)


def optional_count_from(minimum: int) -> Callable[[Any], int | None]:
    """A whole number, `minimum` or more; "none" for no limit."""

    def parse(value: Any) -> int | None:
        if isinstance(value, str) and value.strip().lower() == "none":
            return None
        return at_least(minimum)(value)

    return parse


def optional_count(value: Any) -> int | None:
    """A whole number, 0 or more; "none" for no limit."""
    if isinstance(value, str) and value.strip().lower() == "none":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f'must be a whole number, 0 or more (or "none"), not {value!r}')
    return value


def price(value: Any) -> float:
    """US dollars per million tokens."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 10**6:
        raise ValueError(f"must be US dollars per million tokens, 0 or more, not {value!r}")
    return float(value)


def choice(*names: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in names:
            raise ValueError(f"must be one of {', '.join(names)}, not {value!r}")
        return value

    return parse


def account(value: Any) -> str | None:
    """An account name (letters, digits, . _ -), or "" for the command's program name."""
    if value == "":
        return None
    import re

    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", value):
        raise ValueError(f"must be a name of letters, digits, '.', '_' or '-' (at most 64), not {value!r}")
    return value


def models(value: Any) -> tuple[str, ...]:
    found = strings(value)
    if any(not name.strip() or any(ord(c) < 32 for c in name) for name in found):
        raise ValueError("each model is a non-empty name on one line")
    return found
