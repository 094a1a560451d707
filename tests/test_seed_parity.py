"""Seed parity, the last partial rows (issue 36): what the step-runner and loop-runner designs
runner grew from do at their edges, runner does, each driven through real workers (`runner
tick`, `runner worker`) with stub commands on real repositories, and asserted on the queue's
final state, the sentinel, the handoff and the record. The served tests run over a bare remote
guarded by the server hook with `[hooks] identities` (worker keys act only as their ids)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.repos import (
    STUB,
    WRITE,
    add_step,
    edit,
    git,
    handoff,
    queue_history,
    roles_toml,
    runner,
    runner_json,
    set_config,
    start_worker,
    statuses,
    tick,
)
from support.served import as_pusher, drain, served, served_statuses

from runner.core.config import DEFAULT_TOML
from runner.core.limits import MAX_STDERR_TAIL_BYTES, MAX_TEXT_BYTES


def events(repo: Path) -> list[dict]:
    return [entry for entry in queue_history(repo) if "Step" in entry]


def runs_of(entry: dict) -> list[dict]:
    return json.loads(entry.get("Runs") or "[]")


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


ONE_WORKER, TWO_WORKERS = {"w1": "key-1"}, {"w1": "key-1", "w2": "key-2"}  # worker ids and their keys (support.served)


def config(extra: str = "", floor: list[str] | None = None) -> bytes:
    text = DEFAULT_TOML.replace("detect = true", "detect = false")
    return (text.replace("context_floor = []", f"context_floor = {json.dumps(floor or [])}") + extra).encode()


# --- 2. sweep and review faults: held for a person, flagged, never passed, the coder not run again ---


def test_a_sweep_and_a_review_that_fault_hold_the_result_for_a_person_under_the_hook(tmp_path):
    crash = [*STUB, "crash"]
    bare, alice = served(
        tmp_path,
        config(roles_toml(sweep=crash, review=crash)),
        {"01-a": {"run": WRITE}, "02-b": {"run": WRITE, "depends_on": ["01-a"]}},
    )
    drain(bare, tmp_path, ONE_WORKER)  # 02-b waits on 01-a: a second worker would only poll
    assert served_statuses(alice) == {"01-a": "review", "02-b": "waiting"}  # held; its dependent waits for the person
    git(alice, "fetch", "-q", "origin")
    record = events(bare)[-1]
    assert (record["Event"], record["Status"], record.get("Hold")) == ("complete", "review", "true")
    sweep = "PIPELINE-FAULT: edge-case sweep did not run (exit code 2: reviewer exploded)"
    review = "PIPELINE-FAULT: independent review did not run (exit code 2: reviewer exploded)"
    assert (
        json.loads(record["Reason"])
        == f"awaiting a person: {sweep}; not passed as swept; {review}, twice; not passed as reviewed"
    )
    names = [run["name"] for run in runs_of(record)]
    assert names == [
        "implement",
        "sweep",
        "review",
        "review",
    ]  # the coder ran once: a fault is never a reason to run it again
    text = git(bare, "show", "runner/queue:plans/handoffs/01-a.md")
    assert "sentinel: STEP_BLOCKED" in text and "## Pipeline faults" in text and sweep in text and review in text
    assert "out.txt" not in git(bare, "ls-tree", "--name-only", "runner/integration")  # nothing merged, nothing passed
    as_pusher("alice", "approve", "01-a", "--by", "alice", repo=alice)  # the person at the approval gate decides
    assert served_statuses(alice)["01-a"] == "done"


# --- 3. the coder's own verdict ---------------------------------------------------------------------


def coder(last_line: str) -> list[str]:
    return ["sh", "-c", f'echo work > work.txt; echo "I looked at the step."; echo "{last_line}"']


def test_a_coder_that_says_rejected_ends_the_step_as_rejected_for_good(queue_repo):
    add_step(queue_repo, "01-a", run=coder("REJECTED: the step would drop the users table"))
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_REJECTED" and report["status"] == "failed" and report["will_retry"] is False
    assert report["reason"] == "rejected by the coder: the step would drop the users table"
    show = runner_json(queue_repo, "show", "01-a")
    assert (
        show["status"] == "failed" and show["meta"]["last_error"] == report["reason"] and show["meta"]["failures"] == 1
    )
    record = events(queue_repo)[-1]
    assert (record["Event"], record["Permanent"], record["Status"]) == ("fail", "true", "failed")
    assert "sentinel: STEP_REJECTED" in handoff(queue_repo, "01-a")
    text = runner(queue_repo, "retry", "01-a", "--by", "alice").stdout  # a person may still send it back
    assert "-> ready" in text


def test_a_coder_that_says_failed_fails_the_attempt_and_one_that_says_complete_goes_on(queue_repo):
    set_config(queue_repo, detect=False, backoff="0s")
    add_step(queue_repo, "01-a", run=coder("CODER_FAILED"))
    add_step(queue_repo, "02-b", run=coder("CODER_COMPLETE"))
    proc = start_worker(queue_repo, "w1", "--once", "--json")
    out, _err = proc.communicate(timeout=120)
    reports = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    first = next(r for r in reports if r.get("step") == "01-a")
    assert (
        first["sentinel"] == "STEP_FAILED"
        and first["reason"] == "implement failed: the coder said FAILED"
        and first["will_retry"] is True
    )
    final = statuses(queue_repo)
    assert final["02-b"] == "done" and final["01-a"] == "failed"  # retried to its last attempt, each a STEP_FAILED
    done = next(e for e in events(queue_repo) if e["Step"] == "02-b" and e["Event"] == "complete")
    assert runs_of(done)[0]["detail"] == "exit code 0, CODER_COMPLETE"
    assert "sentinel: STEP_FAILED" in handoff(queue_repo, "01-a")


def test_an_abort_at_the_deviation_gate_prints_step_rejected(queue_repo):
    set_config(queue_repo, detect=False, extra=roles_toml(orient=[*STUB, "deviation"]))
    add_step(queue_repo, "01-a", run=WRITE)
    add_step(queue_repo, "02-b", run=WRITE)
    assert tick(queue_repo)["sentinel"] == tick(queue_repo)["sentinel"] == "STEP_BLOCKED"
    assert statuses(queue_repo) == {"01-a": "review", "02-b": "review"}
    said = runner(queue_repo, "abort", "01-a", "--reason", "the plan is stale", "--by", "alice").stdout.splitlines()
    assert said[-1] == "STEP_REJECTED: aborted by alice: the plan is stale"
    rejected = runner_json(queue_repo, "reject", "02-b", "--abort", "--reason", "not needed", "--by", "alice")
    assert rejected["sentinel"] == "STEP_REJECTED" and rejected["status"] == "failed"
    assert statuses(queue_repo) == {"01-a": "failed", "02-b": "failed"}
    assert "sentinel" not in runner_json(
        queue_repo, "retry", "01-a", "--by", "alice"
    )  # only an end by a person is a rejection


# --- 4. the engine's own words in the fault ----------------------------------------------------------


def test_a_fault_carries_the_tail_of_the_failing_commands_stderr(queue_repo):
    set_config(queue_repo, detect=False, max_attempts=1)
    add_step(
        queue_repo,
        "01-a",
        run=["sh", "-c", 'echo "thinking..."; echo "warming up" >&2; echo "Error: model not found: gpt-9" >&2; exit 1'],
    )
    text = runner(queue_repo, "tick", "--id", "w1").stdout.splitlines()
    words = "implement did not finish cleanly: exit code 1: warming up | Error: model not found: gpt-9"
    assert text[-1] == f"STEP_FAILED: {words}" and f"Reason: {words} (it will not be retried)" in text
    assert runner_json(queue_repo, "show", "01-a")["meta"]["last_error"].startswith(words)
    record = events(queue_repo)[-1]
    assert runs_of(record)[0]["detail"] == "exit code 1: warming up | Error: model not found: gpt-9"
    assert f"**STEP_FAILED** by w1: failed ({words}" in handoff(queue_repo, "01-a")


def test_a_two_megabyte_stderr_line_is_clipped_in_the_fault(queue_repo):
    set_config(queue_repo, detect=False, max_attempts=1)
    flood = python("import sys; sys.stderr.write('x' * 2_000_000 + 'rate limited' + chr(10)); sys.exit(7)")
    add_step(queue_repo, "01-a", run=flood)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_FAILED" and report["reason"].endswith("rate limited")
    assert report["reason"].startswith("implement did not finish cleanly: exit code 7: ")
    assert len(report["reason"].encode()) < 100 + MAX_STDERR_TAIL_BYTES
    assert len(runner_json(queue_repo, "show", "01-a")["meta"]["last_error"].encode()) <= MAX_TEXT_BYTES


def test_a_role_times_out_at_its_own_timeout_and_the_review_that_did_not_run_holds_the_result(queue_repo):
    silent = ["sh", "-c", "echo 'no model reachable, retrying' >&2; exec sleep 60"]
    set_config(queue_repo, detect=False, extra=roles_toml(review=silent) + 'timeout = "1s"\n')
    add_step(queue_repo, "01-a", run=WRITE)  # the step's own timeout is the default hour
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_BLOCKED" and statuses(queue_repo)["01-a"] == "review"
    [fault] = report["faults"]
    assert (
        fault.startswith("PIPELINE-FAULT: independent review did not run (timed out after ")
        and fault.endswith("s (process tree killed): no model reachable, retrying)")
        and fault in handoff(queue_repo, "01-a")
    )
    assert [(r["name"], r["result"]) for r in report["runs"]] == [
        ("implement", "pass"),
        ("review", "fail"),
        ("review", "fail"),
    ]


# --- 5. the context floor ---------------------------------------------------------------------------------


def detector(answer: dict) -> list[str]:
    return python(f"import json; print('probing the model'); print(json.dumps({answer!r}))", "--loop-mode", "--json")


def test_the_context_floor_halts_the_queue_before_implement_under_the_hook_with_identities(tmp_path):
    below = detector({"loop_mode_eligible": False, "context": 8192, "floor": 32768})
    marker = tmp_path / "implement-ran"
    steps = {
        "01-a": {"run": ["sh", "-c", f"touch {marker}; echo a > a.txt"]},
        "02-b": {"run": ["sh", "-c", "echo b > b.txt"]},
    }
    bare, alice = served(tmp_path, config(floor=below), steps)
    said = drain(bare, tmp_path, TWO_WORKERS)  # a worker key's halt is accepted: it is the pipeline's own
    status = json.loads(as_pusher("alice", "status", "--json", repo=alice).stdout)
    assert status["halted"] == "human_intervention:context_below_floor: context=8192, floor=32768", said
    assert {s["step"]: s["status"] for s in status["steps"]} == {"01-a": "ready", "02-b": "ready"}
    assert not marker.exists()  # implement never ran
    records = [
        e for e in events(bare) if e["Event"] != "claim"
    ]  # each step a worker took was given back, nothing spent
    assert records and {e["Event"] for e in records} == {"release"}
    assert all([(r["name"], r["result"]) for r in runs_of(e)] == [("context_floor", "fail")] for e in records)
    halts = [e for e in queue_history(bare) if e.get("Event") == "halt"]
    assert halts and {e["Actor"] for e in halts} <= {"w1", "w2"}
    assert "loop_mode_eligible=false (context=8192, floor=32768)" in git(
        bare, "show", f"runner/queue:plans/handoffs/{records[0]['Step']}.md"
    )

    # The person raises the context (here: a detector that says it is enough) and resumes; the plan drains.
    toml = git(alice, "show", "origin/runner/queue:runner.toml").replace(
        json.dumps(below), json.dumps(detector({"loop_mode_eligible": True, "context": 65536}))
    )
    clone = tmp_path / "alice-edit"
    git(tmp_path, "clone", "-q", "--branch", "runner/queue", str(bare), str(clone))
    (clone / "runner.toml").write_text(toml)
    git(clone, "commit", "-qam", "a larger context")
    assert (
        subprocess.run(
            ["git", "push", "-q", "origin", "runner/queue"], cwd=clone, env={**os.environ, "RUNNER_PUSHER": "alice"}
        ).returncode
        == 0
    )
    as_pusher("alice", "resume", "--by", "alice", repo=alice)
    drain(bare, tmp_path, ONE_WORKER)
    assert served_statuses(alice) == {"01-a": "done", "02-b": "done"} and marker.exists()
    done = [e for e in events(bare) if e["Event"] == "complete"]
    assert all(runs_of(e)[0]["name"] == "context_floor" and runs_of(e)[0]["result"] == "pass" for e in done)


def test_a_context_floor_detector_that_gives_no_answer_halts_the_queue_too(queue_repo):
    edit(queue_repo, {"runner.toml": config(floor=["sh", "-c", "echo no GPU found >&2; exit 3"])})
    add_step(queue_repo, "01-a", run=WRITE)
    report = tick(queue_repo)
    assert report["sentinel"] == "SKIP" and report["outcome"] == "ready"
    halted = runner_json(queue_repo, "status")["halted"]
    assert halted == (
        "human_intervention:context_below_floor: the detector gave no answer "
        "(it did not run (exit code 3: no GPU found))"
    )
    assert report["faults"] == ["PIPELINE-FAULT: context floor detector: it did not run (exit code 3: no GPU found)"]
    assert tick(queue_repo)["reason"] == f"queue halted: {halted}"


# --- 6. Automated QA scenarios without a command ------------------------------------------------------


QA_BODY = (
    "#### Automated QA:\n- [ ] the home page shows the count\n- [ ] the help screen has no typos\n"
    "- [ ] smoke: `test -f out.txt`\n#### Manual Verification:\n- [ ] reads well\n"
)
# A [roles.qa] stand-in: reads the scenario from its prompt file, passes the home page, fails the help screen
# until out.txt says "typos fixed" (the fix loop's feedback is its reasons).
QA_AGENT = python(
    "import json, pathlib, sys\n"
    "prompt = pathlib.Path(sys.argv[1]).read_text()\n"
    "scenario = prompt.split('## The QA scenario to walk through', 1)[1]\n"
    "fixed = 'typos fixed' in pathlib.Path('out.txt').read_text()\n"
    "ok = 'home page' in scenario or fixed\n"
    "print(json.dumps({'pass': ok, 'score': 1.0 if ok else 0.2, "
    "'reasons': [] if ok else ['the help screen says teh'], 'next_hint': 'typos fixed'}))\n",
    "{prompt_file}",
)


def test_qa_scenarios_without_a_command_are_walked_through_by_roles_qa_each_recorded(queue_repo):
    set_config(queue_repo, detect=False, extra=roles_toml(qa=QA_AGENT))
    add_step(queue_repo, "01-a", run=["sh", "-c", 'echo "$1" > out.txt', "sh", "{feedback}"], body=QA_BODY)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_COMPLETE", report
    assert report["automated_qa"]["passed"] == report["automated_qa"]["total"] == 3
    implement = [r for r in report["runs"] if r["name"] == "implement"]
    assert len(implement) == 2  # the failed scenario's reasons sent it back once, as a failed check would
    step = git(queue_repo, "show", "runner/queue:plans/steps/01-a.md")
    assert (
        "- [x] the home page shows the count" in step
        and "- [x] the help screen has no typos" in step
        and "- [ ] reads well" in step
    )
    record = events(queue_repo)[-1]
    qa = [(r["name"], r["result"]) for r in runs_of(record) if r["name"].startswith("qa: the")]
    assert qa == [
        ("qa: the home page shows the count", "pass"),
        ("qa: the help screen has no typos", "fail"),
        ("qa: the home page shows the count", "pass"),
        ("qa: the help screen has no typos", "pass"),
    ]
    assert "the help screen says teh" in git(
        queue_repo, "show", "runner/integration:out.txt"
    )  # the reasons reached implement
    assert "| qa: the help screen has no typos | pass | [roles.qa] verdict: pass=true" in handoff(queue_repo, "01-a")


def test_without_roles_qa_a_scenario_stays_not_run_and_is_never_ticked(queue_repo):
    add_step(queue_repo, "01-a", run=["sh", "-c", "echo hi > out.txt"], body=QA_BODY)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_COMPLETE" and report["automated_qa"]["passed"] == 1
    gates = {g["name"]: (g["result"], g["detail"]) for g in report["gates"]}
    assert gates["qa: the home page shows the count"] == (
        "not run",
        "no `command` in the item and no [roles.qa] to walk it through",
    )
    assert "- [ ] the home page shows the count" in git(queue_repo, "show", "runner/queue:plans/steps/01-a.md")


def test_a_qa_run_that_crashes_or_changes_the_files_judged_nothing_and_holds_the_result(queue_repo):
    body = "#### Automated QA:\n- [ ] the home page shows the count\n"
    set_config(queue_repo, detect=False, extra=roles_toml(qa=["sh", "-c", "echo browser crashed >&2; exit 1"]))
    add_step(queue_repo, "01-a", run=["sh", "-c", "echo hi > out.txt"], body=body)
    report = tick(queue_repo)
    fault = "PIPELINE-FAULT: QA did not run (exit code 1: browser crashed)"
    assert (
        report["sentinel"] == "STEP_BLOCKED"
        and report["faults"] == [fault]
        and report["reason"] == f"awaiting a person: {fault}; not passed"
    )
    assert statuses(queue_repo)["01-a"] == "review" and "- [ ] the home page" in git(
        queue_repo, "show", "runner/queue:plans/steps/01-a.md"
    )
    assert fault in handoff(queue_repo, "01-a")

    scribbler = ["sh", "-c", 'echo scribble >> out.txt; echo \'{"pass": true, "score": 1.0}\'']
    set_config(queue_repo, detect=False, extra=roles_toml(qa=scribbler))
    add_step(queue_repo, "02-b", run=["sh", "-c", "echo hi > out.txt"], body=body)
    report = tick(queue_repo)
    assert report["sentinel"] == "STEP_BLOCKED"
    assert report["faults"] == ["PIPELINE-FAULT: QA changed the step's files (out.txt): its verdict is not taken"]


# --- 7. the caller's context ------------------------------------------------------------------------------


def test_tick_context_goes_into_the_prompt_and_the_handoff_as_text_or_from_a_file(queue_repo, tmp_path):
    seen = tmp_path / "prompt-seen"
    add_step(
        queue_repo, "01-a", run=["sh", "-c", f'cp "$1" {seen}; echo "$2" > ctx.txt', "sh", "{prompt_file}", "{context}"]
    )
    report = runner_json(queue_repo, "tick", "--id", "w1", "--context", "use the v2 API; the v1 one is gone")
    assert report["sentinel"] == "STEP_COMPLETE"
    assert "## Context from the caller\n\nuse the v2 API; the v1 one is gone" in seen.read_text()
    assert (
        git(queue_repo, "show", "runner/integration:ctx.txt") == "use the v2 API; the v1 one is gone"
    )  # the {context} token
    assert "## Context from the caller" in handoff(queue_repo, "01-a") and "the v1 one is gone" in handoff(
        queue_repo, "01-a"
    )

    notes = tmp_path / "context.md"
    notes.write_text("The staging database is read-only this week.\n" + "filler line\n" * 5000 + "THE LAST LINE\n")
    add_step(queue_repo, "02-b", run=["sh", "-c", f'cp "$1" {seen}', "sh", "{prompt_file}"])
    assert runner_json(queue_repo, "tick", "--id", "w1", "--context", str(notes))["sentinel"] == "STEP_COMPLETE"
    prompt = seen.read_text()
    assert (
        "The staging database is read-only this week." in prompt
        and "THE LAST LINE" in prompt
        and "bytes clipped" in prompt
    )
    assert len(handoff(queue_repo, "02-b").encode()) < 64 * 1024


# --- 8. the small ones ----------------------------------------------------------------------------------------


def test_the_tick_log_line_carries_pass_score_and_iter(queue_repo, tmp_path):
    verifier = python(
        "import json, pathlib; good = pathlib.Path('out.txt').read_text().strip() == 'fixed'\n"
        "print(json.dumps({'pass': good, 'score': 0.9 if good else 0.4, 'next_hint': 'write fixed'}))"
    )
    set_config(queue_repo, detect=False, verifier=verifier)
    add_step(
        queue_repo,
        "01-a",
        run=[
            "sh",
            "-c",
            'case "$1" in *fixed*) echo fixed > out.txt;; *) echo no > out.txt;; esac',
            "sh",
            "{feedback}",
        ],
    )
    log = tmp_path / "worker.log"
    runner(queue_repo, "tick", "--id", "w1", "--log-file", str(log))
    line = next(line for line in log.read_text().splitlines() if " -> done" in line)
    assert line.endswith("TICK w1 01-a attempt 1 -> done pass=true score=0.9 iter=2")
    assert runner_json(queue_repo, "show", "01-a")["meta"]["scores"] == [0.4, 0.9]
