"""A request body that draws an upload progress bar while requests streams it.

Large contexts take a while to send; Determined users expect to see something move. The body
is an iterable with a length, so requests sends it with Content-Length, 256 KiB at a time, and
each chunk advances the bar on stderr. When stderr is not a terminal no bar is drawn, so logs
and pipes stay clean. Iterating again restarts it (a retry after a 401 re-sends the body).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TextIO

CHUNK = 256 * 1024
MIB = 1024 * 1024
BAR_THRESHOLD = 4 * MIB
WIDTH = 30


def bar_line(label: str, done: int, total: int, width: int = WIDTH) -> str:
    """`uploading context  [#####     ] 12.3/40.0 MiB`"""
    frac = 1.0 if total <= 0 else min(1.0, done / total)
    filled = int(round(frac * width))
    return f"{label}  [{'#' * filled}{' ' * (width - filled)}] {done / MIB:.1f}/{total / MIB:.1f} MiB"


class ProgressBody:
    def __init__(self, data: bytes, label: str = "uploading context", stream: TextIO | None = None,
                 show: bool | None = None) -> None:
        self.data = data
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        if show is None:
            show = len(data) >= BAR_THRESHOLD and _isatty(self.stream)
        self.show = show

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self) -> Iterator[bytes]:
        total = len(self.data)
        view = memoryview(self.data)
        for start in range(0, total, CHUNK):
            chunk = bytes(view[start:start + CHUNK])
            yield chunk
            if self.show:
                self.stream.write("\r" + bar_line(self.label, start + len(chunk), total))
                self.stream.flush()
        if self.show:
            self.stream.write("\n")
            self.stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
