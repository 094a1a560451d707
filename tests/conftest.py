"""Fixtures: real git repositories in temp dirs, real runner processes (helpers: tests/support/)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from support import zygote
from support.repos import make_repo, runner, set_config

# Fixtures the tests take as parameters, registered here so no test has to import a name it never
# calls (a linter's unused-import fix removed those imports once and 66 tests lost their setup).
pytest_plugins = ("support.hooked", "support.agentplan")


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: three test processes a core. Most of a test's time is spent waiting on the
    processes it starts (git, runner, sshd, a browser), so one a core leaves the cores idle
    (measured on 2 cores: 5m53s with 2, 4m04s with 4, 3m53s with 6, the cores then busy)."""
    return min(3 * (os.cpu_count() or 1), 8)


@pytest.fixture(autouse=True, scope="session")
def private_cache(tmp_path_factory) -> None:
    """runner keeps its help in the user's cache folder: tests keep theirs to themselves."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))


@pytest.fixture(autouse=True, scope="session")
def forked_commands():
    """The zygote that forks the tests' `runner` commands (support.zygote) ends with its test process."""
    yield
    zygote.stop()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture(scope="session")
def initialised(tmp_path_factory) -> Path:
    """One repository per test process after `runner init` and gates detection off: queue_repo
    copies its .git (a `runner init` process for each of ~200 tests was a tenth of the suite's CPU)."""
    path = make_repo(tmp_path_factory.mktemp("initialised") / "repo")
    runner(path, "init")
    set_config(path, detect=False)
    return path


@pytest.fixture
def queue_repo(repo: Path, initialised: Path) -> Path:
    """A local repository (no remote) with an initialised queue, gates detection off."""
    shutil.rmtree(repo / ".git")
    shutil.copytree(initialised / ".git", repo / ".git", symlinks=True)
    return repo
