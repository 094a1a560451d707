"""Budgets that hold and limits that are not failures (issue 43), in milliseconds: the pipeline
driven by a scripted executor whose runs report usage or end on a provider's limit, the state
machine's sums and a person's go-ahead, and the queue on the in-memory store pausing an
account and holding back exactly the steps that would spend it. tests/test_limits.py runs the
same rules with real workers over a real remote under the hook."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from support.memory import memory_queue

from runner.core.agentoutput import Limit
from runner.core.config import parse_config
from runner.core.machine import BUDGET_HALT, Event, Kind, transition
from runner.core.model import parse_time, utc_now
from runner.core.stepfile import parse_step
from runner.core.usage import UNKNOWN, Spend, Usage
from runner.queue.change import Skip
from runner.queue.claims import held_back, why_nothing
from runner.worker.attempt import Outcome, State
from runner.worker.executor import RunResult
from runner.worker.gates import FAIL, PASS, GateResult
from runner.worker.pipeline import run_pipeline
from runner.worker.record import Recorder

SPENDY = Usage(10_000, 1_000, usd=0.50, usd_from="claude", model="m")


def ran(
    usage=SPENDY, output: str = "", limit: Limit | None = None, code: int = 0, account: str = "claude"
) -> RunResult:
    return RunResult(["claude"], code, 0.01, output=output, usage=usage, model="m", limit=limit, account=account)


@dataclass
class Script:
    roles: dict[str, list[RunResult]] = field(default_factory=dict)
    gates_fail: list[bool] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def run(self, role: str, state: State):
        if role not in self.roles:
            return None
        self.calls.append(role)
        results = self.roles[role]
        return results.pop(0) if len(results) > 1 else results[0]

    def gates(self, state: State):
        failing = self.gates_fail.pop(0) if self.gates_fail else False
        return [GateResult("test", FAIL if failing else PASS, "exit code 1" if failing else "exit code 0", ["t"], 0.01)]

    def changed_files(self):
        return ["a.py"]

    def elapsed(self):
        return 0.0

    def stopping(self):
        return False

    def lost(self):
        return False


def state(config: str = "", meta: str = "", **fields) -> State:
    step = parse_step("plans/steps/01-a.md", f"---\nstep: 01-a\nrun: [x]\n{meta}---\nbody\n".encode())
    assert step.valid, step.problems
    return State(step=step, attempt=1, config=parse_config(config).for_step(step.meta), **fields)


VERIFY = '[roles.verify]\ncommand = ["claude"]\noutput = "claude-json"\n'


def test_a_step_over_its_budget_is_held_for_a_person_before_the_next_agent_run_never_failed():
    script = Script(roles={"implement": [ran()]}, gates_fail=[True, True, True])
    st = state("[brakes]\nstep_budget_usd = 0.75\nmax_fix_attempts = 5\n")
    outcome = run_pipeline(st, script)
    assert outcome.kind == Kind.BLOCK and outcome.review == "budget" and not outcome.permanent
    assert script.calls == ["implement", "implement"]  # the third run would have started over the budget
    assert "$1.0000 spent of its $0.75 budget" in outcome.reason and "runner approve" in outcome.reason
    # what earlier attempts spent counts: held before any agent runs
    before = state("[brakes]\nstep_budget_usd = 2\n", usage_before=Spend(usd=2.5, runs=5))
    script = Script(roles={"implement": [ran()]})
    assert run_pipeline(before, script).review == "budget" and script.calls == []


def test_a_token_budget_holds_too_and_unknown_usage_counts_as_nothing():
    script = Script(roles={"implement": [ran()]}, gates_fail=[True, False])
    outcome = run_pipeline(state("[brakes]\nstep_budget_tokens = 11000\n"), script)
    assert outcome.kind == Kind.BLOCK and "11,000 tokens spent of its 11,000" in outcome.reason
    unknown = Script(roles={"implement": [ran(UNKNOWN)]}, gates_fail=[True, True, False])
    assert run_pipeline(state("[brakes]\nstep_budget_tokens = 1\n"), unknown).kind == Kind.COMPLETE


def test_a_persons_go_ahead_lets_it_run_one_attempt_over_the_budget():
    waived = state(
        "[brakes]\nstep_budget_usd = 0.1\n", meta="budget_waived: true\n", usage_before=Spend(usd=5.0, runs=9)
    )
    assert run_pipeline(waived, Script(roles={"implement": [ran()]})).kind == Kind.COMPLETE


def test_the_plans_budget_halts_the_queue_and_spends_nothing():
    st = state("[brakes]\nplan_budget_usd = 10\n", plan_usd_before=9.75)
    script = Script(roles={"implement": [ran()]}, gates_fail=[True, False])
    outcome = run_pipeline(st, script)
    assert outcome.kind == Kind.RELEASE and outcome.halt.startswith(BUDGET_HALT)
    assert "plan $10.25 spent of its $10.00 budget" in outcome.halt and script.calls == ["implement"]


def test_a_limit_gives_the_step_back_and_pauses_its_account_until_the_reset():
    reset = utc_now() + timedelta(hours=2)
    hit = ran(Usage(), "You've hit your limit", Limit("You've hit your limit · resets 9pm", reset), code=1)
    for role, config in (("implement", ""), ("verify", VERIFY)):
        roles = {"implement": [ran()], role: [hit]} if role != "implement" else {"implement": [hit]}
        st = state(config)
        outcome = run_pipeline(st, Script(roles=roles))
        assert outcome.kind == Kind.RELEASE and not outcome.fault and outcome.account == "claude"
        assert outcome.retry_at == reset and "no attempt spent" in outcome.reason
        assert st.runs[-1].name == role and st.runs[-1].usage == Usage()  # the run is on the record
    nameless = run_pipeline(
        state('[brakes]\nlimit_wait = "20m"\n'),
        Script(roles={"implement": [ran(UNKNOWN, limit=Limit("rate limited"), code=1)]}),
    )
    waited = (nameless.retry_at - utc_now()).total_seconds()
    assert nameless.kind == Kind.RELEASE and 1190 <= waited <= 1200


def test_the_next_attempt_moves_up_the_model_ladder_only_on_evidence():
    failing = run_pipeline(
        state("[brakes]\nmax_fix_attempts = 0\n"), Script(roles={"implement": [ran()]}, gates_fail=[True])
    )
    assert failing.kind == Kind.FAIL and failing.escalate
    crashed = run_pipeline(state(), Script(roles={"implement": [ran(code=1)]}))
    assert crashed.kind == Kind.FAIL and not crashed.escalate
    limited = run_pipeline(state(), Script(roles={"implement": [ran(limit=Limit("429"), code=1)]}))
    assert limited.kind == Kind.RELEASE and not limited.escalate


# --- the state machine -------------------------------------------------------------------------


def held(meta: dict) -> dict:
    return {**meta, "status": "claimed", "assignee": "w1", "attempt": 1}


def test_the_machine_sums_what_the_runs_spent_into_the_steps_usage():
    runs = ({"name": "implement", "usage": SPENDY.record()}, {"name": "verify", "usage": UNKNOWN}, {"name": "test"})
    event = Event(Kind.FAIL, "w1", utc_now(), step="01-a", attempt=1, reason="x", runs=runs)
    updates = transition(held({"usage": {"usd": 1.0, "runs": 2}}), event)
    assert updates["usage"] == {"usd": 1.5, "input_tokens": 10000, "output_tokens": 1000, "runs": 4, "unknown": 1}
    plain = Event(Kind.FAIL, "w1", utc_now(), step="01-a", attempt=1, reason="x", runs=({"name": "test"},))
    assert "usage" not in transition(held({}), plain)  # a plan of plain commands gets no usage key
    hostile = Event(
        Kind.FAIL,
        "w1",
        utc_now(),
        step="01-a",
        attempt=1,
        reason="x",
        runs=({"name": "x", "usage": {"input_tokens": "many"}}, "not a run", {"usage": [1]}),
    )
    assert transition(held({}), hostile)["usage"] == {"usd": 0.0, "runs": 2, "unknown": 2}


def test_approving_a_budget_hold_waives_it_for_one_attempt():
    block = Event(Kind.BLOCK, "w1", utc_now(), step="01-a", attempt=1, review="budget", reason="budget: $1 of $0.5")
    meta = {**held({}), **transition(held({}), block)}
    assert meta["status"] == "review" and meta["review"] == "budget"
    approved = {**meta, **transition(meta, Event(Kind.APPROVE, "alice", utc_now(), step="01-a"))}
    assert approved["status"] == "ready" and approved["budget_waived"] is True
    rejected = transition(meta, Event(Kind.REJECT, "alice", utc_now(), step="01-a", reason="try the cheap way"))
    assert rejected["budget_waived"] is True and "try the cheap way" in rejected["last_error"]
    next_record = Event(Kind.COMPLETE, "w1", utc_now(), step="01-a", attempt=1)
    assert transition(held({"budget_waived": True}), next_record)["budget_waived"] is None


def test_only_a_release_pauses_an_account_and_it_says_until_when():
    from runner.core.machine import TransitionError

    at = utc_now() + timedelta(hours=1)
    ok = transition(
        held({}),
        Event(Kind.RELEASE, "w1", utc_now(), step="01-a", attempt=1, account="claude", retry_at=at, reason="limit"),
    )
    assert ok["status"] == "ready" and ok["not_before"] and "failures" not in ok
    for bad in (
        {"kind": Kind.FAIL, "retry_at": at},
        {"kind": Kind.RELEASE},
        {"kind": Kind.RELEASE, "retry_at": at, "account": "../../etc"},
    ):
        kind = bad.pop("kind")
        with pytest.raises(TransitionError):
            transition(
                held({}),
                Event(kind, "w1", utc_now(), step="01-a", attempt=1, reason="x", **{"account": "claude", **bad}),
            )


# --- the queue on the in-memory store ------------------------------------------------------------

ROLES = (
    '[harness]\ncommand = ["claude", "-p"]\noutput = "claude-json"\n'
    '[roles.verify]\ncommand = ["gemini", "--prompt", "{prompt}"]\noutput = "gemini-json"\n'
)


def limited_release(queue, step_id: str, worker: str, until) -> None:
    queue.claim(worker, f"{worker}.1", {}, step_id=step_id)
    snap = queue.snapshot(branches=["runner/integration"])
    st = State(step=snap.plan.steps[step_id].full(), attempt=snap.plan.steps[step_id].attempt, config=snap.config)
    recorder = Recorder(queue, worker, f"{worker}.1", lambda s, a, status: {"state": "idle"})
    outcome = Outcome(
        Kind.RELEASE,
        reason="implement hit a limit of account claude: You've hit your limit",
        retry_at=until,
        account="claude",
    )
    recorder.record(st, outcome, None, [], None, Path("/nonexistent"), 0.1, snap)


def test_a_limit_pauses_the_account_for_every_step_that_would_spend_it(tmp_path):
    queue = memory_queue(
        tmp_path,
        {
            "01-a": {"run": None},
            "02-b": {"run": None},
            "03-plain": {"run": ["make"]},
            "04-own": {"run": ["codex", "exec"], "roles": {"verify": {"command": []}}},
        },
        config=ROLES,
    )
    until = utc_now() + timedelta(hours=1)
    limited_release(queue, "01-a", "w1", until)
    snap = queue.snapshot()
    step = snap.plan.steps["01-a"].full()
    assert step.status == "ready" and not step.get("failures") and parse_time(step.get("not_before")) == until
    assert set(snap.pauses(utc_now())) == {"claude"}
    # 02-b's implement is claude's: held. 03-plain runs make and gemini (verify), 04-own codex alone: both taken.
    taken = {queue.claim("w2", "w2.1", {}).step, queue.claim("w3", "w3.1", {}).step}
    assert taken == {"03-plain", "04-own"}
    assert "1 held back by a paused account (claude until" in why_nothing(queue.snapshot(), [], None)
    assert "account claude is paused until" in held_back(queue.snapshot(), queue.snapshot().plan.steps["02-b"])
    pause = queue.snapshot().pauses(utc_now())["claude"]
    assert pause.by == "w1" and pause.step == "01-a" and "hit your limit" in pause.reason
    with pytest.raises(Skip):  # nor by name
        queue.claim("w4", "w4.1", {}, step_id="02-b")


def test_a_pause_ends_at_its_reset_and_a_later_limit_only_extends_it(tmp_path):
    queue = memory_queue(tmp_path, {"01-a": {"run": None}, "02-b": {"run": None}}, config=ROLES)
    later, sooner = utc_now() + timedelta(hours=3), utc_now() + timedelta(hours=1)
    limited_release(queue, "01-a", "w1", later)
    from runner.core.events import pause_file

    before = queue.store.file_at(queue.snapshot().tip, "plans/pauses/claude.json")
    event = Event(
        Kind.RELEASE, "w2", utc_now(), step="02-b", attempt=1, account="claude", retry_at=sooner, reason="again"
    )
    assert pause_file(before, event)[1] == before  # the sooner reset leaves the later one
    after = queue.snapshot().pauses(later + timedelta(seconds=1))
    assert after == {}


def test_a_failure_on_evidence_moves_the_step_up_its_model_ladder_and_fills_the_model_token(tmp_path):
    from types import SimpleNamespace

    from runner.core.accounts import agent_of
    from runner.worker.actions import WorktreeActions

    ladder = '[harness]\ncommand = ["claude", "--model", "{model}"]\nmodels = ["small", "large"]\n'
    queue = memory_queue(tmp_path, {"01-a": {"run": None}}, config=ladder)
    queue.claim("w1", "w1.1", {})
    snap = queue.snapshot(branches=["runner/integration"])
    st = State(step=snap.plan.steps["01-a"].full(), attempt=1, config=snap.config)
    recorder = Recorder(queue, "w1", "w1.1", lambda s, a, status: {})
    event = recorder.event(st, Outcome(Kind.FAIL, reason="gate test failed", escalate=True), snap, None, None, 1.0)
    assert event.metrics == {"rung": 1}
    assert recorder.event(st, Outcome(Kind.FAIL, reason="crashed"), snap, None, None, 1.0).metrics is None
    top = State(step=st.step, attempt=1, config=snap.config, rung=1)
    assert recorder.event(top, Outcome(Kind.FAIL, reason="x", escalate=True), snap, None, None, 1.0).metrics is None
    actions = SimpleNamespace(agent=lambda role, state: agent_of(state.config, state.step.get("run"), role))
    assert WorktreeActions.model(actions, "implement", st) == "small"
    assert WorktreeActions.model(actions, "implement", top) == "large"
    assert WorktreeActions.model(actions, "verify", st) == ""


def test_every_role_gets_its_step_attempt_and_worker_as_telemetry_attributes(monkeypatch):
    from types import SimpleNamespace

    from runner.worker.actions import WorktreeActions

    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=claude-code,team=core")
    env = WorktreeActions.env(SimpleNamespace(worker="host-a"), state(), Path("/tmp"))
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == (
        "service.name=claude-code,team=core,runner.step=01-a,runner.attempt=1,runner.worker=host-a"
    )
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES")
    env = WorktreeActions.env(SimpleNamespace(worker="host-a"), state(), Path("/tmp"))
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == "runner.step=01-a,runner.attempt=1,runner.worker=host-a"
