"""runner.agents: role prompts, agent presets, apply_preset, the example's fake agent, and
(with RUNNER_AGENT_TESTS=1) every preset's flags against the real CLI's own --help."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from runner.agents import (
    KNOWN_TOKENS,
    PRESET_NAMES,
    ROLE_NAMES,
    apply_preset,
    preset_tables,
    presets,
    render,
    role_prompt,
)

ROOT = Path(__file__).resolve().parents[1]
FAKE_AGENT = ROOT / "examples" / "agent-plan" / "fake-agent"
TOKEN = re.compile(r"\{([a-z_]+)\}")


# ---- role prompts ---------------------------------------------------------------------------
CONTRACT = {
    "orient": ["deviation: none", "deviation: major: "],
    "implement": ["STEP_BLOCKED: ", "STEP_FAILED: ", "{notes_file}", "{output}"],
    "verify": ['"pass"', '"score"', '"reasons"', '"next_hint"', "{diff_file}", "{artifact}"],
    "review": ["CRITICAL", "{diff_file}"],
    "sweep": ["edge case", "{diff_file}"],
    "orchestrate": ["runner add", "{verdict}", "{current_task}", "{current_phase}"],
    "resolve": ["<<<<<<<", ">>>>>>>", "conflict marker", "{output}"],
    "qa": ['"pass"', '"score"', '"reasons"', '"next_hint"', "QA scenario", "changes the step's files"],
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_role_prompt_states_boundaries_and_output_contract(role):
    text = role_prompt(role)
    assert text.startswith(f"# Role: {role}\n")
    for heading in ("## You may", "## You must never", "## Output contract"):
        assert heading in text, f"{role}: no {heading!r} section"
    for phrase in CONTRACT[role]:
        assert phrase in text, f"{role}: does not say {phrase!r}"
    never = text.split("## You must never", 1)[1].split("##", 1)[0]
    assert "approve" in never, f"{role}: does not forbid approving"
    assert {m for m in TOKEN.findall(text)} <= set(KNOWN_TOKENS), f"{role}: unknown token"


@pytest.mark.parametrize("role", ["orient", "review", "verify", "sweep"])
def test_read_only_roles_never_write(role):
    never = role_prompt(role).split("## You must never", 1)[1].split("##", 1)[0]
    assert re.search(r"(create|edit).*(file)", never, re.IGNORECASE | re.DOTALL)


def test_verify_prompt_example_is_a_valid_verdict():
    block = re.search(r"```json\n(.*?)\n```", role_prompt("verify"), re.DOTALL).group(1)
    verdict = json.loads(block)
    assert isinstance(verdict["pass"], bool) and 0.0 <= verdict["score"] <= 1.0


def test_unknown_role_and_render():
    with pytest.raises(ValueError):
        role_prompt("approve")
    assert render("step {step} in {cwd}, {unknown}", {"step": "01-a", "cwd": "/w"}) == "step 01-a in /w, {unknown}"


# ---- presets ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", PRESET_NAMES)
def test_preset_is_toml_with_every_table_and_known_tokens(name):
    data = tomllib.loads(preset_tables(name))
    assert set(data) == {"harness", "roles"}
    assert set(data["roles"]) == {"orient", "verify", "review", "sweep", "orchestrate", "resolve", "qa"}
    assert data["roles"]["review"]["min_files"] == 5 and data["roles"]["review"]["boundaries"] == []
    for table in [data["harness"], *data["roles"].values()]:
        command = table["command"]
        assert isinstance(command, list) and all(isinstance(word, str) for word in command)
        for word in command:
            assert set(TOKEN.findall(word)) <= set(KNOWN_TOKENS), f"{name}: unknown token in {word!r}"
    if name != "none":
        implement = data["harness"]["command"]
        assert implement and any(t in " ".join(implement) for t in ("{prompt}", "{prompt_file}"))


@pytest.mark.parametrize("name", [n for n in PRESET_NAMES if n != "none"])
def test_every_flag_has_a_comment_and_read_only_roles_are_restricted(name):
    text = preset_tables(name)
    for line in text.splitlines():
        if line.startswith('    "'):
            assert "  # " in line, f"{name}: an argv line without a comment: {line!r}"
    data = tomllib.loads(text)
    read_only = {
        "claude": "Read,Grep,Glob",
        "codex": "read-only",
        "gemini": "plan",
        "opencode": "plan",
        "aider": "ask",
    }[name]
    for role in ("orient", "review"):
        assert read_only in data["roles"][role]["command"], f"{name}: {role} is not read-only"
    assert read_only not in data["harness"]["command"]


def test_unknown_preset():
    with pytest.raises(ValueError, match="one of: claude"):
        preset_tables("copilot")


# ---- apply_preset keeps every other byte ---------------------------------------------------------
BEFORE = """\
# my project's runner config: keep this comment

[queue]
integration_branch = "main"   # we merge into main
"""
OLD_HARNESS = """\
# the old harness, hand-written
[harness]
command = ["old-agent", "{prompt_file}"]   # it was fine

"""
MIDDLE = """\
[gates]
verifier = []
notes = \"\"\"
[harness]
command = ["not a table: inside a string"]
\"\"\"
matrix = [
  ["a"]
]

"""
OLD_ROLES = """\
[roles.review]
command = ["old-reviewer"]
min_files = 2
boundaries = ["api/", "migrations/"]

# orient, by hand
[roles.orient]
command = ["old-orient"]

"""
AFTER = """\
[worker]
grace_period = "30s"
# a trailing comment, no newline at the end"""


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_apply_preset_replaces_only_harness_and_roles(name):
    original = BEFORE + OLD_HARNESS + MIDDLE + OLD_ROLES + AFTER
    result = apply_preset(original, name)
    block = preset_tables(name, min_files=2, boundaries=["api/", "migrations/"])
    assert result == BEFORE + block + "\n" + MIDDLE + AFTER
    before, after = tomllib.loads(original), tomllib.loads(result)
    assert {k: v for k, v in after.items() if k not in ("harness", "roles")} == {
        k: v for k, v in before.items() if k not in ("harness", "roles")
    }
    assert after["roles"]["review"]["boundaries"] == ["api/", "migrations/"]
    assert apply_preset(result, name) == result  # idempotent
    assert apply_preset(apply_preset(original, "codex"), name) == result  # switching presets


def test_apply_preset_appends_when_there_are_no_such_tables():
    original = BEFORE + MIDDLE + AFTER
    result = apply_preset(original, "claude")
    assert result.startswith(original)
    assert result == original + "\n\n" + preset_tables("claude")


def test_apply_preset_on_runner_init_default_and_crlf():
    config = pytest.importorskip("runner.core.config")
    result = apply_preset(config.DEFAULT_TOML, "gemini")
    before, after = tomllib.loads(config.DEFAULT_TOML), tomllib.loads(result)
    assert after["harness"]["command"][0] == "gemini" and after["roles"]["verify"]["command"][0] == "gemini"
    assert {k: v for k, v in after.items() if k not in ("harness", "roles")} == {
        k: v for k, v in before.items() if k not in ("harness", "roles")
    }
    crlf = (BEFORE + OLD_HARNESS + AFTER).replace("\n", "\r\n")
    out = apply_preset(crlf, "aider")
    assert out.startswith(BEFORE.replace("\n", "\r\n")) and out.endswith(AFTER.replace("\n", "\r\n"))
    assert "\n" not in out.replace("\r\n", "")


def test_apply_preset_refuses_a_result_that_does_not_parse():
    with pytest.raises(ValueError, match="would not parse"):
        apply_preset('harness.command = ["x"]\n', "claude")


# ---- the flag check, with a fake --help ------------------------------------------------------------
def test_missing_from_help_names_each_missing_flag_and_choice():
    helps = {
        ("codex", "exec", "--help"): "--cd <DIR>  -s, --sandbox [read-only, workspace-write]  --ephemeral --color never"
    }
    missing = presets.missing_from_help("codex", lambda argv: helps[tuple(argv)])
    assert "codex exec --help: --output-last-message" in missing
    assert "codex exec --help: danger-full-access" in missing
    assert not any(m.endswith((": --cd", ": --sandbox")) for m in missing)
    assert presets.missing_from_help("none", lambda argv: "") == []


# ---- the example's fake agent ----------------------------------------------------------------------
def _fake(role: str, cwd: Path, prompt: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(FAKE_AGENT), role, "--prompt-file", str(prompt), *extra],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RUNNER_STEP": "01-count"},
    )


def test_fake_agent_does_each_role(tmp_path):
    worktree = tmp_path / "wt"
    worktree.mkdir()
    step = (ROOT / "examples" / "agent-plan" / "steps" / "01-count.md").read_text()
    prompt = tmp_path / "prompt.md"
    prompt.write_text(role_prompt("implement") + "\n" + step)
    assert "deviation: none" in _fake("orient", worktree, prompt).stdout.splitlines()[-1]
    verdict = json.loads(_fake("verify", worktree, prompt).stdout.splitlines()[-1])
    assert verdict["pass"] is False and verdict["score"] == 0.0
    notes, output = tmp_path / "notes", tmp_path / "out.md"
    done = _fake("implement", worktree, prompt, "--notes", str(notes), "--output", str(output))
    assert done.returncode == 0 and (worktree / "tally" / "count.py").is_file()
    assert "01-count wrote" in notes.read_text() and "Implemented 01-count" in output.read_text()
    assert json.loads(_fake("verify", worktree, prompt).stdout.splitlines()[-1]) == {
        "pass": True,
        "score": 1.0,
        "reasons": ["2 file(s) as the step says"],
        "next_hint": "",
    }
    assert "No critical findings." in _fake("review", worktree, prompt).stdout
    (worktree / "tally" / "count.py").write_text("def broken(:\n")
    assert re.search(r"^CRITICAL tally/count.py:1", _fake("review", worktree, prompt).stdout, re.MULTILINE)
    assert _fake("orchestrate", worktree, prompt).stdout.startswith("no plan change")
    nothing = tmp_path / "empty.md"
    nothing.write_text("step: 01-count\nno files here\n")
    assert _fake("implement", worktree, nothing).stdout.splitlines()[-1].startswith("STEP_BLOCKED: ")


def test_agent_plan_is_a_sound_three_step_plan():
    import yaml

    folder = ROOT / "examples" / "agent-plan"
    assert (folder / "root.md").is_file() and (folder / "NOTES.md").is_file() and os.access(FAKE_AGENT, os.X_OK)
    steps = {}
    for path in sorted((folder / "steps").glob("*.md")):
        text = path.read_text()
        meta = yaml.safe_load(text.split("---\n")[1])
        assert meta["step"] == path.stem and re.fullmatch(r"\d\d-[a-z-]+", path.stem)
        assert "#### Automated Verification:" in text and re.search(r"^- \[ \] .*: `[^`]+`$", text, re.MULTILINE)
        steps[path.stem] = meta
    assert list(steps) == ["01-count", "02-cli", "03-tests"]
    assert steps["02-cli"]["depends_on"] == ["01-count"] and steps["03-tests"]["depends_on"] == ["02-cli"]
    assert steps["03-tests"]["requires_approval"] is True


# ---- the real CLIs (RUNNER_AGENT_TESTS=1) ----------------------------------------------------------
REAL = os.environ.get("RUNNER_AGENT_TESTS") == "1"
CHOSEN = [n for n in os.environ.get("RUNNER_AGENT_CLIS", ",".join(PRESET_NAMES)).split(",") if n and n != "none"]


def _install(name: str, prefix: Path) -> Path:
    """Install the preset's CLI from its registry into prefix; the folder holding its executable."""
    kind, _, package = presets.get(name).package.partition(":")
    if kind == "npm":
        if not shutil.which("npm"):
            pytest.fail("npm is not installed")
        argv = [
            "npm",
            "install",
            "--prefix",
            str(prefix),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            f"{package}@latest",
        ]
        bin_dir = prefix / "node_modules" / ".bin"
    else:
        subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True, timeout=120)
        argv = [str(prefix / "bin" / "pip"), "install", "--quiet", package]
        bin_dir = prefix / "bin"
    started = time.monotonic()
    timeout = float(os.environ.get("RUNNER_AGENT_INSTALL_TIMEOUT", "180"))
    for attempt in (1, 2):  # one retry for a registry hiccup, never past the timeout
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ, "npm_config_update_notifier": "false"},
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"installing {package} took over {timeout:.0f}s")
        if proc.returncode == 0:
            break
    else:
        pytest.fail(f"installing {package} failed: {proc.stderr[-2000:]}")
    print(f"\n{name}: installed {package} in {time.monotonic() - started:.1f}s")
    return bin_dir


@pytest.mark.skipif(
    not REAL,
    reason=(
        "set RUNNER_AGENT_TESTS=1 to install each agent CLI from its registry "
        "and check the preset's flags against its --help"
    ),
)
@pytest.mark.parametrize("name", CHOSEN)
def test_preset_flags_appear_in_the_real_cli_help(name, tmp_path):
    bin_dir = _install(name, tmp_path / "prefix")
    home = tmp_path / "home"
    home.mkdir()

    def help_text(argv: list[str]) -> str:
        proc = subprocess.run(
            [str(bin_dir / argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "HOME": str(home), "NO_COLOR": "1"},
        )
        return proc.stdout + proc.stderr

    version = help_text([presets.get(name).program[0], "--version"]).strip().splitlines()
    print(f"{name}: version {version[0] if version else '?'}")
    missing = presets.missing_from_help(name, help_text)
    assert not missing, f"{name}: flags the preset uses that the CLI's --help does not list: {missing}"
