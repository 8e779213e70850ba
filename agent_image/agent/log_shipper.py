"""Reads a task's stdout/stderr and ships the lines in batches.

A batch goes to the outbox every ``interval`` seconds or as soon as ``max_lines`` lines are
waiting. Every line is also appended to ``<task dir>/logs/<stdtype>.log``. :meth:`close`
flushes the rest, so the caller can queue ``TaskExited`` strictly after the last batch.

The file is a copy: when it cannot be written (a full disk, ENOSPC) the shipper says so once and
goes on shipping lines to the master without it; a task's output is never left unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import BinaryIO

from controlplane.common.log_lines import MARKER_ROOM, MAX_LINE_BYTES, cut
from controlplane.wire.agent_protocol import LogLine, TaskLogs

from .log_parsing import decode_line, parse_line
from .outbox import Outbox

log = logging.getLogger(__name__)

READ_LIMIT = 1 << 20  # the pipe reader's buffer: a longer line is read in pieces of at most this much
KEEP = MAX_LINE_BYTES + MARKER_ROOM  # what is kept of a line while it is read: enough to cut it


async def read_line(stream: asyncio.StreamReader) -> tuple[bytes, int] | None:
    """The next line as (its first ``KEEP`` bytes, its whole length), without its newline; None at EOF.
    The rest of a long line is read and dropped piece by piece, so memory stays at ``READ_LIMIT``."""
    head = bytearray()
    total = 0
    while True:
        try:
            piece = await stream.readuntil(b"\n")
            done = True
        except asyncio.IncompleteReadError as e:  # EOF: the last line has no newline
            piece, done = e.partial, True
            if not piece and not total:
                return None
        except asyncio.LimitOverrunError as e:  # no newline within the buffer: take what is there
            piece, done = await stream.read(max(e.consumed, 1)), False
            if not piece:  # EOF reached meanwhile
                done = True
        if done and piece.endswith(b"\n"):
            piece = piece[:-1]
        total += len(piece)
        if len(head) < KEEP:
            head += piece[:KEEP - len(head)]
        if done:
            return bytes(head), total


def _close_quietly(sink: BinaryIO) -> None:
    """Closes a log file whose buffered bytes may not fit on the disk any more."""
    with contextlib.suppress(OSError):
        sink.close()


class LogShipper:
    def __init__(
        self,
        allocation_id: str,
        outbox: Outbox,
        log_dir: Path,
        interval: float = 0.25,
        max_lines: int = 500,
    ) -> None:
        self.allocation_id = allocation_id
        self._outbox = outbox
        self._log_dir = log_dir
        self._interval = interval
        self._max_lines = max_lines
        self._pending: list[LogLine] = []
        self._ticker: asyncio.Task[None] | None = None
        self.file_error: OSError | None = None  # why the log files stopped being written

    def start(self) -> None:
        try:
            self._log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._file_failed(exc)
        self._ticker = asyncio.create_task(self._tick())

    def _file_failed(self, exc: OSError) -> None:
        if self.file_error is None:
            self.file_error = exc
            log.warning("%s: cannot write the task's log files in %s (%s); its lines still go to the master",
                        self.allocation_id, self._log_dir, exc.strerror or exc)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self.flush()

    def add(self, line: LogLine) -> None:
        self._pending.append(line)
        if len(self._pending) >= self._max_lines:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            batch, self._pending = self._pending, []
            self._outbox.put(TaskLogs(allocation_id=self.allocation_id, lines=batch))

    async def pump(self, stream: asyncio.StreamReader, stdtype: str) -> None:
        """Read ``stream`` to EOF, one line at a time; a line past ``MAX_LINE_BYTES`` is shipped (and
        written to the task's log file) as its first part and a marker (``controlplane/common/log_lines.py``)."""
        sink = None
        if self.file_error is None:
            try:
                sink = open(self._log_dir / f"{stdtype}.log", "ab")  # closed below
            except OSError as exc:
                self._file_failed(exc)
        try:
            while True:
                try:
                    read = await read_line(stream)
                except (ConnectionError, OSError) as exc:
                    log.debug("%s %s read error: %s", self.allocation_id, stdtype, exc)
                    break
                if read is None:
                    break
                text = cut(*read).encode("utf-8", errors="replace")
                if sink is not None:
                    try:
                        sink.write(text + b"\n")
                        sink.flush()
                    except OSError as exc:
                        self._file_failed(exc)
                        _close_quietly(sink)
                        sink = None
                self.add(parse_line(decode_line(text), stdtype))
        finally:
            if sink is not None:
                _close_quietly(sink)

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        self.flush()
