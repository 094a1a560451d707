"""The README's tour runs exactly as written (issue 46, point 4): every line of "A tour" and of
the by-hand block, in order, in a fresh repository, each with the exit code its comment
promises (0 unless the comment starts `exit N`; a line that runs `until Ctrl-C` is stopped with
Ctrl-C once it has said it is up). A refused claim's message names the real reason."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from support.repos import ENV_PATH, ROOT, make_repo, wait_for

README = (ROOT / "README.md").read_text()


def block_after(marker: str) -> list[str]:
    """The lines of the first fenced block after `marker` in the README."""
    rest = README[README.index(marker) :]
    body = re.search(r"^```\n(.*?)^```$", rest, re.MULTILINE | re.DOTALL)
    assert body, marker
    return [line for line in body.group(1).splitlines() if line.strip()]


def expected(line: str) -> int | None:
    """The exit code a tour line's comment promises; None for one that runs until Ctrl-C."""
    comment = line.partition("  #")[2].strip()
    if comment.startswith("until Ctrl-C"):
        return None
    found = re.match(r"exit (\d):", comment)
    return int(found.group(1)) if found else 0


def answers(address: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(address, timeout=10):
            return True
    except urllib.error.HTTPError:
        return True  # it answered (a page that wants its token)
    except OSError:
        return False


def run(repo: Path, line: str) -> tuple[int, str]:
    argv = shlex.split(line, comments=True)
    assert argv[0] == "runner", line
    command = [sys.executable, "-m", "runner", *argv[1:]]
    if expected(line) is not None:
        proc = subprocess.run(command, cwd=repo, capture_output=True, text=True, env=ENV_PATH, timeout=120)
        return proc.returncode, proc.stdout + proc.stderr
    served = subprocess.Popen(
        command + ["--port", "0"], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV_PATH
    )
    said = served.stdout.readline()  # it says it is up, then serves until Ctrl-C
    if " on http" in said:  # Ctrl-C once it answers a request (sent earlier, it could land before serving began)
        address = said.split(" on ", 1)[1].split("#")[0].strip()
        wait_for(lambda: answers(address), timeout=60)
    served.send_signal(signal.SIGINT)
    served.communicate(timeout=60)
    return (0 if said.startswith("runner board") and served.returncode in (0, -signal.SIGINT, 130) else 1), said


def test_the_tour_and_the_by_hand_block_run_as_written_in_a_fresh_repository(tmp_path):
    repo = make_repo(tmp_path / "project")
    tour, by_hand = block_after("## A tour"), block_after("Work the queue by hand")
    assert len(tour) >= 10 and len(by_hand) >= 20
    said = {}
    for line in tour + by_hand:
        code, output = run(repo, line)
        assert code == (expected(line) or 0), f"{line}\nexited {code}:\n{output}"
        said[line] = output
    refused = [(line, said[line]) for line in by_hand if expected(line) == 3]
    assert len(refused) == 2, refused
    # The real reason, not another true-looking one: the dependency when it is the dependency...
    (deps_line, deps), (tag_line, tag) = refused
    assert "--tag linux" in deps_line and "error: 02-api waits for 01-db" in deps and "tag" not in deps
    # ...and the tag when the person skips the dependencies.
    assert "--ignore-deps" in tag_line and "error: 02-api needs tag linux" in tag and "waits" not in tag
