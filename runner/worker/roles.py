"""The step pipeline's roles and brakes: orient, review and sweep are external commands
(any agent CLI can fill any role); runner only reads what they print.

Flow per tick (driven by the worker): orient -> deviation gate -> implement ->
gates -> fix loop -> sweep -> review (when due) -> handoff -> outcome.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from runner.core.config import Config
from runner.core.model import Step, parse_duration

ROLE_NAMES = ("orient", "review", "sweep")
CRITICAL_MARKERS = ("CRITICAL", "\N{LARGE RED CIRCLE}")
FAULT_REVIEW = "PIPELINE-FAULT: independent review did not run"
FAULT_SWEEP = "PIPELINE-FAULT: edge-case sweep did not run"
FAULT_ORIENT = "PIPELINE-FAULT: orient did not run"


@dataclass
class Role:
    name: str
    command: list[str]
    min_files: int = 0
    boundaries: list[str] = field(default_factory=list)


@dataclass
class Brakes:
    max_fix_attempts: int = 2
    max_review_attempts: int = 1
    score_plateau_window: int = 3
    step_budget: float | None = None  # seconds of wall time across all attempts
    deviation_gate: bool = True


def _merged(config_table: dict[str, Any], step_table: Any) -> dict[str, Any]:
    merged = dict(config_table or {})
    if isinstance(step_table, dict):
        merged.update(step_table)
    return merged


def roles_for(config: Config, step: Step) -> dict[str, Role]:
    """Configured roles: runner.toml [roles.<name>], overridden per step by frontmatter `roles: {<name>: {...}}`."""
    found = {}
    configured = config.raw.get("roles", {}) if isinstance(config.raw.get("roles"), dict) else {}
    overrides = step.meta.get("roles") if isinstance(step.meta.get("roles"), dict) else {}
    for name in ROLE_NAMES:
        table = _merged(configured.get(name, {}), overrides.get(name))
        command = table.get("command")
        if isinstance(command, list) and command and all(isinstance(a, str) for a in command):
            found[name] = Role(
                name=name,
                command=list(command),
                min_files=int(table.get("min_files", 0) or 0),
                boundaries=[str(b) for b in table.get("boundaries", []) or []],
            )
    return found


def brakes_for(config: Config, step: Step) -> Brakes:
    table = _merged(config.raw.get("brakes", {}), step.meta.get("brakes"))
    pipeline = _merged(config.raw.get("pipeline", {}), step.meta.get("pipeline"))
    budget = table.get("step_budget")
    return Brakes(
        max_fix_attempts=int(table.get("max_fix_attempts", config.max_fix_attempts)),
        max_review_attempts=int(table.get("max_review_attempts", 1)),
        score_plateau_window=int(table.get("score_plateau_window", 3)),
        step_budget=parse_duration(budget) if budget else None,
        deviation_gate=bool(pipeline.get("deviation_gate", True)),
    )


def deviation_reported(output: str) -> str | None:
    """The orient role's verdict that the plan is stale: a `deviation: major` line or a JSON field."""
    for line in output.splitlines():
        if re.match(r"^\s*deviation\s*:\s*major\b", line, re.I):
            return line.strip()
    for candidate in _json_objects(output):
        if str(candidate.get("deviation", "")).lower() == "major":
            return str(candidate.get("reason") or candidate.get("summary") or "deviation: major")
    return None


def _json_objects(output: str) -> list[dict[str, Any]]:
    found = []
    for text in [output.strip(), *re.findall(r"```(?:json)?\s*\n(.*?)\n\s*```", output, re.S)]:
        try:
            data = json.loads(text)
        except ValueError:
            continue
        if isinstance(data, dict):
            found.append(data)
    return found


def critical_findings(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.lstrip().startswith(CRITICAL_MARKERS)]


def review_due(role: Role, files_changed: list[str]) -> str | None:
    """Why the reviewer must look (a large change or one crossing a boundary), or None."""
    if role.min_files and len(files_changed) >= role.min_files:
        return f"{len(files_changed)} files changed (min_files {role.min_files})"
    crossed = sorted({b for b in role.boundaries for f in files_changed if f.startswith(b)})
    if crossed:
        return f"crosses {', '.join(crossed)}"
    if not role.min_files and not role.boundaries:
        return "always (no min_files or boundaries set)"
    return None


def plateaued(scores: list[float], window: int) -> bool:
    """The best of the last `window` scores is no better than the best before them."""
    if window < 1 or len(scores) <= window:
        return False
    return max(scores[-window:]) <= max(scores[:-window])


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
