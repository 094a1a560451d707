"""A cluster of real `runner worker` processes around one git remote, with faults.

A Cluster owns: a bare remote (with core.logAllRefUpdates=always so the checker can
prove nothing was rewritten), an admin clone that writes the plan, one clone per host,
and worker processes (`python -m runner worker --id host-N ...`) that a supervisor
restarts when they die (same id, new incarnation), like systemd's Restart=always.

Transports, i.e. how the hosts reach the remote:
  path     the bare repository's path (the quickest: no network at all)
  daemon   `git daemon --enable=receive-pack` on 127.0.0.1, one listener per host, so
           one host can be cut off by stopping its listener ("stop the server")
  netns    one git daemon in a server network namespace, each host in its own namespace
           joined by a veth pair (see netns.py); a cut drops the host's veth

Every start, kill, exit and partition is written to `events` with the wall time, and
the remote logs when each ref update landed (checker.REF_TIMES_HOOK), so the checker
can judge each takeover by the holder's heartbeats and tell who was dead or cut off.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import pygit2

from chaos import checker
from chaos.netns import Lab

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
QUEUE = "runner/queue"
INTEGRATION = "runner/integration"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Chaos Harness",
    "GIT_AUTHOR_EMAIL": "chaos@example.com",
    "GIT_COMMITTER_NAME": "Chaos Harness",
    "GIT_COMMITTER_EMAIL": "chaos@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}

# Each step appends "STEP ATTEMPT WORKER WORKER_PID TIME" to the shared execution log
# (outside every worktree, so the checker can count runs), optionally sleeps, then
# changes a file of its own in the worktree (idempotent per (step, attempt)).
STEP_SCRIPT = (
    'printf "%s %s %s %s %s\\n" "$RUNNER_STEP" "$RUNNER_ATTEMPT" "$RUNNER_WORKER" "$PPID" "$(date +%s.%N)" >> "$1"; '
    'if [ "$2" != 0 ]; then sleep "$2"; fi; '
    'echo "$RUNNER_STEP-$RUNNER_ATTEMPT" >> "$RUNNER_STEP.out"'
)


def git(cwd: Path | str, *args: str, check: bool = True, prefix: list[str] | None = None, timeout: float = 120) -> str:
    proc = subprocess.run(
        [*(prefix or []), "git", *args],
        cwd=str(cwd),
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def runner_cli(
    repo: Path,
    *args: str,
    check: bool = True,
    timeout: float = 120,
    prefix: list[str] | None = None,
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [*(prefix or []), PY, "-m", "runner", *args, "--repo", str(repo)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **GIT_ENV, "PYTHONPATH": str(ROOT), **(env or {})},
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"runner {' '.join(args)} exited {proc.returncode}: {proc.stdout}\n{proc.stderr}")
    return proc


GIT_SHIM = """#!/bin/sh
# git for one worker, except that `git VERB` (fetch or push) fails while the blip file says so:
#   "count N VERB [REF]"  the next N of them fail (with REF: only those naming REF, e.g. a record's push)
#   "until T VERB"        all of them fail until epoch second T
#   "sleep S VERB"        the next one waits S seconds first (a slow network)
blip="@BLIP@"
for arg in "$@"; do
    case "$arg" in fetch|push) ;; *) continue ;; esac
    if [ -s "$blip" ]; then
        read kind value verb ref < "$blip"
        if [ -n "$ref" ]; then
            case "$*" in *"$ref"*) ;; *) break ;; esac
        fi
        if [ "$verb" = "$arg" ]; then
            if [ "$kind" = count ] && [ "$value" -gt 0 ]; then
                echo "count $((value - 1)) $verb $ref" > "$blip"
                echo "fatal: unable to access the remote: simulated network blip" >&2
                exit 128
            fi
            if [ "$kind" = until ] && [ "$(date +%s)" -lt "$value" ]; then
                echo "fatal: unable to access the remote: simulated network outage" >&2
                exit 128
            fi
            if [ "$kind" = sleep ]; then
                : > "$blip"
                sleep "$value"
            fi
        fi
    fi
    break
done
exec @GIT@ "$@"
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- leases that fit the machine ------------------------------------------------------------

# One heartbeat's git round trip (a commit, a push, a fetch) on the machine the base leases were
# chosen on: 2 cores, otherwise idle. A slower or busier machine gets proportionally longer leases.
REFERENCE_ROUND_TRIP_S = 0.03


def heartbeat_round_trip(rounds: int = 7) -> float:
    """The median time of a heartbeat's git round trip on this machine, now."""
    import statistics
    import tempfile

    with tempfile.TemporaryDirectory(prefix="chaos-probe-") as tmp:
        git(tmp, "init", "-q", "--bare", "remote.git")
        git(tmp, "init", "-q", "clone")
        clone = Path(tmp) / "clone"
        empty = git(clone, "hash-object", "-t", "tree", "-w", "/dev/null")
        previous: list[str] = []
        times = []
        for n in range(rounds):
            started = time.perf_counter()
            commit = git(clone, "commit-tree", empty, "-m", f"beat {n}", *previous)
            git(clone, "push", "-q", "../remote.git", f"{commit}:refs/runner/heartbeats/probe")
            git(clone, "fetch", "-q", "../remote.git", "+refs/runner/heartbeats/*:refs/probe/*")
            times.append(time.perf_counter() - started)
            previous = ["-p", commit]
    return statistics.median(times)


_SCALE: dict[str, float] = {}


def machine_scale() -> dict[str, float]:
    """How much longer than the base leases this machine needs: RUNNER_CHAOS_LEASE_SCALE, or
    the measured round trip over the reference one, times 2 / cores below 2 cores (at least 1)."""
    if not _SCALE:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        trip = heartbeat_round_trip()
        forced = os.environ.get("RUNNER_CHAOS_LEASE_SCALE")
        scale = float(forced) if forced else min(10.0, max(1.0, trip / REFERENCE_ROUND_TRIP_S) * max(1.0, 2 / cores))
        _SCALE.update(scale=round(scale, 2), round_trip_s=trip, cores=cores, forced=bool(forced))
    return _SCALE


def scaled_lease(base_s: float) -> str:
    """A lease of `base_s` seconds on the reference machine, for this one (whole seconds)."""
    return f"{math.ceil(base_s * machine_scale()['scale'])}s"


# --- plans -----------------------------------------------------------------------------


@dataclass
class StepSpec:
    id: str
    depends_on: list[str] = field(default_factory=list)
    sleep: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    script: str | None = None  # instead of STEP_SCRIPT; gets the same $1 (execution log) and $2 (sleep)


def make_plan(
    count: int,
    seed: int,
    max_deps: int = 2,
    window: int = 20,
    slow_every: int = 0,
    slow_s: float = 1.0,
    prefix: str = "s",
) -> list[StepSpec]:
    """A DAG of `count` steps: each depends on up to `max_deps` of the `window` steps before it."""
    rng = random.Random(seed)
    width = len(str(count))
    steps = []
    for index in range(count):
        sid = f"{prefix}{index:0{width}d}"
        pool = [s.id for s in steps[max(0, index - window) : index]]
        deps = sorted(rng.sample(pool, rng.randint(0, min(max_deps, len(pool))))) if pool else []
        sleep = slow_s if slow_every and index % slow_every == slow_every - 1 else 0.0
        steps.append(StepSpec(sid, deps, sleep))
    return steps


def render_step(spec: StepSpec, exec_log: Path) -> bytes:
    run = ["sh", "-c", spec.script or STEP_SCRIPT, "sh", str(exec_log), f"{spec.sleep:g}"]
    lines = [
        "---",
        f"step: {spec.id}",
        f"title: {json.dumps('Chaos step ' + spec.id)}",
        f"depends_on: {json.dumps(spec.depends_on)}",
        f"run: {json.dumps(run)}",
    ]
    lines += [f"{key}: {json.dumps(value)}" for key, value in spec.extra.items()]
    return ("\n".join(lines) + "\n---\n## Changes Required\nAppend one line to the step's own file.\n").encode()


def runner_toml(
    lease: str = "1h", max_attempts: int = 10, backoff: str = "0s", grace: str = "2s", keep_step_branches: bool = False
) -> bytes:
    queue = "[queue]\nprune_merged_step_branches = false\n\n" if keep_step_branches else ""
    return (
        "# runner configuration for a chaos run\n\n"
        f"{queue}"
        "[leases]\n"
        f'lease = "{lease}"\n'
        f"max_attempts = {max_attempts}\n"
        f'backoff = "{backoff}"\n'
        'backoff_cap = "1m"\n\n'
        "[gates]\n"
        "detect = false\n\n"
        "[brakes]\n"
        "max_fix_attempts = 0\n\n"
        "[worker]\n"
        f'grace_period = "{grace}"\n'
        'min_free_memory = "1MiB"\n'
        'min_free_disk = "1MiB"\n'
    ).encode()


# --- git daemon ----------------------------------------------------------------------


class GitDaemon:
    """`git daemon --enable=receive-pack` serving the remote's folder."""

    def __init__(self, base_path: Path, listen: list[str], port: int, log: Path, prefix: list[str] | None = None):
        self.base_path = base_path
        self.listen = listen
        self.port = port
        self.log = log
        self.prefix = prefix or []
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        argv = [
            *self.prefix,
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--enable=receive-pack",
            "--informative-errors",
            f"--base-path={self.base_path}",
            f"--port={self.port}",
            *[f"--listen={a}" for a in self.listen],
        ]
        with open(self.log, "a") as log:  # the daemon appends to its own copy of the descriptor
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, env={**os.environ, **GIT_ENV})

    def wait_ready(self, url: str, prefix: list[str] | None = None, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while True:
            proc = subprocess.run(
                [*(prefix or []), "git", "ls-remote", url],
                capture_output=True,
                text=True,
                env={**os.environ, **GIT_ENV},
                timeout=30,
            )
            if proc.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"git daemon at {url} did not answer: {proc.stderr.strip()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop listening. Connections in flight finish: a killed receive-pack could leave a
        stale ref lock on the remote, which is git's problem, not the one under test."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


# --- hosts and workers -------------------------------------------------------------------


@dataclass
class Host:
    name: str
    index: int
    clone: Path
    url: str
    prefix: list[str] = field(default_factory=list)  # `ip netns exec NS` for namespaced hosts
    daemon: GitDaemon | None = None  # per-host listener (transport "daemon")
    cut: bool = False


@dataclass
class Slot:
    id: str
    host: Host
    tags: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # every incarnation
    first_envs: list[dict[str, str]] = field(default_factory=list)  # env of incarnation 1, 2, ... then `env` alone
    proc: subprocess.Popen | None = None
    starts: int = 0
    want: bool = True
    died_at: float = 0.0
    pids: list[int] = field(default_factory=list)


class Cluster:
    def __init__(
        self,
        base: Path,
        hosts: int,
        workers_per_host: int = 1,
        transport: str = "path",
        lease: str = "1h",
        max_attempts: int = 10,
        backoff: str = "0s",
        interval: float = 0.2,
        restart_delay: float = 0.3,
        lab: Lab | None = None,
        json_out: bool = False,
    ):
        self.base = base
        self.json_out = json_out
        self.lease_s = checker.seconds(lease)
        self.transport = transport
        self.lease = lease
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.interval = interval
        self.restart_delay = restart_delay
        self.lab = lab
        self.events: list[dict[str, Any]] = []
        self.unexpected_exits: list[dict[str, Any]] = []  # workers that died on their own: {worker, pid, rc, stderr}
        self.tip_samples: list[tuple[float, str, str]] = []
        self.slots: list[Slot] = []
        self.hosts: list[Host] = []
        self.lock = threading.RLock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.server_daemon: GitDaemon | None = None
        self.logs = base / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.exec_log = base / "exec.log"
        self.exec_log.touch()
        self.steps: list[StepSpec] = []
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self._make_remote()
        self._make_hosts(hosts)
        self.workers_per_host = workers_per_host
        for host in self.hosts:
            for n in range(workers_per_host):
                wid = host.name if workers_per_host == 1 else f"{host.name}-w{n + 1}"
                self.slots.append(Slot(wid, host))

    # -- set-up --

    def _make_remote(self) -> None:
        seed = self.base / "seed"
        seed.mkdir()
        git(seed, "init", "-q", "-b", "main")
        (seed / "README.md").write_text("chaos project\n")
        git(seed, "add", "README.md")
        git(seed, "commit", "-q", "-m", "initial")
        self.srv = self.base / "srv"
        self.srv.mkdir()
        self.bare = self.srv / "remote.git"
        git(self.base, "clone", "-q", "--bare", str(seed), str(self.bare))
        git(
            self.bare, "config", "core.logAllRefUpdates", "always"
        )  # the checker proves every update was a fast-forward
        hook = self.bare / "hooks" / "reference-transaction"  # and judges takeovers by when heartbeats landed
        hook.write_text(checker.REF_TIMES_HOOK.replace("@LOG@", checker.REF_TIMES))
        hook.chmod(0o755)
        git(self.bare, "config", "daemon.receivepack", "true")
        self.admin = self.base / "admin"
        git(self.base, "clone", "-q", str(self.bare), str(self.admin))
        runner_cli(self.admin, "init")

    def _make_hosts(self, count: int) -> None:
        if self.transport == "netns":
            assert self.lab is not None
            listen = [self.lab.server_addr(i) for i in range(1, count + 1)]
            self.server_daemon = GitDaemon(
                self.srv, listen, 9418, self.logs / "git-daemon.log", self.lab.exec_prefix(self.lab.server)
            )
            self.server_daemon.start()
        for index in range(1, count + 1):
            name = f"host-{index}"
            clone = self.base / name
            git(self.base, "clone", "-q", str(self.bare), str(clone))
            prefix: list[str] = []
            daemon = None
            if self.transport == "path":
                url = str(self.bare)
            elif self.transport == "daemon":
                port = free_port()
                daemon = GitDaemon(self.srv, ["127.0.0.1"], port, self.logs / f"git-daemon-{name}.log")
                daemon.start()
                url = f"git://127.0.0.1:{port}/remote.git"
                daemon.wait_ready(url)
            elif self.transport == "netns":
                prefix = self.lab.exec_prefix(self.lab.ns(index))
                url = f"git://{self.lab.server_addr(index)}/remote.git"
                self.server_daemon.wait_ready(url, prefix)
            else:
                raise ValueError(self.transport)
            git(clone, "remote", "set-url", "origin", url)
            self.hosts.append(Host(name, index, clone, url, prefix, daemon))

    def commit_files(self, files: dict[str, bytes | tuple[str, str]], message: str) -> None:
        """Commit files onto the queue branch as a person would (a checkout, `git commit`, `git push`).
        A value ("symlink", target) makes a symbolic link."""
        git(self.admin, "fetch", "-q", "origin", f"+refs/heads/{QUEUE}:refs/remotes/origin/{QUEUE}")
        tree = self.base / "edit"
        git(self.admin, "worktree", "add", "-q", "--detach", str(tree), f"origin/{QUEUE}")
        try:
            for path, data in files.items():
                target = tree / path
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(data, tuple):
                    os.symlink(data[1], target)
                else:
                    target.write_bytes(data)
            git(tree, "add", "-A")
            git(tree, "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "-m", message)
            git(tree, "push", "-q", "--no-verify", "origin", f"HEAD:refs/heads/{QUEUE}")
        finally:
            git(self.admin, "worktree", "remove", "--force", str(tree), check=False)

    def configure(self, **kwargs) -> None:
        self.commit_files(
            {
                "runner.toml": runner_toml(
                    lease=self.lease, max_attempts=self.max_attempts, backoff=self.backoff, **kwargs
                )
            },
            "configure runner for a chaos run",
        )

    def add_plan(self, steps: list[StepSpec], extra_files: dict[str, bytes | tuple[str, str]] | None = None) -> None:
        self.steps += steps
        files: dict[str, bytes | tuple[str, str]] = {
            f"plans/steps/{s.id}.md": render_step(s, self.exec_log) for s in steps
        }
        files.update(extra_files or {})
        self.commit_files(files, f"add a plan of {len(steps)} steps")

    # -- workers --

    def add_worker(self, host: Host, wid: str, **kwargs) -> Slot:
        slot = Slot(wid, host, **kwargs)
        with self.lock:
            self.slots.append(slot)
        return slot

    def slot(self, wid: str) -> Slot:
        return next(s for s in self.slots if s.id == wid)

    def _spawn(self, slot: Slot) -> None:
        n = slot.starts
        env = {**os.environ, **GIT_ENV, "PYTHONPATH": str(ROOT), "RUNNER_HOST": slot.host.name, **slot.env}
        for key in ("RUNNER_CRASH_AT", "RUNNER_CLOCK_OFFSET"):
            if key not in slot.env:
                env.pop(key, None)
        if n < len(slot.first_envs):
            env.update(slot.first_envs[n])
        argv = [
            *slot.host.prefix,
            PY,
            "-m",
            "runner",
            "worker",
            "--id",
            slot.id,
            "--repo",
            str(slot.host.clone),
            "--interval",
            str(self.interval),
            "--grace",
            "2",
            *[a for t in slot.tags for a in ("--tag", t)],
            *(["--json"] if self.json_out else []),
        ]
        with (
            open(self.logs / f"{slot.id}.{n + 1}.out", "w") as out,
            open(self.logs / f"{slot.id}.{n + 1}.err", "w") as err,
        ):
            slot.proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env)
        slot.starts += 1
        slot.pids.append(slot.proc.pid)
        self.event(
            "start",
            worker=slot.id,
            pid=slot.proc.pid,
            host=slot.host.name,
            incarnation_no=slot.starts,
            crash_at=env.get("RUNNER_CRASH_AT"),
            clock_offset=env.get("RUNNER_CLOCK_OFFSET"),
        )

    def event(self, kind: str, **info) -> dict[str, Any]:
        entry = {"t": time.time(), "kind": kind, **info}
        with self.lock:
            self.events.append(entry)
        return entry

    def start(self) -> None:
        self.started_at = time.time()
        with self.lock:
            for slot in self.slots:
                if slot.want and slot.proc is None:
                    self._spawn(slot)
        for target in (self._supervise, self._sample_tips):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _supervise(self) -> None:
        while not self._stop.is_set():
            with self.lock:
                for slot in self.slots:
                    proc = slot.proc
                    if proc is not None and proc.poll() is not None:
                        rc = proc.returncode
                        killed_by_us = any(e.get("kind") == "kill" and e.get("pid") == proc.pid for e in self.events)
                        if rc == -signal.SIGKILL and not killed_by_us:
                            self.event(
                                "kill",
                                worker=slot.id,
                                pid=proc.pid,
                                how="crash point (self SIGKILL)",
                                host=slot.host.name,
                            )
                        elif not killed_by_us:
                            self.event("exit", worker=slot.id, pid=proc.pid, rc=rc, host=slot.host.name)
                            if rc != 0 and not (
                                rc == -signal.SIGTERM and not slot.want
                            ):  # SIGTERMed by stop() before its handler was up
                                stderr = (self.logs / f"{slot.id}.{slot.starts}.err").read_text(errors="replace")
                                self.unexpected_exits.append(
                                    {"worker": slot.id, "pid": proc.pid, "rc": rc, "stderr": stderr}
                                )
                        slot.proc = None
                        slot.died_at = time.monotonic()
                    if slot.proc is None and slot.want and time.monotonic() - slot.died_at >= self.restart_delay:
                        self._spawn(slot)
            self._stop.wait(0.05)

    def _sample_tips(self) -> None:
        last: dict[str, str] = {}
        while not self._stop.is_set():
            try:
                repo = pygit2.Repository(str(self.bare))
                for ref in (f"refs/heads/{QUEUE}", f"refs/heads/{INTEGRATION}"):
                    target = repo.references.get(ref)
                    if target is not None and last.get(ref) != str(target.target):
                        last[ref] = str(target.target)
                        self.tip_samples.append((time.time(), ref, last[ref]))
            except pygit2.GitError:
                pass
            self._stop.wait(0.2)

    def kill(self, slot: Slot, how: str = "harness SIGKILL") -> int | None:
        with self.lock:
            proc = slot.proc
            if proc is None or proc.poll() is not None:
                return None
            self.event("kill", worker=slot.id, pid=proc.pid, how=how, host=slot.host.name)
            proc.send_signal(signal.SIGKILL)
            return proc.pid

    def stop_worker(self, slot: Slot) -> None:
        """SIGTERM and no restart."""
        with self.lock:
            slot.want = False
            proc = slot.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    def resume_worker(self, slot: Slot) -> None:
        with self.lock:
            slot.want = True

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM every worker (no restarts), wait, SIGKILL stragglers."""
        self.finished_at = self.finished_at or time.time()
        with self.lock:
            for slot in self.slots:
                slot.want = False
                if slot.proc is not None and slot.proc.poll() is None:
                    slot.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for slot in self.slots:
            proc = slot.proc
            if proc is None:
                continue
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.event("kill", worker=slot.id, pid=proc.pid, how="did not stop on SIGTERM", host=slot.host.name)
                self.unexpected_exits.append(
                    {
                        "worker": slot.id,
                        "pid": proc.pid,
                        "rc": None,
                        "stderr": f"did not stop within {timeout}s of SIGTERM",
                    }
                )
                proc.kill()
                proc.wait()
        time.sleep(0.2)  # let the supervisor see the exits
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        for slot in self.slots:
            if (
                slot.proc is not None
                and slot.proc.poll() is not None
                and slot.proc.returncode not in (0, -signal.SIGTERM)  # -15: stopped before its handler was installed
                and not any(e.get("pid") == slot.proc.pid and e["kind"] in ("kill", "exit") for e in self.events)
            ):
                self.event("exit", worker=slot.id, pid=slot.proc.pid, rc=slot.proc.returncode, host=slot.host.name)
                stderr = (self.logs / f"{slot.id}.{slot.starts}.err").read_text(errors="replace")
                self.unexpected_exits.append(
                    {
                        "worker": slot.id,
                        "pid": slot.proc.pid,
                        "rc": slot.proc.returncode,
                        "stderr": "on SIGTERM: " + stderr,
                    }
                )

    def close(self) -> None:
        """Tear everything down (idempotent; safe after a failure)."""
        try:
            if not self._stop.is_set():
                self.stop(timeout=10)
        finally:
            for host in self.hosts:
                if host.daemon:
                    host.daemon.stop()
            if self.server_daemon:
                self.server_daemon.stop()
            self._kill_orphans()

    def _kill_orphans(self) -> None:
        """Steps of SIGKILLed workers keep running in their own session; end the ones we started."""
        import psutil

        marker = str(self.exec_log)
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                if marker in (proc.info["cmdline"] or []):
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass

    # -- faults on the network --

    def git_shim(self, slot: Slot) -> Path:
        """Put a git in front of this worker's PATH whose fetches and pushes obey a blip file (see
        GIT_SHIM); returns the blip file's path."""
        shim = self.base / f"git-shim-{slot.id}"
        shim.mkdir()
        blip = shim / "blip"
        (shim / "git").write_text(
            GIT_SHIM.replace("@BLIP@", str(blip)).replace("@GIT@", shutil.which("git") or "/usr/bin/git")
        )
        (shim / "git").chmod(0o755)
        slot.env["PATH"] = f"{shim}:{os.environ.get('PATH', '')}"
        return blip

    def partition(self, host: Host) -> None:
        if self.transport == "netns":
            self.lab.cut(host.index)
        elif self.transport == "daemon":
            host.daemon.stop()
        else:
            raise ValueError("the path transport has no network to cut; use transport='daemon' or 'netns'")
        host.cut = True
        self.event("partition", host=host.name, how="veth down" if self.transport == "netns" else "git daemon stopped")

    def heal(self, host: Host) -> None:
        if self.transport == "netns":
            self.lab.heal(host.index)
        else:
            host.daemon.start()
            host.daemon.wait_ready(host.url)
        host.cut = False
        self.event("heal", host=host.name)

    # -- observing --

    def plan_state(self) -> dict[str, dict[str, Any]]:
        return checker.read_plan(self.bare, QUEUE)

    def terminal(self) -> tuple[bool, dict[str, str]]:
        ids = {s.id for s in self.steps}
        states = checker.terminal_state(self.plan_state(), ids)
        return all(v in ("done", "failed", "blocked") for v in states.values()), states

    def wait_drained(
        self, timeout: float, poll: float = 0.5, stuck: Callable[[], bool] | None = None, stuck_for: float | None = None
    ) -> bool:
        """Wait until every step is done, failed or blocked. Give up early when `stuck()` has held
        for `stuck_for` seconds in a row (nothing more can happen; default: 30 s + 4 leases)."""
        stuck_for = stuck_for if stuck_for is not None else 30 + 4 * self.lease_s
        deadline = time.monotonic() + timeout
        stuck_since = None
        while time.monotonic() < deadline:
            finished, _ = self.terminal()
            if finished:
                self.finished_at = time.time()
                return True
            if stuck is not None and stuck():
                stuck_since = stuck_since or time.monotonic()
                if time.monotonic() - stuck_since > stuck_for:
                    return False
            else:
                stuck_since = None
            time.sleep(poll)
        return False

    def exec_runs(self) -> list[dict[str, Any]]:
        return checker.read_exec_log(self.exec_log)

    def wait_for(
        self, predicate: Callable[[], Any], timeout: float, every: float = 0.2, what: str = "condition"
    ) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(every)
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}")

    def worker_logs(self) -> list[Path]:
        found = []
        for host in self.hosts:
            found += sorted((host.clone / ".git" / "runner" / "logs").glob("worker-*.log"))
        return found

    def inputs(self, name: str, **overrides) -> checker.RunInputs:
        duration = (self.finished_at or time.time()) - (self.started_at or time.time())
        return checker.RunInputs(
            repo=self.bare,
            name=name,
            exec_log=self.exec_log,
            worker_logs=self.worker_logs(),
            events=list(self.events),
            tip_samples=list(self.tip_samples),
            expected_steps={s.id: list(s.depends_on) for s in self.steps},
            duration_s=duration,
            workers=len(self.slots),
            **overrides,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
