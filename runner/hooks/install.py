"""Installing runner's git hooks without losing a hook that was there before: the
server's pre-receive (in the remote's bare repository) and a clone's pre-commit.

An admin often installs the server hook as another user than the repository's owner:
git's ownership check is lifted for these calls only (the admin chose the folder)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pygit2

from runner.core.errors import LOST_RACE, BadInput
from runner.core.layout import DEFAULT_QUEUE_BRANCH
from runner.store.gitcli import run_git  # allowed here: tests/test_layout.py

_ANY_OWNER = ("-c", "safe.directory=*")


def _allow_any_owner() -> None:
    try:
        pygit2.option(pygit2.enums.Option.SET_OWNER_VALIDATION, 0)
    except (AttributeError, ValueError):
        pass


MARKER = "runner-hook:"  # a line of every hook runner installs
SAVED_SUFFIX = ".runner-saved"


def render_hook(name: str, queue_branch: str = DEFAULT_QUEUE_BRANCH) -> str:
    from runner.resources import fill, shipped

    runner_home = Path(__file__).absolute().parents[2]  # the folder that holds the runner package
    # sys.executable as it is (a venv's python is a symlink that must stay one).
    return fill(
        shipped("hooks", name),
        {
            "PYTHON": shlex.quote(sys.executable),
            "RUNNER_HOME": shlex.quote(str(runner_home)),
            "QUEUE_BRANCH": shlex.quote(queue_branch),
            "LOST_RACE": LOST_RACE,
        },
    )


def is_runner_hook(path: Path) -> bool:
    try:
        return path.is_file() and MARKER in path.read_text(errors="replace")
    except OSError:
        return False


def hooks_dir(repo: Path) -> Path:
    """The hooks folder git uses for a repository (honours core.hooksPath)."""
    out = run_git(repo, *_ANY_OWNER, "rev-parse", "--git-path", "hooks").stdout.decode().strip()
    path = Path(out)
    return path if path.is_absolute() else (repo / path).resolve()


def install_hook(folder: Path, name: str, text: str) -> str:
    """Write hook `name`, moving a hook that was there aside to chain it. Returns what happened."""
    folder.mkdir(parents=True, exist_ok=True)
    target, saved = folder / name, folder / (name + SAVED_SUFFIX)
    message = f"installed {target}"
    if (target.exists() or target.is_symlink()) and not is_runner_hook(target):
        if saved.exists() or saved.is_symlink():
            raise BadInput(f"{target} exists and so does {saved}: move one of them away, then install again")
        target.rename(saved)
        message += f" (the existing hook runs first, kept as {saved.name})"
    temporary = folder / (name + ".runner-tmp")
    temporary.write_text(text)
    temporary.chmod(0o755)
    temporary.replace(target)
    return message


def uninstall_hook(folder: Path, name: str) -> str:
    target, saved = folder / name, folder / (name + SAVED_SUFFIX)
    if not is_runner_hook(target):
        return f"{target}: no runner hook installed" + (
            " (left the hook that is there alone)" if target.exists() else ""
        )
    target.unlink()
    if saved.exists() or saved.is_symlink():
        saved.rename(target)
        return f"removed the runner hook; restored the previous {name} hook"
    return f"removed {target}"


def target_problems(server: Path | None, clone: Path | None) -> list[str]:
    """Every problem with where hooks should go: a bare remote and/or a working clone."""
    problems = _repository_problems(server, bare=True) if server is not None else []
    return problems + (_repository_problems(clone, bare=False) if clone is not None else [])


def _repository_problems(path: Path, bare: bool) -> list[str]:
    if not path.exists():
        return [f"{path}: no such folder"]
    _allow_any_owner()
    try:
        found = pygit2.discover_repository(str(path))
    except pygit2.GitError:
        found = None
    if not found:
        return [f"{path}: not a git repository"]
    is_bare = pygit2.Repository(found).is_bare
    if bare and not is_bare:
        return [
            (
                f"{path}: not a bare repository (the server hook belongs in the remote's bare repository; use --repo "
                "for a clone)"
            )
        ]
    if not bare and is_bare:
        return [f"{path}: a bare repository has no commits made in it (use --server for a remote)"]
    return []


# What the receiving side keeps: reflogs of every ref (the hook judges a takeover by when the
# holder's heartbeat last arrived, on the server's clock), and each push as one pack instead
# of thousands of loose objects (a busy queue's remote otherwise drowns in them).
SERVER_SETTINGS = {"core.logAllRefUpdates": "always", "receive.unpackLimit": "1", "gc.auto": "6700"}


def install_server(bare: Path, queue_branch: str = DEFAULT_QUEUE_BRANCH) -> list[str]:
    """Install the pre-receive hook. It enforces fast-forwards and refuses deletions of the queue,
    integration and heartbeat refs itself: git's receive.denyNonFastForwards is repository-wide and
    would also refuse the rewrite of a step branch by the next attempt of a step."""
    if problems := _repository_problems(bare, bare=True):
        raise BadInput(problems)
    messages = [install_hook(hooks_dir(bare), "pre-receive", render_hook("pre-receive", queue_branch))]
    for key, value in SERVER_SETTINGS.items():
        run_git(bare, *_ANY_OWNER, "config", key, value)
    messages.append(
        "set "
        + ", ".join(f"{k}={v}" for k, v in SERVER_SETTINGS.items())
        + " (keep a `git gc` schedule on the server: docs/protocol.md)"
    )
    return messages


def uninstall_server(bare: Path) -> list[str]:
    if problems := _repository_problems(bare, bare=True):
        raise BadInput(problems)
    return [uninstall_hook(hooks_dir(bare), "pre-receive")]


def install_client(repo: Path) -> list[str]:
    if problems := _repository_problems(repo, bare=False):
        raise BadInput(problems)
    return [install_hook(hooks_dir(repo), "pre-commit", render_hook("pre-commit"))]


def uninstall_client(repo: Path) -> list[str]:
    if problems := _repository_problems(repo, bare=False):
        raise BadInput(problems)
    return [uninstall_hook(hooks_dir(repo), "pre-commit")]
