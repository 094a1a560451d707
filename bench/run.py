"""Run the benchmarks, print one table of figures beside their goals, write the JSON.

    python bench/run.py [--quick] [--peers] [--only drain,startup]

Each topic runs as its own process (python bench/<topic>.py --out FILE), so no topic's
caches or memory reach the next. See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import datetime
from pathlib import Path

from common import BENCH, compile_bytecode, error_text, figure, fmt, load, machine

TOPICS = (
    "drain",
    "claim_scale",
    "ready",
    "memory",
    "procs",
    "startup",
    "bench_hook",
    "fleet",
    "floor",
    "scrub",
    "hook_profile",
    "hook_drain",
    "slots",
)
FORMAT = 2  # results/*.json layout; bump when it changes


def run_topic(name: str, quick: bool, peers: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        start = time.monotonic()
        cmd = [
            sys.executable,
            str(BENCH / f"{name}.py"),
            "--out",
            str(out),
            *(["--quick"] if quick else []),
            *(["--peers"] if peers else []),
        ]
        proc = subprocess.Popen(cmd, cwd=BENCH, stderr=subprocess.PIPE, text=True)
        last = ""
        for line in proc.stderr:  # progress passes through; the last line explains a crash
            sys.stderr.write(line)
            last = line.strip() or last
        proc.wait()
        if proc.returncode or not out.exists():
            why = f"bench/{name}.py exited {proc.returncode}: {last}"
            return {
                "topic": name,
                "seconds": time.monotonic() - start,
                "figures": [figure(f"{name} (whole topic)", None, "", error=why)],
            }
        return json.loads(out.read_text())


def header(info: dict, quick: bool, started: datetime, load_before: list, load_after: list, total: float) -> str:
    src = info["runner"]
    commit = src.get("commit", "?")[:10]
    dirty = f" + {len(src['uncommitted_files'])} uncommitted file(s) in runner/" if src.get("uncommitted_files") else ""
    code = info["bytecode"]
    compiled = (
        f"{code['compiled']}/{code['modules']} modules compiled"
        if "compiled" in code
        else f"unknown ({code.get('error')})"
    )
    return "\n".join(
        [
            (
                f"runner bench{' --quick' if quick else ''}, {started:%Y-%m-%d %H:%M}, {total / 60:.1f} min; "
                f"{src.get('version', 'runner ?')} at commit {commit}{dirty}"
            ),
            (
                f"machine: {info['cores']} cores ({info['cores_usable']} usable), "
                f"{(info['memory_bytes'] or 0) / 2**30:.0f} GiB, {info['git']}, "
                f"Python {info['python']}, {info['platform']}"
            ),
            (
                f"bytecode: {compiled}; load average (1/5/15 min) before {' '.join(map(str, load_before))}, "
                f"after {' '.join(map(str, load_after))}"
            ),
        ]
    )


def runner_changes(results: list[dict]) -> str:
    """A line naming each topic's runner commit when they differ (runner changed mid-run)."""

    def label(src: dict) -> str:
        return f"{src.get('commit', '?')[:10]}+{len(src.get('uncommitted_files', []))} uncommitted"

    labels = {r["topic"]: label(r.get("runner", {})) for r in results}
    if len(set(labels.values())) <= 1:
        return ""
    return "runner changed during the run; per topic: " + ", ".join(f"{t} {l}" for t, l in labels.items())


def goal_text(row: dict) -> str:
    if not row["goal"]:
        return "-"
    op, target = row["goal"]
    return f"{op} {fmt(target, row['unit'])}"


def spread_text(row: dict) -> str:
    s = row["spread"]
    if not s["n"]:
        return ""
    return f"{fmt(s['min'], row['unit'])}..{fmt(s['max'], row['unit'])} (n={s['n']})"


def table(rows: list[dict]) -> str:
    cols = [
        ("figure", lambda r: r["figure"]),
        ("median", lambda r: fmt(r["value"], r["unit"])),
        ("spread (min..max)", spread_text),
        ("goal", goal_text),
        ("verdict", lambda r: r["verdict"]),
    ]
    cells = [[f(r) for _, f in cols] for r in rows]
    widths = [min(max(len(c[i]) for c in cells + [[n for n, _ in cols]]), 70) for i in range(len(cols) - 1)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths + [0])).rstrip()
    out = [line([n for n, _ in cols]), line(["-" * w for w in widths] + ["-------"])]
    for row, values in zip(rows, cells):
        out.append(line([textwrap.shorten(values[0], 70, placeholder="...")] + values[1:]))
        if row["detail"]:
            out += textwrap.wrap(row["detail"], 150, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter memory drain (same plan sizes)")
    parser.add_argument(
        "--peers", action="store_true", help="install Backlog.md, Taskmaster, procrastinate and PostgreSQL when missing"
    )
    parser.add_argument("--only", help="comma-separated topics: " + ",".join(TOPICS))
    parser.add_argument("--out-dir", type=Path, default=BENCH / "results")
    args = parser.parse_args()
    topics = [t.strip() for t in args.only.split(",")] if args.only else list(TOPICS)
    if unknown := [t for t in topics if t not in TOPICS]:
        parser.error(f"unknown topic(s): {', '.join(unknown)}")

    started, start, load_before = datetime.now(), time.monotonic(), load()
    info = machine()
    try:
        info["bytecode"] = compile_bytecode()
    except Exception as exc:
        info["bytecode"] = {"error": error_text(exc)}
    results = [run_topic(name, args.quick, args.peers) for name in topics]
    total, load_after = time.monotonic() - start, load()
    rows = [row for result in results for row in result["figures"]]
    print(header(info, args.quick, started, load_before, load_after, total))
    if changed := runner_changes(results):
        print(changed)
    print()
    print(table(rows))
    print(
        "\nper topic: "
        + ", ".join(
            f"{r['topic']} {r.get('seconds', 0):.0f} s "
            f"(load {r.get('load_before', ['?'])[0]} -> {r.get('load_after', ['?'])[0]})"
            for r in results
        )
    )

    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / f"{started:%Y-%m-%dT%H%M%S}{'-quick' if args.quick else ''}.json"
    payload = {
        "format": FORMAT,
        "started": started.isoformat(timespec="seconds"),
        "quick": args.quick,
        "peers": args.peers,
        "seconds": total,
        "load_before": load_before,
        "load_after": load_after,
        "machine": info,
        "figures": rows,
        "topics": results,
    }
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(f"wrote {path.relative_to(BENCH.parent) if path.is_relative_to(BENCH.parent) else path}")


if __name__ == "__main__":
    main()
