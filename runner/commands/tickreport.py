"""A tick's result in words: the step report people know from step runners (`runner tick`,
`runner worker`, `runner submit`, the MCP server's hand-in), or one JSON object per tick."""

from __future__ import annotations

import json

from runner.core.model import Sentinel
from runner.worker.report import TickOutcome, TickResult


def render_text(result: TickResult) -> str:
    """The result as text (the step report's shape people know from step runners)."""
    if result.report is None:
        if result.step:
            return f"{result.sentinel} {result.step} attempt {result.attempt}: {result.reason or result.outcome}"
        return f"{result.sentinel} {result.reason or ''}".rstrip()
    report = result.report
    if result.hand_in is not None:
        lines = [
            f"Status: not recorded: {not_yet_status(result)}",
            f"Step: {result.step} - {report.title}",
            "Final frontmatter status: claimed (still yours)",
        ]
    else:
        lines = [
            f"Status: {result.status}",
            f"Step: {result.step} - {report.title}",
            f"Final frontmatter status: {report.final_status}",
            "Files changed: " + (", ".join(report.files_changed) or "none"),
        ]
    sections = (("Automated Verification", report.automated_verification), ("Automated QA", report.automated_qa))
    for title, summary in sections:
        if summary.items:
            lines.append(f"{title}: {summary.passed}/{len(summary.items)} passed")
            lines += [f"  - [{'x' if ok else ' '}] {label}" for label, ok in summary.items]
    if report.qa_doc and result.hand_in is None:
        lines.append(f"QA Doc: {report.qa_doc}")
    if report.manual_checks_left:
        lines.append("Manual verification needed:")
        lines += [f"  - [ ] {item}" for item in report.manual_checks_left]
    if result.hand_in is not None:
        hand_in = result.hand_in
        return "\n".join([*lines, f"Worktree: {hand_in.worktree}", "What to fix:", hand_in.feedback.rstrip()])
    reason = result.reason if result.reason and result.sentinel != Sentinel.STEP_COMPLETE else ""
    if reason:
        retry = (
            ""
            if result.will_retry is None
            else " (it will be retried)"
            if result.will_retry
            else " (it will not be retried)"
        )
        lines.append(f"Reason: {reason[:500]}{retry}")
    lines.append(f"{result.sentinel}" + (f": {reason[:200]}" if reason else ""))
    return "\n".join(lines)


def not_yet_status(result: TickResult) -> str:
    assert result.hand_in is not None
    if result.outcome == TickOutcome.RESOLVE:
        return (
            "the integration branch moved and its new tip conflicts with your change in "
            f"{', '.join(result.hand_in.conflicts)}: resolve the conflicts left between git's markers in your "
            "worktree and hand it in again (no attempt is spent)"
        )
    return (
        "the checks did not pass. Fix it and hand it in again (if the checks fail "
        f"{result.hand_in.fixes_left + 1} more time(s), it is recorded as failed)"
    )


class ReportPrinter:
    """Prints each tick's result as it ends (as JSON, or as text); an idle daemon says why it skips
    once, not every tick."""

    def __init__(self, json_out: bool):
        self.json_out = json_out
        self.last_skip: str | None = None

    def __call__(self, result: TickResult) -> None:
        if self.json_out:
            print(json.dumps(result.as_dict(), default=str), flush=True)
            return
        if result.sentinel == Sentinel.SKIP and result.report is None:
            if result.reason != self.last_skip:
                print(f"SKIP {result.reason}", flush=True)
            self.last_skip = result.reason
            return
        self.last_skip = None
        print(render_text(result), flush=True)
