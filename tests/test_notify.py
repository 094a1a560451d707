"""Notices ([notify] in runner.toml, issue 31): a real command that appends to a file, and
notification URLs sent through apprise to an HTTP server on 127.0.0.1. Each event is told
once, by the process that records it; a notice that fails or hangs is logged and never holds
up or fails a tick."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import psutil
import pytest
from support.repos import add_step, edit, git, queue_history, runner, start_worker, step_file, tick, wait_for
from support.review import WORKER_ENV, review_remote, worker_clone

from runner.core.config import DEFAULT_TOML


def configure(
    repo: Path, command: list[str] | None = None, urls: list[str] | None = None, timeout: str = "30s", extra: str = ""
) -> None:
    """[notify] on the queue, and this clone opted in to run it (its own git config says so)."""
    git(repo, "config", "runner.notify", "true")
    text = DEFAULT_TOML.replace("detect = true", "detect = false")
    text = text.replace("[notify]\ncommand = []", f"[notify]\ncommand = {json.dumps(command or [])}")
    text = text.replace("urls = []", f"urls = {json.dumps(urls or [])}").replace(
        'timeout = "30s"  # a notice', f'timeout = "{timeout}"  # a notice'
    )
    edit(repo, {"runner.toml": (text + extra).encode()}, "configure notices")


def appender(path: Path) -> list[str]:
    return ["sh", "-c", 'echo "$1|$2|$3|$4" >> "$0"', str(path), "{event}", "{step}", "{actor}", "{message}"]


def lines(path: Path, at_least: int) -> list[list[str]]:
    found = wait_for(lambda: path.exists() and len(text := path.read_text().splitlines()) >= at_least and text)
    return [line.split("|") for line in found]


def notify_log(repo: Path) -> str:
    path = repo / ".git" / "runner" / "logs" / "notify.log"
    return path.read_text() if path.exists() else ""


def test_each_event_is_notified_once_by_the_process_that_records_it(tmp_path, monkeypatch):
    """Three workers on their own clones drain a plan over a remote under the hook with
    identities; the people hear of each step that needs them, the one failed for good and
    the drain once each, from the worker that recorded it, and of a halt from its person."""
    monkeypatch.setenv("RUNNER_PUSHER", "alice")
    told = tmp_path / "told.txt"
    steps = (
        ("01-a", {}),
        ("02-b", {"depends_on": ["01-a"], "requires_approval": True}),
        ("03-c", {"max_attempts": 1, "run": ["false"]}),
        ("04-d", {}),
        ("05-e", {"depends_on": ["04-d"]}),
    )
    bare, laptop = review_remote(
        tmp_path, steps, notify=appender(told), extra_toml='key-c = ["w3"]\n'
    )  # in [hooks.identities]
    envs = {**WORKER_ENV, "w3": {"RUNNER_PUSHER": "key-c"}}
    workers = [
        start_worker(worker_clone(bare, tmp_path / f"host-{w}"), w, "--once", "--notify", env=envs[w])
        for w in ("w1", "w2", "w3")
    ]
    for proc in workers:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    seen = lines(told, 3)
    assert sorted((event, step) for event, step, _, _ in seen if event != "drained") == [
        ("failed", "03-c"),
        ("needs-you", "02-b"),
    ]
    assert [event for event, *_ in seen].count("drained") == 1
    recorders = {e["Step"]: e["Actor"] for e in queue_history(bare) if e.get("Event") in ("complete", "fail")}
    for event, step, actor, message in seen:
        assert actor == recorders[step]  # the process that recorded it told it
    needs = next(m for e, s, _, m in seen if e == "needs-you")
    assert needs == "02-b needs you: its result waits for your approval"
    runner(laptop, "halt", "--reason", "lunch", "--by", "alice", env={"RUNNER_PUSHER": "alice", "RUNNER_NOTIFY": "1"})
    assert ["halted", "", "alice", "the queue halted by alice: lunch"] in lines(told, 4)
    assert len(told.read_text().splitlines()) == 4


def test_a_worker_gone_while_holding_a_claim_is_notified_by_the_worker_that_takes_it_over(queue_repo, tmp_path):
    told = tmp_path / "told.txt"
    configure(queue_repo, appender(told))
    add_step(queue_repo, "01-held")
    runner(queue_repo, "claim", "01-held", "--id", "host-a", env={"RUNNER_HOST": "far-away"})
    assert tick(queue_repo, worker="host-b")["sentinel"] == "SKIP"  # the lease is still running
    report = tick(
        queue_repo, worker="host-b", env={"RUNNER_MONOTONIC_OFFSET": str(2 * 3600)}
    )  # two hours later, by host-b's clock
    assert report["sentinel"] == "STEP_COMPLETE" and report["attempt"] == 2
    seen = lines(told, 2)
    assert [
        "worker-gone",
        "01-held",
        "host-b",
        "host-a was gone while holding 01-held (attempt 1); host-b took it over",
    ] in seen
    assert [e for e, *_ in seen].count("worker-gone") == 1


def test_a_notify_command_that_hangs_is_killed_at_its_timeout_and_never_holds_up_a_tick(queue_repo, tmp_path):
    pid_file = tmp_path / "notifier.pids"
    configure(queue_repo, ["sh", "-c", 'echo $$ >> "$0"; exec sleep 600', str(pid_file)], timeout="1s")
    add_step(queue_repo, "01-approve", requires_approval=True)
    report = tick(queue_repo)
    assert report["outcome"] == "review"  # recorded and reported while the notices hang or are being killed
    # Two notices, each its own hanging command: the step needs you, and the plan drained.
    wait_for(lambda: notify_log(queue_repo).count("timed out (killed)") == 2)
    pids = [int(line) for line in pid_file.read_text().split()]
    assert len(pids) == 2
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert "needs-you 01-approve: the notify command 'sh' timed out (killed)" in notify_log(queue_repo)
    assert "drained 01-approve: the notify command 'sh' timed out (killed)" in notify_log(queue_repo)


def test_a_notify_command_that_fails_is_logged_and_the_tick_goes_on(queue_repo):
    configure(queue_repo, ["sh", "-c", "echo no mail server >&2; exit 3"])
    add_step(queue_repo, "01-bad", max_attempts=1, run=["false"])
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_FAILED" and report["will_retry"] is False
    # each notice is a notifier process of its own (failed, then drained): either may log first
    wait_for(lambda: "failed 01-bad: the notify command 'sh' exited 3: no mail server" in notify_log(queue_repo))
    assert runner(queue_repo, "status").returncode == 0


def test_a_missing_notify_command_is_logged(queue_repo):
    configure(queue_repo, ["no-such-notifier-here", "{message}"])
    add_step(queue_repo, "01-approve", requires_approval=True)
    assert tick(queue_repo)["outcome"] == "review"
    wait_for(lambda: "could not start" in notify_log(queue_repo))


class Hook(BaseHTTPRequestHandler):
    received: ClassVar[list] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Hook.received.append((self.path, json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def http_hook():
    Hook.received = []
    server = HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_notification_urls_are_sent_with_apprise_and_may_stay_off_the_queue_branch(queue_repo, http_hook):
    pytest.importorskip("apprise", reason="[notify] urls need apprise (the test extra installs it)")
    configure(queue_repo, urls=[f"json://127.0.0.1:{http_hook}/direct", "env:RUNNER_TEST_NOTIFY_URLS"])
    add_step(queue_repo, "01-approve", title="Ship it", requires_approval=True)
    secret = f"json://127.0.0.1:{http_hook}/from-the-environment"
    assert tick(queue_repo, env={"RUNNER_TEST_NOTIFY_URLS": secret})["outcome"] == "review"
    needs = lambda: [(path, body) for path, body in Hook.received if body["message"].startswith("01-approve needs you")]
    wait_for(lambda: len(needs()) >= 2)
    assert sorted(path for path, _ in needs()) == ["/direct", "/from-the-environment"]
    assert needs()[0][1]["message"] == "01-approve needs you: its result waits for your approval"
    wait_for(lambda: "sent to the notification URLs" in notify_log(queue_repo))
    assert "from-the-environment" not in runner(queue_repo, "show", "01-approve").stdout


def test_an_unknown_notify_event_is_refused_with_the_known_ones(queue_repo):
    path, data = step_file("01-x")
    bad = DEFAULT_TOML.replace('events = ["needs-you"', 'events = ["needs-me", "needs-you"')
    with pytest.raises(Exception) as refused:
        edit(queue_repo, {"runner.toml": bad.encode(), path: data})
    assert (
        "[notify].events: unknown event 'needs-me' (events: needs-you, failed, halted, "
        "drained, worker-gone, paused, stuck)" in str(refused.value)
    )
