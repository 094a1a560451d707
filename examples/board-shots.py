"""Take the README's screenshots of `runner board` (docs/board-home.png, board-step.png,
board-live.png, board-review.png: comments on lines of a result, board-dark.png: the dark theme):
a demo plan on a bare remote in a temporary folder, drained by workers on their own clones,
one step still running, and the board on a person's clone, photographed by headless Chromium.

    python examples/board-shots.py        # needs /usr/bin/chromium and playwright (the test extra)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "PYTHONPATH": str(ROOT),
    "GIT_AUTHOR_NAME": "alice",
    "GIT_AUTHOR_EMAIL": "alice@example.com",
    "GIT_COMMITTER_NAME": "alice",
    "GIT_COMMITTER_EMAIL": "alice@example.com",
}
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def sh(*args: str, cwd: Path, env: dict | None = None) -> str:
    return subprocess.run(args, cwd=cwd, env=env or ENV, check=True, capture_output=True, text=True).stdout


def runner(repo: Path, *args: str) -> str:
    return sh(sys.executable, "-m", "runner", *args, "--repo", str(repo), cwd=repo)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="runner-board-shots-"))
    sh("git", "init", "-q", "-b", "main", "shop", cwd=work)
    (work / "shop" / "README.md").write_text("# shop\n")
    sh("git", "add", ".", cwd=work / "shop")
    sh("git", "commit", "-qm", "initial", cwd=work / "shop")
    sh("git", "clone", "-q", "--bare", "shop", "remote.git", cwd=work)
    for name in ("laptop", "host-a", "host-b"):
        sh("git", "clone", "-q", "remote.git", name, cwd=work)
    laptop = work / "laptop"
    sh("git", "config", "user.name", "alice", cwd=laptop)
    runner(laptop, "init")
    steps = [
        (
            "01-schema",
            "Create the database schema",
            [],
            False,
            "mkdir -p db && echo 'create table orders (id int);' > db/schema.sql",
        ),
        (
            "02-models",
            "Order and customer models",
            ["01-schema"],
            False,
            "mkdir -p shop && printf 'class Order:\\n    total = 0\\n' > shop/models.py",
        ),
        (
            "03-api",
            "REST API for orders",
            ["02-models"],
            True,
            (
                "printf 'from shop.models import Order\\n\\n\\ndef list_orders():\\n    return [Order()]\\n' "
                "> shop/api.py; echo 'GET /orders' >> README.md"
            ),
        ),
        (
            "04-auth",
            "Login and sessions",
            ["01-schema"],
            True,
            "mkdir -p shop && printf 'def login(user, password):\\n    return user\\n' > shop/auth.py",
        ),
        (
            "05-import",
            "Import the legacy CSV export",
            [],
            False,
            "echo 'legacy.csv: line 14: unterminated quote' >&2; exit 2",
        ),
        (
            "06-search",
            "Full-text search over orders",
            ["02-models"],
            False,
            (
                "echo 'indexing 12,408 orders'; echo 'batch 1/3 done'; echo 'batch 2/3 done'; "
                "sleep 600; echo ok > search.txt"
            ),
        ),
        ("07-docs", "User guide", ["03-api", "04-auth"], False, "echo guide > GUIDE.md"),
    ]
    for step_id, title, deps, approval, script in steps:
        args = ["add", title, "--id", step_id, "--run", json.dumps(["sh", "-c", script])]
        args += [a for d in deps for a in ("--depends-on", d)] + (["--requires-approval"] if approval else [])
        if step_id == "06-search":
            args += ["--tag", "search"]  # host-a's, so that it is the one still running
        if step_id == "05-import":
            args += ["--body", "Needs the export from the old shop."]
        runner(laptop, *args)
    toml = sh("git", "show", "origin/runner/queue:runner.toml", cwd=laptop).replace(
        'live_log = "5s"', 'live_log = "0.3s"'
    )
    toml = toml.replace("max_attempts = 3", "max_attempts = 1")
    (work / "runner.toml").write_text(toml)
    subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys; from runner.queue.queue import open_queue; "
                "open_queue(sys.argv[1]).edit(lambda s: {'runner.toml': open(sys.argv[2], 'rb').read()}, "
                "'configure', 'alice')"
            ),
            str(laptop),
            str(work / "runner.toml"),
        ],
        env=ENV,
        check=True,
    )
    for _ in range(6):
        runner(work / "host-b", "tick", "--id", "host-b")
    searcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner",
            "worker",
            "--id",
            "host-a",
            "--tag",
            "search",
            "--interval",
            "1",
            "--repo",
            str(work / "host-a"),
        ],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    idle = subprocess.Popen(
        [sys.executable, "-m", "runner", "worker", "--id", "host-c", "--interval", "1", "--repo", str(work / "host-b")],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out = work / "board.out"
    with open(out, "w") as board_out:  # the board writes to its own copy of the descriptor
        board = subprocess.Popen(
            [sys.executable, "-m", "runner", "board", "--port", "0", "--every", "0.5"],
            cwd=laptop,
            env=ENV,
            stdout=board_out,
            stderr=subprocess.DEVNULL,
        )
    try:
        while "runner board on" not in out.read_text():
            time.sleep(0.1)
        url = out.read_text().split(" on ", 1)[1].split()[0]
        base = url.split("#")[0]
        from playwright.sync_api import sync_playwright

        with sync_playwright() as play:
            browser = play.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
            page.goto(url)
            page.wait_for_selector("#workers tr[data-worker='host-a']")
            page.wait_for_function("() => document.querySelectorAll('#workers .pill.alive').length >= 2", timeout=60000)
            time.sleep(1)
            page.screenshot(path=str(ROOT / "docs" / "board-home.png"), full_page=True)
            page.goto(base + "steps/03-api")
            page.wait_for_selector("#diff .dfile[data-file='shop/api.py']")
            page.screenshot(path=str(ROOT / "docs" / "board-step.png"), full_page=False)
            page.click("#diff .dfile[data-file='shop/api.py'] td.ln.target[data-line='5']")
            page.fill(
                "textarea[name='comment']",
                "Page the orders: a shop has thousands. Take ?page= and return 50 at a time.",
            )
            page.click("button[data-action='comment-add']")
            page.click("#diff .dfile[data-file='shop/api.py'] td.ln.target[data-line='1']")
            page.fill(
                "textarea[name='comment']", "Import the model from shop.models only once the API module is split."
            )
            page.click("button[data-action='comment-add']")
            page.click("button[data-action='reject-comments']")
            page.wait_for_selector(".pending-list")
            page.fill("textarea[name='reason']", "Close: two things to change before it merges.")
            page.locator("#diff").scroll_into_view_if_needed()
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(ROOT / "docs" / "board-review.png"), full_page=False)
            dark = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1, color_scheme="dark")
            dark.goto(url)
            dark.wait_for_selector("#workers tr[data-worker='host-a']")
            time.sleep(1)
            dark.screenshot(path=str(ROOT / "docs" / "board-dark.png"), full_page=False)
            narrow = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=1)
            narrow.goto(url)
            narrow.wait_for_selector("#steps")
            narrow.screenshot(path=str(ROOT / "docs" / "board-narrow.png"), full_page=False)
            page.goto(base + "steps/06-search")
            page.wait_for_function(
                "() => (document.querySelector('#live-output') || {}).innerText?.includes('batch 2/3')", timeout=60000
            )
            page.screenshot(path=str(ROOT / "docs" / "board-live.png"), full_page=False)
            browser.close()
    finally:
        searcher.kill()  # its step dies with it
        for proc in (board, searcher, idle):
            proc.terminate()
            proc.wait(timeout=60)
    print(f"screenshots in {ROOT / 'docs'}; the demo is in {work}")


if __name__ == "__main__":
    main()
