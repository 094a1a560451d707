"""Shared helpers: the runner under test, processes, statistics, interleaving, plans and
repositories, the machine, and the result rows every topic hands to run.py.

runner is driven through its command line (`runner init`, `import`, `ready`, `claim`,
`worker`, ...). The one figure that needs runner in-process (claim cost without a
process start-up around it) goes through `InProcessClaimer` at the end of this file:
when runner's Python API changes, that class is the one place to edit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent

# The runner under test: the working copy's .venv by default (`bash examples/demo.sh` makes it).
RUNNER = Path(os.environ.get("BENCH_RUNNER") or ROOT / ".venv" / "bin" / "runner")
RUNNER_PY = RUNNER.parent / "python"  # the interpreter the console script runs on

# Reproducible git: no system or global config, a fixed identity, no prompts.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
}
os.environ.update(GIT_ENV)


def log(message: str) -> None:
    """Progress goes to stderr; stdout is for the table."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- processes ----------------------------------------------------------------------


def env(cache: Path | None = None) -> dict[str, str]:
    """Environment for runner and peers. `cache` stands in for ~/.cache, so a cold run
    cannot find state a tool keeps outside the repository."""
    result = {**os.environ, **GIT_ENV, "PYTHONUNBUFFERED": "1"}
    if cache is not None:
        result["XDG_CACHE_HOME"] = str(cache)
    return result


def run(cmd: list[str], cwd: Path | None = None, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", env())
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, **kwargs)
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or b"").decode(errors="replace")[-1500:]
        raise RuntimeError(f"{' '.join(map(str, cmd[:4]))} exited {proc.returncode}: {tail}")
    return proc


def timed(cmd: list[str], cwd: Path | None = None, **kwargs) -> float:
    """Wall seconds of one fresh process, output discarded (not a terminal), exit 0 required."""
    kwargs.setdefault("env", env())
    start = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kwargs)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(map(str, cmd[:4]))} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-1500:]}"
        )
    return elapsed


def runner(*args: Any, repo: Path | None = None, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return run([RUNNER, *args, *(["--repo", repo] if repo else [])], check=check, **kwargs)


def git(cwd: Path, *args: str, input: bytes | None = None) -> str:
    return run(["git", *args], cwd=cwd, input=input).stdout.decode()


# --- statistics and interleaving ------------------------------------------------------


def summary(samples: list[float]) -> dict[str, Any]:
    if not samples:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {"n": len(samples), "median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def interleave(variants: dict[str, Callable[[], Any]], rounds: int, seed: int = 16) -> list[dict[str, Any]]:
    """Run every variant once per round, in an order shuffled afresh each round (seeded, so
    a run can be repeated): each sees the same drift of the machine, and none always runs
    right after the same other (a rotation kept that: a claim after a heavy process's writes
    was 2x slower than one after a light one). Returns one {variant: result} per round."""
    shuffle = random.Random(seed).shuffle
    out = []
    for _ in range(rounds):
        order = list(variants)
        shuffle(order)
        out.append({name: variants[name]() for name in order})
    return out


def column(rounds: list[dict[str, Any]], name: str) -> list[Any]:
    return [r[name] for r in rounds if name in r]


def ratios(rounds: list[dict[str, Any]], a: str, b: str, key: Callable[[Any], float] = lambda v: v) -> list[float]:
    """a/b within each round: the spread of a ratio measured side by side."""
    return [key(r[a]) / key(r[b]) for r in rounds if a in r and b in r and key(r[b])]


def judged_ratio(
    rounds: list[dict[str, Any]],
    a: str,
    b: str,
    op: str,
    best: Callable = min,
    key: Callable[[Any], float] = lambda v: v,
) -> tuple[float, list[float], str]:
    """a/b taken two ways, and the one less favourable to runner against goal `op`:
    the median of the per-round ratios, and a's best sample over b's best (best=min for
    times, max for rates: the samples least disturbed by the machine's load). Under load
    the process that needs more CPU suffers more, so either way alone could flatter.
    Returns (value, per-round ratios, a note saying both)."""
    per_round = ratios(rounds, a, b, key)
    median = statistics.median(per_round)
    of_best = best(key(v) for v in column(rounds, a)) / best(key(v) for v in column(rounds, b))
    value = max(median, of_best) if op == "<=" else min(median, of_best)
    return (
        value,
        per_round,
        (
            f"median of per-round ratios {median:.3g}x, best over best {of_best:.3g}x, "
            f"the {'higher' if op == '<=' else 'lower'} judged"
        ),
    )


# --- result rows ----------------------------------------------------------------------


def figure(
    name: str,
    value: float | None,
    unit: str,
    goal: tuple[str, float] | None = None,
    spread: list[float] | None = None,
    detail: str = "",
    error: str | None = None,
    skipped: str | None = None,
) -> dict[str, Any]:
    """One row of the table. goal: (">=" | "<=" | "<", target) or None for a plain report.
    unit: "x" for a ratio, "ms" (value in seconds), "MiB" (bytes), "%" (a share of 1), "" for a count."""
    row = {
        "figure": name,
        "value": value,
        "unit": unit,
        "goal": list(goal) if goal else None,
        "detail": detail,
        "spread": summary(spread or []),
        "error": error,
        "skipped": skipped,
    }
    row["met"], row["verdict"] = verdict(row)
    return row


def verdict(row: dict[str, Any]) -> tuple[bool | None, str]:
    if row["skipped"]:
        return None, f"skipped: {row['skipped']}"
    if row["error"]:
        return False, f"FAILED: {row['error']}"
    if row["goal"] is None or row["value"] is None:
        return None, "report"
    op, target = row["goal"]
    value = row["value"]
    met = value >= target if op == ">=" else value <= target if op == "<=" else value < target
    if met:
        return True, "met"
    gap = abs(value - target)
    share = gap / target * 100
    side = "short" if op == ">=" else "over"
    return False, f"MISSED by {fmt(gap, row['unit'])} ({share:.0f}% {side})"


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:.3f}x" if abs(value) < 0.1 else f"{value:.2f}x"
    if unit == "ms":
        return f"{value * 1000:.0f} ms"
    if unit == "MiB":
        return f"{value / 2**20:.1f} MiB"
    if unit == "%":
        return f"{value * 100:.1f}%"
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")[:400]


# --- repositories and plans -------------------------------------------------------------


@contextlib.contextmanager
def workspace(name: str, in_memory: bool = False) -> Iterator[Path]:
    """A temp dir removed afterwards (kept when BENCH_KEEP=1, for poking around); with
    `in_memory`, on tmpfs (/dev/shm) when the machine has one (see MEMORY_FS)."""
    where = MEMORY_FS if in_memory and MEMORY_FS.is_dir() and os.access(MEMORY_FS, os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix=f"runner-bench-{name}-", dir=where))
    try:
        yield path
    finally:
        if os.environ.get("BENCH_KEEP") == "1":
            log(f"kept {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


# Where the comparisons that write many files keep their repositories (plan sizes, drains, and
# the drains' PostgreSQL). This VM's ext4 has no journal, and without one ext4 will not reuse an
# inode deleted in the last seconds (minutes while its table block is dirty): creating a file
# scans past every such inode. Under `perf`, 40% of a local drain's samples were there, and a
# loose object cost 0.1 ms in a fresh repository, 0.5-0.8 ms in one a drain had churned; the
# same drain's system time moved 5-9 s from run to run. A journalled ext4, APFS or NTFS does
# not do this, so disk figures here said more about this VM than about runner or its peers.
MEMORY_FS = Path("/dev/shm")


def filesystem_of(path: Path) -> str:
    return "tmpfs" if path.resolve().is_relative_to(MEMORY_FS) else "disk"


def step_id(i: int) -> str:
    return f"s{i:05d}"


def step_file(i: int, chains: int = 0) -> bytes:
    """A no-op step; with chains, step i depends on i-1 inside chains of that length."""
    deps = f"depends_on: [{step_id(i - 1)}]\n" if chains > 1 and i % chains else ""
    return (f'---\nstep: {step_id(i)}\ntitle: no-op {i}\nrun: ["true"]\n{deps}---\nNothing to do.\n').encode()


FANOUT_FROM = 256  # runner's rule (runner/core/layout.py): from this many steps, add/import fan out


def step_path(i: int, layout: str, steps: int = 0) -> str:
    """import: where `runner add`/`import` put a step in a plan of `steps` (256 fan-out folders
    named by a hash of the id from 256 steps on); flat: plans/steps/<id>.md (older runners,
    hand-written plans); sub: folders of 100."""
    if layout == "import" and steps >= FANOUT_FROM:
        return f"plans/steps/{hashlib.sha1(step_id(i).encode()).hexdigest()[:2]}/{step_id(i)}.md"
    if layout in ("import", "flat"):
        return f"plans/steps/{step_id(i)}.md"
    return f"plans/steps/g{i // 100:03d}/{step_id(i)}.md"


def new_project(path: Path, bare_remote: Path | None = None) -> Path:
    """A git repository with one commit on main; with bare_remote, a clone of a bare copy."""
    if bare_remote is None:
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", "main")
        git(path, "commit", "-q", "--allow-empty", "-m", "project")
        return path
    seed = new_project(path.parent / (path.name + "-seed"))
    git(path.parent, "clone", "-q", "--bare", str(seed), str(bare_remote))
    shutil.rmtree(seed)
    git(path.parent, "clone", "-q", str(bare_remote), str(path))
    return path


def queue_ref(repo: Path) -> str:
    """The queue branch as this repository sees it (a clone has only the remote-tracking ref)."""
    refs = git(
        repo, "for-each-ref", "--format=%(refname)", "refs/heads/runner/queue", "refs/remotes/origin/runner/queue"
    ).split()
    if not refs:
        raise RuntimeError(f"{repo}: no queue branch")
    return refs[0]


def commit_to_queue(repo: Path, files: dict[str, bytes], message: str) -> None:
    """One commit of `files` on top of the queue branch with git alone (fast-import), pushed
    when the queue lives on a remote: a plan laid out exactly so, as an older runner or a
    person editing the branch would leave it."""
    ref = queue_ref(repo)
    parent = git(repo, "rev-parse", ref).strip()
    out = [
        b"commit refs/heads/runner/queue\n",
        f"committer Bench <bench@example.com> {int(time.time())} +0000\n".encode(),
    ]
    msg = message.encode() + b"\n"
    out += [f"data {len(msg)}\n".encode(), msg, f"from {parent}\n".encode()]
    for path, data in files.items():
        out += [f"M 100644 inline {path}\ndata {len(data)}\n".encode(), data, b"\n"]
    git(repo, "fast-import", "--quiet", "--force", input=b"".join(out))
    if ref.startswith("refs/remotes/"):
        git(repo, "push", "-q", "origin", "refs/heads/runner/queue:refs/heads/runner/queue")
        git(repo, "update-ref", "-d", "refs/heads/runner/queue")


def gates_off(repo: Path) -> dict[str, bytes]:
    """runner.toml with gate detection off: a no-op step runs `true` and nothing else."""
    toml = git(repo, "show", f"{queue_ref(repo)}:runner.toml")
    if "detect = true" not in toml:
        raise RuntimeError("runner.toml has no `detect = true` to turn off")
    return {"runner.toml": toml.replace("detect = true", "detect = false").encode()}


def write_plan_folder(folder: Path, steps: int, chains: int = 0) -> Path:
    (folder / "steps").mkdir(parents=True)
    for i in range(steps):
        (folder / "steps" / f"{step_id(i)}.md").write_bytes(step_file(i, chains))
    return folder


def new_queue(base: Path, steps: int, remote: bool = False, chains: int = 0) -> tuple[Path, Path | None]:
    """(clone, bare remote or None) with a plan of no-op steps, made as a person would:
    `runner init`, gates off in runner.toml, `runner import` of a plan folder."""
    bare = base / "remote.git" if remote else None
    repo = new_project(base / "repo", bare)
    runner("init", repo=repo)
    commit_to_queue(repo, gates_off(repo), "bench: gates off")
    runner("import", write_plan_folder(base / "plan", steps, chains), repo=repo)
    return repo, bare


def new_layout_queue(base: Path, steps: int, layout: str) -> Path:
    """A local queue whose step files sit exactly in `layout` (flat or sub), written with git."""
    repo = new_project(base / "repo")
    runner("init", repo=repo)
    files = gates_off(repo)
    files.update({step_path(i, layout, steps): step_file(i) for i in range(steps)})
    commit_to_queue(repo, files, f"bench: {steps} steps, {layout} layout")
    return repo


def cold_copy(repo: Path, dest: Path) -> Path:
    """A copy of repo with no state of runner's: `.git/runner/` (parse cache, logs, locks) removed."""
    shutil.copytree(repo, dest, symlinks=True)
    shutil.rmtree(dest / ".git" / "runner", ignore_errors=True)
    return dest


def queue_events(repo: Path) -> list[dict[str, str]]:
    """Runner-* trailers of every queue commit, oldest first (plain git, for audits)."""
    fmt_ = "%(trailers:key=Runner-Event,key=Runner-Step,key=Runner-Attempt,key=Runner-Actor,separator=%x1f)%x1e"
    text = git(repo, "log", "--reverse", f"--format={fmt_}", queue_ref(repo))
    events = []
    for record in text.split("\x1e"):
        fields = dict(part.split(": ", 1) for part in record.strip().split("\x1f") if ": " in part)
        if fields:
            events.append({k.removeprefix("Runner-").lower(): v for k, v in fields.items()})
    return events


# --- the machine ---------------------------------------------------------------------------


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def runner_source() -> dict[str, Any]:
    """Where the runner under test is imported from, and the commit of that checkout.
    (Run from / : `python -c` would put the current directory first on sys.path.)"""
    code = "import runner, pathlib; print(pathlib.Path(runner.__file__).resolve().parent)"
    pkg = Path(run([RUNNER_PY, "-c", code], cwd=Path("/")).stdout.decode().strip())
    repo = pkg.parent
    head = run(["git", "rev-parse", "HEAD"], cwd=repo, check=False).stdout.decode().strip()
    dirty = run(["git", "status", "--porcelain", "--", pkg.name], cwd=repo, check=False).stdout.decode().split("\n")
    return {
        "package": str(pkg),
        "commit": head,
        "uncommitted_files": [d for d in dirty if d.strip()],
        "version": runner("--version").stdout.decode().strip(),
    }


_BYTECODE_CHECK = r"""
import importlib.util, json, os, pathlib, sys
import runner.cli
pkg = pathlib.Path(runner.__file__).parent
paths = {getattr(m, "__file__", None) or "": n for n, m in list(sys.modules.items())}
paths.update({str(p): str(p.relative_to(pkg.parent)) for p in pkg.rglob("*.py")})
stale, fresh = [], 0
for path, name in paths.items():
    if not path.endswith(".py"):
        continue
    cached = importlib.util.cache_from_source(path)
    if os.path.exists(cached) and os.path.getmtime(cached) >= os.path.getmtime(path):
        fresh += 1
    else:
        stale.append(name)
print(json.dumps({"modules": fresh + len(stale), "compiled": fresh, "not_compiled": stale[:20]}))
"""


def compile_bytecode() -> dict[str, Any]:
    """Compile runner's package as an install leaves it, then check every module `runner`
    imports has a fresh .pyc (the interpreter only rewrites them when it can)."""
    pkg = runner_source()["package"]
    run([RUNNER_PY, "-m", "compileall", "-q", pkg], check=False)
    return bytecode_status()


def bytecode_status() -> dict[str, Any]:
    out = run([RUNNER_PY, "-c", _BYTECODE_CHECK], cwd=Path("/"), check=False)
    if out.returncode:
        return {"error": out.stderr.decode(errors="replace")[-300:]}
    return json.loads(out.stdout)


def machine() -> dict[str, Any]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = None
    mem = None
    with contextlib.suppress(OSError):
        mem = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    info = {
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "memory_bytes": mem,
        "git": git(ROOT, "--version").strip(),
        "python": run([RUNNER_PY, "-c", "import sys; print(sys.version.split()[0])"]).stdout.decode().strip(),
        "platform": platform.platform(),
        "runner_exe": str(RUNNER),
    }
    try:
        info["runner"] = runner_source()
    except Exception as exc:  # runner cannot even start: every row will say so
        info["runner"] = {"error": error_text(exc)}
    return info


def main_for(topic_run: Callable[..., dict]) -> None:
    """`python bench/<topic>.py [--quick] [--peers] [--out FILE]`: one topic, its JSON."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--peers", action="store_true", help="install missing peers before measuring them")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    before, started = load(), time.monotonic()
    try:
        source = runner_source()  # per topic: runner may change under a long run
    except Exception as exc:
        source = {"error": error_text(exc)}
    result = topic_run(quick=args.quick, peers=args.peers)
    result.update(load_before=before, load_after=load(), seconds=time.monotonic() - started, runner=source)
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)


# --- runner in-process: the one place that calls runner's Python API --------------------


class InProcessClaimer:
    """Claims in one long-lived process, as a worker daemon does: no interpreter start-up
    or import in the time, only reading the plan, picking, building and publishing."""

    def __init__(self, repo: Path, worker: str):
        from runner.queue.leases import holder_info, new_incarnation
        from runner.queue.queue import open_queue

        self.queue = open_queue(repo)
        self.worker = worker
        self.incarnation = new_incarnation(worker)
        self.holder = holder_info(self.incarnation)

    def claim(self) -> float:
        start = time.perf_counter()
        self.queue.claim(self.worker, self.incarnation, self.holder)
        return time.perf_counter() - start


class InProcessTicker:
    """Ticks in one long-lived process, as a worker daemon does (without claiming ahead): claim,
    a worktree at the integration tip, the step's command, the record with its merge."""

    def __init__(self, repo: Path, worker: str):
        from runner.queue.queue import open_queue
        from runner.worker.tick import Worker

        self.worker = Worker(open_queue(repo), worker)

    def claim(self) -> float:  # the claimer protocol's one verb
        start = time.perf_counter()
        result = self.worker.tick()
        if result.sentinel != "STEP_COMPLETE":
            raise RuntimeError(f"the tick ended {result.sentinel}: {result.reason}")
        return time.perf_counter() - start


class InProcessLeakyTicker:
    """A tick whose step prints a full output tail and fails (a fault note with its stderr's last
    words), then the heartbeat that carries that tail, in one long-lived process; with
    `scrub=False` runner.core.secrets' scrubber is swapped for one that changes nothing."""

    def __init__(self, repo: Path, worker: str):
        from runner.queue.queue import open_queue
        from runner.worker.tick import Worker

        self.worker = Worker(open_queue(repo), worker)

    def tick(self, scrub: bool) -> float:
        from runner.core import secrets
        from runner.worker.livelog import LiveOutput

        real = secrets.for_config, secrets.Scrubber.scrub, secrets.added_lines_holding
        inside = [0.0]  # seconds spent in the scrubber's two ways in: scrub, and the read of a result's files

        def timing(function):
            def timed_call(*args, **kwargs):
                began = time.perf_counter()
                try:
                    return function(*args, **kwargs)
                finally:
                    inside[0] += time.perf_counter() - began

            return timed_call

        if scrub:
            secrets.Scrubber.scrub = timing(real[1])  # type: ignore[method-assign]
            secrets.added_lines_holding = timing(real[2])
        else:
            nothing = secrets.Scrubber({}, (), ())
            secrets.for_config = lambda section=None, environ=None: nothing  # type: ignore[assignment]
        try:
            start = time.perf_counter()
            result = self.worker.tick()
            if result.sentinel != "STEP_FAILED":
                raise RuntimeError(f"the tick ended {result.sentinel}: {result.reason}")
            log = self.worker.dirs["logs"] / "steps" / f"{result.step}-a{result.attempt}.log"
            self.worker.queue.beat(self.worker.id, {**self.worker.facts("running"), **LiveOutput(log).facts()})
            self.scrubbing = inside[0]
            return time.perf_counter() - start
        finally:
            secrets.for_config, secrets.Scrubber.scrub, secrets.added_lines_holding = real  # type: ignore[method-assign]
