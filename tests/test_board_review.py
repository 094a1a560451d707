"""The board as a reviewer's tool (issue 46): in the system's Chromium, over a bare remote under
runner's hook, a reviewer comments on two lines of a result and rejects; the next attempt's
prompt (a stub agent keeps it) and the step's feedback carry both comments with file, line and
text. The filter, a bulk retry (each step its own event, after a confirmation listing them),
the keyboard's approve and the dark theme work. Skipped only where /usr/bin/chromium is missing."""

from __future__ import annotations

import json
import os

import pytest
from support.repos import git, queue_history, runner
from support.review import BROWSER, BROWSER_FLAGS, review_remote, start_board, stop, worker_clone

if not os.path.exists(BROWSER):
    pytest.skip(f"needs Chromium at {BROWSER} (Debian: apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import sync_playwright

WAIT = 60_000
HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>\x1b[2J'


def _api(prompts) -> list[str]:
    return [
        "sh",
        "-c",
        (
            'if [ "$RUNNER_ATTEMPT" = 1 ]; then printf "def total(items):\\n    return 0\\n\\nLIMIT = 10\\n" > api.py; '
            'else printf "def total(items):\\n    return sum(items)\\n\\nLIMIT = 10\\n" > api.py; fi; '
            f'cp "$1" {prompts}/prompt-$RUNNER_ATTEMPT.md'
        ),
        "sh",
        "{prompt_file}",
    ]


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """One drained plan, board and browser for the module (a drain under the hook and a browser
    cost seconds of CPU each): each test acts on steps of its own (01-api; 02-ok, 03-flaky and
    04-flaky) or only reads, so they run in any order."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RUNNER_PUSHER", "alice")
        yield from _board(tmp_path_factory.mktemp("board"))


def _board(tmp_path):
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    steps = (
        ("01-api", {"requires_approval": True, "run": _api(prompts)}),
        ("02-ok", {"requires_approval": True, "run": ["sh", "-c", "echo ok > ok.txt"]}),
        ("03-flaky", {"max_attempts": 1, "tags": ["flaky"], "run": ["sh", "-c", "exit 3"]}),
        ("04-flaky", {"max_attempts": 1, "tags": ["flaky"], "run": ["sh", "-c", "exit 4"]}),
        ("05-broken", {"max_attempts": 1, "run": ["sh", "-c", "exit 5"]}),
    )
    bare, laptop = review_remote(tmp_path, steps)
    host = worker_clone(bare, tmp_path / "host")
    for _ in range(6):
        runner(host, "tick", "--id", "w1", "--tag", "flaky", env={"RUNNER_PUSHER": "key-a"})
    proc, url, _err = start_board(laptop)
    with sync_playwright() as play:
        chromium = play.chromium.launch(executable_path=BROWSER, args=BROWSER_FLAGS)
        yield {
            "bare": bare,
            "laptop": laptop,
            "host": host,
            "prompts": prompts,
            "url": url,
            "base": url.split("#")[0],
            "browser": chromium,
        }
        chromium.close()
    stop(proc)


def _page(board, **options):
    context = board["browser"].new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True, **options)
    page = context.new_page()
    page.set_default_timeout(WAIT)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(board["url"])
    page.wait_for_selector("#steps")
    return page, errors


def test_a_reviewer_comments_on_two_lines_and_rejects_and_the_next_attempt_reads_both(board):
    page, errors = _page(board)
    page.goto(board["base"] + "steps/01-api")
    page.wait_for_selector("#diff .dfile[data-file='api.py'] td.ln.target[data-line='2']")
    assert page.query_selector("#diff .dfile[data-file='api.py'] .hl-k")  # `def` and `return`, coloured
    page.click("#diff .dfile[data-file='api.py'] td.ln.target[data-line='2']")
    page.fill("textarea[name='comment']", "sum the items " + HOSTILE)
    page.click("button[data-action='comment-add']")
    page.click("button[data-whole='api.py']")  # the whole file: context beyond the hunk, commentable too
    page.wait_for_selector("button[data-whole='api.py']:has-text('changes only')")
    page.click("#diff .dfile[data-file='api.py'] td.ln.target[data-line='4']")
    page.fill("textarea[name='comment']", "keep LIMIT")
    page.click("button[data-action='comment-add']")
    assert "sum the items <img" in page.inner_text("#diff")  # the hostile comment shown as text
    page.click("button[data-action='reject-comments']")
    page.wait_for_selector(".pending-list")
    page.click("button[data-action='reject-send']")
    page.wait_for_selector(".flash.ok")
    assert page.evaluate("window.pwned") is None
    rejects = [e for e in queue_history(board["bare"]) if e.get("Event") == "reject"]
    assert len(rejects) == 1 and rejects[0]["Actor"] == "alice"  # one event, as the person, accepted by the hook
    carried = json.loads(rejects[0]["Comments"])
    assert [(c["file"], c["line"], c["line_text"]) for c in carried] == [
        ("api.py", 2, "    return 0"),
        ("api.py", 4, "LIMIT = 10"),
    ]
    step_file = git(board["bare"], "show", "runner/queue:plans/steps/01-api.md")
    assert "review_comments:" in step_file and "keep LIMIT" in step_file  # the step's feedback, as data
    runner(board["host"], "tick", "--id", "w1", "--step", "01-api", env={"RUNNER_PUSHER": "key-a"})
    prompt = (board["prompts"] / "prompt-2.md").read_text()
    assert "api.py:2" in prompt and "    return 0" in prompt and "sum the items <img" in prompt
    assert "api.py:4" in prompt and "LIMIT = 10" in prompt and "keep LIMIT" in prompt
    page.goto(board["base"] + "steps/01-api")
    page.wait_for_selector("#handoff .md")
    handoff = page.inner_text("#handoff")
    assert "1 of 2 addressed" in handoff and "waits for your approval" in handoff and "STEP_BLOCKED" not in handoff
    assert errors == []


def test_filter_bulk_retry_keyboard_approve(board):
    page, errors = _page(board)
    page.select_option("select[name='tag']", "flaky")
    assert sorted(r.get_attribute("data-step") for r in page.query_selector_all("#steps tbody tr:not([hidden])")) == [
        "03-flaky",
        "04-flaky",
    ]
    page.keyboard.press("/")
    page.keyboard.type("04")
    assert [r.get_attribute("data-step") for r in page.query_selector_all("#steps tbody tr:not([hidden])")] == [
        "04-flaky"
    ]
    page.fill("#filter-text", "")
    page.dispatch_event("#filter-text", "input")
    page.click("button[data-action='bulk-retry']")
    page.wait_for_selector("#bulk-confirm")
    assert sorted(li.get_attribute("data-step") for li in page.query_selector_all("#bulk-list li")) == [
        "03-flaky",
        "04-flaky",
    ]
    page.click("button[data-action='bulk-retry-send']")
    page.wait_for_selector(".flash.ok:has-text('2 of 2 done')")
    retries = [e["Step"] for e in queue_history(board["bare"]) if e.get("Event") == "retry"]
    assert sorted(retries) == ["03-flaky", "04-flaky"]  # each its own event; 05-broken, not matched, untouched
    page.select_option("select[name='tag']", "")
    page.wait_for_selector("#steps tbody tr[data-step='02-ok'][data-status='review']")
    page.locator("body").click(position={"x": 5, "y": 5})
    rows = [r.get_attribute("data-step") for r in page.query_selector_all("#steps tbody tr:not([hidden])")]
    for _ in range(rows.index("02-ok") + 1):
        page.keyboard.press("j")
    assert page.get_attribute("#steps tbody tr.selected", "data-step") == "02-ok"
    page.keyboard.press("a")
    page.wait_for_selector(".flash.ok:has-text('approve 02-ok')")
    assert [e for e in queue_history(board["bare"]) if e.get("Event") == "approve" and e.get("Step") == "02-ok"]
    assert errors == []


def test_the_dark_theme_follows_the_system(board):
    page, errors = _page(board, color_scheme="dark")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(11, 17, 32)"
    light, _ = _page(board, color_scheme="light")
    assert light.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(245, 246, 248)"
    title = page.get_attribute("#steps tbody tr[data-step='01-api'] td.title", "title")
    assert title == page.inner_text("#steps tbody tr[data-step='01-api'] td.title") and title  # the full title on hover
    assert errors == []
