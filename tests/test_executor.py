"""The executor runs a step's command as a real process and reports how it ended: its exit
code, a timeout (the process tree killed) or a cancel. Where Linux gives a process
descriptor the wait wakes on exit; elsewhere it polls: both ways keep the same promises."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from runner.worker import executor

WATCHES = ["process descriptor", "polling"]


@pytest.fixture(params=WATCHES)
def watch(request, monkeypatch):
    if request.param == "polling":
        monkeypatch.setattr(executor, "_PIDFD_OPEN", None)
    elif executor._PIDFD_OPEN is None:
        pytest.skip("this platform has no os.pidfd_open")
    return request.param


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def run(tmp_path, argv, **options):
    return executor.run(argv, tmp_path, dict(os.environ), tmp_path / "log.txt", **options)


def test_exit_codes_are_reported_as_the_command_ended(tmp_path, watch):
    assert run(tmp_path, python("pass"), timeout=60).returncode == 0
    failed = run(tmp_path, python("import sys; sys.exit(3)"), timeout=60)
    assert failed.returncode == 3 and not failed.ok and not failed.timed_out


def test_a_command_past_its_timeout_is_killed_and_says_so(tmp_path, watch):
    result = run(tmp_path, python("import time; time.sleep(60)"), timeout=0.3)
    assert result.timed_out and not result.ok
    assert result.duration < 30  # killed, not waited for


def test_a_cancel_stops_the_command(tmp_path, watch):
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    result = run(tmp_path, python("import time; time.sleep(60)"), timeout=60, cancel=cancel)
    assert result.cancelled and not result.ok


def test_background_children_die_with_the_step(tmp_path, watch):
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys; "
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))"
    )
    assert run(tmp_path, python(code), timeout=60).returncode == 0
    child = int(pid_file.read_text())
    import psutil

    try:
        psutil.Process(child).wait(timeout=10)
    except psutil.NoSuchProcess:
        pass
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
