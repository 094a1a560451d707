"""A claim against git's floor: the compare-and-swap publish git itself does, on the same bare
remote (issue 35, points 1 and 3).

One bare remote holding a plan of 200 no-op steps (every one ready), reached by path, and three
clones of it. Interleaved round by round:
  git        git's own compare-and-swap publish of the queue branch, one process after another
             as a shell runs them: fetch it, edit one line of a file (not a step), commit,
             push (refused unless it is a fast-forward). What any claim must at least do.
  fresh      `runner claim --id W` as a fresh process: start-up, imports, the plan read (from
             its cache), the claim's commit and push. Goal <= 2.0x git.
  in-process one claim in a long-lived process (bench/claimer.py), as a worker daemon claims:
             fetch, read, pick, build, publish. Goal <= 1.3x git.

    python bench/floor.py [--quick]       (also run by bench/run.py)
"""

from __future__ import annotations

from pathlib import Path

from claim_scale import Claimer
from common import RUNNER, column, error_text, figure, git, interleave, judged_ratio, log, main_for, new_queue, summary, timed, workspace

STEPS = 200

GIT_CAS = """set -e
git fetch -q origin runner/queue
git checkout -q -B runner/queue FETCH_HEAD
echo "$RANDOM $RANDOM" > floor.txt
git commit -q -a -m 'edit one line'
git push -q origin runner/queue
"""


def git_clone_on_queue(bare: Path, path: Path) -> Path:
    """A plain clone with the queue branch checked out and one tracked file to edit."""
    git(bare.parent, "clone", "-q", "--branch", "runner/queue", str(bare), str(path))
    (path / "floor.txt").write_text("0\n")
    git(path, "add", "floor.txt")
    git(path, "commit", "-q", "-m", "a file git's own publish edits")
    git(path, "push", "-q", "origin", "runner/queue")
    return path


def measure(quick: bool = False, peers: bool = False) -> dict:
    rounds = 10 if quick else 30
    names = ("fresh `runner claim` vs git's own publish, bare remote", "in-process claim vs git's own publish, bare remote")
    claimer = None
    with workspace("floor") as base:
        try:
            log(f"floor: {STEPS} steps on a bare remote; git's publish, `runner claim` and an in-process claim, {rounds} rounds")
            person, bare = new_queue(base / "plan", STEPS, remote=True)
            plain = git_clone_on_queue(bare, base / "git")
            fresh, inproc = base / "fresh", base / "inproc"
            for clone in (fresh, inproc):
                git(base, "clone", "-q", str(bare), str(clone))
            claimer = Claimer(inproc, "w-in")
            variants = {
                "git": lambda: timed(["bash", "-c", GIT_CAS], cwd=plain),
                "fresh": lambda: timed([RUNNER, "claim", "--id", "w-fresh", "--repo", fresh]),
                "in-process": claimer.claim,
            }
            for fn in variants.values():  # warm-up: the first read of the plan, git's first fetch
                fn()
            results = interleave(variants, rounds)
        except Exception as exc:
            return {"topic": "floor", "figures": [figure(name, None, "x", error=error_text(exc)) for name in names]}
        finally:
            if claimer is not None:
                claimer.close()
    g, f, i = (summary(column(results, k)) for k in ("git", "fresh", "in-process"))
    figures = []
    for name, key, goal, seen in ((names[0], "fresh", 2.0, f), (names[1], "in-process", 1.3, i)):
        value, spread, how = judged_ratio(results, key, "git", "<=")
        figures.append(figure(name, value, "x", ("<=", goal), spread,
                              detail=f"{seen['median'] * 1000:.0f} vs {g['median'] * 1000:.0f} ms (git: fetch, commit, push as "
                                     f"separate processes); {how}"))
    return {"topic": "floor", "params": {"steps": STEPS, "rounds": rounds}, "figures": figures,
            "data": {"samples": {k: column(results, k) for k in ("git", "fresh", "in-process")}}}


if __name__ == "__main__":
    main_for(measure)
