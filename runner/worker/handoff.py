"""Handoff files: what a worker leaves for the next person or step, schema-checked before commit."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from runner.core.errors import BadInput
from runner.core.limits import MAX_TEXT_BYTES, clip
from runner.core.stepfile import dump_flow

MAX_SECTION_BYTES = 4 * MAX_TEXT_BYTES  # one section of a handoff (a review's, a sweep's output)


class GateEntry(BaseModel):
    name: str
    result: Literal["pass", "fail", "not run"]
    detail: str = ""


class HandoffMeta(BaseModel):
    step: str
    attempt: int = Field(ge=1)
    worker: str
    outcome: Literal["done", "review", "ready", "failed"]
    gates: list[GateEntry]
    files_changed: list[str]
    duration_s: float = Field(ge=0)
    result_commit: str | None = None
    sentinel: str
    reason: str | None = None
    overrides: list[str] = []
    faults: list[str] = []
    verdict: dict | None = None
    qa_doc: str | None = None


def render_handoff(meta: HandoffMeta, sections: dict[str, str]) -> bytes:
    try:
        checked = HandoffMeta.model_validate(meta.model_dump())
    except ValidationError as exc:  # pragma: no cover - guarded by the model itself
        raise BadInput(f"handoff does not match its schema: {exc}") from exc
    data = checked.model_dump()
    lines = ["---"]
    for key, value in data.items():
        if key == "gates":
            lines.append("gates:")
            lines += [f"  - {dump_flow(g)}" for g in value]
        else:
            lines.append(f"{key}: {dump_flow(value)}")
    lines.append("---")
    lines.append(f"# Handoff: {checked.step} (attempt {checked.attempt})")
    lines.append("")
    lines.append(
        f"**{checked.sentinel}** by {checked.worker}: {checked.outcome}"
        + (f" ({checked.reason})" if checked.reason else "")
    )
    lines.append("")
    lines.append("| gate | result | detail |")
    lines.append("|---|---|---|")
    for gate in checked.gates:
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
