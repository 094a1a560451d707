"""Gates: the checks a step's result must pass after a clean implement run, in order,
each recorded pass / fail / not run: required outputs, the step's Automated Verification
and Automated QA commands, then format, lint, build and test. A gate that did not run is
reported as not run, never as passed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.core import jsonsafe
from runner.core.config import Config
from runner.core.stepfile import checklist
from runner.worker.executor import SHELL_OPERATORS, RunResult

PASS, FAIL, NOT_RUN = "pass", "fail", "not run"
PROJECT_GATES = ("format", "lint", "build", "test")
CHECK_SECTIONS = {"Automated Verification": "check", "Automated QA": "qa"}


@dataclass
class GateResult:
    name: str
    result: str  # pass | fail | not run
    detail: str = ""
    command: list[str] | None = None
    seconds: float | None = None
    section: str | None = None  # "check" or "qa" for a checklist item
    label: str | None = None  # the checklist item as written
    usage: Any = None  # a QA scenario's agent run: what it spent (runner.core.usage)
    model: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "result": self.result, "detail": self.detail}
        if self.command:
            data["command"] = self.command
        if self.seconds is not None:
            data["seconds"] = round(self.seconds, 2)
        return data


def check_required_outputs(worktree: Path, outputs: list[str]) -> GateResult:
    """Every required output exists inside the worktree (no '..', absolute paths or escaping symlinks)."""
    if not outputs:
        return GateResult("required_outputs", NOT_RUN, "none required")
    root = worktree.resolve()
    problems = []
    for output in outputs:
        if os.path.isabs(output) or ".." in Path(output).parts:
            problems.append(f"{output}: must be a relative path inside the worktree")
            continue
        candidate = root / output
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError):
            problems.append(f"{output}: cannot be resolved (symlink loop?)")
            continue
        if resolved != root and root not in resolved.parents:
            problems.append(f"{output}: resolves outside the worktree")
        elif not candidate.exists():
            problems.append(f"{output}: missing")
    if problems:
        return GateResult("required_outputs", FAIL, "; ".join(problems))
    return GateResult("required_outputs", PASS, f"{len(outputs)} present")


def split_command(text: str) -> tuple[list[str] | None, str | None]:
    """A checklist command as argv (shell words, never a shell); refuse shell operators."""
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        return None, f"cannot split {text!r}: {exc}"
    if not argv:
        return None, "empty command"
    operators = [a for a in argv if a in SHELL_OPERATORS or a.startswith(("$(", "`"))]
    if operators:
        return None, (
            f"{text!r} uses shell syntax ({' '.join(operators)}); runner runs argv without a shell: write `sh -c "
            f"'...'` explicitly if you mean one"
        )
    return argv, None


def _have(tool: str) -> bool:
    return shutil.which(tool) is not None


def detect_project_gates(worktree: Path) -> dict[str, list[str] | str]:
    """Format/lint/build/test commands guessed from the project's files; a formatter only
    when its tool is installed, else why the format gate does not run (a text)."""
    found: dict[str, list[str] | str] = {}
    if (worktree / "Cargo.toml").exists():
        found = {"build": ["cargo", "build"], "test": ["cargo", "test"]}
        found["format"] = (
            ["cargo", "fmt", "--check"]
            if _have("cargo")
            else "no formatter installed for this Rust project (cargo fmt)"
        )
    elif (worktree / "go.mod").exists():
        found = {"build": ["go", "build", "./..."], "test": ["go", "test", "./..."]}
        # gofmt -l lists the files it would change and exits 0 either way: an empty list passes.
        found["format"] = (
            ["sh", "-c", 'test -z "$(gofmt -l .)"']
            if _have("gofmt")
            else "no formatter installed for this Go project (gofmt)"
        )
    elif (worktree / "package.json").exists():
        try:
            scripts = jsonsafe.loads((worktree / "package.json").read_text()).get("scripts", {})
        except (ValueError, OSError, AttributeError):  # the step wrote it: any JSON at all
            scripts = {}
        for gate, script in (("format", "format"), ("lint", "lint"), ("build", "build"), ("test", "test")):
            if isinstance(scripts, dict) and script in scripts:
                found[gate] = ["npm", "run", script]
        if "format" not in found:
            found["format"] = (
                ["prettier", "--check", "."] if _have("prettier") else 'no "format" script and no prettier installed'
            )
    elif any((worktree / name).exists() for name in ("pyproject.toml", "pytest.ini", "setup.py")):
        if (worktree / "tests").is_dir() or (worktree / "pytest.ini").exists():
            found["test"] = ["python3", "-m", "pytest", "-q"]
        if _have("ruff"):
            found["format"] = ["ruff", "format", "--check", "."]
        elif _have("black"):
            found["format"] = ["black", "--check", "."]
        else:
            found["format"] = "no formatter installed for this Python project (ruff or black)"
    elif (worktree / "Makefile").exists():
        text = (worktree / "Makefile").read_text(errors="replace")
        found = {"build": ["make"]}
        if re.search(r"^test:", text, re.MULTILINE):
            found["test"] = ["make", "test"]
    return found


def project_gate_commands(
    config: Config, worktree: Path, env: Mapping[str, str] | None = None
) -> dict[str, list[str] | str]:
    """runner.toml's gates, overridden by FORMAT_CMD/LINT_CMD/BUILD_CMD/TEST_CMD, else detected
    (a text where a detected gate cannot run: why)."""
    found = os.environ if env is None else env
    configured = {gate: list(getattr(config.gates, gate)) for gate in PROJECT_GATES if getattr(config.gates, gate)}
    commands: dict[str, list[str] | str] = dict(configured)
    for gate in PROJECT_GATES:
        override = found.get(f"{gate.upper()}_CMD")
        if override is not None:
            commands[gate] = shlex.split(override)
    if config.gates.detect:
        for gate, cmd in detect_project_gates(worktree).items():
            commands.setdefault(gate, cmd)
    return {gate: commands[gate] for gate in PROJECT_GATES if commands.get(gate)}


def checklist_items(step_text: str) -> list[tuple[str, str, str | None]]:
    """(section, label, command) of every Automated Verification and Automated QA item."""
    return [
        (kind, label, command)
        for section, kind in CHECK_SECTIONS.items()
        for _, _, label, command in checklist(step_text, section)
    ]


def run_gates(
    worktree: Path,
    step_text: str,
    required_outputs: list[str],
    config: Config,
    run_command: Callable[[str, list[str]], RunResult],
    walk_through: Callable[[str, str], GateResult] | None = None,
) -> list[GateResult]:
    """Run every gate in order; after the first failure, later gates are recorded as not run. An
    Automated QA item without a command goes to `walk_through(name, scenario)` ([roles.qa]) when
    given."""
    results: list[GateResult] = [check_required_outputs(worktree, required_outputs)]

    def failed() -> bool:
        return any(r.result == FAIL for r in results)

    for index, (kind, label, text) in enumerate(checklist_items(step_text)):
        name = f"{'check' if kind == 'check' else 'qa'}: {text or label}"
        if text is None and kind == "qa" and walk_through is not None:
            results.append(
                GateResult(name, NOT_RUN, "an earlier gate failed", section=kind, label=label)
                if failed()
                else walk_through(name, label)
            )
        elif text is None:
            why = "no `command` in the item" + (" and no [roles.qa] to walk it through" if kind == "qa" else "")
            results.append(GateResult(name, NOT_RUN, why, section=kind, label=label))
        elif failed():
            results.append(GateResult(name, NOT_RUN, "an earlier gate failed", section=kind, label=label))
        else:
            argv, problem = split_command(text)
            if argv is None:
                results.append(GateResult(name, FAIL, problem or "", section=kind, label=label))
                continue
            outcome = run_command(f"{kind}-{index + 1}", argv)
            results.append(
                GateResult(name, PASS if outcome.ok else FAIL, outcome.describe(), argv, outcome.duration, kind, label)
            )
    for gate, command in project_gate_commands(config, worktree).items():
        if isinstance(command, str):
            results.append(GateResult(gate, NOT_RUN, command))
        elif failed():
            results.append(GateResult(gate, NOT_RUN, "an earlier gate failed", command))
        else:
            outcome = run_command(gate, command)
            results.append(
                GateResult(gate, PASS if outcome.ok else FAIL, outcome.describe(), command, outcome.duration)
            )
    return results


def gate_failure_feedback(results: list[GateResult]) -> str:
    return "\n".join(f"gate {r.name} failed: {r.detail}" for r in results if r.result == FAIL)
