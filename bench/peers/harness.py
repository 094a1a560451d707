"""The peers runner is measured against, installed on request and skipped with a reason
when absent (issue 16 point 4). Nothing of theirs is committed: installs go to
bench/peers/_install/ (git-ignored).

  Backlog.md     npm package `backlog.md`       `backlog task list --ready --plain`
  Taskmaster     npm package `task-master-ai`   `task-master next`
  procrastinate  PyPI `procrastinate` + psycopg, in a venv of its own, on a PostgreSQL
                 from Debian's packages (`apt-get install postgresql`), started here on a
                 private port and data directory and stopped afterwards.

Each `find_*` returns (thing, None) or (None, reason); with install=True it installs
what is missing first.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import log

HERE = Path(__file__).resolve().parent
INSTALL = HERE / "_install"

NPM_PEERS = {"backlog": ("backlog.md", "backlog"), "taskmaster": ("task-master-ai", "task-master")}


def _tail(proc: subprocess.CompletedProcess) -> str:
    """The lines that say what went wrong (npm ends on where its log is, not why)."""
    lines = (proc.stderr or proc.stdout or b"").decode(errors="replace").strip().splitlines()
    errors = [line for line in lines if "error" in line.lower() and "complete log" not in line]
    return " / ".join(errors[:2] or lines[-1:])[:300] or f"exit {proc.returncode}"


def _install_step(cmd: list[str], what: str, timeout: int = 900) -> str | None:
    """Run an install command; None when it worked, else why not."""
    log(f"peers: installing {what}: {' '.join(cmd[:6])}")
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{what} did not install: {exc}"
    return None if proc.returncode == 0 else f"{what} did not install: {_tail(proc)}"


def find_npm_peer(name: str, install: bool) -> tuple[Path | None, str | None]:
    """The executable of an npm peer (backlog or taskmaster)."""
    package, binary = NPM_PEERS[name]
    prefix = INSTALL / f"npm-{name}"
    exe = prefix / "node_modules" / ".bin" / binary
    if exe.exists():
        return exe, None
    if not install:
        return None, f"not installed (python bench/run.py --peers installs npm `{package}`)"
    if not shutil.which("npm") or not shutil.which("node"):
        return None, "node/npm not found (apt-get install nodejs npm)"
    prefix.mkdir(parents=True, exist_ok=True)
    why = _install_step(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(prefix), package], package
    )
    return (exe, None) if exe.exists() else (None, why or f"{package} installed no `{binary}`")


def find_procrastinate(install: bool) -> tuple[Path | None, str | None]:
    """The python of a venv holding procrastinate and psycopg."""
    venv = INSTALL / "venv-procrastinate"
    py = venv / "bin" / "python"
    check = [str(py), "-c", "import procrastinate, psycopg"]
    if py.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return py, None
    if not install:
        return None, "not installed (python bench/run.py --peers installs procrastinate from PyPI)"
    why = _install_step([sys.executable, "-m", "venv", str(venv)], "a venv for procrastinate") or _install_step(
        [str(py), "-m", "pip", "install", "--quiet", "procrastinate", "psycopg[binary]"], "procrastinate"
    )
    return (py, None) if not why else (None, why)


def find_postgres(install: bool) -> tuple[Path | None, str | None]:
    """The bin folder of a PostgreSQL server (initdb, pg_ctl)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent, None
    if not install:
        return None, "PostgreSQL not installed (python bench/run.py --peers runs apt-get install postgresql)"
    if os.geteuid() != 0:
        return None, "PostgreSQL not installed and apt-get needs root"
    why = _install_step(["apt-get", "update"], "the Debian package lists") or _install_step(
        ["apt-get", "install", "-y", "postgresql"], "postgresql"
    )
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return (Path(found[-1]).parent, None) if found else (None, why or "postgresql installed no pg_ctl")


def find_strace(install: bool) -> tuple[Path | None, str | None]:
    """strace, which procs.py counts processes with (Debian package `strace`)."""
    if not shutil.which("strace") and install and os.geteuid() == 0:
        _install_step(["apt-get", "install", "-y", "strace"], "strace")
    found = shutil.which("strace")
    return (
        (Path(found), None) if found else (None, "strace not found (apt-get install strace; --peers does it as root)")
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_postgres(bindir: Path, where: Path | None = None) -> Iterator[str]:
    """A throw-away PostgreSQL on 127.0.0.1:<free port> with its own data directory; yields
    a DSN. Settings are the defaults but synchronous_commit=off: git does not wait for the
    disk either, so neither side is slowed by fsync. As root, the server runs as the
    `postgres` user (PostgreSQL refuses to run as root). Its data lives under `where` (the
    system's temp folder when None): the drain puts it where runner's repositories are."""
    base = Path(tempfile.mkdtemp(prefix="runner-bench-pg-", dir=where))
    data, port = base / "data", _free_port()
    as_user: list[str] = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(base, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]

    def pg(*args: str) -> None:
        proc = subprocess.run([*as_user, str(bindir / args[0]), *args[1:]], capture_output=True, cwd=base)
        if proc.returncode:
            raise RuntimeError(f"{args[0]} failed: {_tail(proc)}")

    try:
        pg("initdb", "-D", str(data), "-A", "trust", "-U", "bench", "--no-sync")
        opts = f"-p {port} -c listen_addresses=127.0.0.1 -k {base} -c synchronous_commit=off"
        pg("pg_ctl", "-D", str(data), "-o", opts, "-l", str(base / "log"), "-w", "start")
        yield f"postgresql://bench@127.0.0.1:{port}/postgres"
    finally:
        with contextlib.suppress(Exception):
            pg("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


# --- the same plan, written for each peer --------------------------------------------------


def backlog_project(path: Path, exe: Path, tasks: int, chains: int) -> Path:
    """`backlog init` with its defaults, then `tasks` To Do tasks in Backlog.md's own file
    format (what `backlog task create` writes), chained like the runner plan; committed."""
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=path, check=True)
    proc = subprocess.run(
        [str(exe), "init", "bench", "--defaults", "--agent-instructions", "none"],
        cwd=path,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode:
        raise RuntimeError(f"backlog init failed: {_tail(proc)}")
    folder = path / "backlog" / "tasks"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(1, tasks + 1):
        deps = f"\n  - TASK-{i - 1}" if chains > 1 and (i - 1) % chains else " []"
        (folder / f"task-{i} - No-op-{i}.md").write_text(
            f"---\nid: TASK-{i}\ntitle: No-op {i}\nstatus: To Do\nassignee: []\ncreated_date: '2026-01-01 00:00'\n"
            f"labels: []\ndependencies:{deps}\nordinal: {i * 1000}\n---\n\n## Description\n\n"
            f"<!-- SECTION:DESCRIPTION:BEGIN -->\nNothing to do.\n<!-- SECTION:DESCRIPTION:END -->\n"
        )
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "backlog"], cwd=path, check=True)
    return path


def taskmaster_project(path: Path, exe: Path, tasks: int, chains: int) -> Path:
    """`task-master init -y` (no git, no rules installs), telemetry off, then a tasks.json
    of `tasks` pending tasks chained like the runner plan."""
    import json

    path.mkdir(parents=True)
    proc = subprocess.run(
        [str(exe), "init", "-y", "--skip-install", "--no-aliases", "--no-git", "--no-git-tasks"],
        cwd=path,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    config = path / ".taskmaster" / "config.json"
    if proc.returncode or not config.exists():
        raise RuntimeError(f"task-master init failed: {_tail(proc)}")
    config.write_text(config.read_text().replace('"anonymousTelemetry": true', '"anonymousTelemetry": false'))
    items = [
        {
            "id": i,
            "title": f"No-op {i}",
            "description": "Nothing to do.",
            "details": "",
            "testStrategy": "",
            "status": "pending",
            "dependencies": [i - 1] if chains > 1 and (i - 1) % chains else [],
            "priority": "medium",
            "subtasks": [],
        }
        for i in range(1, tasks + 1)
    ]
    (path / ".taskmaster" / "tasks").mkdir(exist_ok=True)
    (path / ".taskmaster" / "tasks" / "tasks.json").write_text(
        json.dumps(
            {
                "master": {
                    "tasks": items,
                    "metadata": {
                        "created": "2026-01-01T00:00:00.000Z",
                        "updated": "2026-01-01T00:00:00.000Z",
                        "description": "Tasks for master context",
                    },
                }
            }
        )
    )
    return path


if __name__ == "__main__":
    # `python bench/peers/harness.py` installs every peer and says what it found.
    for name in NPM_PEERS:
        print(name, *find_npm_peer(name, True))
    print("procrastinate", *find_procrastinate(True))
    print("postgres", *find_postgres(True))
