"""Find files shipped with runner: in the wheel under runner/_data, or at the
top level of a source checkout (editable installs)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The folder `name` (systemd, launchd, schtasks, hooks) of the shipped data."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"runner data folder {name!r} is missing from this installation")
