"""`runner mcp --id AGENT`: an MCP server over stdio (the official Python SDK, imported only
by this command) whose tools are the agent's work on the queue: ready, show, claim, complete,
fail, release, log. Each tool is small, names its step by a `step` argument, and acts as the
one id the server was started with; none approves, rejects, retries or aborts. Tool
descriptions cost every session context: together they stay under 8,000 characters."""

import inspect
import json
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from runner import __version__
from runner.commands.failures import classify
from runner.core.limits import clip
from runner.core.model import Status

INSTRUCTIONS = (
    "runner's plan: steps on a git branch. Take one with claim, work only in the worktree it returns, hand it in with "
    "complete (runner runs the step's checks and records the outcome). Never approve, reject, retry or abort: those "
    "are a person's. One step at a time."
)
Step = Annotated[str, Field(description="The step id.")]
Reason = Annotated[str, Field(description="Why, in a sentence or two.")]
# What a tool answers: the text the agent reads, and the same facts as data (structured content).
Answer = tuple[str, dict[str, Any]]


def answered(func: Callable[..., Answer]) -> Callable[..., CallToolResult]:
    """A tool's function as the SDK calls it: its text beside its data (structured content, no
    output schema, which would grow every session's context), and a failure as runner tells
    every failure (runner.commands.failures), with its JSON as the structured content."""

    def guarded(*args, **kwargs) -> CallToolResult:
        try:
            text, data = func(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 (every fault ends here, reported, never a traceback for the agent)
            failure = classify(exc)
            return CallToolResult(
                content=[TextContent(type="text", text=failure.brief)],
                structured_content=failure.as_dict(),
                is_error=True,
            )
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=as_json(data))

    guarded.__name__ = func.__name__
    guarded.__signature__ = inspect.signature(func).replace(return_annotation=CallToolResult)  # type: ignore[attr-defined]
    return guarded


def as_json(data: dict[str, Any]) -> dict[str, Any]:
    """The data as JSON reads it back (times and paths as text), as `--json` prints it."""
    return json.loads(json.dumps(data, default=str))


def build(work, target) -> MCPServer:
    from runner.commands.tickreport import render_text

    app = MCPServer("runner", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

    def tool(description: str) -> Callable:
        def register(func: Callable[..., Answer]) -> Callable[..., Answer]:
            app.tool(description=description, structured_output=False)(answered(func))
            return func

        return register

    def reported(result) -> Answer:
        return render_text(result), result.as_dict()

    @tool("The steps you may take now, best first.")
    def ready() -> Answer:
        found = work.ready()
        if not found.steps:
            return found.why or "", found.as_dict()
        return "\n".join(f"{s.step}: {s.title} (priority {s.priority})" for s in found.steps), found.as_dict()

    @tool(
        "A step with its context: the plan's root.md and NOTES.md, the step file, what its dependencies left, "
        "feedback from earlier attempts."
    )
    def show(step: Step) -> Answer:
        shown = work.show(step)
        return shown.text, shown.as_dict()

    @tool(
        "Claim a step (empty: the best ready one) as a worker would. runner makes a git worktree at the integration "
        "branch's tip and returns its path and the step's prompt; work only there. The claim's heartbeat is kept "
        "while this session lives. One step at a time."
    )
    def claim(step: Annotated[str, Field(description="The step id, or empty for the best ready one.")] = "") -> Answer:
        held = work.claim(step or None)
        text = (
            f"Claimed {held.step} (attempt {held.attempt}) as {work.agent}.\nWorktree: {held.worktree}\n\n{held.prompt}"
        )
        return text, {**held.as_dict(), "status": Status.CLAIMED, "agent": work.agent}

    @tool(
        "Hand in the step you hold: runner runs its Automated Verification and QA commands, the project's gates and "
        "the verifier in your worktree, ticks what passed and records the outcome with its merge. Returns the "
        "report: Automated Verification N/M, Automated QA, manual checks left, final status. When a check fails and "
        "fixes are left, nothing is recorded: fix it and call complete again."
    )
    def complete(
        step: Step, notes: Annotated[str, Field(description="A fact later steps must know (added to NOTES.md).")] = ""
    ) -> Answer:
        return reported(work.complete(step, notes or None))

    @tool("The step you hold cannot be done as written: record a failure (retried later with your reason as feedback).")
    def fail(step: Step, reason: Reason) -> Answer:
        return reported(work.fail(step, reason))

    @tool("Give the step you hold back unfinished: ready again at once, no attempt spent.")
    def release(step: Step, reason: Reason) -> Answer:
        return reported(work.release(step, reason))

    @tool("The queue's audit trail, newest first: who claimed, completed, failed or released what, and why.")
    def log(
        step: Annotated[str, Field(description="Only this step (empty: all).")] = "",
        limit: Annotated[int, Field(description="At most this many entries.", ge=1, le=200)] = 20,
    ) -> Answer:
        entries = work.queue.log(step or None, limit)
        return "\n".join(log_line(e) for e in entries) or "no events", {"entries": entries}

    return app


def log_line(entry: dict) -> str:
    attempt = f" (attempt {entry['attempt']})" if entry["attempt"] else ""
    status = f" -> {entry['status']}" if entry["status"] else ""
    reason = f": {clip(entry['reason'], 300)}" if entry.get("reason") else ""
    return f"{entry['time']} {entry['event']} {entry['step'] or ''} by {entry['actor']}{attempt}{status}{reason}"


def serve(work, target) -> None:
    """Serve on stdin/stdout until the client goes away. A claim held then stays: its lease
    (or, on this host, its dead pid) lets it be taken over; nothing is released for the agent."""
    build(work, target).run("stdio")
