"""The documents say what the code does: docs/protocol.md's tables are generated from the
code and checked here (RUNNER_UPDATE_DOCS=1 rewrites them), and nothing sends a reader to a
file outside the repository."""

from __future__ import annotations

import os
import re
from pathlib import Path

from runner.core.config import schema_rows
from runner.core.limits import BOUNDS
from runner.core.machine import KINDS, TABLE, Kind
from runner.core.stepschema import doc_rows

ROOT = Path(__file__).resolve().parents[1]
PROTOCOL = ROOT / "docs" / "protocol.md"


def config_table() -> list[str]:
    return ["| table | key | default | meaning |", "|---|---|---|---|"] + [
        f"| {t} | {k} | {d} | {m} |" for t, k, d, m in schema_rows()
    ]


def step_table() -> list[str]:
    return ["| key | value | written by | meaning |", "|---|---|---|---|"] + [
        f"| {k} | {v} | {w} | {m} |" for k, v, w, m in doc_rows()
    ]


def bounds_table() -> list[str]:
    size = lambda n: f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else str(n)
    return ["| what | at most | over it |", "|---|---|---|"] + [
        f"| {what} | {size(n)} | {then} |" for what, n, then in BOUNDS
    ]


def machine_table() -> list[str]:
    return ["| from | event | to |", "|---|---|---|"] + [
        f"| {s} | {k} | {', '.join(to)} |" for (s, k), to in TABLE.items()
    ]


def who(kind: Kind) -> str:
    spec = KINDS[kind]
    if spec.holder:
        return "the holder"
    if kind == Kind.CLAIM:
        return "a worker (a person with --ignore-deps)"
    if kind == Kind.HALT:
        return (
            "a person (a worker with reason verifier_failed:<why>, "
            "human_intervention:context_below_floor or budget_exceeded:<why>)"
        )
    if spec.person:
        return "a person"
    return "a worker or a person" if not spec.step else "a worker"


def kinds_table() -> list[str]:
    rows = [
        f"| {k} | {who(k)} | {'yes' if s.handoff else 'no'} | {'yes' if s.starts_attempt else 'no'} |"
        for k, s in KINDS.items()
    ]
    return ["| event | who | writes a handoff | a new attempt |", "|---|---|---|---|"] + rows


TABLES = {
    "bounds-table": bounds_table,
    "step-table": step_table,
    "config-table": config_table,
    "machine-table": machine_table,
    "kinds-table": kinds_table,
}


def block(text: str, name: str) -> list[str]:
    match = re.search(rf"<!-- {name}:[^\n]*-->\n(.*?)\n<!-- /{name} -->", text, re.DOTALL)
    assert match, f"docs/protocol.md has no {name} block"
    return match.group(1).splitlines()


def test_protocol_tables_are_the_codes_tables():
    text = PROTOCOL.read_text()
    if os.environ.get("RUNNER_UPDATE_DOCS") == "1":
        for name, render in TABLES.items():
            text = re.sub(
                rf"(<!-- {name}:[^\n]*-->\n).*?(\n<!-- /{name} -->)",
                lambda m, render=render: m.group(1) + "\n".join(render()) + m.group(2),
                text,
                flags=re.DOTALL,
            )
        PROTOCOL.write_text(text)
    for name, render in TABLES.items():
        assert block(text, name) == render(), (
            f"{name} in docs/protocol.md differs from the code (RUNNER_UPDATE_DOCS=1 rewrites it)"
        )


def test_the_readme_links_the_protocol_and_nothing_points_outside_the_repository():
    readme = (ROOT / "README.md").read_text()
    assert "docs/protocol.md" in readme
    for path in [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("bench/*.md"), *ROOT.glob("tests/**/*.md")]:
        text = path.read_text()
        assert "DESIGN" + ".md" not in text and "../" + "shared" not in text, path


def test_the_protocol_says_what_the_warm_checker_waits_for_and_how_to_turn_it_off():
    from runner.hooks import warm

    text = " ".join(PROTOCOL.read_text().split())
    assert warm.IDLE == 60 and "It exits after a minute without a push." in text
    assert "`RUNNER_HOOK_WARM=0` in the hook's environment turns it off" in text
