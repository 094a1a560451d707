"""The layout shows the architecture (issue 14): packages that name the parts, imports that
respect the layers, no cycles, small modules; and a command line that starts without the
heavy libraries it does not need (issue 15)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "runner"
PARTS = ("core", "store", "queue", "worker", "schedules", "hooks", "commands", "agents", "board")


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


def imports_of(path: Path) -> set[str]:
    """Every runner module a file imports, at the top or inside a function."""
    known = modules()
    found = set()
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and getattr(block.test, "id", "") == "TYPE_CHECKING"
        for n in ast.walk(block)
    }
    for node in (n for n in ast.walk(tree) if id(n) not in typing_only):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("runner"):
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & set(known)
            # `from runner.x import y` of a module y imports y, not the package's __init__.
            found.update(submodules if len(submodules) == len(node.names) else submodules | {node.module})
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("runner"))
    return {name for name in found if name in known}


def part(module: str) -> str:
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else ""


# What each part may import. core imports nothing of runner's outer parts; store knows bytes
# and refs (core's errors and layout only, never steps); schedules and hooks never import the worker.
ALLOWED = {
    "core": {"core"},
    "store": {"store", "core.errors", "core.layout"},
    "queue": {"queue", "store", "core"},
    "worker": {"worker", "queue", "store", "core"},
    "hooks": {"hooks", "store", "core", "resources"},  # never the queue: step files through runner.core.treefiles
    "schedules": {"schedules", "store", "core", "resources"},
    "agents": {"agents", "core", "resources"},  # the role names and tokens are core's vocabulary
    "commands": {"commands", "worker", "queue", "store", "core", "hooks", "schedules", "agents", "resources", "board"},
    "board": {"board", "queue", "store", "core"},  # never the worker: the board runs no step's command
}


def allowed(source: str, target: str) -> bool:
    rules = ALLOWED.get(part(source))
    if rules is None or target == "runner":
        return True
    inner = target.removeprefix("runner.")
    return any(inner == rule or inner.startswith(rule + ".") for rule in rules)


def test_runner_is_made_of_packages_that_name_the_parts():
    for name in PARTS:
        assert (PACKAGE / name / "__init__.py").is_file(), name
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
        assert doc and len(doc) > 40, f"runner/{name}/__init__.py says what the part owns"
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "cli.py", "resources.py"]


def test_imports_respect_the_layers():
    wrong = [
        f"{source} imports {target}"
        for source, path in modules().items()
        for target in imports_of(path)
        if not allowed(source, target)
    ]
    assert wrong == []


def test_there_is_no_import_cycle():
    graph = {source: {t for t in imports_of(path) if t != source} for source, path in modules().items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                cycles.append(trail[trail.index(nxt) :] + [nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [node])
    assert cycles == []


def statement_lines(node: ast.AST) -> int:
    """How many lines begin a statement: the size of code, however a formatter wraps it."""
    return len({inner.lineno for inner in ast.walk(node) if isinstance(inner, ast.stmt)})


def test_modules_and_classes_stay_small():
    """About 420 and 260 lines as written before `ruff format`, which wraps a call one argument a line."""
    big = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        if statement_lines(tree) > 300:
            big.append(f"{name}: {statement_lines(tree)} statements")
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and statement_lines(node) > 210:
                big.append(f"{name}.{node.name}: {statement_lines(node)} statements")
    assert big == []


def test_the_files_of_a_queues_tree_are_read_in_one_place():
    """Step files and runner.toml in a tree (a snapshot, a push the server hook judges, a commit
    the pre-commit hook checks) are parsed by runner.core.treefiles only; the other callers
    check files a person is about to write (an import, `runner add`, an agent preset, a
    runner.toml edit) before they reach a tree."""
    callers = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("parse_step", "parse_config")
            ):
                callers.add(name)
    assert callers == {
        "runner.core.treefiles",
        "runner.queue.importer",
        "runner.commands.plan",
        "runner.commands.agents",
        "runner.queue.queue",
    }


def test_the_command_line_starts_without_the_heavy_libraries():
    probe = (
        "import sys, runner.cli; print(__import__('json').dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in "
        "('pydantic', 'pygit2', 'markdown_it', 'rich', 'yaml', 'starlette', 'uvicorn', 'apprise'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    assert json.loads(out.stdout) == []


def test_a_command_built_alone_is_the_command_of_the_whole_app():
    """A run builds only the command it names: each one's help, options and hiddenness must
    be what the whole app has, and a name that is not a command gets the whole app."""
    from typer.main import get_command

    from runner.cli import COMMANDS, build

    whole = get_command(build()).commands
    assert sorted(whole) == sorted(name for name, *_ in COMMANDS) and len(whole) > 25
    for name, *_ in COMMANDS:
        alone = get_command(build(name)).commands
        assert list(alone) == [name]
        mine, theirs = alone[name], whole[name]
        assert (mine.help, mine.hidden) == (theirs.help, theirs.hidden), name
        assert [p.to_info_dict() for p in mine.params] == [p.to_info_dict() for p in theirs.params], name
    assert sorted(get_command(build("stauts")).commands) == sorted(whole)


def test_no_test_module_imports_another():
    """A test file reads and runs alone: shared helpers live in tests/support/, never in another
    test module, and no test imports conftest.py, which keeps only fixtures (issues 34.7, 47.5)."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in getattr(node, "names", [])]
                if isinstance(node, ast.Import)
                else []
            )
            offenders += [
                f"{path.name} imports {name}"
                for name in names
                if name.split(".")[0].startswith("test_") or name.split(".")[0] == "conftest"
            ]
    assert offenders == []


# Where git may be started outside runner/store/ (issue 47.1), each for a reason: module -> why.
GIT_OUTSIDE_THE_STORE = {
    "runner.hooks.races": "the installed pre-receive's fast path reads a reftable ref before runner.store is imported",
    "runner.hooks.install": "installs the hook: git's hooks folder and the server's settings in its config",
    "runner.schedules.options": (
        "checks a schedule's repository before installing it (is it one, its remotes, its branch)"
    ),
}


def git_calls(path: Path) -> list[str]:
    """Each place a file starts git or probes a store: run_git (called or imported), a
    subprocess call whose argv starts with "git", getattr(store, ...) or getattr(x.store, ...)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and any(alias.name == "run_git" for alias in node.names):
            found.append(f"line {node.lineno}: imports run_git")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            first = node.args[0] if node.args else None
            if name == "run_git":
                found.append(f"line {node.lineno}: run_git")
            elif (
                name in ("run", "Popen", "call", "check_call", "check_output")
                and isinstance(first, (ast.List, ast.Tuple))
                and first.elts
                and isinstance(first.elts[0], ast.Constant)
                and first.elts[0].value == "git"
            ):
                found.append(f"line {node.lineno}: subprocess git")
            elif (
                name == "getattr"
                and first is not None
                and (
                    (isinstance(first, ast.Name) and first.id == "store")
                    or (isinstance(first, ast.Attribute) and first.attr == "store")
                )
            ):
                found.append(f"line {node.lineno}: getattr(store, ...)")
    return found


def test_git_is_started_inside_the_store_only():
    """runner/store/ is the one place that knows git: the rest asks the store contract (or
    runner.store.gitcli's named questions: a config value, git's version), never runs git
    itself nor probes a store for what it might have."""
    found = {name: calls for name, path in modules().items() if part(name) != "store" and (calls := git_calls(path))}
    assert sorted(set(found) - set(GIT_OUTSIDE_THE_STORE)) == [], found
    assert sorted(set(GIT_OUTSIDE_THE_STORE) - set(found)) == [], "an allowance no longer needed"


def test_the_worker_reaches_the_store_through_the_queue_and_the_contract_only():
    """The worker imports runner.store (the contract: Store, Workspace and their values) and
    nothing under it; the hooks never import the queue (issue 47.1)."""
    wrong = [
        f"{source} imports {target}"
        for source, path in modules().items()
        if part(source) == "worker"
        for target in imports_of(path)
        if target.startswith("runner.store.")
    ]
    wrong += [
        f"{source} imports {target}"
        for source, path in modules().items()
        if part(source) == "hooks"
        for target in imports_of(path)
        if part(target) == "queue"
    ]
    assert wrong == []
