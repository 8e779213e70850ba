"""The master's own recent log lines, kept in memory for ``det master logs``.

A bounded ring (``CAPACITY`` records) fed by a handler on the root logger while the app runs
(installed and removed by the app's lifespan), so reading it never touches a file and memory
stays flat however long the master runs. Each record gets an increasing id, which is what
Determined's ``v1LogEntry.id`` and the ``offset`` of ``GET /api/v1/master/logs`` count.
The join token never enters the ring, even if some message were to carry it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime

CAPACITY = 5000
MAX_MESSAGE = 4096  # characters kept of one message (a traceback is cut, not the ring)
LEVELS = {logging.DEBUG: "LOG_LEVEL_DEBUG", logging.INFO: "LOG_LEVEL_INFO", logging.WARNING: "LOG_LEVEL_WARNING",
          logging.ERROR: "LOG_LEVEL_ERROR", logging.CRITICAL: "LOG_LEVEL_CRITICAL"}
MASK = "********"


@dataclass(frozen=True)
class Entry:
    id: int
    timestamp: str
    level: str
    message: str


class LogRing(logging.Handler):
    def __init__(self, capacity: int = CAPACITY, secrets: tuple[str, ...] = ()) -> None:
        super().__init__()
        self._entries: deque[Entry] = deque(maxlen=capacity)
        self._next = 1
        self._lock_ring = threading.Lock()
        self._secrets = tuple(s for s in secrets if s)
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)[:MAX_MESSAGE]
        except Exception:  # noqa: BLE001 - a bad format string must not break the caller's logging
            text = str(record.msg)[:MAX_MESSAGE]
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        level = LEVELS.get(record.levelno, "LOG_LEVEL_INFO" if record.levelno < logging.WARNING else "LOG_LEVEL_ERROR")
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z")
        with self._lock_ring:
            self._entries.append(Entry(self._next, stamp, level, text))
            self._next += 1

    def read(self, offset: int, limit: int) -> tuple[list[Entry], int]:
        """(entries, total kept): skip ``offset`` of the kept entries, or take the last ``-offset``;
        at most ``limit``."""
        with self._lock_ring:
            kept = list(self._entries)
        start = max(len(kept) + offset, 0) if offset < 0 else offset
        return kept[start:start + limit], len(kept)

    def install(self) -> None:
        logging.getLogger().addHandler(self)

    def uninstall(self) -> None:
        logging.getLogger().removeHandler(self)
