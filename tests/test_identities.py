"""People and workers (issue 12, point 4) over a real git server: sshd on 127.0.0.1 with one
key per host. Each key's line in authorized_keys forces `git-shell` with RUNNER_PUSHER set to
the key's name, as a git host names its users; runner.toml names RUNNER_PUSHER as [hooks]
pusher_env, the people, the admins and which worker ids each worker key may act as. Every
push below goes over ssh from a clone that uses one host's key: the real `runner` command
where one records the event, the queue's own publish otherwise.

Skipped, with the reason, where sshd cannot run here."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.hooked import IDENTITIES, add_steps, cli, clone, hooked_remote, tip
from support.repos import git, queue_moves

from runner.core.config import DEFAULT_TOML
from runner.queue.change import PushRefused
from runner.queue.queue import Queue, author_for
from runner.store import FORCE, RefUpdate, Refused, Won
from runner.store.git import GitStore

PEOPLE = ("alice", "bob")
WORKER_KEYS = {"key-a": ("w1",), "key-b": ("w2",)}
CONFIG = DEFAULT_TOML.replace("detect = true", "detect = false") + IDENTITIES


@dataclass
class SshServer:
    port: int
    user: str
    keys: dict[str, Path]  # pusher -> private key

    def url(self, bare: Path) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{bare}"

    def ssh_command(self, pusher: str) -> str:
        # One connection a key, shared by its pushes (ControlMaster): still that key's own
        # session on the server, without a key exchange a git call.
        shared = self.keys[pusher].with_name(f"cm-{pusher}")
        return (
            f"ssh -i {self.keys[pusher]} -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no "
            f"-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ControlMaster=auto -o ControlPath={shared} "
            "-o ControlPersist=20"
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            return sock.recv(4).startswith(b"SSH-")
    except OSError:
        return False


@pytest.fixture(scope="module")
def ssh_server(tmp_path_factory):
    sshd = shutil.which("sshd") or next(
        (p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if os.path.exists(p)), None
    )
    if not sshd or not shutil.which("ssh") or not shutil.which("ssh-keygen") or not shutil.which("git-shell"):
        pytest.skip(
            "needs sshd, ssh, ssh-keygen and git-shell (Debian: apt-get install openssh-server openssh-client git)"
        )
    folder = tmp_path_factory.mktemp("sshd")
    keys = {}
    for name in ("host", *PEOPLE, *WORKER_KEYS, "carol"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(folder / name)], check=True
        )
        keys[name] = folder / name
    # The server's side of every key: git-shell only, with the pusher's name in RUNNER_PUSHER.
    lines = [
        f'command="env RUNNER_PUSHER={name} git-shell -c \\"$SSH_ORIGINAL_COMMAND\\"",no-port-forwarding,no-pty,'
        f"no-agent-forwarding,no-X11-forwarding {(folder / (name + '.pub')).read_text().strip()}"
        for name in (*PEOPLE, *WORKER_KEYS, "carol")
    ]
    (folder / "authorized_keys").write_text("\n".join(lines) + "\n")
    port = _free_port()
    root = os.geteuid() == 0
    (folder / "sshd_config").write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {folder / 'host'}",
                f"PidFile {folder / 'sshd.pid'}",
                f"AuthorizedKeysFile {folder / 'authorized_keys'}",
                "StrictModes no",
                "UsePAM no",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "LogLevel ERROR",
                "PermitRootLogin forced-commands-only" if root else "",
                "",
            ]
        )
    )
    if root:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder
    test = subprocess.run([sshd, "-t", "-f", str(folder / "sshd_config")], capture_output=True, text=True)
    if test.returncode != 0:
        pytest.skip(f"sshd cannot run here: {test.stderr.strip()}")
    server = subprocess.Popen([sshd, "-D", "-e", "-f", str(folder / "sshd_config")], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 15
    while not _answers(port):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.skip(f"sshd did not start: {server.stderr.read().strip()[:300]}")
        time.sleep(0.05)
    yield SshServer(port, getpass.getuser(), {name: keys[name] for name in (*PEOPLE, *WORKER_KEYS, "carol")})
    server.terminate()
    server.wait(timeout=10)


@pytest.fixture(scope="module")
def served(ssh_server: SshServer, tmp_path_factory) -> Path:
    """A hooked remote set up by its admin (on the server itself): identities in runner.toml,
    steps r1, r2 (need approval), f1, a1, t1, e1."""
    base = tmp_path_factory.mktemp("served")
    bare = hooked_remote(base / "remote.git")
    admin = clone(bare, base / "admin")
    admin.init("alice")
    admin.edit(lambda snap: {"runner.toml": CONFIG.encode()}, "people and worker keys", "alice")
    return bare


@pytest.fixture
def hosts(ssh_server: SshServer, served: Path, tmp_path: Path):
    """A fresh copy of the served remote and, per key, a clone that pushes over ssh with it."""
    bare = tmp_path / "remote.git"
    shutil.copytree(served, bare, symlinks=True)
    clones = {}
    for pusher in ssh_server.keys:
        path = tmp_path / pusher
        git(tmp_path, "init", "-q", str(path))
        git(path, "remote", "add", "origin", ssh_server.url(bare))
        git(path, "config", "core.sshCommand", ssh_server.ssh_command(pusher))
        clones[pusher] = path
    return bare, clones


def run(clones: dict[str, Path], pusher: str, *args: str) -> subprocess.CompletedProcess:
    """The real runner command on `pusher`'s host."""
    return cli(*args, cwd=clones[pusher])


def queue_of(clones: dict[str, Path], pusher: str) -> Queue:
    return Queue(GitStore(clones[pusher]))


def add_plan(clones: dict[str, Path]) -> None:
    add_steps(
        queue_of(clones, "alice"),
        ("r1", {"requires_approval": True}),
        ("r2", {"requires_approval": True}),
        ("f1", {}),
        ("a1", {}),
        ("t1", {}),
        actor="alice",
    )


def refused_over_ssh(done: subprocess.CompletedProcess, reason: str) -> None:
    assert done.returncode != 0, done.stdout
    assert "runner refused" in done.stderr and reason in done.stderr, done.stderr


def test_a_worker_key_cannot_record_person_events_and_a_persons_key_can(hosts):
    bare, clones = hosts
    add_plan(clones)
    # Workers bring the steps where people decide: two results wait for approval, one failed for good.
    for step in ("r1", "r2", "f1"):
        assert run(clones, "key-a", "claim", step, "--id", "w1").returncode == 0
    for step in ("r1", "r2"):
        assert run(clones, "key-a", "complete", step, "--id", "w1").returncode == 0
    assert run(clones, "key-a", "fail", "f1", "--id", "w1", "--permanent", "--reason", "broken").returncode == 0
    # A worker key halts only as its pipeline does, on a verifier fault; any other halt is a person's.
    refused_over_ssh(
        run(clones, "key-b", "halt", "--reason", "deploy freeze", "--by", "w2"), "halt is a person's event"
    )
    assert (
        run(clones, "key-b", "halt", "--reason", "verifier_failed: w2's verifier crashed", "--by", "w2").returncode == 0
    )

    person_events = [
        (("approve", "r1"), "approve is a person's event"),
        (("reject", "r2", "--reason", "needs tests"), "reject is a person's event"),
        (("retry", "f1"), "retry is a person's event"),
        (("abort", "a1", "--reason", "not needed"), "abort is a person's event"),
        (("resume",), "resume is a person's event"),
        (("add", "New step", "--id", "n1", "--run", "true"), "only people edit the plan"),
    ]
    for args, reason in person_events:
        before = tip(bare)
        refused_over_ssh(run(clones, "key-a", *args, "--by", "alice"), reason)
        assert tip(bare) == before
        done = run(clones, "bob", *args, "--by", "bob")
        assert done.returncode == 0, (args, done.stderr)
    plan = queue_of(clones, "bob").snapshot().plan
    assert {s: plan.find(s).status for s in ("r1", "r2", "f1", "a1", "n1")} == {
        "r1": "done",
        "r2": "ready",
        "f1": "ready",
        "a1": "failed",
        "n1": "ready",
    }
    assert not plan.halted


@pytest.mark.parametrize(
    "change",
    [
        ('key-b = ["w2"]', 'key-b = ["w2", "w1"]'),  # a worker key granting itself another worker
        ('people = ["alice", "bob"]', 'people = ["alice", "bob", "dave"]'),
        ('integration_branch = "runner/integration"', 'integration_branch = "main"'),
    ],
)
def test_only_an_admins_key_changes_hooks_or_branch_names(hosts, change):
    bare, clones = hosts
    changed = CONFIG.replace(*change).encode()
    for pusher, reason in (
        ("key-a", "only people edit the plan"),
        ("bob", "only [hooks] admins may change [hooks], [notify] or the branch names"),
    ):
        before = tip(bare)
        with pytest.raises(PushRefused) as info:
            queue_of(clones, pusher).edit(lambda snap: {"runner.toml": changed}, "change runner.toml", pusher)
        assert reason in str(info.value)
        assert tip(bare) == before
    queue_of(clones, "alice").edit(lambda snap: {"runner.toml": changed}, "change runner.toml", "alice")
    assert tip(bare) != before


def test_a_worker_key_acts_only_as_its_own_worker_ids(hosts):
    _bare, clones = hosts
    add_plan(clones)
    refused_over_ssh(
        run(clones, "key-a", "claim", "t1", "--id", "w2"), "pusher 'key-a' may act as w1, not as worker 'w2'"
    )
    assert run(clones, "key-a", "claim", "t1", "--id", "w1").returncode == 0
    refused_over_ssh(
        run(clones, "key-b", "heartbeat", "t1", "--id", "w1"), "pusher 'key-b' may act as w2, not as worker 'w1'"
    )
    refused_over_ssh(
        run(clones, "key-b", "release", "t1", "--id", "w1"), "pusher 'key-b' may act as w2, not as worker 'w1'"
    )
    refused_over_ssh(
        run(clones, "carol", "claim", "a1", "--id", "w1"),
        "pusher 'carol' is neither a worker key in [hooks] identities nor a person",
    )
    stranger = queue_of(clones, "carol").store
    junk = stranger.make_commit([], {"junk.txt": b"x\n"}, "junk\n", author_for("carol"))
    outcome = stranger.publish([RefUpdate("refs/heads/runner/steps/t1", junk, FORCE)])
    assert isinstance(outcome, Refused) and "pusher 'carol' is neither a worker key" in str(outcome)
    assert run(clones, "key-a", "heartbeat", "t1", "--id", "w1").returncode == 0
    assert run(clones, "key-a", "complete", "t1", "--id", "w1").returncode == 0
    assert queue_of(clones, "bob").snapshot().plan.find("t1").status == "done"


def test_a_worker_key_merges_only_through_the_event_that_records_the_merge(hosts):
    bare, clones = hosts
    add_plan(clones)
    done = run(clones, "key-a", "tick", "--id", "w1", "--step", "a1")  # runs a1, merges it, records it: one push
    assert done.returncode == 0, done.stderr
    assert queue_of(clones, "bob").snapshot().plan.find("a1").status == "done"
    merged = tip(bare, "refs/heads/runner/integration")

    sneaky = queue_of(clones, "key-a")
    sneaky.store.fetch(["runner/integration"])
    work = sneaky.store.make_commit(
        [merged], {"backdoor.txt": b"unreviewed\n"}, "merge my own work\n", author_for("w1")
    )
    outcome = sneaky.store.publish([RefUpdate("refs/heads/runner/integration", work, merged)])
    assert isinstance(
        outcome, Refused
    ) and "moves the integration branch only in the push whose queue event records" in str(outcome)
    assert tip(bare, "refs/heads/runner/integration") == merged
    person = queue_of(clones, "alice")  # people merge by hand
    person.store.fetch(["runner/integration"])
    by_hand = person.store.make_commit([merged], {"hotfix.txt": b"reviewed\n"}, "a hotfix\n", author_for("alice"))
    assert isinstance(person.store.publish([RefUpdate("refs/heads/runner/integration", by_hand, merged)]), Won)


def test_a_worker_key_moves_only_the_branch_of_a_step_it_records_in_the_same_push(hosts):
    bare, clones = hosts
    add_plan(clones)
    done = run(clones, "key-a", "tick", "--id", "w1", "--step", "r1")  # its record carries r1's branch: accepted
    assert done.returncode == 0, done.stderr
    kept = tip(bare, "refs/heads/runner/steps/r1")  # kept: it waits for approval, unmerged
    assert kept
    other = queue_of(clones, "key-b").store
    junk = other.make_commit([], {"junk.txt": b"x\n"}, "overwrite r1's change\n", author_for("w2"))
    for new in (junk, None):  # neither overwritten nor deleted by another worker's key
        outcome = other.publish([RefUpdate("refs/heads/runner/steps/r1", new, FORCE)])
        assert isinstance(outcome, Refused) and "only in the push that records that step's outcome" in str(outcome)
    assert tip(bare, "refs/heads/runner/steps/r1") == kept


def test_a_worker_keys_record_and_next_claim_pass_in_one_push_over_ssh(hosts):
    bare, clones = hosts
    add_plan(clones)
    before = len(queue_moves(bare))
    done = cli(
        "worker",
        "--id",
        "w1",
        "--max-ticks",
        "3",
        "--interval",
        "0.2",
        cwd=clones["key-a"],
        env={"RUNNER_FETCH_AT_LEAST_EVERY": "3600"},
    )  # claims ahead however slow the machine's ticks are
    assert done.returncode == 0, done.stderr
    # a1, then f1 claimed in the push that recorded a1, r1 in the one that recorded f1;
    # the last tick claims nothing ahead.
    assert queue_moves(bare)[before:] == ["claim a1", "claim f1", "claim r1", "complete r1"]
    steps = queue_of(clones, "bob").snapshot().plan.steps
    assert {step: steps[step].status for step in ("a1", "f1", "r1", "r2", "t1")} == {
        "a1": "done",
        "f1": "done",
        "r1": "review",
        "r2": "ready",
        "t1": "ready",
    }


def test_a_strangers_ref_that_would_block_runners_refs_is_refused_for_that_before_any_identity_check(hosts):
    """Attack 10 (issue 48): a stranger's key pushes refs/heads/runner/steps over ssh; the hook must
    refuse it as a clash with runner's refs, with that reason, whoever pushes."""
    bare, clones = hosts
    stranger = queue_of(clones, "carol").store
    junk = stranger.make_commit([], {"junk.txt": b"x\n"}, "block the step branches\n", author_for("carol"))
    outcome = stranger.publish([RefUpdate("refs/heads/runner/steps", junk, FORCE)])
    assert isinstance(outcome, Refused), outcome
    said = str(outcome)
    assert "refs/heads/runner/steps: named like a folder of runner's refs" in said, said
    assert "carol" not in said and "hook failed" not in said  # judged as a clash, not as who pushed
    assert tip(bare, "refs/heads/runner/steps") is None
