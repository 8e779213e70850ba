"""How long one log line may be, for the agent that ships it and the master that stores it.

A line longer than ``MAX_LINE_BYTES`` (UTF-8) keeps its first ``MAX_LINE_BYTES`` bytes followed by a
marker saying how long it was, e.g. ``... [log line truncated: 52428800 bytes, kept the first 65536]``.
The agent cuts it as it reads the task's pipe (never holding more than the pipe reader's limit), the
master cuts what a task posts itself; a line the agent already cut (bound plus marker) passes the
master unchanged, so it never carries two markers.
"""

from __future__ import annotations

import codecs

MAX_LINE_BYTES = 64 * 1024
# Room for the marker itself: a line up to the bound plus this much is stored whole.
MARKER_ROOM = 128


def marker(total_bytes: int, kept_bytes: int) -> str:
    return f" ... [log line truncated: {total_bytes} bytes, kept the first {kept_bytes}]"


def _head(kept: bytes) -> str:
    """The kept bytes as text; a character the cut split in two is left out."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(kept, final=False)


def cut(head: bytes, total_bytes: int) -> str:
    """A line read as its first bytes (``head``: at least ``MAX_LINE_BYTES + MARKER_ROOM`` of them, or
    the whole line) and its whole length in bytes, without its newline."""
    if total_bytes <= MAX_LINE_BYTES + MARKER_ROOM:
        return head.decode("utf-8", errors="replace")
    kept = head[:MAX_LINE_BYTES]
    return _head(kept) + marker(total_bytes, len(kept))


def bounded(text: str) -> str:
    """``text`` (one line, its newline kept) within the bound: its first part and the marker if longer."""
    if len(text) <= MAX_LINE_BYTES // 4:  # at most 4 bytes a character: surely within the bound
        return text
    newline = "\n" if text.endswith("\n") else ""
    body = text[:-1] if newline else text
    raw = body.encode("utf-8", errors="surrogatepass")
    if len(raw) <= MAX_LINE_BYTES + MARKER_ROOM:
        return text
    kept = raw[:MAX_LINE_BYTES]
    return _head(kept) + marker(len(raw), len(kept)) + newline
