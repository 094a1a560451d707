"""runner.toml: one typed schema for the whole file, defaults declared once.

Each table is a frozen dataclass whose fields carry their parser and a comment; the
same declaration parses runner.toml (every problem listed, unknown keys refused),
checks a step's own `roles:` / `brakes:` / `pipeline:` overrides, and writes the
commented default file `runner init` commits. `validate`, `doctor`, the pre-commit hook
and the server hook all call `parse_config`, so a bad value is refused before any
worker sees it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from typing import Any

from runner.core import configvalues as v
from runner.core.configtables import Hooks, Notify, Price, Secrets
from runner.core.configvalues import key
from runner.core.errors import BadInput
from runner.core.layout import DEFAULT_INTEGRATION_BRANCH, DEFAULT_STEP_BRANCH_PREFIX

Words = tuple[str, ...]  # an argv, or a list of names
ROLE_NAMES = ("orient", "verify", "review", "sweep", "orchestrate", "resolve", "qa")


@dataclass(frozen=True)
class Queue:
    integration_branch: str = key(DEFAULT_INTEGRATION_BRANCH, v.text, 'done steps are merged here (may be "main")')
    step_branch_prefix: str = key(DEFAULT_STEP_BRANCH_PREFIX, v.text, "each step's change is kept on <prefix><step>")
    requires_approval: bool = key(
        False, v.as_bool, "every step waits for `runner approve` before it is merged (a step's own value wins)"
    )
    prune_merged_step_branches: bool = key(
        True,
        v.as_bool,
        "delete a step's branch once its change is merged (the merge keeps the record; every ref slows every push)",
    )
    touches_exclusive: bool = key(
        True,
        v.as_bool,
        "a worker does not claim a step whose `touches:` globs overlap a claimed step's (while it waits, others run)",
    )


@dataclass(frozen=True)
class Leases:
    lease: float = key(
        3600.0, v.duration, "a claim whose heartbeat has not moved for this long may be taken over", '"1h"'
    )
    max_attempts: int = key(
        3, v.at_least(1), "failures (a crash counts; a release does not) before a step fails for good"
    )
    backoff: float = key(30.0, v.duration, "first retry delay; doubles each failure, +-20% jitter", '"30s"')
    backoff_cap: float = key(3600.0, v.duration, "the longest retry delay", '"1h"')


OUTPUTS = ("text", "claude-json", "codex-jsonl", "gemini-json", "opencode-jsonl", "aider")  # runner.core.agentoutput
_OUTPUT_DOC = (
    "how runner reads the command's output: text, or an agent CLI's machine-readable mode (claude-json, "
    "codex-jsonl, gemini-json, opencode-jsonl, aider): its answer, tokens, money and limits"
)
_ACCOUNT_DOC = (
    "the provider account the command spends: a usage limit it hits pauses every command of the account "
    '("": the command\'s program name)'
)
_MODELS_DOC = "a model ladder for the {model} token: up one rung the attempt after a failing gate or verdict"


@dataclass(frozen=True)
class Harness:
    command: Words = key(
        (), v.argv, "the implement command of a step with no `run:` argv (tokens: see docs/protocol.md)", "[]"
    )
    output: str = key("text", v.choice(*OUTPUTS), _OUTPUT_DOC)
    account: str | None = key(None, v.account, _ACCOUNT_DOC, '""')
    models: Words = key((), v.models, _MODELS_DOC, "[]")


@dataclass(frozen=True)
class Gates:
    detect: bool = key(True, v.as_bool, "detect format/lint/build/test from the project when not set here")
    format: Words = key((), v.argv, "argv; FORMAT_CMD overrides", "[]")
    lint: Words = key((), v.argv, "argv; LINT_CMD overrides", "[]")
    build: Words = key((), v.argv, "argv; BUILD_CMD overrides", "[]")
    test: Words = key((), v.argv, "argv; TEST_CMD overrides", "[]")


@dataclass(frozen=True)
class Role:
    command: Words = key((), v.argv, "argv; empty = the role is off", "[]")
    min_files: int = key(5, v.at_least(0), "review only: review when this many files changed (0 = always)")
    boundaries: Words = key((), v.strings, "review only: review when a changed path starts with one of these", "[]")
    timeout: float | None = key(
        None,
        v.optional_duration,
        'each run of this role lasts at most this long ("none": the step\'s timeout)',
        '"none"',
    )
    output: str = key("text", v.choice(*OUTPUTS), _OUTPUT_DOC)
    account: str | None = key(None, v.account, _ACCOUNT_DOC, '""')
    models: Words = key((), v.models, _MODELS_DOC, "[]")
    sandbox: str | None = key(
        None, v.optional_one_of("none", "bwrap"), "this role's own [worker] sandbox (\"\": the worker's)", '""'
    )


@dataclass(frozen=True)
class Brakes:
    max_fix_attempts: int = key(2, v.at_least(0), "re-runs of implement with the failed gates as feedback, per attempt")
    max_review_attempts: int = key(1, v.at_least(0), "rounds of fixing critical review findings, per attempt")
    score_plateau_window: int = key(
        3, v.at_least(1), "fail for good when the verifier's score has not improved over this many runs"
    )
    step_budget: float | None = key(
        None, v.optional_duration, "wall time a step may spend across all its attempts", '"none"'
    )
    max_resolve_attempts: int = key(
        5,
        v.at_least(0),
        "resolve passes per attempt when the record's merge conflicts because the integration branch moved meanwhile "
        "(0: the conflict fails the attempt)",
    )
    context_floor: Words = key(
        (),
        v.argv,
        'a detector argv run before an attempt\'s agents, printing {"loop_mode_eligible": bool, ...}: false (or no '
        "answer) halts the queue (human_intervention:context_below_floor)",
        "[]",
    )
    step_budget_usd: float | None = key(
        None,
        v.optional_money,
        "US dollars a step's agent runs may spend across its attempts: past it the step waits for a person (review: "
        "budget), never fails",
        '"none"',
    )
    step_budget_tokens: int | None = key(
        None, v.optional_count, "tokens (in + out) a step's agent runs may spend; past it, as step_budget_usd", '"none"'
    )
    plan_budget_usd: float | None = key(
        None,
        v.optional_money,
        "US dollars the whole plan's agent runs may spend: past it the queue halts (budget_exceeded:plan)",
        '"none"',
    )
    limit_wait: float = key(
        900.0,
        v.duration,
        "how long an account pauses after a usage or rate limit whose reset its CLI did not name",
        '"15m"',
    )


@dataclass(frozen=True)
class Pipeline:
    deviation_gate: bool = key(True, v.as_bool, "a major deviation reported by orient waits for a person")
    halt_on_verifier_fault: bool = key(
        True, v.as_bool, "a verifier that crashes or prints no verdict halts the queue (false: fails the attempt)"
    )


@dataclass(frozen=True)
class Worker:
    interval: float = key(
        30.0, v.duration, "the daemon's poll interval when idle (runner worker --interval wins)", '"30s"'
    )
    watch: float | None = key(
        2.0,
        v.optional_duration,
        "between idle ticks, ask the remote this often whether the queue branch moved (its ref advertisement, no "
        'fetch) and tick at once when it did ("none": wait the whole interval)',
        '"2s"',
    )
    step_delay: float = key(0.0, v.duration, "a pause after each step", '"0s"')
    default_timeout: float | None = key(
        3600.0, v.optional_duration, 'a step with no `timeout:` runs at most this long ("none": no limit)', '"1h"'
    )
    grace_period: float = key(
        30.0, v.duration, "after SIGTERM, time to finish the running step before it is released", '"30s"'
    )
    keep_worktree_on_failure: bool = key(
        False, v.as_bool, "keep the worktree of a failed attempt for a person to look at"
    )
    min_free_memory: int = key(64 * 1024**2, v.parse_size, "ticks skip below this much free memory", '"64MiB"')
    min_free_disk: int = key(256 * 1024**2, v.parse_size, "ticks skip below this much free disk", '"256MiB"')
    max_parallel_gates: int | None = key(
        None,
        v.optional_count_from(1),
        "gates and test commands run at once on this host, by every runner daemon of this user together; the others "
        'wait for a slot ("none": no limit)',
        '"none"',
    )
    worktree_budget: int = key(
        0,
        v.parse_size,
        "the disk the worktrees of this clone may take: over it, the worktrees of finished steps are removed before a "
        "claim, and a tick skips while it stays over (0: no budget; `runner gc` cleans up by hand)",
        "0",
    )
    live_log: float | None = key(
        5.0,
        v.optional_duration,
        "while a step runs, its heartbeat also moves this often when the step printed more, carrying its output's tail "
        '(`runner logs`; "none": only every lease/3)',
        '"5s"',
    )
    sandbox: str = key(
        "none",
        v.one_of("none", "bwrap"),
        '"bwrap": every command of a step (implement, gates, roles) runs in a bubblewrap sandbox: only its worktree '
        "writable, $HOME empty but sandbox_home, a private /tmp, the environment cut to an allow-list; a worker where "
        "it cannot run refuses to start",
        '"none"',
    )
    network: bool = key(True, v.as_bool, "with the sandbox: the step may reach the network (agents call their model)")
    env_pass: Words = key(
        (), v.strings, "with the sandbox: variables a step receives beyond PATH, HOME, LANG, TERM, RUNNER_*, ...", "[]"
    )
    sandbox_home: Words = key(
        (),
        v.strings,
        "with the sandbox: files and folders of $HOME a step sees, writable (an agent CLI's config and login: "
        "runner init --agent names them)",
        "[]",
    )
    sandbox_write: Words = key(
        (),
        v.folders,
        "with the sandbox: folders outside the worktree a step may write, absolute or ~/ (a shared build cache); "
        "the rest stays read-only",
        "[]",
    )


TABLES: dict[str, type] = {
    "queue": Queue,
    "leases": Leases,
    "harness": Harness,
    "gates": Gates,
    "brakes": Brakes,
    "pipeline": Pipeline,
    "worker": Worker,
    "hooks": Hooks,
    "notify": Notify,
    "secrets": Secrets,
}
STEP_OVERRIDES = ("roles", "brakes", "pipeline")  # tables a step's frontmatter may override


@dataclass(frozen=True)
class Config:
    queue: Queue = field(default_factory=Queue)
    leases: Leases = field(default_factory=Leases)
    harness: Harness = field(default_factory=Harness)
    gates: Gates = field(default_factory=Gates)
    roles: dict[str, Role] = field(default_factory=dict)  # configured roles only
    brakes: Brakes = field(default_factory=Brakes)
    pipeline: Pipeline = field(default_factory=Pipeline)
    worker: Worker = field(default_factory=Worker)
    hooks: Hooks = field(default_factory=Hooks)
    notify: Notify = field(default_factory=Notify)
    prices: dict[str, Price] = field(default_factory=dict)  # model -> its price, for CLIs that report no money
    secrets: Secrets = field(default_factory=Secrets)
    text: str = ""  # runner.toml as read

    @property
    def heartbeat_interval(self) -> float:
        return max(self.leases.lease / 3, 0.2)

    def agents_without_approval(self) -> str | None:
        """Why a person should look: agents' commands are configured while plan-wide approval is
        off, so their results merge with no person (`runner status` says it; None when not so)."""
        if self.queue.requires_approval:
            return None
        agents = (["[harness]"] if self.harness.command else []) + [f"[roles.{name}]" for name in self.roles]
        if not agents:
            return None
        return (
            f"agents run without approval: runner.toml sets {', '.join(agents)} but [queue] requires_approval = false, "
            "so "
            "their results are merged with no person (set it to true, or requires_approval: true in each step)"
        )

    def for_step(self, meta: dict[str, Any]) -> Config:
        """This configuration with a step's own `roles:`, `brakes:` and `pipeline:` on top."""
        if not any(isinstance(meta.get(name), dict) for name in STEP_OVERRIDES):
            return self
        return _overlaid(self, meta, "step", [])


# Keys that name something a host does with its own files: a setting of the host now, never the
# queue branch's (any pusher could make every worker overwrite a file of its choosing). An empty
# value, as `runner init` wrote them, is still read; any other is refused, saying where it went.
MOVED_TO_HOSTS: dict[tuple[type, str], str] = {
    (Worker, "metrics_file"): "is a setting of each host now: `runner worker --metrics-file PATH` (or "
    "install-schedule's); delete it from runner.toml",
}


def _parse_table(cls: type, table: Any, where: str, problems: list[str], base: Any = None) -> Any:
    base = base if base is not None else cls()
    if not isinstance(table, dict):
        problems.append(f"{where} must be a table")
        return base
    known = {f.name: f for f in fields(cls)}
    values = {}
    for name, value in table.items():
        spec = known.get(name)
        if spec is None and (moved := MOVED_TO_HOSTS.get((cls, name))):
            if value not in ("", None):
                problems.append(f"{where}: {name} {moved}")
            continue
        if spec is None:
            problems.append(f"{where}: unknown key {name!r} (known: {', '.join(known)})")
            continue
        try:
            values[name] = spec.metadata["parse"](value)
        except (ValueError, TypeError) as exc:
            problems.append(f"{where}.{name}: {exc}")
    return replace(base, **values)


def _parse_roles(table: Any, where: str, problems: list[str], base: dict[str, Role]) -> dict[str, Role]:
    roles = dict(base)
    if not isinstance(table, dict):
        problems.append(f"{where} must be a table of roles")
        return roles
    for name, role_table in table.items():
        if name not in ROLE_NAMES:
            problems.append(f"{where}: unknown role {name!r} (roles: {', '.join(ROLE_NAMES)})")
            continue
        if name != "review" and isinstance(role_table, dict):
            for review_only in ("min_files", "boundaries"):
                if review_only in role_table:
                    problems.append(f"{where}: {name}.{review_only}: only [roles.review] takes {review_only}")
        roles[name] = _parse_table(
            Role,
            role_table,
            where.replace("[roles]", f"[roles.{name}]") if "[roles]" in where else f"{where}.{name}",
            problems,
            roles.get(name),
        )
    return {name: role for name, role in roles.items() if role.command}


def _parse_prices(table: Any, where: str, problems: list[str]) -> dict[str, Price]:
    if not isinstance(table, dict) or not all(isinstance(t, dict) for t in table.values()):
        problems.append(f'{where} is a table of models: [prices."model-name"] input = 3.0, output = 15.0')
        return {}
    return {model: _parse_table(Price, prices, f"{where}.{model}", problems) for model, prices in table.items()}


def _token_problems(config: Config, source: str) -> list[str]:
    """A command that names {model} needs a ladder of models to fill it."""
    tables = [
        ("[harness]", config.harness.command, config.harness.models),
        *((f"[roles.{name}]", role.command, role.models) for name, role in config.roles.items()),
    ]
    return [
        f"{source}: {where} command uses {{model}} but the table sets no models = [...]"
        for where, command, models in tables
        if any("{model}" in word for word in command) and not models
    ]


def _overlaid(config: Config, data: dict[str, Any], source: str, problems: list[str]) -> Config:
    changes: dict[str, Any] = {}
    for name, value in data.items():
        if name == "roles" and (source != "step" or isinstance(value, dict)):
            changes["roles"] = _parse_roles(
                value, f"{source}: [roles]" if source != "step" else "roles", problems, config.roles
            )
        elif name == "prices" and source != "step":
            changes["prices"] = _parse_prices(value, f"{source}: [prices]", problems)
        elif name in TABLES and (source != "step" or name in STEP_OVERRIDES):
            if source == "step" and not isinstance(value, dict):
                continue
            where = f"{source}: [{name}]" if source != "step" else name
            changes[name] = _parse_table(TABLES[name], value, where, problems, getattr(config, name))
        elif source != "step":
            problems.append(f"{source}: unknown table [{name}] (tables: {', '.join([*TABLES, 'roles', 'prices'])})")
    return replace(config, **changes)


def parse_config(text: str | None, source: str = "runner.toml") -> Config:
    """The configuration in `text`; BadInput listing every problem."""
    if not text:
        return Config()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{source}: bad TOML: {exc}") from exc
    if isinstance(data.get("gates"), dict) and "verifier" in data["gates"]:
        problems = [f"{source}: [gates] verifier moved to [roles.verify] command"]
    else:
        problems = []
    if isinstance(data.get("gates"), dict):
        data = {**data, "gates": {k: v for k, v in data["gates"].items() if k != "verifier"}}
    config = _overlaid(Config(text=text), data, source, problems)
    hooks = config.hooks
    if both := sorted(set(hooks.identities) & (set(hooks.people) | set(hooks.admins))):
        problems.append(
            f"{source}: [hooks] {', '.join(both)}: a pusher is a worker key (identities) or a person (people, admins), "
            "never both"
        )
    problems += _token_problems(config, source)
    if hooks.identities and not hooks.pusher_env:
        problems.append(
            f"{source}: [hooks] identities needs pusher_env, the variable your git server sets to the pusher's name"
        )
    if problems:
        raise BadInput(problems)
    return config


def step_override_problems(meta: dict[str, Any]) -> list[str]:
    """Problems of a step's own `roles:` / `brakes:` / `pipeline:` tables (the same schema)."""
    problems: list[str] = []
    for name in STEP_OVERRIDES:
        if name in meta and meta[name] is not None:
            if not isinstance(meta[name], dict):
                problems.append(f"{name} must be a table, as in runner.toml")
            else:
                _overlaid(Config(), {name: meta[name]}, "step", problems)
    if isinstance(meta.get("brakes"), dict) and "plan_budget_usd" in meta["brakes"]:
        problems.append("brakes: plan_budget_usd is the plan's, set in runner.toml (a step sets step_budget_usd)")
    return problems


# --- the default file -------------------------------------------------------------------


def _table_text(title: str, cls: type, skip: tuple[str, ...] = ()) -> list[str]:
    lines = [f"[{title}]"]
    for spec in fields(cls):
        if spec.name in skip:
            continue
        lines.append(f"{spec.name} = {spec.metadata['toml']}  # {spec.metadata['doc']}")
    return lines + [""]


def default_toml() -> str:
    """The commented runner.toml `runner init` writes, generated from the schema."""
    lines = [
        "# runner configuration. Lives on the queue branch: edit, commit, push.",
        "# Every key, its default and its meaning: docs/protocol.md.",
        "",
    ]
    for name, cls in TABLES.items():
        if name == "hooks":
            continue  # an empty [hooks] table would read as "hooks configured"
        lines += _table_text(name, cls)
    lines += ["# Agent roles (runner init --agent NAME writes them for a coding agent's CLI):"]
    for role in ROLE_NAMES:
        skip = () if role == "review" else ("min_files", "boundaries")
        lines += ["# " + line if line else "" for line in _table_text(f"roles.{role}", Role, skip)]
    lines += [
        "# Prices of models whose CLI reports tokens but no money (US dollars per million tokens):",
        *("# " + line if line else "" for line in _table_text('prices."model-name"', Price)),
    ]
    return "\n".join(lines).rstrip() + "\n"


def schema_rows() -> list[tuple[str, str, str, str]]:
    """(table, key, default, meaning) for every key: docs/protocol.md is checked against it."""
    rows = []
    for name, cls in [*TABLES.items(), ("roles.<role>", Role), ("prices.<model>", Price)]:
        rows += [(name, spec.name, spec.metadata["toml"], spec.metadata["doc"]) for spec in fields(cls)]
    return rows


DEFAULT_TOML = default_toml()
