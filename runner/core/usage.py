"""What agent runs cost. Tokens are facts: the counts an agent CLI reported for a run. Money is
always an estimate and says whose: the CLI's own figure ("reported by claude"), or tokens
priced from runner.toml's [prices] ("estimated from [prices]"). A run whose CLI reported
nothing is recorded as unknown, never as zero.

One run's usage travels in the record's Runs trailer (`Usage.record`); the step file keeps
the sum over every recorded run of every attempt (`Spend`, the managed key `usage`), which
the state machine adds up from the runs an event carries, so the server hook's replay
writes the same bytes. Everything here reads what others wrote: hostile values count as
unknown, never as a crash.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

# Tokens, as one record keeps them: input_tokens is everything sent (cache reads and cache
# writes included, as OpenAI's and Google's APIs count it); the two cache figures are parts of it.
TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
UNKNOWN = "unknown"  # a run's usage its CLI did not report
PRICES = "prices"  # the source of money priced from runner.toml's [prices]
MAX_TOKENS = 10**12  # a count beyond any real run is hostile, not a figure
MAX_USD = 10.0**7


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value) if 0 <= value <= MAX_TOKENS else None


def _money(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return round(float(value), 6) if 0 <= value <= MAX_USD else None


@dataclass(frozen=True)
class Usage:
    """One run's usage, as its CLI reported it (and priced, when it gave no money)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    usd: float | None = None  # None: no money known for the run
    usd_from: str | None = None  # whose figure: a CLI's name, or PRICES
    model: str | None = None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def record(self) -> dict[str, Any]:
        """The run's `usage` as the Runs trailer carries it."""
        data: dict[str, Any] = {key: getattr(self, key) for key in TOKEN_KEYS}
        if self.usd is not None:
            data["usd"] = self.usd
            data["usd_from"] = self.usd_from or PRICES
        return data

    def priced(self, prices: dict[str, Any]) -> Usage:
        """With money estimated from [prices] when the CLI gave tokens but none."""
        if self.usd is not None:
            return self
        price = price_for(prices, self.model)
        if price is None:
            return self
        fresh = max(self.input_tokens - self.cache_read_tokens - self.cache_write_tokens, 0)
        read = price.input if price.cache_read is None else price.cache_read  # a kind not priced costs what input does
        write = price.input if price.cache_write is None else price.cache_write
        usd = (
            fresh * price.input
            + self.cache_read_tokens * read
            + self.cache_write_tokens * write
            + self.output_tokens * price.output
        ) / 1_000_000
        return replace(self, usd=round(usd, 6), usd_from=PRICES)


def price_for(prices: dict[str, Any], model: str | None) -> Any:
    """The [prices] entry of a model: its own name, else the longest name it starts with
    (`claude-sonnet-4-5` prices `claude-sonnet-4-5-20250929`)."""
    if not model or not prices:
        return None
    if model in prices:
        return prices[model]
    matches = [name for name in prices if model.startswith(name)]
    return prices[max(matches, key=len)] if matches else None


def from_record(value: Any) -> Usage | str | None:
    """A recorded run's usage: a Usage, UNKNOWN, or None (the run reported none: not an agent,
    or a record of before runner read usage). A value that does not read is UNKNOWN."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return UNKNOWN
    counts = {key: _count(value.get(key, 0)) for key in TOKEN_KEYS}
    if any(count is None for count in counts.values()):
        return UNKNOWN
    usd = _money(value.get("usd")) if value.get("usd") is not None else None
    source = value.get("usd_from")
    return Usage(
        **counts,  # type: ignore[arg-type]
        usd=usd,
        usd_from=(str(source)[:40] if isinstance(source, str) else PRICES) if usd is not None else None,
    )


@dataclass(frozen=True)
class Spend:
    """A sum of runs' usage: an attempt's, a step's (its `usage` key), a plan's, a worker's."""

    usd: float = 0.0  # of the runs whose money is known
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    runs: int = 0  # agent runs, those of unknown usage included
    unknown: int = 0  # runs whose CLI reported no usage
    unpriced: int = 0  # runs with tokens but no money (no [prices] entry for the model)
    estimated: int = 0  # runs whose money was priced from [prices], not reported by the CLI

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, usage: Usage | str | None) -> Spend:
        if usage is None:
            return self
        if not isinstance(usage, Usage):
            return replace(self, runs=self.runs + 1, unknown=self.unknown + 1)
        return Spend(
            usd=round(self.usd + (usage.usd or 0.0), 6),
            input_tokens=self.input_tokens + usage.input_tokens,
            output_tokens=self.output_tokens + usage.output_tokens,
            cache_read_tokens=self.cache_read_tokens + usage.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + usage.cache_write_tokens,
            runs=self.runs + 1,
            unknown=self.unknown,
            unpriced=self.unpriced + (usage.usd is None and usage.tokens + usage.cache_read_tokens > 0),
            estimated=self.estimated + (usage.usd is not None and usage.usd_from == PRICES),
        )

    def plus(self, other: Spend) -> Spend:
        return Spend(
            **{
                name: round(getattr(self, name) + getattr(other, name), 6)
                if name == "usd"
                else getattr(self, name) + getattr(other, name)
                for name in _SPEND_KEYS
            }
        )

    def as_meta(self) -> dict[str, Any]:
        """The step file's `usage:` value (only the counts that are not zero, in a fixed order)."""
        return {name: getattr(self, name) for name in _SPEND_KEYS if getattr(self, name) or name == "usd"}

    @classmethod
    def from_meta(cls, value: Any) -> Spend:
        """A step file's `usage:` (hostile values read as nothing)."""
        if not isinstance(value, dict):
            return cls()
        found: dict[str, Any] = {}
        for name in _SPEND_KEYS:
            read = _money(value.get(name, 0)) if name == "usd" else _count(value.get(name, 0))
            if read is not None:
                found[name] = read
        return cls(**found)

    def as_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _SPEND_KEYS}

    def money(self) -> str:
        """The money, labelled: an estimate always, and whose."""
        if not self.runs:
            return "nothing recorded"
        known = self.runs - self.unknown - self.unpriced
        if not known:
            return "money unknown"
        source = (
            "reported by the agent CLI"
            if not self.estimated
            else "estimated from [prices]"
            if self.estimated == known
            else f"{known - self.estimated} reported, {self.estimated} estimated from [prices]"
        )
        return f"${self.usd:.4f} (estimate; {source})"

    def describe(self) -> str:
        """One line: the money, the tokens, the runs and what of them is not known."""
        if not self.runs:
            return "no agent usage recorded"
        gaps = [f"{n} {what}" for n, what in ((self.unknown, "unknown"), (self.unpriced, "unpriced")) if n]
        return (
            f"{self.money()}; {tokens(self.input_tokens)} in, {tokens(self.output_tokens)} out; "
            f"{self.runs} run{'s' if self.runs != 1 else ''}" + (f" ({', '.join(gaps)})" if gaps else "")
        )


_SPEND_KEYS = (
    "usd",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "runs",
    "unknown",
    "unpriced",
    "estimated",
)


def tokens(count: int) -> str:
    """12345 -> 12.3k; as people read token counts."""
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k"
    return f"{count / 1_000_000:.2f}M"


def runs_spend(runs: Any) -> Spend:
    """The sum of the usage of recorded runs (a Runs trailer's list, as decoded: hostile)."""
    spend = Spend()
    if not isinstance(runs, (list, tuple)):
        return spend
    for run in runs:
        if isinstance(run, dict):
            spend = spend.add(from_record(run.get("usage")))
    return spend


def plan_spend(plan: Any) -> Spend:
    """What every step of a plan spent (each step's `usage`, an index key: no file is read)."""
    total = Spend()
    for step in plan.steps.values():
        if (usage := step.get("usage")) is not None:
            total = total.plus(Spend.from_meta(usage))
    return total


def run_note(run: dict[str, Any]) -> str:
    """A recorded run's usage on one line ("" when it reported none)."""
    usage = from_record(run.get("usage"))
    model = run.get("model") if isinstance(run.get("model"), str) else None
    if usage is None:
        return ""
    if not isinstance(usage, Usage):
        return "usage unknown"
    money = (
        f"${usage.usd:.4f} " + ("estimated from [prices]" if usage.usd_from == PRICES else f"by {usage.usd_from}")
        if usage.usd is not None
        else "money unknown"
    )
    return f"{money}; {tokens(usage.input_tokens)} in, {tokens(usage.output_tokens)} out" + (
        f"; {model}" if model else ""
    )
