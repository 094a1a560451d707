"""What a role's command sees: its argv with {tokens} substituted, and the prompt file
(the role's prompt + plans/root.md + plans/NOTES.md + the step + feedback)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from runner.core.layout import NOTES_FILE, PROMPTS_DIR, ROOT_FILE
from runner.core.limits import MAX_ARG_BYTES
from runner.core.model import Status
from runner.core.plan import Plan
from runner.core.tokens import fill_tokens, substitute  # noqa: F401 (worker modules import them from here)


def prompt_text(
    role: str,
    read: Callable[[str], bytes | None],
    step_text: str,
    feedback: str,
    tokens: dict[str, str | Callable[[], str]],
    context: str = "",
    scenario: str = "",
) -> str:
    """The prompt a role is handed: its own prompt (plans/prompts/<role>.md, tokens filled), the
    plan's context, the step, the caller's context, the QA scenario (for [roles.qa]), the
    feedback."""
    parts = []
    own = read(f"{PROMPTS_DIR}/{role}.md")
    if own:
        values = {k: v for k, v in tokens.items() if k not in ("prompt", "prompt_file")}  # (the prompt names no prompt)
        parts.append(fill_tokens(own.decode("utf-8", errors="replace"), values).rstrip())
    for path in (ROOT_FILE, NOTES_FILE):
        data = read(path)
        if data:
            parts.append(data.decode("utf-8", errors="replace").rstrip())
    parts.append(step_text.rstrip())
    if context.strip():
        parts.append("## Context from the caller\n\n" + context.rstrip())
    if scenario.strip():
        parts.append("## The QA scenario to walk through\n\n" + scenario.rstrip())
    if feedback:
        parts.append("## Feedback from the previous run\n\n" + feedback.rstrip())
    return "\n\n".join(parts) + "\n"


def current_phase(plan: Plan, step_id: str) -> str:
    """Where the step stands in the plan: steps done of the total, and its dependency layer."""
    done = sum(1 for s in plan.steps.values() if s.status == Status.DONE)
    layers = dependency_layers(plan)
    return f"{done}/{len(plan.steps)} steps done; layer {layers.get(step_id, 1)} of {max(layers.values(), default=1)}"


def dependency_layers(plan: Plan) -> dict[str, int]:
    """Each step's layer: 1 + the deepest of its dependencies'. Iterative, so a chain of
    thousands of steps needs no deep recursion; a cycle (an invalid plan) is cut."""
    layers: dict[str, int] = {}
    for start in plan.steps:
        stack, on_path = [start], {start}
        while stack:
            sid = stack[-1]
            step = plan.steps.get(sid)
            pending = [
                d for d in (step.depends_on if step else []) if d in plan.steps and d not in layers and d not in on_path
            ]
            if pending:
                stack.append(pending[0])
                on_path.add(pending[0])
                continue
            deps = [layers[d] for d in (step.depends_on if step else []) if d in layers]
            layers[sid] = 1 + max(deps, default=0)
            stack.pop()
            on_path.discard(sid)
    return layers


def as_argument(prompt: str, path: Path) -> str:
    """The prompt as one argv element ({prompt}). Past MAX_ARG_BYTES the kernel refuses to
    start the command ("Argument list too long": Linux takes 128 KiB an argument), so the
    prompt goes to `path` and the argument says where it is; agents read files."""
    size = len(prompt.encode("utf-8"))
    if size <= MAX_ARG_BYTES:
        return prompt
    write(path, prompt)
    return (
        f"Your instructions for this run are {size:,} bytes, too long to pass as an argument, so they are in the "
        f"file {path}. Read that whole file first, then do what it says."
    )


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def verdict_json(verdict) -> str:
    return json.dumps(verdict.as_dict() if verdict else None)
