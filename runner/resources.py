"""Files runner ships beside its code, and the one template syntax they use: @NAME@.

The git hooks and the schedulers' unit templates live in four top-level folders of the
repository, `hooks/`, `systemd/`, `launchd/` and `schtasks/`, and nowhere else. The wheel
carries them as `runner/_data/<folder>` (pyproject.toml, [tool.hatch.build.targets.wheel]);
a checkout (an editable install, or PYTHONPATH) has them beside the package. Both are found
the same way, from where the imported runner package is: `shipped()` is the only door.
The role prompts are package data of runner.agents (`read_text`).

@NAME@ reads the same in a shell script, a systemd unit, a plist and a task XML, none of
which give '@' a meaning of their own; a placeholder left unfilled is an error, never
silently written out.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

PLACEHOLDER_RE = re.compile(r"@([A-Z][A-Z0-9_]*)@")
SHIPPED_FOLDERS = ("hooks", "systemd", "launchd", "schtasks")
PACKAGE = Path(__file__).resolve().parent
WHEEL_DATA = "_data"  # where the wheel puts the four folders, inside the package


def read_text(package: str, *path: str) -> str:
    """A text file shipped in `package`, e.g. read_text("runner.agents", "prompts", "verify.md")."""
    return resources.files(package).joinpath(*path).read_text(encoding="utf-8")


def shipped_folder(folder: str) -> Path:
    """One of SHIPPED_FOLDERS: inside the package when installed from the wheel, beside it in a checkout."""
    if folder not in SHIPPED_FOLDERS:
        raise ValueError(f"{folder!r} is not one of runner's shipped folders ({', '.join(SHIPPED_FOLDERS)})")
    for candidate in (PACKAGE / WHEEL_DATA / folder, PACKAGE.parent / folder):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"runner's {folder}/ folder is missing beside {PACKAGE} (reinstall runner)")


def shipped(folder: str, *path: str) -> str:
    """A file of a shipped folder, e.g. shipped("systemd", "runner-worker@.service")."""
    return shipped_folder(folder).joinpath(*path).read_text(encoding="utf-8")


def fill(template: str, values: dict[str, str]) -> str:
    """Replace each @NAME@ with values[NAME]; every placeholder must have a value."""
    missing = sorted({name for name in PLACEHOLDER_RE.findall(template) if name not in values})
    if missing:
        raise KeyError(f"template placeholders without a value: {', '.join(missing)}")
    return PLACEHOLDER_RE.sub(lambda match: values[match.group(1)], template)
