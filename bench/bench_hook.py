"""What the server hook costs a push.

Two bare remotes with the same plan of --steps steps, one with the pre-receive
hook installed (`runner install-hooks --server`) and one without. Each round
builds the same kind of commit (a claim of a fresh step) for both and times
`git push` to each, alternating, so load on the machine hits both alike. The
hook's cost per pushed commit is the hooked push minus the plain one.

Also timed: the check alone, in process (PushCheck on the same update: no
interpreter start-up), and one push of --batch commits at once, to show the
cost per extra commit in a push.

    python bench/bench_hook.py [--steps 1000] [--pushes 30] [--batch 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.store.git import GitStore  # noqa: E402
from runner.hooks.server import PushCheck, install_server  # noqa: E402
from runner.queue.queue import Queue, new_step_file, signer_for  # noqa: E402
from runner.core.machine import Event  # noqa: E402

QUEUE = "refs/heads/runner/queue"


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def make_remote(base: Path, name: str, steps: int) -> tuple[Path, Queue]:
    bare = base / f"{name}.git"
    git(base, "init", "-q", "--bare", str(bare))
    clone = base / f"{name}-clone"
    git(base, "init", "-q", str(clone))
    git(clone, "remote", "add", "origin", str(bare))
    queue = Queue(GitStore(clone))
    queue.init("bench")
    files = dict(new_step_file(f"{n:05d}-step", f"Step {n}", {}, "Do the thing.\n") for n in range(steps))
    queue.add_files(files, f"add {steps} steps", "bench")
    return bare, queue


def claim_commits(queue: Queue, step_ids: list[str]) -> tuple[str, list[str]]:
    """(base, commits): one claim commit per step, each on the previous one."""
    snap = queue.snapshot()
    base = tip = snap.tip
    commits = []
    for step_id in step_ids:
        event = Event("claim", lease="1h", incarnation="bench.1", holder={"host": "bench"})
        change = queue.transition_change(snap, step_id, event, "bench")
        tip = queue.store.make_commit([tip], change.files, change.message, signer_for("bench"))
        commits.append(tip)
        snap = queue.snapshot_at(tip)
    return base, commits


def timed_push(queue: Queue, base: str, new: str) -> float:
    started = time.perf_counter()
    assert queue.store.push([(QUEUE, new, base)]), "lost a race nobody runs"
    return time.perf_counter() - started


def summary(seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"median {statistics.median(ms):7.1f} ms   p95 {p95:7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--pushes", type=int, default=30)
    parser.add_argument("--batch", type=int, default=20)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        plain_bare, plain = make_remote(base, "plain", args.steps)
        hooked_bare, hooked = make_remote(base, "hooked", args.steps)
        install_server(hooked_bare)

        plain_times, hooked_times, check_times = [], [], []
        for n in range(args.pushes):
            step_id = f"{n:05d}-step"
            (plain_base, (plain_commit,)) = claim_commits(plain, [step_id])
            (hooked_base, (hooked_commit,)) = claim_commits(hooked, [step_id])
            started = time.perf_counter()
            assert not PushCheck(hooked.store.git_dir).check([(hooked_base, hooked_commit, QUEUE)])
            check_times.append(time.perf_counter() - started)
            plain_times.append(timed_push(plain, plain_base, plain_commit))
            hooked_times.append(timed_push(hooked, hooked_base, hooked_commit))
        costs = [h - p for h, p in zip(hooked_times, plain_times)]

        batch_ids = [f"{n:05d}-step" for n in range(args.pushes, args.pushes + args.batch)]
        plain_base, plain_commits = claim_commits(plain, batch_ids)
        hooked_base, hooked_commits = claim_commits(hooked, batch_ids)
        plain_batch = timed_push(plain, plain_base, plain_commits[-1])
        hooked_batch = timed_push(hooked, hooked_base, hooked_commits[-1])

    print(f"server hook cost, {args.steps} steps in the plan, {args.pushes} single-commit pushes (claims) to a bare remote on a path")
    print(f"  push without the hook      {summary(plain_times)}")
    print(f"  push with the hook         {summary(hooked_times)}")
    print(f"  hook cost per commit       {summary(costs)}")
    print(f"  of which the check itself  {summary(check_times)}   (in process; the rest is starting Python)")
    extra = (hooked_batch - plain_batch) / args.batch
    print(f"  one push of {args.batch} commits: {plain_batch * 1000:.0f} ms without, {hooked_batch * 1000:.0f} ms with the hook"
          f" = {extra * 1000:.1f} ms per commit")


if __name__ == "__main__":
    main()
