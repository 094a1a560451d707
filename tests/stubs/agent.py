"""A stub coding-agent CLI for the agent presets (installed under each preset's program name:
claude, codex, opencode, gemini, aider, with STUB_AGENT_AS naming which). It takes whatever
flags the preset passes, finds the prompt runner handed it (an argument, or a prompt file,
starting with `# Role: <role>`), and answers as examples/agent-plan/fake-agent does for that
role, in the current folder (the step's worktree).

In the machine-readable mode the preset asks for (`--output-format json`, `--json`, `--format
json`; aider's lines always), it prints that CLI's recorded output from tests/data/agents with
the stand-in's answer in place of the recorded one, so runner reads real shapes with real
figures. `--output-last-message FILE` (codex) gets the answer too.

STUB_AGENT_LIMIT=DIR: the first run of STUB_AGENT_LIMIT_ROLE (default implement) among all
runs sharing DIR prints the CLI's recorded limit output instead, and exits as the CLI does;
STUB_AGENT_LIMIT_TEXT replaces the recorded limit's words ({epoch} in it: now plus
STUB_AGENT_RESET_IN seconds, by the wall clock runner reads, RUNNER_CLOCK_OFFSET included).
STUB_AGENT_CALLS=FILE: each run appends a line `<cli> <role> <step>` (what the test accounts for)."""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE_AGENT = ROOT / "examples" / "agent-plan" / "fake-agent"
DATA = ROOT / "tests" / "data" / "agents"
RECORDED_ANSWER = "Implemented 01-count:\n- wrote tally/count.py (12 lines)\nCODER_COMPLETE"
# cli -> (the flag and value that switch it to its machine-readable mode, its success and limit recordings)
MODES = {
    "claude": (
        ("--output-format", "json"),
        "claude-success.json",
        "claude-limit.json",
        1,
        "You're out of extra usage · resets Apr 24, 4am (Asia/Tokyo)",
    ),
    "codex": (
        ("--json", None),
        "codex-success.jsonl",
        "codex-limit.jsonl",
        1,
        (
            "You've hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit "
            "https://chatgpt.com/codex/settings/usage to purchase more credits or try again at 9:20 PM."
        ),
    ),
    "gemini": (
        ("--output-format", "json"),
        "gemini-success.json",
        "gemini-limit.json",
        173,
        "You have exhausted your capacity on this model. Your quota will reset after 19h14m47s.",
    ),
    "opencode": (
        ("--format", "json"),
        "opencode-success.jsonl",
        "opencode-limit.jsonl",
        1,
        "You exceeded your current quota, please check your plan and billing details.",
    ),
    "aider": (
        (None, None),
        "aider-success.txt",
        "aider-limit.txt",
        0,
        "The API provider has rate limited you. Try again later or check your quotas.",
    ),
}


def prompt_of(args: list[str]) -> str:
    for arg in args:
        if arg.startswith("# Role: "):
            return arg
        path = Path(arg)
        if len(arg) < 4096 and path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            if text.startswith("# Role: "):
                return text
    sys.exit(f"stub agent: no prompt among {args!r}")


def in_mode(cli: str, args: list[str]) -> bool:
    flag, value = MODES[cli][0]
    if flag is None:
        return True
    if flag not in args:
        return False
    return value is None or args[args.index(flag) + 1] == value


def escaped(text: str, recording: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1] if recording.endswith((".json", ".jsonl")) else text


def first_limit(role: str) -> bool:
    folder = os.environ.get("STUB_AGENT_LIMIT")
    if not folder or role != os.environ.get("STUB_AGENT_LIMIT_ROLE", "implement"):
        return False
    try:
        os.close(os.open(Path(folder) / "limit-hit", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def limit(cli: str) -> int:
    _, _, recording, code, words = MODES[cli]
    said = os.environ.get("STUB_AGENT_LIMIT_TEXT")
    if said:
        now = time.time() + float(os.environ.get("RUNNER_CLOCK_OFFSET") or 0)
        said = said.replace("{epoch}", str(int(now + float(os.environ.get("STUB_AGENT_RESET_IN") or 600))))
    out = (DATA / recording).read_text(encoding="utf-8")
    err_file = DATA / recording.replace(".json", ".stderr")
    err = err_file.read_text(encoding="utf-8") if cli == "gemini" else ""
    if said:
        out, err = (
            out.replace(escaped(words, recording), escaped(said, recording)),
            err.replace(json.dumps(words, ensure_ascii=False)[1:-1], json.dumps(said, ensure_ascii=False)[1:-1]),
        )
    print(out, end="")
    print(err, end="", file=sys.stderr)
    return code


def main() -> int:
    args = sys.argv[1:]
    cli = os.environ.get("STUB_AGENT_AS", "")
    prompt = prompt_of(args)
    role = prompt.split("\n", 1)[0].removeprefix("# Role: ").strip()
    if calls := os.environ.get("STUB_AGENT_CALLS"):
        with open(calls, "a", encoding="utf-8") as handle:
            handle.write(f"{cli} {role} {os.environ.get('RUNNER_STEP', '-')}\n")
    if cli in MODES and in_mode(cli, args) and first_limit(role):
        return limit(cli)
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False, encoding="utf-8") as handle:
        handle.write(prompt)
    try:
        done = subprocess.run(
            [sys.executable, str(FAKE_AGENT), role, "--prompt-file", handle.name], stdout=subprocess.PIPE, text=True
        )
    finally:
        os.unlink(handle.name)
    answer = done.stdout.rstrip("\n")
    if cli in MODES and in_mode(cli, args):
        recording = MODES[cli][1]
        text = (DATA / recording).read_text(encoding="utf-8")
        print(text.replace(escaped(RECORDED_ANSWER, recording), escaped(answer, recording)), end="")
    else:
        print(done.stdout, end="")
    if "--output-last-message" in args:
        Path(args[args.index("--output-last-message") + 1]).write_text(answer + "\n", encoding="utf-8")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
