"""OS schedules (issues 4, 14, 15): rendered files checked by the OS's own validators,
golden files, hostile values, the worker options a schedule carries, the repository
check (real git repositories), install/uninstall round trips in a temporary HOME, and,
where a user systemd manager can be started here, enable and status against it.

No test runs systemctl, launchctl or schtasks against the machine's own managers: the
HOME is a temporary folder and XDG_RUNTIME_DIR an empty one, so `systemctl --user`
reaches no manager unless a test starts its own (the `user_manager` fixture).

Refresh the golden files with RUNNER_UPDATE_GOLDEN=1 after an intended change.
"""

from __future__ import annotations

import json
import os
import plistlib
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import zygote

from runner import schedules
from runner.core.errors import BadInput
from runner.schedules import build_spec, choose_target
from runner.schedules.base import UTF16_BOM, as_text
from runner.schedules.launchd import read_env_file
from runner.schedules.schtasks import iso_duration, log_file
from runner.schedules.systemd import quote

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "schedules"
SCHEMAS = ROOT / "tests" / "data" / "schemas"
UPDATE_GOLDEN = os.environ.get("RUNNER_UPDATE_GOLDEN") == "1"
ON_LINUX = sys.platform.startswith("linux")
NATIVE = schedules.native()
TASK_NS = {"t": "http://schemas.microsoft.com/windows/2004/02/mit/task"}

# Values a shell, an XML parser or a unit-file parser would all misread.
HOSTILE_DIR = "sp ace %h $HOME & <x> ;#`! 'q\" ü"
HOSTILE_ENV_VALUE = 'it\'s "$HOME" & <b>%h</b> ; `x`'
HOSTILE_TAG = "gpu&<x>'$HOME\"%h;`ü"

FIXED = {"worker_id": "host-a", "python": "/opt/venv/bin/python", "repo": "/srv/work/repo", "home": "/home/alice"}
FIXED_WINDOWS = {
    "worker_id": "host-a",
    "python": "C:\\Python311\\python.exe",
    "repo": "C:\\work\\repo",
    "home": "C:\\Users\\alice",
}
# Paths on another computer, in its own path rules, for --output.
ELSEWHERE = {
    "systemd": ["--python", "/opt/venv/bin/python", "--target-repo", "/srv/work/repo"],
    "launchd": ["--python", "/Users/alice/venv/bin/python", "--target-repo", "/Users/alice/plan"],
    "schtasks": ["--python", "C:\\Python311\\python.exe", "--target-repo", "C:\\work\\repo"],
}


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throwaway HOME, no user service manager to reach, and no activation."""
    home = tmp_path / "home"
    home.mkdir()
    runtime = tmp_path / "no-runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    for name in ("XDG_CONFIG_HOME", "LOCALAPPDATA", "DBUS_SESSION_BUS_ADDRESS", "RUNNER_QUEUE_BRANCH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(schedules.NO_ACTIVATE_ENV, "1")
    return home


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def make_clone(path: Path, *, branch: str | None = "runner/queue") -> Path:
    """A real git repository; with `branch`, a local queue branch in it."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "start")
    if branch:
        git(path, "branch", branch)
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_clone(tmp_path / "repo")


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


class Cli:
    def invoke(self, args: list[str], env: dict[str, str] | None = None) -> Result:
        """The command line, in a process of its own."""
        done = zygote.run(args, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
        return Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def cli() -> Cli:
    return Cli()


@pytest.fixture(scope="module")
def task_schema():
    xmlschema = pytest.importorskip("xmlschema")
    return xmlschema.XMLSchema(str(SCHEMAS / "task.xsd"))


def here(**options) -> schedules.Target:
    """A schedule for this computer, as install-schedule builds it."""
    options = {
        "scheduler": "systemd",
        "worker_id": "host-a",
        "target_repo": None,
        "python": None,
        "files_only": False,
        **options,
    }
    return choose_target(**options)


def hostile_python(tmp_path: Path, name: str = HOSTILE_DIR) -> str:
    """The running interpreter behind a symlink in a hostile folder (a venv-like path)."""
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "python"
    if not link.exists():
        link.symlink_to(sys.executable)
    return str(link)


def render(spec) -> list:
    return schedules.get(spec.scheduler).render(spec)


def write_rendered(files, folder: Path) -> None:
    for file in files:
        path = folder / file.relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(file.content)


def tree(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def files_in(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir())


def exec_start(dropin: str) -> str:
    return next(line for line in dropin.splitlines() if line.startswith("ExecStart=")).removeprefix("ExecStart=")


def task_arguments(content: bytes) -> str:
    task = ET.fromstring(as_text(content).split("?>", 1)[1])
    return task.findtext("t:Actions/t:Exec/t:Arguments", namespaces=TASK_NS)


# --- inputs ------------------------------------------------------------------


@pytest.mark.parametrize("worker_id", ["host-a", "a", "A.b_c-9", "x" * 64, "9lives"])
def test_allowed_worker_ids(worker_id: str) -> None:
    assert build_spec(worker_id=worker_id, scheduler="systemd", repo="/r", python="/p").worker_id == worker_id


@pytest.mark.parametrize(
    "worker_id",
    ["", "a b", "a/b", "a$b", "a%b", "a\nb", "é", "x" * 65, "a:b", "a@b", "...", ".a", "-a", "a..b", "a.lock"],
)
def test_other_worker_ids_are_refused_by_the_shared_rule(worker_id: str) -> None:
    with pytest.raises(BadInput, match="worker id"):
        build_spec(worker_id=worker_id, scheduler="systemd", repo="/r", python="/p")


def test_interpreter_is_the_running_one_not_resolved(tmp_path: Path) -> None:
    assert build_spec(worker_id="w", scheduler="systemd").python == sys.executable
    link = hostile_python(tmp_path, "venv/bin")
    spec = build_spec(worker_id="w", scheduler="systemd", repo="/r", python=link)
    line = exec_start(render(spec)[-1].content.decode())
    assert f'"{link}"' not in line  # a plain path needs no quotes...
    assert line.startswith(link + " ") and os.path.realpath(link) not in line  # ...and stays a symlink


def test_repository_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert build_spec(worker_id="w", scheduler="systemd", repo="sub/../repo", python="/p").repo == str(
        tmp_path / "repo"
    )
    assert build_spec(worker_id="w", scheduler="systemd", python="/p").repo == str(tmp_path)


@pytest.mark.parametrize("scheduler", schedules.NAMES)
@pytest.mark.parametrize("field", ["repo", "python", "env_file"])
def test_newlines_and_control_characters_in_paths_are_refused(scheduler: str, field: str) -> None:
    values = dict(FIXED_WINDOWS if scheduler == "schtasks" else FIXED)
    values[field] = values.get(field, "/etc/runner.env") + "\nExecStartPre=/bin/evil"
    with pytest.raises(BadInput, match="control character"):
        build_spec(scheduler=scheduler, **values)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("tags", ["gpu\nExecStartPre=/bin/evil"]),
        ("tags", [""]),
        ("tags", ["two words"]),
        ("remote", "-x"),
        ("queue_branch", "a\tb"),
    ],
)
def test_tags_remote_and_branch_must_be_one_word(option: str, value) -> None:
    with pytest.raises(BadInput, match="one word|start with '-'"):
        build_spec(scheduler="systemd", **{option: value}, **FIXED)


def test_interval_is_the_tick_period_or_the_daemon_poll_interval() -> None:
    assert build_spec(scheduler="systemd", mode="tick", **FIXED).interval == 300
    assert build_spec(scheduler="systemd", mode="daemon", **FIXED).interval is None  # the worker's own default
    daemon = build_spec(scheduler="systemd", mode="daemon", interval=15, **FIXED)
    assert "--interval 15" in exec_start(render(daemon)[-1].content.decode())
    tick = build_spec(scheduler="systemd", mode="tick", interval=600, **FIXED)
    assert "--interval" not in " ".join(schedules.worker_argv(tick))  # a tick's period is the timer's
    with pytest.raises(BadInput, match="1 or more"):
        build_spec(scheduler="systemd", mode="tick", interval=0, **FIXED)


def test_grace_belongs_to_the_daemon_and_sets_the_stop_timeouts() -> None:
    with pytest.raises(BadInput, match="--grace applies to --mode daemon"):
        build_spec(scheduler="systemd", mode="tick", grace=10, **FIXED)
    systemd = {f.relpath: f.content.decode() for f in render(build_spec(scheduler="systemd", grace=120, **FIXED))}
    dropin = systemd["runner-worker@host-a.service.d/runner.conf"]
    assert "--grace 120" in exec_start(dropin) and "TimeoutStopSec=180s" in dropin
    (plist,) = render(build_spec(scheduler="launchd", grace=120, **FIXED))
    assert plistlib.loads(plist.content)["ExitTimeOut"] == 180
    default = {f.relpath: f.content.decode() for f in render(build_spec(scheduler="systemd", **FIXED))}
    assert "TimeoutStopSec=90s" in default["runner-worker@host-a.service.d/runner.conf"]  # 30 s grace + 60


def test_the_worker_command_line_carries_every_option_in_order() -> None:
    options = dict(
        FIXED, tags=["gpu", "big", "gpu"], grace=45, interval=20, remote="upstream", queue_branch="team/queue"
    )
    daemon = build_spec(scheduler="systemd", **options)
    assert schedules.worker_argv(daemon) == [
        "/opt/venv/bin/python",
        "-m",
        "runner",
        "worker",
        "--id",
        "host-a",
        "--tag",
        "gpu",
        "--tag",
        "big",
        "--interval",
        "20",
        "--grace",
        "45",
        "--remote",
        "upstream",
        "--queue-branch",
        "team/queue",
        "--repo",
        "/srv/work/repo",
    ]
    tick = build_spec(scheduler="systemd", mode="tick", **dict(options, grace=None))
    assert schedules.worker_argv(tick) == [
        "/opt/venv/bin/python",
        "-m",
        "runner",
        "tick",
        "--id",
        "host-a",
        "--tag",
        "gpu",
        "--tag",
        "big",
        "--remote",
        "upstream",
        "--queue-branch",
        "team/queue",
        "--repo",
        "/srv/work/repo",
    ]
    assert (
        build_spec(scheduler="systemd", queue_branch="runner/queue", **FIXED).queue_branch is None
    )  # the default goes unsaid


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(BadInput) as caught:
        build_spec(
            worker_id="bad id", scheduler="systemd", mode="sometimes", python="relative/python", repo="/r", tags=["a b"]
        )
    assert len(caught.value.problems) == 4


# --- golden files --------------------------------------------------------------


def golden_cases():
    env_file = str(GOLDEN / "host-a.env")
    daemon_options = {"tags": ["gpu"], "interval": 15, "grace": 120, "remote": "origin", "queue_branch": "team/queue"}
    return [
        (
            "systemd/daemon",
            dict(FIXED, scheduler="systemd", mode="daemon", env_file="/etc/runner/host-a.env", **daemon_options),
        ),
        ("systemd/tick", dict(FIXED, scheduler="systemd", mode="tick", interval=120, tags=["gpu"])),
        ("launchd/daemon", dict(FIXED, scheduler="launchd", mode="daemon", env_file=env_file, **daemon_options)),
        ("launchd/tick", dict(FIXED, scheduler="launchd", mode="tick", interval=600, tags=["gpu"])),
        ("schtasks/daemon", dict(FIXED_WINDOWS, scheduler="schtasks", mode="daemon", **daemon_options)),
        ("schtasks/tick", dict(FIXED_WINDOWS, scheduler="schtasks", mode="tick", interval=300, tags=["gpu"])),
    ]


@pytest.mark.parametrize(("name", "options"), golden_cases(), ids=[c[0] for c in golden_cases()])
def test_rendered_files_match_golden(name: str, options: dict) -> None:
    folder = GOLDEN / name
    # Task files are UTF-16LE with a BOM; their golden copies are UTF-8 to stay readable.
    rendered = {file.relpath: as_text(file.content).encode("utf-8") for file in render(build_spec(**options))}
    if UPDATE_GOLDEN:
        shutil.rmtree(folder, ignore_errors=True)
        for relpath, content in rendered.items():
            (folder / relpath).parent.mkdir(parents=True, exist_ok=True)
            (folder / relpath).write_bytes(content)
    assert sorted(rendered) == files_in(folder), "the set of rendered files changed"
    for relpath, content in rendered.items():
        assert content.decode("utf-8") == (folder / relpath).read_text(encoding="utf-8"), relpath


# --- --tag gpu in every format, checked by each format's validator ---------------------

needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed"
)
needs_xmllint = pytest.mark.skipif(
    shutil.which("xmllint") is None, reason="xmllint not installed (apt-get install libxml2-utils)"
)


def systemd_verify(unit_dir: Path, units: list[str], tmp_path: Path) -> str:
    """All output of `systemd-analyze --user verify`: it exits 0 on many mistakes, so any output fails."""
    # A short folder: the user units systemd-analyze reads put socket paths in it, which may
    # not be longer than 108 bytes (tmp_path is long under pytest-xdist).
    runtime = Path(tempfile.mkdtemp(prefix="xdg-", dir="/tmp"))
    done = subprocess.run(
        ["systemd-analyze", "--user", "verify", "--man=no", *[str(unit_dir / u) for u in units]],
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    shutil.rmtree(runtime, ignore_errors=True)
    return (done.stdout + done.stderr).strip() + ("" if done.returncode == 0 else f"\n(exit {done.returncode})")


def xmllint_plist(path: Path) -> tuple[int, str]:
    done = subprocess.run(
        ["xmllint", "--nonet", "--noout", "--valid", str(path)],
        env={**os.environ, "XML_CATALOG_FILES": str(SCHEMAS / "plist-catalog.xml")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout + done.stderr


LOADS = {  # what loads a file written with --output, on the computer it is for
    "systemd": [
        "copy the files in {out} into ~/.config/systemd/user (keeping their folders), then run:",
        "  systemctl --user daemon-reload",
        "  systemctl --user enable --now runner-worker@host-a.service",
    ],
    "launchd": [
        "copy the files in {out} into ~/Library/LaunchAgents (keeping their folders), then run:",
        "  launchctl enable gui/$(id -u)/runner.worker.host-a",
        "  launchctl bootstrap gui/$(id -u) ~/Library/LaunchAgents/runner.worker.host-a.plist",
    ],
    "schtasks": [
        "run, in the folder that holds the file:",
        "  schtasks /Create /XML runner-worker-host-a.xml /TN runner\\worker-host-a /F",
    ],
}


@pytest.mark.parametrize("scheduler", schedules.NAMES)
def test_output_says_the_command_that_loads_the_written_file_on_its_os(scheduler: str, tmp_path: Path, cli) -> None:
    out = tmp_path / "out"
    result = cli.invoke(
        ["install-schedule", "--os", scheduler, "--id", "host-a", "--output", str(out), *ELSEWHERE[scheduler]]
    )
    assert result.exit_code == 0, result.output
    said = result.output.splitlines()
    first, *commands = [line.format(out=out) for line in LOADS[scheduler]]
    at = said.index(f"to load it on the computer it is for, {first}")
    assert said[at + 1 : at + 1 + len(commands)] == commands


@pytest.mark.parametrize("scheduler", schedules.NAMES)
@pytest.mark.parametrize("mode", schedules.MODES)
def test_install_schedule_tag_gpu_renders_the_tag_in_every_format(
    scheduler: str, mode: str, repo: Path, tmp_path: Path, cli, request
) -> None:
    out = tmp_path / "out"
    where = ["--repo", str(repo)] if NATIVE and scheduler == NATIVE.name else ELSEWHERE[scheduler]
    result = cli.invoke(
        [
            "install-schedule",
            "--os",
            scheduler,
            "--id",
            "host-a",
            "--mode",
            mode,
            "--tag",
            "gpu",
            "--output",
            str(out),
            *where,
        ]
    )
    assert result.exit_code == 0, result.output
    (path,) = [out / p for p in files_in(out) if "host-a" in p and not p.endswith("timer.d/runner.conf")]
    content = path.read_bytes()
    if scheduler == "systemd":
        assert f" {mode if mode == 'tick' else 'worker'} --id host-a --tag gpu --repo " in exec_start(content.decode())
        if shutil.which("systemd-analyze"):
            units = (
                ["runner-worker@host-a.service"]
                if mode == "daemon"
                else ["runner-tick@host-a.timer", "runner-tick@host-a.service"]
            )
            assert systemd_verify(out, units, tmp_path) == ""
    elif scheduler == "launchd":
        arguments = plistlib.loads(content)["ProgramArguments"]
        assert arguments[arguments.index("--id") : arguments.index("--repo")] == ["--id", "host-a", "--tag", "gpu"]
        if shutil.which("xmllint"):
            assert xmllint_plist(path) == (0, "")
    else:
        assert " --id host-a --tag gpu --repo " in task_arguments(content)
        request.getfixturevalue("task_schema").validate(str(path))


# --- systemd ---------------------------------------------------------------------


@needs_systemd_analyze
@pytest.mark.parametrize("mode", schedules.MODES)
def test_systemd_units_pass_systemd_analyze_with_hostile_values(mode: str, tmp_path: Path) -> None:
    # The interpreter's folder holds what systemd allows in an executable name;
    # the repository, env file and tag hold everything else.
    python = hostile_python(tmp_path, "sp ace %h &<x>;#`!ü")
    env_file = tmp_path / HOSTILE_DIR / "worker.env"
    env_file.parent.mkdir(parents=True, exist_ok=True)
    env_file.write_text(f"TOKEN='{HOSTILE_ENV_VALUE}'\n")
    spec = build_spec(
        worker_id="a.b_c-9",
        scheduler="systemd",
        mode=mode,
        python=python,
        tags=[HOSTILE_TAG],
        repo=str(tmp_path / HOSTILE_DIR / "repo"),
        env_file=env_file,
    )
    unit_dir = tmp_path / "units"
    write_rendered(render(spec), unit_dir)
    units = (
        ["runner-worker@a.b_c-9.service"]
        if mode == "daemon"
        else ["runner-tick@a.b_c-9.timer", "runner-tick@a.b_c-9.service"]
    )
    assert systemd_verify(unit_dir, units, tmp_path) == ""


@needs_systemd_analyze
def test_systemd_analyze_reports_what_it_should(tmp_path: Path) -> None:
    """The validator is live: a unit without the drop-in, or with a typo, produces output."""
    unit_dir = tmp_path / "units"
    write_rendered(render(build_spec(scheduler="systemd", **dict(FIXED, python=sys.executable))), unit_dir)
    dropin = unit_dir / "runner-worker@host-a.service.d" / "runner.conf"
    dropin.write_text(dropin.read_text() + "Restart=sometimes\n")
    assert "sometimes" in systemd_verify(unit_dir, ["runner-worker@host-a.service"], tmp_path)
    dropin.unlink()
    assert "ExecStart" in systemd_verify(unit_dir, ["runner-worker@host-a.service"], tmp_path)


def test_systemd_daemon_and_timer_settings() -> None:
    daemon = {f.relpath: f.content.decode() for f in render(build_spec(scheduler="systemd", **FIXED))}
    service = daemon["runner-worker@.service"]
    unit_section, service_section = service.split("[Service]")[0], service.split("[Service]")[1]
    for line in ("StartLimitIntervalSec=", "StartLimitBurst="):
        assert line in unit_section  # start limits belong in [Unit]
    for line in ("Type=exec", "Restart=on-failure", "KillMode=mixed"):
        assert line in service_section
    assert "WantedBy=default.target" in service and "multi-user.target" not in service
    tick = {
        f.relpath: f.content.decode()
        for f in render(build_spec(scheduler="systemd", mode="tick", interval=600, **FIXED))
    }
    timer = tick["runner-tick@.timer"] + tick["runner-tick@host-a.timer.d/runner.conf"]
    assert "AccuracySec=1s" in timer and "RandomizedDelaySec=60s" in timer and "OnUnitActiveSec=600s" in timer
    assert (
        exec_start(tick["runner-tick@host-a.service.d/runner.conf"])
        == "/opt/venv/bin/python -m runner tick --id host-a --repo /srv/work/repo"
    )


@pytest.mark.parametrize(
    ("arg", "word"),
    [
        ("plain/path-1.0", "plain/path-1.0"),
        ("a b", '"a b"'),
        ("100%", '"100%%"'),
        ("$HOME", '"$$HOME"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        (";", '";"'),
        ("", '""'),
    ],
)
def test_systemd_quoting(arg: str, word: str) -> None:
    assert quote(arg) == word


@pytest.mark.parametrize("char", ["$", '"', "'", "\\"])
def test_systemd_refuses_interpreter_paths_it_cannot_run(char: str) -> None:
    with pytest.raises(BadInput, match="--python"):
        build_spec(scheduler="systemd", **dict(FIXED, python=f"/opt/v{char}env/bin/python"))


# --- launchd -----------------------------------------------------------------------

PLIST_TYPES = {
    "Label": str,
    "ProgramArguments": list,
    "EnvironmentVariables": dict,
    "RunAtLoad": bool,
    "KeepAlive": dict,
    "ThrottleInterval": int,
    "ExitTimeOut": int,
    "ProcessType": str,
    "StandardOutPath": str,
    "StandardErrorPath": str,
    "StartInterval": int,
}


def hostile_launchd_spec(tmp_path: Path, mode: str):
    env_file = tmp_path / HOSTILE_DIR / "worker.env"
    env_file.parent.mkdir(parents=True, exist_ok=True)
    env_file.write_text(f'# comment\nTOKEN=\'{HOSTILE_ENV_VALUE}\'\nexport QUOTED="a \\"b\\" & <c>"\nBARE=x<y>&z\n')
    return build_spec(
        worker_id="a.b_c-9",
        scheduler="launchd",
        mode=mode,
        python=f"/Users/al ice/{HOSTILE_DIR}/bin/python",
        repo=f"/Users/al ice/{HOSTILE_DIR}/repo",
        env_file=env_file,
        home="/Users/al ice",
        tags=[HOSTILE_TAG],
        interval=90 if mode == "tick" else None,
    )


@pytest.mark.parametrize("mode", schedules.MODES)
def test_launchd_plist_keys_and_types(mode: str, tmp_path: Path) -> None:
    spec = hostile_launchd_spec(tmp_path, mode)
    (file,) = render(spec)
    assert file.relpath == f"runner.{'worker' if mode == 'daemon' else 'tick'}.a.b_c-9.plist"
    agent = plistlib.loads(file.content)
    for key, value in agent.items():
        assert key in PLIST_TYPES, f"unexpected key {key}"
        assert type(value) is PLIST_TYPES[key], f"{key} is {type(value).__name__}"  # bool is not an int here
    assert agent["Label"] == file.relpath.removesuffix(".plist")
    assert agent["ProgramArguments"] == [
        spec.python,
        "-m",
        "runner",
        "worker" if mode == "daemon" else "tick",
        "--id",
        "a.b_c-9",
        "--tag",
        HOSTILE_TAG,
        "--repo",
        spec.repo,
    ]
    assert agent["RunAtLoad"] is True
    assert agent["ExitTimeOut"] > 30  # longer than the worker's SIGTERM grace
    environment = agent["EnvironmentVariables"]
    assert all(type(k) is str and type(v) is str for k, v in environment.items())
    assert environment["TOKEN"] == HOSTILE_ENV_VALUE
    assert environment["QUOTED"] == 'a "b" & <c>'
    assert environment["BARE"] == "x<y>&z"
    assert environment["PATH"].split(":")[0] == os.path.dirname(spec.python)
    assert "/usr/bin" in environment["PATH"].split(":")
    log = agent["StandardOutPath"]
    assert log == agent["StandardErrorPath"] and log.startswith("/Users/al ice/Library/Logs/runner/")
    if mode == "daemon":
        assert agent["KeepAlive"] == {"SuccessfulExit": False}  # restart after a crash, not a clean exit
        assert "StartInterval" not in agent
    else:
        assert agent["StartInterval"] == 90
        assert "KeepAlive" not in agent


@needs_xmllint
@pytest.mark.parametrize("mode", schedules.MODES)
def test_launchd_plist_is_valid_against_the_dtd(mode: str, tmp_path: Path) -> None:
    (file,) = render(hostile_launchd_spec(tmp_path, mode))
    path = tmp_path / file.relpath
    path.write_bytes(file.content)
    assert xmllint_plist(path) == (0, "")


@needs_xmllint
def test_plist_dtd_check_is_live(tmp_path: Path) -> None:
    """The validator rejects what launchd would: a value outside <string>."""
    (file,) = render(build_spec(scheduler="launchd", **FIXED))
    path = tmp_path / "broken.plist"
    path.write_bytes(file.content.replace(b"<string>-m</string>", b"<text>-m</text>"))
    assert xmllint_plist(path)[0] != 0


def test_launchd_env_file_with_a_bad_line_is_refused(tmp_path: Path) -> None:
    env_file = tmp_path / "bad.env"
    env_file.write_text("GOOD=1\nnot a setting\n2BAD=x\n")
    with pytest.raises(BadInput) as caught:
        read_env_file(str(env_file))
    assert [p.split(": ")[0] for p in caught.value.problems] == [f"{env_file}:2", f"{env_file}:3"]


# --- Task Scheduler ------------------------------------------------------------------


def hostile_schtasks_spec(mode: str, interval: int | None = None):
    # The tag without %: Task Scheduler would expand it (refused, see below).
    return build_spec(
        worker_id="a.b_c-9",
        scheduler="schtasks",
        mode=mode,
        interval=interval,
        tags=[HOSTILE_TAG.replace("%", "")],
        python="C:\\Program Files\\Py & <thon>\\python.exe",
        repo="C:\\Users\\A 'B' & <C>\\repo ;x",
    )


@pytest.mark.parametrize(("mode", "interval"), [("daemon", None), ("tick", 60), ("tick", 5400)])
def test_task_xml_is_valid_utf16_with_bom(mode: str, interval: int | None, tmp_path: Path, task_schema) -> None:
    spec = hostile_schtasks_spec(mode, interval)
    (file,) = render(spec)
    assert file.content[:2] == UTF16_BOM
    text = as_text(file.content)
    assert text.startswith('<?xml version="1.0" encoding="UTF-16"?>')
    path = tmp_path / file.relpath
    path.write_bytes(file.content)
    task_schema.validate(str(path))  # raises with the reason when invalid

    task = ET.parse(path).getroot()
    settings = task.find("t:Settings", TASK_NS)
    assert settings.findtext("t:MultipleInstancesPolicy", namespaces=TASK_NS) == "IgnoreNew"
    assert task.findtext("t:Actions/t:Exec/t:Command", namespaces=TASK_NS) == spec.python
    arguments = task.findtext("t:Actions/t:Exec/t:Arguments", namespaces=TASK_NS)
    log = "%LOCALAPPDATA%\\runner\\logs\\" + f"runner-{'worker' if mode == 'daemon' else 'tick'}-a.b_c-9.log"
    assert arguments == subprocess.list2cmdline(schedules.worker_argv(spec, log)[1:])
    assert "\"C:\\Users\\A 'B' & <C>\\repo ;x\"" in arguments
    repetition = task.findtext("t:Triggers/t:TimeTrigger/t:Repetition/t:Interval", namespaces=TASK_NS)
    if mode == "daemon":
        assert settings.findtext("t:ExecutionTimeLimit", namespaces=TASK_NS) == "PT0S"
        assert repetition == "PT1M"
    else:
        assert repetition == {60: "PT1M", 5400: "PT1H30M"}[interval]


def test_task_schema_is_live(task_schema) -> None:
    """The validator rejects what Task Scheduler would: a 30-second repetition."""
    (file,) = render(build_spec(scheduler="schtasks", mode="tick", interval=60, **FIXED_WINDOWS))
    text = as_text(file.content).replace("<Interval>PT1M</Interval>", "<Interval>PT30S</Interval>")
    assert not task_schema.is_valid(text)


def test_task_interval_under_a_minute_is_a_clear_error(cli) -> None:
    result = cli.invoke(
        [
            "install-schedule",
            "--os",
            "schtasks",
            "--id",
            "w",
            "--mode",
            "tick",
            "--interval",
            "59",
            "--dry-run",
            *ELSEWHERE["schtasks"],
        ]
    )
    assert result.exit_code == 2
    assert "at most once a minute" in result.stderr and "--interval 60" in result.stderr


@pytest.mark.parametrize(
    ("field", "value"), [("repo", "C:\\%USERPROFILE%\\repo"), ("python", "C:\\%PY%\\python.exe"), ("tags", ["%GPU%"])]
)
def test_task_refuses_percent_it_would_expand(field: str, value) -> None:
    with pytest.raises(BadInput, match="would expand"):
        build_spec(scheduler="schtasks", **dict(FIXED_WINDOWS, **{field: value}))


def test_task_refuses_env_file() -> None:
    with pytest.raises(BadInput, match="setx"):
        build_spec(scheduler="schtasks", env_file="C:\\runner.env", **FIXED_WINDOWS)


@pytest.mark.parametrize(
    ("seconds", "duration"), [(60, "PT1M"), (90, "PT1M30S"), (3600, "PT1H"), (86400, "P1D"), (90061, "P1DT1H1M1S")]
)
def test_iso_duration(seconds: int, duration: str) -> None:
    assert iso_duration(seconds) == duration


def test_task_log_file_is_expanded_by_windows_when_written_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALAPPDATA", "/somewhere")
    assert log_file("w", "tick", here=False) == "%LOCALAPPDATA%\\runner\\logs\\runner-tick-w.log"


# --- the repository: a clone of the queue, asked of git ------------------------------------


def test_repo_outside_a_git_repository_exits_2_naming_the_fix(tmp_path: Path, cli) -> None:
    plain = tmp_path / "not-a-repo"
    plain.mkdir()
    result = cli.invoke(["install-schedule", "--os", "systemd", "--id", "host-a", "--repo", str(plain), "--dry-run"])
    assert result.exit_code == 2
    assert f"{plain} is not a git repository" in result.stderr and "git clone" in result.stderr
    assert result.stdout == ""  # nothing previewed


def test_repo_without_the_queue_branch_exits_2_naming_runner_init(tmp_path: Path, cli) -> None:
    bare = make_clone(tmp_path / "no-queue", branch=None)
    result = cli.invoke(["install-schedule", "--os", "systemd", "--id", "host-a", "--repo", str(bare)])
    assert result.exit_code == 2
    assert "holds no queue branch runner/queue" in result.stderr and f"runner init --repo {bare}" in result.stderr


def test_a_remote_tracking_queue_branch_is_a_clone_of_the_queue(tmp_path: Path) -> None:
    origin = make_clone(tmp_path / "origin", branch="team/queue")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))  # team/queue only as refs/remotes/origin/team/queue
    assert "refs/heads/team/queue" not in git(clone, "for-each-ref")
    target = here(repo=clone, queue_branch="team/queue")
    assert "--queue-branch team/queue" in " ".join(schedules.worker_argv(target.spec))
    with pytest.raises(BadInput, match="no remote named 'upstream'"):
        here(repo=clone, queue_branch="team/queue", remote="upstream")
    with pytest.raises(BadInput, match="holds no queue branch team/queue"):
        here(repo=clone, queue_branch="team/queue", remote="none")  # local only: no local branch


def test_queue_branch_comes_from_the_environment_like_other_commands(
    repo: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNNER_QUEUE_BRANCH", "team/queue")
    result = cli.invoke(["install-schedule", "--os", "systemd", "--id", "host-a", "--repo", str(repo), "--dry-run"])
    assert result.exit_code == 2 and "holds no queue branch team/queue" in result.stderr


def test_local_problems_and_option_problems_are_reported_together(tmp_path: Path, cli) -> None:
    result = cli.invoke(
        [
            "install-schedule",
            "--os",
            "systemd",
            "--id",
            "a b",
            "--mode",
            "tick",
            "--grace",
            "5",
            "--repo",
            str(tmp_path / "nowhere"),
        ]
    )
    assert result.exit_code == 2
    assert (
        "worker id 'a b'" in result.stderr and "--grace applies" in result.stderr and "does not exist" in result.stderr
    )


# --- another computer: its own interpreter and paths ----------------------------------------

OTHER_POSIX = next((s for s in ("launchd", "systemd") if not NATIVE or s != NATIVE.name), "launchd")


def test_output_for_another_os_without_python_or_target_repo_says_what_it_assumed(
    tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # not a repository: nothing of this computer's is checked for another one
    out = tmp_path / "out"
    result = cli.invoke(["install-schedule", "--os", OTHER_POSIX, "--id", "host-a", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert f"assumed --python {sys.executable}" in result.stderr
    assert f"assumed --target-repo {tmp_path}" in result.stderr
    if OTHER_POSIX == "launchd":
        assert "assumed the home folder on the target Mac" in result.stderr
    given = cli.invoke(
        ["install-schedule", "--os", OTHER_POSIX, "--id", "host-a", "--output", str(out), *ELSEWHERE[OTHER_POSIX]]
    )
    assert (
        given.exit_code == 0 and "assumed --python" not in given.stderr and "assumed --target-repo" not in given.stderr
    )


@pytest.mark.skipif(sys.platform == "win32", reason="Windows files are this computer's own")
def test_windows_files_from_elsewhere_need_python_and_target_repo(tmp_path: Path, cli) -> None:
    result = cli.invoke(["install-schedule", "--os", "schtasks", "--id", "host-a", "--output", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "pass --python" in result.stderr and "pass --target-repo" in result.stderr
    assert not (tmp_path / "out").exists()


def test_launchd_home_on_another_computer_follows_the_target_repo(tmp_path: Path, cli) -> None:
    out = tmp_path / "out"
    result = cli.invoke(
        ["install-schedule", "--os", "launchd", "--id", "m", "--output", str(out), *ELSEWHERE["launchd"]]
    )
    assert result.exit_code == 0, result.output
    agent = plistlib.loads((out / "runner.worker.m.plist").read_bytes())
    assert agent["StandardOutPath"] == "/Users/alice/Library/Logs/runner/runner.worker.m.log"
    assert str(Path.home()) not in json.dumps(agent)


def test_target_repo_goes_with_output(repo: Path, cli) -> None:
    if NATIVE is None:
        pytest.skip("no native scheduler")
    result = cli.invoke(["install-schedule", "--id", "host-a", "--target-repo", str(repo)])
    assert result.exit_code == 2 and "--output" in result.stderr


@pytest.mark.parametrize("scheduler", [s for s in schedules.NAMES if not NATIVE or s != NATIVE.name])
def test_another_os_only_gets_files(scheduler: str, isolated_home: Path, tmp_path: Path, cli) -> None:
    args = [
        "install-schedule",
        "--os",
        scheduler,
        "--id",
        "host-a",
        "--mode",
        "tick",
        "--interval",
        "300",
        *ELSEWHERE[scheduler],
    ]
    refused = cli.invoke(args)
    assert refused.exit_code == 2 and "--output DIR" in refused.stderr
    out = tmp_path / "out"
    written = cli.invoke([*args, "--output", str(out)])
    assert written.exit_code == 0, written.output
    expected = {
        "launchd": ["runner.tick.host-a.plist"],
        "systemd": [
            "runner-tick@.service",
            "runner-tick@.timer",
            "runner-tick@host-a.service.d/runner.conf",
            "runner-tick@host-a.timer.d/runner.conf",
        ],
        "schtasks": ["runner-tick-host-a.xml"],
    }
    assert files_in(out) == sorted(expected[scheduler])
    assert files_in(isolated_home) == []


# --- install, status, uninstall (no service manager reachable) -------------------------------

linux_only = pytest.mark.skipif(not ON_LINUX, reason="installs systemd user units")


def unit_dir(home: Path) -> Path:
    return home / ".config" / "systemd" / "user"


@linux_only
def test_install_and_uninstall_round_trip(isolated_home: Path, repo: Path, tmp_path: Path) -> None:
    units = unit_dir(isolated_home)
    units.mkdir(parents=True)
    (units / "mine.service").write_text("[Service]\nExecStart=/bin/true\n")  # the user's own unit
    (units / "runner-worker@host-a.service.d").mkdir()
    (units / "runner-worker@host-a.service.d" / "override.conf").write_text("[Service]\nNice=5\n")  # and drop-in
    before = tree(isolated_home)
    env_file = tmp_path / "w.env"
    env_file.write_text("A=1\n")
    target = here(repo=repo, env_file=env_file, tags=["gpu"])

    first = schedules.install(target)
    assert sorted(p.relative_to(units).as_posix() for p in first.written) == [
        "runner-worker@.service",
        "runner-worker@host-a.service.d/runner.conf",
    ]
    assert [c.argv[2:] for c in first.to_run] == [
        ["daemon-reload"],
        ["enable", "--now", "runner-worker@host-a.service"],
    ]
    assert first.ran == []
    dropin = (units / "runner-worker@host-a.service.d" / "runner.conf").read_text()
    assert f"--tag gpu --repo {repo}" in dropin and f"EnvironmentFile={env_file}" in dropin

    second = schedules.install(target)  # idempotent: nothing new, nothing duplicated
    assert second.written == [] and len(second.unchanged) == 2
    report = schedules.status("systemd", "host-a")
    assert report["installed"] and not report["drifted"] and report["mode"] == "daemon"
    assert {f["state"] for f in report["files"]} == {"matches"}

    removed = schedules.uninstall("systemd", "host-a")
    assert len(removed.removed) == 3  # the drop-in, the template, the install record
    assert tree(isolated_home) == before  # the user's unit and drop-in stay, nothing of ours does
    assert not schedules.status("systemd", "host-a")["installed"]


@linux_only
def test_shared_template_goes_with_the_last_instance(isolated_home: Path, repo: Path) -> None:
    units = unit_dir(isolated_home)
    for worker_id in ("host-a", "host-b"):
        schedules.install(here(mode="tick", worker_id=worker_id, repo=repo))
    schedules.uninstall("systemd", "host-a")
    assert (units / "runner-tick@.service").exists() and (units / "runner-tick@.timer").exists()
    assert not (units / "runner-tick@host-a.timer.d").exists()
    schedules.uninstall("systemd", "host-b")
    assert files_in(isolated_home) == []


@linux_only
def test_a_new_mode_replaces_the_old_one(isolated_home: Path, repo: Path) -> None:
    units = unit_dir(isolated_home)
    schedules.install(here(repo=repo))
    outcome = schedules.install(here(mode="tick", interval=60, repo=repo))
    assert "replacing the daemon schedule of worker host-a" in outcome.notes
    assert files_in(units) == [
        "runner-tick@.service",
        "runner-tick@.timer",
        "runner-tick@host-a.service.d/runner.conf",
        "runner-tick@host-a.timer.d/runner.conf",
    ]
    assert schedules.status("systemd", "host-a")["mode"] == "tick"


@linux_only
def test_status_without_a_user_manager_is_not_healthy_and_says_why(repo: Path, cli) -> None:
    schedules.install(here(repo=repo))  # the unit file is present, and was never enabled
    result = cli.invoke(["schedule-status", "--os", "systemd", "--id", "host-a", "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["installed"] and not report["healthy"]
    assert report["os_asked"] is False and "cannot reach a user service manager" in report["os_not_asked_because"]
    assert report["enabled"] is None and report["running"] is None  # unknown, not "no" and not "yes"
    text = cli.invoke(["schedule-status", "--os", "systemd", "--id", "host-a"])
    assert "NOT healthy" in text.stdout and "enabled    unknown" in text.stdout
    assert "whether the schedule is enabled, running or failing is unknown" in text.stderr


@linux_only
def test_status_notices_drift(isolated_home: Path, repo: Path, cli) -> None:
    not_installed = cli.invoke(["schedule-status", "--os", "systemd", "--id", "host-a", "--json"])
    assert not_installed.exit_code == 1 and json.loads(not_installed.stdout)["installed"] is False

    schedules.install(here(repo=repo))
    dropin = unit_dir(isolated_home) / "runner-worker@host-a.service.d" / "runner.conf"
    dropin.write_text(dropin.read_text().replace("--repo", "--repo /elsewhere --x"))
    result = cli.invoke(["schedule-status", "--os", "systemd", "--id", "host-a", "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["installed"] and report["drifted"]
    assert {f["path"]: f["state"] for f in report["files"]}[str(dropin)] == "differs"


@linux_only
def test_cli_install_then_uninstall(isolated_home: Path, repo: Path, cli) -> None:
    result = cli.invoke(
        [
            "install-schedule",
            "--os",
            "systemd",
            "--id",
            "host-a",
            "--mode",
            "tick",
            "--interval",
            "90",
            "--repo",
            str(repo),
        ]
    )
    assert result.exit_code == 0, result.output
    assert "wrote " in result.stdout and "systemctl --user enable --now runner-tick@host-a.timer" in result.stdout
    for warning in schedules.get("systemd").warnings():
        assert warning in result.stderr
    result = cli.invoke(["uninstall-schedule", "--os", "systemd", "--id", "host-a"])
    assert result.exit_code == 0 and result.stdout.count("removed ") == 5
    assert files_in(isolated_home) == []
    again = cli.invoke(["uninstall-schedule", "--os", "systemd", "--id", "host-a"])
    assert again.exit_code == 0 and "nothing to remove" in again.stdout


@linux_only
def test_without_systemctl_install_writes_files_and_says_what_to_run(
    isolated_home: Path, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = here(repo=repo)  # git is checked before PATH goes
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no systemctl to find, so none can run
    monkeypatch.delenv(schedules.NO_ACTIVATE_ENV)
    outcome = schedules.install(target)
    assert outcome.skipped_because == "systemctl was not found" and outcome.ran == []
    assert [c.display() for c in outcome.to_run][-1] == "systemctl --user enable --now runner-worker@host-a.service"

    # The user ran `systemctl --user enable` by hand; uninstall undoes it too.
    wants = unit_dir(isolated_home) / "default.target.wants"
    wants.mkdir()
    (wants / "runner-worker@host-a.service").symlink_to(unit_dir(isolated_home) / "runner-worker@.service")
    outcome = schedules.uninstall("systemd", "host-a")
    assert outcome.to_run[0].display() == "systemctl --user stop runner-worker@host-a.service"
    assert files_in(isolated_home) == [] and not wants.exists()


def test_dry_run_touches_nothing(isolated_home: Path, repo: Path, cli) -> None:
    for scheduler in schedules.NAMES:
        where = ["--repo", str(repo)] if NATIVE and scheduler == NATIVE.name else ELSEWHERE[scheduler]
        result = cli.invoke(["install-schedule", "--os", scheduler, "--id", "host-a", "--dry-run", *where])
        assert result.exit_code == 0, result.output
        assert "--- would write " in result.stdout and "would run:" in result.stdout
    systemd = cli.invoke(
        ["install-schedule", "--os", "systemd", "--id", "host-a", "--dry-run", "--repo", str(repo)]
    ).stdout
    assert "ExecStart=" in systemd and "  systemctl --user enable --now runner-worker@host-a.service" in systemd
    assert (
        "schtasks /Create /XML"
        in cli.invoke(["install-schedule", "--os", "schtasks", "--id", "w", "--dry-run", *ELSEWHERE["schtasks"]]).stdout
    )
    assert files_in(isolated_home) == []
    uninstall = cli.invoke(["uninstall-schedule", "--os", "systemd", "--id", "host-a", "--dry-run"])
    assert uninstall.exit_code == 0 and files_in(isolated_home) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--id", "a b"], "A-Z a-z 0-9"),
        (["--id", "w", "--mode", "tick", "--grace", "5"], "--grace applies to --mode daemon"),
        (["--id", "w", "--repo", "/no/such/repo"], "does not exist"),
        (["--id", "w", "--tag", "two words"], "one word"),
        (["--id", "w", "--os", "beos"], "beos"),
    ],
)
def test_cli_bad_input_exits_2_with_a_reason(args: list[str], message: str, repo: Path, cli) -> None:
    if "--os" not in args:
        args = [*args, "--os", NATIVE.name if NATIVE else "systemd"]
    if "--repo" not in args:
        args = [*args, "--repo", str(repo)]
    result = cli.invoke(["install-schedule", *args])
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_help_names_every_worker_option(cli) -> None:
    result = cli.invoke(["install-schedule", "--help"], env={"COLUMNS": "200", "TERM": "dumb"})
    assert result.exit_code == 0
    for option in (
        "--tag",
        "--interval",
        "--grace",
        "--remote",
        "--queue-branch",
        "--repo",
        "--target-repo",
        "--python",
        "--output",
    ):
        assert option in result.stdout


def test_cli_module_imports_no_schedule_machinery() -> None:
    code = (
        "import sys, runner.commands.schedule; "
        "print(sorted(m for m in ('runner.schedules', 'plistlib', 'xml.sax.saxutils') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert done.stdout.strip() == "[]", done.stderr


def test_templates_live_in_the_top_level_folders_with_one_syntax() -> None:
    from runner.resources import PLACEHOLDER_RE

    names = sorted(
        f"{os_dir}/{f.name}" for os_dir in ("systemd", "launchd", "schtasks") for f in (ROOT / os_dir).iterdir()
    )
    assert (
        "launchd/worker.plist" in names and "schtasks/tick.xml" in names and "systemd/runner-worker@.service" in names
    )
    for name in names:
        text = (ROOT / name).read_text(encoding="utf-8")
        if not name.endswith(".md"):
            assert "{" not in text and "}" not in text, f"{name}: @NAME@ is the one placeholder syntax"
        if name.endswith((".plist", ".xml", ".conf")):
            assert PLACEHOLDER_RE.search(text), name
    assert not (ROOT / "runner" / "schedules" / "templates").exists()  # the top-level folders are the only copy


# --- a real user service manager --------------------------------------------------------------


@pytest.fixture
def user_manager(isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A `systemd --user` of our own, for this test's HOME: started in a private mount
    namespace where /run/systemd/system exists (systemd refuses to run as a user manager
    on a machine not booted with systemd). Skips where that cannot be done."""
    binary = next((p for p in ("/usr/lib/systemd/systemd", "/lib/systemd/systemd") if os.path.exists(p)), None)
    if not ON_LINUX or binary is None or shutil.which("systemctl") is None:
        pytest.skip("systemd is not installed")
    if shutil.which("unshare") is None or os.geteuid() != 0 or not os.path.isdir("/run/systemd"):
        pytest.skip("starting a private user manager needs root, unshare and /run/systemd")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv(schedules.NO_ACTIVATE_ENV)
    log_path = tmp_path / "user-manager.log"
    script = 'mount -t tmpfs tmpfs /run/systemd && mkdir /run/systemd/system && exec "$0" --user'
    with open(log_path, "wb") as log:
        manager = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, binary],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def systemctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True, timeout=timeout)

    try:
        while systemctl("show-environment").returncode != 0:  # until its socket answers, or it gives up
            if manager.poll() is not None:
                pytest.skip(f"systemd --user did not start here: {log_path.read_text(errors='replace').strip()[-300:]}")
            try:
                manager.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
        systemctl("is-system-running", "--wait", timeout=120)
        yield systemctl
    finally:
        if manager.poll() is None:
            systemctl("exit")
            try:
                manager.wait(timeout=60)
            except subprocess.TimeoutExpired:
                manager.kill()
                manager.wait()


@linux_only
def test_real_user_manager_enable_then_status_is_healthy(user_manager, isolated_home: Path, repo: Path, cli) -> None:
    args = [
        "install-schedule",
        "--os",
        "systemd",
        "--id",
        "host-a",
        "--mode",
        "tick",
        "--interval",
        "3600",
        "--repo",
        str(repo),
    ]
    installed = cli.invoke([*args, "--tag", "gpu"])
    assert installed.exit_code == 0, installed.output
    assert "ran systemctl --user enable --now runner-tick@host-a.timer" in installed.stdout
    assert user_manager("is-enabled", "runner-tick@host-a.timer").stdout.strip() == "enabled"

    result = cli.invoke(["schedule-status", "--os", "systemd", "--id", "host-a", "--json"])
    report = json.loads(result.stdout)
    assert (report["installed"], report["enabled"], report["running"], report["failing"], report["drifted"]) == (
        True,
        True,
        True,
        False,
        False,
    )
    assert result.exit_code == 0 and report["healthy"] and report["os_asked"]

    changed = cli.invoke([*args, "--tag", "big"])  # new settings reach the running timer
    assert changed.exit_code == 0 and "ran systemctl --user try-restart runner-tick@host-a.timer" in changed.stdout
    assert cli.invoke(["schedule-status", "--os", "systemd", "--id", "host-a"]).exit_code == 0

    removed = cli.invoke(["uninstall-schedule", "--os", "systemd", "--id", "host-a"])
    assert removed.exit_code == 0 and "warning" not in removed.stderr, removed.output
    assert user_manager("is-enabled", "runner-tick@host-a.timer").returncode != 0
    assert files_in(isolated_home) == []


@linux_only
def test_real_user_manager_unit_present_but_not_enabled_is_not_healthy(user_manager, repo: Path, cli) -> None:
    installed = cli.invoke(
        ["install-schedule", "--os", "systemd", "--id", "host-a", "--repo", str(repo), "--no-activate"]
    )
    assert installed.exit_code == 0 and "run these yourself" in installed.stdout
    user_manager("daemon-reload")  # loaded, still not enabled
    result = cli.invoke(["schedule-status", "--os", "systemd", "--id", "host-a", "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and not report["healthy"]
    assert report["os_asked"] and report["installed"] and report["enabled"] is False and report["running"] is False
    assert any(
        "not enabled: run systemctl --user enable --now runner-worker@host-a.service" in p for p in report["problems"]
    )


@linux_only
def test_real_user_manager_reports_a_failed_tick_as_failing(user_manager, repo: Path, cli) -> None:
    # An "interpreter" that exits 1, so the tick fails for real under the manager.
    args = [
        "install-schedule",
        "--os",
        "systemd",
        "--id",
        "host-a",
        "--mode",
        "tick",
        "--interval",
        "3600",
        "--repo",
        str(repo),
        "--python",
        "/bin/false",
    ]
    assert cli.invoke(args).exit_code == 0
    assert user_manager("start", "runner-tick@host-a.service").returncode != 0  # a oneshot: returns when the tick ended
    result = cli.invoke(["schedule-status", "--os", "systemd", "--id", "host-a", "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["failing"] is True and report["enabled"] is True and not report["healthy"]
    assert any("runner-tick@host-a.service failed" in p for p in report["problems"])


@linux_only
def test_real_user_manager_refusing_to_enable_exits_1(user_manager, repo: Path, cli) -> None:
    user_manager("mask", "runner-worker@host-a.service")  # an operator masked the unit
    result = cli.invoke(["install-schedule", "--os", "systemd", "--id", "host-a", "--repo", str(repo)])
    assert result.exit_code == 1
    assert (
        "`systemctl --user enable --now runner-worker@host-a.service` failed" in result.stderr
        and "masked" in result.stderr
    )
    user_manager("unmask", "runner-worker@host-a.service")
    assert cli.invoke(["uninstall-schedule", "--os", "systemd", "--id", "host-a"]).exit_code == 0


def test_a_scheduled_worker_sends_the_queues_notices_only_when_installed_with_notify(repo: Path, cli) -> None:
    """Attack 1 (issue 48): [notify] comes from the queue, so a host runs it only when it opted in; a schedule opts
    its worker in with --notify, and only then."""
    assert "--notify" not in schedules.worker_argv(build_spec(scheduler="systemd", **FIXED))
    assert schedules.worker_argv(build_spec(scheduler="systemd", notify=True, **FIXED))[-3:] == [
        "--notify",
        "--repo",
        "/srv/work/repo",
    ]
    shown = cli.invoke(
        ["install-schedule", "--os", "systemd", "--id", "host-a", "--repo", str(repo), "--notify", "--dry-run"]
    )
    assert shown.exit_code == 0 and f"--notify --repo {repo}" in shown.stdout, shown.stderr


def test_a_scheduled_worker_writes_metrics_only_where_its_host_says_so(repo: Path, cli) -> None:
    """The metrics file is a host's own setting (a path from the queue branch would let any pusher overwrite a
    file on every worker): install-schedule passes --metrics-file to the daemon, absolute, and refuses it for a tick."""
    argv = schedules.worker_argv(build_spec(scheduler="systemd", metrics_file="/var/lib/prom/runner.prom", **FIXED))
    assert argv[-4:] == ["--metrics-file", "/var/lib/prom/runner.prom", "--repo", "/srv/work/repo"]
    shown = cli.invoke(
        [
            "install-schedule",
            "--os",
            "systemd",
            "--id",
            "host-a",
            "--repo",
            str(repo),
            "--metrics-file",
            "runner.prom",
            "--dry-run",
        ]
    )
    assert shown.exit_code == 0 and f"--metrics-file {Path.cwd() / 'runner.prom'} --repo {repo}" in shown.stdout, (
        shown.stderr
    )
    refused = cli.invoke(
        [
            "install-schedule",
            "--os",
            "systemd",
            "--id",
            "host-a",
            "--repo",
            str(repo),
            "--mode",
            "tick",
            "--metrics-file",
            "/x.prom",
            "--dry-run",
        ]
    )
    assert refused.exit_code == 2 and "--metrics-file applies to --mode daemon" in refused.stderr
