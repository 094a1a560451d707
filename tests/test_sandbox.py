"""Steps in a sandbox (issue 44, part 3): under `[worker] sandbox = "bwrap"` a step's command
writes only its worktree, reads neither $HOME/.ssh nor another worktree, gets only the
variables it is allowed, and its change is merged as usual; a sandbox that cannot run is an
error before any claim, never a silent run without it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from support.repos import edit, git, runner, step_file

from runner.core.config import DEFAULT_TOML

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (.ci/run installs it)"
)

PROBE = r"""
report=report.txt
try() {{ if sh -c "$2" 2>/dev/null; then echo "$1: yes" >> $report; else echo "$1: no" >> $report; fi; }}
echo made > made.txt
try "write the clone" "echo x > '{clone}/outside.txt' && test -e '{clone}/outside.txt'"
try "write beside the clone" "echo x > '{beside}/outside.txt'"
try "write /var/tmp" "echo x > /var/tmp/escape-{mark}"
try "write home" "echo x >> '{home}/.profile'"
try "read ssh" "cat '{home}/.ssh/id_test'"
try "read another worktree" "cat '{other}/secret.txt'"
try "read the worker state" "ls '{state}/logs'"
try "see the agent login" "cat '{home}/.agent/login.json'"
try "write tmp" "echo x > /tmp/escape-{mark}"
try "see DEPLOY_TOKEN" "test -n \"$DEPLOY_TOKEN\""
try "see PASSED_ON" "test -n \"$PASSED_ON\""
try "see RUNNER_STEP" "test -n \"$RUNNER_STEP\""
try "write the shared cache" "echo x > '{cache}/made.txt'"
"""


def sandboxed_toml(**worker: str) -> str:
    text = DEFAULT_TOML.replace("detect = true", "detect = false").replace('sandbox = "none"', 'sandbox = "bwrap"')
    for key, value in worker.items():
        text = text.replace(f"{key} = []", f"{key} = {value}", 1)
    return text


def test_a_sandboxed_step_writes_only_its_worktree_and_its_change_is_merged(queue_repo: Path, tmp_path: Path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_test").write_text("a key\n")
    (home / ".agent").mkdir()
    (home / ".agent" / "login.json").write_text("{}\n")
    (home / ".profile").write_text("# mine\n")
    state = queue_repo / ".git" / "runner"
    other = state / "worktrees" / "w2" / "01-x-a1"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("another step's work\n")
    mark = os.urandom(4).hex()
    cache = tmp_path / "cache"
    cache.mkdir()
    script = PROBE.format(
        clone=queue_repo, beside=tmp_path, home=home, other=other, state=state, mark=mark, cache=cache
    )
    edit(
        queue_repo,
        {
            "runner.toml": sandboxed_toml(
                env_pass='["PASSED_ON"]', sandbox_home='["~/.agent"]', sandbox_write=f'["{cache}"]'
            ).encode(),
            **dict([step_file("01-probe", run=["sh", "-c", script])]),
        },
    )
    env = {"HOME": str(home), "DEPLOY_TOKEN": "t" * 20, "PASSED_ON": "yes"}
    done = json.loads(runner(queue_repo, "tick", "--id", "w1", "--json", env=env).stdout.splitlines()[-1])
    assert done["sentinel"] == "STEP_COMPLETE", done
    report = git(queue_repo, "show", "runner/integration:report.txt")
    assert git(queue_repo, "show", "runner/integration:made.txt") == "made"
    said = dict(line.split(": ") for line in report.splitlines())
    # Its writes outside the worktree land in empty folders of its own (the clone's, $HOME, /tmp) or fail.
    assert said == {
        "write the clone": "yes",
        "write beside the clone": "yes",
        "write /var/tmp": "no",
        "write home": "yes",
        "read ssh": "no",
        "read another worktree": "no",
        "read the worker state": "no",
        "see the agent login": "yes",
        "write tmp": "yes",
        "see DEPLOY_TOKEN": "no",
        "see PASSED_ON": "yes",
        "see RUNNER_STEP": "yes",
        "write the shared cache": "yes",
    }, report
    # What it wrote outside its worktree went into the sandbox's own empty folders, and is gone.
    assert not (queue_repo / "outside.txt").exists() and not (tmp_path / "outside.txt").exists()
    assert (home / ".profile").read_text() == "# mine\n" and (cache / "made.txt").read_text() == "x\n"
    assert not Path(f"/tmp/escape-{mark}").exists() and not Path(f"/var/tmp/escape-{mark}").exists()


def test_a_step_cut_off_the_network_cannot_reach_it(queue_repo: Path):
    edit(
        queue_repo,
        {
            "runner.toml": sandboxed_toml().replace("network = true", "network = false").encode(),
            **dict([step_file("01-net", run=["sh", "-c", "cut -d: -f1 /proc/net/dev | tail -n +3 > nets.txt"])]),
        },
    )
    done = json.loads(runner(queue_repo, "tick", "--id", "w1", "--json").stdout.splitlines()[-1])
    assert done["sentinel"] == "STEP_COMPLETE", done
    assert git(queue_repo, "show", "runner/integration:nets.txt").split() == ["lo"]


def test_a_sandbox_that_cannot_run_stops_the_worker_before_it_claims(queue_repo: Path, tmp_path: Path):
    edit(queue_repo, {"runner.toml": sandboxed_toml().encode(), **dict([step_file("01-x")])})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "setpriv"):  # a PATH without bwrap
        if found := shutil.which(tool):
            (bin_dir / tool).symlink_to(found)
    said = runner(queue_repo, "tick", "--id", "w1", check=False, env={"PATH": str(bin_dir)})
    assert said.returncode == 2, said.stdout + said.stderr
    assert 'sandbox = "bwrap" but bubblewrap is not installed' in said.stderr
    assert len(said.stderr.strip().splitlines()) == 1
    assert runner(queue_repo, "show", "01-x", "--json").stdout.count('"status": "ready"') == 1


def test_init_agent_turns_the_sandbox_on_with_the_agents_own_files_and_doctor_says_so(repo: Path):
    said = runner(repo, "init", "--agent", "codex").stdout
    assert "steps run in a bubblewrap sandbox" in said
    toml = git(repo, "show", "runner/queue:runner.toml")
    assert 'sandbox = "bwrap"' in toml and 'sandbox_home = ["~/.codex"]' in toml and '"OPENAI_API_KEY"' in toml
    doctor = runner(repo, "doctor", "--json", check=False)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["sandbox"]["result"] == "ok", checks["sandbox"]


def test_a_role_may_leave_the_sandbox_or_enter_it_on_its_own():
    from runner.core.config import parse_config
    from runner.worker.sandbox import configured, mode

    config = parse_config(
        '[worker]\nsandbox = "bwrap"\n[roles.verify]\ncommand = ["v"]\nsandbox = "none"\n'
        '[roles.review]\ncommand = ["r"]\n'
    )
    assert (mode(config, None), mode(config, "implement"), mode(config, "review"), mode(config, "verify")) == (
        "bwrap",
        "bwrap",
        "bwrap",
        "none",
    )
    alone = parse_config('[roles.review]\ncommand = ["r"]\nsandbox = "bwrap"\n')
    assert configured(alone) and mode(alone, "review") == "bwrap" and mode(alone, None) == "none"


def test_a_sandboxed_steps_process_tree_dies_with_its_worker(queue_repo: Path):
    import signal
    import subprocess
    import sys

    import psutil
    from support.repos import ENV_PATH, wait_for

    mark = str(30000 + os.getpid() % 20000)
    marks = {mark, str(int(mark) + 1), str(int(mark) + 2)}
    script = f"sleep {mark} & setsid sleep {int(mark) + 1} & echo started > started.txt; sleep {int(mark) + 2}"
    edit(
        queue_repo, {"runner.toml": sandboxed_toml().encode(), **dict([step_file("01-long", run=["sh", "-c", script])])}
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "runner", "worker", "--id", "w1", "--repo", str(queue_repo)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ENV_PATH,
    )

    def sleepers() -> list:
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            if (proc.info["cmdline"] or [None])[0] == "sleep" and proc.info["cmdline"][-1] in marks:
                found.append(proc)
        return found

    try:
        wait_for(lambda: list((queue_repo / ".git" / "runner" / "worktrees" / "w1").glob("01-long-a1/started.txt")))
        assert len(wait_for(lambda: len(sleepers()) == 3 and sleepers())) == 3
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
        wait_for(lambda: not sleepers(), timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
        for proc in sleepers():
            proc.kill()
