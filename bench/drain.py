"""2. Drain throughput of no-op steps (`run: ["true"]`, gates off) with 1, 2, 4 and 8
workers, each a separate process (bench/drain_worker.py: the daemon loop with timestamps).

  local    no remote: every worker shares one repository (the design's one-machine setup)
  remote   a bare remote on a path; each worker has its own clone (as on separate machines)

All workers start together on a signal. Reported per configuration:
  steps/s            steps done / (last `complete` published - start signal)
  retries/claim      compare-and-swap races lost inside Queue.claim per successful claim
  claim->done        from each step's claim commit to its done commit (timestamped by the
                     worker when the push / update-ref returned; git commit dates have 1 s resolution)
  double claims      checked from the queue branch history, not assumed: every (step, attempt)
                     claimed exactly once, no claim of a step while it is claimed, every
                     outcome recorded by the holder of that attempt, the step file really going
                     ready -> claimed in the claim commit, a linear history, every step done once.

Goals: aggregate throughput with 8 workers >= 0.5x of 1 worker; zero double claims.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from pathlib import Path

from common import BENCH, PY, clone, cli_env, fmt_ms, fmt_x, goal, log, main_for, make_queue, ratio, stats, table, workspace

WORKER_COUNTS = (1, 2, 4, 8)


def drain(base: Path, mode: str, workers: int, steps: int) -> dict:
    repo, bare = make_queue(base, steps, remote=(mode == "remote"))
    repos = [clone(str(bare), base / f"w{i}") for i in range(workers)] if bare else [repo] * workers
    procs = []
    for i, path in enumerate(repos):
        err = open(base / f"w{i}.err", "w")
        procs.append(
            subprocess.Popen(
                [PY, str(BENCH / "drain_worker.py"), "--repo", str(path), "--id", f"w{i + 1}", "--interval", "0.2"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=cli_env(),
            )
        )
    for proc in procs:
        line = proc.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"drain worker did not start: {line!r}")
    go = time.time()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for i, proc in enumerate(procs):
        out, _ = proc.communicate(timeout=1800)
        line = next((l for l in out.splitlines() if l.startswith("BENCH-RESULT ")), None)
        if line is None:
            raise RuntimeError(f"drain worker w{i + 1} exited {proc.returncode}: {(base / f'w{i}.err').read_text()[-2000:]}")
        results.append(json.loads(line[len("BENCH-RESULT ") :]))
    audit = audit_history(bare or repo)

    claimed_at: dict[tuple[str, int], float] = {}
    done_at: dict[tuple[str, int], float] = {}
    for res in results:
        for when, event, step, attempt in res["events"]:
            if event in ("claim", "takeover"):
                claimed_at[(step, attempt)] = when
            elif event == "complete":
                done_at[(step, attempt)] = when
    latencies = [done_at[k] - claimed_at[k] for k in done_at if k in claimed_at]
    claims = sum(1 for r in results for e in r["events"] if e[1] in ("claim", "takeover"))
    claim_races = sum(r["claim_races"] for r in results)
    last_done = max(done_at.values()) if done_at else go
    per_worker = {r["worker"]: sum(1 for e in r["events"] if e[1] == "complete") for r in results}
    worker_seconds = sum(r["finished"] - r["started"] for r in results)
    spent: dict[str, float] = {}
    for r in results:
        for leaf, seconds in r["time_by_leaf"].items():
            spent[leaf] = spent.get(leaf, 0.0) + seconds
    return {
        "mode": mode,
        "workers": workers,
        "steps": steps,
        "done": len(done_at),
        "seconds": last_done - go,
        "steps_per_s": len(done_at) / (last_done - go) if last_done > go else None,
        "claims": claims,
        "claim_races": claim_races,
        "all_races": sum(r["races"] for r in results),
        "retries_per_claim": claim_races / claims if claims else None,
        "lost_every_race_ticks": sum(r["lost_every_race"] for r in results),
        "errors": sum(r["errors"] for r in results),
        "claim_to_done": stats(latencies),
        "done_per_worker": per_worker,
        "maxrss_per_worker": [r["maxrss"] for r in results],
        "audit": audit,
        "worker_seconds": worker_seconds,
        "time_by_leaf": dict(sorted(spent.items(), key=lambda kv: -kv[1])),
    }


def audit_history(repo_path: Path) -> dict:
    """Check the queue branch history for double claims and out-of-turn records."""
    import pygit2

    from runner.core.codec import parse_trailers
    from runner.core.stepfile import parse_step

    repo = pygit2.Repository(str(repo_path))
    tip = repo.references["refs/heads/runner/queue"].target
    commits = list(repo.walk(tip, pygit2.GIT_SORT_TOPOLOGICAL | pygit2.GIT_SORT_REVERSE))
    violations: list[str] = []
    nonlinear = [str(c.id) for c in commits if len(c.parents) > 1]
    state: dict[str, dict] = {}
    claims: Counter = Counter()
    events: Counter = Counter()
    failures: list[str] = []

    def meta_at(commit, path):
        try:
            return parse_step(path, commit.tree[path].data).meta
        except KeyError:
            return {}

    for commit in commits:
        trailers = parse_trailers(commit.message)
        event, step_id = trailers.get("Event"), trailers.get("Step")
        if not step_id or event not in ("claim", "takeover", "complete", "fail", "release"):
            continue
        events[event] += 1
        attempt = int(trailers.get("Attempt") or 0)
        worker = trailers.get("Worker")
        path = f"plans/steps/{step_id}.md"
        before = meta_at(commit.parents[0], path) if commit.parents else {}
        after = meta_at(commit, path)
        st = state.setdefault(step_id, {"status": "ready", "attempt": 0, "holder": None})
        if event in ("claim", "takeover"):
            claims[(step_id, attempt)] += 1
            if event == "claim" and (st["status"] == "claimed" or before.get("status", "ready") == "claimed"):
                violations.append(f"{step_id}: claimed (attempt {attempt}, {worker}) while attempt {st['attempt']} is held by {st['holder']}")
            if attempt != st["attempt"] + 1:
                violations.append(f"{step_id}: claim of attempt {attempt} after attempt {st['attempt']}")
            if after.get("status") != "claimed" or int(after.get("attempt") or 0) != attempt or after.get("assignee") != worker:
                violations.append(f"{step_id}: claim commit {str(commit.id)[:10]} does not show it claimed by {worker} attempt {attempt}")
            st.update(status="claimed", attempt=attempt, holder=worker)
        else:
            if st["status"] != "claimed" or st["attempt"] != attempt or st["holder"] != worker:
                violations.append(f"{step_id}: {event} of attempt {attempt} by {worker}, but the claim is {st}")
            st["status"] = after.get("status")
            if event in ("fail", "release"):
                failures.append(f"{step_id} attempt {attempt} by {worker}: {trailers.get('Reason', '')[:300]}")
    double = [f"{s} attempt {a} claimed {n}x" for (s, a), n in claims.items() if n > 1]
    done = Counter(s for s, st in state.items() if st["status"] == "done")
    return {
        "commits": len(commits),
        "nonlinear_commits": nonlinear,
        "events": dict(events),
        "double_claims": double,
        "violations": violations[:50],
        "violation_count": len(violations),
        "steps_done": len(done),
        "takeovers": events["takeover"],
        "failures": failures[:20],
    }


def run(quick: bool = False) -> dict:
    steps = 16 if quick else 64
    runs = []
    for mode in ("local", "remote"):
        for workers in WORKER_COUNTS:
            with workspace(f"drain-{mode}-{workers}") as base:
                log(f"drain: {mode}, {workers} worker(s), {steps} no-op steps")
                res = drain(base, mode, workers, steps)
                log(
                    f"  {res['steps_per_s']:.2f} steps/s, {res['retries_per_claim']:.2f} retries/claim, "
                    f"double claims {len(res['audit']['double_claims'])}, violations {res['audit']['violation_count']}"
                )
                runs.append(res)

    rows = []
    goals = []
    for mode in ("local", "remote"):
        base_rate = next(r["steps_per_s"] for r in runs if r["mode"] == mode and r["workers"] == 1)
        for r in (r for r in runs if r["mode"] == mode):
            a = r["audit"]
            bad = len(a["double_claims"]) + a["violation_count"] + len(a["nonlinear_commits"])
            rows.append(
                [
                    mode, r["workers"], f"{r['done']}/{r['steps']}", f"{r['steps_per_s']:.2f}", fmt_x(ratio(r["steps_per_s"], base_rate)),
                    f"{r['retries_per_claim']:.2f}", fmt_ms(r["claim_to_done"]["median"], 0), fmt_ms(r["claim_to_done"]["p95"], 0),
                    str(bad), str(a["takeovers"]), str(len(a["failures"])),
                ]
            )
        eight = next(r for r in runs if r["mode"] == mode and r["workers"] == 8)
        scale = ratio(eight["steps_per_s"], base_rate)
        goals.append(
            goal(
                f"8 workers >= 0.5x the throughput of 1 ({mode})",
                fmt_x(scale),
                ">= 0.50x",
                scale is not None and scale >= 0.5,
                f"{eight['steps_per_s']:.2f} vs {base_rate:.2f} steps/s",
            )
        )
    bad_total = sum(len(r["audit"]["double_claims"]) + r["audit"]["violation_count"] + len(r["audit"]["nonlinear_commits"]) for r in runs)
    goals.append(
        goal(
            "zero double claims (checked from queue history)",
            f"{bad_total}",
            "0",
            bad_total == 0,
            f"{sum(r['audit']['commits'] for r in runs)} queue commits of {len(runs)} drains audited; "
            f"{sum(r['audit']['takeovers'] for r in runs)} takeovers",
        )
    )
    failures = [f for r in runs for f in r["audit"]["failures"]]
    goals.append(
        goal(
            "every no-op step done (no step failed by a runner error)",
            f"{len(failures)} failed",
            "0",
            not failures,
            "; ".join(sorted({f.split(": ", 1)[-1][:160] for f in failures}))[:600],
        )
    )
    return {
        "topic": "drain",
        "params": {"steps": steps, "workers": WORKER_COUNTS},
        "data": runs,
        "tables": [
            table(
                f"2. Drain throughput, {steps} no-op steps (gates off), workers as separate processes",
                ["mode", "workers", "done", "steps/s", "x 1 worker", "retries/claim", "claim->done p50 ms", "p95 ms", "double claims / anomalies", "takeovers", "failed (runner error)"],
                rows,
                "local: workers share one repository, no remote; remote: bare repo on a path, one clone per worker. "
                "Anomalies are counted from the queue branch history (see bench/drain.py).",
            ),
            table(
                "2b. Where the workers' time went during the drains (share of the summed wall time of all workers)",
                ["mode", "workers", "worker-seconds", "top operations (exclusive time, common.PhaseClock)"],
                [
                    [
                        r["mode"], r["workers"], f"{r['worker_seconds']:.1f}",
                        ", ".join(f"{leaf} {100 * sec / r['worker_seconds']:.0f}%" for leaf, sec in list(r["time_by_leaf"].items())[:5]),
                    ]
                    for r in runs
                ],
            ),
        ],
        "goals": goals,
    }


if __name__ == "__main__":
    main_for(run)
