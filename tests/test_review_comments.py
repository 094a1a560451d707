"""A reviewer's comments on lines of a result (issue 46, part 1): `runner reject STEP --comment
FILE:LINE TEXT` records them in ONE reject event (`Runner-Comments`, the step's
`review_comments`), the server hook replays it, the next attempt's prompt and feedback carry
each with its file, line and the line's text, and its handoff says which it addressed. Bad
comments are refused with every problem in one line (exit 2); hostile text stays text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.repos import git, queue_history, runner
from support.review import review_remote, worker_clone

from runner.core import comments
from runner.core.codec import CodecError, decode, encode
from runner.core.machine import Event, Kind
from runner.core.model import utc_now

FIRST = "def total(items):\n    return 0\n\nLIMIT = 10\n"
SECOND = "def total(items):\n    return sum(items)\n\nLIMIT = 10\n"


def _script(prompts: Path) -> list[str]:
    """A stub agent: writes api.py (its second attempt fixes line 2 only) and keeps the prompt it was given."""
    return [
        "sh",
        "-c",
        (
            f'if [ "$RUNNER_ATTEMPT" = 1 ]; then printf "{FIRST}" > api.py; else printf "{SECOND}" > api.py; '
            f'fi; cp "$1" {prompts}/prompt-$RUNNER_ATTEMPT.md'
        ),
        "sh",
        "{prompt_file}",
    ]


@pytest.fixture
def in_review(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_PUSHER", "alice")
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    bare, laptop = review_remote(tmp_path, (("01-api", {"run": _script(prompts), "requires_approval": True}),))
    host = worker_clone(bare, tmp_path / "host")
    runner(host, "tick", "--id", "w1", env={"RUNNER_PUSHER": "key-a"})
    assert json.loads(runner(laptop, "show", "01-api", "--json").stdout)["status"] == "review"
    return {"bare": bare, "laptop": laptop, "host": host, "prompts": prompts}


def test_comments_on_two_lines_reach_the_next_attempt_and_its_handoff_says_which_it_addressed(in_review):
    laptop, host = in_review["laptop"], in_review["host"]
    done = runner(
        laptop,
        "reject",
        "01-api",
        "--comment",
        "api.py:2",
        "sum the items, do not return 0",
        "--comment",
        "api.py:1-4",
        "keep <b>LIMIT</b>",
    )
    assert done.returncode == 0 and "reject 01-api" in done.stdout
    rejects = [e for e in queue_history(in_review["bare"]) if e.get("Event") == "reject"]
    assert len(rejects) == 1  # one event, under the hook (it replayed the comments into the same file)
    carried = json.loads(rejects[0]["Comments"])
    assert carried[0] == {
        "file": "api.py",
        "line": 2,
        "line_text": "    return 0",
        "text": "sum the items, do not return 0",
    }
    assert carried[1]["end"] == 4 and carried[1]["line_text"] == FIRST.rstrip("\n")
    step_file = git(in_review["bare"], "show", "runner/queue:plans/steps/01-api.md")
    assert "review_comments: [{file: api.py, line: 2," in step_file  # structured, in the step's frontmatter
    runner(host, "tick", "--id", "w1", env={"RUNNER_PUSHER": "key-a"})
    prompt = (in_review["prompts"] / "prompt-2.md").read_text()
    assert "## Review comments (2)" in prompt
    assert "api.py:2" in prompt and "> " + "    return 0" in prompt and "sum the items, do not return 0" in prompt
    assert "api.py:1-4" in prompt and "keep <b>LIMIT</b>" in prompt
    assert "Review comments" not in (in_review["prompts"] / "prompt-1.md").read_text().split("## Feedback")[-1]
    handoff = git(in_review["bare"], "show", "runner/queue:plans/handoffs/01-api.md")
    assert (
        "## Review comments" in handoff and "2 of 2 addressed" in handoff
    )  # line 2 changed, and so did 1-4 as a whole


def test_bad_comments_are_refused_in_one_line_naming_every_problem(in_review):
    laptop = in_review["laptop"]
    before = queue_history(in_review["bare"])
    proc = runner(
        laptop,
        "reject",
        "01-api",
        "--comment",
        "api.py:99",
        "past the end",
        "--comment",
        "nope",
        "x",
        "--comment",
        "ghost.py:1",
        "no such file",
        "--comment",
        "api.py:3-2",
        "backwards",
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    for said in (
        "comment 1: api.py:99 is past the end of api.py (4 lines)",
        "comment 2: 'nope' is not FILE:LINE",
        "comment 3: ghost.py is not in the result",
        "comment 4: 'api.py:3-2'",
    ):
        assert said in lines[0], lines[0]
    proc = runner(laptop, "reject", "01-api", "--comment", "api.py:1", check=False)
    assert proc.returncode == 2 and "write each as --comment FILE:LINE" in proc.stderr
    assert queue_history(in_review["bare"]) == before  # nothing was recorded


# --- in process: the comment itself -------------------------------------------------------------

HOSTILE = "<script>alert(1)</script>\x1b[2J\x00\x07 " + "A" * (1024 * 1024)


def test_hostile_comment_text_is_bounded_escaped_and_survives_the_codec():
    made = comments.make("src/a.py", 3, 3, HOSTILE, "\x1b]0;title\x07 x = 1")
    assert len(made["text"].encode()) <= comments.MAX_COMMENT_BYTES + 64
    assert "\x1b" not in made["text"] and "\\x1b" in made["text"] and "\x00" not in made["text"]
    assert made["line_text"].startswith("\\x1b]0;title\\x07")
    assert comments.normalized((made,)) == (made,)  # idempotent: the hook's replay writes the same file
    event = Event(
        Kind.REJECT,
        "alice",
        utc_now(),
        step="s",
        attempt=1,
        reason="see comments",
        comments=({"file": "src/a.py", "line": 3, "text": HOSTILE, "line_text": "x"},),
    )
    message = encode(event, "ready")
    assert len(message.encode()) < 16 * 1024
    assert decode(message).event == event


def test_comments_that_are_not_comments_are_refused_by_the_codec_and_the_step_schema():
    from runner.core.stepschema import key_problems

    event = Event(
        Kind.REJECT,
        "alice",
        utc_now(),
        step="s",
        attempt=1,
        reason="r",
        comments=({"file": "a", "line": 1, "text": "t", "line_text": ""},),
    )
    message = encode(event, "ready")
    forged = message.replace('"line":1', '"line":0')
    with pytest.raises(CodecError):
        decode(forged)
    assert key_problems({"review_comments": [{"file": "../etc/passwd", "line": 1, "text": "t"}]})
    assert key_problems({"review_comments": "nope"})
    assert not key_problems({"review_comments": [{"file": "a.py", "line": 2, "end": 3, "text": "t", "line_text": "x"}]})
    with pytest.raises(ValueError):
        comments.parse_spec("a.py:0")
    assert comments.parse_spec("dir/a b.py:3-5") == ("dir/a b.py", 3, 5)


def test_a_comment_is_addressed_when_its_lines_changed():
    one = comments.make("a.py", 2, 2, "fix", "    return 0")
    assert not comments.addressed(one, FIRST.encode())
    assert comments.addressed(one, SECOND.encode())
    assert comments.addressed(one, None)  # the file is gone
    report = comments.report([one, comments.make("a.py", 4, 4, "keep", "LIMIT = 10")], lambda path: SECOND.encode())
    assert report.startswith("1 of 2 addressed") and "- [x] a.py:2: fix" in report and "- [ ] a.py:4: keep" in report
