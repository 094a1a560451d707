"""A person's review of a step's result: reject (or ask for changes) with comments on lines of
it, as ONE reject event. The command line (`runner reject --comment FILE:LINE TEXT`) and the
board both call `reject` here; each comment is checked against the result it names (the file
is in it, the lines exist) and carries those lines' text as the reviewer saw them, so the next
attempt reads what was meant and its handoff can say which comments it addressed."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from runner.core import comments as review_comments
from runner.core.errors import BadInput
from runner.core.machine import Kind
from runner.queue.change import Published
from runner.queue.queue import Queue


def paired(specs: list[str], texts: list[str]) -> list[tuple[str, str]]:
    """`--comment FILE:LINE TEXT ...`: each spec with the text that follows it on the command line."""
    if len(specs) != len(texts):
        raise BadInput(f'{len(specs)} --comment and {len(texts)} texts: write each as --comment FILE:LINE "TEXT"')
    return list(zip(specs, texts))


def specs(given: Iterable[tuple[str, str]]) -> tuple[list[dict[str, Any]], list[str]]:
    """(`FILE:LINE` or `FILE:START-END`, text) pairs as comments without their lines' text yet,
    and the problems of those that are not comments (`reject` refuses them with the rest)."""
    found: list[dict[str, Any]] = []
    problems: list[str] = []
    for index, (spec, text) in enumerate(given, 1):
        try:
            path, line, end = review_comments.parse_spec(spec)
        except ValueError as exc:
            problems.append(f"comment {index}: {exc}")
            continue
        if not text.strip():
            problems.append(f"comment {index} ({spec}): says nothing")
            continue
        found.append({"file": path, "line": line, "end": end, "text": text, "index": index})
    return found, problems


def _number(problem: str) -> int:
    """The comment a problem names ("comment 3: ..."), to list them in the order they were given."""
    match = re.match(r"comment (\d+)", problem)
    return int(match.group(1)) if match else 0


def _refuse(problems: list[str]) -> None:
    if problems:
        shown = "; ".join(problems)
        raise BadInput(
            f"{len(problems)} bad review comment{'s' if len(problems) > 1 else ''}: {shown}"
            if len(problems) > 1
            else shown
        )


def with_lines(
    queue: Queue, step_id: str, given: list[dict[str, Any]], problems: list[str] | None = None
) -> tuple[dict[str, Any], ...]:
    """The comments, each with the text of its lines in the step's result; BadInput (one line)
    names every comment whose file or lines the result does not have, with `problems` found before."""
    problems = list(problems or [])
    if not given:
        _refuse(problems)
        return ()
    if len(given) > review_comments.MAX_COMMENTS:
        raise BadInput(f"at most {review_comments.MAX_COMMENTS} review comments in one rejection, not {len(given)}")
    snap = queue.snapshot(branches=queue.branches(step_id))
    step = snap.plan.find(step_id)
    if step is None:
        raise BadInput(f"no step {step_id!r} (see `runner status`)")
    result = step.get("result") if isinstance(step.get("result"), dict) else {}
    commit = result.get("commit")
    if not commit:
        raise BadInput(f"{step_id} has no result to comment on (comment on lines of a result in review)")
    out = []
    for number, comment in enumerate(given, 1):
        index = comment.get("index", number)
        path, line, end = comment["file"], int(comment["line"]), int(comment.get("end") or comment["line"])
        try:
            data = queue.store.file_at(commit, path)
        except Exception:  # noqa: BLE001 - a path git cannot read is a path the result does not have
            data = None
        lines = review_comments.lines_of(data, line, end)
        if data is None:
            problems.append(f"comment {index}: {path} is not in the result {commit[:10]}")
        elif lines is None:
            count = len(data.decode("utf-8", "replace").splitlines())
            problems.append(
                f"comment {index}: {review_comments.where({**comment, 'line': line, 'end': end})} is past "
                f"the end of {path} ({count} lines)"
            )
        else:
            try:
                out.append(review_comments.make(path, line, end, str(comment.get("text") or ""), lines))
            except ValueError as exc:
                problems.append(f"comment {index}: {exc}")
    _refuse(sorted(problems, key=_number))
    return tuple(out)


def reject(
    queue: Queue,
    step_id: str,
    actor: str,
    reason: str | None,
    given: list[dict[str, Any]],
    abort: bool = False,
    problems: list[str] | None = None,
) -> Published:
    """Reject a step in review, with the reviewer's comments on lines of its result, in one event
    (BadInput, one line, names every comment that is not right, `problems` among them)."""
    found = with_lines(queue, step_id, given, problems)
    if not (reason or "").strip():
        if not found:
            raise BadInput("a rejection needs a reason or a comment (it is the feedback for the next attempt)")
        reason = f"see the {len(found)} review comment{'s' if len(found) > 1 else ''} on lines of the result"
    return queue.event(step_id, Kind.REJECT, actor, reason=reason, permanent=abort, comments=found)
