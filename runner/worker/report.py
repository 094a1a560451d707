"""What a tick says when it ends: one report (a dict, printed as the step report people
know from step runners, or as one JSON object with the same fields)."""

from __future__ import annotations

import json
from typing import Any

from runner.core.stepfile import checklist, manual_checks
from runner.store import StoreError
from runner.worker.gates import PASS

STATUS_WORD = {"STEP_COMPLETE": "completed", "STEP_BLOCKED": "blocked", "STEP_REJECTED": "failed", "STEP_FAILED": "failed"}


def skip(worker: str, reason: str, outcome: str = "skip", **extra: Any) -> dict[str, Any]:
    return {"sentinel": "SKIP", "outcome": outcome, "reason": reason, "worker": worker, **extra}


def lost(queue, worker: str, step_id: str, attempt: int, reason: str) -> dict[str, Any]:
    """The claim went away under a worker: taken over (SKIP), or aborted by a person (STEP_REJECTED)."""
    try:
        step = queue.snapshot().plan.steps.get(step_id)
    except StoreError:
        step = None
    last_error = str(step.meta.get("last_error") or "") if step else ""
    if step is not None and step.status == "failed" and last_error.startswith("aborted by"):
        return {"sentinel": "STEP_REJECTED", "outcome": "rejected", "reason": last_error, "step": step_id, "attempt": attempt, "worker": worker}
    return skip(worker, reason, "lost", step=step_id, attempt=attempt)


def checklist_summary(step_text: str, gates, section: str, kind: str) -> dict[str, Any]:
    """N of M items of a checklist section that passed this run, each as [x] or [ ]."""
    passed = {g.label for g in gates if g.section == kind and g.result == PASS}
    items = [{"label": label, "passed": ticked or label in passed} for _, ticked, label, _ in checklist(step_text, section)]
    return {"passed": sum(1 for i in items if i["passed"]), "total": len(items), "items": items}


def step_report(sentinel: str, step, attempt: int, worker: str, status: str | None, reason: str | None,
                files: list[str], gates, roles, runs, faults, overrides, commit: str | None, log: str | None,
                qa_doc: str | None, will_retry: bool | None = None) -> dict[str, Any]:
    return {
        "sentinel": sentinel,
        "status": STATUS_WORD.get(sentinel, "skipped"),
        "outcome": status,
        "step": step.id,
        "title": step.title,
        "attempt": attempt,
        "worker": worker,
        "final_status": status,
        "reason": reason,
        "will_retry": will_retry,
        "files_changed": files,
        "automated_verification": checklist_summary(step.text, gates, "Automated Verification", "check"),
        "automated_qa": checklist_summary(step.text, gates, "Automated QA", "qa"),
        "qa_doc": qa_doc,
        "manual_checks_left": manual_checks(step.text),
        "gates": [g.as_dict() for g in gates],
        "roles": [r.as_dict() for r in roles],
        "runs": runs,
        "faults": faults,
        "overrides": overrides,
        "commit": commit,
        "log": log,
    }


def render_text(report: dict[str, Any]) -> str:
    """The step report as text (the shape people know from step runners)."""
    if "step" not in report or "automated_verification" not in report:
        line = f"{report['sentinel']} {report.get('reason') or ''}".rstrip()
        if report.get("step"):
            line = f"{report['sentinel']} {report['step']} attempt {report.get('attempt')}: {report.get('reason') or report.get('outcome')}"
        return line
    lines = [
        f"Status: {report['status']}",
        f"Step: {report['step']} - {report['title']}",
        f"Final frontmatter status: {report['final_status']}",
        "Files changed: " + (", ".join(report["files_changed"]) or "none"),
    ]
    for title, key in (("Automated Verification", "automated_verification"), ("Automated QA", "automated_qa")):
        summary = report[key]
        if summary["total"]:
            lines.append(f"{title}: {summary['passed']}/{summary['total']} passed")
            lines += [f"  - [{'x' if item['passed'] else ' '}] {item['label']}" for item in summary["items"]]
    if report.get("qa_doc"):
        lines.append(f"QA Doc: {report['qa_doc']}")
    if report["manual_checks_left"]:
        lines.append("Manual verification needed:")
        lines += [f"  - [ ] {item}" for item in report["manual_checks_left"]]
    if report.get("reason") and report["sentinel"] != "STEP_COMPLETE":
        retry = {True: " (it will be retried)", False: " (it will not be retried)"}.get(report.get("will_retry"), "")
        lines.append(f"Reason: {report['reason'][:500]}{retry}")
    lines.append(report["sentinel"] + (f": {report['reason'][:200]}" if report.get("reason") and report["sentinel"] != "STEP_COMPLETE" else ""))
    return "\n".join(lines)


def print_report(report: dict[str, Any], json_out: bool, last_skip: list[str | None]) -> None:
    """Print a tick's report; an idle daemon says why it skips once, not every tick."""
    if json_out:
        print(json.dumps(report, default=str), flush=True)
        return
    if report["sentinel"] == "SKIP" and "automated_verification" not in report:
        if report.get("reason") != last_skip[0]:
            print(f"SKIP {report.get('reason')}", flush=True)
        last_skip[0] = report.get("reason")
        return
    last_skip[0] = None
    print(render_text(report), flush=True)
