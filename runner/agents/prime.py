"""What an agent that works the queue itself reads: `runner prime` (how to find, take and hand
in a step, and what it may never do), the header of a claimed step's prompt, and the file each
agent CLI reads its project instructions from, so `runner init --agent NAME --prime` can put
the prime text there (in a marked block that a second run rewrites, never duplicates).
"""

from __future__ import annotations

from runner.agents.prompts import render
from runner.resources import read_text

# The project instructions file each agent CLI reads by itself (aider only when told to).
INSTRUCTIONS_FILE = {
    "claude": "CLAUDE.md",
    "codex": "AGENTS.md",
    "opencode": "AGENTS.md",
    "gemini": "GEMINI.md",
    "aider": "CONVENTIONS.md",
}
HOW_IT_IS_READ = {
    "aider": "aider reads it only when told: `aider --read CONVENTIONS.md`, or `read: CONVENTIONS.md` in "
    ".aider.conf.yml"
}
BEGIN = "<!-- runner prime: begin (written by `runner init --agent NAME --prime`; it rewrites this block) -->"
END = "<!-- runner prime: end -->"
ANY_ID = "AGENT-ID"


def prime_text(agent: str | None = None) -> str:
    """The text an agent reads at the start of a session, for agent id `agent`."""
    note = (
        ""
        if agent
        else ", one you choose for yourself (1 to 64 of A-Z a-z 0-9 . _ -, e.g. claude-alice) and keep all session"
    )
    return render(read_text("runner.agents", "texts", "prime.md"), {"agent": agent or ANY_ID, "id_note": note})


def step_header() -> str:
    """The start of a claimed step's prompt (a plan may replace it with plans/prompts/agent.md)."""
    return read_text("runner.agents", "texts", "agent.md")


def with_prime(existing: str, agent: str | None = None) -> str:
    """An instructions file's text with the prime block in it: the block replaced where it is,
    else added at the end; everything else kept as it was."""
    block = f"{BEGIN}\n{prime_text(agent).rstrip()}\n{END}\n"
    start, stop = existing.find(BEGIN), existing.find(END)
    if start != -1 and stop > start:
        after = existing[stop + len(END) :]
        return existing[:start] + block + (after.removeprefix("\n"))
    if not existing.strip():
        return block
    return existing.rstrip("\n") + "\n\n" + block
