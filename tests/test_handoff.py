"""A handoff's frontmatter is checked before it is committed: a bad outcome, gate result,
attempt or duration is refused with every problem named, never written."""

import pytest

from runner.core.errors import BadInput
from runner.worker.handoff import GateEntry, HandoffMeta, render_handoff


def meta(**changes):
    fields = {
        "step": "s1",
        "attempt": 1,
        "worker": "w:1",
        "outcome": "done",
        "gates": [GateEntry("test", "pass", "a|b\nc")],
        "files_changed": ["a.py"],
        "duration_s": 0.5,
        "sentinel": "DONE",
        "verdict": {"status": "pass"},
    }
    return HandoffMeta(**{**fields, **changes})


def test_a_handoff_renders_its_frontmatter_in_field_order_and_its_gates_as_a_table():
    text = render_handoff(meta(), {"Notes": "said", "Empty": "  "}).decode()
    front = text.split("---\n")[1]
    assert [line.split(":")[0] for line in front.splitlines() if not line.startswith(" ")][:4] == [
        "step",
        "attempt",
        "worker",
        "outcome",
    ]
    assert '  - {detail: "a|b\\nc", name: test, result: pass}' in front
    assert "| test | pass | a\\|b c |" in text
    assert "## Notes" in text and "## Empty" not in text


def test_a_handoff_that_breaks_its_schema_is_refused_with_every_problem_named():
    with pytest.raises(BadInput) as refused:
        render_handoff(meta(attempt=0, outcome="maybe", duration_s=-1, gates=[GateEntry("lint", "ok")]), {})
    said = str(refused.value)
    for problem in ("attempt 0", "duration_s -1", "outcome 'maybe'", "gate 'lint': result 'ok'"):
        assert problem in said
