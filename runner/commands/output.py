"""What runner prints reaches a person's terminal, and much of it comes from the queue: titles,
reasons, an agent's output, commit subjects anyone could push. A terminal escape sequence in any
of them could recolour, hide or rewrite what the operator sees. Every `runner` process writes
through `Visible` streams, which show control characters as `\\x1b`-style escapes (line breaks
and tabs stay); rich, which writes its own colours, gets the raw stream and every queue text it
shows through `cell()`, which also keeps the text from being read as rich markup."""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """`text` with every control character but line break and tab shown as an escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class Visible:
    """A text stream that writes `visible(text)` to the stream it wraps."""

    def __init__(self, stream: TextIO):
        self.raw_stream = stream

    def write(self, text: str) -> int:
        self.raw_stream.write(visible(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw_stream, name)


def install() -> None:
    """Wrap this process's stdout and stderr (once)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Visible):
            setattr(sys, name, Visible(stream))


def raw(stream: TextIO) -> TextIO:
    return getattr(stream, "raw_stream", stream)


def cell(value: Any) -> str:
    """Queue text for a rich table or line: control characters shown, rich markup escaped."""
    from rich.markup import escape

    return escape(visible(str(value if value is not None else "")))
