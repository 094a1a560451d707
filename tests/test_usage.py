"""What agent runs cost and why they stopped (issue 43): the readers of each agent CLI's
machine-readable output against the recorded outputs in tests/data/agents, the limit words
and the resets they name, hostile output, pricing from [prices], and the sums a step keeps."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from support.agentplan import read_case as agent_case

from runner.agents.presets import PRESETS, preset_tables
from runner.core.agentoutput import EX_TEMPFAIL, READERS, read_output, reset_or_wait
from runner.core.config import parse_config
from runner.core.errors import BadInput
from runner.core.resets import reset_time
from runner.core.usage import UNKNOWN, Spend, Usage, from_record, runs_spend

DATA = Path(__file__).parent / "data" / "agents"
CASES = json.loads((DATA / "cases.json").read_text())
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def read_case(name: str, exit_code: int | None = None):
    return agent_case(name, exit_code, local=UTC)


def figures(usage) -> dict | str | None:
    if not isinstance(usage, Usage):
        return usage
    return {
        key: getattr(usage, key)
        for key in (
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "usd",
            "usd_from",
            "model",
        )
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_recorded_output_reads_as_its_cli_reported_it(name):
    case = CASES[name]
    reading = read_case(name)
    assert figures(reading.usage) == case["usage"]
    if "answer" in case:
        assert reading.answer == case["answer"]
    if "limit" in case:
        assert reading.limit is not None, name
        expected = at(case["limit"]) if case["limit"] else None
        assert reading.limit.resets_at == expected, (name, reading.limit)
    else:
        assert reading.limit is None, (name, reading.limit)


def test_every_preset_reader_has_a_success_and_a_limit_recorded():
    readers = {case["reader"] for case in CASES.values()}
    outputs = {p.output for p in PRESETS.values() if p.program}
    assert outputs <= readers and outputs == set(READERS) - {"text"}
    for reader in outputs:
        names = [n for n, c in CASES.items() if c["reader"] == reader]
        assert any("limit" in CASES[n] for n in names) and any("limit" not in CASES[n] for n in names), reader
    assert (DATA / "README.md").read_text().count("## ") >= len(outputs)  # each says where its shape comes from


def test_the_presets_switch_each_cli_to_the_mode_its_reader_reads():
    for name, preset in PRESETS.items():
        if not preset.program:
            continue
        config = parse_config(preset_tables(name))
        assert config.harness.output == preset.output
        assert all(role.output == preset.output for role in config.roles.values())
    assert "--output-format json" in " ".join(parse_config(preset_tables("claude")).harness.command)
    assert "--json" in parse_config(preset_tables("codex")).harness.command
    assert "--format json" in " ".join(parse_config(preset_tables("opencode")).harness.command)


@pytest.mark.parametrize(
    "words, expected",
    [
        ("Claude AI usage limit reached|1750708800", datetime(2025, 6, 23, 20, 0, tzinfo=UTC)),
        ("You've hit your limit · resets 1pm (Europe/Lisbon)", datetime(2026, 12, 5, 13, 0, tzinfo=UTC)),
        ("Limit reached · resets 11:30am (Asia/Calcutta) · /upgrade to Max", datetime(2026, 12, 6, 6, 0, tzinfo=UTC)),
        (
            "Claude usage limit reached. Your limit will reset at 3pm (America/Bogota).",
            datetime(2026, 12, 5, 20, 0, tzinfo=UTC),
        ),
        ("You've hit your usage limit. Try again at Aug 8th, 2027 12:30 PM.", datetime(2027, 8, 8, 12, 30, tzinfo=UTC)),
        (
            "send a request to your admin or try again in 3 days 6 hours 57 minutes.",
            NOW + timedelta(days=3, hours=6, minutes=57),
        ),
        (
            "You have exhausted your capacity on this model. Your quota will reset after 19h14m47s.",
            NOW + timedelta(hours=19, minutes=14, seconds=47),
        ),
        ("Resource has been exhausted.\nSuggested retry after 56s.", NOW + timedelta(seconds=56)),
        ("You've hit your usage limit. Try again later.", None),
        ("rate limited; retry 5 files", None),
    ],
)
def test_the_reset_a_limit_names(words, expected):
    assert reset_time(words, NOW, UTC) == expected


def test_a_reset_without_a_zone_is_the_workers_local_time_and_its_next_occurrence():
    east = timezone(timedelta(hours=2))
    assert reset_time("try again at 9:20 PM.", NOW, east) == datetime(2026, 12, 5, 19, 20, tzinfo=UTC)
    assert reset_time("try again at 9:20 AM.", NOW, east) == datetime(2026, 12, 6, 7, 20, tzinfo=UTC)


def test_a_pause_lasts_between_a_minute_and_eight_days_and_backs_off_when_no_reset_is_named():
    hit = read_case("aider-limit").limit
    assert reset_or_wait(hit, NOW, 900) == NOW + timedelta(minutes=15)
    hostile = read_output(
        "claude-json",
        json.dumps({"type": "result", "is_error": True, "result": "Claude AI usage limit reached|9999999999"}),
        "",
        "",
        1,
        NOW,
    ).limit
    assert reset_or_wait(hostile, NOW, 900) == NOW + timedelta(days=8)
    past = read_output(
        "claude-json",
        json.dumps({"type": "result", "is_error": True, "result": "Claude AI usage limit reached|1750708800"}),
        "",
        "",
        1,
        NOW,
    ).limit
    assert reset_or_wait(past, NOW, 900) == NOW + timedelta(minutes=1)


def test_exit_code_75_from_any_command_is_a_limit_and_a_plain_command_may_report_usage():
    reading = read_output(
        "text",
        'working\nRUNNER-USAGE: {"input_tokens": 120, "output_tokens": 30, "usd": '
        '0.002, "model": "m1", "resets_at": "2026-12-05T13:00:00Z"}\n',
        "",
        "",
        EX_TEMPFAIL,
        NOW,
    )
    assert reading.answer == "working"  # the line is not part of the answer (a sentinel stays the last line)
    assert figures(reading.usage) == {
        "input_tokens": 120,
        "output_tokens": 30,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "usd": 0.002,
        "usd_from": "the command",
        "model": "m1",
    }
    assert reading.limit is not None and reading.limit.resets_at == datetime(2026, 12, 5, 13, 0, tzinfo=UTC)
    plain = read_output("text", "STEP_BLOCKED: which DB?\n", "", "429 Too Many Requests", 1, NOW)
    assert plain.usage is None and plain.limit is None  # a plain command's words are not read for limits
    assert read_output("codex-jsonl", "", "", "", EX_TEMPFAIL, NOW).limit is not None


def test_a_successful_run_that_talks_about_limits_is_not_a_limit():
    said = json.loads((DATA / "claude-success.json").read_text())
    said["result"] = "Handled HTTP 429: the client now backs off when rate limited.\nCODER_COMPLETE"
    reading = read_output("claude-json", json.dumps(said), "", "", 0, NOW)
    assert reading.limit is None and reading.answer.endswith("CODER_COMPLETE")


def test_an_error_with_no_known_limit_words_is_judged_as_a_failure():
    said = json.loads((DATA / "claude-limit.json").read_text())
    said["result"] = "Failed to authenticate: OAuth session expired and could not be refreshed"
    reading = read_output("claude-json", json.dumps(said), "", "", 1, NOW)
    assert reading.limit is None and reading.answer.startswith("Failed to authenticate")


@pytest.mark.parametrize("name", ["claude-success", "codex-success", "gemini-success", "opencode-success"])
def test_hostile_output_never_crashes_a_reader_and_usage_it_cannot_read_is_unknown(name):
    case = CASES[name]
    text = (DATA / case["stdout"]).read_text()
    truncated = text[: len(text) * 2 // 3]
    deep = "[" * 5000 + "]" * 5000
    for stdout in (truncated, deep, text.replace('"', "'"), "\x00\x1b[31m" * 1000, "{" * 10**6, "", "null", "[]"):
        reading = read_output(case["reader"], stdout, "", "", 0, NOW)
        assert isinstance(reading.answer, str) and reading.limit is None
        assert reading.usage == UNKNOWN or isinstance(reading.usage, Usage)
    # a truncated single-object answer is read where it can be
    if case["reader"] in ("claude-json", "gemini-json"):
        assert read_output(case["reader"], truncated, "", "", 0, NOW).answer.endswith("CODER_COMPLETE")
        assert read_output(case["reader"], truncated, "", "", 0, NOW).usage == UNKNOWN


def test_usage_missing_is_unknown_never_zero():
    said = json.loads((DATA / "claude-success.json").read_text())
    del said["usage"], said["modelUsage"]
    assert read_output("claude-json", json.dumps(said), "", "", 0, NOW).usage == UNKNOWN
    assert Spend().add(UNKNOWN).as_meta() == {"usd": 0.0, "runs": 1, "unknown": 1}
    assert from_record({"input_tokens": -5}) == UNKNOWN and from_record("lots") == UNKNOWN
    assert from_record({"input_tokens": 1e300}) == UNKNOWN and from_record(None) is None


def test_tokens_without_money_are_priced_from_prices_and_say_so():
    config = parse_config(
        '[prices."gpt-5"]\ninput = 1.25\noutput = 10.0\ncache_read = 0.125\n'
        '[prices."gemini-2.5"]\ninput = 1.25\noutput = 10\n'
    )
    codex = read_case("codex-success").usage
    assert isinstance(codex, Usage) and codex.usd is None
    priced = Usage(codex.input_tokens, codex.output_tokens, codex.cache_read_tokens, model="gpt-5-codex").priced(
        config.prices
    )
    fresh = 26549 - 22272
    assert priced.usd == round((fresh * 1.25 + 22272 * 0.125 + 1590 * 10.0) / 1e6, 6) and priced.usd_from == "prices"
    gemini = read_case("gemini-success").usage
    assert isinstance(gemini, Usage) and gemini.priced(config.prices).usd is not None  # gemini-2.5-pro by its prefix
    assert codex.priced(config.prices).usd is None  # no model named: unpriced, never zero
    reported = read_case("claude-success").usage
    assert isinstance(reported, Usage) and reported.priced(config.prices) == reported


def test_a_step_sums_its_runs_and_labels_its_money():
    runs = [
        {"name": "implement", "usage": read_case("claude-success").usage.record()},
        {"name": "verify", "usage": UNKNOWN},
        {
            "name": "review",
            "usage": Usage(1000, 200, model="gpt-5")
            .priced(parse_config('[prices."gpt-5"]\ninput = 1\noutput = 10\n').prices)
            .record(),
        },
        {"name": "test"},
    ]
    spend = runs_spend(runs)
    assert spend.runs == 3 and spend.unknown == 1 and spend.estimated == 1
    assert spend.usd == round(0.087125 + 0.003, 6) and spend.input_tokens == 71648 + 1000
    assert "estimate" in spend.money() and "1 unknown" in spend.describe()
    assert Spend.from_meta(spend.as_meta()) == spend
    assert Spend.from_meta({"usd": "a lot", "runs": -1}) == Spend()


def test_bad_prices_and_budgets_are_one_line_each():
    with pytest.raises(BadInput) as caught:
        parse_config(
            '[prices."m"]\ninput = -1\noutput = "cheap"\n[brakes]\nstep_budget_usd = "lots"\n'
            'step_budget_tokens = 1.5\nplan_budget_usd = -3\n[harness]\noutput = "xml"\ncommand = ["a", "{model}"]\n'
        )
    problems = caught.value.problems
    assert len(problems) == 7 and all("\n" not in p for p in problems), problems
    assert parse_config('[brakes]\nstep_budget_usd = 2.5\nplan_budget_usd = "none"\n').brakes.step_budget_usd == 2.5
