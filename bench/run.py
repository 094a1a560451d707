"""Run every benchmark, print the tables, write bench/results/<date>.json.

    python bench/run.py            # full run (~10-15 min on 2 cores)
    python bench/run.py --quick    # short run (~3 min)
    python bench/run.py --only claim_latency,tick_phases

Each topic runs in its own fresh process (python bench/<topic>.py --out FILE), so one
topic's caches, wrappers and memory do not leak into the next.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH, PY, cli_env, machine_info  # noqa: E402

TOPICS = ("claim_latency", "tick_phases", "drain", "scale", "memory")


def run_topic(name: str, quick: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{name}.json"
        start = time.monotonic()
        proc = subprocess.run([PY, str(BENCH / f"{name}.py"), "--out", str(out), *(["--quick"] if quick else [])], env=cli_env())
        elapsed = time.monotonic() - start
        if proc.returncode != 0 or not out.exists():
            return {"topic": name, "error": f"exited {proc.returncode}", "seconds": elapsed, "tables": [], "goals": []}
        result = json.loads(out.read_text())
    result["seconds"] = elapsed
    return result


def render(results: list[dict], machine: dict, quick: bool, total: float) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(140, Console().width))
    console.rule(f"runner benchmarks{' (--quick)' if quick else ''}")
    console.print(
        f"{machine['cores']} cores ({machine['cores_usable']} usable), {machine['git']}, Python {machine['python']}, "
        f"pygit2 {machine['pygit2']} / libgit2 {machine['libgit2']}, load average at start {machine['load_average'][0]:.2f}, "
        f"runner {machine['runner_commit'][:10]}{' + uncommitted changes' if machine['runner_dirty'] else ''}"
    )
    for result in results:
        if result.get("error"):
            console.print(f"[red]{result['topic']} failed: {result['error']}[/]")
            continue
        for spec in result["tables"]:
            table = Table(title=spec["title"], title_justify="left", caption=spec.get("note") or None, caption_justify="left")
            for i, column in enumerate(spec["columns"]):
                table.add_column(column, justify="left" if i < 2 else "right", overflow="fold")
            for row in spec["rows"]:
                table.add_row(*("" if cell is None else str(cell) for cell in row))
            console.print(table)
    goals = Table(title="Goals (ratios against baselines measured in this run)", title_justify="left")
    for column in ("goal", "measured", "target", "met", "evidence"):
        goals.add_column(column, overflow="fold")
    for result in results:
        for g in result.get("goals", []):
            met = {True: "[green]yes[/]", False: "[red]no[/]", None: "report"}[g["met"]]
            goals.add_row(g["goal"], g["measured"], g["target"], met, g["evidence"])
    console.print(goals)
    console.print(f"total {total:.0f} s; per topic: " + ", ".join(f"{r['topic']} {r['seconds']:.0f} s" for r in results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short run (~3 min): fewer samples and smaller plans")
    parser.add_argument("--only", help="comma-separated topics: " + ",".join(TOPICS))
    parser.add_argument("--out-dir", type=Path, default=BENCH / "results")
    args = parser.parse_args()
    topics = [t.strip() for t in args.only.split(",")] if args.only else list(TOPICS)
    unknown = [t for t in topics if t not in TOPICS]
    if unknown:
        parser.error(f"unknown topic(s): {', '.join(unknown)}")

    machine = machine_info()
    started = datetime.now()
    start = time.monotonic()
    results = [run_topic(name, args.quick) for name in topics]
    total = time.monotonic() - start
    machine["load_average_end"] = os.getloadavg()
    render(results, machine, args.quick, total)

    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / f"{started:%Y-%m-%dT%H%M%S}{'-quick' if args.quick else ''}.json"
    payload = {"started": started.isoformat(timespec="seconds"), "quick": args.quick, "seconds": total, "machine": machine, "topics": results}
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(f"wrote {path}")
    if any(r.get("error") for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
