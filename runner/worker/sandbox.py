"""Steps in a sandbox (`[worker] sandbox = "bwrap"`, or a role's own `sandbox`): each command
a step runs (implement, its gates, its roles) starts inside bubblewrap, which sees

- the whole filesystem read-only; a private, empty /tmp;
- $HOME empty, but the files and folders `[worker] sandbox_home` names (an agent CLI's own
  config and login, which `runner init --agent` writes), writable, and, read-only, the
  toolchains people keep there (TOOLCHAINS: pyenv, nvm, ~/.local/bin, ...) and the folders
  of PATH that $HOME or /tmp would hide (where the CLI is installed);
- the folders `[worker] sandbox_write` names (a shared build cache), writable;
- the clone's working tree hidden, but its .git read-only (objects writable: git may commit),
  and `.git/runner/` hidden (the worker's logs, its other worktrees, its claims), but the
  step's own worktree and attempt folder (prompts, outputs), writable;
- no other process (its own pid namespace); the network unless `[worker] network = false`;
- an environment cut to an allow-list: PATH, HOME, locale and terminal, git's identity,
  proxies, RUNNER_* (the reaper's tag among them: the tree still dies with its worker) and
  `[worker] env_pass`.

A configured sandbox that cannot run (no bwrap, user namespaces off) is an error before any
claim, never a run without it."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

BASE_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
BASE_PREFIXES = ("RUNNER_", "LC_")
# Where people install interpreters and tools under $HOME (a venv's python is often pyenv's, an
# agent CLI nvm's node): seen read-only, so what runs there still starts in an empty $HOME.
TOOLCHAINS = (
    ".pyenv",
    ".nvm",
    ".volta",
    ".bun",
    ".deno",
    ".cargo/bin",
    ".rustup",
    "go/bin",
    ".asdf",
    ".local/bin",
    ".local/lib",
    ".local/share/mise",
    ".npm-global",
    ".sdkman",
    ".linuxbrew",
)


def mode(config, role: str | None) -> str:
    """ "bwrap" or "none": the role's own setting, else the worker's."""
    own = config.roles[role].sandbox if role in config.roles else None
    return own or config.worker.sandbox


def configured(config) -> bool:
    return config.worker.sandbox == "bwrap" or any(r.sandbox == "bwrap" for r in config.roles.values())


@functools.cache
def unusable() -> str | None:
    """Why bubblewrap cannot run a sandbox on this machine (None when it can): it is not
    installed, or it fails to start (user namespaces off)."""
    program = shutil.which("bwrap")
    if program is None:
        return "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
    try:
        done = subprocess.run(
            [program, "--ro-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--", "true"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start ({exc})"
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[:200] or f"exit code {done.returncode}"
        return f"bubblewrap cannot make a sandbox here ({said}): are user namespaces off?"
    return None


def problem(config) -> str | None:
    """Why a worker may not run this queue's steps as configured (None: it may)."""
    if configured(config) and (why := unusable()):
        return f'runner.toml asks for sandbox = "bwrap" but {why}; no step runs without it'
    return None


def environment(env: dict[str, str], passed: tuple[str, ...]) -> dict[str, str]:
    """The allow-list of a sandboxed step's variables."""
    return {
        name: value
        for name, value in env.items()
        if name in BASE_ENV or name in passed or name.startswith(BASE_PREFIXES)
    }


def wrap(
    config, role: str | None, cwd: Path, files: Path, state_dir: Path, workdir: Path, env: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """(the argv prefix, the environment) a command of `role` runs with: ([], env) unsandboxed."""
    if mode(config, role) != "bwrap":
        return [], env
    home = Path(env.get("HOME") or os.path.expanduser("~")).resolve()
    cwd, files, state_dir, workdir = cwd.resolve(), files.resolve(), state_dir.resolve(), workdir.resolve()
    git_dir = state_dir.parent
    box = [
        shutil.which("bwrap") or "bwrap",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--unshare-pid",
        "--die-with-parent",
    ]
    if not config.worker.network:
        box.append("--unshare-net")
    box += ["--tmpfs", str(home)]
    toolchains = [str(home / name) for name in TOOLCHAINS if (home / name).is_dir()]
    for folder in dict.fromkeys([*toolchains, *_hidden_path_folders(env.get("PATH", ""), home)]):
        box += ["--ro-bind", folder, folder]
    for name in config.worker.sandbox_home:
        path = home / name.removeprefix("~/").lstrip("/")
        if path.exists():
            box += ["--bind", str(path), str(path)]
    for name in config.worker.sandbox_write:
        path = home / name[2:] if name.startswith("~/") else Path(name)
        if path.is_dir():
            box += ["--bind", str(path), str(path)]
    if workdir != git_dir:  # a working tree around .git: hidden but .git
        box += ["--tmpfs", str(workdir), "--ro-bind", str(git_dir), str(git_dir)]
    box += ["--tmpfs", str(state_dir), "--bind", str(git_dir / "objects"), str(git_dir / "objects")]
    if (admin := _worktree_admin(cwd)) is not None:
        box += ["--bind", str(admin), str(admin)]
    for path in (cwd, files):
        path.mkdir(parents=True, exist_ok=True)
        box += ["--bind", str(path), str(path)]
    box += ["--chdir", str(cwd), "--"]
    return box, environment(env, tuple(config.worker.env_pass))


def _hidden_path_folders(path: str, home: Path) -> list[str]:
    """The folders of PATH the sandbox's empty $HOME and /tmp would hide (a CLI installed there)."""
    hidden = (str(home) + os.sep, "/tmp/")
    return [
        folder
        for folder in dict.fromkeys(path.split(os.pathsep))
        if folder and (folder + os.sep).startswith(hidden) and os.path.isdir(folder)
    ]


def _worktree_admin(worktree: Path) -> Path | None:
    """The folder a linked worktree's git keeps its HEAD and index in (`gitdir:` of its .git file)."""
    try:
        text = (worktree / ".git").read_text()
    except OSError:
        return None
    return Path(text.removeprefix("gitdir:").strip()) if text.startswith("gitdir:") else None
