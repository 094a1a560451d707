"""1. Claim latency, one worker, against the raw cost of git measured in the same run.

Transports: a bare remote on a path, and the same bare remote served by `git daemon`
on 127.0.0.1 (push enabled). For each, interleaved round by round in random order:

  floor      one no-op `git fetch` of the queue branch + one `git push` of a one-file
             commit (built beforehand, untimed) to a scratch branch of the same remote
  library    Queue.claim(...) in one long-lived process (what a `runner worker` pays)
  cli        `python -m runner claim --id W` end to end in a fresh process
  parts      Queue.fetch (runner's no-op fetch, incl. heartbeat refs), Queue.beat
             (the heartbeat push `runner claim` makes after claiming), and
             `python -m runner --version` (start-up floor of any CLI call)

Goal: library claim within 1.3x of the floor.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from common import (
    PY, clone, cli_env, fmt_ms, fmt_x, git, git_daemon, goal, log, main_for, make_queue, ratio, run_cli, stats, table,
    timed, workspace,
)

PLAN_STEPS = 200


class Floor:
    """Raw git: one no-op fetch + one push of a one-file commit, from the same clone runner uses."""

    def __init__(self, repo: Path, url: str, name: str):
        import pygit2

        self.repo_path = repo
        self.repo = pygit2.Repository(str(repo))
        self.url = url
        self.ref = f"refs/heads/bench/floor-{name}"
        self.tip = None
        self.counter = 0

    def _next_commit(self) -> str:
        import pygit2

        self.counter += 1
        blob = self.repo.create_blob(f"floor commit {self.counter}\n".encode())
        builder = self.repo.TreeBuilder()
        builder.insert("floor.txt", blob, pygit2.GIT_FILEMODE_BLOB)
        sig = pygit2.Signature("Bench", "bench@example.com")
        parents = [self.tip] if self.tip else []
        return str(self.repo.create_commit(None, sig, sig, f"floor {self.counter}\n", builder.write(), parents))

    def sample(self) -> tuple[float, float]:
        commit = self._next_commit()  # untimed: the floor is the network part
        fetch, _ = timed(
            git, self.repo_path, "fetch", "--quiet", "--no-write-fetch-head", "--no-tags", self.url,
            "+refs/heads/runner/queue:refs/remotes/origin/runner/queue",
        )
        push, _ = timed(git, self.repo_path, "push", "--quiet", "--no-verify", self.url, f"{commit}:{self.ref}")
        self.tip = commit
        return fetch, push


def measure_transport(name: str, repo: Path, url: str, rounds: int) -> dict[str, list[float]]:
    from runner.queue.leases import holder_info, new_incarnation
    from runner.queue.queue import open_queue

    git(repo, "remote", "set-url", "origin", url)
    queue = open_queue(repo)
    worker = f"lib-{name}"
    incarnation = new_incarnation(worker)
    holder = holder_info(incarnation)
    floor = Floor(repo, url, name)
    keys = ("floor_fetch", "floor_push", "floor", "library", "lib_fetch", "lib_push", "lib_lease", "lib_python", "cli", "runner_fetch", "beat", "startup")
    samples: dict[str, list[float]] = {k: [] for k in keys}
    spent = {"fetch": 0.0, "push": 0.0, "lease": 0.0}

    def clocked(name, func):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - start

        return wrapper

    queue.store.fetch = clocked("fetch", queue.store.fetch)  # instance attributes: only this queue is clocked
    queue.store.push = clocked("push", queue.store.push)
    queue.observer.expired_claims = clocked("lease", queue.observer.expired_claims)

    def do_floor():
        fetch, push = floor.sample()
        samples["floor_fetch"].append(fetch)
        samples["floor_push"].append(push)
        samples["floor"].append(fetch + push)

    def do_library():
        spent.update(fetch=0.0, push=0.0, lease=0.0)
        total = timed(queue.claim, worker, incarnation, holder)[0]
        samples["library"].append(total)
        samples["lib_fetch"].append(spent["fetch"])
        samples["lib_push"].append(spent["push"])
        samples["lib_lease"].append(spent["lease"])
        samples["lib_python"].append(total - spent["fetch"] - spent["push"] - spent["lease"])

    def do_cli():
        samples["cli"].append(run_cli(repo, "claim", "--id", f"cli-{name}")[0])

    def do_parts():
        spent.update(fetch=0.0, push=0.0)
        samples["runner_fetch"].append(timed(queue.fetch)[0])
        samples["beat"].append(timed(queue.beat, worker, {"step": None, "attempt": None, "incarnation": incarnation})[0])
        start = time.perf_counter()
        import subprocess

        subprocess.run([PY, "-m", "runner", "--version"], capture_output=True, env=cli_env(), check=True)
        samples["startup"].append(time.perf_counter() - start)

    actions = [do_floor, do_library, do_cli, do_parts]
    for action in actions:  # warm-up round, discarded: first parse of the plan, page cache, .pyc
        action()
    for key in samples:
        samples[key].clear()
    for i in range(rounds):
        random.shuffle(actions)
        for action in actions:
            action()
    return samples


def run(quick: bool = False) -> dict:
    rounds = 6 if quick else 25
    results: dict[str, dict] = {}
    with workspace("claim") as base:
        log(f"claim latency: plan of {PLAN_STEPS} steps, {rounds} interleaved rounds per transport")
        repo, bare = make_queue(base, PLAN_STEPS, remote=True)
        with git_daemon(base) as daemon_url:
            transports = {"path": str(bare), "git-daemon": daemon_url + bare.name}
            for name, url in transports.items():
                clone_dir = clone(str(bare), base / f"clone-{name}")
                log(f"  transport {name}: {url}")
                raw = measure_transport(name, clone_dir, url, rounds)
                results[name] = {key: stats(values) for key, values in raw.items()}
                results[name]["samples"] = raw

    rows = []
    goals = []
    for name, res in results.items():
        floor = res["floor"]["median"]
        for key, label in (
            ("floor_fetch", "floor: git fetch (no-op)"),
            ("floor_push", "floor: git push (1-file commit)"),
            ("floor", "FLOOR = fetch + push"),
            ("library", "Queue.claim (in-process)"),
            ("lib_fetch", "  of which: git fetch inside claim"),
            ("lib_push", "  of which: git push inside claim"),
            ("lib_lease", "  of which: lease check of others' claims"),
            ("lib_python", "  of which: the rest (read plan, build commit)"),
            ("cli", "`runner claim` (fresh process)"),
            ("runner_fetch", "  part: Queue.fetch (no-op)"),
            ("beat", "  part: Queue.beat (heartbeat push)"),
            ("startup", "  part: `runner --version` start-up"),
        ):
            s = res[key]
            rows.append([name, label, s["n"], fmt_ms(s["median"]), fmt_ms(s["p95"]), fmt_x(ratio(s["median"], floor))])
        lib_ratio = ratio(res["library"]["median"], floor)
        goals.append(
            goal(
                f"claim in-process within 1.3x of floor ({name})",
                fmt_x(lib_ratio),
                "<= 1.30x",
                lib_ratio is not None and lib_ratio <= 1.3,
                f"Queue.claim {fmt_ms(res['library']['median'])} ms vs floor {fmt_ms(floor)} ms (median)",
            )
        )
    return {
        "topic": "claim_latency",
        "params": {"plan_steps": PLAN_STEPS, "rounds": rounds},
        "data": results,
        "tables": [
            table(
                "1. Claim latency, one worker (ms; ratio = median / floor median of the same transport)",
                ["transport", "what", "n", "median ms", "p95 ms", "x floor"],
                rows,
                "floor = one no-op `git fetch` + one `git push` of a one-file commit, same clone, same remote, interleaved.",
            )
        ],
        "goals": goals,
    }


if __name__ == "__main__":
    main_for(run)
