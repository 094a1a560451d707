"""From what the operator typed to a validated ScheduleSpec: every problem reported at
once, the target computer's paths chosen (and said aloud when guessed), and, for a
schedule of this computer, the repository checked with git itself."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from runner.core.errors import BadInput
from runner.core.ids import worker_id_problem
from runner.core.layout import DEFAULT_QUEUE_BRANCH
from runner.schedules import registry
from runner.schedules.base import MODES, Scheduler, ScheduleSpec, has_control_char

DEFAULT_TICK_INTERVAL = 300


@dataclass
class Target:
    """A spec and where it is for: `here` (this computer) or another one, with the guesses made for it."""

    spec: ScheduleSpec
    here: bool
    assumed: list[str] = field(default_factory=list)


def _absolute(value: str | os.PathLike, scheduler: Scheduler | None) -> str:
    value = os.path.expanduser(os.fspath(value))
    if scheduler is None or scheduler.paths is os.path:
        return os.path.abspath(value)
    return scheduler.paths.normpath(value)  # another OS's path: it must be absolute already


def _path_problems(what: str, value: str, scheduler: Scheduler | None) -> list[str]:
    if not value:
        return [f"{what} is empty"]
    if has_control_char(value):
        return [
            (
                f"{what} {value!r} contains a newline or another control character, which unit files, plists and task "
                "files cannot carry safely: use a path without them"
            )
        ]
    if not (scheduler.paths if scheduler else os.path).isabs(value):
        return [f"{what} {value!r} is not an absolute path"]
    return []


def _word_problems(what: str, value: str) -> list[str]:
    """A tag, remote or branch: one word the worker reads as an option's value."""
    if not value or value != value.strip() or any(c.isspace() for c in value) or has_control_char(value):
        return [f"{what} {value!r} must be one word: no spaces, line breaks or control characters"]
    if value.startswith("-"):
        return [f"{what} {value!r} must not start with '-' (it would read as an option)"]
    return []


def _interval_problems(scheduler: Scheduler | None, mode: str, interval: int) -> list[str]:
    if not isinstance(interval, int) or interval < 1:
        return [f"--interval must be a whole number of seconds, 1 or more (got {interval!r})"]
    if scheduler is None or mode != "tick":
        return []
    if interval < scheduler.min_interval:
        return [
            (
                f"--interval {interval} is too short for {scheduler.name}, which repeats a task at most once a "
                f"minute: use --interval {scheduler.min_interval} or more"
            )
        ]
    if scheduler.max_interval is not None and interval > scheduler.max_interval:
        return [
            (f"--interval {interval} is too long for {scheduler.name} ({scheduler.max_interval // 86400} days at most)")
        ]
    return []


def build_spec(
    *,
    worker_id: str,
    scheduler: str | None = None,
    mode: str = "daemon",
    interval: int | None = None,
    tags: list[str] | tuple[str, ...] = (),
    grace: int | None = None,
    remote: str | None = None,
    queue_branch: str | None = None,
    repo: str | os.PathLike | None = None,
    python: str | None = None,
    env_file: str | os.PathLike | None = None,
    home: str | os.PathLike | None = None,
    notify: bool = False,
    slots: int = 1,
    metrics_file: str | os.PathLike | None = None,
) -> ScheduleSpec:
    """Validate and normalize the options (pure: no file or command is looked at);
    every problem is reported at once, as BadInput."""
    problems: list[str] = []
    if reason := registry.problem(scheduler):
        problems.append(reason)
    target = registry.SCHEDULERS.get(scheduler) if scheduler is not None else registry.native()
    if reason := worker_id_problem(worker_id):
        problems.append(reason)
    if mode not in MODES:
        problems.append(f"unknown mode {mode!r}: use daemon or tick")
    if mode == "tick" and interval is None:
        interval = DEFAULT_TICK_INTERVAL
    if interval is not None:
        problems += _interval_problems(target, mode, interval)
    if grace is not None:
        if mode == "tick":
            problems.append(
                "--grace applies to --mode daemon: a tick has no grace period (it is stopped like any service)"
            )
        elif not isinstance(grace, int) or grace < 0:
            problems.append(f"--grace must be a whole number of seconds, 0 or more (got {grace!r})")
    if slots != 1 and (mode == "tick" or not isinstance(slots, int) or not 1 <= slots <= 64):
        problems.append(f"--slots must be a whole number from 1 to 64, with --mode daemon (got {slots!r})")
    tags = tuple(dict.fromkeys(tags))  # in the order given, each once
    for tag in tags:
        problems += _word_problems("tag", tag)
    if remote is not None:
        problems += _word_problems("remote", remote)
    if queue_branch == DEFAULT_QUEUE_BRANCH:
        queue_branch = None  # the worker's default: the unit need not say it
    if queue_branch is not None:
        problems += _word_problems("queue branch", queue_branch)

    repo_path = _absolute(repo if repo is not None else os.getcwd(), target)
    python = sys.executable if python is None else python
    env_path = _absolute(env_file, target) if env_file is not None else None
    problems += _path_problems("the interpreter", python, target)
    problems += _path_problems("the repository path", repo_path, target)
    if env_path is not None:
        problems += _path_problems("the env file path", env_path, target)
    metrics_path = _absolute(metrics_file, target) if metrics_file is not None else None
    if metrics_path is not None:
        if mode == "tick":
            problems.append("--metrics-file applies to --mode daemon (runner worker --metrics-file)")
        problems += _path_problems("the metrics file path", metrics_path, target)
    if problems:
        raise BadInput(problems)
    assert target is not None  # else registry.problem() was among the problems
    spec = ScheduleSpec(
        scheduler=target.name,
        worker_id=worker_id,
        mode=mode,
        interval=interval,
        repo=repo_path,
        python=python,
        env_file=env_path,
        home=os.fspath(home) if home is not None else str(Path.home()),
        tags=tags,
        grace=grace,
        remote=remote,
        queue_branch=queue_branch,
        notify=notify,
        slots=slots,
        metrics_file=metrics_path,
    )
    if problems := target.problems(spec):
        raise BadInput(problems)
    return spec


def choose_target(
    *,
    scheduler: str | None,
    repo: str | os.PathLike | None,
    target_repo: str | None,
    python: str | None,
    files_only: bool,
    **options,
) -> Target:
    """The spec for this computer, or (--output, --dry-run) for another one.

    A schedule for another computer (another OS, or --target-repo) carries that computer's
    interpreter and repository path: --python and --target-repo, or, when it follows this
    computer's path rules (Linux and macOS), this computer's values, said aloud. Windows
    from elsewhere (and back) needs both given."""
    chosen = registry.get(scheduler)
    if chosen is registry.native() and target_repo is None:
        return Target(_spec_here(chosen, repo, python, options), here=True)
    if not files_only:
        if chosen is registry.native():
            raise BadInput(
                "--target-repo names the repository on another computer and goes with --output DIR (or --dry-run); to "
                "install here, use --repo"
            )
        raise BadInput(
            f"{chosen.name} is not the scheduler of this computer ({sys.platform}), so it cannot be installed here: "
            "pass --output DIR to write its files, or --dry-run to print them"
        )
    assumed, problems = [], []
    there = "on the target computer"
    if chosen.paths is os.path:  # the same path rules: this computer's values are a fair guess, said aloud
        if python is None:
            python = sys.executable
            assumed.append(
                f"assumed --python {python} (this computer's interpreter): pass --python with the interpreter runner "
                f"is installed in {there}"
            )
        if target_repo is None:
            target_repo = _local_repo(repo)
            assumed.append(
                f"assumed --target-repo {target_repo} (this computer's path): pass --target-repo with the worker's "
                f"clone {there}"
            )
    else:
        rules = f"{chosen.name} files use other path rules than this computer's"
        if python is None:
            problems.append(f"pass --python with the interpreter runner is installed in {there}: {rules}")
        if target_repo is None:
            problems.append(f"pass --target-repo with the worker's clone {there}: {rules}")
    if problems:
        raise BadInput(problems)
    assert target_repo is not None  # assumed above, or asked for among the problems
    home, guess = chosen.target_home(_absolute(target_repo, chosen))
    assumed += [guess] if guess else []
    spec = build_spec(scheduler=chosen.name, repo=target_repo, python=python, home=home, **options)
    return Target(spec, here=False, assumed=assumed)


def _local_repo(repo: str | os.PathLike | None) -> str:
    return _absolute(repo if repo is not None else os.getcwd(), None)


def _spec_here(chosen: Scheduler, repo, python: str | None, options: dict) -> ScheduleSpec:
    """A spec for this computer, with what only this computer can tell checked too: the
    interpreter, the env file and the repository exist, and the repository holds a clone
    of the queue. Every problem at once."""
    repo, python = _local_repo(repo), python or sys.executable
    try:
        spec, problems = build_spec(scheduler=chosen.name, repo=repo, python=python, **options), []
    except BadInput as exc:
        spec, problems = None, list(exc.problems)
    if not os.path.exists(python):
        problems.append(
            f"the interpreter {python} does not exist: pass --python with the interpreter runner is installed in"
        )
    env_file = options.get("env_file")
    if env_file is not None and not os.path.isfile(env_file):
        problems.append(f"the env file {_absolute(env_file, None)} does not exist")
    problems += repo_problems(repo, options.get("remote"), options.get("queue_branch") or DEFAULT_QUEUE_BRANCH)
    if problems:
        raise BadInput(problems)
    assert spec is not None  # build_spec raised, so its problems are among these
    return spec


def repo_problems(repo: str, remote: str | None, branch: str) -> list[str]:
    """Is `repo` a git repository holding the queue branch, as a local branch or as the
    remote-tracking branch of the remote the worker will use? Asked of git itself."""
    from runner.store.gitcli import run_git  # allowed here: tests/test_layout.py

    clone = f"clone the queue's repository there (git clone URL {repo}), or pass --repo with the worker's clone"
    if not os.path.isdir(repo):
        return [f"the repository {repo} does not exist: {clone}"]
    if run_git(repo, "rev-parse", "--git-dir", check=False).returncode != 0:
        return [f"{repo} is not a git repository: {clone}"]
    remotes = run_git(repo, "remote", check=False).stdout.decode(errors="replace").split()
    if remote is not None and remote.lower() != "none" and remote not in remotes:
        return [
            (
                f"{repo} has no remote named {remote!r} (it has: {', '.join(remotes) or 'none'}): pass --remote with "
                f"one of them, or add it (git -C {repo} remote add {remote} URL)"
            )
        ]
    if remote is None:
        remote = "origin" if "origin" in remotes else None  # as the worker chooses
    elif remote.lower() == "none":
        remote = None
    refs = [f"refs/heads/{branch}"] + ([f"refs/remotes/{remote}/{branch}"] if remote else [])
    found = (
        run_git(repo, "for-each-ref", "--format=%(refname)", *refs, check=False).stdout.decode(errors="replace").split()
    )
    if not set(found) & set(refs):
        fetch = f"`git -C {repo} fetch {remote}` if the queue is there, or " if remote else ""
        return [
            (
                f"{repo} holds no queue branch {branch} (looked for {' and '.join(refs)}): {fetch}start a queue with "
                f"`runner init --repo {repo}`"
            )
        ]
    return []
