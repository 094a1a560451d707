"""`runner ready` and `runner status` without typer, pygit2 or YAML, and `runner claim`
without typer: what a shell loop, a `watch` or an agent harness polls.

The full `runner ready` and `runner status` save the index of the plan they read (the
runner.core.model.INDEX_KEYS of every step, and the problems of the invalid ones) with the
queue tip. A later `runner ready` or `runner status` with plain options (on a clone, after
the same fetch from origin the full command makes) answers from that index when the branch
still points at the same tip (fetched and read by the plumbing store: git's own commands, no
pygit2) and runner's code is the same (by content: runner.core.fingerprint); the plan, the
rows and the rendering are the full command's own. Anything else, or anything unexpected,
goes the full way: this is a shortcut, never a second answer.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from runner.core.layout import GIT_REPOSITORY_ENV

INDEX_FILE = "plan-index.json"
FORMAT = 4
# --tag: ready only
_VALUE_OPTIONS = {"--repo": "repo", "--remote": "remote", "--queue-branch": "branch", "--tag": "tags"}
_UNTAGGED_OPTIONS = {key: value for key, value in _VALUE_OPTIONS.items() if key != "--tag"}
_FLAGS = {"--json": "json", "--all": "show_all"}


def code_stamp() -> list:
    """Changes whenever runner's code changes, any module of it (the code that reads, judges
    or renders a plan is most of it)."""
    from runner import __version__
    from runner.core.fingerprint import package_hash

    return [__version__, package_hash()]


HELP_ARGS: tuple[list[str], ...] = ([], ["--help"], ["-h"])  # what prints runner's help


def answer(args: list[str]) -> bool:
    """Print what `runner ARGS` prints when this module can say it as the command line would
    (the help, a listing of an unchanged local queue); False, having printed nothing, when the
    command line must answer."""
    if args in HELP_ARGS:
        return answer_help()
    if args[:1] in (["ready"], ["status"]):
        return answer_listing(args[0], args[1:])
    if args[:1] == ["claim"]:
        return answer_claim(args[1:])
    if args[:1] in (["heartbeat"], ["complete"]):
        return answer_step_event(args[0], args[1:])
    return False


def answer_claim(args: list[str]) -> bool:
    """`runner claim [STEP] --id W [--tag T]... [--repo R] [--remote R] [--queue-branch B]
    [--json]` without the command-line framework (what a script or harness calls in a loop):
    the same claim (runner.commands.plain.claim), the same output and exit codes. False for
    anything else (help, --ignore-deps, an option it does not know), which the full command
    answers."""
    from runner.commands import failures, plain

    options = _parse(args, {"--json": "json"}, {**_VALUE_OPTIONS, "--id": "worker"}, positional="step")
    if options is None or "worker" not in options:
        return False
    target = plain.Target.of(Path(options["repo"]), options["remote"], options["branch"], options["json"])
    code = failures.run(
        lambda: plain.claim(target, options.get("step"), options["worker"], options["tags"]), json_out=options["json"]
    )
    if code:
        raise SystemExit(code)
    return True


def answer_step_event(command: str, args: list[str]) -> bool:
    """`runner heartbeat|complete STEP --id W [--repo R] [--remote R] [--queue-branch B] [--json]`
    without the command-line framework, as answer_claim: what a harness calls while it works
    and when it is done. False for anything else, which the full command answers."""
    from runner.commands import failures, plain

    options = _parse(args, {"--json": "json"}, {**_UNTAGGED_OPTIONS, "--id": "worker"}, positional="step")
    if options is None or "worker" not in options or "step" not in options:
        return False
    target = plain.Target.of(Path(options["repo"]), options["remote"], options["branch"], options["json"])
    run = plain.heartbeat if command == "heartbeat" else plain.complete
    code = failures.run(lambda: run(target, options["step"], options["worker"]), json_out=options["json"])
    if code:
        raise SystemExit(code)
    return True


def answer_help() -> bool:
    """Print `runner --help` as the command line printed it last, when nothing it is made of
    changed since (runner's commands, click and typer, the width, the program's name); False
    when the command line must render it. ~20 ms instead of ~150 ms of importing typer."""
    try:
        data = json.loads(_help_file().read_text())
        if data.get("key") != _help_key():
            return False
        text = data["text"]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return False
    sys.stdout.write(text)
    return True


def save_help(text: str) -> None:
    """Keep the help the command line just printed for answer_help."""
    try:
        path = _help_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": _help_key(), "text": text}))
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        pass  # only a shortcut


def _help_file() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "runner" / "help.json"


def _help_key() -> list:
    import shutil

    from runner.core.fingerprint import library_hash

    # their versions and help code
    libraries = library_hash("click/__init__.py", "click/core.py", "typer/__init__.py", "typer/core.py")
    width = max(min(shutil.get_terminal_size().columns, 80) - 2, 50)  # as click's HelpFormatter wraps
    return [code_stamp(), libraries, width, sys.argv[0], getattr(sys.modules["__main__"], "__package__", None)]


def save(
    state_dir: Path, branch: str, tip: str, plan, touches_exclusive: bool = True, warnings: list[str] | None = None
) -> None:
    """Keep the index of `plan` (read at `tip` of `branch`) for the next `runner ready` or `status`."""
    data = {
        "format": FORMAT,
        "code": code_stamp(),
        "branch": branch,
        "tip": tip,
        "halted": plan.halted,
        "touches_exclusive": touches_exclusive,  # runner.toml's, read at that tip
        "warnings": list(warnings or []),  # what `runner status` warns of from runner.toml at that tip
        "steps": [[s.id, s.path, s.index] for s in plan.steps.values()],
        "invalid": [[s.id, s.path, _invalid_index(s), s.problems] for s in plan.invalid],
    }
    tmp = state_dir / f"{INDEX_FILE}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(data, default=str))
        os.replace(tmp, state_dir / INDEX_FILE)
    except (OSError, TypeError, ValueError):
        tmp.unlink(missing_ok=True)  # only a shortcut: never fail the command for it


def _invalid_index(step) -> dict:
    # render.step_row gives an invalid step a stored status only when its frontmatter read
    # at all; "ready" is what such a step without a status key reports.
    return step.index or ({"status": "ready"} if step.meta else {})


def answer_listing(command: str, args: list[str]) -> bool:
    """Print `runner COMMAND ARGS` (ready or status) from the saved index when that is the full
    command's answer; False (having printed nothing) when the full command must answer."""
    options = _options(command, args)
    if options is None or os.environ.keys() & GIT_REPOSITORY_ENV:
        return False
    try:
        git_dir = _git_dir(Path(options["repo"]))
        if git_dir is None:
            return False
        tip = _queue_tip(git_dir, options["branch"], options["local_only"])
        data = json.loads((git_dir / "runner" / INDEX_FILE).read_text())
        if (
            data.get("format") != FORMAT
            or data.get("branch") != options["branch"]
            or tip is None
            or data.get("tip") != tip
        ):
            return False
        if data.get("code") != code_stamp():
            return False
        from runner.commands import render

        plan = _plan(data)
        exclusive = bool(data["touches_exclusive"])
        rows = (
            render.ready_rows(plan, options["tags"], exclusive)
            if command == "ready"
            else render.status_rows(plan, exclusive)
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # an index that does not read: the full way
        return False
    if command == "ready":
        render.print_ready(plan, rows, options["branch"], options["json"], options["show_all"])
    else:
        render.print_status(
            plan, rows, options["branch"], tip, options["json"], options["show_all"], [str(w) for w in data["warnings"]]
        )
    return True


def _parse(
    args: list[str], flags: dict[str, str], values: dict[str, str], positional: str | None = None
) -> dict | None:
    """Plain options as the full command parses them: `flags` and `values` map an option to
    its key (`--tag` repeats), `positional` names the one argument allowed; None for anything
    else (help, an option this shortcut does not take), which the full command answers."""
    options: dict = {
        "repo": ".",
        "remote": None,
        "branch": os.environ.get("RUNNER_QUEUE_BRANCH") or "runner/queue",
        "tags": [],
    }
    options.update({key: False for key in flags.values()})
    rest = iter(args)
    for arg in rest:
        name, equals, inline = arg.partition("=")
        if name in flags and not equals:
            options[flags[name]] = True
        elif name in values:
            value = inline if equals else next(rest, None)
            if not value:
                return None
            if name == "--tag":
                options["tags"].append(value)
            else:
                options[values[name]] = value
        elif positional and not arg.startswith("-") and positional not in options:
            options[positional] = arg
        else:
            return None
    return options


def _options(command: str, args: list[str]) -> dict | None:
    """The options of `runner ready` or `status`; None for anything this shortcut does not take
    (a named remote, --watch, --tag on status)."""
    values = _VALUE_OPTIONS if command == "ready" else _UNTAGGED_OPTIONS
    options = _parse(args, _FLAGS, values)
    if options is None:
        return None
    remote = options.pop("remote")
    if remote is not None and remote.lower() != "none":
        return None
    options["local_only"] = remote is not None
    return options


def _git_dir(start: Path) -> Path | None:
    """The .git folder of the repository at or above `start`, where the plan index is kept;
    None when it is anything else (a worktree's or submodule's .git file, a bare repository,
    a reftable)."""
    for folder in [start.resolve(), *start.resolve().parents]:
        dot_git = folder / ".git"
        if dot_git.is_dir():
            return None if (dot_git / "reftable").exists() or (dot_git / "commondir").exists() else dot_git
        if dot_git.exists() or (folder / "HEAD").is_file():
            return None
    return None


def _queue_tip(git_dir: Path, branch: str, local_only: bool) -> str | None:
    """The queue branch's tip as the full command reads it, through the plumbing store (git's
    own commands, no pygit2): on a clone, after the same fetch from origin the full command
    makes first (the queue branch and every heartbeat); None when the full command must answer
    (a remote but no origin, a fetch that failed, no such branch)."""
    from runner.store import StoreError
    from runner.store.plumbing import PlumbingStore, known_repository

    has_remote = not local_only and _has_remote(git_dir)
    try:
        store = PlumbingStore(
            git_dir, remote="auto" if has_remote else None, known=known_repository(git_dir, git_dir.parent)
        )
        if has_remote:
            if store.remote is None:
                return None
            store.fetch([branch], heartbeats=True)
        return store.tip(branch)
    except StoreError:
        return None


def _has_remote(git_dir: Path) -> bool:
    return "[remote " in (git_dir / "config").read_text(errors="replace")


def _plan(data: dict):
    from runner.core.model import Step
    from runner.core.plan import Plan

    steps = {step_id: Step(step_id, path, index, "") for step_id, path, index in data["steps"]}
    invalid = [
        Step(step_id, path, index, "", [str(p) for p in problems]) for step_id, path, index, problems in data["invalid"]
    ]
    if any(not step.problems for step in invalid):
        raise ValueError("an invalid step without its problems")
    return Plan(steps=steps, invalid=invalid, halted=data["halted"])
