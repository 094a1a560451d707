"""Files shipped inside the runner package (unit templates, git hooks, role prompts),
read through importlib.resources, and the one template syntax they use: @NAME@.

@NAME@ reads the same in a shell script, a systemd unit, a plist and a task XML, none of
which give '@' a meaning of their own; a placeholder left unfilled is an error, never
silently written out.
"""

from __future__ import annotations

import re
from importlib import resources

PLACEHOLDER_RE = re.compile(r"@([A-Z][A-Z0-9_]*)@")


def read_text(package: str, *path: str) -> str:
    """A text file shipped in `package`, e.g. read_text("runner.hooks", "templates", "pre-receive")."""
    return resources.files(package).joinpath(*path).read_text(encoding="utf-8")


def fill(template: str, values: dict[str, str]) -> str:
    """Replace each @NAME@ with values[NAME]; every placeholder must have a value."""
    missing = sorted({name for name in PLACEHOLDER_RE.findall(template) if name not in values})
    if missing:
        raise KeyError(f"template placeholders without a value: {', '.join(missing)}")
    return PLACEHOLDER_RE.sub(lambda match: values[match.group(1)], template)

