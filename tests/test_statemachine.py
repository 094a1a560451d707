"""The state machine: one test per row of the table in docs/protocol.md, the refused
transitions, and a walk over every (status, event) pair."""

from datetime import UTC, datetime, timedelta

import pytest

from runner.core.machine import (
    KINDS,
    TABLE,
    Context,
    Event,
    Kind,
    Status,
    TransitionError,
    apply,
    holds,
    needs_person,
    transition,
)

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def ev(kind: str, actor: str = "host-a", **fields) -> Event:
    return Event(Kind(kind), actor, NOW, step="01-a", **fields)


def claimed(attempt=1, assignee="host-a", **extra):
    return {
        "status": "claimed",
        "assignee": assignee,
        "attempt": attempt,
        "holder": {"incarnation": "host-a.1"},
        **extra,
    }


def test_claim_sets_assignee_attempt_lease_and_holder():
    updates = transition(
        {"status": "ready"}, ev("claim", attempt=1, incarnation="host-a.1", holder={"host": "h", "pid": 1}, lease="10m")
    )
    assert updates["status"] == "claimed" and updates["assignee"] == "host-a" and updates["attempt"] == 1
    assert updates["lease"] == "10m"
    assert updates["holder"] == {"host": "h", "pid": 1, "incarnation": "host-a.1"}
    assert updates["claimed_at"] == "2026-11-29T08:00:00Z" and updates["last_updated_by"] == "host-a"


def test_claim_must_name_the_next_attempt():
    with pytest.raises(TransitionError, match="attempt 3"):
        transition({"status": "ready", "attempt": 2}, ev("claim", attempt=2))


def test_claim_refused_when_dependencies_not_done_unless_a_person_overrides():
    with pytest.raises(TransitionError, match="dependencies"):
        transition({"status": "ready"}, ev("claim", attempt=1), Context(deps_done=False))
    with pytest.raises(TransitionError, match="only a person"):
        transition({"status": "ready"}, ev("claim", attempt=1, ignore_deps=True), Context(deps_done=False))
    ok = transition({"status": "ready"}, ev("claim", attempt=1, ignore_deps=True, by="alice"), Context(deps_done=False))
    assert ok["status"] == "claimed"


def test_claim_refused_while_halted():
    with pytest.raises(TransitionError, match="halted"):
        transition({"status": "ready"}, ev("claim", attempt=1), Context(halted=True))


def test_second_claim_of_a_claimed_step_is_refused():
    with pytest.raises(TransitionError, match="claimed: a claim is allowed only when it is ready"):
        transition(claimed(), ev("claim", "host-b", attempt=2))


def test_takeover_gives_a_new_attempt_and_counts_the_lost_holder_as_a_failure():
    updates = transition(
        claimed(attempt=1), ev("takeover", "host-b", attempt=2, replaces=1, incarnation="host-b.9", lease="1h")
    )
    assert updates["status"] == "claimed" and updates["assignee"] == "host-b" and updates["attempt"] == 2
    assert updates["failures"] == 1 and "lost its holder" in updates["last_error"]


def test_takeover_must_name_the_attempt_it_replaces():
    with pytest.raises(TransitionError, match="must name the attempt"):
        transition(claimed(attempt=2), ev("takeover", "host-b", attempt=3, replaces=1))


def test_takeover_when_the_failures_are_spent_fails_the_step():
    updates = transition(claimed(attempt=3, failures=2), ev("takeover", "host-b", attempt=4, replaces=3))
    assert updates["status"] == "failed" and "attempts spent" in updates["last_error"]


def test_release_returns_to_ready_with_backoff_and_reason_and_spends_nothing():
    later = NOW + timedelta(seconds=30)
    updates = transition(claimed(failures=1), ev("release", attempt=1, reason="stopping", retry_at=later))
    assert updates["status"] == "ready" and updates["assignee"] is None and "failures" not in updates
    assert updates["not_before"] == "2026-11-29T08:00:30Z" and updates["last_error"] == "stopping"


def test_retryable_failure_returns_to_ready_and_counts_one_failure():
    updates = transition(claimed(), ev("fail", attempt=1, reason="tests failed", retry_at=NOW))
    assert updates["status"] == "ready" and updates["last_error"] == "tests failed" and updates["failures"] == 1


def test_failures_not_attempts_spend_the_budget():
    # Attempt 5 after two releases and two takeovers-by-its-own-worker: only failures count.
    assert (
        transition(claimed(attempt=5, failures=1), ev("fail", attempt=5, reason="boom"), Context(max_attempts=3))[
            "status"
        ]
        == "ready"
    )
    spent = transition(claimed(attempt=5, failures=2), ev("fail", attempt=5, reason="boom"), Context(max_attempts=3))
    assert spent["status"] == "failed" and "attempts spent" in spent["last_error"]


def test_permanent_failure():
    assert transition(claimed(), ev("fail", attempt=1, permanent=True))["status"] == "failed"


def test_success_is_done_with_its_merge_or_review_when_a_person_must_look():
    result = {"branch": "runner/steps/01-a", "commit": "c1", "merge": "m1"}
    assert transition(claimed(), ev("complete", attempt=1, result=result))["status"] == "done"
    with pytest.raises(TransitionError, match="merge"):
        transition(claimed(), ev("complete", attempt=1, result={"commit": "c1"}))
    updates = transition(claimed(requires_approval=True), ev("complete", attempt=1, result={"commit": "c1"}))
    assert updates["status"] == "review" and updates["review"] == "result"
    plan_wide = ev("complete", attempt=1, result={"commit": "c1"})
    assert needs_person(claimed(), plan_wide, Context(requires_approval=True))
    assert not needs_person(
        claimed(requires_approval=False), plan_wide, Context(requires_approval=True)
    )  # the step's own value wins
    held = transition(
        claimed(), ev("complete", attempt=1, hold=True, reason="review did not run", result={"commit": "c1"})
    )
    assert held["status"] == "review" and held["last_error"] == "review did not run"


def test_approve_merges_a_result_and_a_conflict_sends_it_back():
    review = {"status": "review", "review": "result", "attempt": 1, "result": {"commit": "c1"}}
    done = transition(review, ev("approve", "alice", attempt=1, result={"merge": "m1"}))
    assert done["status"] == "done" and done["result"] == {"commit": "c1", "merge": "m1"}
    with pytest.raises(TransitionError, match="merge"):
        transition(review, ev("approve", "alice", attempt=1))
    back = transition(review, ev("approve", "alice", attempt=1, reason="the merge conflicts in a.py"))
    assert back["status"] == "ready" and "conflicts in a.py" in back["last_error"]


def test_reject_a_result_needs_a_reason_and_never_merges():
    review = {"status": "review", "review": "result", "attempt": 1, "result": {"commit": "c1"}}
    updates = transition(review, ev("reject", "alice", reason="wrong colour"))
    assert updates["status"] == "ready" and "wrong colour" in updates["last_error"] and "result" not in updates
    with pytest.raises(TransitionError, match="reason"):
        transition(review, ev("reject", "alice"))


def test_a_deviation_is_decided_by_a_person_for_one_attempt():
    review = apply(claimed(), transition(claimed(), ev("block", attempt=1, reason="plan is stale", review="deviation")))
    assert review["status"] == "review" and review["review"] == "deviation"
    approved = transition(review, ev("approve", "alice"))
    assert approved["status"] == "ready" and approved["approved"] is True
    guided = transition(review, ev("reject", "alice", reason="use the new module path"))
    assert (
        guided["status"] == "ready" and guided["approved"] is True and "use the new module path" in guided["last_error"]
    )
    assert transition(review, ev("reject", "alice", reason="no", permanent=True))["status"] == "failed"
    # The approval is spent by the attempt that used it.
    after = transition(claimed(approved=True), ev("fail", attempt=1, reason="x"))
    assert after["approved"] is None


def test_retry_gives_a_fresh_budget_and_keeps_the_attempt_number():
    updates = transition({"status": "failed", "attempt": 3, "failures": 3, "not_before": "x"}, ev("retry", "alice"))
    assert (
        updates["status"] == "ready"
        and updates["not_before"] is None
        and updates["failures"] == 0
        and "attempt" not in updates
    )


def test_holder_events_are_fenced():
    assert "held by 'host-a'" in holds(claimed(), "host-b", 1)
    assert "taken over" in holds(claimed(attempt=2), "host-a", 1)
    assert "incarnation" in holds(claimed(), "host-a", 1, "host-a.2")
    assert holds(claimed(), "host-a", 1, "host-a.1") is None
    with pytest.raises(TransitionError, match="held by 'host-a'"):
        transition(claimed(), ev("complete", "host-b", attempt=1))
    with pytest.raises(TransitionError, match="ready: a complete is allowed only when it is claimed"):
        transition({"status": "ready"}, ev("complete", attempt=1))


def test_every_status_and_event_pair_is_allowed_exactly_as_the_table_says():
    """Walk every (status, step event) pair: allowed pairs land in a status the table lists,
    every other pair is refused."""
    metas = {
        Status.READY: {"status": "ready", "attempt": 1},
        Status.CLAIMED: claimed(),
        Status.REVIEW: {"status": "review", "review": "result", "attempt": 1, "result": {"commit": "c1"}},
        Status.DONE: {"status": "done", "attempt": 1},
        Status.FAILED: {"status": "failed", "attempt": 1},
    }
    fields = {
        Kind.CLAIM: {"attempt": 2},
        Kind.TAKEOVER: {"attempt": 2, "replaces": 1, "actor": "host-b"},
        Kind.RELEASE: {"attempt": 1},
        Kind.FAIL: {"attempt": 1, "reason": "x"},
        Kind.COMPLETE: {"attempt": 1, "result": {"commit": "c2", "merge": "m2"}},
        Kind.BLOCK: {"attempt": 1, "review": "blocked"},
        Kind.APPROVE: {"actor": "alice", "result": {"merge": "m1"}},
        Kind.REJECT: {"actor": "alice", "reason": "no"},
        Kind.RETRY: {"actor": "alice"},
        Kind.ABORT: {"actor": "alice"},
    }
    for status, meta in metas.items():
        for kind in (k for k in Kind if KINDS[k].step):
            extra = dict(fields[kind])
            event = Event(
                kind,
                extra.pop("actor", "host-a"),
                NOW,
                step="01-a",
                incarnation="host-a.1" if KINDS[kind].holder else None,
                **extra,
            )
            allowed = TABLE.get((status, kind))
            if allowed is None:
                with pytest.raises(TransitionError):
                    transition(meta, event)
            else:
                assert transition(meta, event)["status"] in allowed, (status, kind)


def test_a_claim_is_made_under_the_queues_lease():
    with pytest.raises(TransitionError, match="the queue's lease"):
        transition({"status": "ready"}, ev("claim", attempt=1, lease="1000d"), Context(lease="1h"))
    assert transition({"status": "ready"}, ev("claim", attempt=1, lease="1h"), Context(lease="1h"))["lease"] == "1h"


def test_the_file_an_event_writes_does_not_depend_on_the_order_of_its_tables():
    """The worker builds its metrics and verdict in one order; the hook replays them from JSON
    trailers, whose keys are sorted: both must write the same bytes (issue 30, point 1)."""
    from runner.core.codec import decode, encode
    from runner.core.events import write_step_event
    from runner.core.model import Step

    text = (
        "---\nstep: 01-a\nstatus: claimed\nassignee: host-a\nattempt: 1\nholder: {incarnation: host-a.1}\n---\nbody\n"
    )
    step = Step("01-a", "plans/steps/01-a.md", claimed(), text)
    verdict = {"pass": True, "score": 1.0, "reasons": ["ok"], "next_hint": ""}
    worker = ev(
        "complete",
        attempt=1,
        incarnation="host-a.1",
        result={"merge": "abc", "branch": "b"},
        metrics={"scores": [1.0], "spent": 2.5, "last_verdict": verdict},
    )
    written = write_step_event(step, worker, Context())
    replayed = write_step_event(step, decode(encode(worker, written.status)).event, Context())
    assert replayed.text == written.text
    assert 'last_verdict: {next_hint: "", pass: true, reasons: [ok], score: 1.0}' in written.text


def test_claimable_asks_every_tag_of_the_step_and_the_end_of_its_back_off():
    from runner.core.model import Step
    from runner.core.plan import claimable, lacking_tags

    def step(**meta):
        return Step("01-a", "plans/steps/01-a.md", {"status": "ready", **meta}, "")

    gpu = step(tags=["gpu", "linux"])
    assert lacking_tags(gpu, ["linux"]) == ["gpu"] and not claimable(gpu, ["linux"])
    assert claimable(gpu, ["linux", "gpu", "big"]) and claimable(step(tags="gpu"), ["gpu"])
    assert claimable(step(), None) and claimable(step(), ["anything"])
    later = step(not_before="2026-11-29T08:05:00Z")
    assert not claimable(later, [], NOW) and claimable(later, [], NOW + timedelta(minutes=5))
    assert claimable(later, []), "without a time, the back-off is not asked"
    assert claimable(later, [], NOW, max_backoff=60), "a back-off beyond any runner writes is not honoured"
    assert not claimable(later, [], NOW, max_backoff=600)
