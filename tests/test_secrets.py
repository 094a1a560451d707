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
        "Private Key": "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(rand(64) for _ in range(4))
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
    environ = {"DEPLOY_TOKEN": "d" * 12, "MY_API_KEY": "a" * 10, "SIGNING_KEY": "s" * 9, "DB_PASSWORD": "p" * 8,
               "CLIENT_SECRET": "c" * 20, "OWN_NAME": "o" * 10, "PATH": "/usr/bin:/bin", "SHORT_TOKEN": "1234567",
               "TOKENIZERS_PARALLELISM": "false", "DATABASE_URL": "postgres://app:" + "w" * 11 + "@db/app"}
    found = secret_values(environ, ["OWN_NAME"])
    assert found == {"d" * 12: "DEPLOY_TOKEN", "a" * 10: "MY_API_KEY", "s" * 9: "SIGNING_KEY", "p" * 8: "DB_PASSWORD",
                     "c" * 20: "CLIENT_SECRET", "o" * 10: "OWN_NAME", "w" * 11: "DATABASE_URL"}


def test_a_secret_value_is_redacted_raw_and_in_the_encodings_output_uses():
    value = 'v@l"ue/' + rand(16)
    scrub = scrubber({"DEPLOY_TOKEN": value}).scrub
    from urllib.parse import quote

    for printed in (value, json.dumps(value)[1:-1], quote(value, safe=""), base64.b64encode(value.encode()).decode(),
                    base64.b64encode(b"user:" + value.encode()).decode()):
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
            assert not any(secret[i:i + 6] in said for i in range(len(secret) - 6)), (shift, said)
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

from hooked import accepted, claim, push_commit, queue, refused, remote, template  # noqa: E402,F401 (fixtures)
from runner.core.codec import encode_beat  # noqa: E402
from runner.core.layout import EMPTY_TREE, handoff_path, heartbeat_ref  # noqa: E402
from runner.core.machine import Event, Kind  # noqa: E402
from runner.core.model import utc_now  # noqa: E402
from runner.queue.leases import author_for  # noqa: E402
from runner.store import RefUpdate  # noqa: E402

STEP = "---\nstep: 09-new\ntitle: New\nrun: [\"true\"]\n---\nDeploy with {} please.\n"


def test_the_hook_refuses_a_token_in_a_step_file_and_says_where(remote, queue):
    token = fake_tokens()["GitHub Token"]
    said = refused(remote, lambda: push_commit(queue, {"plans/steps/09-new.md": STEP.format(token).encode()}, "add 09"),
                   "plans/steps/09-new.md line 6 holds a GitHub Token (push protection)")
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
    said = refused(remote, lambda: push_commit(queue, {"plans/steps/09-new.md": STEP.format("x").encode()},
                                               f"add 09\n\nthe key is {token}\n"),
                   "its message, line 3, holds a Anthropic Key")
    assert token not in said


def test_the_hook_refuses_a_token_in_a_heartbeat(remote, queue):
    token = fake_tokens()["AWS Access Key"]
    previous = queue.store.heartbeat("w1")
    beat = encode_beat("w1", {"state": "running", "output": f"uploading with {token}\n", "output_bytes": 30})
    commit = queue.store.make_commit([previous] if previous else [], {}, beat, author_for("w1"),
                                     base_tree=EMPTY_TREE)
    said = refused(remote, lambda: queue.store.publish([RefUpdate(heartbeat_ref("w1"), commit, previous)]),
                   "refs/runner/heartbeats/w1", "holds a AWS Access Key", ref=heartbeat_ref("w1"))
    assert token not in said


def test_the_allow_list_lets_a_known_false_positive_through(remote, queue):
    token = fake_tokens()["Google API Key"]
    toml = queue.store.file_at(queue.snapshot().tip, "runner.toml").decode()
    toml = toml.replace("allow = []", f'allow = ["{token}"]')
    refused(remote, lambda: push_commit(queue, {"plans/steps/09-new.md": STEP.format(token).encode()}, "add 09"),
            "holds a Google API Key")
    accepted(push_commit(queue, {"runner.toml": toml.encode()}, "a documented example key"))
    accepted(push_commit(queue, {"plans/steps/09-new.md": STEP.format(token).encode()}, "add 09"))
