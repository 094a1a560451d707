"""The design card's top level (issue 34, point 1): the git hooks and the unit templates live
in hooks/, systemd/, launchd/ and schtasks/ at the top of the repository, the only copy; the
wheel ships them, and runner finds them the same way from the wheel as from this checkout.

The wheel is built from this repository with hatchling (the build backend pyproject.toml
names), installed with pip into an empty venv (no index, no dependencies: this venv's
site-packages are put on the new venv's path by a .pth file, after its own, so the runner it
imports is the wheel's), and run from a folder outside the repository with no PYTHONPATH.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from runner.resources import PLACEHOLDER_RE
from runner.schedules.base import as_text

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("hooks", "systemd", "launchd", "schtasks")
# Paths on the computer the units are for (as tests/test_schedules.py's ELSEWHERE).
ELSEWHERE = {
    "systemd": ["--python", "/opt/venv/bin/python", "--target-repo", "/srv/work/repo"],
    "launchd": ["--python", "/Users/alice/venv/bin/python", "--target-repo", "/Users/alice/plan"],
    "schtasks": ["--python", "C:\\Python311\\python.exe", "--target-repo", "C:\\work\\repo"],
}
# Every template, and the files of `install-schedule --os OS --mode MODE --id host-a` made from it.
RENDERED_FROM = [
    ("systemd/runner-worker@.service", "systemd", "daemon", "runner-worker@.service"),
    ("systemd/instance-service.conf", "systemd", "daemon", "runner-worker@host-a.service.d/runner.conf"),
    ("systemd/runner-tick@.service", "systemd", "tick", "runner-tick@.service"),
    ("systemd/runner-tick@.timer", "systemd", "tick", "runner-tick@.timer"),
    ("systemd/instance-service.conf", "systemd", "tick", "runner-tick@host-a.service.d/runner.conf"),
    ("systemd/instance-timer.conf", "systemd", "tick", "runner-tick@host-a.timer.d/runner.conf"),
    ("launchd/worker.plist", "launchd", "daemon", "runner.worker.host-a.plist"),
    ("launchd/tick.plist", "launchd", "tick", "runner.tick.host-a.plist"),
    ("schtasks/worker.xml", "schtasks", "daemon", "runner-worker-host-a.xml"),
    ("schtasks/tick.xml", "schtasks", "tick", "runner-tick-host-a.xml"),
]
HOOKS = ("pre-commit", "pre-receive")


def shipped_files() -> list[str]:
    """Every file of the four folders but their READMEs, as 'folder/name'."""
    return sorted(
        f"{folder}/{path.relative_to(ROOT / folder).as_posix()}"
        for folder in FOLDERS
        for path in (ROOT / folder).rglob("*")
        if path.is_file() and path.name != "README.md"
    )


def run(argv: list, cwd: Path, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert not check or done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def clean_env(home: Path) -> dict:
    """No PYTHONPATH and no way back to this checkout; a HOME, and no OS scheduler to reach."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "RUNNER_", "GIT_", "XDG_"))}
    runtime = home / "no-runtime"
    runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
    return {
        **env,
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(runtime),
        "RUNNER_SCHEDULE_NO_ACTIVATE": "1",
        "GIT_AUTHOR_NAME": "alice",
        "GIT_AUTHOR_EMAIL": "alice@example.com",
        "GIT_COMMITTER_NAME": "alice",
        "GIT_COMMITTER_EMAIL": "alice@example.com",
    }


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty venv with runner installed from a wheel built from this repository."""
    base = tmp_path_factory.mktemp("wheel")
    env = clean_env(base / "home")
    run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", base / "dist"], ROOT, env)
    (wheel,) = (base / "dist").glob("runner_queue-*.whl")
    venv = base / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], base, env)
    python = venv / "bin" / "python"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "-q",
            wheel,
        ],
        base,
        env,
    )
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], base, env).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "runner-test-dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    return venv


def test_the_four_folders_are_at_the_top_and_are_the_only_copy():
    from runner.resources import SHIPPED_FOLDERS, shipped_folder

    assert SHIPPED_FOLDERS == FOLDERS
    for folder in FOLDERS:
        assert shipped_folder(folder) == ROOT / folder  # what this checkout's runner reads
    templates = sorted({template for template, *_ in RENDERED_FROM})
    assert templates == [f for f in shipped_files() if not f.startswith("hooks/")], (
        "a template nothing renders, or one the tests miss"
    )
    assert sorted(os.listdir(ROOT / "hooks")) == sorted([*HOOKS, "README.md"])
    # No second copy: no other file of the repository (but the rendered golden files) has a template's bytes.
    tracked = run(["git", "ls-files", "-z"], ROOT, dict(os.environ)).stdout.split("\0")
    contents = {(ROOT / name).read_bytes(): name for name in shipped_files()}
    copies = [
        f"{name} copies {contents[data]}"
        for name in tracked
        if name
        and not name.startswith(tuple(f"{f}/" for f in FOLDERS))
        and not name.startswith("tests/golden/")
        and (ROOT / name).is_file()
        and (data := (ROOT / name).read_bytes()) in contents
    ]
    assert copies == []
    assert not (ROOT / "runner" / "_data").exists() and not list((ROOT / "runner").rglob("templates"))


def test_the_wheel_ships_the_four_folders_and_runner_reads_them_there(wheel_venv: Path, tmp_path: Path):
    probe = (
        "import json, runner, runner.resources as r; "
        "print(json.dumps([runner.__file__, {f: str(r.shipped_folder(f)) for f in r.SHIPPED_FOLDERS}]))"
    )
    out = run([wheel_venv / "bin" / "python", "-c", probe], tmp_path, clean_env(tmp_path / "home")).stdout
    package_file, folders = __import__("json").loads(out)
    package = Path(package_file).parent
    assert package.is_relative_to(wheel_venv), f"the venv imported runner from {package}, not from the wheel"
    for folder in FOLDERS:
        assert Path(folders[folder]) == package / "_data" / folder
    for name in shipped_files():
        assert (package / "_data" / name).read_bytes() == (ROOT / name).read_bytes(), name


@pytest.mark.parametrize("scheduler", ("systemd", "launchd", "schtasks"))
def test_every_unit_renders_from_the_wheel_as_from_the_checkout(wheel_venv: Path, tmp_path: Path, scheduler: str):
    env = clean_env(tmp_path / "home")
    checkout_env = {**env, "PYTHONPATH": str(ROOT)}
    for mode in ("daemon", "tick"):
        args = [
            "install-schedule",
            "--os",
            scheduler,
            "--mode",
            mode,
            "--id",
            "host-a",
            "--tag",
            "gpu",
            *ELSEWHERE[scheduler],
        ]
        wheel_out, checkout_out = tmp_path / f"wheel-{mode}", tmp_path / f"checkout-{mode}"
        run([wheel_venv / "bin" / "runner", *args, "--output", wheel_out], tmp_path, env)
        run([sys.executable, "-m", "runner", *args, "--output", checkout_out], tmp_path, checkout_env)
        rendered = sorted(p.relative_to(wheel_out).as_posix() for p in wheel_out.rglob("*") if p.is_file())
        assert rendered == sorted(
            p.relative_to(checkout_out).as_posix() for p in checkout_out.rglob("*") if p.is_file()
        )
        expected = sorted(out for _, os_name, m, out in RENDERED_FROM if (os_name, m) == (scheduler, mode))
        assert rendered == expected
        for name in rendered:
            assert (wheel_out / name).read_bytes() == (checkout_out / name).read_bytes(), name
            assert not PLACEHOLDER_RE.search(as_text((wheel_out / name).read_bytes())), f"{name}: a placeholder left"


def test_every_hook_renders_from_the_wheel_and_guards_the_queue(wheel_venv: Path, tmp_path: Path):
    env = clean_env(tmp_path / "home")
    runner = wheel_venv / "bin" / "runner"
    bare, clone = tmp_path / "remote.git", tmp_path / "clone"
    run(["git", "init", "-q", "--bare", bare], tmp_path, env)
    run(["git", "clone", "-q", bare, clone], tmp_path, env)
    run([runner, "install-hooks", "--server", bare], tmp_path, env)
    run([runner, "install-hooks", "--repo", clone], tmp_path, env)
    site = next((wheel_venv / "lib").glob("python3*/site-packages"))
    for hook in (bare / "hooks" / "pre-receive", clone / ".git" / "hooks" / "pre-commit"):
        text = hook.read_text()
        assert f"PYTHON={wheel_venv / 'bin' / 'python'}\n" in text and f"PYTHONPATH={site}$" in text.replace(
            "{PYTHONPATH:+", "$"
        ), text
        assert not PLACEHOLDER_RE.search(text), f"{hook.name}: a placeholder left"

    run([runner, "init"], clone, env)  # its push goes through the wheel's pre-receive
    run([runner, "add", "First step", "--id", "01-a", "--run", '["true"]'], clone, env)
    run(["git", "fetch", "-q", "origin"], clone, env)
    run(["git", "checkout", "-q", "-b", "edit", "origin/runner/queue"], clone, env)
    step = clone / "plans" / "steps" / "01-a.md"
    original = step.read_text()
    step.write_text(original.replace("title: First step\n", "title: First step\nstatus: done\n"))
    run(["git", "commit", "-q", "-am", "mark it done by hand"], clone, env)
    pushed = run(["git", "push", "origin", "HEAD:runner/queue"], clone, env, check=False)
    assert pushed.returncode != 0 and "changes runner-managed status without a runner event" in pushed.stderr, (
        pushed.stderr
    )

    step.write_text("---\nstep: 01-a\ntitle: [unclosed\n---\n")
    run(["git", "add", step], clone, env)
    committed = run(["git", "commit", "-q", "-m", "a broken step"], clone, env, check=False)
    assert committed.returncode != 0 and f"{step.relative_to(clone).as_posix()}:" in committed.stderr, committed.stderr


def test_the_wheel_is_runner_queue_with_publish_ready_metadata_and_the_runner_command(wheel_venv: Path, tmp_path: Path):
    """The name `runner` on the package index is another project's: the distribution is
    runner-queue, and it installs the `runner` command and the `runner` package (issue 46)."""
    import email
    import zipfile

    import runner

    (wheel,) = (wheel_venv.parent / "dist").glob("runner_queue-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        info = f"runner_queue-{runner.__version__}.dist-info"
        metadata = email.message_from_bytes(archive.read(f"{info}/METADATA"))
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        shipped_license = archive.read(f"{info}/licenses/LICENSE")
        packages = {name.split("/")[0] for name in archive.namelist() if not name.startswith(info)}
    assert (metadata["Name"], metadata["Version"]) == ("runner-queue", runner.__version__)
    assert metadata["License-Expression"] == "MIT" and metadata["License-File"] == "LICENSE"
    assert shipped_license == (ROOT / "LICENSE").read_bytes()
    assert metadata["Author"] and metadata["Summary"] and metadata["Requires-Python"] == ">=3.11"
    classifiers = metadata.get_all("Classifier")
    assert "Programming Language :: Python :: 3.11" in classifiers and "Environment :: Console" in classifiers
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert entry_points.split() == ["[console_scripts]", "runner", "=", "runner.__main__:main"]
    assert packages == {"runner"}  # one import package, named runner
    env = clean_env(tmp_path / "home")
    assert run([wheel_venv / "bin" / "runner", "--version"], tmp_path, env).stdout == f"runner {runner.__version__}\n"
    assert sorted(p.name for p in (wheel_venv / "bin").iterdir() if "runner" in p.name) == ["runner"]


def test_bash_completes_the_installed_runners_commands_and_options(wheel_venv: Path, tmp_path: Path):
    """`runner completion bash` in a real bash, against the wheel's `runner` command: a command's
    name, and a command's options (every command is built for a completion request, though a run
    builds only its own)."""
    env = {**clean_env(tmp_path / "home"), "PATH": f"{wheel_venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}

    def completed(*words: str) -> list[str]:
        script = (
            f'eval "$(runner completion bash)"; COMP_WORDS=({" ".join(words)}); COMP_CWORD={len(words) - 1}; '
            '_runner_completion runner; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        return run(["bash", "--norc", "--noprofile", "-c", script], tmp_path, env).stdout.split()

    run([wheel_venv / "bin" / "runner", "--help"], tmp_path, env)  # kept: `runner` with no arguments may print it
    assert completed("runner", "cla") == ["claim"]
    assert completed("runner", "con") == ["config"]
    assert completed("runner", "claim", "--i") == ["--id", "--ignore-deps"]
    assert "install-schedule" in completed("runner", "in")
    for shell in ("zsh", "fish"):
        script = run([wheel_venv / "bin" / "runner", "completion", shell], tmp_path, env).stdout
        assert f"_RUNNER_COMPLETE=complete_{shell}" in script, script


def test_every_declared_dependency_is_imported():
    """A dependency nothing imports is a promise the code does not keep (issue 34, point 8)."""
    import ast
    import re
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    modules = {re.split(r"[<>=!~ \[;]", spec, maxsplit=1)[0].lower() for spec in declared}
    import_names = {name: {"pyyaml": "yaml"}.get(name, name.replace("-", "_")) for name in modules}
    imported = set()
    for path in (ROOT / "runner").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    assert sorted(name for name, module in import_names.items() if module not in imported) == []
    assert "pygit2" in modules and "pyyaml" in modules  # the parse above reads the list
