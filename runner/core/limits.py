"""Every bound on what runner carries, in one place: what agents and commands print is hostile
input (a 2 MB `STEP_FAILED:` line, a 5 MB verdict), and whatever runner copies into a step
file, a commit or a heartbeat reaches every clone. Writers clip to these bounds and say so;
the server hook refuses what is over them. docs/protocol.md lists each one."""

from __future__ import annotations

KIB = 1024

MAX_STEP_BYTES = 1024 * KIB
MAX_TEXT_BYTES = 4 * KIB
MAX_EVENT_BYTES = 256 * KIB
MAX_HEARTBEAT_BYTES = 64 * KIB
MAX_LOG_TAIL_BYTES = 16 * KIB
MAX_NOTES_BYTES = 512 * KIB
MAX_NOTES_APPEND_BYTES = 16 * KIB
MAX_HANDOFF_BYTES = 256 * KIB
MAX_ARG_BYTES = 100 * KIB
MAX_JSON_DEPTH = 20
MAX_TOUCHES = 64
MAX_GLOB_BYTES = 256
MAX_GLOB_SEGMENTS = 16
MAX_GLOB_STARS = 4
MAX_TOUCH_SEGMENTS = 256
MAX_CONTEXT_BYTES = 16 * KIB
MAX_STDERR_TAIL_BYTES = 512

# (what, the bound, what runner does about it): docs/protocol.md's bounds table (tests/test_docs.py).
BOUNDS: tuple[tuple[str, int, str], ...] = (
    (
        "a step file, and any other file on the queue branch",
        MAX_STEP_BYTES,
        "over it a step is invalid; the hook refuses the file",
    ),
    (
        "one carried text: a reason, `last_error`, a run's detail",
        MAX_TEXT_BYTES,
        "clipped where an event is made (head and tail kept, the cut said)",
    ),
    ("a verdict's reason or next_hint", MAX_TEXT_BYTES // 4, "clipped as it is read; 20 reasons at most"),
    (
        "a verdict's reasons and next_hint together (the step's `last_verdict`)",
        MAX_TEXT_BYTES,
        "the reasons that fit are kept, and a line says how many more there were",
    ),
    ("a queue commit's message", MAX_EVENT_BYTES, "the hook refuses more"),
    (
        "a heartbeat commit's message",
        MAX_HEARTBEAT_BYTES,
        "the hook refuses more, and a heartbeat whose parent is not the one it replaces",
    ),
    ("the tail of a running step's output a heartbeat carries", MAX_LOG_TAIL_BYTES, "the last lines that fit"),
    ("plans/NOTES.md", MAX_NOTES_BYTES, "rolls: an append drops the oldest lines; the hook refuses more"),
    ("what one attempt appends to plans/NOTES.md", MAX_NOTES_APPEND_BYTES, "clipped"),
    ("a step's handoff file", MAX_HANDOFF_BYTES, "each section clipped to 16 KiB; the hook refuses more"),
    (
        "one argument of a command (`{prompt}`)",
        MAX_ARG_BYTES,
        "a longer prompt goes to a file, and the argument says where",
    ),
    (
        "nesting of JSON runner reads (verdicts, trailers, heartbeats)",
        MAX_JSON_DEPTH,
        "deeper is invalid, as is a key given twice",
    ),
    (
        "globs in one step's `touches:` (each claim compares them with every claimed step's)",
        MAX_TOUCHES,
        "the step is invalid",
    ),
    ("one of those globs", MAX_GLOB_BYTES, "the step is invalid"),
    ("path segments of one glob", MAX_GLOB_SEGMENTS, "the step is invalid"),
    ("`**` segments of one glob", MAX_GLOB_STARS, "the step is invalid"),
    (
        "path segments of all of one step's globs (an overlap check costs theirs times a claimed step's)",
        MAX_TOUCH_SEGMENTS,
        "the step is invalid",
    ),
    (
        "the caller's context (`runner tick --context`)",
        MAX_CONTEXT_BYTES,
        "clipped before it reaches a prompt or the handoff",
    ),
    ("the tail of a failing command's stderr in its fault", MAX_STDERR_TAIL_BYTES, "its last lines that fit"),
)

CLIP_MARKER = "\n[... {cut:,} bytes clipped ...]\n"  # where clip cut a text (the scrubber looks there too)


def clip(text: str | None, limit: int = MAX_TEXT_BYTES) -> str:
    """`text` within `limit` UTF-8 bytes: its head and its tail (where errors usually are), and
    between them a line saying how much was cut. Short text comes back unchanged."""
    text = text or ""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    marker = CLIP_MARKER.format(cut=len(data) - limit)
    room = max(limit - len(marker.encode()) - 16, 0)  # 16: the figure in the marker may grow
    head, tail = room // 4, room - room // 4
    cut = len(data) - (head + tail)
    marker = CLIP_MARKER.format(cut=cut)
    return data[:head].decode("utf-8", "ignore") + marker + data[len(data) - tail :].decode("utf-8", "ignore")


def clip_tail(text: str | None, limit: int) -> str:
    """The last `limit` bytes of `text` (a log's tail), starting at a whole line when one fits."""
    data = (text or "").encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text or ""
    tail = data[len(data) - limit :]
    newline = tail.find(b"\n")
    if 0 <= newline < len(tail) // 2:
        tail = tail[newline + 1 :]
    return tail.decode("utf-8", "ignore")


def file_bound(path: str) -> int:
    """The most a file on the queue branch may hold."""
    if path == "plans/NOTES.md":
        return MAX_NOTES_BYTES
    if path.startswith("plans/handoffs/"):
        return MAX_HANDOFF_BYTES
    return MAX_STEP_BYTES
