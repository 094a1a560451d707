"""The board shows what agent runs cost and which accounts a provider's limit paused (issue
43), in Debian's headless Chromium: the plan's total, each step's spend, each worker's, each
run's, and the paused account, over a bare remote under the hook with identities. The steps'
commands report usage with the documented RUNNER-USAGE line, and one exits 75 (try later).
Skipped, with the reason, only where /usr/bin/chromium is missing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.repos import runner, runner_json
from support.review import BROWSER, BROWSER_FLAGS, WORKER_ENV, review_remote, start_board, stop, worker_clone

if not os.path.exists(BROWSER):
    pytest.skip(
        f"needs Chromium at {BROWSER} (Debian: apt-get install chromium; .ci/run installs it)", allow_module_level=True
    )

from playwright.sync_api import sync_playwright

WAIT = 60_000  # ms: a bound, never a measure
SHOTS = Path(os.environ.get("RUNNER_BOARD_SHOTS", "")) if os.environ.get("RUNNER_BOARD_SHOTS") else None


def reporting(what: str, usd: float, tokens: tuple[int, int]) -> list[str]:
    usage = json.dumps({"input_tokens": tokens[0], "output_tokens": tokens[1], "usd": usd, "model": "house-model"})
    return ["sh", "-c", f"echo {what} > {what}.txt; echo 'RUNNER-USAGE: {usage}'"]


STEPS = (
    ("01-db", {"run": reporting("db", 0.0125, (1200, 300))}),
    ("02-api", {"depends_on": ["01-db"], "run": reporting("api", 0.02, (2500, 800))}),
    # python3, another account: it says "try later" (exit 75) with the reset a day ahead
    (
        "03-quota",
        {
            "run": [
                "python3",
                "-c",
                (
                    'import sys, datetime as d; print(\'RUNNER-USAGE: {"input_tokens": 0, '
                    '"output_tokens": 0, "resets_at": "%s"}\' % (d.datetime.now(d.UTC) + '
                    "d.timedelta(days=1)).strftime('%Y-%m-%dT%H:%M:%SZ')); sys.exit(75)"
                ),
            ]
        },
    ),
)


@pytest.fixture
def board(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_PUSHER", "alice")
    bare, laptop = review_remote(tmp_path, STEPS)
    host = worker_clone(bare, tmp_path / "host-b")
    for _ in range(6):
        if runner_json(host, "tick", "--id", "w2", env=WORKER_ENV["w2"]).get("outcome") in ("skip", "no-queue"):
            break
    proc, url, _ = start_board(laptop)
    yield {"url": url, "base": url.split("#")[0], "laptop": laptop}
    stop(proc)


def test_the_board_shows_what_the_plan_each_step_worker_and_run_spent_and_the_paused_account(board):
    status = runner_json(board["laptop"], "status")
    assert {s["step"]: s["status"] for s in status["steps"]} == {"01-db": "done", "02-api": "done", "03-quota": "ready"}
    assert [p["account"] for p in status["paused"]] == ["python3"]
    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=BROWSER, args=BROWSER_FLAGS)
        page = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True).new_page()
        page.set_default_timeout(WAIT)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(board["url"])
        page.wait_for_selector("#plan-spent .money")
        spent = page.inner_text("#plan-spent")
        assert "$0.0325" in spent and "reported by the agent CLI" in spent and "3.7k in, 1.1k out" in spent, spent
        assert "3 agent runs" in spent and "unknown" not in spent and "unpriced" not in spent  # the quota run spent 0
        assert page.inner_text("#steps tr[data-step='01-db'] td.spent") == "$0.0125"
        assert page.inner_text("#steps tr[data-step='02-api'] td.spent") == "$0.0200"
        assert page.inner_text("#workers tr[data-worker='w2'] td.spent").startswith("$0.0325")
        paused = page.inner_text("#paused [data-account='python3']")
        assert "Account python3 is paused until" in paused and "03-quota" in paused and "resets in" in paused, paused
        if SHOTS:
            page.screenshot(path=str(SHOTS / "board-costs-home.png"), full_page=True)
        page.goto(board["base"] + "steps/01-db")
        page.wait_for_selector("#runs")
        runs = page.inner_text("#runs")
        assert "$0.0125 by the command" in runs and "house-model" in runs and "1.2k in, 300 out" in runs, runs
        assert "$0.0125" in page.inner_text("#step-spent")
        if SHOTS:
            page.screenshot(path=str(SHOTS / "board-costs-step.png"), full_page=True)
        page.goto(board["base"] + "steps/03-quota")
        page.wait_for_selector("#runs")
        assert "limit of account python3" in page.inner_text("#runs") and "no attempt spent" in page.inner_text("#runs")
        browser.close()
    assert errors == []
    assert runner(board["laptop"], "cost", "--json").returncode == 0
