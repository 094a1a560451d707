"""Handoff files: what a worker leaves for the next person or step, schema-checked before commit."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from runner.core.errors import BadInput
from runner.core.limits import MAX_TEXT_BYTES, clip
from runner.core.stepfile import dump_flow

MAX_SECTION_BYTES = 4 * MAX_TEXT_BYTES  # one section of a handoff (a review's, a sweep's output)
GATE_RESULTS = ("pass", "fail", "not run")
OUTCOMES = ("done", "review", "ready", "failed")


@dataclass(frozen=True)
class GateEntry:
    name: str
    result: str  # one of GATE_RESULTS
    detail: str = ""


@dataclass(frozen=True)
class HandoffMeta:
    """A handoff's frontmatter, in the order it is written. Plain dataclasses checked by
    problems(): a worker's tick pays no schema library's import for one file."""

    step: str
    attempt: int
    worker: str
    outcome: str  # one of OUTCOMES
    gates: list[GateEntry]
    files_changed: list[str]
    duration_s: float
    result_commit: str | None = None
    sentinel: str = ""
    reason: str | None = None
    overrides: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    verdict: dict[str, Any] | None = None
    qa_doc: str | None = None

    def problems(self) -> list[str]:
        found = [f"attempt {self.attempt} is not a whole number from 1"] if not _counts(self.attempt) else []
        if not isinstance(self.duration_s, (int, float)) or isinstance(self.duration_s, bool) or self.duration_s < 0:
            found.append(f"duration_s {self.duration_s!r} is not a number from 0")
        if self.outcome not in OUTCOMES:
            found.append(f"outcome {self.outcome!r} is not one of {', '.join(OUTCOMES)}")
        found += [
            f"gate {g.name!r}: result {g.result!r} is not one of {', '.join(GATE_RESULTS)}"
            for g in self.gates
            if g.result not in GATE_RESULTS
        ]
        return found


def _counts(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def render_handoff(meta: HandoffMeta, sections: dict[str, str]) -> bytes:
    if problems := meta.problems():
        raise BadInput(f"handoff does not match its schema: {'; '.join(problems)}")
    data = asdict(meta)
    lines = ["---"]
    for key, value in data.items():
        if key == "gates":
            lines.append("gates:")
            lines += [f"  - {dump_flow(g)}" for g in value]
        else:
            lines.append(f"{key}: {dump_flow(value)}")
    lines.append("---")
    lines.append(f"# Handoff: {meta.step} (attempt {meta.attempt})")
    lines.append("")
    lines.append(f"**{meta.sentinel}** by {meta.worker}: {meta.outcome}" + (f" ({meta.reason})" if meta.reason else ""))
    lines.append("")
    lines.append("| gate | result | detail |")
    lines.append("|---|---|---|")
    for gate in meta.gates:
        detail = gate.detail.replace("|", "\\|").replace("\n", " ")[:300]
        lines.append(f"| {gate.name.replace('|', '/')} | {gate.result} | {detail} |")
    for title, text in sections.items():
        if text and text.strip():
            # an agent's output may be megabytes
            lines += ["", f"## {title}", "", clip(text.rstrip(), MAX_SECTION_BYTES)]
    return ("\n".join(lines) + "\n").encode("utf-8")


def fence(text: str) -> str:
    text = clip(text.rstrip(), MAX_SECTION_BYTES - 16)
    ticks = "````" if "```" in text else "```"
    return f"{ticks}\n{text}\n{ticks}"
