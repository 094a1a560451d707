"""Provider accounts and their pauses. Every agent command spends an account (`[harness]
account`, `[roles.<role>] account`; by default the command's program name: `claude`, `codex`).
When a run ends on the provider's usage or rate limit, the step is given back with nothing
spent and the account is paused until the reset: its holder's release writes
plans/pauses/<account>.json, and no worker on any host claims a step whose pipeline would run
a command of that account until then. The file is a function of the release and the file
before it (a later pause never shortens an earlier one), so the server hook writes the same
bytes when it replays the release. People lift a pause by deleting the file (a plan edit).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runner.core import jsonsafe
from runner.core.limits import MAX_TEXT_BYTES, clip
from runner.core.model import format_time, parse_time

PAUSES_DIR = "plans/pauses"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def program_account(argv: Any) -> str:
    """The account of a command that names none: its program's name, as a file name may hold it."""
    program = str(argv[0]) if isinstance(argv, (list, tuple)) and argv else "command"
    name = re.sub(r"[^A-Za-z0-9._-]", "-", program.replace("\\", "/").rsplit("/", 1)[-1]).strip(".-_")[:64]
    return name if _NAME.fullmatch(name or "") else "command"


@dataclass(frozen=True)
class Agent:
    """How one role of a step runs: its argv, how its output is read, the account it spends,
    its model ladder."""

    argv: tuple[str, ...]
    output: str
    account: str
    models: tuple[str, ...] = ()


def agent_of(config: Any, step_run: Any, role: str) -> Agent | None:
    """The command `role` runs for a step whose `run:` is `step_run` under `config` (the
    step's own config, runner.core.config.Config.for_step); None when it runs none. A step's
    own `run:` is read as plain text (its output mode is the harness's only when it is the
    harness's command)."""
    if role == "implement":
        if isinstance(step_run, list) and step_run:
            return Agent(tuple(map(str, step_run)), "text", program_account(step_run))
        table = config.harness
    elif role == "context_floor":
        argv = config.brakes.context_floor
        return Agent(tuple(argv), "text", program_account(argv)) if argv else None
    else:
        table = config.roles.get(role)
    if table is None or not table.command:
        return None
    return Agent(
        tuple(table.command), table.output, table.account or program_account(table.command), tuple(table.models)
    )


AGENT_ROLES = ("implement", "orient", "verify", "review", "sweep", "orchestrate", "resolve", "qa")
EVERY_ATTEMPT = ("implement", "orient", "verify", "review", "sweep", "orchestrate")  # review when due: likely


def step_accounts(config: Any, step_run: Any, step_text: str = "") -> set[str]:
    """The accounts a step's next attempt would spend: its implement and every role each attempt
    runs, and [roles.qa] when the step has Automated QA scenarios without a command. Not
    [roles.resolve]: it runs only if the record's merge conflicts (a limit it hits then gives
    the step back like any other)."""
    from runner.core.stepfile import checklist

    roles = EVERY_ATTEMPT + (("qa",) if any(cmd is None for *_, cmd in checklist(step_text, "Automated QA")) else ())
    return {agent.account for role in roles if (agent := agent_of(config, step_run, role)) is not None}


# --- pauses --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pause:
    account: str
    until: datetime
    reason: str = ""
    by: str = ""  # the worker whose run hit the limit
    step: str = ""

    def active(self, now: datetime) -> bool:
        return self.until > now

    def as_json(self) -> dict[str, Any]:
        return {
            "account": self.account,
            "until": format_time(self.until),
            "reason": self.reason,
            "by": self.by,
            "step": self.step,
        }


def pause_path(account: str) -> str:
    return f"{PAUSES_DIR}/{account}.json"


def is_account(name: Any) -> bool:
    return isinstance(name, str) and bool(_NAME.fullmatch(name))


def read_pause(account: str, data: bytes | None) -> Pause | None:
    """The pause a file holds (None: no file, or one that does not read)."""
    if data is None:
        return None
    try:
        info = jsonsafe.loads(data)
    except ValueError:
        return None
    until = parse_time(info.get("until")) if isinstance(info, dict) else None
    if until is None:
        return None
    text = {key: str(info.get(key) or "")[:MAX_TEXT_BYTES] for key in ("reason", "by", "step")}
    return Pause(account, until, **text)


def pause_after(
    before: bytes | None, account: str, until: datetime, reason: str | None, by: str, step: str | None
) -> bytes:
    """plans/pauses/<account>.json after a release that paused the account until `until`: the
    later of the two pauses (a limit hit again never brings a reset closer)."""
    kept = read_pause(account, before)
    if kept is not None and kept.until >= until:
        pause = kept
    else:
        pause = Pause(account, until, clip(" ".join((reason or "").split()), MAX_TEXT_BYTES // 2), by, step or "")
    return (json.dumps(pause.as_json(), ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")


def active_pauses(files: dict[str, bytes], now: datetime) -> dict[str, Pause]:
    """The pauses in force among the files of plans/pauses (name -> bytes)."""
    found = {}
    for name, data in files.items():
        account = name.removesuffix(".json")
        pause = read_pause(account, data) if name.endswith(".json") and is_account(account) else None
        if pause is not None and pause.active(now):
            found[account] = pause
    return found


def held_by_pause(config: Any, step_run: Any, step_text: str, pauses: dict[str, Pause]) -> str | None:
    """Why a step is not claimed while one of its accounts is paused (None: it may run)."""
    if not pauses:
        return None
    for account in sorted(step_accounts(config, step_run, step_text) & set(pauses)):
        pause = pauses[account]
        return (
            f"account {account} is paused until {format_time(pause.until)} (a provider's limit: "
            f"{clip(pause.reason, 200)})"
        )
    return None
