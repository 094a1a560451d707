"""Where a hooked push's time goes (issue 45 point 1): the server's pre-receive hook taken apart.

One bare remote of 1,000 no-op steps; a clone claims one step (the push a worker makes
most). That queue update (old, new) is then replayed against the bare repository as git
runs its hook, over and over (the hook only reads, so the same update can be checked
again). Interleaved round by round:

  python -c pass         the interpreter's start-up, nothing of runner's
  import                 `python -c "import runner.hooks.server"`: start-up + the hook's imports
  hook                   `python -m runner.hooks.server pre-receive` on the claim's update
  hook script            the installed `hooks/pre-receive` (sh, then the same Python)
  push plain / hooked    `git push` of that update (ref moved back first), to a bare remote
                         without and with the hook: git's own receive, and what the hook adds

and once, in-process (one fresh interpreter per round, phases timed around the hook's own
functions): opening the store, reading runner.toml, the queue's replay, the secrets scan.
`python -X importtime` says which modules the hook imports and whether pygit2 is among them.
Reported, no goal: the goals are bench/hook_drain.py's.

    python bench/run.py --only hook_profile [--quick]   (prints the table, writes bench/results)
    python bench/hook_profile.py [--quick]         (its JSON alone)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from common import (
    RUNNER_PY,
    column,
    env,
    error_text,
    figure,
    git,
    interleave,
    load,
    log,
    main_for,
    new_queue,
    queue_ref,
    runner,
    summary,
    timed,
    workspace,
)

STEPS = 1_000

PHASES = r"""
import json, sys, time
t0 = time.perf_counter()
import runner.hooks.server as server
t1 = time.perf_counter()
spent = {}
def timing(name, fn):
    def wrapped(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - start
    return wrapped
server.open_store = timing("open store", server.open_store)
server.PlanView.config = timing("read runner.toml", server.PlanView.config)
server.PushCheck.check_queue = timing("replay (queue commits)", server.PushCheck.check_queue)
server.secrets_in_push = timing("secrets scan", server.secrets_in_push)
try:
    from pathlib import Path
    import runner.hooks.races as races
    races.lost_race = timing("early refusal", races.lost_race)
    check = lambda text: races.checked(text, Path(".").resolve())
except ImportError:
    check = lambda text: server.run_pre_receive(text, ".")
t2 = time.perf_counter()
code = check(sys.stdin.read())
t3 = time.perf_counter()
spent["imports"] = t1 - t0
spent["whole check"] = t3 - t2
spent["exit"] = code
spent["pygit2 imported"] = "pygit2" in sys.modules
spent["modules"] = len([m for m in sys.modules if m.startswith("runner")])
print(json.dumps(spent))
"""


def hook_env(bare: Path) -> dict[str, str]:
    """What git gives its pre-receive hook in a bare repository (no quarantine: the objects are there)."""
    return {**env(), "GIT_DIR": "."}


def import_profile(bare: Path) -> dict:
    """`python -X importtime -m runner.hooks.server`'s view: top modules by cumulative time."""
    proc = subprocess.run(
        [str(RUNNER_PY), "-X", "importtime", "-c", "import runner.hooks.server"],
        cwd=bare,
        capture_output=True,
        env=hook_env(bare),
    )
    rows = []
    for line in proc.stderr.decode(errors="replace").splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cumulative, module = line.removeprefix("import time:").split("|", 2)
        rows.append((module.rstrip(), int(self_us), int(cumulative)))
    top = [r for r in rows if not r[0].startswith("  ")]  # imported by the command itself
    below = [r for r in rows if r[0].startswith("   ") and not r[0].startswith("    ")]  # by runner.hooks.server
    return {
        "modules": len(rows),
        "pygit2": any(r[0].strip() == "pygit2" for r in rows),
        "total_ms": sum(r[2] for r in top) / 1000,
        "top": sorted(((r[0].strip(), r[2] / 1000) for r in below), key=lambda r: -r[1])[:10],
    }


def measure(quick: bool = False, peers: bool = False) -> dict:
    rounds = 8 if quick else 20
    name = "hooked push, where the time goes"
    with workspace("hook-profile") as base:
        try:
            log(f"hook_profile: a bare remote of {STEPS:,} steps; one claim's update replayed through the hook")
            clone, bare = new_queue(base / "q", STEPS, remote=True)
            ref = "refs/heads/" + queue_ref(clone).removeprefix("refs/remotes/origin/").removeprefix("refs/heads/")
            old = git(bare, "rev-parse", ref).strip()
            runner("claim", "--id", "w", repo=clone)
            new = git(bare, "rev-parse", ref).strip()
            hooked = base / "hooked.git"
            shutil.copytree(bare, hooked)
            runner("install-hooks", "--server", hooked)
            stdin = f"{old} {new} {ref}\n".encode()
            imports = import_profile(hooked)

            def back(cmd: list, **kwargs) -> float:
                git(hooked, "update-ref", ref, old)  # the hook judges the update against the ref as it is
                return timed(cmd, **kwargs)

            def back_and_push(remote: Path) -> float:
                git(remote, "update-ref", ref, old)
                return timed(["git", "push", "-q", str(remote), f"{new}:{ref}"], cwd=clone)

            py = str(RUNNER_PY)
            phases: list[dict] = []

            def in_process() -> float:
                git(hooked, "update-ref", ref, old)
                start = time.perf_counter()
                proc = subprocess.run(
                    [py, "-c", PHASES], cwd=hooked, input=stdin, capture_output=True, env=hook_env(hooked)
                )
                wall = time.perf_counter() - start
                if proc.returncode:
                    raise RuntimeError(proc.stderr.decode(errors="replace")[-800:])
                found = json.loads(proc.stdout.decode().splitlines()[-1])
                if found["exit"]:
                    raise RuntimeError(f"the hook refused the claim: {proc.stderr.decode(errors='replace')[-400:]}")
                phases.append(found)
                return wall

            variants = {
                "python -c pass": lambda: timed([py, "-c", "pass"], cwd=hooked),
                "import": lambda: timed([py, "-c", "import runner.hooks.server"], cwd=hooked, env=hook_env(hooked)),
                "hook": lambda: back(
                    [py, "-m", "runner.hooks.server", "pre-receive"], cwd=hooked, input=stdin, env=hook_env(hooked)
                ),
                "hook script": lambda: back(
                    [str(hooked / "hooks" / "pre-receive")], cwd=hooked, input=stdin, env=hook_env(hooked)
                ),
                "push plain": lambda: back_and_push(bare),
                "push hooked": lambda: back_and_push(hooked),
                "phases": in_process,
            }
            for fn in variants.values():
                fn()  # warm-up
            phases.clear()
            before = load()
            results = interleave(variants, rounds)
            after = load()
        except Exception as exc:
            return {"topic": "hook_profile", "figures": [figure(name, None, "ms", error=error_text(exc))]}
    med = {k: summary(column(results, k))["median"] for k in variants}
    phase = {
        k: summary([p[k] for p in phases if k in p])["median"] for k in phases[0] if isinstance(phases[0][k], float)
    }
    rows = [
        figure("hook: interpreter start-up (python -c pass)", med["python -c pass"], "ms"),
        figure(
            "hook: imports (import runner.hooks.server, less start-up)",
            med["import"] - med["python -c pass"],
            "ms",
            detail=f"{imports['modules']} modules, pygit2 {'imported' if imports['pygit2'] else 'not imported'}; "
            f"heaviest: {', '.join(f'{n} {ms:.0f} ms' for n, ms in imports['top'][:5])}",
        ),
        figure(
            "hook: the check of one claim (whole hook less import)",
            med["hook"] - med["import"],
            "ms",
            detail="; ".join(f"{k} {v * 1000:.1f} ms" for k, v in phase.items()),
        ),
        figure("hook: whole, as git runs it (sh + python)", med["hook script"], "ms"),
        figure(
            "git push of one claim, hooked vs plain",
            med["push hooked"] / med["push plain"],
            "x",
            spread=[r["push hooked"] / r["push plain"] for r in results],
            detail=f"{med['push hooked'] * 1000:.0f} vs {med['push plain'] * 1000:.0f} ms; load {before} -> {after}",
        ),
    ]
    return {
        "topic": "hook_profile",
        "params": {"steps": STEPS, "rounds": rounds},
        "figures": rows,
        "data": {
            "medians_ms": {k: v * 1000 for k, v in med.items()},
            "phases_ms": {k: v * 1000 for k, v in phase.items()},
            "imports": imports,
            "samples": {k: column(results, k) for k in variants},
            "phase_samples": phases,
            "load": [before, after],
        },
    }


if __name__ == "__main__":
    main_for(measure)
