"""Reads a task's stdout/stderr and ships the lines in batches.

A batch goes to the outbox every ``interval`` seconds or as soon as ``max_lines`` lines are
waiting. Every line is also appended to ``<task dir>/logs/<stdtype>.log``. :meth:`close`
flushes the rest, so the caller can queue ``TaskExited`` strictly after the last batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from controlplane.wire.agent_protocol import LogLine, TaskLogs

from .log_parsing import decode_line, parse_line
from .outbox import Outbox

log = logging.getLogger(__name__)

READ_LIMIT = 1 << 20  # longest line read in one piece; longer ones are split


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

    def start(self) -> None:
        self._log_dir.mkdir(parents=True, exist_ok=True)
        self._ticker = asyncio.create_task(self._tick())

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
        """Read ``stream`` to EOF, one line at a time."""
        path = self._log_dir / f"{stdtype}.log"
        with open(path, "ab") as sink:
            while True:
                try:
                    raw = await stream.readline()
                except ValueError:  # line longer than the limit: take what is buffered
                    raw = await stream.read(READ_LIMIT)
                except (ConnectionError, OSError) as exc:
                    log.debug("%s %s read error: %s", self.allocation_id, stdtype, exc)
                    break
                if not raw:
                    break
                sink.write(raw if raw.endswith(b"\n") else raw + b"\n")
                sink.flush()
                self.add(parse_line(decode_line(raw), stdtype))

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        self.flush()
