"""Every figure the README quotes is one the bench measured, with the load it was measured under,
or one computed from runner itself (issue 46, point 4). A figure is a number with a unit of
time, a ratio, a share or a count of characters; the Tests section's suite durations are the
suite's, not the bench's, and are left out. A new figure in the README that none of these
checks accounts for fails the last test: quote the bench, or compute it here."""

from __future__ import annotations

import json
import re

import anyio
from support.repos import ROOT

README = (ROOT / "README.md").read_text()
FIGURE = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s?(ms|x|%|characters)(?!\w)")
PERFORMANCE = README[README.index("## Performance") : README.index("## The code")]


def results(name: str) -> dict:
    return json.loads((ROOT / name).read_text())


def quick_run() -> dict:
    return results(re.search(r"JSON in (bench/results/\S+\.json)", PERFORMANCE).group(1))


def full_run() -> dict:
    """The last full run, which the peer rows come from (named by its commit)."""
    commit = re.search(r"the peer rows?\s+(?:is|are)\s+the\s+last\s+full\s+run's,\s+commit\s+(\w+)", PERFORMANCE).group(
        1
    )
    found = [results(str(p.relative_to(ROOT))) for p in sorted((ROOT / "bench" / "results").glob("*.json"))]
    runs = [r for r in found if not r["quick"] and r["machine"]["runner"].get("commit", "").startswith(commit)]
    assert runs, f"no full run of commit {commit} in bench/results"
    return runs[-1]


def rows() -> list[tuple[str, str, str]]:
    table = [line for line in PERFORMANCE.splitlines() if line.startswith("| ")][1:]
    return [tuple(cell.strip() for cell in line.strip("|").split("|")) for line in table]  # type: ignore[misc]


def figure(name: str) -> dict:
    """The bench's row of that name: the quick run's, else (a peer's, skipped there) the full run's."""
    for run in (quick_run, full_run):
        found = next((f for f in run()["figures"] if f["figure"] == name), None)
        if found is not None and found["value"] is not None:
            return found
    raise AssertionError(f"the bench measured no figure named {name!r}")


def in_bench_units(number: str, unit: str) -> float:
    """A README number as the bench's JSON holds it: times in seconds, shares as fractions."""
    value = float(number.replace(",", ""))
    return {"ms": value / 1000, "s": value, "%": value / 100}.get(unit, value)


def rendered(number: str, unit: str, value: float) -> bool:
    """`number` is `value` rounded to the digits the README shows."""
    decimals = len(number.split(".")[1]) if "." in number else 0
    scale = {"ms": 1000, "%": 100}.get(unit, 1)
    return abs(value * scale - float(number.replace(",", ""))) <= 0.5 * 10**-decimals + 1e-9


def test_the_performance_table_is_the_bench_rows_it_names_with_their_goals():
    seen = set()
    for name, goal, measured in rows():
        row = figure(name)
        first = re.match(r"(\d[\d,]*(?:\.\d+)?)\s?(ms|x|%)?", measured)
        assert first and rendered(first.group(1), first.group(2) or "", row["value"]), (name, measured, row["value"])
        for number, unit in FIGURE.findall(measured[first.end() :]):  # the rest: from the row's own detail
            assert f"{number} {unit}" in row["detail"] or f"{number}{unit}" in row["detail"], (
                name,
                number,
                row["detail"],
            )
        if goal:
            sign, number, unit = re.match(r"([<>]=?)\s*([\d.,]+)\s?(ms|s|x|%)?", goal).groups()
            assert row["goal"] == [sign, in_bench_units(number, unit or "")], (name, goal, row["goal"])
        else:
            assert row["goal"] is None, name
        assert ("missed" in measured) == (row["met"] is False), (name, row["verdict"])
        seen.add(name)
    assert len(seen) >= 12


def test_the_load_cores_and_commit_quoted_are_the_runs_own():
    run = quick_run()
    quoted = re.search(r"commit (\w+); (\d+) cores, load ([\d.]+) -> ([\d.]+)", PERFORMANCE)
    assert quoted, "the README quotes the quick run's commit, cores and load"
    commit, cores, before, after = quoted.groups()
    assert run["machine"]["runner"]["commit"].startswith(commit) and run["quick"]
    assert int(cores) == run["machine"]["cores"]
    assert (float(before), float(after)) == (round(run["load_before"][0], 1), round(run["load_after"][0], 1))


def test_the_tours_ready_time_is_the_benchs():
    number = re.search(r"\((\d+) ms on an unchanged local queue", README).group(1)
    assert rendered(number, "ms", figure("`runner ready`, unchanged local queue, fresh process")["value"])


def mcp_context_size() -> int:
    """What every session of an agent reads of `runner mcp`: each tool's name, description and
    arguments' schema, and the server's instructions (computed from the server itself)."""
    from runner.commands.mcpserver import build

    app = build(None, None)  # the tools' functions are never called here
    tools = anyio.run(app.list_tools)
    return len(app.instructions or "") + sum(
        len(t.name) + len(t.description or "") + len(json.dumps(t.input_schema)) for t in tools
    )


def test_the_mcp_descriptions_size_is_the_servers_own():
    number = re.search(r"about ([\d,]+) characters of tool descriptions", README).group(1)
    assert round(mcp_context_size(), -2) == int(number.replace(",", "")), mcp_context_size()


def test_every_figure_the_readme_quotes_is_accounted_for():
    """Outside the Tests section: the performance table, the prose about it (its rows' values),
    the tour's ready time and the MCP size; nothing else."""
    tests = README[README.index("## Tests") : README.index("## Performance")]
    checked = {
        (m.group(1), m.group(2))
        for _, goal, measured in rows()
        for cell in (goal, measured)
        for m in FIGURE.finditer(cell)
    }
    values = {FIGURE.match(measured).groups() for _, _, measured in rows() if FIGURE.match(measured)}
    ready = re.search(r"\((\d+) (ms) on an unchanged local queue", README).groups()
    mcp = re.search(r"about ([\d,]+) (characters) of tool descriptions", README).groups()
    unaccounted = []
    text = README.replace(tests, "")
    for match in FIGURE.finditer(text):
        quoted = (match.group(1), match.group(2))
        if quoted not in checked | values | {ready, mcp}:
            unaccounted.append(f"{match.group(0)!r} near {text[max(0, match.start() - 60) : match.end()]!r}")
    assert unaccounted == []
