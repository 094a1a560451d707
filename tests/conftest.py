"""Fixtures: real git repositories in temp dirs, real runner processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

os.environ.update(
    {
        "GIT_AUTHOR_NAME": "Test Person",
        "GIT_AUTHOR_EMAIL": "person@example.com",
        "GIT_COMMITTER_NAME": "Test Person",
        "GIT_COMMITTER_EMAIL": "person@example.com",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
)


ENV_PATH = {**os.environ, "PYTHONPATH": str(ROOT)}


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: three test processes a core. Most of a test's time is spent waiting on the
    processes it starts (git, runner, sshd, a browser), so one a core leaves the cores idle
    (measured on 2 cores: 5m53s with 2, 4m04s with 4, 3m53s with 6, the cores then busy)."""
    return min(3 * (os.cpu_count() or 1), 8)


@pytest.fixture(autouse=True, scope="session")
def private_cache(tmp_path_factory) -> None:
    """runner keeps its help in the user's cache folder: tests keep theirs to themselves."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))


def git(cwd: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout.strip()


def runner(repo: Path, *args: str, check: bool = True, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI in a fresh process, as a scheduler or a person would."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "runner", *args, "--repo", str(repo)],
        capture_output=True, text=True, timeout=timeout, env=full_env,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"runner {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def runner_json(repo: Path, *args: str, env: dict | None = None) -> dict:
    proc = runner(repo, *args, "--json", env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("demo project\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial")
    return path


def make_remote(tmp: Path, clones: int = 1) -> tuple[Path, list[Path]]:
    """A bare remote with a main branch and `clones` working clones."""
    seed = make_repo(tmp / "seed")
    bare = tmp / "remote.git"
    git(tmp, "clone", "-q", "--bare", str(seed), str(bare))
    paths = []
    for index in range(clones):
        clone = tmp / f"clone{index}"
        git(tmp, "clone", "-q", str(bare), str(clone))
        paths.append(clone)
    return bare, paths


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def queue_repo(repo: Path) -> Path:
    """A local repository (no remote) with an initialised queue, gates detection off."""
    runner(repo, "init")
    set_config(repo, detect=False)
    return repo


def set_config(repo: Path, extra: str = "", **values) -> None:
    """Edit runner.toml on the queue branch (a plan edit, as a person would commit it)."""
    from runner.core.config import DEFAULT_TOML

    text = DEFAULT_TOML
    replacements = {
        "detect": ("detect = true", "detect = {}"),
        "lease": ('lease = "1h"', 'lease = "{}"'),
        "max_attempts": ("max_attempts = 3", "max_attempts = {}"),
        "backoff": ('backoff = "30s"', 'backoff = "{}"'),
        "max_fix_attempts": ("max_fix_attempts = 2", "max_fix_attempts = {}"),
        "test": ("test = []", "test = {}"),
        "harness": ("[harness]\ncommand = []", "[harness]\ncommand = {}"),
        "requires_approval": ("requires_approval = false", "requires_approval = {}"),
        "grace_period": ('grace_period = "30s"', 'grace_period = "{}"'),
        "watch": ('watch = "2s"', 'watch = "{}"'),
        "step_budget": ('step_budget = "none"', 'step_budget = "{}"'),
        "score_plateau_window": ("score_plateau_window = 3", "score_plateau_window = {}"),
        "halt_on_verifier_fault": ("halt_on_verifier_fault = true", "halt_on_verifier_fault = {}"),
        "keep_worktree_on_failure": ("keep_worktree_on_failure = false", "keep_worktree_on_failure = {}"),
    }
    for key, value in values.items():
        if key == "verifier":
            extra += f"\n[roles.verify]\ncommand = {json.dumps(value)}\n"
            continue
        old, new = replacements[key]
        rendered = json.dumps(value) if not isinstance(value, str) or key in ("test", "harness") else value
        if isinstance(value, bool):
            rendered = "true" if value else "false"
        assert old in text, old
        text = text.replace(old, new.format(rendered))
    edit(repo, {"runner.toml": (text + extra).encode()}, "configure runner")


def edit(repo: Path, files: dict, summary: str = "edit the plan", remote: str | None = "auto") -> str:
    """A person's plan edit, committed and published as `runner add` would."""
    from runner.queue.queue import open_queue

    return open_queue(repo, remote=remote).edit(lambda snap: files, summary, "tester").commit


def step_file(step_id: str, title: str | None = None, body: str = "", **fields) -> tuple[str, bytes]:
    """(path, content) of a new step file; a step without `run:` gets a harmless one (run=None: none)."""
    from runner.core.layout import new_step_path
    from runner.core.stepfile import render_new_step

    fields.setdefault("run", ["true"])
    if fields["run"] is None:
        del fields["run"]
    return new_step_path(step_id, False), render_new_step(step_id, title or step_id, fields, body).encode()


def add_step(repo: Path, step_id: str, title: str | None = None, **fields) -> None:
    """Commit a step file straight onto the queue branch."""
    path, data = step_file(step_id, title, fields.pop("body", ""), **fields)
    edit(repo, {path: data}, f"add {step_id}")


def queue_moves(repo: Path, branch: str = "runner/queue") -> list[str]:
    """What each update of the queue branch in `repo` left at its tip, oldest first, from its
    reflog: "claim s1", "complete s2", ... (a bare remote keeps one with core.logAllRefUpdates)."""
    subjects = git(repo, "reflog", "show", "--format=%s", f"refs/heads/{branch}").splitlines()[::-1]
    return [subject.split(" (")[0] for subject in subjects]


def queue_history(repo: Path, branch: str = "runner/queue") -> list[dict]:
    """Every queue commit oldest first, with its trailers."""
    from runner.core.codec import trailers_of as parse_trailers

    out = git(repo, "log", "--reverse", "--format=%H%x00%B%x1e", branch)
    entries = []
    for record in out.split("\x1e"):
        record = record.strip()
        if not record:
            continue
        commit, _, message = record.partition("\x00")
        entries.append({"commit": commit, **parse_trailers(message)})
    return entries


# --- workers and ticks, as a scheduler or a person starts them -------------------------------

def tick(repo: Path, worker: str = "w1", env: dict | None = None) -> dict:
    proc = runner(repo, "tick", "--id", worker, "--json", env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def start_worker(repo: Path, worker: str, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "worker", "--id", worker, "--repo", str(repo), "--interval", "0.2", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**ENV_PATH, **(env or {})},
    )


def wait_for(predicate, timeout: float = 60, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out waiting")


def statuses(repo: Path) -> dict[str, str]:
    return {s["step"]: s["status"] for s in runner_json(repo, "status")["steps"]}


def write_step(path: str) -> list[str]:
    return ["sh", "-c", f'echo "$RUNNER_STEP attempt $RUNNER_ATTEMPT" > {path}']


# --- the pipeline's stub roles ------------------------------------------------------------------

STUB = [sys.executable, str(Path(__file__).parent / "stubs" / "role.py")]


def roles_toml(**roles: list[str]) -> str:
    """[roles.*] tables; the review always looks (min_files = 0) unless a test says otherwise."""
    text = ""
    for name, command in roles.items():
        text += f"\n[roles.{name}]\ncommand = {json.dumps(command)}\n" + ("min_files = 0\n" if name == "review" else "")
    return text


def handoff(repo: Path, step_id: str) -> str:
    return git(repo, "show", f"runner/queue:plans/handoffs/{step_id}.md")


WRITE = ["sh", "-c", 'echo "$1" >> out.txt', "sh", "{feedback}"]


# --- a served queue: a bare remote under runner's hook, people and worker keys (issue 32) ------

SERVED_WORKERS = {"w1": "key-1", "w2": "key-2", "w3": "key-3"}
SERVED_IDENTITIES = """
[hooks]
pusher_env = "RUNNER_PUSHER"
people = ["alice"]
admins = ["alice"]

[hooks.identities]
key-1 = ["w1"]
key-2 = ["w2"]
key-3 = ["w3"]
"""


def as_pusher(pusher: str, *args: str, repo: Path) -> subprocess.CompletedProcess:
    """The real CLI as `pusher` (a local push hands the pusher's environment to the hook)."""
    return runner(repo, *args, env={"RUNNER_PUSHER": pusher})


def served(tmp_path: Path, toml: bytes, steps: dict[str, dict]) -> tuple[Path, Path]:
    """A bare remote guarded by runner's hook (`install-hooks --server`), its queue set up by
    alice (an admin) with this runner.toml, identities for w1..w3, and these steps.
    (the remote, alice's clone)"""
    from runner.queue.queue import open_queue

    project = make_repo(tmp_path / "project")
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(project), str(bare))
    installed = subprocess.run([sys.executable, "-m", "runner", "install-hooks", "--server", str(bare)], cwd=tmp_path,
                               capture_output=True, text=True, env=ENV_PATH, timeout=120)
    assert installed.returncode == 0, installed.stderr
    alice = tmp_path / "alice"
    git(tmp_path, "clone", "-q", str(bare), str(alice))
    queue = open_queue(alice)
    queue.init("alice")
    files = {"runner.toml": toml + SERVED_IDENTITIES.encode()}
    for step_id, fields in steps.items():
        path, data = step_file(step_id, step_id, fields.get("body", ""), **{k: v for k, v in fields.items() if k != "body"})
        files[path] = data
    queue.edit(lambda snap: files, "the plan, people and worker keys", "alice")
    return bare, alice


def drain(bare: Path, tmp_path: Path, workers: dict[str, str] = SERVED_WORKERS) -> dict[str, str]:
    """Each worker, with its own clone and key, drains what it can (`runner worker --once`);
    what each printed. Every push must have been accepted by the hook."""
    procs = {}
    for worker, key in workers.items():
        clone = tmp_path / worker
        if not clone.exists():
            git(tmp_path, "clone", "-q", str(bare), str(clone))
        procs[worker] = start_worker(clone, worker, "--once", env={"RUNNER_PUSHER": key})
    said = {}
    for worker, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        said[worker] = out + err
        assert proc.returncode == 0, said
    assert not [w for w, text in said.items() if "refused" in text], said
    return said


def served_statuses(alice: Path) -> dict[str, str]:
    return {s["step"]: s["status"] for s in json.loads(as_pusher("alice", "status", "--json", repo=alice).stdout)["steps"]}


# --- queues on the in-memory store: policy tests that need no git (tests/test_store.py holds it to GitStore's contract) ---


def memory_queue(tmp_path: Path, steps: dict[str, dict] | None = None, config: str = ""):
    """An initialised queue on runner.store.memory.MemoryStore, with `steps` (id -> extra fields) added."""
    from runner.core.layout import new_step_path
    from runner.core.stepfile import render_new_step
    from runner.queue.queue import Queue
    from runner.store.memory import MemoryStore

    queue = Queue(MemoryStore(tmp_path))
    queue.init("alice", files={"runner.toml": config.encode()} if config else {})
    if steps:
        queue.edit(lambda snap: {new_step_path(sid, False): render_new_step(sid, sid, {"run": ["x"], **fields}, "").encode()
                                 for sid, fields in steps.items()}, "plan", "alice")
    return queue


def fresh(queue):
    """Another reader of the same queue (a fresh process's view): what it parsed is its own."""
    from runner.queue.queue import Queue

    return Queue(queue.store, branch=queue.branch)


# --- the review surface: a hooked remote with people and worker keys, clones, a board -------

BROWSER = "/usr/bin/chromium"
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
PEOPLE_ENV = {"RUNNER_PUSHER": "alice"}
WORKER_ENV = {"w1": {"RUNNER_PUSHER": "key-a"}, "w2": {"RUNNER_PUSHER": "key-b"}}


def review_remote(tmp: Path, steps: tuple = (), notify: list[str] | None = None, extra_toml: str = "", live_log: str = "0.2s") -> tuple[Path, Path]:
    """A bare remote under runner's hook with [hooks] identities (people alice and bob, worker
    keys key-a as w1 and key-b as w2), its queue made and `steps` ((id, fields) pairs) added by
    alice, with `notify` as its [notify] command and heartbeats that carry a running step's
    output every `live_log`; and alice's clone, where git's user.name is alice. The caller's process must push as
    alice: monkeypatch.setenv("RUNNER_PUSHER", "alice") first (a local push hands its
    environment to the hook, as a git host names its users)."""
    from hooked import IDENTITIES, add_steps, clone, hooked_remote
    from runner.core.config import DEFAULT_TOML

    assert os.environ.get("RUNNER_PUSHER") == "alice", "push as alice: monkeypatch.setenv('RUNNER_PUSHER', 'alice')"
    bare = hooked_remote(tmp / "remote.git")
    laptop = tmp / "laptop"
    queue = clone(bare, laptop)
    git(laptop, "config", "user.name", "alice")
    toml = DEFAULT_TOML.replace("detect = true", "detect = false").replace("[notify]\ncommand = []", f"[notify]\ncommand = {json.dumps(notify or [])}")
    toml = toml.replace('live_log = "5s"', f'live_log = "{live_log}"')
    queue.init("alice", files={"runner.toml": (toml + IDENTITIES + extra_toml).encode()})
    if steps:
        add_steps(queue, *[(step_id, dict(fields)) for step_id, fields in steps])
    return bare, laptop


def worker_clone(bare: Path, path: Path) -> Path:
    """Another machine's clone of the queue's remote, for a worker."""
    git(bare.parent, "clone", "-q", str(bare), str(path))
    return path


def start_board(repo: Path, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, str, Path]:
    """`runner board --port 0` on `repo` as its person would start it (from the clone, so
    git's user.name there names them); (the process, the address it printed, its stderr file)."""
    out, err = repo.parent / f"board-{os.getpid()}-{time.monotonic_ns()}.out", repo.parent / f"board-{time.monotonic_ns()}.err"
    proc = subprocess.Popen([sys.executable, "-m", "runner", "board", "--port", "0", "--every", "0.3", *args], cwd=repo,
                            stdout=open(out, "w"), stderr=open(err, "w"), env={**ENV_PATH, **PEOPLE_ENV, **(env or {})})

    def address():
        if proc.poll() is not None:
            raise AssertionError(f"runner board exited {proc.returncode}: {err.read_text()}")
        line = next((l for l in out.read_text().splitlines() if l.startswith("runner board")), None)
        return line.split(" on ", 1)[1].strip() if line else None

    return proc, wait_for(address, timeout=60, every=0.1), err


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
