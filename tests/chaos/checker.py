"""The history checker: what a run did, judged from what it left behind.

It reads the remote's queue branch (every commit, oldest first, and the step file
before and after each transition), the integration branch, the remote's reflogs and
the landing time of every ref update (a reference-transaction hook the harness puts
on the remote), the workers' own logs and the execution log the steps append to, and
asserts the delivery contract:

  terminal       every step reached done or failed (or is blocked by a failed dependency)
  overlap        no step was claimed while a claim of it was live; a takeover names the
                 attempt it replaces; a takeover is judged by the holder's heartbeats as they
                 landed on the remote: legal when they stopped for longer than the lease (a dead,
                 cut-off or late holder) or when the holder's process was dead and the taker on
                 its host; a takeover of a holder that beat in time is a stolen live claim
  holder         every outcome was recorded by the holder of the current attempt (worker id
                 and incarnation), at most once per attempt, and never twice `done`
  claim          no recorded outcome lacks its claim; nothing was executed without a claim,
                 or by a process other than the claim's holder; no done step without a run
  integration    the integration branch holds each done step's recorded commit exactly once,
                 in dependency order, and nothing else (a merge by an attempt that lost its
                 lease is a stray merge)
  rewrite        nothing on the remote was rewritten: every update of the queue, integration
                 and heartbeat refs (reflog, and tips sampled during the run) is a fast-forward

It reads git with pygit2 and step files with PyYAML, not with runner's reader, so a bug
in runner's reader cannot hide a bug in its writer. Commit messages are the exception:
they are read through runner's codec, in one function (`read_event`).
"""

from __future__ import annotations

import json
import os
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pygit2
import yaml

from runner.core import codec
from runner.core.machine import Event, Kind

HOLDER_OUTCOMES = ("complete", "fail", "release", "block")
PERSON_EVENTS = ("approve", "reject", "retry", "abort")
TRANSITIONS = ("claim", "takeover", *HOLDER_OUTCOMES, *PERSON_EVENTS)
STEPS_DIR = "plans/steps/"
HEARTBEATS = "refs/runner/heartbeats/"
REF_TIMES = "ref-times.log"  # in the remote's git dir, written by REF_TIMES_HOOK
ZERO = "0" * 40
DEATH_SLACK = (
    2.0  # seconds: the harness notes a crash-point death when its supervisor sees it (every 0.05 s, under load)
)

# On the remote: the landing time of every ref update, to the millisecond (the reflog has whole seconds).
# "committed" runs after the refs moved, so the time is an upper bound of the landing.
REF_TIMES_HOOK = """#!/bin/sh
[ "$1" = committed ] || exit 0
now=$(date +%s.%N)
while read -r old new ref; do echo "$now $old $new $ref"; done >> @LOG@
"""

_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*\r?$", re.DOTALL | re.MULTILINE)
_LOG_LINE = re.compile(r"^(\S+) (\S+) (\S+) (.*)$")
_START = re.compile(r"incarnation (\S+) pid (\d+)")
_CLAIMED = re.compile(r"^claimed (\S+) attempt (\d+)")
_RECORDED = re.compile(r"^(\S+) attempt (\d+) -> (\S+?)(?::|$)")
_ERRORED = re.compile(r"^(\S+) attempt (\d+): (.*)")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# --- runner's commit messages: read in one place, through runner's codec ----------------------


@dataclass(frozen=True)
class Message:
    """What a runner commit says it records. kind is None for a commit that records no event:
    a person's plan edit, or a step's result or merge commit (which name only step and attempt)."""

    kind: str | None
    step: str = ""
    actor: str = ""
    attempt: int | None = None
    replaces: int | None = None
    status: str | None = None  # the step's status after the event
    reason: str = ""


def read_event(message: str) -> Message:
    """The only reader of runner's commit messages in the chaos suite. Raises ValueError
    (codec.CodecError) for a message that claims to be runner's but does not decode."""
    trailers = codec.trailers_of(message)
    if "Event" not in trailers:
        return Message(None, trailers.get("Step", ""), trailers.get("Actor", ""), _int(trailers.get("Attempt")))
    decoded = codec.decode(message)
    e = decoded.event
    return Message(str(e.kind), e.step or "", e.actor, e.attempt, e.replaces, decoded.status, e.reason or "")


def forge_message(kind: str, step: str, actor: str, attempt: int, status: str) -> str:
    """A message as runner writes it, for the tests that plant a forged commit in a copy of a run."""
    now = datetime.now(UTC).replace(microsecond=0)
    return codec.encode(Event(kind=Kind(kind), actor=actor, at=now, step=step, attempt=attempt), status)


def read_beat(message: str) -> dict[str, Any]:
    """What a heartbeat commit says: worker, step, attempt, incarnation (empty when unreadable)."""
    return codec.decode_beat(message) or {}


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# --- small readers -----------------------------------------------------------------


def frontmatter(data: bytes | None) -> dict[str, Any] | None:
    """A step file's frontmatter as a dict, or None when it cannot be read safely."""
    if data is None or len(data) > 1 << 20:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    match = _FRONT.match(text)
    if not match:
        return None
    front = match.group(1)
    try:
        if "*" in front or "&" in front:
            for token in yaml.scan(front, Loader=_Loader):
                if isinstance(token, (yaml.AliasToken, yaml.AnchorToken)):
                    return None
        meta = yaml.load(front, Loader=_Loader)
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def step_id_of(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".md")


def _attempt(meta: dict | None) -> int:
    try:
        return int((meta or {}).get("attempt") or 0)
    except (TypeError, ValueError):
        return 0


def _status(meta: dict | None) -> str | None:
    if meta is None:
        return None
    return str(meta.get("status") or "ready")


def _deps(meta: dict | None) -> list[str]:
    deps = (meta or {}).get("depends_on") or []
    return [deps] if isinstance(deps, str) else [str(d) for d in deps]


def _blob(repo: pygit2.Repository, commit: pygit2.Commit | None, path: str) -> bytes | None:
    if commit is None:
        return None
    try:
        obj = commit.tree[path]
    except KeyError:
        return None
    return obj.data if isinstance(obj, pygit2.Blob) else None


def _tip(repo: pygit2.Repository, branch: str) -> pygit2.Commit | None:
    ref = repo.references.get(f"refs/heads/{branch}")
    return repo[ref.target] if ref is not None else None


def _changed(repo: pygit2.Repository, commit: pygit2.Commit) -> set[str]:
    parent = commit.parents[0] if commit.parents else None
    if parent is None:
        diff = commit.tree.diff_to_tree(swap=True)
    else:
        diff = repo.diff(parent.tree, commit.tree)
    paths = set()
    for delta in diff.deltas:
        for path in (delta.old_file.path, delta.new_file.path):
            if path and path.startswith(STEPS_DIR) and path.endswith(".md"):
                paths.add(path)
    return paths


_PARSED: dict[str, dict[str, Any] | None] = {}  # blob id -> frontmatter: harnesses poll the plan often


def read_plan(repo_path: Path, branch: str = "runner/queue") -> dict[str, dict[str, Any]]:
    """The step files at the queue tip: id -> {status, attempt, deps, meta, path} (readable ones only)."""
    repo = pygit2.Repository(str(repo_path))
    tip = _tip(repo, branch)
    plan: dict[str, dict[str, Any]] = {}
    if tip is None:
        return plan
    try:
        node = tip.tree[STEPS_DIR.rstrip("/")]
    except KeyError:
        return plan
    stack = [(STEPS_DIR.rstrip("/"), node)]
    while stack:
        base, tree = stack.pop()
        for entry in tree:
            path = f"{base}/{entry.name}"
            if entry.type_str == "tree":
                stack.append((path, repo[entry.id]))
            elif entry.type_str == "blob" and path.endswith(".md") and entry.filemode != pygit2.GIT_FILEMODE_LINK:
                key = str(entry.id)
                if key not in _PARSED:
                    if len(_PARSED) > 50000:
                        _PARSED.clear()
                    _PARSED[key] = frontmatter(repo[entry.id].data)
                meta = _PARSED[key]
                if meta is not None:
                    plan.setdefault(
                        step_id_of(path),
                        {
                            "status": _status(meta),
                            "attempt": _attempt(meta),
                            "deps": _deps(meta),
                            "meta": meta,
                            "path": path,
                        },
                    )
    return plan


def terminal_state(plan: dict[str, dict[str, Any]], steps: set[str] | None = None) -> dict[str, str]:
    """step -> done | failed | blocked | <live status>: blocked when a dependency (transitively) failed."""
    memo: dict[str, str] = {}

    def state(step_id: str, seen: frozenset = frozenset()) -> str:
        if step_id in memo:
            return memo[step_id]
        info = plan.get(step_id)
        if info is None:
            return "missing"
        status = info["status"]
        if status in ("done", "failed", "claimed", "review"):
            result = status
        else:
            result = status
            for dep in info["deps"]:
                if dep in seen:
                    continue
                if state(dep, seen | {step_id}) in ("failed", "blocked", "missing"):
                    result = "blocked"
                    break
        memo[step_id] = result
        return result

    return {s: state(s) for s in (steps if steps is not None else plan)}


# --- what the checker is given and what it answers ----------------------------------


@dataclass
class RunInputs:
    """Everything a run left behind. Only `repo` is required."""

    repo: Path  # the remote (bare) repository
    name: str = "run"
    queue_branch: str = "runner/queue"
    integration_branch: str = "runner/integration"
    exec_log: Path | None = None  # lines "STEP ATTEMPT WORKER WORKER_PID TIME" appended by each run
    worker_logs: list[Path] = field(default_factory=list)  # runner's worker-<id>.log files
    events: list[dict[str, Any]] = field(default_factory=list)  # the harness's starts, kills, exits, partitions
    tip_samples: list[tuple[float, str, str]] = field(default_factory=list)  # (time, ref, commit) seen on the remote
    expected_steps: dict[str, list[str]] | None = None  # valid step id -> depends_on, as the harness wrote them
    expected_invalid: set[str] = field(default_factory=set)  # step ids that must never be claimed or run
    allow_blocked: bool = True  # a step blocked by a failed dependency counts as finished
    reruns_per_attempt: int = 1  # how many times one attempt may run its command (gate fix loops)
    allowed_bugs: set[str] = field(default_factory=lambda: allowed_from_env())  # KNOWN_BUGS tallied, not failed
    duration_s: float | None = None
    workers: int | None = None


@dataclass
class Violation:
    rule: str
    detail: str
    known_bug: str | None = None  # its KNOWN_BUGS signature, when it is one

    def __str__(self) -> str:
        tag = f" (known bug {self.known_bug}: {KNOWN_BUGS[self.known_bug]})" if self.known_bug else ""
        return f"[{self.rule}] {self.detail}{tag}"


# Core bugs the checker recognises by their signature: signature -> where it is tracked. Each one is a
# violation like any other, unless the run allows it by name: RUNNER_CHAOS_ALLOW=stray-merge,... (for a
# bug that is being fixed elsewhere); allowed hits are tallied under "known bugs allowed" and listed.
KNOWN_BUGS: dict[str, str] = {
    "stray-merge": "issue 12: a holder that lost its lease still merged; record and merge must be one atomic push",
    "merge-then-fail": "fixed in 39db7aa; test_a_transient_error_while_recording_is_not_recorded_as_a_failure",
    "abandoned-claim": "fixed in 39db7aa; test_a_worker_that_cannot_record_does_not_abandon_its_claim",
    "stale-integration-base": "fixed in 39db7aa; test_a_claim_won_after_a_lost_race_starts_from_its_dependencies",
}


def allowed_from_env() -> set[str]:
    names = {n.strip() for n in os.environ.get("RUNNER_CHAOS_ALLOW", "").split(",") if n.strip()}
    unknown = names - set(KNOWN_BUGS)
    if unknown:
        raise ValueError(f"RUNNER_CHAOS_ALLOW names unknown bugs {sorted(unknown)}; known: {sorted(KNOWN_BUGS)}")
    return names


@dataclass
class Report:
    name: str
    stats: dict[str, Any]
    violations: list[Violation]
    notes: list[str]
    allowed: list[Violation] = field(default_factory=list)  # hits of known bugs the run allowed (RUNNER_CHAOS_ALLOW)

    @property
    def ok(self) -> bool:
        return not self.violations

    def rules(self) -> set[str]:
        return {v.rule for v in self.violations}

    def table(self) -> str:
        rows = [(key, str(value)) for key, value in self.stats.items()]
        width = max(len(k) for k, _ in rows) + 2
        value_width = max(len(v) for _, v in rows)
        bar = "+" + "-" * (width + 1) + "+" + "-" * (value_width + 2) + "+"
        lines = [f"chaos run: {self.name}", bar]
        for key, value in rows:
            lines.append(f"| {key.ljust(width)}| {value.rjust(value_width)} |")
        lines.append(bar)
        if self.violations:
            lines.append(f"VIOLATIONS ({len(self.violations)}):")
            shown = self.violations[:40]
            lines += [f"  - {v}" for v in shown]
            if len(self.violations) > len(shown):
                lines.append(f"  ... and {len(self.violations) - len(shown)} more")
        else:
            lines.append("no violations: the delivery contract held")
        if self.allowed:
            names = sorted({v.known_bug for v in self.allowed})
            lines.append(
                f"KNOWN BUGS HIT BUT ALLOWED by RUNNER_CHAOS_ALLOW={','.join(names)} ({len(self.allowed)}; "
                "without that variable they fail the run):"
            )
            lines += [f"  - {v}" for v in self.allowed[:20]]
        for note in self.notes[:20]:
            lines.append(f"  note: {note}")
        return "\n".join(lines)

    def write(self, path: Path) -> None:
        path.write_text(self.table() + "\n")
        path.with_suffix(".json").write_text(
            json.dumps(
                {
                    "name": self.name,
                    "stats": self.stats,
                    "violations": [vars(v) for v in self.violations],
                    "allowed_known_bugs": [vars(v) for v in self.allowed],
                    "notes": self.notes,
                },
                indent=2,
                default=str,
            )
        )


# --- the worker logs and the execution log -------------------------------------------


@dataclass
class LogFacts:
    incarnations: dict[str, dict[str, Any]] = field(default_factory=dict)  # incarnation -> {worker, pid}
    by_pid: dict[int, str] = field(default_factory=dict)
    claimed: dict[tuple[str, int], list[str]] = field(
        default_factory=lambda: defaultdict(list)
    )  # (step, attempt) -> incarnations
    recorded: dict[tuple[str, int], list[tuple[str, str, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )  # -> [(incarnation, worker, status)]
    lost: int = 0
    errors: int = 0
    errors_for: dict[tuple[str, int], str] = field(default_factory=dict)  # (step, attempt) -> the worker's ERROR line
    starts: int = 0
    has_starts: bool = False


def read_worker_logs(paths: list[Path]) -> LogFacts:
    facts = LogFacts()
    for path in paths:
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        current: str | None = None
        for line in lines:
            match = _LOG_LINE.match(line)
            if not match:
                continue
            _, kind, worker, message = match.groups()
            if kind == "START":
                start = _START.search(message)
                if start:
                    current = start.group(1)
                    pid = int(start.group(2))
                    facts.incarnations[current] = {"worker": worker, "pid": pid}
                    facts.by_pid[pid] = current
                    facts.starts += 1
                    facts.has_starts = True
                continue
            if kind == "LOST":
                facts.lost += 1
            elif kind == "ERROR":
                facts.errors += 1
                if failed := _ERRORED.match(message):
                    facts.errors_for.setdefault((failed.group(1), int(failed.group(2))), failed.group(3)[:300])
            elif kind == "TICK":
                if claimed := _CLAIMED.match(message):
                    facts.claimed[(claimed.group(1), int(claimed.group(2)))].append(current or "?")
                elif recorded := _RECORDED.match(message):
                    facts.recorded[(recorded.group(1), int(recorded.group(2)))].append(
                        (current or "?", worker, recorded.group(3))
                    )
    return facts


def read_exec_log(path: Path | None) -> list[dict[str, Any]]:
    runs = []
    if path is None or not path.exists():
        return runs
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) < 4 or not parts[1].isdigit() or not parts[3].isdigit():
            continue
        runs.append(
            {
                "step": parts[0],
                "attempt": int(parts[1]),
                "worker": parts[2],
                "pid": int(parts[3]),
                "t": float(parts[4]) if len(parts) > 4 else None,
            }
        )
    return runs


# --- when things landed on the remote ---------------------------------------------------


def read_ref_times(repo_path: Path) -> dict[tuple[str, str], float]:
    """(ref, new commit) -> when the update landed, from REF_TIMES_HOOK's log (first landing)."""
    times: dict[tuple[str, str], float] = {}
    try:
        lines = (repo_path / REF_TIMES).read_text().splitlines()
    except OSError:
        return times
    for line in lines:
        parts = line.split()
        if len(parts) == 4:
            try:
                times.setdefault((parts[3], parts[2]), float(parts[0]))
            except ValueError:
                continue
    return times


def seconds(duration: Any) -> float | None:
    """A lease as written in a step file or runner.toml ("6s", "1m", "1h30m"), in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", str(duration or ""))
    if not parts or "".join(n + u for n, u in parts) != str(duration).replace(" ", ""):
        return None
    return sum(float(n) * units[u] for n, u in parts)


@dataclass(frozen=True)
class Landing:
    """When a ref update landed on the remote: between lo and hi (the reflog has whole seconds,
    the hook's clock reading comes after the update), best guess at."""

    lo: float
    hi: float
    at: float


@dataclass
class Beat:
    landed: Landing
    step: str | None
    attempt: int | None
    incarnation: str | None


# --- the checker -------------------------------------------------------------------


@dataclass
class Attempt:
    step: str
    attempt: int
    worker: str
    incarnation: str | None
    host: str | None
    pid: int | None
    commit: str
    kind: str  # claim | takeover
    lease_s: float | None = None
    ended: str | None = None  # complete | fail | release | block | takeover | person
    ended_status: str | None = None
    ended_commit: str | None = None
    ended_reason: str | None = None
    ended_by: str | None = None  # the worker that recorded the end (the taker, for a takeover)


class Checker:
    def __init__(self, inputs: RunInputs):
        self.inp = inputs
        self.repo = pygit2.Repository(str(inputs.repo))
        self.violations: list[Violation] = []
        self.allowed: list[Violation] = []
        self.notes: list[str] = []
        self.stats: dict[str, Any] = {}
        self.queue_ref = f"refs/heads/{inputs.queue_branch}"

    def fail(self, rule: str, detail: str, known: str | None = None) -> None:
        violation = Violation(rule, detail, known)
        (self.allowed if known in self.inp.allowed_bugs else self.violations).append(violation)

    # -- the whole thing --

    def run(self) -> Report:
        inp = self.inp
        self.hook_times = read_ref_times(inp.repo)
        self.reflog_times: dict[tuple[str, str], float] = {}
        self.check_rewrites()
        self.read_beats()
        self.replay_queue()
        self.logs = read_worker_logs(inp.worker_logs)
        self.runs = read_exec_log(inp.exec_log)
        self.check_final_states()
        self.check_logs()
        self.check_executions()
        self.check_integration()
        self.check_takeovers()
        self.measure_heartbeats()
        self.fill_stats()
        return Report(inp.name, self.stats, self.violations, self.notes, self.allowed)

    # -- rewrites, and the reflog's landing times --

    def check_rewrites(self) -> None:
        """Every update of the shared refs on the remote is a fast-forward (reflog and sampled tips)."""
        inp = self.inp
        watched = [self.queue_ref, f"refs/heads/{inp.integration_branch}"]
        watched += [name for name in self.repo.references if name.startswith(HEARTBEATS)]
        self.rewrites = 0
        checked = 0
        for name in watched:
            ref = self.repo.references.get(name)
            if ref is None:
                continue
            try:
                entries = list(ref.log())
            except (pygit2.GitError, KeyError):
                entries = []
            for entry in reversed(entries):  # oldest first
                old, new = str(entry.oid_old), str(entry.oid_new)
                checked += 1
                self.reflog_times.setdefault((name, new), float(entry.committer.time))
                if old == ZERO or old == new:
                    continue
                if not self._is_ancestor(old, new):
                    self.rewrites += 1
                    self.fail(
                        "rewrite",
                        f"{name} moved {old[:10]} -> {new[:10]}, "
                        f"not a fast-forward (reflog: {entry.message.strip()[:80]})",
                    )
            if not entries and name.startswith("refs/heads/"):
                self.notes.append(
                    f"no reflog for {name} on the remote: set core.logAllRefUpdates=always before the run"
                )
        last: dict[str, str] = {}
        for _, ref, commit in sorted(inp.tip_samples):
            before = last.get(ref)
            if before and before != commit and not self._is_ancestor(before, commit):
                self.rewrites += 1
                self.fail(
                    "rewrite", f"{ref} was seen at {before[:10]} and later at {commit[:10]}, which does not contain it"
                )
            last[ref] = commit
        self.reflog_entries = checked

    def landed(self, ref: str, commit: str | None) -> Landing | None:
        floor = self.reflog_times.get((ref, commit or ""))
        hook = self.hook_times.get((ref, commit or ""))
        if floor is None and hook is None:
            return None
        if floor is None:
            return Landing(hook - 1.0, hook, hook)
        if hook is None:
            return Landing(floor, floor + 1.0, floor + 0.5)
        hi = max(floor, min(floor + 1.0, hook))
        return Landing(floor, hi, hi)

    def _is_ancestor(self, old: str, new: str) -> bool:
        try:
            return old == new or self.repo.descendant_of(new, old)
        except (pygit2.GitError, KeyError, ValueError):
            return False

    def read_beats(self) -> None:
        """Every heartbeat that landed on the remote, per worker, oldest first."""
        self.beats: dict[str, list[Beat]] = defaultdict(list)
        for ref, commit in {*self.reflog_times, *self.hook_times}:
            if not ref.startswith(HEARTBEATS):
                continue
            try:
                info = read_beat(self.repo[commit].message)
            except (KeyError, ValueError):
                continue
            landed = self.landed(ref, commit)
            self.beats[ref[len(HEARTBEATS) :]].append(
                Beat(
                    landed,
                    info.get("step"),
                    _int(str(info["attempt"])) if info.get("attempt") is not None else None,
                    info.get("incarnation"),
                )
            )
        for beats in self.beats.values():
            beats.sort(key=lambda b: b.landed.at)

    # -- the queue branch --

    def replay_queue(self) -> None:
        inp = self.inp
        tip = _tip(self.repo, inp.queue_branch)
        self.attempts: dict[tuple[str, int], Attempt] = {}
        self.current: dict[str, Attempt | None] = {}
        self.outcomes: dict[tuple[str, int], list[str]] = defaultdict(list)  # (step, attempt) -> events recorded
        self.done_at: dict[str, list[tuple[int, str]]] = defaultdict(list)  # step -> [(attempt, result commit)]
        self.events = Counter()
        self.double_recordings = 0
        self.runner_errors: list[str] = []
        self.queue_commits = 0
        self.done_steps: set[str] = set()
        if tip is None:
            self.fail("terminal", f"the remote has no {inp.queue_branch} branch")
            return
        commits = list(self.repo.walk(tip.id, pygit2.GIT_SORT_TOPOLOGICAL | pygit2.GIT_SORT_REVERSE))
        self.queue_commits = len(commits)
        for index, commit in enumerate(commits):
            expected_parent = commits[index - 1].id if index else None
            parents = [p.id for p in commit.parents]
            if parents != ([expected_parent] if expected_parent else []):
                self.fail(
                    "overlap",
                    f"queue history is not linear at {str(commit.id)[:10]} (parents {[str(p)[:10] for p in parents]})",
                )
            try:
                message = read_event(commit.message)
            except ValueError as exc:
                self.fail("holder", f"{str(commit.id)[:10]} is not a message runner's codec can read: {exc}")
                continue
            self.replay_commit(commit, message)

    def replay_commit(self, commit: pygit2.Commit, msg: Message) -> None:
        event = msg.kind
        sha = str(commit.id)
        short = sha[:10]
        if event not in TRANSITIONS:
            # plan edits (no event), init, halt/resume: a person's change; note edits of live claims
            for path in _changed(self.repo, commit):
                step = step_id_of(path)
                if self.current.get(step) is not None and event not in ("halt", "resume"):
                    self.notes.append(
                        f"plan edit {short} touched {step} while attempt {self.current[step].attempt} held it"
                    )
            return
        self.events[event] += 1
        step, worker = msg.step, msg.actor
        changed = _changed(self.repo, commit)
        paths = [p for p in changed if step_id_of(p) == step]
        if len(changed) != 1 or not paths:
            self.fail(
                "holder",
                f"{short} ({event} {step}) changes {len(changed)} step files {sorted(changed)[:4]}; "
                "one transition of one step per commit",
            )
            if not paths:
                return
        path = paths[0]
        parent = commit.parents[0] if commit.parents else None
        before = frontmatter(_blob(self.repo, parent, path))
        after = frontmatter(_blob(self.repo, commit, path))
        if after is None:
            self.fail("holder", f"{short} ({event} {step}) leaves {path} unreadable")
            return
        b_status, a_status = _status(before), _status(after)
        b_attempt, a_attempt = _attempt(before), _attempt(after)
        t_attempt = msg.attempt if msg.attempt is not None else -1
        live = self.current.get(step)
        if event == "claim":
            if b_status == "claimed" or live is not None:
                self.fail(
                    "overlap",
                    f"{short}: {worker} claimed {step} attempt {a_attempt} while attempt {b_attempt} "
                    f"by {(before or {}).get('assignee')} was live",
                )
            elif b_status not in ("ready", None):
                self.fail("overlap", f"{short}: {worker} claimed {step}, which was {b_status}")
            self.check_new_claim(commit, step, worker, before, after, t_attempt, "claim")
            deps = (
                self.inp.expected_steps[step]
                if self.inp.expected_steps is not None and step in self.inp.expected_steps
                else _deps(after)
            )
            missing = [d for d in deps if d not in self.done_steps]
            if missing:
                self.fail("overlap", f"{short}: {step} was claimed before its dependencies {missing} were done")
            if step in self.inp.expected_invalid:
                self.fail("claim", f"{short}: invalid step {step} was claimed by {worker}")
        elif event == "takeover":
            if b_status != "claimed" or live is None:
                self.fail(
                    "overlap", f"{short}: {worker} took over {step}, which was {b_status} (no live claim to replace)"
                )
            elif msg.replaces != b_attempt or live.attempt != b_attempt:
                self.fail(
                    "overlap", f"{short}: takeover of {step} names attempt {msg.replaces}, the live one is {b_attempt}"
                )
            if live is not None:
                live.ended = "takeover"
                live.ended_commit = sha
                live.ended_by = worker
                live.ended_reason = msg.reason
                self.current[step] = None
            if a_status == "claimed":
                self.check_new_claim(commit, step, worker, before, after, t_attempt, "takeover")
            elif a_status == "failed":
                self.outcomes[(step, b_attempt)].append("takeover->failed")
                if live is not None:
                    live.ended_status = "failed"
            else:
                self.fail("overlap", f"{short}: takeover of {step} left it {a_status}")
        elif event in HOLDER_OUTCOMES:
            key = (step, b_attempt)
            if event == "fail" and msg.reason.startswith("runner error"):
                self.runner_errors.append(f"{step} attempt {b_attempt} by {worker}: {msg.reason[:200]}")
            problems = []
            if b_status != "claimed" or live is None:
                problems.append(
                    (
                        "claim",
                        (
                            f"{worker} recorded {event} for {step} attempt {t_attempt}, but the step was {b_status}: "
                            "an outcome without a live claim"
                        ),
                    )
                )
            else:
                if worker != (before or {}).get("assignee") or worker != live.worker:
                    problems.append(
                        (
                            "holder",
                            (
                                f"{event} of {step} recorded by {worker}, "
                                f"the holder of attempt {b_attempt} is {live.worker}"
                            ),
                        )
                    )
                if t_attempt != b_attempt:
                    problems.append(
                        ("holder", f"{event} of {step} names attempt {t_attempt}, the live attempt is {b_attempt}")
                    )
            if self.outcomes.get(key):
                problems.append(
                    ("holder", f"{step} attempt {b_attempt} recorded twice ({self.outcomes[key]} then {event})")
                )
            if a_status == "done" and step in self.done_steps:
                problems.append(("holder", f"{step} recorded done a second time (attempt {b_attempt})"))
            if problems:
                self.double_recordings += 1  # one forged or repeated recording, however many rules it breaks
            for rule, detail in problems:
                self.fail(rule, f"{short}: {detail}")
            if a_status == "claimed" or after.get("assignee"):
                self.fail(
                    "holder", f"{short}: {event} of {step} left it {a_status} with assignee {after.get('assignee')!r}"
                )
            self.outcomes[key].append(event)
            if live is not None:
                live.ended = event
                live.ended_status = a_status
                live.ended_commit = sha
                live.ended_reason = msg.reason
                live.ended_by = worker
            self.current[step] = None
            if a_status == "done":
                self.done_steps.add(step)
                result = after.get("result") or {}
                self.done_at[step].append((b_attempt, str(result.get("commit") or "")))
        else:  # a person: approve / reject / retry / abort
            if live is not None and event == "abort":
                live.ended = "person"
                self.current[step] = None
            if a_status == "done":
                self.done_steps.add(step)
            elif step in self.done_steps and a_status != "done":
                self.done_steps.discard(step)

    def check_new_claim(self, commit, step: str, worker: str, before, after, t_attempt: int, kind: str) -> None:
        short = str(commit.id)[:10]
        a_attempt = _attempt(after)
        if _status(after) != "claimed" or after.get("assignee") != worker:
            self.fail(
                "overlap",
                f"{short}: {kind} of {step} by {worker} left status {_status(after)} "
                f"assignee {after.get('assignee')!r}",
            )
        if a_attempt != _attempt(before) + 1 or t_attempt != a_attempt:
            self.fail(
                "overlap",
                f"{short}: {kind} of {step} moved attempt {_attempt(before)} -> {a_attempt} (trailer {t_attempt}); "
                "attempts go up by one",
            )
        if (step, a_attempt) in self.attempts:
            self.fail("overlap", f"{short}: {step} attempt {a_attempt} claimed twice")
        holder = after.get("holder") or {}
        record = Attempt(
            step=step,
            attempt=a_attempt,
            worker=worker,
            incarnation=holder.get("incarnation"),
            host=holder.get("host"),
            pid=holder.get("pid") if isinstance(holder.get("pid"), int) else None,
            commit=str(commit.id),
            kind=kind,
            lease_s=seconds(after.get("lease")) or self.inp_lease(),
        )
        if not record.incarnation:
            self.notes.append(f"{short}: {kind} of {step} carries no incarnation")
        self.attempts[(step, a_attempt)] = record
        self.current[step] = record

    def inp_lease(self) -> float | None:
        """The default lease of runner.toml at the queue tip, for claims whose step file names none."""
        if not hasattr(self, "_default_lease"):
            self._default_lease = None
            tip = _tip(self.repo, self.inp.queue_branch)
            data = _blob(self.repo, tip, "runner.toml")
            if data:
                match = re.search(r'^lease\s*=\s*"([^"]+)"', data.decode(errors="replace"), re.MULTILINE)
                self._default_lease = seconds(match.group(1)) if match else None
        return self._default_lease

    # -- where the plan ended --

    def check_final_states(self) -> None:
        inp = self.inp
        plan = read_plan(inp.repo, inp.queue_branch)
        self.plan = plan
        expected = (
            set(inp.expected_steps)
            if inp.expected_steps is not None
            else {s for s in plan if s not in inp.expected_invalid}
        )
        missing = sorted(expected - set(plan))
        for step in missing:
            self.fail("terminal", f"{step} is not on the queue branch any more (lost)")
        states = terminal_state(plan, expected - set(missing))
        self.final = Counter(states.values())
        for step, state in sorted(states.items()):
            if state in ("done", "failed"):
                continue
            if state == "blocked" and inp.allow_blocked:
                continue
            error = self.logs.errors_for.get((step, plan[step]["attempt"])) if state == "claimed" else None
            if error:
                self.fail(
                    "abandoned",
                    f"{step} attempt {plan[step]['attempt']} is still claimed: "
                    f"its holder {plan[step]['meta'].get('assignee')} logged `{error[:160]}` and neither recorded "
                    "nor released it, and the holder's idle heartbeats keep the claim from ever expiring",
                    known="abandoned-claim",
                )
                continue
            detail = plan[step]["meta"].get("last_error") or ""
            self.fail(
                "terminal", f"{step} ended {state}, not done or failed" + (f" ({str(detail)[:120]})" if detail else "")
            )
        for step in sorted(expected - set(missing)):
            if plan[step]["status"] == "done" and step not in self.done_steps:
                self.fail("holder", f"{step} is done at the tip but no holder recorded it done")
        for step in inp.expected_invalid:
            if any(key[0] == step for key in self.attempts):
                self.fail("claim", f"invalid step {step} was claimed")

    # -- the workers' own accounts --

    def check_logs(self) -> None:
        logs = self.logs
        self.unattributed = 0
        if not self.inp.worker_logs:
            return
        if not logs.has_starts:
            self.notes.append("worker logs have no START lines: outcomes cannot be tied to incarnations")
        for (step, attempt), entries in logs.recorded.items():
            outcomes = self.outcomes.get((step, attempt), [])
            for incarnation, worker, status in entries:
                if not outcomes:
                    self.fail(
                        "holder",
                        f"{worker} ({incarnation}) logged {step} attempt {attempt} -> {status}, "
                        "but the queue holds no outcome for that attempt",
                    )
            if len(entries) > 1:
                self.fail("holder", f"{step} attempt {attempt} was logged as recorded {len(entries)} times: {entries}")
        for (step, attempt), events in self.outcomes.items():
            if not any(e in HOLDER_OUTCOMES for e in events):
                continue
            claim = self.attempts.get((step, attempt))
            entries = logs.recorded.get((step, attempt), [])
            if not entries:
                self.unattributed += 1  # killed between the push and the log line
                continue
            if claim and claim.incarnation and logs.has_starts:
                by = {inc for inc, _, _ in entries}
                if by != {claim.incarnation}:
                    self.double_recordings += 1
                    self.fail(
                        "holder",
                        f"{step} attempt {attempt} was claimed by incarnation {claim.incarnation} "
                        f"but recorded by {sorted(by)}",
                    )
        if logs.has_starts:
            for (step, attempt), claim in self.attempts.items():
                if (
                    claim.incarnation
                    and claim.incarnation not in logs.incarnations
                    and claim.worker in {i["worker"] for i in logs.incarnations.values()}
                ):
                    self.notes.append(
                        f"{step} attempt {attempt}: incarnation {claim.incarnation} of {claim.worker} has no START line"
                    )

    def check_executions(self) -> None:
        self.double_executions = 0
        self.retries_run = 0
        if self.inp.exec_log is None:
            return
        per_attempt = Counter((r["step"], r["attempt"]) for r in self.runs)
        by_step: dict[str, set[int]] = defaultdict(set)
        for run in self.runs:
            key = (run["step"], run["attempt"])
            by_step[run["step"]].add(run["attempt"])
            claim = self.attempts.get(key)
            if run["step"] in self.inp.expected_invalid:
                self.fail("claim", f"invalid step {run['step']} was executed by {run['worker']}")
            if claim is None:
                self.fail(
                    "claim",
                    f"{run['worker']} (pid {run['pid']}) ran {run['step']} attempt {run['attempt']}, "
                    "which was never claimed",
                )
                continue
            if claim.worker != run["worker"]:
                self.fail(
                    "claim", f"{run['worker']} ran {run['step']} attempt {run['attempt']}, claimed by {claim.worker}"
                )
            incarnation = self.logs.by_pid.get(run["pid"])
            if incarnation and claim.incarnation and incarnation != claim.incarnation:
                self.fail(
                    "claim",
                    f"{run['step']} attempt {run['attempt']} ran in pid {run['pid']} ({incarnation}), "
                    f"the claim belongs to {claim.incarnation}",
                )
        for key, count in per_attempt.items():
            if count > self.inp.reruns_per_attempt:
                self.fail("claim", f"{key[0]} attempt {key[1]} ran its command {count} times")
        for step, attempts in by_step.items():
            ordered = sorted(attempts)
            for attempt in ordered[:-1]:  # every run but the last one of a step: why did it run again?
                claim = self.attempts.get((step, attempt))
                if claim is None:
                    continue
                if claim.ended == "takeover":
                    self.double_executions += 1  # ran again after its holder lost the lease: allowed, counted
                elif claim.ended in ("fail", "release"):
                    self.retries_run += 1
                elif claim.ended == "complete" and claim.ended_status == "done":
                    self.fail(
                        "claim", f"{step} ran again (attempt {ordered[-1]}) after attempt {attempt} was recorded done"
                    )
                elif claim.ended is None:
                    self.fail(
                        "overlap",
                        f"{step} attempt {attempt} ran, its claim is still live, and attempt {ordered[-1]} ran too",
                    )
        for step, records in self.done_at.items():
            for attempt, _ in records:
                if per_attempt.get((step, attempt), 0) == 0:
                    self.fail("claim", f"{step} was recorded done by attempt {attempt}, whose command never ran")

    # -- the integration branch --

    def check_integration(self) -> None:
        inp = self.inp
        self.stray_merges = 0
        self.integration_merges = 0
        tip = _tip(self.repo, inp.integration_branch)
        if tip is None:
            if self.done_steps:
                self.fail(
                    "integration",
                    f"the remote has no {inp.integration_branch} branch but {len(self.done_steps)} steps are done",
                )
            return
        walker = self.repo.walk(tip.id, pygit2.GIT_SORT_TOPOLOGICAL)
        walker.simplify_first_parent()
        chain = list(walker)
        chain.reverse()  # oldest first
        position: dict[tuple[str, int], list[int]] = defaultdict(list)
        for index, commit in enumerate(chain):
            try:
                merged = read_event(commit.message)
            except ValueError:
                continue
            if not merged.step:
                continue
            position[(merged.step, merged.attempt or 0)].append(index)
            self.integration_merges += 1
        recorded_pos: dict[str, int] = {}
        result_commit: dict[str, str] = {}
        for step, records in self.done_at.items():
            attempt, commit = records[-1]
            places = position.get((step, attempt), [])
            if len(places) != 1:
                self.fail(
                    "integration",
                    f"done step {step} (attempt {attempt}) appears {len(places)} times on {inp.integration_branch}",
                )
            if commit and not self._is_ancestor(commit, str(tip.id)):
                self.fail(
                    "integration",
                    f"done step {step}: its recorded commit {commit[:10]} is not in {inp.integration_branch}",
                )
            if places:
                recorded_pos[step] = places[0]
            result_commit[step] = commit
        for (step, attempt), places in position.items():
            if len(places) > 1:
                self.fail("integration", f"{step} attempt {attempt} merged {len(places)} times")
            if any(a == attempt for a, _ in self.done_at.get(step, [])):
                continue
            claim = self.attempts.get((step, attempt))
            self.stray_merges += len(places)
            if claim is None:
                self.fail(
                    "integration", f"{step} attempt {attempt} is on {inp.integration_branch} but was never claimed"
                )
            elif claim.ended == "fail" and (claim.ended_reason or "").startswith("runner error"):
                self.fail(
                    "integration",
                    f"{step} attempt {attempt} is on {inp.integration_branch}, but after its merge landed it was "
                    f"recorded as failed ({claim.ended_reason[:160]}), so a later attempt merged the step again",
                    known="merge-then-fail",
                )
            elif claim.ended == "takeover":
                self.fail(
                    "integration",
                    f"{step} attempt {attempt} is on {inp.integration_branch} though its holder {claim.worker} lost "
                    f"the claim to {claim.ended_by} (a stray merge)",
                    known="stray-merge",
                )
            else:
                self.fail(
                    "integration",
                    f"{step} attempt {attempt} is on {inp.integration_branch} but ended {claim.ended}, not done",
                )
        deps_of = (
            inp.expected_steps if inp.expected_steps is not None else {s: info["deps"] for s, info in self.plan.items()}
        )
        for step, pos in recorded_pos.items():
            for dep in deps_of.get(step, []):
                dep_pos = recorded_pos.get(dep)
                if dep_pos is None:
                    self.fail("integration", f"{step} is merged but its dependency {dep} is not")
                elif dep_pos > pos:
                    self.fail(
                        "integration",
                        f"{step} merged before its dependency {dep} ({pos} < {dep_pos} on the first-parent chain)",
                    )
                elif (
                    result_commit.get(dep)
                    and result_commit.get(step)
                    and not self._is_ancestor(result_commit[dep], result_commit[step])
                ):
                    self.fail(
                        "integration",
                        f"{step}'s commit was not built on top of its dependency {dep}'s commit "
                        f"({result_commit[step][:10]} does not contain {result_commit[dep][:10]}): "
                        f"{step} ran without {dep}'s results",
                        known="stale-integration-base",
                    )

    # -- takeovers, judged by what the observer could see --

    def evidence(self, claim: Attempt) -> list[Landing]:
        """The holder's signs of life as they landed on the remote, oldest first: its claim, then its
        heartbeats for this attempt (an observer counts no other beat: see runner/queue/leases.py)."""
        found = [self.landed(self.queue_ref, claim.commit)]
        for beat in self.beats.get(claim.worker, []):
            if (
                beat.step == claim.step
                and beat.attempt in (None, claim.attempt)
                and (not claim.incarnation or beat.incarnation == claim.incarnation)
            ):
                found.append(beat.landed)
        return sorted((e for e in found if e is not None), key=lambda e: e.at)

    def check_takeovers(self) -> None:
        events = self.inp.events
        self.takeovers: Counter = Counter()  # verdict -> count
        deaths: dict[int, float] = {}
        for ev in events:
            if ev.get("kind") in ("kill", "exit") and ev.get("pid"):
                deaths.setdefault(int(ev["pid"]), float(ev["t"]))
        self.cuts: dict[str, list[tuple[float, float]]] = defaultdict(list)  # host -> [(cut, healed or inf)]
        for ev in sorted(events, key=lambda e: e["t"]):
            if ev.get("kind") == "partition":
                self.cuts[ev["host"]].append((float(ev["t"]), float("inf")))
            elif ev.get("kind") == "heal" and self.cuts.get(ev["host"]):
                self.cuts[ev["host"]][-1] = (self.cuts[ev["host"]][-1][0], float(ev["t"]))
        host_of = {ev["worker"]: ev.get("host") for ev in events if ev.get("kind") == "start"}
        pid_of = {inc: info["pid"] for inc, info in self.logs.incarnations.items()}
        self.deaths = {inc: deaths[pid] for inc, pid in pid_of.items() if pid in deaths}
        for (step, attempt), claim in sorted(self.attempts.items()):
            if claim.ended != "takeover":
                continue
            took = self.landed(self.queue_ref, claim.ended_commit)
            lease = claim.lease_s
            if took is None or lease is None:
                self.takeovers["unjudged"] += 1
                self.notes.append(
                    f"{step} attempt {attempt}: the takeover's landing time or the lease is unknown; not judged"
                )
                continue
            seen = [e for e in self.evidence(claim) if e.lo <= took.hi]
            # The observer's lease runs from the newest sign of life it fetched. One that landed after its
            # last fetch it could not know of: allow one lease for the fetch, compare and push of a takeover.
            quiet = 0.0
            for k, sign in enumerate(seen):
                following = seen[k + 1] if k + 1 < len(seen) else None
                if following is not None and following.hi < took.lo - lease:
                    continue
                quiet = max(quiet, (min(following.hi, took.hi) if following else took.hi) - sign.lo)
            pid = pid_of.get(claim.incarnation or "", claim.pid)
            died = deaths.get(pid) if pid else None
            dead = died is not None and died <= took.hi + DEATH_SLACK
            since = seen[-1].lo if seen else None
            cut = any(start <= took.hi and end >= (since or 0) for start, end in self.cuts.get(claim.host or "", []))
            taker_host = host_of.get(claim.ended_by or "")
            what = (
                f"{step} attempt {attempt} held by {claim.worker} ({claim.incarnation}, pid {pid}, host {claim.host}) "
                f"was taken over by {claim.ended_by} (host {taker_host}) "
                f"{took.hi - since:.1f}s after its last sign of life landed"
                if since is not None
                else ""
            )
            if quiet >= lease:
                verdict = "dead" if dead else "cut" if cut else "late"
                if verdict == "late" and (error := self.logs.errors_for.get((step, attempt))):
                    self.fail(
                        "abandoned",
                        f"{what}: its live holder logged `{error[:200]}` and stopped beating without recording "
                        "or releasing the claim",
                        known="abandoned-claim",
                    )
                elif verdict == "late":
                    self.notes.append(
                        f"{what} (lease {lease:g}s): a live holder whose heartbeats were late, taken over legally"
                    )
            elif dead and taker_host is not None and taker_host == claim.host:
                verdict = "dead"  # the taker saw on its own host that the holder's process was gone
            else:
                verdict = "stolen"
                why = (
                    "its holder was dead, but a worker on another host could not know it yet"
                    if dead
                    else "a live claim stolen"
                )
                self.fail(
                    "overlap", f"{what}, at most {quiet:.1f}s of silence an observer could see, lease {lease:g}s: {why}"
                )
            self.takeovers[verdict] += 1

    # -- how late heartbeats were on this machine --

    def measure_heartbeats(self) -> None:
        """The gaps between a live holder's consecutive signs of life (claim, beats, its own outcome),
        as they landed on the remote; gaps across a cut of its host or its death are not latency."""
        self.beat_gaps: list[float] = []
        self.beat_leases: Counter = Counter()
        for claim in self.attempts.values():
            if claim.lease_s is None:
                continue
            signs = [e.at for e in self.evidence(claim)]
            end = (
                self.landed(self.queue_ref, claim.ended_commit)
                if claim.ended in (*HOLDER_OUTCOMES, "takeover")
                else None
            )
            if end is not None:
                signs.append(end.at)
            death = self.deaths.get(claim.incarnation or "", float("inf"))
            cuts = self.cuts.get(claim.host or "", [])
            self.beat_leases[claim.lease_s] += 1
            for a, b in pairwise(signs):
                if b > death or any(start <= b and end_ >= a for start, end_ in cuts):
                    continue
                self.beat_gaps.append(b - a)

    # -- the table --

    def fill_stats(self) -> None:
        inp = self.inp
        kills = [e for e in inp.events if e.get("kind") == "kill"]
        expected = (
            len(inp.expected_steps)
            if inp.expected_steps is not None
            else len([s for s in getattr(self, "plan", {}) if s not in inp.expected_invalid])
        )
        workers = (
            inp.workers if inp.workers is not None else len({i["worker"] for i in self.logs.incarnations.values()})
        )
        lease = self.beat_leases.most_common(1)[0][0] if self.beat_leases else None
        gaps = sorted(self.beat_gaps)
        self.stats = {
            "steps": expected,
            "done / failed / blocked": (
                f"{self.final.get('done', 0)} / {self.final.get('failed', 0)} / {self.final.get('blocked', 0)}"
            ),
            "invalid steps (never claimed)": len(inp.expected_invalid),
            "workers": workers,
            "incarnations (starts)": self.logs.starts,
            "kills": len(kills),
            "partitions": len([e for e in inp.events if e.get("kind") == "partition"]),
            "queue commits": self.queue_commits,
            "claims": self.events.get("claim", 0),
            "lease (heartbeat every lease/3)": f"{lease:g}s" if lease else "?",
            "heartbeat gaps measured": len(gaps),
            "heartbeat gap p50 / p99 / max": (
                f"{statistics.median(gaps):.1f} / {gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))]:.1f} / "
                f"{gaps[-1]:.1f}s"
                if gaps
                else "-"
            ),
            "heartbeat gaps longer than the lease": len([g for g in gaps if lease and g > lease]),
            "takeovers": self.events.get("takeover", 0),
            "  of dead holders": self.takeovers["dead"],
            "  of cut-off holders": self.takeovers["cut"],
            "  of live holders late beyond the lease": self.takeovers["late"],
            "  of holders that beat in time (stolen)": self.takeovers["stolen"],
            "outcomes recorded": sum(self.events.get(e, 0) for e in HOLDER_OUTCOMES),
            "retries (fail/release)": self.events.get("fail", 0) + self.events.get("release", 0),
            "failures from runner errors": len(self.runner_errors),
            "executions": len(self.runs),
            "double executions (lost lease)": self.double_executions,
            "double recordings": self.double_recordings,
            "lost claims noticed (LOST)": self.logs.lost,
            "outcomes not in worker logs": self.unattributed,
            "integration merges": self.integration_merges,
            "stray merges (lost attempts)": self.stray_merges,
            "remote ref updates checked": self.reflog_entries,
            "rewrites": self.rewrites,
            "violations": len(self.violations),
            "known bugs allowed (RUNNER_CHAOS_ALLOW)": len(self.allowed),
        }
        if self.stats["heartbeat gaps longer than the lease"]:
            self.notes.append(
                "a live holder's signs of life landed more than a lease apart "
                f"{self.stats['heartbeat gaps longer than the lease']} times: the machine was too slow for the lease "
                "(RUNNER_CHAOS_LEASE_SCALE), or the holder stopped beating; "
                "such takeovers are legal, but the scenario tested less than it meant to"
            )
        if self.takeovers["unjudged"]:
            self.stats["  not judged (no landing time)"] = self.takeovers["unjudged"]
        for error in self.runner_errors[:5]:
            self.notes.append(f"runner error recorded as a failure: {error}")
        if inp.duration_s is not None:
            self.stats["duration"] = f"{inp.duration_s:.1f}s"


def check(inputs: RunInputs) -> Report:
    return Checker(inputs).run()
