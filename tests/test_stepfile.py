"""Step files: exact round trip, minimal diffs, and every kind of bad input."""

from runner.core.plan import Plan
from runner.core.stepfile import automated_checks, manual_checks, parse_step, set_fields, tick_checks

STEP = """---
step: 03-add-parser          # id = file stem
title: Add the parser
depends_on: [01-setup, 02-model]
# a comment people wrote
custom_key: {keep: me}
status: ready
priority: 0
---
## Changes Required
Body with `code` and a comment <!-- keep -->

#### Automated Verification:
- [ ] Unit tests: `pytest -q tests/test_parser.py`
- [ ] `ruff check .`
#### Manual Verification:
- [ ] the error messages read well
"""


def test_parse_reads_fields_and_unknown_keys():
    step = parse_step("plans/steps/03-add-parser.md", STEP.encode())
    assert step.valid, step.problems
    assert step.depends_on == ["01-setup", "02-model"]
    assert step.meta["custom_key"] == {"keep": "me"}


def test_a_transition_touches_only_runner_managed_lines():
    updated = set_fields(STEP, {"status": "claimed", "assignee": "host-a", "attempt": 1, "not_before": None})
    before, after = STEP.splitlines(), updated.splitlines()
    changed = [line for line in after if line not in before]
    assert changed == ["status: claimed", "assignee: host-a", "attempt: 1"]
    assert [line for line in before if line not in after] == ["status: ready"]
    assert "not_before" not in updated  # absent and None: not written
    assert updated.endswith(STEP.split("---\n", 2)[2])
    reparsed = parse_step("plans/steps/03-add-parser.md", updated.encode())
    assert reparsed.meta["status"] == "claimed" and reparsed.meta["custom_key"] == {"keep": "me"}


def test_round_trip_back_to_ready_keeps_everything_else_byte_for_byte():
    claimed = set_fields(STEP, {"status": "claimed"})
    assert set_fields(claimed, {"status": "ready"}) == STEP


def test_multiline_values_are_replaced_whole_and_hostile_text_is_quoted():
    text = "---\nstep: a\nholder:\n  host: x\n  pid: 1\nlast_error: |\n  two\n  lines\ntitle: t\n---\nbody\n"
    updated = set_fields(text, {"holder": None, "last_error": 'say "hi"\nrm -rf / # nope: x'})
    step = parse_step("plans/steps/a.md", updated.encode())
    assert step.valid, step.problems
    assert step.meta["holder"] is None and step.meta["title"] == "t"
    assert step.meta["last_error"] == 'say "hi"\nrm -rf / # nope: x'


def test_checklists():
    assert automated_checks(STEP) == ["pytest -q tests/test_parser.py", "ruff check ."]
    assert manual_checks(STEP) == ["the error messages read well"]
    ticked = tick_checks(STEP, {"ruff check ."})
    assert "- [x] `ruff check .`" in ticked
    assert "- [ ] Unit tests: `pytest -q tests/test_parser.py`" in ticked
    assert "- [ ] the error messages read well" in ticked


def problems_of(name: str, data: bytes) -> list[str]:
    return parse_step(f"plans/steps/{name}.md", data).problems


def test_bad_yaml():
    assert "bad YAML" in problems_of("a", b"---\nstep: a\ntitle: [unclosed\n---\n")[0]


def test_yaml_bomb_and_deep_nesting_are_refused():
    bomb = (
        b"---\na: &a [x, x, x, x, x, x, x, x, x]\n"
        b"b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        b"c: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n---\n"
    )
    assert "aliases" in problems_of("a", bomb)[0]
    deep = b"---\nx: " + b"[" * 200 + b"]" * 200 + b"\n---\n"
    assert problems_of("a", deep)


def test_id_must_match_file_name():
    assert "does not match the file name" in problems_of("a", b"---\nstep: b\n---\n")[0]


def test_not_utf8_binary_and_too_big():
    assert "not UTF-8" in problems_of("a", b"---\nstep: a\ntitle: \xff\xfe\n---\n")[0]
    assert "NUL" in problems_of("a", b"---\nstep: a\x00\n---\n")[0]
    assert "1 MiB" in problems_of("a", b"---\nstep: a\n---\n" + b"x" * (1024 * 1024 + 1))[0]


def test_bad_ids():
    assert problems_of("..", b"---\n---\n")
    assert problems_of("a..b", b"---\n---\n")
    assert problems_of("UPPER", b"---\n---\n")
    assert "depends_on" in problems_of("a", b"---\ndepends_on: [../etc]\n---\n")[0]


def test_no_frontmatter_and_wrong_types():
    assert "frontmatter" in problems_of("a", b"just text\n")[0]
    found = problems_of("a", b"---\nstatus: running\npriority: high\nrun: echo hi\ntimeout: soon\n---\n")
    assert len(found) == 4


def step(name, deps=(), status="ready"):
    return parse_step(
        f"plans/steps/{name}.md", f"---\nstep: {name}\ndepends_on: {list(deps)}\nstatus: {status}\n---\n".encode()
    )


def test_plan_reports_unknown_cyclic_and_duplicate_and_the_rest_goes_on():
    duplicate = parse_step("plans/steps/sub/a.md", b"---\nstep: a\n---\n")
    plan = Plan.build(
        [step("a"), duplicate, step("b", ["c"]), step("c", ["b"]), step("d", ["nope"]), step("e"), step("f", ["e"])]
    )
    problems = "\n".join(plan.problems)
    assert "duplicate step id 'a'" in problems
    assert "dependency cycle: b -> c -> b" in problems
    assert "unknown dependency: nope" in problems
    assert sorted(plan.steps) == ["e", "f"]
    assert [s.id for s in plan.ready(now=__import__("runner.core.model").core.model.utc_now())] == ["e"]
    assert plan.derived_status(plan.steps["f"]) == "waiting"


def test_derived_blocked_when_a_dependency_failed():
    plan = Plan.build([step("a", status="failed"), step("b", ["a"]), step("c", ["b"])])
    assert plan.derived_status(plan.steps["b"]) == "blocked"
    assert plan.derived_status(plan.steps["c"]) == "blocked"


def test_a_plan_updated_by_many_transitions_finds_each_status_as_one_built_anew():
    """Plan.updated keeps each status's ids as a base and a few changes (runner.core.plan.IdSet)
    and where in the claim order each status starts: after hundreds of transitions, folds
    included, every status lists what a plan read from scratch lists, in claim order."""
    import random

    chooser = random.Random(7)
    statuses = ["ready", "done", "failed", "review"]
    steps = {f"s{n:03d}": step(f"s{n:03d}") for n in range(300)}
    plan = Plan.build(list(steps.values()))
    for _ in range(600):
        changed = [
            step(name, status=chooser.choice(statuses)) for name in chooser.sample(sorted(steps), chooser.randint(1, 3))
        ]
        steps.update((s.id, s) for s in changed)
        plan = plan.updated(changed, None)
        for status in statuses:  # each read teaches the plan where its first step of that status is
            next(plan.with_status(status), None)
    anew = Plan.build(list(steps.values()))
    for status in statuses:
        assert [s.id for s in plan.with_status(status)] == [s.id for s in anew.with_status(status)]
        assert len(plan.by_status[status]) == len(anew.by_status[status])


def test_status_counts_agree_with_each_steps_derived_status():
    plan = Plan.build(
        [
            step("a", status="failed"),
            step("b", ["a"]),
            step("c", ["b"]),
            step("d"),
            step("e", ["d"]),
            step("f", ["g"]),
            step("g", status="done"),
            step("h", status="review"),
        ]
    )
    expected: dict[str, int] = {}
    for each in plan.steps.values():
        expected[plan.derived_status(each)] = expected.get(plan.derived_status(each), 0) + 1
    assert (
        plan.status_counts()
        == expected
        == {"failed": 1, "blocked": 2, "ready": 2, "waiting": 1, "done": 1, "review": 1}
    )


def test_text_that_yaml_would_read_as_a_number_or_a_date_is_quoted_and_reads_back_as_text():
    texts = [
        "0x1f",
        "0b101",
        "0o17",
        "1_000",
        "2024-1-5",
        "2024-01-05",
        ".inf",
        "-.NaN",
        "1e3",
        "+12",
        "Yes",
        "OFF",
        "~",
    ]
    for text in texts:
        updated = set_fields(STEP, {"last_error": text})
        assert parse_step("plans/steps/03-add-parser.md", updated.encode()).meta["last_error"] == text, updated
    assert "last_error: plain words stay plain" in set_fields(STEP, {"last_error": "plain words stay plain"})
