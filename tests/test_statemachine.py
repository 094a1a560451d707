"""One test per row of DESIGN.md's state machine table, and per refused transition."""

from datetime import datetime, timedelta, timezone

import pytest

from runner.core.machine import Event, TransitionError, apply, transition

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=timezone.utc)


def claimed(attempt=1, assignee="host-a", **extra):
    return {"status": "claimed", "assignee": assignee, "attempt": attempt, "holder": {"incarnation": "host-a.1"}, **extra}


def test_claim_sets_assignee_attempt_and_lease():
    updates = transition({"status": "ready"}, Event("claim", incarnation="host-a.1", holder={"host": "h", "pid": 1}, lease="10m"), "host-a", NOW)
    assert updates["status"] == "claimed"
    assert updates["assignee"] == "host-a"
    assert updates["attempt"] == 1
    assert updates["lease"] == "10m"
    assert updates["holder"] == {"host": "h", "pid": 1, "incarnation": "host-a.1"}
    assert updates["claimed_at"] == "2026-11-29T08:00:00Z"


def test_claim_refused_when_dependencies_not_done():
    with pytest.raises(TransitionError, match="dependencies"):
        transition({"status": "ready"}, Event("claim", deps_done=False), "host-a", NOW)


def test_claim_refused_while_halted():
    with pytest.raises(TransitionError, match="halted"):
        transition({"status": "ready"}, Event("claim", halted=True), "host-a", NOW)


def test_second_claim_of_a_claimed_step_is_refused():
    with pytest.raises(TransitionError, match="not ready"):
        transition(claimed(), Event("claim"), "host-b", NOW)


def test_heartbeat_by_holder_changes_nothing_and_by_other_is_refused():
    assert transition(claimed(), Event("heartbeat", attempt=1), "host-a", NOW) == {}
    with pytest.raises(TransitionError, match="held by"):
        transition(claimed(), Event("heartbeat", attempt=1), "host-b", NOW)


def test_takeover_gives_a_new_attempt_to_another_worker():
    updates = transition(claimed(attempt=1), Event("takeover", attempt=1, incarnation="host-b.9", lease="1h"), "host-b", NOW)
    assert updates["status"] == "claimed" and updates["assignee"] == "host-b" and updates["attempt"] == 2
    assert "lost its holder" in updates["last_error"]


def test_takeover_must_name_the_attempt_it_replaces():
    with pytest.raises(TransitionError, match="must name the attempt"):
        transition(claimed(attempt=2), Event("takeover", attempt=1), "host-b", NOW)


def test_takeover_of_last_attempt_fails_the_step():
    updates = transition(claimed(attempt=3), Event("takeover", attempt=3), "host-b", NOW)
    assert updates["status"] == "failed" and "attempts spent" in updates["last_error"]


def test_release_returns_to_ready_with_backoff_and_reason():
    later = NOW + timedelta(seconds=30)
    updates = transition(claimed(), Event("release", attempt=1, reason="stopping", retry_at=later), "host-a", NOW)
    assert updates["status"] == "ready" and updates["assignee"] is None
    assert updates["not_before"] == "2026-11-29T08:00:30Z" and updates["last_error"] == "stopping"


def test_retryable_failure_returns_to_ready_with_backoff():
    updates = transition(claimed(), Event("fail", attempt=1, reason="tests failed", retry_at=NOW), "host-a", NOW)
    assert updates["status"] == "ready" and updates["last_error"] == "tests failed"


def test_failure_with_attempts_spent_is_permanent():
    updates = transition(claimed(attempt=3), Event("fail", attempt=3, reason="boom"), "host-a", NOW)
    assert updates["status"] == "failed" and "attempts spent" in updates["last_error"]


def test_permanent_failure():
    assert transition(claimed(), Event("fail", attempt=1, permanent=True), "host-a", NOW)["status"] == "failed"


def test_success_is_done_or_review_when_approval_required():
    assert transition(claimed(), Event("complete", attempt=1), "host-a", NOW)["status"] == "done"
    updates = transition(claimed(requires_approval=True), Event("complete", attempt=1), "host-a", NOW)
    assert updates["status"] == "review" and updates["review"] == "result"


def test_approve_and_reject_a_result():
    review = {"status": "review", "review": "result", "attempt": 1}
    assert transition(review, Event("approve"), "alice", NOW)["status"] == "done"
    updates = transition(review, Event("reject", reason="wrong colour"), "alice", NOW)
    assert updates["status"] == "ready" and "wrong colour" in updates["last_error"]
    with pytest.raises(TransitionError, match="reason"):
        transition(review, Event("reject"), "alice", NOW)


def test_approve_and_reject_a_deviation():
    review = apply(claimed(), transition(claimed(), Event("deviation", attempt=1, reason="plan is stale"), "host-a", NOW))
    assert review["status"] == "review" and review["review"] == "deviation"
    approved = transition(review, Event("approve"), "alice", NOW)
    assert approved["status"] == "ready" and approved["approved"] is True
    assert transition(review, Event("reject", reason="no", permanent=True), "alice", NOW)["status"] == "failed"
    assert transition(review, Event("reject", reason="redo"), "alice", NOW)["status"] == "ready"


def test_retry_of_a_failed_step_keeps_the_attempt():
    updates = transition({"status": "failed", "attempt": 3, "not_before": "x"}, Event("retry"), "alice", NOW)
    assert updates["status"] == "ready" and updates["not_before"] is None and "attempt" not in updates


def test_retry_of_a_step_that_did_not_fail_is_refused():
    with pytest.raises(TransitionError):
        transition({"status": "done"}, Event("retry"), "alice", NOW)


def test_worker_completing_a_step_it_does_not_hold_is_refused():
    with pytest.raises(TransitionError, match="held by 'host-a'"):
        transition(claimed(), Event("complete", attempt=1), "host-b", NOW)


def test_stale_attempt_is_fenced_off():
    with pytest.raises(TransitionError, match="taken over"):
        transition(claimed(attempt=2), Event("complete", attempt=1), "host-a", NOW)


def test_other_incarnation_of_same_worker_is_fenced_off():
    with pytest.raises(TransitionError, match="incarnation"):
        transition(claimed(), Event("complete", attempt=1, incarnation="host-a.2"), "host-a", NOW)


def test_complete_of_a_ready_step_is_refused():
    with pytest.raises(TransitionError, match="not claimed"):
        transition({"status": "ready"}, Event("complete", attempt=1), "host-a", NOW)


def test_approve_outside_review_is_refused():
    with pytest.raises(TransitionError, match="not in review"):
        transition(claimed(), Event("approve"), "alice", NOW)
