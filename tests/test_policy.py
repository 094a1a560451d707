"""Queue and worker policy in milliseconds (issue 11 point 4): the pipeline driven by a
scripted executor, and the queue on the in-memory store. The same code runs over real git in
the other test files; these pin the rules down fast and exhaustively."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.memory import memory_queue

from runner.core.config import parse_config
from runner.core.errors import BadInput
from runner.core.machine import Kind
from runner.core.model import Step
from runner.core.stepfile import parse_step
from runner.queue.change import ClaimLost
from runner.queue.merging import approve
from runner.queue.queue import Queue
from runner.worker.attempt import ClaimLostDuringRun, State
from runner.worker.executor import RunResult
from runner.worker.gates import FAIL, NOT_RUN, PASS, GateResult
from runner.worker.pipeline import run_pipeline
from runner.worker.record import Recorder

# --- the pipeline, with a scripted executor ---------------------------------------------------


def ok(output: str = "") -> RunResult:
    return RunResult(["cmd"], 0, 0.01, output=output)


def crashed(code: int = 1) -> RunResult:
    return RunResult(["cmd"], code, 0.01)


@dataclass
class Script:
    """Answers each role with the next scripted result; gates pass unless told otherwise."""

    roles: dict[str, list[RunResult]] = field(default_factory=dict)
    gates_fail: list[bool] = field(default_factory=list)
    changed: list[str] = field(default_factory=lambda: ["a.py"])
    stop: bool = False
    claim_lost: bool = False
    seconds: float = 0.0
    calls: list[str] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)

    def run(self, role: str, state: State):
        if role not in self.roles:
            return None
        self.calls.append(role)
        if role == "implement":
            self.feedback.append(state.feedback)
        results = self.roles[role]
        return results.pop(0) if len(results) > 1 else results[0]

    def gates(self, state: State):
        failing = self.gates_fail.pop(0) if self.gates_fail else False
        return [GateResult("test", FAIL if failing else PASS, "exit code 1" if failing else "exit code 0", ["t"], 0.01)]

    def changed_files(self):
        return self.changed

    def elapsed(self):
        return self.seconds

    def stopping(self):
        return self.stop

    def lost(self):
        return self.claim_lost


def state(config: str = "", meta: str = "") -> State:
    step = parse_step("plans/steps/01-a.md", f"---\nstep: 01-a\nrun: [x]\n{meta}---\nbody\n".encode())
    assert step.valid, step.problems
    return State(step=step, attempt=1, config=parse_config(config).for_step(step.meta))


ROLES = '[roles.{0}]\ncommand = ["{0}"]\n'


def test_a_clean_run_completes():
    script = Script(roles={"implement": [ok()]})
    outcome = run_pipeline(state(), script)
    assert outcome.kind == Kind.COMPLETE and script.calls == ["implement"]


def test_an_orient_fault_fails_the_attempt_before_implement():
    script = Script(roles={"orient": [crashed(3)], "implement": [ok()]})
    outcome = run_pipeline(state(ROLES.format("orient")), script)
    assert outcome.kind == Kind.FAIL and not outcome.permanent and "orient did not run (exit code 3)" in outcome.reason
    assert script.calls == ["orient"]


def test_a_major_deviation_blocks_unless_approved_or_the_gate_is_off():
    deviating = {"orient": [ok("deviation: major: the module moved")], "implement": [ok()]}
    outcome = run_pipeline(state(ROLES.format("orient")), Script(roles=dict(deviating)))
    assert outcome.kind == Kind.BLOCK and outcome.review == "deviation"
    assert (
        run_pipeline(state(ROLES.format("orient"), meta="approved: true\n"), Script(roles=dict(deviating))).kind
        == Kind.COMPLETE
    )
    gate_off = ROLES.format("orient") + "[pipeline]\ndeviation_gate = false\n"
    assert run_pipeline(state(gate_off), Script(roles=dict(deviating))).kind == Kind.COMPLETE


def test_a_crashed_implement_ends_the_attempt_without_a_fix_loop():
    script = Script(roles={"implement": [crashed()]})
    outcome = run_pipeline(state(), script)
    assert outcome.kind == Kind.FAIL and script.calls == ["implement"]


def test_failed_gates_after_a_clean_implement_loop_with_the_failure_as_feedback():
    script = Script(roles={"implement": [ok()]}, gates_fail=[True, True, False])
    outcome = run_pipeline(state(), script)
    assert outcome.kind == Kind.COMPLETE and script.calls == ["implement"] * 3
    assert script.feedback[1].startswith("gate test failed")
    script = Script(roles={"implement": [ok()]}, gates_fail=[True, True, True, True])
    assert run_pipeline(state(), script).kind == Kind.FAIL and len(script.calls) == 3  # max_fix_attempts = 2


def test_implement_sentinel_lines():
    blocked = run_pipeline(state(), Script(roles={"implement": [ok("working\nSTEP_BLOCKED: which DB?")]}))
    assert blocked.kind == Kind.BLOCK and blocked.review == "blocked" and "which DB?" in blocked.reason
    failed = run_pipeline(state(), Script(roles={"implement": [ok("STEP_FAILED: no key")]}))
    assert failed.kind == Kind.FAIL and "no key" in failed.reason


def test_verifier_faults_halt_or_fail_and_verdicts_loop_with_their_hint():
    verify = ROLES.format("verify")
    fault = run_pipeline(state(verify), Script(roles={"implement": [ok()], "verify": [ok("no verdict here")]}))
    assert fault.kind == Kind.RELEASE and fault.halt.startswith("verifier_failed:")
    no_halt = verify + "[pipeline]\nhalt_on_verifier_fault = false\n"
    assert run_pipeline(state(no_halt), Script(roles={"implement": [ok()], "verify": [crashed()]})).kind == Kind.FAIL
    verdicts = [ok('{"pass": false, "score": 0.2, "next_hint": "add tests"}'), ok('{"pass": true, "score": 0.9}')]
    script = Script(roles={"implement": [ok()], "verify": verdicts})
    st = state(verify)
    assert run_pipeline(st, script).kind == Kind.COMPLETE
    assert "add tests" in script.feedback[1] and st.scores == [0.2, 0.9]


def test_a_plateau_and_a_spent_budget_fail_for_good():
    verify = ROLES.format("verify") + "[brakes]\nscore_plateau_window = 2\nmax_fix_attempts = 9\n"
    flat = run_pipeline(
        state(verify), Script(roles={"implement": [ok()], "verify": [ok('{"pass": false, "score": 0.5}')]})
    )
    assert flat.kind == Kind.FAIL and flat.permanent and flat.reason.startswith("plateau")
    spent = run_pipeline(state('[brakes]\nstep_budget = "10s"\n'), Script(roles={"implement": [ok()]}, seconds=11))
    assert spent.kind == Kind.FAIL and spent.permanent and spent.reason.startswith("budget")


def test_review_is_due_by_size_or_boundary_and_a_double_fault_holds_for_a_person():
    review = '[roles.review]\ncommand = ["review"]\nboundaries = ["api/"]\n'
    small = Script(roles={"implement": [ok()], "review": [ok("CRITICAL: x")]}, changed=["a.py"])
    assert run_pipeline(state(review), small).kind == Kind.COMPLETE and "review" not in small.calls
    crossing = Script(roles={"implement": [ok()], "review": [ok("CRITICAL: x"), ok("fine")]}, changed=["api/x.py"])
    assert run_pipeline(state(review), crossing).kind == Kind.COMPLETE and crossing.calls.count("implement") == 2
    broken = Script(roles={"implement": [ok()], "review": [crashed()]}, changed=["api/x.py"])
    held = run_pipeline(state(review), broken)
    assert held.kind == Kind.COMPLETE and "not passed as reviewed" in held.hold and broken.calls.count("review") == 2


def test_a_shutdown_gives_the_step_back_and_a_lost_claim_records_nothing():
    stopped = RunResult(["cmd"], -9, 0.01, cancelled=True)
    assert run_pipeline(state(), Script(roles={"implement": [stopped]}, stop=True)).kind == Kind.RELEASE
    with pytest.raises(ClaimLostDuringRun):
        run_pipeline(state(), Script(roles={"implement": [stopped]}, claim_lost=True))


def test_an_orchestrate_fault_fails_the_attempt():
    outcome = run_pipeline(
        state(ROLES.format("orchestrate")), Script(roles={"implement": [ok()], "orchestrate": [crashed()]})
    )
    assert outcome.kind == Kind.FAIL and "PIPELINE-FAULT: orchestrate did not run" in outcome.reason


def test_a_sweep_fault_holds_the_result_for_a_person_and_never_runs_implement_again():
    script = Script(roles={"implement": [ok()], "sweep": [crashed(2)]})
    st = state(ROLES.format("sweep"))
    outcome = run_pipeline(st, script)
    assert outcome.kind == Kind.COMPLETE and outcome.hold.startswith(
        "awaiting a person: PIPELINE-FAULT: edge-case sweep did not run (exit code 2)"
    )
    assert "not passed as swept" in outcome.hold and script.calls == ["implement", "sweep"]
    assert st.faults == ["PIPELINE-FAULT: edge-case sweep did not run (exit code 2)"]


def test_a_sweep_and_a_review_that_fault_are_both_flagged_and_the_review_still_looks_after_the_sweep():
    config = ROLES.format("sweep") + '[roles.review]\ncommand = ["review"]\nmin_files = 0\n'
    script = Script(roles={"implement": [ok()], "sweep": [crashed()], "review": [crashed(4)]})
    held = run_pipeline(state(config), script)
    assert (
        held.kind == Kind.COMPLETE
        and "edge-case sweep did not run" in held.hold
        and "independent review did not run (exit code 4), twice" in held.hold
    )
    assert script.calls == ["implement", "sweep", "review", "review"]
    script = Script(
        roles={"implement": [ok()], "sweep": [crashed(), crashed()], "review": [ok("CRITICAL: broken"), ok("fine")]}
    )
    held = run_pipeline(
        state(config), script
    )  # critical findings still send it back; the fix is swept again, its fault holds once
    assert held.kind == Kind.COMPLETE and held.hold.count("not passed as swept") == 1
    assert script.calls == ["implement", "sweep", "review", "implement", "sweep", "review"]


def test_a_sweep_runs_again_after_a_critical_review_and_its_new_findings_replace_the_old():
    config = ROLES.format("sweep") + '[roles.review]\ncommand = ["review"]\nmin_files = 0\n'
    script = Script(
        roles={
            "implement": [ok()],
            "sweep": [crashed(), ok("edge: empty input")],
            "review": [ok("CRITICAL: broken"), ok("fine")],
        }
    )
    st = state(config)
    outcome = run_pipeline(st, script)  # the first sweep faulted; the sweep of the fix ran: nothing holds the result
    assert (outcome.kind, outcome.hold) == (Kind.COMPLETE, None), outcome
    assert script.calls == ["implement", "sweep", "review", "implement", "sweep", "review"]
    assert st.notes["Sweep findings"] == "edge: empty input" and [r.name for r in st.roles].count("sweep") == 1


def test_the_coders_own_verdict_is_read_from_implements_last_line():
    rejected = run_pipeline(
        state(), Script(roles={"implement": [ok("I will not do this.\nREJECTED: the step drops the users table")]})
    )
    assert (rejected.kind, rejected.permanent, rejected.rejected) == (Kind.FAIL, True, True)
    assert rejected.reason == "rejected by the coder: the step drops the users table"
    for line in ("CODER_FAILED", "FAILED: tests still red"):
        failed = run_pipeline(state(), Script(roles={"implement": [ok(f"tried\n{line}")]}))
        assert (failed.kind, failed.permanent, failed.rejected) == (
            Kind.FAIL,
            False,
            False,
        ) and failed.reason.startswith("implement failed"), line
    st = state()
    assert run_pipeline(st, Script(roles={"implement": [ok("done\nCODER_COMPLETE")]})).kind == Kind.COMPLETE
    assert st.runs[0].detail.endswith("CODER_COMPLETE")
    for line in (
        "COMPLETE",
        "the tests FAILED: 2 of 9",
        "FAILED tests/test_a.py::test_b - AssertionError",
    ):  # not the coder's verdict
        assert run_pipeline(state(), Script(roles={"implement": [ok(f"report\n{line}")]})).kind == Kind.COMPLETE, line


FLOOR = '[brakes]\ncontext_floor = ["detect", "--loop-mode", "--json"]\n'


def test_the_context_floor_halts_the_queue_before_any_agent_runs_when_the_model_is_below_it():
    below = Script(
        roles={
            "context_floor": [ok('{"loop_mode_eligible": false, "context": 8192, "floor": 32768}')],
            "orient": [ok()],
            "implement": [ok()],
        }
    )
    outcome = run_pipeline(state(FLOOR + ROLES.format("orient")), below)
    assert (
        outcome.kind == Kind.RELEASE
        and outcome.halt == "human_intervention:context_below_floor: context=8192, floor=32768"
    )
    assert below.calls == ["context_floor"]
    above = Script(
        roles={"context_floor": [ok('probing...\n{"loop_mode_eligible": true, "context": 65536}')], "implement": [ok()]}
    )
    st = state(FLOOR)
    assert run_pipeline(st, above).kind == Kind.COMPLETE and above.calls == ["context_floor", "implement"]
    assert [r.name for r in st.runs] == ["context_floor", "implement", "test"] and st.runs[0].result == PASS


def test_a_context_floor_detector_that_gives_no_answer_halts_too_and_says_why():
    for answer in (crashed(3), ok("plenty of room"), ok('{"loop_mode_eligible": "yes"}')):
        script = Script(roles={"context_floor": [answer], "implement": [ok()]})
        st = state(FLOOR)
        outcome = run_pipeline(st, script)
        assert outcome.kind == Kind.RELEASE and outcome.halt.startswith(
            "human_intervention:context_below_floor: the detector gave no answer"
        ), answer
        assert script.calls == ["context_floor"] and st.faults[0].startswith("PIPELINE-FAULT: context floor detector")


def test_a_qa_scenario_that_qa_could_not_judge_holds_the_result_and_a_failed_one_loops():
    class QaScript(Script):
        def gates(self, state):
            verdict = self.gates_fail.pop(0) if self.gates_fail else "pass"
            if verdict == "fault":
                return [
                    GateResult(
                        "qa: walk it",
                        NOT_RUN,
                        "PIPELINE-FAULT: QA did not run (exit code 1)",
                        section="qa",
                        label="walk it",
                    )
                ]
            return [
                GateResult("qa: walk it", FAIL if verdict == "fail" else PASS, "verdict", section="qa", label="walk it")
            ]

    held = QaScript(roles={"implement": [ok()]}, gates_fail=["fault"])
    st = state()
    outcome = run_pipeline(st, held)
    assert outcome.kind == Kind.COMPLETE and "PIPELINE-FAULT: QA did not run (exit code 1); not passed" in outcome.hold
    assert held.calls == ["implement"] and st.faults == ["PIPELINE-FAULT: QA did not run (exit code 1)"]
    looped = QaScript(roles={"implement": [ok()]}, gates_fail=["fail", "pass"])
    outcome = run_pipeline(state(), looped)
    assert outcome.kind == Kind.COMPLETE and outcome.hold is None and looped.calls == ["implement", "implement"]


def test_config_errors_are_listed_all_at_once():
    with pytest.raises(BadInput) as refused:
        parse_config('[brakes]\nmax_fix_attempts = "two"\n[leases]\nlease = "soon"\n[nope]\nx = 1\n')
    assert len(refused.value.problems) == 3


def test_two_configurations_never_share_a_mutable_default():
    first, second = parse_config(""), parse_config("")
    assert first.hooks.identities == {} and first.hooks.identities is not second.hooks.identities


# --- the queue on the in-memory store ----------------------------------------------------------


def record(queue: Queue, step_id: str, kind: Kind, result: str | None = None, worker: str = "w1", attempt: int = 1):
    from runner.worker.attempt import Outcome

    snap = queue.snapshot(branches=["runner/integration"])
    step: Step = snap.plan.steps[step_id]
    st = State(step=step, attempt=attempt, config=snap.config)
    recorder = Recorder(queue, worker, f"{worker}.1", lambda s, a, status: {"state": "idle"})
    return recorder.record(
        st,
        Outcome(kind, reason="x" if kind != Kind.COMPLETE else None),
        result,
        [],
        None,
        Path("/nonexistent"),
        0.1,
        snap,
    )


def change(queue: Queue, worker: str = "w1") -> str:
    base = queue.store.tip("runner/integration")
    return queue.store.make_commit(
        [base],
        {"out.txt": worker.encode()},
        "change\n",
        __import__("runner.queue.queue", fromlist=["author_for"]).author_for(worker),
    )


def test_a_record_moves_queue_integration_step_branch_and_heartbeat_in_one_publish(tmp_path):
    queue = memory_queue(tmp_path, {"01-a": {}})
    queue.claim("w1", "w1.1", {})
    before = queue.store.publishes
    published, sentinel = record(queue, "01-a", Kind.COMPLETE, change(queue))
    store = queue.store
    assert sentinel == "STEP_COMPLETE" and store.publishes == before + 1
    assert store.file_at(store.tip("runner/integration"), "out.txt") == b"w1"
    assert store.tip("runner/steps/01-a") is None  # merged, so its branch goes in the same publish
    assert "refs/runner/heartbeats/w1" in store.refs
    assert published.change.event.result["merge"] == store.tip("runner/integration")


def test_a_holder_that_lost_its_claim_records_nothing_and_merges_nothing(tmp_path):
    queue = memory_queue(tmp_path, {"01-a": {}})
    queue.claim("w1", "w1.1", {})
    result = change(queue)
    queue.event("01-a", Kind.ABORT, "alice", reason="stop")  # a person aborts while it runs
    integration = queue.store.tip("runner/integration")
    with pytest.raises(ClaimLost):
        record(queue, "01-a", Kind.COMPLETE, result)
    assert queue.store.tip("runner/integration") == integration and queue.store.tip("runner/steps/01-a") is None


def test_a_step_that_needs_approval_records_review_and_merges_nothing(tmp_path):
    queue = memory_queue(tmp_path, {"01-a": {"requires_approval": True}})
    queue.claim("w1", "w1.1", {})
    integration = queue.store.tip("runner/integration")
    published, sentinel = record(queue, "01-a", Kind.COMPLETE, change(queue))
    assert sentinel == "STEP_BLOCKED" and published.change.status == "review"
    assert queue.store.tip("runner/integration") == integration
    approved = approve(queue, "01-a", "alice")
    assert (
        approved.change.status == "done"
        and queue.store.file_at(queue.store.tip("runner/integration"), "out.txt") == b"w1"
    )


@pytest.mark.parametrize(
    "kind,status,sentinel,outcome",
    [
        (Kind.COMPLETE, "done", "STEP_COMPLETE", "done"),
        (Kind.FAIL, "ready", "STEP_FAILED", "ready"),
        (Kind.BLOCK, "review", "STEP_BLOCKED", "review"),
        (Kind.RELEASE, "ready", "SKIP", "ready"),
    ],
)
def test_the_handoff_says_the_status_the_machine_gave(tmp_path, kind, status, sentinel, outcome):
    from runner.worker.attempt import Outcome

    queue = memory_queue(tmp_path, {"01-a": {}})
    queue.claim("w1", "w1.1", {})
    snap = queue.snapshot(branches=["runner/integration"])
    st = State(step=snap.plan.steps["01-a"], attempt=1, config=snap.config)
    recorder = Recorder(queue, "w1", "w1.1", lambda s, a, st_: {})
    review = "deviation" if kind == Kind.BLOCK else None
    result = change(queue) if kind == Kind.COMPLETE else None
    published, said = recorder.record(
        st, Outcome(kind, reason="why", review=review), result, [], None, Path("/nonexistent"), 0.1, snap
    )
    handoff = queue.store.file_at(published.commit, "plans/handoffs/01-a.md").decode()
    assert published.change.status == status and said == sentinel
    assert f"outcome: {outcome}" in handoff and f"sentinel: {sentinel}" in handoff


def test_a_backoff_written_to_the_second_is_never_shorter_than_asked():
    """Regression: not_before is written to the second; truncated, a 2 s backoff came out as
    up to 1 s shorter and a worker took the step again at once (chaos, skewed backoff)."""
    from datetime import timedelta

    from runner.core.model import format_time, parse_time, utc_now
    from runner.queue.backoff import retry_at

    config = parse_config('[leases]\nbackoff = "2s"\n')
    for _ in range(200):
        before = utc_now()
        assert parse_time(format_time(retry_at(config, 1))) >= before + timedelta(
            seconds=1.6
        )  # 2 s less its 20 % jitter
