"""`runner board` in a real browser (issue 31): Debian's headless Chromium driven by
playwright, over a bare remote under runner's hook with [hooks] identities, the board on
alice's clone and workers on other clones pushing with their worker keys. Skipped, with the
reason, only where /usr/bin/chromium is missing (.ci/run installs it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from filelock import FileLock
from support.repos import ENV_PATH, git, queue_history, runner, runner_json, set_config, step_file, wait_for
from support.review import BROWSER, BROWSER_FLAGS, WORKER_ENV, review_remote, start_board, stop, worker_clone

if not os.path.exists(BROWSER):
    pytest.skip(
        f"needs Chromium at {BROWSER} (Debian: apt-get install chromium; .ci/run installs it)", allow_module_level=True
    )

from playwright.sync_api import sync_playwright

WAIT = 60_000  # ms: the longest any page waits for the queue to move (a bound, never a measure)
STEPS = (
    ("01-db", {"run": ["sh", "-c", "echo schema > db.txt"]}),
    ("02-api", {"depends_on": ["01-db"], "requires_approval": True, "run": ["sh", "-c", "echo api > api.txt"]}),
    ("03-ui", {"requires_approval": True, "run": ["sh", "-c", 'echo "ui attempt $RUNNER_ATTEMPT" > ui.txt']}),
    ("04-bad", {"max_attempts": 1, "run": ["sh", "-c", "echo the build broke; exit 3"]}),
)


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as play:
        chromium = play.chromium.launch(executable_path=BROWSER, args=BROWSER_FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    # The page's Content-Security-Policy would stop playwright's own probes; the tests below
    # show that text stays text without its help (test_the_pages_forbid_any_other_script checks the header).
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(WAIT)
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == [], f"the page raised: {errors}"


def drain(clone: Path, worker: str = "w2") -> None:
    """`runner tick` as a worker key until nothing is left for it."""
    for _ in range(20):
        if tick_once(clone, worker).get("outcome") in ("skip", "no-queue"):
            return


def tick_once(clone: Path, worker: str) -> dict:
    proc = runner(clone, "tick", "--id", worker, "--json", env=WORKER_ENV[worker])
    return json.loads(proc.stdout.strip().splitlines()[-1])


NOTIFY = ["sh", "-c", 'echo "$1 $2" >> ../notices.txt', "sh", "{event}", "{step}"]  # beside the clone it runs in


@pytest.fixture(scope="session")
def drained(tmp_path_factory, worker_id):
    """The plan after one worker drained it on its own clone: 01-db done, 02-api and 03-ui in
    review, 04-bad failed for good. Made once for every test process (a drain is a dozen runner
    processes under the hook), never used in place: each test works on its own copy."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if worker_id != "master" else base  # this run's folder, every xdist process's
    made = shared / "board-drained"
    with FileLock(str(shared / "board-drained.lock")):
        if not (made / "made").exists():
            shutil.rmtree(made, ignore_errors=True)
            made.mkdir()
            with pytest.MonkeyPatch.context() as env:
                env.setenv("RUNNER_PUSHER", "alice")
                bare, _ = review_remote(made, STEPS, notify=NOTIFY)
                host_b = worker_clone(bare, made / "host-b")
                git(host_b, "config", "runner.notify", "true")  # the worker's host sends [notify]'s notices
                drain(host_b)
            (made / "made").touch()
    return made


@pytest.fixture
def review(drained, tmp_path, monkeypatch):
    """A copy of the drained plan (its remote, alice's clone and host-b's), the board on alice's clone."""
    monkeypatch.setenv("RUNNER_PUSHER", "alice")
    root = tmp_path / "review"
    shutil.copytree(drained, root, symlinks=True)
    bare, laptop, host_b = root / "remote.git", root / "laptop", root / "host-b"
    for clone in (laptop, host_b):
        git(clone, "remote", "set-url", "origin", str(bare))
    board, url, err = start_board(laptop)
    yield {
        "bare": bare,
        "laptop": laptop,
        "host_b": host_b,
        "url": url,
        "base": url.split("#")[0],
        "board": board,
        "tmp": root,
        "notices": root / "notices.txt",
        "stderr": err,
    }
    stop(board)


def test_the_home_page_lists_every_step_and_what_needs_you_first(review, page):
    page.goto(review["url"])
    page.wait_for_selector("#steps")
    rows = {
        row.get_attribute("data-step"): row.get_attribute("data-status")
        for row in page.query_selector_all("#steps tbody tr")
    }
    assert rows == {"01-db": "done", "02-api": "review", "03-ui": "review", "04-bad": "failed"}
    needs = {
        card.get_attribute("data-step"): card.get_attribute("data-kind")
        for card in page.query_selector_all("#needs .need")
    }
    assert needs == {"02-api": "review", "03-ui": "review", "04-bad": "failed"}
    assert "the build broke" not in page.inner_text("#needs") and "exit code 3" in page.inner_text(
        "#needs .need[data-step='04-bad']"
    )
    assert "its result waits for your approval" in page.inner_text("#needs .need[data-step='02-api']")
    headings = [h.inner_text().split("\n")[0].upper() for h in page.query_selector_all("main h2")]
    assert headings.index("NEEDS YOU") < headings.index("THE PLAN") < headings.index("WORKERS")
    assert sorted(n.get_attribute("data-node") for n in page.query_selector_all("#graph [data-node]")) == [
        "01-db",
        "02-api",
        "03-ui",
        "04-bad",
    ]
    assert page.inner_text("#workers tr[data-worker='w2']")
    assert "acting as alice" in page.inner_text("#who")


def test_a_steps_page_shows_what_approve_would_merge_and_every_run(review, page):
    page.goto(review["url"])
    page.goto(review["base"] + "steps/02-api")
    page.wait_for_selector("#diff .dfile[data-file='api.txt']")
    diff = page.inner_text("#diff")
    assert "exactly what approve would merge into runner/integration" in diff
    assert "api.txt" in diff and "+api" in diff and "db.txt" not in diff  # 01-db is merged already
    runs = page.inner_text("#runs")
    assert "Attempt 1" in runs and "implement" in runs and "pass" in runs
    assert "complete" in page.inner_text("#history") and "w2" in page.inner_text("#history")
    assert "requires_approval: true" in page.inner_text("#file")
    assert page.query_selector("button[data-action='approve']") and page.query_selector("button[data-action='reject']")
    page.goto(review["base"] + "steps/04-bad")
    page.wait_for_selector("#runs")
    assert "exit code 3" in page.inner_text("#runs") and "fail" in page.inner_text("#runs")
    assert "the build broke" in page.inner_text("#handoff")  # the log tail the attempt left
    assert page.query_selector("button[data-action='retry']") and not page.query_selector(
        "button[data-action='approve']"
    )


def test_approve_and_reject_with_a_comment_from_the_page_land_on_the_queue_as_the_person(review, page):
    page.goto(review["url"])
    page.goto(review["base"] + "steps/02-api")
    page.click("button[data-action='approve']")
    page.wait_for_selector(".flash.ok")
    assert page.inner_text("#flash").startswith("approve 02-api (attempt 1) -> done")
    page.goto(review["base"] + "steps/03-ui")
    page.click("button[data-action='reject']")
    page.fill("textarea[name='reason']", "Use the blue palette <b>not</b> red")
    page.click("button[data-action='reject-send']")
    page.wait_for_selector(".flash.ok")
    events = {(e.get("Event"), e.get("Step")): e for e in queue_history(review["bare"])}
    assert events[("approve", "02-api")]["Actor"] == "alice"
    assert events[("reject", "03-ui")]["Actor"] == "alice"
    assert json.loads(events[("reject", "03-ui")]["Reason"]) == "Use the blue palette <b>not</b> red"
    assert git(review["bare"], "show", "runner/integration:api.txt") == "api"  # approve merged the result
    shown = runner_json(review["host_b"], "show", "03-ui")
    assert shown["status"] == "ready" and shown["last_error"].endswith(
        ": Use the blue palette <b>not</b> red"
    )  # the next attempt's feedback
    # The page shows the step as it is now, without being asked.
    page.wait_for_selector("h1 .pill.ready")
    # The worker told the people, by [notify], once each: what needed them, and when nothing was left to run.
    lines = wait_for(
        lambda: (
            (t := review["notices"].read_text().splitlines() if review["notices"].exists() else [])
            and len(t) >= 4
            and t
        )
    )
    assert sorted(line for line in lines if not line.startswith("drained ")) == [
        "failed 04-bad",
        "needs-you 02-api",
        "needs-you 03-ui",
    ]
    assert len([line for line in lines if line.startswith("drained ")]) == 1


def test_a_refusal_is_shown_as_the_cli_states_it(review, page):
    page.goto(review["url"])
    page.goto(review["base"] + "steps/02-api")
    page.click("button[data-action='reject']")
    page.fill("textarea[name='reason']", "too late")  # the page keeps the form open while the queue moves
    runner(
        review["laptop"], "approve", "02-api", "--by", "alice", env={"RUNNER_PUSHER": "alice"}
    )  # someone was quicker
    cli = runner(
        review["laptop"],
        "reject",
        "02-api",
        "--reason",
        "too late",
        "--by",
        "alice",
        check=False,
        env={"RUNNER_PUSHER": "alice"},
    )
    assert cli.returncode != 0
    page.click("button[data-action='reject-send']")
    page.wait_for_selector(".flash.err")
    assert page.inner_text("#flash") == cli.stderr.strip()


def add(review, step_id: str, title: str | None = None, **fields) -> None:
    """alice adds a step from another clone of hers (the board's clone only reads)."""
    from support.hooked import clone

    folder = review["tmp"] / f"alice-{step_id}"
    path, data = step_file(step_id, title, fields.pop("body", ""), **fields)
    clone(review["bare"], folder).edit(lambda snap: {path: data}, f"add {step_id}", "alice")


def test_the_page_updates_when_a_worker_on_another_clone_records_a_step(review, page):
    add(review, "05-late", run=["sh", "-c", "echo late > late.txt"])
    page.goto(review["url"])
    page.wait_for_selector("#steps tr[data-step='05-late'][data-status='ready']")
    page.evaluate("window.__not_reloaded = true")
    host_a = worker_clone(review["bare"], review["tmp"] / "host-a")
    assert tick_once(host_a, "w1")["step"] == "05-late"
    page.wait_for_selector("#steps tr[data-step='05-late'][data-status='done']")
    assert page.evaluate("window.__not_reloaded") is True
    assert page.query_selector("#workers tr[data-worker='w1']")


def test_the_live_log_of_a_running_step_appears_on_the_board(review, page):
    release = review["tmp"] / "release"
    script = (
        f'echo "hello from the step"; printf "\\033[31mred\\033[0m <b>bold</b>\\n"; '
        f"while [ ! -e {release} ]; do sleep 0.05; done; echo bye"
    )
    add(review, "06-long", run=["sh", "-c", script])
    host_a = worker_clone(review["bare"], review["tmp"] / "host-a")
    worker = subprocess.Popen(
        [sys.executable, "-m", "runner", "tick", "--id", "w1", "--step", "06-long", "--repo", str(host_a)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**ENV_PATH, **WORKER_ENV["w1"]},
    )
    try:
        page.goto(review["url"])
        page.goto(review["base"] + "steps/06-long")
        page.wait_for_function(
            "document.querySelector('#live-output') && "
            "document.querySelector('#live-output').innerText.includes('hello from the step')"
        )
        live = page.inner_text("#live-output")
        assert "\\x1b[31mred\\x1b[0m <b>bold</b>" in live and not page.query_selector("#live-output b")
        assert "running implement" in page.inner_text(".livebox")
        release.write_text("go")
        page.wait_for_selector("h1 .pill.done")
        assert worker.wait(timeout=120) == 0
    finally:
        release.write_text("go")
        if worker.poll() is None:
            worker.kill()
        worker.wait()


def test_a_request_without_the_token_changes_nothing(review, page):
    before = git(review["bare"], "rev-parse", "runner/queue")
    base = review["base"]
    token = review["url"].split("#token=")[1]
    body = json.dumps({"action": "approve", "step": "02-api"}).encode()
    tries = {
        "no token": {"Content-Type": "application/json"},
        "a wrong token": {"Content-Type": "application/json", "X-Runner-Token": "x" * len(token)},
        "another site's page": {
            "Content-Type": "application/json",
            "X-Runner-Token": token,
            "Origin": "http://evil.example",
        },
        "a form's body": {"Content-Type": "application/x-www-form-urlencoded", "X-Runner-Token": token},
        "another host name (DNS rebinding)": {
            "Content-Type": "application/json",
            "X-Runner-Token": token,
            "Host": "evil.example",
        },
    }
    for what, headers in tries.items():
        code, answer = post(base + "api/act", body, headers)
        assert code in (403, 421), (what, code, answer)
    assert git(review["bare"], "rev-parse", "runner/queue") == before
    # A page that was opened without the token offers the actions but cannot take them.
    page.goto(base)
    page.wait_for_selector("#needs")
    assert page.is_disabled("button[data-action='approve']")
    assert "no token" in page.inner_text("#who")
    code, _ = post(base + "api/act", body, {"Content-Type": "application/json", "X-Runner-Token": token})
    assert code == 200 and git(review["bare"], "rev-parse", "runner/queue") != before  # the token is what acts


def test_read_only_offers_no_action(review, page):
    board, url, _ = start_board(review["laptop"], "--read-only")
    try:
        assert "#token=" not in url
        page.goto(url)
        page.wait_for_selector("#needs .need")
        page.goto(url + "steps/02-api")
        page.wait_for_selector("#diff")
        assert page.query_selector_all("button[data-action]") == []
        assert page.inner_text("#who") == "read-only"
        before = git(review["bare"], "rev-parse", "runner/queue")
        code, _ = post(
            url + "api/act",
            json.dumps({"action": "approve", "step": "02-api"}).encode(),
            {"Content-Type": "application/json"},
        )
        assert code in (404, 405) and git(review["bare"], "rev-parse", "runner/queue") == before
    finally:
        stop(board)


def test_a_form_a_person_opened_stays_open_while_the_queue_moves(review, page):
    page.goto(review["url"])
    page.goto(review["base"] + "steps/03-ui")
    page.wait_for_selector("button[data-action='reject']")
    page.wait_for_function("document.body.dataset.version")
    before = page.get_attribute("body", "data-version")
    page.click("button[data-action='reject']")
    page.wait_for_selector("textarea[name='reason']")
    add(review, "09-more")  # the queue moves while the person has not typed yet: the page reads it again
    page.wait_for_function(f"document.body.dataset.version !== {json.dumps(before)}")
    assert page.query_selector("textarea[name='reason']"), "the open form was thrown away by the update"


def test_the_board_never_runs_a_steps_command(review, page):
    marker = review["tmp"] / "ran"
    add(
        review,
        "07-trap",
        tags=["nobody-has-it"],
        run=["sh", "-c", f"touch {marker}"],
        body=f"#### Automated Verification:\n- [ ] trap: `touch {marker}`\n",
    )
    page.goto(review["url"])
    page.goto(review["base"] + "steps/07-trap")
    page.wait_for_selector("button[data-action='abort']")
    page.click("button[data-action='abort']")
    page.fill("textarea[name='reason']", "not today")
    page.click("button[data-action='abort-send']")
    page.wait_for_selector("h1 .pill.failed")
    page.click("button[data-action='retry']")
    page.wait_for_selector("h1 .pill.ready")
    page.goto(review["base"])
    page.wait_for_selector("#steps tr[data-step='07-trap']")
    assert not marker.exists()


def test_titles_and_outputs_with_html_or_terminal_escapes_are_shown_as_text(review, page):
    title = '<img src=x onerror="window.pwned=1">Fancy & <script>window.pwned=2</script>'
    add(
        review,
        "08-odd",
        title,
        run=["sh", "-c", 'printf "<script>window.pwned=3</script>\\033[2J\\033]0;owned\\007\\n"; exit 1'],
    )
    drain(review["host_b"])
    page.goto(review["url"])
    page.wait_for_selector("#steps tr[data-step='08-odd']")
    assert page.inner_text("#steps tr[data-step='08-odd'] td.title") == title
    page.goto(review["base"] + "steps/08-odd")
    page.wait_for_selector("#handoff")
    handoff = page.inner_text("#handoff")
    assert "<script>window.pwned=3</script>\\x1b[2J\\x1b]0;owned\\x07" in handoff
    assert page.evaluate("window.pwned") is None
    assert page.query_selector_all("main img, main script") == []


def test_the_pages_forbid_any_other_script(review):
    with urllib.request.urlopen(review["base"], timeout=60) as answer:
        policy = answer.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy


def test_a_host_other_than_loopback_warns_and_says_how_to_tunnel(review):
    board, _url, err = start_board(review["laptop"], "--host", "0.0.0.0")
    try:
        warning = err.read_text()
        assert "warning: --host 0.0.0.0" in warning and "ssh -N -L" in warning
    finally:
        stop(board)


def post(url: str, body: bytes, headers: dict) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_needs_you_says_when_agents_run_without_approval(queue_repo):
    """Issue 36, point 1: the board says it as `runner status` does."""
    from runner.board.view import home
    from runner.queue.queue import open_queue

    set_config(queue_repo, detect=False, harness=["my-agent", "{prompt}"])
    queue = open_queue(queue_repo)
    needs = home(queue, queue.snapshot())["needs"]
    assert [n["kind"] for n in needs] == ["warning"] and "agents run without approval" in needs[0]["why"]
    set_config(queue_repo, detect=False, harness=["my-agent", "{prompt}"], requires_approval=True)
    assert home(queue, queue.snapshot())["needs"] == []
