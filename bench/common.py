"""Shared helpers for the benchmarks: statistics, throw-away repositories, a git daemon,
running the CLI in a fresh process, and the result format every topic hands to run.py.

Every topic module (claim_latency, drain, scale, tick_phases, memory) has
`run(quick: bool) -> dict` and can also be run alone: `python bench/<topic>.py [--quick]`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # measure the working copy, not an installed runner

PY = sys.executable

# Reproducible git: no system config, a fixed identity, no prompts.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}
os.environ.update(GIT_ENV)


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def log(message: str) -> None:
    """Progress goes to stderr so a topic's stdout stays machine-readable."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- statistics ---------------------------------------------------------------------


def percentile(samples: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    data = sorted(samples)
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def stats(samples: list[float]) -> dict[str, Any]:
    """n, median, p95, min, max of samples (seconds in, seconds out)."""
    if not samples:
        return {"n": 0, "median": None, "p95": None, "min": None, "max": None}
    return {
        "n": len(samples),
        "median": statistics.median(samples),
        "p95": percentile(samples, 95),
        "min": min(samples),
        "max": max(samples),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or not b:
        return None
    return a / b


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def timed(func, *args, **kwargs) -> tuple[float, Any]:
    start = time.perf_counter()
    value = func(*args, **kwargs)
    return time.perf_counter() - start, value


# --- result format -------------------------------------------------------------------


def table(title: str, columns: list[str], rows: list[list[Any]], note: str = "") -> dict[str, Any]:
    """A table for run.py to print with rich: cells are str / number / None."""
    return {"title": title, "columns": columns, "rows": rows, "note": note}


def goal(name: str, measured: str, target: str, met: bool | None, evidence: str = "") -> dict[str, Any]:
    return {"goal": name, "measured": measured, "target": target, "met": met, "evidence": evidence}


def fmt_ms(seconds: float | None, digits: int = 1) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.{digits}f}"


def fmt_x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


# --- git and repositories ---------------------------------------------------------------


def git(cwd: str | Path, *args: str, input: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["git", *args], cwd=str(cwd), input=input, capture_output=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.decode(errors='replace')}")
    return proc


@contextlib.contextmanager
def workspace(name: str) -> Iterator[Path]:
    """A temp dir removed afterwards (kept when BENCH_KEEP=1, for poking around)."""
    path = Path(tempfile.mkdtemp(prefix=f"runner-bench-{name}-"))
    try:
        yield path
    finally:
        if os.environ.get("BENCH_KEEP") == "1":
            log(f"kept {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


def gates_off_toml() -> bytes:
    from runner.core.config import DEFAULT_TOML

    assert "detect = true" in DEFAULT_TOML
    return DEFAULT_TOML.replace("detect = true", "detect = false").encode()


def plan_files(n: int, layout: str = "flat", chains: int = 0, group_size: int = 100, run: list[str] | None = None) -> dict[str, bytes]:
    """runner.toml (gates off) plus n no-op step files.

    layout "flat": plans/steps/<id>.md; "sub": plans/steps/g<NNN>/<id>.md, group_size per folder.
    chains > 1: step i depends on step i-1 inside chains of that length (so 1/chains are ready).
    """
    from runner.queue.queue import new_step_file

    files: dict[str, bytes] = {"runner.toml": gates_off_toml()}
    for i in range(n):
        step_id = f"s{i:05d}"
        fields: dict[str, Any] = {"run": run or ["true"]}
        if chains > 1 and i % chains:
            fields["depends_on"] = [f"s{i - 1:05d}"]
        path, data = new_step_file(step_id, f"no-op step {i}", fields, f"Step {i} does nothing, quickly.\n")
        if layout == "sub":
            path = f"plans/steps/g{i // group_size:03d}/{step_id}.md"
        files[path] = data
    return files


def new_repo(path: Path, bare: bool = False) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", *(["--bare"] if bare else []), "-b", "main")
    return path


def clone(remote: str, dest: Path) -> Path:
    git(dest.parent, "clone", "-q", remote, str(dest))
    return dest


def seed_queue(repo: Path, files: dict[str, bytes]) -> None:
    """Queue.init, then one plan commit holding every file (pushed when repo has an origin)."""
    from runner.queue.queue import open_queue

    queue = open_queue(repo)
    queue.init("bench")
    queue.add_files(files, "bench plan", "bench")


def make_queue(base: Path, n: int, layout: str = "flat", remote: bool = False, chains: int = 0) -> tuple[Path, Path | None]:
    """(working repo, bare remote or None) holding a queue of n no-op steps with gates off."""
    files = plan_files(n, layout, chains)
    if not remote:
        repo = new_repo(base / "repo")
        seed_queue(repo, files)
        return repo, None
    bare = new_repo(base / "remote.git", bare=True)
    repo = clone(str(bare), base / "repo")
    seed_queue(repo, files)
    return repo, bare


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def git_daemon(base_path: Path) -> Iterator[str]:
    """`git daemon` on 127.0.0.1 serving base_path (push enabled); yields git://127.0.0.1:PORT/."""
    port = free_port()
    proc = subprocess.Popen(
        [
            "git", "daemon", "--reuseaddr", "--listen=127.0.0.1", f"--port={port}",
            "--export-all", "--enable=receive-pack", f"--base-path={base_path}", str(base_path),
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"git daemon exited: {proc.stderr.read().decode(errors='replace')}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("git daemon did not start listening within 10 s")
            time.sleep(0.05)
        yield f"git://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_cli(repo: Path, *args: str, check: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    """Wall time of `python -m runner ARGS --repo REPO` in a fresh process."""
    start = time.perf_counter()
    proc = subprocess.run([PY, "-m", "runner", *args, "--repo", str(repo)], capture_output=True, env=cli_env())
    elapsed = time.perf_counter() - start
    if check and proc.returncode != 0:
        raise RuntimeError(f"runner {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    return elapsed, proc


def run_python(code: str) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of `python -c CODE` in a fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen([PY, "-c", code], env=cli_env(), stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"python -c {code!r} exited {proc.returncode}")
    return elapsed, usage.ru_maxrss * 1024


# --- the machine ---------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    import pygit2

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    head = git(ROOT, "rev-parse", "HEAD", check=False).stdout.decode().strip()
    dirty = git(ROOT, "status", "--porcelain", "--", "runner", check=False).stdout.decode().strip()
    try:
        import psutil

        memory = psutil.virtual_memory().total
    except Exception:
        memory = None
    return {
        "cores": os.cpu_count(),
        "cores_usable": affinity,
        "memory_bytes": memory,
        "load_average": os.getloadavg(),
        "git": git(ROOT, "--version").stdout.decode().strip(),
        "python": platform.python_version(),
        "pygit2": pygit2.__version__,
        "libgit2": pygit2.LIBGIT2_VERSION,
        "platform": platform.platform(),
        "runner_commit": head,
        "runner_dirty": bool(dirty),
    }


def main_for(topic_run) -> None:
    """`python bench/<topic>.py [--quick] [--out FILE]`: run one topic, write its JSON."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, help="write the topic's JSON here (default: stdout)")
    args = parser.parse_args()
    result = topic_run(quick=args.quick)
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)


# --- timing the library from outside ------------------------------------------------------


_INHERITED = object()


class _TimeProxy:
    """Stands in for the `time` module inside one runner module, so its sleeps can be timed."""

    def __init__(self) -> None:
        self.sleep = time.sleep

    def __getattr__(self, name: str):
        return getattr(time, name)


class PhaseClock:
    """Times library functions by wrapping them (main thread only), exclusive of wrapped callees.

    Time is keyed by (top, path): `top` is the outermost wrapped call (a tick phase),
    `path` the wrapped calls below it down to the one that was running, e.g.
    ("record outcome", "heartbeat ref > git push"). The time a phase spent in its own
    code, outside any wrapped callee, has path == top.
    Separately, every `git` subprocess started through runner.gitstore.run_git is
    counted by subcommand.
    """

    def __init__(self) -> None:
        import threading

        self._main = threading.main_thread()
        self._threading = threading
        self.stack: list[list] = []
        self.totals: dict[tuple[str, str], float] = {}
        self.git_calls: dict[str, list[float]] = {}
        self._restore: list[tuple[object, str, object]] = []

    def wrap(self, owner: object, attr: str, label: str) -> None:
        if not hasattr(owner, attr):  # runner changed under the benchmark: time what still exists
            log(f"PhaseClock: {getattr(owner, '__name__', owner)}.{attr} not found, not timed")
            return
        original = vars(owner).get(attr, _INHERITED) if isinstance(owner, type) else getattr(owner, attr)
        func = getattr(owner, attr)
        clock = self

        def wrapper(*args, **kwargs):
            if clock._threading.current_thread() is not clock._main:
                return func(*args, **kwargs)
            frame = [label, time.perf_counter(), 0.0]
            clock.stack.append(frame)
            try:
                return func(*args, **kwargs)
            finally:
                total = time.perf_counter() - frame[1]
                clock.stack.pop()
                if clock.stack:
                    key = (clock.stack[0][0], " > ".join([f[0] for f in clock.stack[1:]] + [label]))
                else:
                    key = (label, label)
                clock.totals[key] = clock.totals.get(key, 0.0) + total - frame[2]
                if clock.stack:
                    clock.stack[-1][2] += total

        if isinstance(owner, type) and isinstance(original, (classmethod, staticmethod)):
            setattr(owner, attr, staticmethod(wrapper))
        else:
            setattr(owner, attr, wrapper)
        self._restore.append((owner, attr, original))

    def count_git(self) -> None:
        """Count and time git subprocesses (runner.gitstore.run_git and the copy runner.worker.tick imported)."""
        import runner.store.git
        import runner.worker.tick

        original = runner.gitstore.run_git

        def run_git(cwd, *args, **kwargs):
            start = time.perf_counter()
            try:
                return original(cwd, *args, **kwargs)
            finally:
                sub = next((a for a in args if not a.startswith("-") and "=" not in a), "?")
                if sub == "worktree" and len(args) > 1:
                    sub = f"worktree {args[1]}"
                self.git_calls.setdefault(sub, []).append(time.perf_counter() - start)

        for module in (runner.store.git, runner.worker.tick):
            self._restore.append((module, "run_git", module.run_git))
            module.run_git = run_git

    def instrument_tick(self) -> None:
        """Wrap the phases of Worker.tick and the git / plan operations inside them."""
        import runner.worker.executor
        import runner.worker.tick
        from runner.store.git import GitStore
        from runner.queue.leases import LeaseObserver
        from runner.core.plan import Plan
        from runner.queue.queue import Queue
        from runner.worker.tick import Heartbeat, Worker

        for owner, attr, label in (
            (Worker, "prune_stale_worktrees", "prune stale worktrees"),
            (Queue, "snapshot", "read queue (fetch + snapshot)"),
            (Worker, "resource_floor", "resource floor (psutil)"),
            (Queue, "claim", "claim"),
            (Queue, "snapshot_at", "read plan at a commit"),
            (Worker, "beat", "heartbeat ref"),
            (Heartbeat, "start", "heartbeat thread"),
            (Heartbeat, "join", "heartbeat thread"),
            (Worker, "prepare", "prepare worktree"),
            (Worker, "command", "write prompt files"),
            (runner.worker.executor, "run", "run the step"),
            (runner.worker.tick, "run_gates", "gates"),
            (Worker, "commit_worktree", "commit worktree"),
            (Worker, "check_fence", "fence check"),
            (Worker, "merge", "merge into integration"),
            (Worker, "record", "record outcome"),
            (Worker, "handoff", "write handoff"),
            (Worker, "cleanup", "remove worktree"),
            (Worker, "log", "worker log"),
            (GitStore, "fetch", "git fetch"),
            (GitStore, "push", "git push"),
            (GitStore, "force_push", "git push (step branch)"),
            (GitStore, "local_cas", "local ref CAS"),
            (GitStore, "make_commit", "build commit (pygit2)"),
            (GitStore, "tree_files", "list step files (tree walk)"),
            (GitStore, "add_worktree", "git worktree prune+add"),
            (GitStore, "remove_worktree", "git worktree remove+prune"),
            (Plan, "build", "validate plan (Plan.build)"),
            (Queue, "candidates", "pick candidate"),
            (LeaseObserver, "expired_claims", "lease check (observed.json)"),
        ):
            self.wrap(owner, attr, label)
        for module in (runner.queue.queue, runner.worker.tick):  # only their sleeps: compare-and-swap backoff
            proxy = _TimeProxy()
            self.wrap(proxy, "sleep", "backoff sleep")
            self._restore.append((module, "time", module.time))
            module.time = proxy
        self.count_git()

    def take(self) -> tuple[dict[tuple[str, str], float], dict[str, list[float]]]:
        """The totals and git calls so far, and reset."""
        totals, calls = self.totals, self.git_calls
        self.totals, self.git_calls = {}, {}
        return totals, calls

    def restore(self) -> None:
        for owner, attr, original in reversed(self._restore):
            if original is _INHERITED:
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)
        self._restore.clear()
