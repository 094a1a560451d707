"""Gates: the checks a step's result must pass, each recorded pass / fail / not run."""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from runner.core.config import Config
from runner.worker.executor import SHELL_OPERATORS, RunResult

PASS, FAIL, NOT_RUN = "pass", "fail", "not run"
PROJECT_GATES = ("format", "lint", "build", "test")


@dataclass
class GateResult:
    name: str
    result: str  # pass | fail | not run
    detail: str = ""
    command: list[str] | None = None

    def as_dict(self) -> dict[str, Any]:
        data = {"name": self.name, "result": self.result, "detail": self.detail}
        if self.command:
            data["command"] = self.command
        return data


@dataclass
class Verdict:
    passed: bool
    score: float | None = None
    reasons: list[str] = field(default_factory=list)
    next_hint: str | None = None


class VerdictError(ValueError):
    pass


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
            f"{text!r} uses shell syntax ({' '.join(operators)}); runner runs argv without a shell: "
            f"write `sh -c '...'` explicitly if you mean one"
        )
    return argv, None


def detect_project_gates(worktree: Path) -> dict[str, list[str]]:
    """Format/lint/build/test commands guessed from the project's files."""
    if (worktree / "Cargo.toml").exists():
        return {"build": ["cargo", "build"], "test": ["cargo", "test"]}
    if (worktree / "go.mod").exists():
        return {"build": ["go", "build", "./..."], "test": ["go", "test", "./..."]}
    if (worktree / "package.json").exists():
        try:
            scripts = json.loads((worktree / "package.json").read_text()).get("scripts", {})
        except (ValueError, OSError):
            scripts = {}
        found = {}
        for gate, script in (("lint", "lint"), ("build", "build"), ("test", "test")):
            if script in scripts:
                found[gate] = ["npm", "run", script]
        return found
    if (worktree / "pyproject.toml").exists() or (worktree / "pytest.ini").exists() or (worktree / "setup.py").exists():
        if (worktree / "tests").is_dir() or (worktree / "pytest.ini").exists():
            return {"test": ["python3", "-m", "pytest", "-q"]}
        return {}
    if (worktree / "Makefile").exists():
        text = (worktree / "Makefile").read_text(errors="replace")
        found = {"build": ["make"]}
        if re.search(r"^test:", text, re.M):
            found["test"] = ["make", "test"]
        return found
    return {}


def project_gate_commands(config: Config, worktree: Path, env: dict[str, str] | None = None) -> dict[str, list[str]]:
    """runner.toml's gates, overridden by FORMAT_CMD/LINT_CMD/BUILD_CMD/TEST_CMD, else detected."""
    env = os.environ if env is None else env
    commands = {gate: list(cmd) for gate, cmd in config.gate_commands.items() if cmd}
    for gate in PROJECT_GATES:
        override = env.get(f"{gate.upper()}_CMD")
        if override is not None:
            commands[gate] = shlex.split(override)
    if config.detect_gates:
        for gate, cmd in detect_project_gates(worktree).items():
            if gate not in commands and gate not in config.gate_commands:
                commands[gate] = cmd
    return {gate: commands[gate] for gate in PROJECT_GATES if commands.get(gate)}


def parse_verdict(stdout: str) -> Verdict:
    """A JSON verdict {pass, score, reasons, next_hint}: raw, fenced in ```json, or after comment lines."""
    text = stdout.strip()
    fenced = re.search(r"```(?:json)?\s*\n(.*?)\n\s*```", text, re.S)
    if fenced:
        text = fenced.group(1).strip()
    else:
        lines = [line for line in text.splitlines() if not line.lstrip().startswith(("#", "//"))]
        text = "\n".join(lines).strip()
    if not text:
        raise VerdictError("the verifier printed no JSON verdict")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise VerdictError(f"the verifier's output is not a JSON verdict ({exc.msg} at line {exc.lineno}): {text[:120]!r}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("pass"), bool):
        raise VerdictError('a verdict must be a JSON object with a boolean "pass"')
    score = data.get("score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
        raise VerdictError('"score" must be a number')
    reasons = data.get("reasons") or []
    if isinstance(reasons, str):
        reasons = [reasons]
    if not isinstance(reasons, list):
        raise VerdictError('"reasons" must be a list of strings')
    hint = data.get("next_hint")
    return Verdict(passed=data["pass"], score=score, reasons=[str(r) for r in reasons], next_hint=str(hint) if hint else None)


def run_gates(
    worktree: Path,
    step_text: str,
    required_outputs: list[str],
    config: Config,
    run_command: Callable[[str, list[str], Path | None], RunResult],
    verifier: list[str] | None = None,
) -> tuple[list[GateResult], Verdict | None]:
    """Run every gate in order; after the first failure, later gates are recorded as not run."""
    from runner.core.stepfile import automated_checks

    results: list[GateResult] = []
    verdict = None

    def failed() -> bool:
        return any(r.result == FAIL for r in results)

    outputs = check_required_outputs(worktree, required_outputs)
    results.append(outputs)
    for index, text in enumerate(automated_checks(step_text)):
        name = f"check: {text}"
        if failed():
            results.append(GateResult(name, NOT_RUN, "an earlier gate failed"))
            continue
        argv, problem = split_command(text)
        if argv is None:
            results.append(GateResult(name, FAIL, problem))
            continue
        outcome = run_command(f"check-{index + 1}", argv, None)
        results.append(GateResult(name, PASS if outcome.ok else FAIL, outcome.describe(), argv))
    commands = project_gate_commands(config, worktree)
    for gate in PROJECT_GATES:
        if gate not in commands:
            results.append(GateResult(gate, NOT_RUN, "not configured"))
        elif failed():
            results.append(GateResult(gate, NOT_RUN, "an earlier gate failed", commands[gate]))
        else:
            outcome = run_command(gate, commands[gate], None)
            results.append(GateResult(gate, PASS if outcome.ok else FAIL, outcome.describe(), commands[gate]))
    verifier = verifier if verifier is not None else config.verifier
    if not verifier:
        results.append(GateResult("verifier", NOT_RUN, "not configured"))
    elif failed():
        results.append(GateResult("verifier", NOT_RUN, "an earlier gate failed", verifier))
    else:
        stdout_path = worktree.parent / f".{worktree.name}.verdict"
        outcome = run_command("verifier", verifier, stdout_path)
        try:
            text = stdout_path.read_text(errors="replace")
        except OSError:
            text = ""
        finally:
            stdout_path.unlink(missing_ok=True)
        if not outcome.ok:
            results.append(GateResult("verifier", FAIL, f"verifier did not run cleanly: {outcome.describe()}", verifier))
        else:
            try:
                verdict = parse_verdict(text)
                detail = "; ".join(verdict.reasons) or ("passed" if verdict.passed else "failed")
                if verdict.score is not None:
                    detail = f"score {verdict.score}: {detail}"
                results.append(GateResult("verifier", PASS if verdict.passed else FAIL, detail, verifier))
            except VerdictError as exc:
                results.append(GateResult("verifier", FAIL, str(exc), verifier))
    return results, verdict


def gate_failure_feedback(results: list[GateResult]) -> str:
    return "\n".join(f"gate {r.name} failed: {r.detail}" for r in results if r.result == FAIL)
