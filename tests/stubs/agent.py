"""A stub coding-agent CLI for the agent presets (installed under each preset's program name:
claude, codex, opencode, gemini, aider). It takes whatever flags the preset passes, finds the
prompt runner handed it (an argument, or a prompt file, starting with `# Role: <role>`), and
answers as examples/agent-plan/fake-agent does for that role, in the current folder (the
step's worktree). `--output-last-message FILE` (codex) gets the answer too."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

FAKE_AGENT = Path(__file__).resolve().parents[2] / "examples" / "agent-plan" / "fake-agent"


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


def main() -> int:
    args = sys.argv[1:]
    prompt = prompt_of(args)
    role = prompt.split("\n", 1)[0].removeprefix("# Role: ").strip()
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False, encoding="utf-8") as handle:
        handle.write(prompt)
    try:
        done = subprocess.run([sys.executable, str(FAKE_AGENT), role, "--prompt-file", handle.name], stdout=subprocess.PIPE, text=True)
    finally:
        os.unlink(handle.name)
    print(done.stdout, end="")
    if "--output-last-message" in args:
        Path(args[args.index("--output-last-message") + 1]).write_text(done.stdout, encoding="utf-8")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
