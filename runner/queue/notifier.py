"""The notifier: one detached process per notice (started by runner.queue.notices), so a
notice command that hangs or fails costs the worker nothing. It runs [notify] command (an
argv with {tokens}, never a shell; killed at the timeout with everything it started) and sends
[notify] urls with apprise, each within the timeout, and writes one line per outcome to
.git/runner/logs/notify.log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runner.core.model import format_time, utc_now
from runner.core.tokens import substitute
from runner.queue.processes import TAG, kill_tagged, kill_tree, new_prefix

TOKENS = ("event", "step", "title", "status", "actor", "reason", "message", "queue")


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    notice, log = spec["notice"], Path(spec["log"])
    deadline = time.monotonic() + float(spec["timeout"])
    failed = False
    if spec["command"]:
        failed |= not run_command(spec["command"], notice, deadline, log)
    if spec["urls"]:
        failed |= not send_urls(spec["urls"], notice, deadline, log)
    return 1 if failed else 0


def run_command(command: list[str], notice: dict[str, Any], deadline: float, log: Path) -> bool:
    """Run the notify command to its end or the deadline; what it started dies with it, as a
    step's processes do (runner.queue.processes: a child that left with setsid too)."""
    argv = substitute(command, {name: str(notice.get(name, "")) for name in TOKENS})
    what = f"{notice['event']} {notice['step']}".strip()
    tag = new_prefix("notify.")
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, TAG: tag},
        )
    except OSError as exc:
        write(log, f"{what}: the notify command {argv[0]!r} could not start: {exc.strerror}")
        return False
    try:
        _, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        proc.wait()
        kill_tagged(tag)
        write(log, f"{what}: the notify command {argv[0]!r} timed out (killed)")
        return False
    finally:
        kill_tagged(tag)  # what it left running ends with it
    if proc.returncode != 0:
        tail = " ".join(err.decode("utf-8", "replace").split())[-300:]
        write(log, f"{what}: the notify command {argv[0]!r} exited {proc.returncode}" + (f": {tail}" if tail else ""))
        return False
    write(log, f"{what}: notified by {argv[0]!r}")
    return True


def send_urls(urls: list[str], notice: dict[str, Any], deadline: float, log: Path) -> bool:
    what = f"{notice['event']} {notice['step']}".strip()
    found = []
    for url in urls:  # "env:NAME": the URLs are in that variable here (secrets stay off the queue branch)
        found += os.environ.get(url[4:], "").split() if url.startswith("env:") else [url]
    try:
        import apprise
    except ImportError:
        write(log, f"{what}: [notify] urls need apprise: pip install apprise")
        return False
    signal.signal(signal.SIGALRM, _too_late)
    signal.alarm(max(int(deadline - time.monotonic()), 1))
    try:
        sender = apprise.Apprise()
        bad = [url.split(":", 1)[0] for url in found if not sender.add(url)]
        sent = bool(sender) and sender.notify(
            title=f"runner: {notice['message']}"[:250], body=notice["message"] + _reason(notice)
        )
    except TimeoutError:
        write(log, f"{what}: sending to the notification URLs timed out")
        return False
    finally:
        signal.alarm(0)
    for scheme in bad:
        write(log, f"{what}: a notification URL of scheme {scheme!r} is not one apprise knows")
    write(log, f"{what}: " + ("sent to the notification URLs" if sent else "a notification URL could not be reached"))
    return bool(sent) and not bad


def _reason(notice: dict[str, Any]) -> str:
    return f"\n\n{notice['reason']}" if notice.get("reason") and notice["reason"] not in notice["message"] else ""


def _too_late(signum, frame):
    raise TimeoutError


def write(log: Path, line: str) -> None:
    try:
        with open(log, "a") as handle:
            handle.write(f"{format_time(utc_now())} {line}\n")
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
