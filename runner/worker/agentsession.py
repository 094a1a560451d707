"""What one claim of an agent working the queue itself leaves on this host: a session file
(.git/runner/agents/<agent>/<step>.json) naming the step, the attempt, the incarnation, the
worktree and what the checks have spent so far, so that `runner submit`, a process of its own,
goes on where `runner work` left off; where the worktree goes; the context an agent reads; and
the keeper, the small process that keeps a shell agent's heartbeat until the claim ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runner.core.comments import feedback_of
from runner.core.layout import NOTES_FILE, PROMPTS_DIR, ROOT_FILE, handoff_path
from runner.core.limits import KIB, clip
from runner.core.model import Status
from runner.core.usage import Spend, from_record
from runner.worker.attempt import Run, State
from runner.worker.prompts import prompt_text
from runner.worker.report import HandIn, StepReport, TickOutcome, TickResult

HANDOFF_SHOWN = 8 * KIB  # of each dependency's handoff, in what an agent reads (its context costs tokens)
WORKTREES = ".runner"  # in the clone's working tree, where the agent's own tools may edit files


@dataclass
class Session:
    step: str
    attempt: int
    incarnation: str
    worktree: str
    base: str
    claimed: float  # wall-clock seconds of the claim: the attempt's duration and budget count from it
    since: float  # of the claim or the last hand-in: how long the agent worked on this pass
    keeper: dict[str, Any] | None = None  # {"pid", "started"}: the process keeping a shell agent's heartbeat
    passes: int = 0  # hand-ins whose checks did not pass
    fixes: int = 0
    reviews: int = 0
    swept: bool = False
    resolves: int = 0  # times the integration branch moved under a hand-in and was merged into the worktree
    conflicts: list[str] = field(default_factory=list)  # what that merge left to the agent to resolve
    sides: list[str] = field(default_factory=list)  # the merge's two parents: a marker in neither is left over
    context: str = ""  # the caller's context (`runner work --context`): in the prompt and the handoff
    scores: list[float] = field(default_factory=list)
    feedback: str = ""
    runs: list[dict[str, Any]] = field(default_factory=list)

    def keep(self, state: State) -> None:
        """What this pass of the checks spent, for the next hand-in."""
        self.fixes, self.reviews, self.swept, self.resolves = state.fixes, state.reviews, state.swept, state.resolves
        self.scores, self.feedback = list(state.scores), state.feedback
        self.runs = [run.as_dict() for run in state.runs]
        self.passes += 1

    def restore_runs(self) -> list[Run]:
        return [
            Run(
                r.get("name", "?"),
                r.get("result", "not run"),
                r.get("seconds"),
                r.get("detail", ""),
                from_record(r.get("usage")),
                r.get("model"),
            )
            for r in self.runs
        ]


class Sessions:
    """The session files of one agent id in one repository."""

    def __init__(self, state_dir: Path, agent: str):
        self.folder = state_dir / "agents" / agent
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, step: str) -> Path:
        return self.folder / f"{step}.json"

    def load(self, step: str) -> Session | None:
        try:
            data = json.loads(self.path(step).read_text())
            return Session(**data)
        except (OSError, ValueError, TypeError):
            return None  # none, or not ours to trust: the claim's own facts decide

    def save(self, session: Session) -> None:
        tmp = self.path(session.step).with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(session)))
        os.replace(tmp, self.path(session.step))

    def forget(self, step: str) -> None:
        self.path(step).unlink(missing_ok=True)

    def all(self) -> list[Session]:
        return [s for p in sorted(self.folder.glob("*.json")) if (s := self.load(p.stem)) is not None]


def worktree_folder(workdir: Path, state_dir: Path, agent: str) -> Path:
    """Where an agent's worktrees go: `.runner/` in the clone's working tree (an agent CLI may
    edit files under the folder it runs in, and some keep `.git` read-only), ignored by git
    through a `.gitignore` of its own; in a bare repository, under .git/runner."""
    if not (workdir / ".git").exists():  # a bare repository: its working folder is its git folder
        return state_dir / "agents" / agent / "worktrees"
    folder = workdir / WORKTREES
    folder.mkdir(exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# runner's worktrees for agents working the queue themselves\n*\n")
    return folder


def state_of(session: Session, step, config) -> State:
    """The pipeline's state of the attempt a session holds, with what earlier hand-ins spent."""
    config = config.for_step(step.meta)
    scores = session.scores or [float(x) for x in step.get("scores", []) if isinstance(x, (int, float))]
    feedback = session.feedback or feedback_of(step.meta)
    return State(
        step=step,
        attempt=session.attempt,
        config=config,
        feedback=feedback,
        scores=scores,
        spent_before=float(step.get("spent", 0) or 0),
        runs=session.restore_runs(),
        implement_runs=session.passes + 1,
        fixes=session.fixes,
        reviews=session.reviews,
        swept=session.swept,
        resolves=session.resolves,
        context=session.context,
        usage_before=Spend.from_meta(step.get("usage")),
        rung=int(step.get("rung") or 0),
    )


def not_yet(session: Session, state: State, feedback: str, agent: str, conflicts: tuple[str, ...] = ()) -> TickResult:
    """The result of a hand-in whose checks failed with fixes left, or whose merge conflicts
    (outcome resolve): nothing recorded, the step still the agent's."""
    from runner.worker.record import qa_doc

    hand_in = HandIn(
        session.worktree,
        feedback,
        state.config.brakes.max_fix_attempts - state.fixes,
        state.config.brakes.max_review_attempts - state.reviews,
        conflicts,
    )
    outcome = TickOutcome.RESOLVE if conflicts else TickOutcome.FIX
    report = StepReport.of(state, Status.CLAIMED, [], [], None, qa_doc(state.step.text))
    return TickResult(None, outcome, agent, None, state.step.id, state.attempt, report=report, hand_in=hand_in)


# --- what an agent reads ------------------------------------------------------------------------


def context(
    read, plan, step, feedback: str, header: str | None = None, tokens: dict | None = None, caller: str = ""
) -> str:
    """root.md, NOTES.md, the step, what its dependencies left (clipped) and the feedback;
    after `header` (its {tokens} filled) when one is given."""

    def files(path: str) -> bytes | None:
        if path == f"{PROMPTS_DIR}/agent.md":
            return (read(path) or header.encode()) if header is not None else None
        return read(path) if path in (ROOT_FILE, NOTES_FILE) else None

    text = prompt_text("agent", files, step.text, "", tokens or {}, context=caller)
    left = []
    for dep in step.depends_on:
        other = plan.steps.get(dep)
        data = read(handoff_path(other.path)) if other is not None else None
        if data:
            left.append(f"### {dep}\n\n" + clip(data.decode("utf-8", errors="replace").strip(), HANDOFF_SHOWN))
    if left:
        text += "\n## What its dependencies left\n\n" + "\n\n".join(left) + "\n"
    if feedback:
        text += "\n## Feedback from the previous run\n\n" + feedback.rstrip() + "\n"
    return text


def shown(store, snap, step_id: str) -> dict[str, Any]:
    """A step as an agent reads it: its status and who holds it, then its context (`text`), and
    those facts as data."""
    from runner.core.errors import BadInput

    step = snap.plan.find(step_id)
    if step is None:
        raise BadInput(f"no step {step_id!r} (see `runner ready` or `runner status`)")
    status = snap.plan.derived_status(step)
    claimed = step.get("status") == Status.CLAIMED
    holder = f", held by {step.assignee} (attempt {step.attempt})" if claimed else ""
    head = f"{step.id}: {step.title} [{status}{holder}]\n" + "".join(f"problem: {p}\n" for p in step.problems)
    facts = {
        "step": step.id,
        "title": step.title,
        "status": status,
        "assignee": step.assignee if claimed else None,
        "attempt": step.attempt if step.valid else None,
        "problems": list(step.problems),
    }
    if not step.valid:
        return {**facts, "text": head}
    step = step.full()
    feedback = feedback_of(step.meta)
    return {
        **facts,
        "text": head + "\n" + context(lambda path: store.file_at(snap.tip, path), snap.plan, step, feedback),
    }


# --- the keeper: a shell agent's heartbeat --------------------------------------------------------


def start_keeper(repo: Path, remote: str | None, branch: str, agent: str, step: str, log: Path) -> dict[str, Any]:
    """Start `runner keep-claim` in a session of its own (it outlives the command that starts
    it, and ends when the claim does); its pid and start time."""
    from runner.queue.leases import process_start_time

    argv = [
        sys.executable,
        "-m",
        "runner",
        "keep-claim",
        step,
        "--id",
        agent,
        "--repo",
        str(repo),
        "--queue-branch",
        branch,
    ]
    if remote != "auto":
        argv += ["--remote", remote or "none"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        path = os.pathsep.join(filter(None, [_package_root(), os.environ.get("PYTHONPATH")]))
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": path},
        )
    return {"pid": proc.pid, "started": process_start_time(proc.pid)}


def _package_root() -> str:
    """The folder runner is imported from, so the keeper runs the same code as its starter."""
    return str(Path(__file__).resolve().parents[2])


def stop_keeper(keeper: dict[str, Any] | None) -> None:
    """End a keeper that is still running (and only that process: its pid and start time)."""
    from runner.queue.leases import process_start_time

    if not keeper or not isinstance(keeper.get("pid"), int):
        return
    started = process_start_time(keeper["pid"])
    if started is None or (isinstance(keeper.get("started"), (int, float)) and abs(started - keeper["started"]) > 1.0):
        return
    try:
        os.kill(keeper["pid"], signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
