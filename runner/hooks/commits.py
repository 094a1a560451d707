"""The check of one commit of the queue branch, in the hook: a runner event decoded and
replayed through the same machine and file writer the clients use, a person's plan edit
that leaves every managed field alone, a takeover judged against when the holder was last
heard from by this server."""

from __future__ import annotations

from runner.core.codec import CodecError, beat_names, decode, decode_beat, one_line
from runner.core.errors import BadInput
from runner.core.events import allowed_paths, context_for, halt_file, side_files, write_step_event
from runner.core.layout import (
    CONFIG_FILE,
    EMPTY_TREE,
    HALT_FILE,
    HEARTBEAT_PREFIX,
    NOTES_FILE,
    is_step_file,
    step_id_of,
)
from runner.core.limits import MAX_EVENT_BYTES, file_bound
from runner.core.machine import Event, Kind, TransitionError
from runner.core.model import Step, parse_duration
from runner.core.plan import Plan
from runner.core.stepschema import MANAGED_KEYS
from runner.hooks.people import Pushers
from runner.hooks.planview import ZERO, PlanView
from runner.store import CommitInfo, Store


class CommitCheck:
    def __init__(self, store: Store, plans: PlanView, pushers: Pushers, queue_ref: str, now: float):
        self.store = store
        self.plans = plans
        self.pushers = pushers
        self.queue_ref = queue_ref
        self.now = now
        self.merges: set[str] = set()  # integration tips the push's checked queue events record
        self.recorded: set[str] = set()  # steps whose holder recorded an outcome in this push

    def encoding_problem(self, oid: str) -> str | None:
        """Runner's commits are UTF-8 through and through: names, message and no other encoding."""
        raw = self.store.raw_commit(oid)
        headers = raw.split(b"\n\n", 1)[0]
        for line in headers.split(b"\n"):
            if line.startswith(b"encoding ") and line[9:].strip().lower().replace(b"-", b"") != b"utf8":
                return (
                    f"the commit declares encoding {line[9:49].decode('ascii', 'replace')!r}: runner's commits are "
                    "UTF-8"
                )
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            where = "message" if exc.start > len(headers) else "author or committer"
            return f"the commit's {where} is not UTF-8 (byte {exc.start}): runner's commits are UTF-8"
        return None

    def check(self, commit: CommitInfo, first: bool) -> list[str]:
        parent = commit.parents[0] if commit.parents else None
        if len(commit.parents) > 1:
            return ["the queue branch is linear: a merge commit is refused (rebase onto the queue instead)"]
        if parent is None and not first:
            return ["a second root commit on the queue branch"]
        if problem := self.encoding_problem(commit.id):
            return [problem]
        changes = self.store.diff_trees(self.store.commit(parent).tree if parent else EMPTY_TREE, commit.tree)
        if names := [c.path for c in changes if not is_utf8(c.path)]:
            return [f"a file name is not UTF-8: {names[0]!a}"]
        if links := [
            c.path
            for c in changes
            if c.oid is not None and not c.link and self.store.entry_at(commit.id, c.path) is None
        ]:
            return [f"a gitlink (submodule) has no place on the queue branch: {', '.join(links[:5])}"]
        if len(commit.message.encode("utf-8", "surrogatepass")) > MAX_EVENT_BYTES:
            return [f"the commit message is over {MAX_EVENT_BYTES // 1024} KiB (runner clips what it carries)"]
        if big := [
            f"{c.path} ({size:,} bytes, at most {file_bound(c.path):,})"
            for c in changes
            if c.oid is not None and (size := len(self.store.read(c.oid))) > file_bound(c.path)
        ]:
            return [f"a file on the queue branch is over its bound: {', '.join(big[:5])}"]
        try:
            decoded = decode(commit.message)
        except CodecError as exc:
            return [f"not a well-formed runner commit: {exc}"]
        event = decoded.event
        if event is not None and event.actor != commit.author:
            return [f"the author ({commit.author!r}) is not the actor the commit names ({event.actor!r})"]
        if event is not None and event.kind == Kind.INIT and parent is not None:
            return ["Runner-Event init belongs to the first commit of the queue only"]
        if event is None or event.kind in (Kind.EDIT, Kind.INIT):
            return self.check_edit(parent, commit, changes, event)
        if event.kind in (Kind.HALT, Kind.RESUME):
            return self.check_halt(event, parent, commit, changes)
        return self.check_step_event(event, decoded.status, parent, commit, changes)

    def check_halt(self, event: Event, parent: str | None, commit: CommitInfo, changes) -> list[str]:
        problems = [p for p in [self.pushers.may_record(event)] if p]
        if others := [c.path for c in changes if c.path != HALT_FILE]:
            problems.append(f"a {event.kind} changes plans/HALT only, not {', '.join(others)}")
        halted_before = parent is not None and self.store.file_at(parent, HALT_FILE) is not None
        if event.kind == Kind.RESUME and not halted_before:
            problems.append("a resume of a queue that is not halted")
        if self.store.file_at(commit.id, HALT_FILE) != halt_file(event):
            problems.append(f"plans/HALT is not what a {event.kind} writes")
        return problems

    def check_step_event(
        self, event: Event, status: str | None, parent: str | None, commit: CommitInfo, changes
    ) -> list[str]:
        if parent is None or not event.step:
            return [f"a {event.kind} changes a step that exists: it needs a parent and a Runner-Step"]
        paths = self.plans.index(parent).get(event.step, [])
        if len(paths) != 1:
            return [f"Runner-Step {event.step} names {'no' if not paths else 'more than one'} step file"]
        path = paths[0]
        before = self.plans.parse(path, self.plans.blob(parent, path))
        if before.problems:
            return [f"{path} was invalid before this commit and cannot change state"]
        problems = [p for p in [self.pushers.may_record(event)] if p]
        if outside := sorted(c.path for c in changes if c.path not in allowed_paths(event, path)):
            problems.append(
                f"a {event.kind} may change only {', '.join(sorted(allowed_paths(event, path)))}, not "
                f"{', '.join(outside)}"
            )
        config = self.plans.config(parent)
        context = context_for(
            config, self.plans.deps_done(parent, before), self.store.file_at(parent, HALT_FILE) is not None
        )
        try:
            written = write_step_event(before, event, context)
        except TransitionError as exc:
            return problems + [f"{event.kind} by {event.actor} refused by the state machine: {exc}"]
        if written.status != status:
            problems.append(f"Runner-Status {status} is not the status a {event.kind} leads to ({written.status})")
        pushed = self.store.file_at(commit.id, path)
        if pushed != written.text.encode("utf-8"):
            problems.append(
                f"{path} is not what a {event.kind} by {event.actor} writes{first_difference(pushed, written.text)}"
            )
        for side, text in side_files(event, lambda name: self.store.file_at(parent, name)).items():
            if self.store.file_at(commit.id, side) != text:
                what = (
                    "the notes file with the step's notes appended"
                    if side == NOTES_FILE
                    else f"the account pause this {event.kind} writes"
                )
                problems.append(f"{side} is not {what}")
        if event.kind == Kind.TAKEOVER and (problem := self._live_holder(before, event, path, config.leases.lease)):
            problems.append(problem)
        if not problems and (merge := (event.result or {}).get("merge")):
            self.merges.add(str(merge))
        if not problems and event.spec.holder:
            self.recorded.add(event.step)
        return problems

    def _live_holder(self, step: Step, event: Event, path: str, default_lease: float) -> str | None:
        """Refuse a takeover of a holder whose claim or heartbeat for this attempt reached this
        server within its lease, by this server's clock: the reflogs (core.logAllRefUpdates,
        set by install-hooks) say when each update arrived. A worker may always take over its
        own claim (an earlier tick of it that could not record): with identities, its key proves
        it; without, the takeover must come from the claim's own host (anyone can write a worker's
        name, and would fence a live claim off; only identities make this rule sound)."""
        holder = step.assignee or ""
        if self.pushers.configured and not self.pushers.is_person() and self.pushers.may_act_as(holder) is None:
            return None
        if (
            not self.pushers.configured
            and event.actor == holder
            and (event.holder or {}).get("host") == step.holder.get("host")
        ):
            return None
        try:
            lease = parse_duration(step.meta.get("lease")) if step.meta.get("lease") else default_lease
        except ValueError:
            lease = default_lease
        since = self.now - lease
        for what, when in (
            ("heartbeat", self._last_beat(step, holder, since)),
            ("claim", self._claim_arrived(step, path, since)),
        ):
            if when is not None:
                return (
                    f"{holder}'s {what} for {step.id} attempt {step.attempt} reached this server "
                    f"{self.now - when:.0f}s ago, within its lease ({lease:.0f}s): a live claim is not taken over"
                )
        return None

    def _last_beat(self, step: Step, holder: str, since: float) -> float | None:
        """When the holder's latest heartbeat for this attempt arrived, if after `since`."""
        for _, new, when in self.store.reflog(HEARTBEAT_PREFIX + holder):  # newest first
            if when < since:
                return None
            if new == ZERO or self.store.object_type(new) != "commit":
                continue
            info = decode_beat(self.store.commit(new).message) or {}
            if beat_names(info, step.id, step.attempt):  # one of the claims a daemon's slots hold
                return when
        return None

    def _claim_arrived(self, step: Step, path: str, since: float) -> float | None:
        """When the queue update that brought this attempt's claim arrived, if after `since`."""
        for old, new, when in self.store.reflog(self.queue_ref):  # newest first
            if when < since:
                return None
            if self.plans.attempt_at(new, path) == step.attempt and self.plans.attempt_at(old, path) != step.attempt:
                return when
        return None

    def check_edit(self, parent: str | None, commit: CommitInfo, changes, event: Event | None) -> list[str]:
        """A person's plan edit: titles, bodies, new steps, runner.toml; never a managed field."""
        problems = [p for p in [self.pushers.may_edit()] if p]
        if any(c.path == HALT_FILE for c in changes):
            problems.append("plans/HALT changes only with `runner halt` / `runner resume`")
        if any(c.path == CONFIG_FILE for c in changes):
            problems += self._config_problems(parent, commit.id)
        added = [c for c in changes if is_step_file(c.path) and c.oid is not None]
        deleted = {step_id_of(c.path): c for c in changes if is_step_file(c.path) and c.oid is None}
        sound = []
        for change in added:
            after = self.plans.parse(change.path, change.oid, change.link)
            if after.problems:
                problems += [f"{change.path}: {p}" for p in after.problems]
                continue
            sound.append(change.path)
            origin = deleted.get(after.id)  # a step moved to another folder
            old_path = change.path if change.kind != "A" else (origin.path if origin else None)
            before = self.plans.parse(old_path, self.plans.blob(parent, old_path)) if old_path and parent else None
            if before is None or before.problems:
                problems += new_step_problems(after)
                continue
            if touched := [k for k in MANAGED_KEYS if before.meta.get(k) != after.meta.get(k)]:
                problems.append(
                    f"{change.path}: changes runner-managed {', '.join(touched)} without a runner event"
                    " (use runner claim/complete/approve/retry...; people edit titles, bodies and other "
                    "fields)"
                )
        if sound:
            problems += self.plans.plan_problems(commit.id, sound)
        if deleted:
            problems += self.plans.dependents_problems(commit.id, set(deleted))
        return problems

    def _config_problems(self, parent: str | None, commit: str) -> list[str]:
        data = self.store.file_at(commit, CONFIG_FILE) or b""
        try:
            new = self.plans.files.config(data)
        except BadInput as exc:
            return exc.problems
        old = self.plans.config(parent)
        problems = []
        guarded = (
            old.hooks != new.hooks,
            old.queue.integration_branch != new.queue.integration_branch,
            old.queue.step_branch_prefix != new.queue.step_branch_prefix,
            old.notify != new.notify,
        )  # what runs on the hosts that send notices
        if any(guarded) and (problem := self.pushers.may_administer()):
            problems.append(problem)
        if old.harness.command and not new.harness.command:
            steps = [
                self.plans.parse(p, self.plans.blob(commit, p))
                for paths in self.plans.index(commit).values()
                for p in paths
            ]
            problems += Plan.build(steps).unrunnable(False)
        return problems


def is_utf8(name: str) -> bool:
    """pygit2 hands a name that is not UTF-8 over with surrogate escapes."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def new_step_problems(step: Step) -> list[str]:
    """A step a person adds may carry any status `runner import` keeps (a plan half done
    elsewhere), and a claim another tool made, but never a claim of runner's own: only a
    runner claim starts a runner attempt."""
    if step.holder.get("incarnation"):
        return [f"{step.path}: a new step may not start with a runner claim; only runner claim starts an attempt"]
    return []


def first_difference(pushed: bytes | None, expected: str) -> str:
    """Where a pushed file first departs from what the event writes, for the refusal: the
    line number and both lines, clipped."""
    if pushed is None:
        return " (the commit deletes it)"
    got, want = pushed.decode("utf-8", "replace").splitlines(), expected.splitlines()
    for number, (a, b) in enumerate(zip(got, want), 1):
        if a != b:
            return f" (line {number} is {one_line(a, 80)!r}, expected {one_line(b, 80)!r})"
    return f" ({len(got)} lines, expected {len(want)})"
