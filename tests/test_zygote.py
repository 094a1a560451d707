"""The tests' `runner` commands run forked from a zygote (support.zygote): each must behave as a
fresh `python -m runner` process would, or the rest of the suite tests something else."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support import zygote
from support.repos import ROOT, add_step, git

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def fresh(args: list[str], cwd, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["status", "--json"],
        ["show", "01-a"],
        ["show", "no-such-step"],  # exit 2, one line on stderr
        ["claim", "--id", "w1", "--tag", "gpu"],  # exit 3: nothing it could take
        ["add", "--id", "BAD ID", "x"],  # bad input: every problem listed
        ["--version"],
        ["status", "--no-such-option"],  # typer's usage error
    ],
)
def test_a_forked_command_says_and_exits_as_a_fresh_process_does(queue_repo, args):
    add_step(queue_repo, "01-a", tags=["cpu"])
    forked = zygote.run(args, env=ENV, cwd=queue_repo)
    alone = fresh(args, queue_repo, ENV)
    assert (forked.returncode, forked.stdout, forked.stderr) == (alone.returncode, alone.stdout, alone.stderr)


def test_a_forked_command_works_in_its_own_folder_and_environment(queue_repo, tmp_path):
    for name in ("One", "Two"):  # at most one of the two HOMEs is the one the zygote started with
        home = tmp_path / name
        home.mkdir()
        (home / ".gitconfig").write_text(f"[user]\n\tname = {name}\n\temail = {name}@example.com\n")
        env = {k: v for k, v in ENV.items() if not k.startswith("GIT_")} | {"HOME": str(home)}
        done = zygote.run(["add", "--id", name.lower(), "--run", "true", "x"], env=env, cwd=queue_repo)  # no --repo
        assert done.returncode == 0, done.stderr
        # the author comes from this command's HOME, not the environment the zygote started with
        assert git(queue_repo, "log", "-1", "--format=%an", "runner/queue") == name


def test_a_forked_command_over_its_timeout_is_killed(queue_repo):
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run(["worker", "--id", "w1", "--interval", "0.2"], env=ENV, cwd=queue_repo, timeout=2)
    # gone: a worker of the same id is no longer "already running"
    again = zygote.run(["worker", "--id", "w1", "--once"], env=ENV, cwd=queue_repo)
    assert again.returncode == 0, again.stderr


def test_an_interpreter_set_up_otherwise_gets_a_fresh_process(queue_repo, tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.stderr.write('fresh interpreter\\n')\n")
    env = {**ENV, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    done = zygote.run(["--version"], env=env, cwd=queue_repo)
    assert done.returncode == 0 and "fresh interpreter" in done.stderr
