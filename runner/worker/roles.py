"""What runner reads from the roles' output: orient's deviation line, implement's final
sentinel line, review's CRITICAL findings, the verifier's JSON verdict; and the small
rules around them (when a review is due, when scores plateau, the override switches).
Any agent CLI can fill any role; runner only reads what it prints.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from runner.core import jsonsafe
from runner.core.config import Role
from runner.core.limits import MAX_TEXT_BYTES, clip

CRITICAL_MARKERS = ("CRITICAL", "\N{LARGE RED CIRCLE}")
# The switches step-runner users already know, and runner's own names for them.
SWITCHES = {
    "autoapprove": ("RUNNER_AUTOAPPROVE", "STEP_AUTOAPPROVE"),
    "skip_review": ("RUNNER_SKIP_REVIEW", "STEP_SKIP_REVIEW"),
}


def deviation_reported(output: str) -> str | None:
    """Orient's verdict that the plan is stale: a `deviation: major` line or a JSON field."""
    for line in output.splitlines():
        if re.match(r"^\s*deviation\s*:\s*major\b", line, re.IGNORECASE):
            return line.strip()
    for candidate in json_objects(output):
        if str(candidate.get("deviation", "")).lower() == "major":
            return str(candidate.get("reason") or candidate.get("summary") or "deviation: major")
    return None


def json_objects(output: str) -> list[dict[str, Any]]:
    found = []
    for text in [output.strip(), *re.findall(r"```(?:json)?\s*\n(.*?)\n\s*```", output, re.DOTALL)]:
        try:
            data = jsonsafe.loads(text)
        except ValueError:
            continue
        if isinstance(data, dict):
            found.append(data)
    return found


# implement's last line: runner's sentinels, and the coder's own verdict as the step-runner's
# route_coder_result reads it (CODER_COMPLETE, REJECTED or FAILED, `CODER_` or not, a reason optional).
_SENTINEL_RE = re.compile(r"(STEP_BLOCKED|STEP_FAILED)\s*:\s*(.+)")
_CODER_RE = re.compile(r"(?:CODER_)?(COMPLETE|REJECTED|FAILED)(?:\s*:\s*(.*))?")


def final_sentinel(output: str) -> tuple[str, str] | None:
    """implement's last non-empty line when it says how the run ended: `STEP_BLOCKED: why`,
    `STEP_FAILED: why`, or the coder's own verdict (`CODER_COMPLETE`, `REJECTED[: why]`,
    `FAILED[: why]`), as (STEP_BLOCKED | STEP_FAILED | CODER_COMPLETE | CODER_REJECTED |
    CODER_FAILED, why)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        return None
    if match := _SENTINEL_RE.fullmatch(lines[-1]):
        return match.group(1), match.group(2)
    match = _CODER_RE.fullmatch(lines[-1])
    # a bare COMPLETE is not the coder's word
    if match and (match.group(1) != "COMPLETE" or lines[-1].startswith("CODER_")):
        return f"CODER_{match.group(1)}", clip((match.group(2) or "").strip(), MAX_TEXT_BYTES // 4)
    return None


def context_eligibility(output: str) -> tuple[bool, str]:
    """The context floor detector's answer, `{"loop_mode_eligible": bool, ...}` (the whole
    output or its last line): (eligible, what else it said, bounded). ValueError when it said
    nothing usable."""
    lines = [line for line in output.strip().splitlines() if line.strip()]
    for text in dict.fromkeys([output.strip(), lines[-1] if lines else ""]):
        try:
            data = jsonsafe.loads(text)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("loop_mode_eligible"), bool):
            said = ", ".join(f"{k}={json.dumps(v)}" for k, v in data.items() if k != "loop_mode_eligible")
            return data["loop_mode_eligible"], clip(said, MAX_TEXT_BYTES // 4)
    raise ValueError(f'no JSON with "loop_mode_eligible": true or false in its output ({clip(output.strip(), 120)!r})')


def critical_findings(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.lstrip().startswith(CRITICAL_MARKERS)]


def review_due(role: Role, files_changed: list[str]) -> str | None:
    """Why the independent review must look (a large change, or one crossing a boundary), or None."""
    if role.min_files == 0:
        return "always (min_files = 0)"
    if len(files_changed) >= role.min_files:
        return f"{len(files_changed)} files changed (min_files {role.min_files})"
    crossed = sorted({b for b in role.boundaries for f in files_changed if f.startswith(b)})
    if crossed:
        return f"crosses {', '.join(crossed)}"
    return None


def plateaued(scores: list[float], window: int) -> bool:
    """The best of the last `window` scores is no better than the best before them."""
    if window < 1 or len(scores) <= window:
        return False
    return max(scores[-window:]) <= max(scores[:-window])


def switch(name: str) -> str | None:
    """Which environment variable turned an override switch on (RUNNER_* or its STEP_* alias)."""
    for variable in SWITCHES[name]:
        if os.environ.get(variable, "").strip().lower() in ("1", "true", "yes", "on"):
            return variable
    return None


# --- verdicts -------------------------------------------------------------------------


@dataclass
class Verdict:
    passed: bool
    score: float
    reasons: list[str] = field(default_factory=list)
    next_hint: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"pass": self.passed, "score": self.score, "reasons": self.reasons}
        if self.next_hint:
            data["next_hint"] = self.next_hint
        return data

    def feedback(self) -> str:
        lines = [f"The verifier did not pass the result (score {self.score})."]
        lines += [f"- {reason}" for reason in self.reasons]
        if self.next_hint:
            lines.append(f"Next: {self.next_hint}")
        return "\n".join(lines)


class VerdictError(ValueError):
    pass


VERDICT_KEYS = {"pass", "score", "reasons", "next_hint"}


def parse_verdict(stdout: str) -> Verdict:
    """A strict JSON verdict {pass: bool, score: 0.0-1.0, reasons: [str], next_hint: str}:
    raw, fenced in ```json, or after comment lines. Anything else is unparseable."""
    text = stdout.strip()
    fenced = re.search(r"```(?:json)?\s*\n(.*?)\n\s*```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1).strip()
    else:
        text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("#", "//"))).strip()
    if not text:
        raise VerdictError("the verifier printed no JSON verdict")
    try:
        data = jsonsafe.loads(text)
    except ValueError as exc:
        raise VerdictError(f"the verifier's output is not a JSON verdict ({exc}): {text[:120]!r}") from None
    if not isinstance(data, dict):
        raise VerdictError("a verdict is a JSON object")
    if unknown := sorted(set(data) - VERDICT_KEYS):
        raise VerdictError(f"a verdict has only pass, score, reasons, next_hint; not {', '.join(unknown)}")
    if not isinstance(data.get("pass"), bool):
        raise VerdictError('a verdict needs "pass": true or false')
    score = data.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
        raise VerdictError('a verdict needs "score": a number from 0.0 to 1.0')
    reasons = data.get("reasons", [])
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        raise VerdictError('"reasons" must be a list of strings')
    hint = data.get("next_hint")
    if hint is not None and not isinstance(hint, str):
        raise VerdictError('"next_hint" must be a string')
    hint = clip(hint, MAX_TEXT_BYTES // 4) or None
    return Verdict(passed=data["pass"], score=float(score), reasons=bounded_reasons(reasons, hint), next_hint=hint)


def bounded_reasons(reasons: list[str], hint: str | None) -> list[str]:
    """An agent's reasons are hostile input too: bounded here, whatever reads them later (the
    step file's last_verdict, the next attempt's feedback). Each is clipped, at most 20 are
    kept, and with the hint they hold at most MAX_TEXT_BYTES, as one carried text does; a last
    line says how many more there were."""
    room = MAX_TEXT_BYTES - _size(hint) - 64  # 64: the line that says how many more
    kept: list[str] = []
    for reason in reasons[:20]:
        reason = clip(reason, MAX_TEXT_BYTES // 4)
        if _size(reason) > room:
            break
        kept.append(reason)
        room -= _size(reason)
    return kept + ([f"... and {len(reasons) - len(kept)} more reasons"] if len(reasons) > len(kept) else [])


def _size(text: str | None) -> int:
    return len((text or "").encode("utf-8", "surrogatepass"))
