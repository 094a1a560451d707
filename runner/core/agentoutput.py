"""Readers of what agent CLIs print in their machine-readable modes: the answer runner judges
as before (sentinel lines, the verdict JSON, CRITICAL findings, deviation lines), the usage of
the run (runner.core.usage), and the provider's limit when the run ended on one. Each
[harness] / [roles.*] table names its reader with `output`; the presets set it, with the
flags that switch each CLI to that mode. Pure functions of the output: the recorded outputs in
tests/data/agents are their cases.

What a CLI prints is hostile input: JSON that is truncated, nested past the bounds, huge,
lacking usage, or an error with no known limit words gives the answer where it can be read,
the usage as unknown (never zero) and no limit; never an exception.

Any command may report usage itself with a line (the last one counts; the answer loses it):

    RUNNER-USAGE: {"input_tokens": 1200, "output_tokens": 300, "usd": 0.0042, "model": "m"}

and exit code 75 (EX_TEMPFAIL) from any agent command means "try later, nothing done": a
limit, whose reset that line may name (`"resets_at": "2026-12-05T21:20:00Z"` or an epoch).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from runner.core import jsonsafe
from runner.core.limits import MAX_TEXT_BYTES, clip
from runner.core.resets import reset_time
from runner.core.usage import UNKNOWN, Usage

EX_TEMPFAIL = 75  # sysexits.h: a temporary failure, try again later
MAX_READ_BYTES = 8 * 1024 * 1024  # more output than this is not parsed whole (its tail still is, line by line)
USAGE_LINE = re.compile(r"^\s*RUNNER-USAGE:\s*(\{.*\})\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Limit:
    """The provider said stop: its words, and when it said the limit resets (None: not said)."""

    words: str
    resets_at: datetime | None = None


@dataclass(frozen=True)
class Reading:
    answer: str  # what runner judges
    usage: Usage | str | None  # a Usage, UNKNOWN (an agent that did not say), None (reports none)
    limit: Limit | None = None


@dataclass(frozen=True)
class Said:
    """What one reader got out of a run's output."""

    answer: str
    usage: Usage | str | None
    error: str = ""  # the run's own error words, where the CLI states them apart (a JSON error)
    failed: bool = False  # the CLI's own output says the run failed (is_error, turn.failed, an error event)


# --- the parts every reader uses --------------------------------------------------------------


def _json(text: str) -> Any:
    if len(text) > MAX_READ_BYTES:
        return None
    try:
        return jsonsafe.loads(text)
    except ValueError:
        return None


def _lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects of JSONL output (the tail, when huge); lines that do not read are skipped."""
    objects = []
    for line in text[-MAX_READ_BYTES:].splitlines():
        if line.lstrip().startswith("{") and isinstance(data := _json(line), dict):
            objects.append(data)
    return objects


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else 0


def _has_ints(table: Any, *keys: str) -> bool:
    return isinstance(table, dict) and all(
        isinstance(table.get(k), (int, float)) and not isinstance(table.get(k), bool) for k in keys
    )


def _usd(value: Any) -> float | None:
    return (
        round(float(value), 6)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
        else None
    )


def _salvaged(text: str, key: str) -> str | None:
    """A string field read out of JSON that does not parse whole (a truncated object)."""
    match = re.search(r'"' + key + r'"\s*:\s*("(?:[^"\\]|\\.)*")', text[-MAX_READ_BYTES:])
    if not match:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    return value if isinstance(value, str) else None


# --- one reader a CLI ---------------------------------------------------------------------------


def read_text(stdout: str, written: str, stderr: str) -> Said:
    """A plain command: its answer as printed (or written to {output}); usage only if it says so."""
    return Said(written if written.strip() else stdout, None)


def read_claude(stdout: str, written: str, stderr: str) -> Said:
    """Claude Code, `claude -p --output-format json`: one result object (`--output-format
    stream-json` ends with the same object): `result`, `is_error`, `subtype`, `usage` (fresh
    input, cache writes and reads, output), `total_cost_usd`, `modelUsage` by model."""
    data = _json(stdout.strip())
    if not isinstance(data, dict):
        data = next((d for d in reversed(_lines(stdout)) if d.get("type") == "result"), None)
    if not isinstance(data, dict):
        answer = _salvaged(stdout, "result")
        return Said(answer if answer is not None else stdout, UNKNOWN)
    answer = str(data["result"]) if isinstance(data.get("result"), str) else ""
    cost = _usd(data.get("total_cost_usd"))
    source = "claude" if cost is not None else None
    models = data.get("modelUsage") if isinstance(data.get("modelUsage"), dict) else {}
    usage: Usage | str = UNKNOWN
    if models and all(_has_ints(m, "inputTokens", "outputTokens") for m in models.values()):
        # every model the run used (a small one answers side questions): the top-level usage is the main one's
        reads, writes = (
            sum(_int(m.get(k)) for m in models.values()) for k in ("cacheReadInputTokens", "cacheCreationInputTokens")
        )
        priciest = max(models, key=lambda name: _usd(models[name].get("costUSD")) or 0)
        usage = Usage(
            sum(_int(m["inputTokens"]) for m in models.values()) + reads + writes,
            sum(_int(m["outputTokens"]) for m in models.values()),
            reads,
            writes,
            cost,
            source,
            str(priciest)[:100],
        )
    elif _has_ints(tokens := _table(data.get("usage")), "input_tokens", "output_tokens"):
        reads, writes = _int(tokens.get("cache_read_input_tokens")), _int(tokens.get("cache_creation_input_tokens"))
        usage = Usage(
            _int(tokens["input_tokens"]) + reads + writes, _int(tokens["output_tokens"]), reads, writes, cost, source
        )
    failed = data.get("is_error") is True or str(data.get("subtype", "success")).startswith("error")
    return Said(answer, usage, answer if failed else "", failed)


def read_codex(stdout: str, written: str, stderr: str) -> Said:
    """Codex, `codex exec --json`: JSONL events; `turn.completed` carries the thread's usage
    (input with its cached part, output), `turn.failed` and `error` the reason it stopped.
    The answer is what `--output-last-message {output}` wrote, else the last agent message."""
    events = _lines(stdout)
    if not events:
        return Said(written if written.strip() else stdout, UNKNOWN)
    usage: Usage | str = UNKNOWN
    answer, errors = "", []
    for event in events:
        kind = event.get("type")
        if kind == "turn.completed" and _has_ints(event.get("usage"), "input_tokens", "output_tokens"):
            counts = event["usage"]
            usage = Usage(
                _int(counts["input_tokens"]),
                _int(counts["output_tokens"]),
                min(_int(counts.get("cached_input_tokens")), _int(counts["input_tokens"])),
            )
        elif kind == "item.completed" and isinstance(item := event.get("item"), dict):
            if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                answer = item["text"]
        elif kind == "turn.failed" and isinstance(event.get("error"), dict):
            errors.append(str(event["error"].get("message", "")))
        elif kind == "error":
            errors.append(str(event.get("message", "")))
    failed = any(e.get("type") == "turn.failed" for e in events)
    return Said(written if written.strip() else answer, usage, "\n".join(errors), failed)


def _gemini_error(data: dict[str, Any], stderr: str) -> tuple[str, bool]:
    error = data.get("error")
    if not isinstance(error, dict):  # in JSON mode a fatal error goes to stderr as "[ERROR] {json}"
        at = stderr.rfind("[ERROR] {")
        parsed = _json(stderr[at + 8 :]) if at >= 0 else None
        error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        return "", False
    words = f"{error.get('type', '')}: {error.get('message', '')}" + (
        f" (code {error['code']})" if "code" in error else ""
    )
    return words, True


def read_gemini(stdout: str, written: str, stderr: str) -> Said:
    """Gemini CLI, `gemini --output-format json`: `response`, `stats.models.<model>.tokens`
    (`prompt` with its `cached` part, `candidates` and `thoughts` out), `error` {type, message,
    code} (on stderr, after `[ERROR] `, when the run could not finish)."""
    data = _json(stdout.strip())
    if not isinstance(data, dict):
        answer = _salvaged(stdout, "response")
        error, failed = _gemini_error({}, stderr)
        return Said(answer if answer is not None else stdout, UNKNOWN, error, failed)
    answer = str(data["response"]) if isinstance(data.get("response"), str) else ""
    error, failed = _gemini_error(data, stderr)
    models = _table(_table(data.get("stats")).get("models"))
    usage: Usage | str = UNKNOWN
    figures = {name: _table(_table(model).get("tokens")) for name, model in models.items()}
    if figures and all(_has_ints(tokens, "prompt", "candidates") for tokens in figures.values()):
        sent = {name: _int(t["prompt"]) for name, t in figures.items()}
        out = {name: _int(t["candidates"]) + _int(t.get("thoughts")) for name, t in figures.items()}
        biggest = max(figures, key=lambda name: sent[name] + out[name])
        usage = Usage(
            sum(sent.values()),
            sum(out.values()),
            sum(min(_int(t.get("cached")), sent[name]) for name, t in figures.items()),
            model=str(biggest)[:100],
        )
    return Said(answer, usage, error, failed)


def read_opencode(stdout: str, written: str, stderr: str) -> Said:
    """opencode, `opencode run --format json`: JSONL events; each `step_finish` part carries
    its step's `tokens` (input, output, reasoning, cache read and write) and `cost`; `text`
    parts the answer; `error` events an APIError {data: {message, statusCode, ...}}."""
    events = _lines(stdout)
    if not events:
        return Said(written if written.strip() else stdout, UNKNOWN)
    texts, errors = [], []
    usage: Usage | None = None
    for event in events:
        part = _table(event.get("part"))
        if event.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"].strip())
        elif event.get("type") == "step_finish" and _has_ints(part.get("tokens"), "input", "output"):
            tokens = _table(part.get("tokens"))
            cache = _table(tokens.get("cache"))
            step = Usage(
                _int(tokens["input"]) + _int(cache.get("read")) + _int(cache.get("write")),
                _int(tokens["output"]) + _int(tokens.get("reasoning")),
                _int(cache.get("read")),
                _int(cache.get("write")),
                _usd(part.get("cost")),
            )
            usage = (
                step
                if usage is None
                else Usage(
                    usage.input_tokens + step.input_tokens,
                    usage.output_tokens + step.output_tokens,
                    usage.cache_read_tokens + step.cache_read_tokens,
                    usage.cache_write_tokens + step.cache_write_tokens,
                    None if usage.usd is None or step.usd is None else round(usage.usd + step.usd, 6),
                )
            )
        elif event.get("type") == "error" and isinstance(error := event.get("error"), dict):
            data = _table(error.get("data"))
            status = f" (status {data['statusCode']})" if "statusCode" in data else ""
            headers = _table(data.get("responseHeaders"))
            wait = str(headers.get("retry-after", ""))
            errors.append(
                f"{error.get('name', 'error')}: {data.get('message', '')}{status}"
                + (f"; retry after {wait}s" if wait.isdigit() else "")
            )
    if usage is not None and usage.usd is not None:
        usage = Usage(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.usd,
            "opencode",
        )
    return Said(
        written if written.strip() else "\n".join(t for t in texts if t),
        usage or UNKNOWN,
        "\n".join(errors),
        bool(errors),
    )


_AIDER_TOKENS = re.compile(
    r"^Tokens: ([\d.]+k?) sent(?:, ([\d.]+k?) cache write)?(?:, ([\d.]+k?) cache hit)?, "
    r"([\d.]+k?) received\.",
    re.MULTILINE,
)
_AIDER_COST = re.compile(r"Cost: \$([\d.]+) message, \$([\d.]+) session\.")
_AIDER_MODEL = re.compile(r"^(?:Main model|Model): (\S+)", re.MULTILINE)


def _aider_count(text: str | None) -> int:
    if not text:
        return 0
    try:
        return int(float(text[:-1]) * 1000) if text.endswith("k") else int(float(text))
    except ValueError:
        return 0


def read_aider(stdout: str, written: str, stderr: str) -> Said:
    """aider: no JSON mode; after each model call it prints `Tokens: 12k sent, 2.1k cache hit,
    1.3k received. Cost: $0.01 message, $0.05 session.` (counts of 1,000 or more rounded as
    aider rounds them). Usage is the sum of those lines, the money the last session figure;
    the answer is what it printed less its own lines (announcements, usage, edits applied)."""
    text = stdout[-MAX_READ_BYTES:]
    reports = _AIDER_TOKENS.findall(text)
    usage: Usage | str = UNKNOWN
    if reports:
        sent = sum(_aider_count(r[0]) for r in reports)
        write, hit = sum(_aider_count(r[1]) for r in reports), sum(_aider_count(r[2]) for r in reports)
        costs = _AIDER_COST.findall(text)
        usd = _usd(float(costs[-1][1])) if costs else None
        model = _AIDER_MODEL.findall(text)
        usage = Usage(
            max(sent, write + hit),
            sum(_aider_count(r[3]) for r in reports),
            hit,
            write,
            usd,
            "aider" if usd is not None else None,
            model[0][:100] if model else None,
        )
    last = max((m.end() for m in _AIDER_TOKENS.finditer(text)), default=0)
    after = text[last:]
    answer = "\n".join(line for line in stdout.splitlines() if not _AIDER_OWN.match(line)).strip("\n")
    return Said(answer, usage, after if _AIDER_LIMIT.search(after) else "")


# aider's own lines around the model's answer: its announcements, usage reports, edits applied, retries
_AIDER_OWN = re.compile(
    r"(Aider v\d|(?:Main |Weak |Editor )?[Mm]odel: \S+ with |Weak model: |Git repo: |Repo-map: |"
    r"Tokens: .* received\.|Cost: \$|Applied edit to |Retrying in [\d.]+ seconds|Warning: For "
    r"large repos|See: https://aider\.chat)"
)


_AIDER_LIMIT = re.compile(r"The API provider has rate limited you|RateLimitError", re.IGNORECASE)

# The words of a provider's usage or rate limit, each reader's own (tests/data/agents has them
# as the CLIs print them). Looked for in the run's error words, its answer when the CLI says it
# failed, and its stderr's tail when it exited non-zero.
_RATE = r"\b429\b|too many requests|rate[ _-]?limit(?:ed|_error| exceeded| reached)"
LIMIT_WORDS: dict[str, re.Pattern] = {
    "text": re.compile(r"(?!x)x"),  # a plain command says it with exit code 75
    "claude-json": re.compile(
        r"usage limit reached|hit your (?:usage )?limit|limit reached\s*[·∙•|]|out of extra usage"
        r"|limit will reset|" + _RATE,
        re.IGNORECASE,
    ),
    "codex-jsonl": re.compile(
        r"hit your usage limit|usage limit (?:reached|exceeded)|quota exceeded|" + _RATE, re.IGNORECASE
    ),
    "gemini-json": re.compile(
        r"TerminalQuotaError|RetryableQuotaError|exhausted your (?:capacity|daily quota)|quota "
        r"will reset|RESOURCE_EXHAUSTED|quota exceeded|\(code 429\)|" + _RATE,
        re.IGNORECASE,
    ),
    "opencode-jsonl": re.compile(
        r"hit your (?:usage )?limit|usage limit|quota exceeded|insufficient_quota|" + _RATE, re.IGNORECASE
    ),
    "aider": _AIDER_LIMIT,
}

READERS: dict[str, Callable[[str, str, str], Said]] = {
    "text": read_text,
    "claude-json": read_claude,
    "codex-jsonl": read_codex,
    "gemini-json": read_gemini,
    "opencode-jsonl": read_opencode,
    "aider": read_aider,
}


def _usage_line(stdout: str) -> tuple[Usage | None, Any]:
    """The last RUNNER-USAGE line's usage and the reset it names (if any)."""
    found = USAGE_LINE.findall(stdout[-MAX_READ_BYTES:])
    data = _json(found[-1]) if found else None
    if not isinstance(data, dict):
        return None, None
    usd = _usd(data.get("usd"))
    usage = Usage(
        _int(data.get("input_tokens")),
        _int(data.get("output_tokens")),
        _int(data.get("cache_read_tokens")),
        _int(data.get("cache_write_tokens")),
        usd,
        "the command" if usd is not None else None,
        str(data["model"])[:100] if isinstance(data.get("model"), str) else None,
    )
    return usage, data.get("resets_at")


def _moment(value: Any) -> datetime | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 10**11:
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return None


def read_output(
    kind: str,
    stdout: str,
    written: str = "",
    stderr: str = "",
    exit_code: int | None = 0,
    now: datetime | None = None,
    local: tzinfo | None = None,
) -> Reading:
    """What a run of a command read with reader `kind` said: its answer, usage and limit."""
    said = READERS.get(kind, read_text)(stdout, written, stderr)
    line_usage, resets = _usage_line(stdout)
    answer = USAGE_LINE.sub("", said.answer).rstrip() if "RUNNER-USAGE:" in said.answer else said.answer
    usage = said.usage if isinstance(said.usage, Usage) or line_usage is None else line_usage
    now = now or datetime.now(UTC)
    words = LIMIT_WORDS.get(kind, LIMIT_WORDS["text"])
    failed = said.failed or exit_code not in (0, None) or bool(said.error)
    candidates = [said.error, said.answer if said.failed else "", stderr[-4096:] if exit_code not in (0, None) else ""]
    hit = next((text for text in candidates if text and words.search(text)), None) if failed else None
    if hit is None and exit_code == EX_TEMPFAIL:
        hit = (said.error or stderr[-2048:] or answer[-2048:]).strip() or "exit code 75 (EX_TEMPFAIL): try later"
    limit = None
    if hit is not None:
        at = _moment(resets) or reset_time(hit, now, local)
        limit = Limit(clip(" ".join(hit.split()), MAX_TEXT_BYTES // 4), at)
    return Reading(answer, usage, limit)


def reset_or_wait(limit: Limit, now: datetime, wait: float, longest: float = 8 * 86400) -> datetime:
    """When to try again after `limit`: the reset it names, kept between a minute and eight days
    from now (a hostile epoch must not pause an account for ever), else `wait` from now."""
    if limit.resets_at is None:
        return now + timedelta(seconds=wait)
    return min(max(limit.resets_at, now + timedelta(seconds=60)), now + timedelta(seconds=longest))
