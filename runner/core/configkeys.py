"""One runner.toml key by its dotted name (`leases.lease`, `roles.review.min_files`), as `runner
config get|set` names it: which key of the schema (runner.core.config) it is, and where the
value that counts comes from, as `git config --show-origin` says it: a step's own value (its
`roles:` / `brakes:` / `pipeline:` tables, or the step key that stands for a plan-wide one),
else runner.toml, else the schema's default."""

from __future__ import annotations

import tomllib
from dataclasses import Field, dataclass, fields
from typing import Any

from runner.core.config import ROLE_NAMES, STEP_OVERRIDES, TABLES, Role
from runner.core.errors import BadInput

# A step key that wins over a plan-wide one for that step.
STEP_KEY_FOR = {
    "queue.requires_approval": "requires_approval",
    "leases.max_attempts": "max_attempts",
    "worker.default_timeout": "timeout",
    "harness.command": "run",
}
DEFAULT, FILE = "default", "runner.toml"


@dataclass(frozen=True)
class ConfigKey:
    table: str  # "leases", or "roles.review"
    name: str

    @property
    def dotted(self) -> str:
        return f"{self.table}.{self.name}"

    @property
    def path(self) -> tuple[str, ...]:
        return (*self.table.split("."), self.name)

    @property
    def spec(self) -> Field[Any]:
        return next(
            f for f in fields(Role if self.table.startswith("roles.") else TABLES[self.table]) if f.name == self.name
        )

    @property
    def default(self) -> Any:
        """The default as runner.toml would hold it (a duration as text, say)."""
        return tomllib.loads(f"v = {self.spec.metadata['toml']}")["v"]


def known_keys() -> list[str]:
    names = [f"{table}.{f.name}" for table, cls in TABLES.items() for f in fields(cls)]
    return names + [f"roles.<role>.{f.name}" for f in fields(Role)]


def config_key(dotted: str) -> ConfigKey:
    """The key `dotted` names; BadInput saying which keys there are."""
    table, _, name = dotted.strip().rpartition(".")
    parts = table.split(".")
    if parts[0] == "roles" and (len(parts) != 2 or parts[1] not in ROLE_NAMES):
        raise BadInput(f"{dotted!r}: a role's key is roles.<role>.<key>, with a role of {', '.join(ROLE_NAMES)}")
    cls = Role if parts[0] == "roles" else TABLES.get(table)
    if cls is None or name not in {f.name for f in fields(cls)}:
        import difflib

        close = [k for k in known_keys() if k.endswith(f".{dotted.strip()}")] or difflib.get_close_matches(
            dotted, known_keys(), n=1, cutoff=0.6
        )
        hint = f"did you mean {close[0]}? " if close else ""
        raise BadInput(
            f"no runner.toml key {dotted!r}: {hint}keys are <table>.<key>, e.g. leases.lease "
            "(docs/protocol.md, section 3, lists them)"
        )
    return ConfigKey(table, name)


def _at(data: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return False, None
        data = data[part]
    return True, data


def value_of(
    key: ConfigKey, toml_text: str, meta: dict[str, Any] | None = None, step: str | None = None
) -> tuple[Any, str]:
    """(the value that counts, where it comes from: "step STEP", "runner.toml" or "default");
    `meta`: a step's frontmatter, whose own value wins for that step."""
    if meta is not None:
        if key.table.split(".")[0] in STEP_OVERRIDES and (found := _at(meta, key.path))[0]:
            return found[1], f"step {step}"
        if (own := STEP_KEY_FOR.get(key.dotted)) and meta.get(own) is not None:
            return meta[own], f"step {step} ({own}:)"
    found = _at(tomllib.loads(toml_text), key.path) if toml_text else (False, None)
    return (found[1], FILE) if found[0] else (key.default, DEFAULT)


def as_toml(value: Any) -> str:
    """A value as a TOML line writes it."""
    from runner.core.configvalues import toml_literal

    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {as_toml(v)}" for k, v in value.items()) + "}"
    return toml_literal(value)


def given_value(text: str) -> tuple[Any, str]:
    """A value typed on the command line: TOML when it reads as one TOML value (`true`, `3`,
    `"1h"`, `["make", "test"]`), else the text as a string (`2h`). (the value, its TOML text,
    written by runner: nothing typed reaches runner.toml but that one value)"""
    if any(c in text for c in "\r\n\x00"):
        raise BadInput("a value on one line, please (runner.toml keeps it on its key's line)")
    try:
        data = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        data = {"v": text}
    if list(data) != ["v"]:
        data = {"v": text}
    return data["v"], as_toml(data["v"])
