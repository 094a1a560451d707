"""OS schedules (issue 4): rendered files checked by the OS's own validators,
golden files, hostile values, and install/uninstall round trips in a
temporary HOME. No test runs systemctl, launchctl or schtasks.

Refresh the golden files with RUNNER_UPDATE_GOLDEN=1 after an intended change.
"""

from __future__ import annotations

import json
import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from runner import schedules
from runner.commands.schedule import register
from runner.schedules import ScheduleInputError, build_spec, render

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "schedules"
SCHEMAS = ROOT / "tests" / "data" / "schemas"
UPDATE_GOLDEN = os.environ.get("RUNNER_UPDATE_GOLDEN") == "1"
ON_LINUX = sys.platform.startswith("linux")

# Values a shell, an XML parser or a unit-file parser would all misread.
HOSTILE_DIR = "sp ace %h $HOME & <x> ;#`! 'q\" ü"
HOSTILE_ENV_VALUE = "it's \"$HOME\" & <b>%h</b> ; `x`"

FIXED = {
    "worker_id": "host-a",
    "python": "/opt/venv/bin/python",
    "repo": "/srv/work/repo",
    "home": "/home/alice",
}
FIXED_WINDOWS = {
    "worker_id": "host-a",
    "python": "C:\\Python311\\python.exe",
    "repo": "C:\\work\\repo",
    "home": "C:\\Users\\alice",
}


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throwaway HOME, and never an OS command against the real machine."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("LOCALAPPDATA", raising=False)
    monkeypatch.setenv(schedules.NO_ACTIVATE_ENV, "1")
    return home


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    return path


@pytest.fixture
def cli() -> tuple[typer.Typer, CliRunner]:
    app = typer.Typer()
    register(app)
    try:
        return app, CliRunner(mix_stderr=False)  # click < 8.2 mixes stderr into stdout by default
    except TypeError:
        return app, CliRunner()


@pytest.fixture(scope="module")
def task_schema():
    xmlschema = pytest.importorskip("xmlschema")
    return xmlschema.XMLSchema(str(SCHEMAS / "task.xsd"))


def hostile_python(tmp_path: Path, name: str = HOSTILE_DIR) -> str:
    """The running interpreter behind a symlink in a hostile folder (a venv-like path)."""
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "python"
    if not link.exists():
        link.symlink_to(sys.executable)
    return str(link)


def write_rendered(files, folder: Path) -> None:
    for file in files:
        path = folder / file.relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(file.content)


def tree(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def files_in(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir())


# --- inputs ------------------------------------------------------------------


@pytest.mark.parametrize("worker_id", ["host-a", "a", "A.b_c-9", "x" * 64, "..."])
def test_allowed_worker_ids(worker_id: str) -> None:
    assert build_spec(worker_id=worker_id, scheduler="systemd", repo="/r", python="/p").worker_id == worker_id


@pytest.mark.parametrize("worker_id", ["", "a b", "a/b", "a$b", "a%b", "a\nb", "é", "x" * 65, "a:b", "a@b"])
def test_other_worker_ids_are_refused(worker_id: str) -> None:
    with pytest.raises(ScheduleInputError, match="A-Z a-z 0-9 . _ -"):
        build_spec(worker_id=worker_id, scheduler="systemd", repo="/r", python="/p")


def test_interpreter_is_the_running_one_not_resolved(tmp_path: Path) -> None:
    assert build_spec(worker_id="w", scheduler="systemd").python == sys.executable
    link = hostile_python(tmp_path, "venv/bin")
    spec = build_spec(worker_id="w", scheduler="systemd", repo="/r", python=link)
    exec_start = render(spec)[-1].content.decode()
    assert f'"{link}"' not in exec_start  # a plain path needs no quotes...
    assert link in exec_start and os.path.realpath(link) not in exec_start  # ...and stays a symlink


def test_repository_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert build_spec(worker_id="w", scheduler="systemd", repo="sub/../repo", python="/p").repo == str(tmp_path / "repo")
    assert build_spec(worker_id="w", scheduler="systemd", python="/p").repo == str(tmp_path)


@pytest.mark.parametrize("scheduler", schedules.SCHEDULERS)
@pytest.mark.parametrize("field", ["repo", "python", "env_file"])
def test_newlines_and_control_characters_are_refused(scheduler: str, field: str) -> None:
    values = dict(FIXED_WINDOWS if scheduler == "schtasks" else FIXED)
    values[field] = values.get(field, "/etc/runner.env") + "\nExecStartPre=/bin/evil"
    with pytest.raises(ScheduleInputError, match="control character"):
        build_spec(scheduler=scheduler, **values)


def test_interval_belongs_to_tick_mode() -> None:
    with pytest.raises(ScheduleInputError, match="--mode tick only"):
        build_spec(scheduler="systemd", mode="daemon", interval=60, **FIXED)
    assert build_spec(scheduler="systemd", mode="tick", **FIXED).interval == schedules.DEFAULT_INTERVAL
    with pytest.raises(ScheduleInputError, match="1 or more"):
        build_spec(scheduler="systemd", mode="tick", interval=0, **FIXED)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ScheduleInputError) as caught:
        build_spec(worker_id="bad id", scheduler="systemd", mode="sometimes", python="relative/python", repo="/r")
    assert len(caught.value.problems) == 3


# --- golden files --------------------------------------------------------------


def golden_cases():
    env_file = str(GOLDEN / "host-a.env")
    return [
        ("systemd/daemon", dict(FIXED, scheduler="systemd", mode="daemon", env_file="/etc/runner/host-a.env")),
        ("systemd/tick", dict(FIXED, scheduler="systemd", mode="tick", interval=120)),
        ("launchd/daemon", dict(FIXED, scheduler="launchd", mode="daemon", env_file=env_file)),
        ("launchd/tick", dict(FIXED, scheduler="launchd", mode="tick", interval=600)),
        ("schtasks/daemon", dict(FIXED_WINDOWS, scheduler="schtasks", mode="daemon")),
        ("schtasks/tick", dict(FIXED_WINDOWS, scheduler="schtasks", mode="tick", interval=300)),
    ]


@pytest.mark.parametrize(("name", "options"), golden_cases(), ids=[c[0] for c in golden_cases()])
def test_rendered_files_match_golden(name: str, options: dict) -> None:
    folder = GOLDEN / name
    rendered = {}
    for file in render(build_spec(**options)):
        # Task files are UTF-16LE with a BOM; their golden copies are UTF-8 to stay readable.
        content = file.content
        if content.startswith(schedules.UTF16_BOM):
            content = content[2:].decode("utf-16-le").encode("utf-8")
        rendered[file.relpath] = content
    if UPDATE_GOLDEN:
        shutil.rmtree(folder, ignore_errors=True)
        for relpath, content in rendered.items():
            (folder / relpath).parent.mkdir(parents=True, exist_ok=True)
            (folder / relpath).write_bytes(content)
    assert sorted(rendered) == files_in(folder), "the set of rendered files changed"
    for relpath, content in rendered.items():
        assert content.decode("utf-8") == (folder / relpath).read_text(encoding="utf-8"), relpath


# --- systemd ---------------------------------------------------------------------

needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")


def systemd_verify(unit_dir: Path, units: list[str], tmp_path: Path) -> str:
    """All output of `systemd-analyze --user verify`: it exits 0 on many mistakes, so any output fails."""
    runtime = tmp_path / "xdg-runtime"
    runtime.mkdir(exist_ok=True)
    done = subprocess.run(
        ["systemd-analyze", "--user", "verify", "--man=no", *[str(unit_dir / u) for u in units]],
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return (done.stdout + done.stderr).strip() + ("" if done.returncode == 0 else f"\n(exit {done.returncode})")


@needs_systemd_analyze
@pytest.mark.parametrize("mode", schedules.MODES)
def test_systemd_units_pass_systemd_analyze_with_hostile_values(mode: str, tmp_path: Path) -> None:
    # The interpreter's folder holds what systemd allows in an executable name;
    # the repository and env file paths hold everything else.
    python = hostile_python(tmp_path, "sp ace %h &<x>;#`!ü")
    env_file = tmp_path / HOSTILE_DIR / "worker.env"
    env_file.parent.mkdir(parents=True, exist_ok=True)
    env_file.write_text(f"TOKEN='{HOSTILE_ENV_VALUE}'\n")
    spec = build_spec(
        worker_id="a.b_c-9", scheduler="systemd", mode=mode, python=python,
        repo=str(tmp_path / HOSTILE_DIR / "repo"), env_file=env_file,
    )
    unit_dir = tmp_path / "units"
    write_rendered(render(spec), unit_dir)
    units = ["runner-worker@a.b_c-9.service"] if mode == "daemon" else ["runner-tick@a.b_c-9.timer", "runner-tick@a.b_c-9.service"]
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
    for line in ("Type=exec", "Restart=on-failure", "KillMode=mixed", "TimeoutStopSec=90s"):
        assert line in service_section
    assert "WantedBy=default.target" in service and "multi-user.target" not in service
    tick = {f.relpath: f.content.decode() for f in render(build_spec(scheduler="systemd", mode="tick", interval=600, **FIXED))}
    timer = tick["runner-tick@.timer"] + tick["runner-tick@host-a.timer.d/runner.conf"]
    assert "AccuracySec=1s" in timer and "RandomizedDelaySec=60s" in timer and "OnUnitActiveSec=600s" in timer
    assert "ExecStart=/opt/venv/bin/python -m runner tick --id host-a --repo /srv/work/repo" in tick["runner-tick@host-a.service.d/runner.conf"]


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
    assert schedules.systemd_quote(arg) == word


@pytest.mark.parametrize("char", ["$", '"', "'", "\\"])
def test_systemd_refuses_interpreter_paths_it_cannot_run(char: str) -> None:
    with pytest.raises(ScheduleInputError, match="--python"):
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
    env_file.write_text(
        "# comment\n"
        f"TOKEN='{HOSTILE_ENV_VALUE}'\n"
        'export QUOTED="a \\"b\\" & <c>"\n'
        "BARE=x<y>&z\n"
    )
    spec = build_spec(
        worker_id="a.b_c-9", scheduler="launchd", mode=mode, python=f"/Users/al ice/{HOSTILE_DIR}/bin/python",
        repo=f"/Users/al ice/{HOSTILE_DIR}/repo", env_file=env_file, home="/Users/al ice",
        interval=90 if mode == "tick" else None,
    )
    return spec


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
    assert agent["ProgramArguments"] == [spec.python, "-m", "runner", "worker" if mode == "daemon" else "tick", "--id", "a.b_c-9", "--repo", spec.repo]
    assert all(type(a) is str for a in agent["ProgramArguments"])
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


@pytest.mark.skipif(shutil.which("xmllint") is None, reason="xmllint not installed (apt-get install libxml2-utils)")
@pytest.mark.parametrize("mode", schedules.MODES)
def test_launchd_plist_is_valid_against_the_dtd(mode: str, tmp_path: Path) -> None:
    (file,) = render(hostile_launchd_spec(tmp_path, mode))
    path = tmp_path / file.relpath
    path.write_bytes(file.content)
    done = subprocess.run(
        ["xmllint", "--nonet", "--noout", "--valid", str(path)],
        env={**os.environ, "XML_CATALOG_FILES": str(SCHEMAS / "plist-catalog.xml")},
        capture_output=True, text=True, timeout=60,
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_launchd_env_file_with_a_bad_line_is_refused(tmp_path: Path) -> None:
    env_file = tmp_path / "bad.env"
    env_file.write_text("GOOD=1\nnot a setting\n2BAD=x\n")
    with pytest.raises(ScheduleInputError) as caught:
        render(build_spec(scheduler="launchd", env_file=env_file, **FIXED))
    assert [p.split(": ")[0] for p in caught.value.problems] == [f"{env_file}:2", f"{env_file}:3"]


# --- Task Scheduler ------------------------------------------------------------------

TASK_NS = {"t": "http://schemas.microsoft.com/windows/2004/02/mit/task"}


def hostile_schtasks_spec(mode: str, interval: int | None = None):
    return build_spec(
        worker_id="a.b_c-9", scheduler="schtasks", mode=mode, interval=interval,
        python="C:\\Program Files\\Py & <thon>\\python.exe", repo="C:\\Users\\A 'B' & <C>\\repo ;x",
    )


@pytest.mark.parametrize(("mode", "interval"), [("daemon", None), ("tick", 60), ("tick", 5400)])
def test_task_xml_is_valid_utf16_with_bom(mode: str, interval: int | None, tmp_path: Path, task_schema) -> None:
    import xml.etree.ElementTree as ET

    spec = hostile_schtasks_spec(mode, interval)
    (file,) = render(spec)
    assert file.content[:2] == b"\xff\xfe"
    text = file.content[2:].decode("utf-16-le")
    assert text.startswith('<?xml version="1.0" encoding="UTF-16"?>')
    path = tmp_path / file.relpath
    path.write_bytes(file.content)
    task_schema.validate(str(path))  # raises with the reason when invalid

    task = ET.parse(path).getroot()
    settings = task.find("t:Settings", TASK_NS)
    assert settings.findtext("t:MultipleInstancesPolicy", namespaces=TASK_NS) == "IgnoreNew"
    exec_ = task.find("t:Actions/t:Exec", TASK_NS)
    assert exec_.findtext("t:Command", namespaces=TASK_NS) == spec.python
    arguments = exec_.findtext("t:Arguments", namespaces=TASK_NS)
    log_file = "%LOCALAPPDATA%\\runner\\logs\\" + f"runner-{'worker' if mode == 'daemon' else 'tick'}-a.b_c-9.log"
    assert arguments == subprocess.list2cmdline(schedules.worker_argv(spec, log_file)[1:])
    assert '"C:\\Users\\A \'B\' & <C>\\repo ;x"' in arguments
    repetition = task.findtext("t:Triggers/t:TimeTrigger/t:Repetition/t:Interval", namespaces=TASK_NS)
    if mode == "daemon":
        assert settings.findtext("t:ExecutionTimeLimit", namespaces=TASK_NS) == "PT0S"
        assert repetition == "PT1M"
    else:
        assert repetition == {60: "PT1M", 5400: "PT1H30M"}[interval]


def test_task_schema_is_live(tmp_path: Path, task_schema) -> None:
    """The validator rejects what Task Scheduler would: a 30-second repetition."""
    (file,) = render(build_spec(scheduler="schtasks", mode="tick", interval=60, **FIXED_WINDOWS))
    text = file.content[2:].decode("utf-16-le").replace("<Interval>PT1M</Interval>", "<Interval>PT30S</Interval>")
    assert not task_schema.is_valid(text)


def test_task_interval_under_a_minute_is_a_clear_error(cli) -> None:
    app, runner = cli
    result = runner.invoke(app, ["install-schedule", "--os", "schtasks", "--id", "w", "--mode", "tick", "--interval", "59", "--dry-run"])
    assert result.exit_code == 2
    assert "at most once a minute" in result.stderr and "--interval 60" in result.stderr


@pytest.mark.parametrize(("field", "value"), [("repo", "C:\\%USERPROFILE%\\repo"), ("python", "C:\\%PY%\\python.exe")])
def test_task_refuses_percent_it_would_expand(field: str, value: str) -> None:
    with pytest.raises(ScheduleInputError, match="would expand"):
        build_spec(scheduler="schtasks", **dict(FIXED_WINDOWS, **{field: value}))


def test_task_refuses_env_file() -> None:
    with pytest.raises(ScheduleInputError, match="setx"):
        build_spec(scheduler="schtasks", env_file="C:\\runner.env", **FIXED_WINDOWS)


@pytest.mark.parametrize(("seconds", "duration"), [(60, "PT1M"), (90, "PT1M30S"), (3600, "PT1H"), (86400, "P1D"), (90061, "P1DT1H1M1S")])
def test_iso_duration(seconds: int, duration: str) -> None:
    assert schedules.iso_duration(seconds) == duration


# --- install, status, uninstall ------------------------------------------------------------

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
    spec = build_spec(scheduler="systemd", worker_id="host-a", repo=repo, env_file=env_file)

    first = schedules.install(spec)
    assert sorted(p.relative_to(units).as_posix() for p in first.written) == [
        "runner-worker@.service",
        "runner-worker@host-a.service.d/runner.conf",
    ]
    assert [c.argv[2:] for c in first.to_run] == [["daemon-reload"], ["enable", "--now", "runner-worker@host-a.service"]]
    assert first.ran == []
    dropin = (units / "runner-worker@host-a.service.d" / "runner.conf").read_text()
    assert f"--repo {repo}" in dropin and f"EnvironmentFile={env_file}" in dropin

    second = schedules.install(spec)  # idempotent: nothing new, nothing duplicated
    assert second.written == [] and len(second.unchanged) == 2
    report = schedules.status("systemd", "host-a")
    assert report["installed"] and report["up_to_date"] and report["mode"] == "daemon"
    assert {f["state"] for f in report["files"]} == {"matches"}

    removed = schedules.uninstall("systemd", "host-a")
    assert len(removed.removed) == 3  # the drop-in, the template, the install record
    assert tree(isolated_home) == before  # the user's unit and drop-in stay, nothing of ours does
    assert not schedules.status("systemd", "host-a")["installed"]


@linux_only
def test_shared_template_goes_with_the_last_instance(isolated_home: Path, repo: Path) -> None:
    units = unit_dir(isolated_home)
    for worker_id in ("host-a", "host-b"):
        schedules.install(build_spec(scheduler="systemd", mode="tick", worker_id=worker_id, repo=repo))
    schedules.uninstall("systemd", "host-a")
    assert (units / "runner-tick@.service").exists() and (units / "runner-tick@.timer").exists()
    assert not (units / "runner-tick@host-a.timer.d").exists()
    schedules.uninstall("systemd", "host-b")
    assert files_in(isolated_home) == []


@linux_only
def test_a_new_mode_replaces_the_old_one(isolated_home: Path, repo: Path) -> None:
    units = unit_dir(isolated_home)
    schedules.install(build_spec(scheduler="systemd", worker_id="host-a", repo=repo))
    outcome = schedules.install(build_spec(scheduler="systemd", mode="tick", interval=60, worker_id="host-a", repo=repo))
    assert "replacing the daemon schedule of worker host-a" in outcome.notes
    assert files_in(units) == [
        "runner-tick@.service",
        "runner-tick@.timer",
        "runner-tick@host-a.service.d/runner.conf",
        "runner-tick@host-a.timer.d/runner.conf",
    ]
    assert schedules.status("systemd", "host-a")["mode"] == "tick"


@linux_only
def test_status_notices_drift_and_the_cli_exits_1(isolated_home: Path, repo: Path, cli) -> None:
    app, runner = cli
    not_installed = runner.invoke(app, ["schedule-status", "--os", "systemd", "--id", "host-a", "--json"])
    assert not_installed.exit_code == 1 and json.loads(not_installed.stdout)["installed"] is False

    schedules.install(build_spec(scheduler="systemd", worker_id="host-a", repo=repo))
    assert runner.invoke(app, ["schedule-status", "--os", "systemd", "--id", "host-a"]).exit_code == 0
    dropin = unit_dir(isolated_home) / "runner-worker@host-a.service.d" / "runner.conf"
    dropin.write_text(dropin.read_text().replace("--repo", "--repo /elsewhere --x"))
    result = runner.invoke(app, ["schedule-status", "--os", "systemd", "--id", "host-a", "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["installed"] and not report["up_to_date"]
    assert {f["path"]: f["state"] for f in report["files"]}[str(dropin)] == "differs"


@linux_only
def test_cli_install_then_uninstall(isolated_home: Path, repo: Path, cli) -> None:
    app, runner = cli
    result = runner.invoke(app, ["install-schedule", "--os", "systemd", "--id", "host-a", "--mode", "tick", "--interval", "90", "--repo", str(repo)])
    assert result.exit_code == 0, result.output
    assert "wrote " in result.stdout and "systemctl --user enable --now runner-tick@host-a.timer" in result.stdout
    if not Path("/var/lib/systemd/linger", schedules._user_name() or "").exists():
        assert "loginctl enable-linger" in result.stderr
    result = runner.invoke(app, ["uninstall-schedule", "--os", "systemd", "--id", "host-a"])
    assert result.exit_code == 0 and result.stdout.count("removed ") == 5
    assert files_in(isolated_home) == []
    again = runner.invoke(app, ["uninstall-schedule", "--os", "systemd", "--id", "host-a"])
    assert again.exit_code == 0 and "nothing to remove" in again.stdout


@linux_only
def test_without_systemctl_install_writes_files_and_says_what_to_run(
    isolated_home: Path, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no systemctl to find, so none can run
    monkeypatch.delenv(schedules.NO_ACTIVATE_ENV)
    spec = build_spec(scheduler="systemd", worker_id="host-a", repo=repo)
    outcome = schedules.install(spec)
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
    app, runner = cli
    for scheduler in schedules.SCHEDULERS:
        args = ["install-schedule", "--os", scheduler, "--id", "host-a", "--dry-run"]
        if scheduler == "schtasks":
            args += ["--python", FIXED_WINDOWS["python"], "--repo", FIXED_WINDOWS["repo"]]
        else:
            args += ["--repo", str(repo)]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "--- would write " in result.stdout and "would run:" in result.stdout
    systemd = runner.invoke(app, ["install-schedule", "--os", "systemd", "--id", "host-a", "--dry-run", "--repo", str(repo)]).stdout
    assert "ExecStart=" in systemd and "  systemctl --user enable --now runner-worker@host-a.service" in systemd
    assert "schtasks /Create /XML" in runner.invoke(app, ["install-schedule", "--os", "schtasks", "--id", "w", "--dry-run", "--python", "C:\\p.exe", "--repo", "C:\\r"]).stdout
    assert files_in(isolated_home) == []
    uninstall = runner.invoke(app, ["uninstall-schedule", "--os", "systemd", "--id", "host-a", "--dry-run"])
    assert uninstall.exit_code == 0 and files_in(isolated_home) == []


@pytest.mark.parametrize("scheduler", [s for s in schedules.SCHEDULERS if s != schedules.native_scheduler()])
def test_another_os_only_gets_files(scheduler: str, isolated_home: Path, tmp_path: Path, cli) -> None:
    app, runner = cli
    windows = scheduler == "schtasks"
    args = ["install-schedule", "--os", scheduler, "--id", "host-a", "--mode", "tick", "--interval", "300"]
    args += ["--python", FIXED_WINDOWS["python"], "--repo", FIXED_WINDOWS["repo"]] if windows else ["--repo", "/srv/repo"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "--output DIR" in refused.stderr

    out = tmp_path / "out"
    written = runner.invoke(app, [*args, "--output", str(out)])
    assert written.exit_code == 0, written.output
    expected = {"launchd": ["runner.tick.host-a.plist"], "systemd": ["runner-tick@.service", "runner-tick@.timer", "runner-tick@host-a.service.d/runner.conf", "runner-tick@host-a.timer.d/runner.conf"], "schtasks": ["runner-tick-host-a.xml"]}
    assert files_in(out) == sorted(expected[scheduler])
    assert files_in(isolated_home) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--id", "a b"], "A-Z a-z 0-9"),
        (["--id", "w", "--interval", "60"], "--mode tick only"),
        (["--id", "w", "--repo", "/no/such/repo"], "does not exist"),
        (["--id", "w", "--os", "beos"], "beos"),
    ],
)
def test_cli_bad_input_exits_2_with_a_reason(args: list[str], message: str, cli) -> None:
    app, runner = cli
    if "--os" not in args:
        args = [*args, "--os", schedules.native_scheduler() or "systemd"]
    result = runner.invoke(app, ["install-schedule", *args])
    assert result.exit_code == 2
    assert message in result.stderr


def test_cli_module_imports_no_schedule_machinery() -> None:
    code = "import sys, runner.commands.schedule; print(sorted(m for m in ('runner.schedules', 'plistlib', 'xml.sax.saxutils') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


# --- activation, with a stand-in systemctl that only records its arguments -----------------

STUB_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$STUB_LOG"
case " $* " in *" $STUB_FAIL_ON "*) echo "stub: $STUB_FAIL_ON failed" >&2; exit 1;; esac
exit 0
"""


@pytest.fixture
def stub_systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "stub-bin"
    folder.mkdir()
    script = folder / "systemctl"
    script.write_text(STUB_SYSTEMCTL)
    script.chmod(0o755)
    log = tmp_path / "systemctl.log"
    log.write_text("")
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STUB_LOG", str(log))
    monkeypatch.setenv("STUB_FAIL_ON", "no-such-word")
    monkeypatch.delenv(schedules.NO_ACTIVATE_ENV)
    return log


def calls(log: Path) -> list[str]:
    lines = [line.removeprefix("--user ") for line in log.read_text().splitlines()]
    log.write_text("")
    return [line for line in lines if line != "show-environment"]  # the reachability probe


@linux_only
def test_activation_runs_systemctl_in_order(stub_systemctl: Path, repo: Path, tmp_path: Path) -> None:
    spec = build_spec(scheduler="systemd", worker_id="host-a", repo=repo)
    outcome = schedules.install(spec)
    assert outcome.to_run == [] and len(outcome.ran) == 2
    assert calls(stub_systemctl) == ["daemon-reload", "enable --now runner-worker@host-a.service"]
    schedules.install(spec)  # unchanged: nothing to restart
    assert calls(stub_systemctl) == ["daemon-reload", "enable --now runner-worker@host-a.service"]
    other_repo = tmp_path / "other"
    other_repo.mkdir()
    schedules.install(build_spec(scheduler="systemd", worker_id="host-a", repo=other_repo))
    assert calls(stub_systemctl)[-1] == "try-restart runner-worker@host-a.service"  # new settings take effect
    schedules.uninstall("systemd", "host-a")
    assert calls(stub_systemctl) == [
        "disable --now runner-worker@host-a.service",
        "daemon-reload",
        "reset-failed runner-worker@host-a.service",
    ]
    assert not schedules.status("systemd", "host-a")["installed"]


@linux_only
def test_a_failing_os_command_exits_1(stub_systemctl: Path, repo: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    app, runner = cli
    monkeypatch.setenv("STUB_FAIL_ON", "enable")
    result = runner.invoke(app, ["install-schedule", "--os", "systemd", "--id", "host-a", "--repo", str(repo)])
    assert result.exit_code == 1
    assert "systemctl --user enable --now runner-worker@host-a.service` failed" in result.stderr
    assert "stub: enable failed" in result.stderr
    monkeypatch.setenv("STUB_FAIL_ON", "disable")  # uninstall goes on, and says what went wrong
    result = runner.invoke(app, ["uninstall-schedule", "--os", "systemd", "--id", "host-a"])
    assert result.exit_code == 0 and "warning: `systemctl --user disable --now" in result.stderr
