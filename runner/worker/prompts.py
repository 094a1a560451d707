"""What a role's command sees: its argv with {tokens} substituted, and the prompt file
(the role's prompt + plans/root.md + plans/NOTES.md + the step + feedback)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from runner.core.layout import NOTES_FILE, PROMPTS_DIR, ROOT_FILE
from runner.core.plan import Plan
from runner.core.tokens import fill_tokens, substitute  # noqa: F401 (worker modules import them from here)

TOKENS = (
    "prompt_file", "prompt", "step_file", "step", "title", "attempt", "cwd", "worktree", "worker", "feedback",
    "output", "diff_file", "verdict", "findings", "artifact", "notes_file", "current_task", "current_phase",
)


def prompt_text(role: str, read: Callable[[str], bytes | None], step_text: str, feedback: str,
                tokens: dict[str, str | Callable[[], str]]) -> str:
    """The prompt a role is handed: its own prompt (plans/prompts/<role>.md, tokens filled),
    the plan's context, the step, the feedback."""
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
    if feedback:
        parts.append("## Feedback from the previous run\n\n" + feedback.rstrip())
    return "\n\n".join(parts) + "\n"


def current_phase(plan: Plan, step_id: str) -> str:
    """Where the step stands in the plan: steps done of the total, and its dependency layer."""
    done = sum(1 for s in plan.steps.values() if s.status == "done")
    layers: dict[str, int] = {}

    def layer(sid: str, seen: frozenset = frozenset()) -> int:
        if sid not in layers:
            step = plan.steps.get(sid)
            deps = [d for d in (step.depends_on if step else []) if d in plan.steps and d not in seen]
            layers[sid] = 1 + max((layer(d, seen | {sid}) for d in deps), default=0)
        return layers[sid]

    return f"{done}/{len(plan.steps)} steps done; layer {layer(step_id)} of {max((layer(s) for s in plan.steps), default=1)}"


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def verdict_json(verdict) -> str:
    return json.dumps(verdict.as_dict() if verdict else None)
