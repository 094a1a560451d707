"""The commit codec: every queue commit is `encode(event, status)`, and `decode(message)`
gives back exactly that event. The server hook decodes each pushed commit, replays the
event and checks that re-encoding it gives the same message byte for byte, so a commit
cannot say one thing in its subject, another in its trailers.

A message is a subject a person reads, an optional body (the reason, the runs of the
attempt), and a last paragraph of `Runner-<Key>: <value>` trailers that a program reads.
Values are bare when they are ids, numbers, times or flags, JSON otherwise (free text
keeps its line breaks; lists and tables stay one line). Only the last paragraph is read,
and every body line is indented, so no text a person wrote can pose as a trailer.

Heartbeats (refs/runner/heartbeats/<worker>) have a codec of their own below.
Kept free of heavy imports: the server hook starts a Python process on every push.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from runner.core import jsonsafe
from runner.core.limits import MAX_HEARTBEAT_BYTES, MAX_LOG_TAIL_BYTES, clip_tail
from runner.core.machine import Event, Kind
from runner.core.model import format_time, parse_time
from runner.core.usage import run_note

PREFIX = "Runner-"
_TRAILER_RE = re.compile(r"Runner-([A-Za-z][A-Za-z-]*): (.*)")

# Event field -> (trailer key, how its value is written). Order = order in the message.
BARE, JSON, TIME, FLAG, INT = "bare", "json", "time", "flag", "int"
TRAILERS: tuple[tuple[str, str, str], ...] = (
    ("kind", "Event", BARE),
    ("step", "Step", BARE),
    ("actor", "Actor", BARE),
    ("by", "By", BARE),
    ("attempt", "Attempt", INT),
    ("replaces", "Replaces", INT),
    ("incarnation", "Incarnation", BARE),
    ("at", "At", TIME),
    ("lease", "Lease", BARE),
    ("holder", "Holder", JSON),
    ("permanent", "Permanent", FLAG),
    ("hold", "Hold", FLAG),
    ("fault", "Fault", FLAG),
    ("account", "Account", BARE),
    ("ignore_deps", "Ignore-Deps", FLAG),
    ("review", "Review", BARE),
    ("retry_at", "Retry-At", TIME),
    ("result", "Result", JSON),
    ("metrics", "Metrics", JSON),
    ("ticked", "Ticked", JSON),
    ("reason", "Reason", JSON),
    ("comments", "Comments", JSON),
    ("notes", "Notes", JSON),
    ("runs", "Runs", JSON),
)
STATUS_KEY = "Status"
_BY_KEY = {key: (name, how) for name, key, how in TRAILERS}


class CodecError(ValueError):
    """A message that is not a well-formed runner commit."""


@dataclass(frozen=True)
class Decoded:
    event: Event | None  # None: a commit runner did not write (a person's plan edit with git)
    status: str | None = None  # the step's status after the event, as the message says
    trailers: dict[str, str] = field(default_factory=dict)


# --- encoding ---------------------------------------------------------------------------


def one_line(text: str | None, limit: int = 200) -> str:
    """Text for a subject line: line breaks folded, cut at `limit`."""
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def subject_of(event: Event, status: str | None) -> str:
    arrow = f" -> {status}" if status else ""
    if event.kind in (Kind.HALT, Kind.RESUME):
        return f"{event.kind} queue by {event.actor}" + (f": {one_line(event.reason, 120)}" if event.reason else "")
    if event.kind == Kind.INIT:
        return "init runner queue"
    if event.kind == Kind.EDIT:
        return one_line(event.reason, 200) or f"edit plan by {event.actor}"
    if event.kind == Kind.TAKEOVER:
        return f"takeover {event.step} (attempt {event.attempt}, replaces {event.replaces}) by {event.actor}{arrow}"
    if event.spec.person:
        return f"{event.kind} {event.step} by {event.actor}{arrow}"
    return f"{event.kind} {event.step} (attempt {event.attempt}) by {event.actor}{arrow}"


def _indent(text: str) -> str:
    return "\n".join("    " + line if line.strip() else "" for line in text.rstrip().splitlines())


def body_of(event: Event) -> str:
    """What a person reads in `git log`: the reason and every run of the attempt."""
    parts = []
    if event.reason and event.kind != Kind.EDIT:
        parts.append("Reason:\n" + _indent(event.reason))
    if event.runs:
        lines = []
        for run in event.runs:
            took = f" in {run['seconds']}s" if run.get("seconds") is not None else ""
            detail = f": {one_line(run.get('detail'), 160)}" if run.get("detail") else ""
            spent = f" [{one_line(note, 160)}]" if (note := run_note(run)) else ""
            lines.append(f"- {one_line(run.get('name'), 80)}: {run.get('result')}{took}{spent}{detail}")
        parts.append("Runs:\n" + _indent("\n".join(lines)))
    return "\n\n".join(parts)


def _value(how: str, value: Any) -> str | None:
    if how == FLAG:
        return "true" if value else None
    if value is None or value == () or value == [] or value == {}:
        return None
    if how == TIME:
        return format_time(value)
    if how == INT:
        return str(int(value))
    if how == JSON:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    text = str(value)
    if not text or text != text.strip() or any(ord(c) < 32 for c in text):
        raise CodecError(f"{text!r} cannot be written as a bare trailer value")
    return text


def encode(event: Event, status: str | None = None) -> str:
    """The commit message of `event` (and the step's status after it)."""
    lines = []
    for name, key, how in TRAILERS:
        value = getattr(event, name)
        if name in ("ticked", "runs", "comments"):
            value = list(value)
        written = _value(how, value)
        if written is not None:
            lines.append(f"{PREFIX}{key}: {written}")
    if status:
        lines.append(f"{PREFIX}{STATUS_KEY}: {status}")
    body = body_of(event)
    return subject_of(event, status) + "\n\n" + (body + "\n\n" if body else "") + "\n".join(lines) + "\n"


# --- decoding ---------------------------------------------------------------------------


def trailers_of(message: str) -> dict[str, str]:
    """The Runner-* trailers of a message's last paragraph (empty when it has none)."""
    paragraphs = message.rstrip("\n").split("\n\n")
    if len(paragraphs) < 2:
        return {}
    found: dict[str, str] = {}
    for line in paragraphs[-1].split("\n"):
        match = _TRAILER_RE.fullmatch(line)
        if not match:
            return {} if not found else _bad(f"line {line!r} in the trailer block is not a Runner- trailer")
        key, value = match.groups()
        if key in found:
            _bad(f"trailer Runner-{key} appears twice")
        found[key] = value
    return found


def _bad(why: str) -> NoReturn:
    raise CodecError(why)


def _read(how: str, key: str, text: str) -> Any:
    try:
        if how == FLAG:
            if text != "true":
                raise ValueError("a flag is written as true or left out")
            return True
        if how == INT:
            if not re.fullmatch(r"\d{1,9}", text):
                raise ValueError("not a whole number")
            return int(text)
        if how == TIME:
            moment = parse_time(text)
            if moment is None:
                raise ValueError("not a time")
            return moment
        if how == JSON:
            return jsonsafe.loads(text)
        return text
    except ValueError as exc:
        raise CodecError(f"Runner-{key}: {text[:60]!r}: {exc}") from None


def decode(message: str) -> Decoded:
    """The event a message records. Raises CodecError when the message is malformed,
    including when it is not exactly what `encode` writes for that event."""
    trailers = trailers_of(message)
    if "Event" not in trailers:
        if trailers:
            raise CodecError("Runner- trailers without a Runner-Event")
        return Decoded(event=None)
    values: dict[str, Any] = {}
    status = trailers.get(STATUS_KEY)
    for key, text in trailers.items():
        if key == STATUS_KEY:
            continue
        if key not in _BY_KEY:
            raise CodecError(f"unknown trailer Runner-{key}")
        name, how = _BY_KEY[key]
        values[name] = _read(how, key, text)
    try:
        values["kind"] = Kind(values["kind"])
    except ValueError:
        raise CodecError(f"unknown Runner-Event {values['kind']!r}") from None
    for name in ("ticked", "runs", "comments"):
        if name in values:
            if not isinstance(values[name], list):
                raise CodecError(f"Runner-{_key(name)} must be a list")
            values[name] = tuple(values[name])
    for name in ("holder", "result", "metrics"):
        if name in values and not isinstance(values[name], dict):
            raise CodecError(f"Runner-{_key(name)} must be a table")
    if "actor" not in values or "at" not in values:
        raise CodecError("a runner commit names its Runner-Actor and Runner-At")
    for name in ("reason", "notes"):
        if name in values and not isinstance(values[name], str):
            raise CodecError(f"Runner-{_key(name)} must be text")
    try:
        event = Event(**values)
    except ValueError as exc:  # comments that are not comments
        raise CodecError(f"Runner-Comments: {str(exc)[:200]}") from None
    if encode(event, status) != _normal(message):
        raise CodecError(
            "the message is not what runner writes for the event its trailers name (subject or body differ)"
        )
    return Decoded(event=event, status=status, trailers=trailers)


def _key(name: str) -> str:
    return next(key for field_name, key, _ in TRAILERS if field_name == name)


def _normal(message: str) -> str:
    return message.rstrip("\n") + "\n"


# --- commits on the step and integration branches ------------------------------------


def result_message(step: str, title: str, attempt: int, actor: str) -> str:
    """The commit of a step's change on runner/steps/<id>."""
    return (
        f"{step}: {one_line(title, 100)} (attempt {attempt})\n\n{PREFIX}Step: {step}\n{PREFIX}Attempt: "
        f"{attempt}\n{PREFIX}Actor: {actor}\n"
    )


def merge_message(step: str, attempt: int, branch: str, actor: str) -> str:
    """The merge of a step's change into the integration branch."""
    return (
        f"merge {step} (attempt {attempt}) into {branch}\n\n{PREFIX}Step: {step}\n{PREFIX}Attempt: "
        f"{attempt}\n{PREFIX}Actor: {actor}\n"
    )


# --- heartbeats --------------------------------------------------------------------------


def encode_beat(worker: str, info: dict[str, Any]) -> str:
    """A heartbeat's message, within MAX_HEARTBEAT_BYTES: a running step's output tail (and each
    of a daemon's claims' tails) is clipped to MAX_LOG_TAIL_BYTES, and further while escaping it
    (control characters, say) or the number of slots would make the message longer than the bound."""
    limit = MAX_LOG_TAIL_BYTES
    while True:
        clipped = map_beat_outputs(info, functools.partial(clip_tail, limit=limit))
        message = f"heartbeat {worker}\n\n" + json.dumps({"worker": worker, **clipped}, sort_keys=True) + "\n"
        if len(message.encode()) <= MAX_HEARTBEAT_BYTES or limit == 0:
            return message
        limit //= 2


def map_beat_outputs(info: dict[str, Any], change: Callable[[str], str]) -> dict[str, Any]:
    """The beat with `change` applied to every output tail it carries: its own (a one-step
    worker) and each claim's (a daemon's slots). The one place that knows where they live."""

    def changed(part: dict[str, Any]) -> dict[str, Any]:
        return {**part, "output": change(part["output"])} if isinstance(part.get("output"), str) else part

    result = changed(info)
    if isinstance(info.get("claims"), list):
        result = {**result, "claims": [changed(c) if isinstance(c, dict) else c for c in info["claims"]]}
    return result


def beat_output(info: dict[str, Any], step: str, attempt: int | None) -> dict[str, Any] | None:
    """What a heartbeat carries of this attempt's output ({run, output, output_bytes, ...}): the
    claim of a daemon's slot that names it, or the beat of a one-step worker; None when none."""
    claims = [c for c in beat_claims(info) if "output" in c]
    for part in [*claims, info]:
        if part.get("step") == step and part.get("attempt") == attempt and isinstance(part.get("output"), str):
            return part
    return None


def decode_beat(message: str) -> dict[str, Any] | None:
    """The facts a heartbeat commit carries, or None when it is not one runner wrote."""
    _, _, body = message.partition("\n\n")
    try:
        info = jsonsafe.loads(body)
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def beat_claims(info: dict[str, Any]) -> list[dict[str, Any]]:
    """The claims a heartbeat carries, each {step, attempt, incarnation}: its `claims` list (a
    daemon running several steps at once, `runner worker --slots N`), else its one step."""
    claims = info.get("claims")
    if isinstance(claims, list):
        return [c for c in claims if isinstance(c, dict) and isinstance(c.get("step"), str)]
    if isinstance(info.get("step"), str):
        return [{"step": info["step"], "attempt": info.get("attempt"), "incarnation": info.get("incarnation")}]
    return []


def beat_names(info: dict[str, Any], step: str, attempt: int | None, incarnation: str | None = None) -> bool:
    """Whether a heartbeat speaks for this attempt of `step` (and this incarnation, when given)."""
    return any(
        c.get("step") == step
        and c.get("attempt") == attempt
        and (not incarnation or c.get("incarnation") == incarnation)
        for c in beat_claims(info)
    )


def beat_with_claim(info: dict[str, Any], step: str, attempt: int, incarnation: str) -> dict[str, Any]:
    """The beat that rides on a claim's push: it names the new claim, beside those it carried."""
    beat = {**info, "step": step, "attempt": attempt, "incarnation": incarnation}
    if isinstance(info.get("claims"), list):
        beat["claims"] = [*beat_claims(info), {"step": step, "attempt": attempt, "incarnation": incarnation}]
    return beat
