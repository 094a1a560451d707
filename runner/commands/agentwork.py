"""Commands for an agent that works the queue itself (Claude Code, Codex, opencode in a
terminal): `runner work` and `runner submit` for one that only runs shell commands, `runner
mcp` for one that speaks MCP, and `runner prime`, what it reads first. The claim, the worktree,
the checks and the record are a worker's (runner.worker.agentwork); no command here approves,
rejects, retries or aborts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.commands.common import Tags, Target, check_worker_id, emit
from runner.core.errors import EXIT_FAILURE, BadInput
from runner.core.model import Sentinel

AgentId = Annotated[
    str,
    typer.Option(
        "--id",
        help="Your agent id, e.g. claude-alice (1 to 64 of A-Z a-z 0-9 . _ -): the claim, its heartbeat and every "
        "record name it.",
    ),
]
StepArg = Annotated[str, typer.Argument(help="The step.")]


def _work(target: Target, agent: str, tags: list[str] | None = None, heartbeat: str = "none"):
    """The agent's work on the target's queue; its claims' heartbeat kept by "thread" (this
    process: `runner mcp`), "keeper" (a process of its own: `runner work`) or "none"."""
    from runner.agents.prime import step_header
    from runner.worker.agentwork import AgentWork

    check_worker_id(agent)
    queue = target.queue()
    if heartbeat == "thread":
        return AgentWork(queue, agent, tags, heartbeat="thread", header=step_header())

    def keeper(session):
        if heartbeat != "keeper":
            return None
        from runner.worker.agentsession import start_keeper

        log = queue.store.state_dir / "logs" / f"keeper-{agent}.log"
        return start_keeper(Path(target.repo).resolve(), target.remote, target.branch, agent, session.step, log)

    return AgentWork(queue, agent, tags, heartbeat=keeper, header=step_header())


def work(
    target: Target,
    agent: AgentId,
    step_id: Annotated[str | None, typer.Argument(help="A particular step (default: the best ready one).")] = None,
    tag: Tags = [],
    context: Annotated[
        str | None,
        typer.Option(
            "--context",
            help="Relevant context for this step: a file's path (its text) or the text itself; it goes into the "
            "prompt and the handoff.",
        ),
    ] = None,
) -> None:
    """Take a step yourself, in a worktree of its own.

    Claim it as a worker would, make a git worktree at the integration
    branch's tip, print its path and the step's prompt. Exit 3 when nothing can be taken.

    A small background process keeps the claim's heartbeat and ends with the claim. Work in
    the worktree, then hand it in with `runner submit STEP --id ID` (or give it back with
    `runner release` / `runner fail`). One step at a time per id; `runner work` again prints
    the same claim."""
    from runner.commands.workers import caller_context

    claimed = _work(target, agent, tag, heartbeat="keeper").claim(step_id, caller_context(context))
    text = (
        f"claimed {claimed.step} (attempt {claimed.attempt}) as {agent}\nworktree: {claimed.worktree}\nnext: "
        f"work in that worktree, then `runner submit {claimed.step} --id {agent}`\n\n{claimed.prompt}"
    )
    emit(target, claimed.as_dict(), text.rstrip())


def submit(
    target: Target,
    step_id: StepArg,
    agent: AgentId,
    notes: Annotated[
        str | None,
        typer.Option(
            "--notes",
            help="A fact later steps must know: appended to plans/NOTES.md when the step is recorded.",
        ),
    ] = None,
) -> None:
    """Hand in the step you hold.

    Run its checks in your worktree (Automated Verification and QA,
    the project's gates, the verifier, the review) as a worker's tick would, tick what passed,
    record the outcome with its merge, and print the report.

    Exit 0 when it is done or waits for a person's approval; 1 when it failed, or when a check
    failed and fixes are left (the step is still yours: fix it and submit again)."""
    result = _work(target, agent).complete(step_id, notes)
    print_report(target, result)
    if result.sentinel not in (Sentinel.STEP_COMPLETE, Sentinel.STEP_BLOCKED):
        raise typer.Exit(EXIT_FAILURE)


def print_report(target: Target, result) -> None:
    from runner.commands.tickreport import render_text

    emit(target, result.as_dict(), render_text(result))


def prime(
    agent: Annotated[str | None, typer.Option("--id", help="Your agent id, to put in the commands it shows.")] = None,
) -> None:
    """Print what an agent reads first.

    At the start of a session: how to find, take and hand in a step, and
    what it may never do. `runner init --agent NAME --prime` writes it into that agent's
    project instructions file."""
    from runner.agents.prime import prime_text

    if agent:
        check_worker_id(agent)
    typer.echo(prime_text(agent).rstrip())


def check_prime(target: Target, agent: str | None) -> Path:
    """Where `runner init --agent NAME --prime` writes (refused before anything is written)."""
    from runner.agents.prime import INSTRUCTIONS_FILE
    from runner.store.choice import open_store

    if agent not in INSTRUCTIONS_FILE:
        raise BadInput(
            f"--prime writes the instructions file of the agent named by --agent: one of {', '.join(INSTRUCTIONS_FILE)}"
        )
    store = open_store(target.repo, remote=None)
    if not (store.workdir / ".git").exists():
        raise BadInput("--prime writes a file in the working tree, and this repository is bare")
    return store.workdir / INSTRUCTIONS_FILE[agent]


def write_prime(target: Target, agent: str | None) -> str:
    """`runner init --agent NAME --prime`: the prime text in NAME's instructions file, in this
    repository's working tree (for the person to commit), in a block a second run rewrites."""
    from runner.agents.prime import HOW_IT_IS_READ, with_prime

    path = check_prime(target, agent)
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    path.write_text(with_prime(existing, None), encoding="utf-8")
    said = f"wrote runner's prime text into {path.name} (commit it to share it)"
    return said + (f"; {HOW_IT_IS_READ[agent]}" if agent in HOW_IT_IS_READ else "")


def given_back(
    target: Target, step_id: str, agent: str, reason: str, fail: bool = False, permanent: bool = False
) -> bool:
    """`runner release` / `runner fail` of a step taken here with `runner work`: given back through
    its session, as the MCP tools do (a handoff, a failure's change kept on the step's branch,
    the worktree and the keeper ended). False when this host has no session of it."""
    from runner.worker.agentsession import Sessions

    if Sessions(target.queue().store.state_dir, agent).load(step_id) is None:
        return False
    work = _work(target, agent)
    print_report(target, work.fail(step_id, reason, permanent) if fail else work.release(step_id, reason))
    return True


def keep_claim(target: Target, step_id: StepArg, agent: AgentId) -> None:
    """The background process `runner work` starts: keeps the claim's heartbeat, ends with the claim."""
    from runner.worker.agenthost import keep_claim as keep

    check_worker_id(agent)
    keep(target.queue(), agent, step_id)


def mcp(target: Target, agent: AgentId, tag: Tags = []) -> None:
    """Serve the agent tools over MCP, on stdio.

    For a coding agent that takes steps itself, acting as --id.

    Tools: ready, show, claim, complete, fail, release, log. claim makes a worktree at the
    integration tip and keeps the claim's heartbeat while this server runs; complete runs the
    step's checks there as a worker would and records the outcome. No tool approves, rejects,
    retries or aborts. Configure it in your agent as the command `runner mcp --id NAME`."""
    from runner.commands.mcpserver import serve

    serve(_work(target, agent, tag, heartbeat="thread"), target)
