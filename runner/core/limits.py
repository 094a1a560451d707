"""Every bound on what runner carries, in one place: what agents and commands print is hostile
input (a 2 MB `STEP_FAILED:` line, a 5 MB verdict), and whatever runner copies into a step
file, a commit or a heartbeat reaches every clone. Writers clip to these bounds and say so;
the server hook refuses what is over them. docs/protocol.md lists each one."""

from __future__ import annotations

KIB = 1024

MAX_STEP_BYTES = 1024 * KIB  # a step file; over it the step is invalid
MAX_TEXT_BYTES = 4 * KIB  # one carried text: a reason, last_error, a verdict's reasons and hint, a run's detail
MAX_EVENT_BYTES = 256 * KIB  # a queue commit's message (its trailers carry the runs and texts above)
MAX_HEARTBEAT_BYTES = 64 * KIB  # a heartbeat commit's message
MAX_LOG_TAIL_BYTES = 16 * KIB  # the tail of a running step's output that a heartbeat carries
MAX_NOTES_BYTES = 512 * KIB  # plans/NOTES.md
MAX_NOTES_APPEND_BYTES = 16 * KIB  # what one attempt may append to plans/NOTES.md
MAX_ARG_BYTES = 100 * KIB  # one argv element: a longer {prompt} makes the config refuse the role's command
MAX_JSON_DEPTH = 20  # nesting of JSON runner reads (verdicts, trailers), as of YAML
MAX_TOUCHES = 64  # globs in one step's `touches:` (every claim compares them with each claimed step's)
MAX_GLOB_BYTES = 256  # one of those globs


def clip(text: str | None, limit: int = MAX_TEXT_BYTES) -> str:
    """`text` within `limit` UTF-8 bytes: its head and its tail (where errors usually are), and
    between them a line saying how much was cut. Short text comes back unchanged."""
    text = text or ""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    marker = f"\n[... {len(data) - limit:,} bytes clipped ...]\n"
    room = max(limit - len(marker.encode()) - 16, 0)  # 16: the figure in the marker may grow
    head, tail = room // 4, room - room // 4
    cut = len(data) - (head + tail)
    marker = f"\n[... {cut:,} bytes clipped ...]\n"
    return data[:head].decode("utf-8", "ignore") + marker + data[len(data) - tail:].decode("utf-8", "ignore")


def clip_tail(text: str | None, limit: int) -> str:
    """The last `limit` bytes of `text` (a log's tail), starting at a whole line when one fits."""
    data = (text or "").encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text or ""
    tail = data[len(data) - limit:]
    newline = tail.find(b"\n")
    if 0 <= newline < len(tail) // 2:
        tail = tail[newline + 1:]
    return tail.decode("utf-8", "ignore")
