"""runner.toml: shared configuration, versioned on the queue branch like the steps."""

from __future__ import annotations

import shlex
import tomllib
from dataclasses import dataclass, field
from typing import Any

from runner.core.model import BadInput, parse_duration

DEFAULT_QUEUE_BRANCH = "runner/queue"

DEFAULT_TOML = """\
# runner configuration. Lives on the queue branch: edit, commit, push.

[queue]
integration_branch = "runner/integration"   # done steps are merged here (may be "main")
step_branch_prefix = "runner/steps/"
prune_merged_step_branches = false

[leases]
lease = "1h"              # a claim whose heartbeat has not moved for this long may be taken over
max_attempts = 3
backoff = "30s"           # first retry delay; doubles each attempt, +-20% jitter
backoff_cap = "1h"

[harness]
# The command a step runs when its file has no `run:` argv. Tokens:
# {prompt_file} {step_file} {step} {title} {attempt} {cwd} {worker} {feedback} {output}
command = []

[gates]
detect = true             # detect format/lint/build/test from the project when not set here
format = []
lint = []
build = []
test = []
verifier = []             # a command whose stdout is a JSON verdict {pass, score, reasons, next_hint}
max_fix_attempts = 2

[worker]
keep_worktree_on_failure = false
min_free_memory = "64MiB"
min_free_disk = "256MiB"
grace_period = "30s"
"""

_SIZE_UNITS = {"b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 1000, "mb": 1000**2, "gb": 1000**3}


def parse_size(value: Any) -> int:
    if isinstance(value, int):
        return value
    text = str(value).strip().lower().replace(" ", "")
    for unit in sorted(_SIZE_UNITS, key=len, reverse=True):
        if text.endswith(unit) and text[: -len(unit)].replace(".", "", 1).isdigit():
            return int(float(text[: -len(unit)]) * _SIZE_UNITS[unit])
    if text.isdigit():
        return int(text)
    raise ValueError(f"not a size: {value!r} (use e.g. 512MiB)")


def _argv(value: Any, where: str) -> list[str]:
    if value in (None, "", []):
        return []
    if isinstance(value, str):
        return shlex.split(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError(f"{where} must be an argv list of strings")


@dataclass
class Config:
    integration_branch: str = "runner/integration"
    step_branch_prefix: str = "runner/steps/"
    prune_merged_step_branches: bool = False
    lease: float = 3600.0
    max_attempts: int = 3
    backoff: float = 30.0
    backoff_cap: float = 3600.0
    harness_command: list[str] = field(default_factory=list)
    detect_gates: bool = True
    gate_commands: dict[str, list[str]] = field(default_factory=dict)
    verifier: list[str] = field(default_factory=list)
    max_fix_attempts: int = 2
    keep_worktree_on_failure: bool = False
    min_free_memory: int = 64 * 1024**2
    min_free_disk: int = 256 * 1024**2
    grace_period: float = 30.0
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def heartbeat_interval(self) -> float:
        return max(self.lease / 3, 0.2)


def parse_config(text: str | None, source: str = "runner.toml") -> Config:
    if not text:
        return Config()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{source}: bad TOML: {exc}") from exc
    problems: list[str] = []
    config = Config(raw=data)

    def section(name: str) -> dict[str, Any]:
        value = data.get(name, {})
        if not isinstance(value, dict):
            problems.append(f"{source}: [{name}] must be a table")
            return {}
        return value

    def take(table: dict[str, Any], key: str, convert, attr: str) -> None:
        if key in table:
            try:
                setattr(config, attr, convert(table[key]))
            except (ValueError, TypeError) as exc:
                problems.append(f"{source}: {key}: {exc}")

    queue, leases, harness, gates, worker = (section(n) for n in ("queue", "leases", "harness", "gates", "worker"))
    take(queue, "integration_branch", str, "integration_branch")
    take(queue, "step_branch_prefix", str, "step_branch_prefix")
    take(queue, "prune_merged_step_branches", bool, "prune_merged_step_branches")
    take(leases, "lease", parse_duration, "lease")
    take(leases, "max_attempts", int, "max_attempts")
    take(leases, "backoff", parse_duration, "backoff")
    take(leases, "backoff_cap", parse_duration, "backoff_cap")
    take(harness, "command", lambda v: _argv(v, "harness.command"), "harness_command")
    take(gates, "detect", bool, "detect_gates")
    take(gates, "verifier", lambda v: _argv(v, "gates.verifier"), "verifier")
    take(gates, "max_fix_attempts", int, "max_fix_attempts")
    for gate in ("format", "lint", "build", "test"):
        if gate in gates:
            try:
                config.gate_commands[gate] = _argv(gates[gate], f"gates.{gate}")
            except ValueError as exc:
                problems.append(f"{source}: {exc}")
    take(worker, "keep_worktree_on_failure", bool, "keep_worktree_on_failure")
    take(worker, "min_free_memory", parse_size, "min_free_memory")
    take(worker, "min_free_disk", parse_size, "min_free_disk")
    take(worker, "grace_period", parse_duration, "grace_period")
    if problems:
        raise BadInput(problems)
    return config
