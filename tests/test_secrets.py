"""Nothing a step prints leaks (issue 44): the scrubber (runner.core.secrets) on its own, the
server hook's push protection, and a whole pipeline whose every role prints a token and a secret
variable's value over a real bare remote, after which no object of the remote and nothing another
clone prints holds either.

Every token here is made at test time (random, in the shape of the real thing), so no file of
this repository looks like a credential to runner's own push protection or a forge's."""

from __future__ import annotations

import base64
import json
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest

from runner.core import secrets
from runner.core.limits import CLIP_MARKER, clip
from runner.core.secrets import Scrubber, secret_values
from runner.core.shapes import shapes

RANDOM = random.Random()


def rand(size: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(RANDOM.choice(alphabet) for _ in range(size))


def b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def fake_tokens() -> dict[str, str]:
    """One made-up credential of every kind issue 44 names, each in its vendor's shape."""
    lower = string.ascii_lowercase + string.digits
    return {
        "GitHub Token": "ghp_" + rand(36),
        "GitLab Token": "glpat-" + rand(20),
        "AWS Access Key": "AKIA" + rand(16, string.ascii_uppercase + string.digits),
        "OpenAI Token": "sk-" + rand(20) + "T3BlbkFJ" + rand(20),
        "Anthropic Key": "sk-ant-api03-" + rand(90),
        "Google API Key": "AIza" + rand(35),
        "Slack Token": "xoxb-" + rand(11, string.digits) + "-" + rand(24, lower),
        "Stripe Access Key": "sk_live_" + rand(24),
        "JSON Web Token": b64({"alg": "HS256", "typ": "JWT"}) + "." + b64({"sub": rand(8)}) + "." + rand(43),
        "Private Key": "-----BEGIN RSA PRIVATE KEY-----\n"
        + "\n".join(rand(64) for _ in range(4))
        + "\n-----END RSA PRIVATE KEY-----",
        "Basic Auth Credentials": "https://deploy:" + rand(16) + "@git.example.com/repo.git",
    }


def scrubber(environ: dict[str, str] | None = None, names=(), allow=()) -> Scrubber:
    return Scrubber(secret_values(environ or {}, names), allow, shapes())


# --- the scrubber ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(fake_tokens()))
def test_every_token_shape_the_issue_names_is_redacted_whole(kind):
    token = fake_tokens()[kind]
    said = scrubber().scrub(f"before {token} after\n")
    assert said.startswith("before ") and said.endswith(" after\n") and f"[redacted: {kind}]" in said, said
    secret = token.split(":")[-1].split("@")[0] if kind == "Basic Auth Credentials" else token
    for piece in secret.splitlines():
        if "PRIVATE KEY" not in piece:
            assert piece not in said


def test_secret_variables_are_the_named_and_the_secret_looking_ones_of_eight_characters_or_more():
    environ = {
        "DEPLOY_TOKEN": "d" * 12,
        "MY_API_KEY": "a" * 10,
        "SIGNING_KEY": "s" * 9,
        "DB_PASSWORD": "p" * 8,
        "CLIENT_SECRET": "c" * 20,
        "OWN_NAME": "o" * 10,
        "PATH": "/usr/bin:/bin",
        "SHORT_TOKEN": "1234567",
        "TOKENIZERS_PARALLELISM": "false",
        "DATABASE_URL": "postgres://app:" + "w" * 11 + "@db/app",
    }
    found = secret_values(environ, ["OWN_NAME"])
    assert found == {
        "d" * 12: "DEPLOY_TOKEN",
        "a" * 10: "MY_API_KEY",
        "s" * 9: "SIGNING_KEY",
        "p" * 8: "DB_PASSWORD",
        "c" * 20: "CLIENT_SECRET",
        "o" * 10: "OWN_NAME",
        "w" * 11: "DATABASE_URL",
    }


def test_a_secret_value_is_redacted_raw_and_in_the_encodings_output_uses():
    value = 'v@l"ue/' + rand(16)
    scrub = scrubber({"DEPLOY_TOKEN": value}).scrub
    from urllib.parse import quote

    for printed in (
        value,
        json.dumps(value)[1:-1],
        quote(value, safe=""),
        base64.b64encode(value.encode()).decode(),
        base64.b64encode(b"user:" + value.encode()).decode(),
    ):
        said = scrub(f"x {printed} y")
        assert "[redacted: DEPLOY_TOKEN]" in said, printed
        assert value not in said


def test_a_tail_that_starts_inside_a_secret_loses_the_piece_and_only_it():
    value = rand(24)
    token = fake_tokens()["GitHub Token"]
    scrub = scrubber({"DEPLOY_TOKEN": value}).scrub
    assert scrub(value[9:] + " then more\n", cut_start=True) == "[redacted: cut] then more\n"
    assert scrub(token[15:] + " then more\n", cut_start=True) == "[redacted: cut] then more\n"
    assert scrub("plain words then more\n", cut_start=True) == "plain words then more\n"
    assert scrub(value[9:] + " then more\n") == value[9:] + " then more\n"  # not cut: not a piece


def test_a_text_clipped_in_the_middle_of_a_secret_keeps_no_piece_of_it():
    value, token = rand(30), fake_tokens()["GitHub Token"]
    scrub = scrubber({"DEPLOY_TOKEN": value}).scrub
    for secret in (value, token):
        text = "a " * 3000 + secret + " b" * 3000
        clipped = clip(text, 4096)
        cut = len(text.encode()) - len(clipped.encode()) + len(CLIP_MARKER.format(cut=0))
        for shift in range(-40, 41, 7):  # the cut falls inside the secret at its either end
            text = "a " * (1000 + shift) + secret + " " + "b" * 3000
            said = scrub(clip(text, 4096))
            assert not any(secret[i : i + 6] in said for i in range(len(secret) - 6)), (shift, said)
        assert cut


def test_short_and_allowed_values_are_left_alone():
    allowed = fake_tokens()["AWS Access Key"]
    scrub = scrubber({"FLAG_TOKEN": "true", "PORT_SECRET": "1"}, allow=[allowed]).scrub
    text = f"true 1 enabled {allowed}\n"
    assert scrub(text) == text


def test_the_process_scrubber_follows_the_environment_and_the_secrets_table(monkeypatch):
    from runner.core.config import parse_config

    monkeypatch.setenv("WEIRD_NAME", "w" * 12)
    section = parse_config('[secrets]\nenv = ["WEIRD_NAME"]\n').secrets
    assert secrets.for_config(section).scrub("w" * 12) == "[redacted: WEIRD_NAME]"
    monkeypatch.setenv("WEIRD_NAME", "z" * 12)
    assert secrets.for_config().scrub("z" * 12) == "[redacted: WEIRD_NAME]"  # the last section asked for


# --- push protection in the server hook --------------------------------------------------------

from support.hooked import accepted, claim, push_commit, refused

from runner.core.codec import encode_beat
from runner.core.layout import EMPTY_TREE, handoff_path, heartbeat_ref
from runner.core.machine import Event, Kind
from runner.core.model import utc_now
from runner.queue.leases import author_for
from runner.store import RefUpdate

STEP = '---\nstep: 09-new\ntitle: New\nrun: ["true"]\n---\nDeploy with {} please.\n'


def test_the_hook_refuses_a_token_in_a_step_file_and_says_where(remote, queue):
    token = fake_tokens()["GitHub Token"]
    said = refused(
        remote,
        lambda: push_commit(queue, {"plans/steps/09-new.md": STEP.format(token).encode()}, "add 09"),
        "plans/steps/09-new.md line 6 holds a GitHub Token (push protection)",
    )
    assert token not in said
    accepted(push_commit(queue, {"plans/steps/09-new.md": STEP.format("[redacted: GitHub Token]").encode()}, "add 09"))


def test_the_hook_refuses_a_token_in_a_handoff(remote, queue):
    token = fake_tokens()["Slack Token"]
    claim(queue, "w1", "04-d")

    def fail_with_handoff():
        def build(snap):
            event = Event(Kind.FAIL, "w1", utc_now(), step="04-d", attempt=1, incarnation="w1.test", reason="it broke")
            change = queue.step_change(snap, event, b"# Handoff\n\nscrubbed by the client\n")
            path = handoff_path(snap.plan.find("04-d").path)
            change.files[path] = f"# Handoff\n\nthe log said {token}\n".encode()  # a client without the scrubber
            return change

        return queue.publish(build, "w1")

    said = refused(remote, fail_with_handoff, "plans/handoffs/04-d.md line 3 holds a Slack Token")
    assert token not in said


def test_the_hook_refuses_a_token_in_a_commit_message(remote, queue):
    token = fake_tokens()["Anthropic Key"]
    said = refused(
        remote,
        lambda: push_commit(
            queue, {"plans/steps/09-new.md": STEP.format("x").encode()}, f"add 09\n\nthe key is {token}\n"
        ),
        "its message, line 3, holds a Anthropic Key",
    )
    assert token not in said


def test_the_hook_refuses_a_token_in_a_heartbeat(remote, queue):
    token = fake_tokens()["AWS Access Key"]
    previous = queue.store.heartbeat("w1")
    beat = encode_beat("w1", {"state": "running", "output": f"uploading with {token}\n", "output_bytes": 30})
    commit = queue.store.make_commit([previous] if previous else [], {}, beat, author_for("w1"), base_tree=EMPTY_TREE)
    said = refused(
        remote,
        lambda: queue.store.publish([RefUpdate(heartbeat_ref("w1"), commit, previous)]),
        "refs/runner/heartbeats/w1",
        "holds a AWS Access Key",
        ref=heartbeat_ref("w1"),
    )
    assert token not in said


def test_the_allow_list_lets_a_known_false_positive_through(remote, queue):
    token = fake_tokens()["Google API Key"]
    toml = queue.store.file_at(queue.snapshot().tip, "runner.toml").decode()
    toml = toml.replace("allow = []", f'allow = ["{token}"]')
    refused(
        remote,
        lambda: push_commit(queue, {"plans/steps/09-new.md": STEP.format(token).encode()}, "add 09"),
        "holds a Google API Key",
    )
    accepted(push_commit(queue, {"runner.toml": toml.encode()}, "a documented example key"))
    accepted(push_commit(queue, {"plans/steps/09-new.md": STEP.format(token).encode()}, "add 09"))


# --- the whole pipeline over a real remote: nothing leaks ------------------------------------

LEAKY = """
import json, os, sys, time
role, args = sys.argv[1], sys.argv[2:]
secret, token = os.environ["DEPLOY_TOKEN"], os.environ["LEAK_SHAPE"]
said = f"{role} saw DEPLOY_TOKEN={secret} and {token}"
print(said, file=sys.stderr, flush=True)
if role in ("verify", "verify-fail"):
    print(json.dumps({"pass": role == "verify", "score": 0.9 if role == "verify" else 0.1,
                      "reasons": [said], "next_hint": f"try {token}"}))
    sys.exit(0)
print(said, flush=True)
if role == "implement":
    notes, release = args
    with open(notes, "a") as handle:
        handle.write(f"the deploy key is {secret}, the token {token}\\n")
    with open("out.txt", "a") as handle:
        handle.write("work\\n")
    while release != "-" and not os.path.exists(release):
        time.sleep(0.05)  # until the test saw this output on another clone (the heartbeat's)
    print(f"printed after the heartbeat: {secret} {token}", file=sys.stderr, flush=True)
if role == "crash":
    print(f"Error: could not deploy with {secret} / {token}", file=sys.stderr)
    sys.exit(1)
if role == "env-file":
    with open(".env", "w") as handle:
        handle.write(f"# the deploy\\nGITHUB_TOKEN={token}\\n")
"""


def leaky_remote(tmp_path: Path, monkeypatch, steps, extra: str = "") -> tuple[Path, Path, Path]:
    """A remote under the hook with identities whose every role is the leaky stub; (remote, alice's
    clone, the file notices are written to)."""
    from support.review import review_remote

    monkeypatch.setenv("RUNNER_PUSHER", "alice")
    stub = tmp_path / "leaky.py"
    stub.write_text(LEAKY)
    notices = tmp_path / "notices.txt"

    def command(role: str, *more: str) -> str:
        return json.dumps([sys.executable, str(stub), role, *more])

    roles = "".join(
        f"\n[roles.{role}]\ncommand = {command(role)}\n" for role in ("orient", "verify", "sweep", "orchestrate")
    )
    roles += f"\n[roles.review]\ncommand = {command('review')}\nmin_files = 0\n"
    notify = [sys.executable, "-c", f"import sys; open({str(notices)!r}, 'a').write(sys.argv[1] + '\\n')", "{message}"]
    bare, laptop = review_remote(tmp_path, steps, notify=notify, extra_toml=roles + extra)
    return bare, laptop, stub


def every_object(bare: Path) -> bytes:
    return subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch"], cwd=bare, capture_output=True, check=True
    ).stdout


@pytest.fixture(scope="module")
def leaked(tmp_path_factory) -> dict:
    """One drain (a hooked remote with identities and every role a process: seconds of CPU) of
    four steps whose every role prints a token and a secret variable's value: 01-all passes (its
    output is read live on alice's clone first), 02-fails fails its verifier, 03-crashes crashes,
    04-env adds a token to a file of its result. What the remote holds and alice's clone prints."""
    from support.repos import ENV_PATH, runner, runner_json, wait_for
    from support.review import worker_clone

    tmp_path = tmp_path_factory.mktemp("leaked")
    secret, token = rand(24), fake_tokens()["GitHub Token"]
    release = tmp_path / "release"
    stub = tmp_path / "leaky.py"
    check = f"#### Automated Verification:\n- [ ] leaks too: `{sys.executable} {stub} gate`\n"
    steps = (
        (
            "01-all",
            {
                "run": [sys.executable, str(stub), "implement", "{notes_file}", str(release)],
                "body": check,
                "max_attempts": 1,
            },
        ),
        (
            "02-fails",
            {
                "run": [sys.executable, str(stub), "implement", "{notes_file}", "-"],
                "max_attempts": 1,
                "roles": {"verify": {"command": [sys.executable, str(stub), "verify-fail"]}},
                "brakes": {"max_fix_attempts": 0},
            },
        ),
        ("03-crashes", {"run": [sys.executable, str(stub), "crash"], "max_attempts": 1}),
        ("04-env", {"run": [sys.executable, str(stub), "env-file"]}),
    )
    with pytest.MonkeyPatch.context() as monkeypatch:
        bare, laptop, _ = leaky_remote(tmp_path, monkeypatch, steps)
        host = worker_clone(bare, tmp_path / "host-a")
        env = {**ENV_PATH, "RUNNER_PUSHER": "key-a", "RUNNER_NOTIFY": "1", "DEPLOY_TOKEN": secret, "LEAK_SHAPE": token}
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runner",
                "worker",
                "--id",
                "w1",
                "--once",
                "--interval",
                "0.2",
                "--repo",
                str(host),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            # The running step's output reaches alice's clone on a heartbeat, scrubbed.
            def scrubbed_twice():
                seen = runner_json(laptop, "logs", "01-all")
                return (seen.get("output") or "").count("[redacted") >= 2 and seen

            live = wait_for(scrubbed_twice, every=1)
            release.write_text("go")
            out, err = worker.communicate(timeout=300)
        finally:
            release.write_text("go")
            if worker.poll() is None:
                worker.kill()
        shown = {step: runner_json(laptop, "show", step) for step in STEPS}
        printed = [
            done.stdout + done.stderr
            for done in (
                runner(laptop, *command)
                for command in (
                    ["status"],
                    ["status", "--json"],
                    ["log"],
                    ["log", "--json"],
                    *[
                        [what, step, *more]
                        for step in STEPS
                        for what in ("show", "log", "logs")
                        for more in ([], ["--json"])
                    ],
                )
            )
        ]
        notices = wait_for(lambda: (tmp_path / "notices.txt").exists() and (tmp_path / "notices.txt").read_text())
        branches = subprocess.run(["git", "branch", "--list"], cwd=bare, capture_output=True, text=True).stdout
        step_file = subprocess.run(
            ["git", "show", f"runner/queue:{shown['04-env']['path']}"], cwd=bare, capture_output=True, text=True
        ).stdout
    return {
        "secret": secret,
        "token": token,
        "live": live,
        "worker": (worker.returncode, out + err),
        "shown": shown,
        "objects": every_object(bare),
        "printed": printed,
        "notices": notices,
        "branches": branches,
        "step_file": step_file,
    }


STEPS = ("01-all", "02-fails", "03-crashes", "04-env")


def test_nothing_a_step_and_its_roles_print_reaches_the_remote_or_another_clone(leaked):
    secret, token, shown, objects = leaked["secret"], leaked["token"], leaked["shown"], leaked["objects"]
    live = leaked["live"]
    assert "[redacted: DEPLOY_TOKEN]" in live["output"] and "[redacted: GitHub Token]" in live["output"]
    code, said = leaked["worker"]
    assert code == 0, said
    assert "refused" not in said
    seen = {step: shown[step]["status"] for step in STEPS}
    assert seen == {"01-all": "done", "02-fails": "failed", "03-crashes": "failed", "04-env": "review"}, said
    for piece in (secret, token, token[4:20], secret[4:12]):
        assert piece.encode() not in objects
        assert not [text for text in leaked["printed"] if piece in text]
        assert piece not in leaked["notices"]
    # ...and what was said was kept, redacted: the verdict, the fault, the notes, the handoff.
    assert b"[redacted: DEPLOY_TOKEN]" in objects and b"[redacted: GitHub Token]" in objects
    fault = shown["03-crashes"]["last_error"]
    assert (
        "exit code 1: " in fault
        and "Error: could not deploy with [redacted: DEPLOY_TOKEN] / [redacted: GitHub Token]" in fault
    )
    assert "verify-fail saw DEPLOY_TOKEN=[redacted: DEPLOY_TOKEN]" in shown["02-fails"]["last_error"]


def test_a_result_that_adds_a_token_is_held_for_a_person_and_never_published(leaked):
    code, said = leaked["worker"]
    assert code == 0 and said.count("STEP_BLOCKED") == 1 and "Step: 04-env" in said, said
    shown = leaked["shown"]["04-env"]
    assert shown["status"] == "review"
    assert "review: blocked" in leaked["step_file"]
    assert "the result adds a secret in .env line 2 (GitHub Token); it was not published" in shown["last_error"]
    assert leaked["token"].encode() not in leaked["objects"]
    assert "runner/steps/04-env" not in leaked["branches"]


def test_a_heartbeats_tail_that_starts_inside_a_secret_carries_no_piece_of_it(tmp_path, monkeypatch):
    from runner.core.limits import MAX_LOG_TAIL_BYTES
    from runner.worker.livelog import LiveOutput

    value = rand(30)
    monkeypatch.setenv("DEPLOY_TOKEN", value)
    secrets.for_config(None)
    token = fake_tokens()["GitHub Token"]
    for secret in (value, token):
        for inside in (5, 12, 20):  # where the 16 KiB window starts, inside the secret (6 characters or more left)
            log = tmp_path / f"step-{inside}.log"
            rest = MAX_LOG_TAIL_BYTES - (len(secret) - inside)
            log.write_text("no line break at all " * 10 + secret + "b" * rest)  # one long line
            output = LiveOutput(log).facts()["output"]
            assert output.startswith("[redacted: cut]") and output.endswith("b" * 100), output[:80]
            assert not any(secret[i : i + 6] in output for i in range(len(secret) - 6))
    log = tmp_path / "lines.log"
    log.write_text("x" * 200 + token + "\n" + "a line\n" * (MAX_LOG_TAIL_BYTES // 7))
    assert LiveOutput(log).facts()["output"].startswith("a line\n")  # a tail starts at a line when it can
