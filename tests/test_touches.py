"""Steps that declare what they touch are not run at once (issue 32, points 2 and 3): a worker
does not claim a step whose `touches:` globs overlap a claimed step's, while other ready steps
run beside it; a plan whose every ready step overlaps still drains, one step at a time; `runner
ready`, `status` and `show` say why a step is held back; `runner validate` warns when a step's
last attempt changed files outside what it declared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.repos import ROOT, add_step, edit, git, queue_history, runner, runner_json, statuses, tick, wait_for
from support.served import drain, served, served_statuses

from runner.core.config import DEFAULT_TOML
from runner.core.limits import MAX_GLOB_SEGMENTS, MAX_GLOB_STARS, MAX_TOUCH_SEGMENTS
from runner.core.touches import covers, glob_problems, outside, overlap


def config(exclusive: bool = True) -> bytes:
    text = DEFAULT_TOML.replace("detect = true", "detect = false")
    return text.replace("touches_exclusive = true", f"touches_exclusive = {'true' if exclusive else 'false'}").encode()


def write(path: str, wait_for_file: Path | None = None) -> list[str]:
    wait = f'until [ -e "{wait_for_file}" ]; do sleep 0.02; done; ' if wait_for_file else ""
    return ["sh", "-c", wait + f'mkdir -p "$(dirname {path})"; echo "$RUNNER_STEP" >> {path}']


def background_tick(repo: Path, worker: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "tick", "--id", worker, "--json", "--repo", str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def moves(repo: Path) -> list[tuple[str, str]]:
    return [(e["Event"], e["Step"]) for e in queue_history(repo) if "Step" in e]


# --- the globs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a,b,apart",
    [
        ("src/**", "src/parser/lexer.py", False),
        ("src/parser", "src/parser/lexer.py", False),  # a plain path is a file or a whole folder
        ("shared.txt", "shared.txt", False),
        ("docs/*.md", "src/*.md", True),
        ("*.py", "test_*", False),
        ("lib/*.c", "lib/*.h", True),
        ("**/test_*.py", "tests/**", False),
        ("**/*.md", "src/**/*.py", True),
        ("src/a.py", "src/b.py", True),
    ],
)
def test_globs_overlap_when_one_path_could_match_both(a, b, apart):
    assert overlap(a, b) is not apart and overlap(b, a) is not apart


def test_a_glob_is_bounded_in_segments_and_stars_and_a_steps_globs_in_segments_in_all():
    """Attack 2 (issue 48): globs of ~60 `**`/`a*` segments were valid; they are over the bounds now."""
    at_bounds = "/".join(["**"] * MAX_GLOB_STARS + ["a*"] * (MAX_GLOB_SEGMENTS - MAX_GLOB_STARS))
    assert glob_problems("touches", [at_bounds]) == []
    assert glob_problems("touches", [at_bounds + "/x"]) and glob_problems(
        "touches", ["/".join(["**"] * (MAX_GLOB_STARS + 1))]
    )
    per_glob = MAX_TOUCH_SEGMENTS // MAX_GLOB_SEGMENTS
    assert glob_problems("touches", [at_bounds] * per_glob) == []
    assert "segments in all" in glob_problems("touches", [at_bounds] * (per_glob + 1))[0]


def test_an_overlap_decision_costs_at_most_the_product_of_the_two_globs_segments():
    """Attack 2 (issue 48): deciding two globs of `**`/`a*` that part only at their last segment walks their
    product once (a backtracking search, or one that copies the rest of each glob at each step, costs more)."""
    a, b = (
        "/".join(["a*", "**"] * MAX_GLOB_STARS + ["a*"] * (MAX_GLOB_SEGMENTS - 2 * MAX_GLOB_STARS - 1) + [last])
        for last in "xy"
    )
    calls = []
    sys.setprofile(lambda frame, event, arg: calls.append(1) if event == "call" else None)
    try:
        apart = not overlap(a, b)
    finally:
        sys.setprofile(None)
    assert apart and len(calls) <= 2 * (MAX_GLOB_SEGMENTS + 2) ** 2, len(calls)


def test_a_glob_covers_paths_by_segment_and_a_plain_path_covers_its_folder():
    assert covers("src/**", "src/a/b.py") and covers("src", "src/a/b.py") and covers("*.md", "README.md")
    assert not covers("*.md", "docs/x.md") and covers("**/*.md", "docs/x.md") and not covers("src/a.py", "src/a.pyc")
    assert outside(["src/**", "README.md"], ["src/x.py", "README.md", "setup.py"]) == ["setup.py"]


def test_touches_must_be_relative_globs_and_a_bad_one_is_refused_before_it_is_committed(queue_repo):
    assert glob_problems("touches", "src/**") and glob_problems("touches", ["a"] * 65)
    assert [p.split(":")[1].strip() for p in glob_problems("touches", ["../up", "/abs", "ok/**"])] == [
        "'../up' must be a relative path inside the repository, written with /",
        "'/abs' must be a relative path inside the repository, written with /",
    ]
    refused = runner(
        queue_repo, "add", "Bad", "--id", "01-bad", "--run", "true", "--touches", "../elsewhere", check=False
    )
    assert refused.returncode == 2 and "touches: '../elsewhere' must be a relative path" in refused.stderr
    runner(
        queue_repo, "add", "Good", "--id", "02-good", "--run", "true", "--touches", "src/**", "--touches", "README.md"
    )
    assert runner_json(queue_repo, "show", "02-good")["meta"]["touches"] == ["src/**", "README.md"]


# --- scheduling ----------------------------------------------------------------------------------


def test_two_overlapping_steps_never_run_at_once_while_a_third_runs_beside_them(queue_repo, tmp_path):
    go = tmp_path / "go"
    edit(queue_repo, {"runner.toml": config()})
    add_step(queue_repo, "01-parser", run=write("src/parser/a.txt", wait_for_file=go), touches=["src/**"])
    add_step(queue_repo, "02-lexer", run=write("src/parser/lexer.txt"), touches=["src/parser/lexer.txt"])
    add_step(queue_repo, "03-docs", run=write("docs/guide.txt"), touches=["docs/**"])
    first = background_tick(queue_repo, "w1")  # 01 is best: claimed, then running until `go`
    wait_for(lambda: statuses(queue_repo)["01-parser"] == "claimed")
    beside = tick(queue_repo, "w2")
    assert (beside["step"], beside["sentinel"]) == ("03-docs", "STEP_COMPLETE"), (
        beside
    )  # 02 would be next, but it overlaps 01
    ready = runner_json(queue_repo, "ready")
    assert ready["steps"] == [] and [row["step"] for row in ready["held_back"]] == ["02-lexer"]
    assert "src/parser/lexer.txt overlap src/** of 01-parser, claimed by w1" in ready["held_back"][0]["held_back"]
    assert runner_json(queue_repo, "ready") == ready  # the quick path (a saved plan index) says the same
    idle = tick(queue_repo, "w3")
    assert idle["sentinel"] == "SKIP" and "1 held back by touches" in idle["reason"], idle
    named = runner(queue_repo, "claim", "02-lexer", "--id", "w3", check=False)
    assert named.returncode == 3 and "02-lexer is held back: its touches src/parser/lexer.txt overlap" in named.stderr
    status = {row["step"]: row for row in runner_json(queue_repo, "status")["steps"]}
    assert status["02-lexer"]["status"] == "ready" and status["02-lexer"]["held_back"]
    go.write_text("go\n")
    out, err = first.communicate(timeout=120)
    assert json.loads(out.strip().splitlines()[-1])["sentinel"] == "STEP_COMPLETE", err
    assert tick(queue_repo, "w3")["step"] == "02-lexer"
    assert statuses(queue_repo) == {"01-parser": "done", "02-lexer": "done", "03-docs": "done"}
    history = moves(queue_repo)
    assert history.index(("complete", "01-parser")) < history.index(("claim", "02-lexer"))
    assert (
        history.index(("claim", "01-parser"))
        < history.index(("complete", "03-docs"))
        < history.index(("complete", "01-parser"))
    )


def test_with_touches_exclusive_off_overlapping_steps_are_claimed_at_once(queue_repo):
    edit(queue_repo, {"runner.toml": config(exclusive=False)})
    add_step(queue_repo, "01-a", touches=["shared.txt"])
    add_step(queue_repo, "02-b", touches=["shared.txt"])
    runner(queue_repo, "claim", "--id", "w1")
    runner(queue_repo, "claim", "--id", "w2")
    assert statuses(queue_repo) == {"01-a": "claimed", "02-b": "claimed"}
    assert runner_json(queue_repo, "ready")["held_back"] == []


def test_a_plan_whose_every_ready_step_overlaps_still_drains_one_at_a_time(tmp_path):
    """Five steps, all touching shared.txt, three workers over a remote under the hook: they
    run one after the other, so no record ever conflicts and none needs a resolve pass."""
    steps = {f"0{n}-line": {"run": write("shared.txt"), "touches": ["shared.txt"]} for n in range(1, 6)}
    bare, alice = served(tmp_path, config(), steps)
    said = drain(bare, tmp_path)
    assert served_statuses(alice) == {step: "done" for step in steps}, said
    assert sorted(git(bare, "show", "runner/integration:shared.txt").splitlines()) == sorted(steps)
    history = [e for e in queue_history(bare) if "Step" in e]
    running = set()
    for entry in history:  # at most one of them is claimed at any commit of the queue
        if entry["Event"] == "claim":
            assert not running, (entry["Step"], running)
            running.add(entry["Step"])
        else:
            running.discard(entry["Step"])
    assert {e["Event"] for e in history} == {"claim", "complete"}
    assert not [run for e in history for run in json.loads(e.get("Runs") or "[]") if run["name"] == "resolve"]


# --- what a step really touched ------------------------------------------------------------------


def test_validate_warns_when_a_steps_last_attempt_changed_files_outside_its_touches(queue_repo):
    edit(queue_repo, {"runner.toml": config()})
    add_step(queue_repo, "01-inside", run=write("src/a.txt"), touches=["src/**"])
    add_step(
        queue_repo,
        "02-outside",
        run=["sh", "-c", "mkdir -p src; echo x > src/b.txt; echo y > setup.cfg"],
        touches=["src/**"],
    )
    assert tick(queue_repo)["sentinel"] == tick(queue_repo)["sentinel"] == "STEP_COMPLETE"
    checked = runner(queue_repo, "validate")
    assert checked.returncode == 0 and "plan is sound (1 warning)" in checked.stdout
    assert checked.stderr.strip() == (
        "warning: plans/steps/02-outside.md: its last attempt (handoff of attempt 1) changed files "
        "outside its touches: setup.cfg"
    )
    assert runner_json(queue_repo, "validate")["warnings"] == [checked.stderr.strip().removeprefix("warning: ")]
