"""Turn one printed line into a :class:`LogLine` (rank and level prefixes).

Mirrors Determined's ``ship_logs.py``: a leading ``[rank=N] `` (added by wrap_rank) gives the
rank, and a following ``LEVEL: `` prefix (det's LOG_FORMAT) gives the level. The message keeps
the line as printed, prefixes included.
"""

from __future__ import annotations

import re
import time

from controlplane.wire.agent_protocol import LogLine

_RANK_RE = re.compile(r"^\[rank=(\d+)\] ?")
_LEVEL_RE = re.compile(r"^(TRACE|DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL):")
_LEVELS = {
    "TRACE": "LOG_LEVEL_TRACE",
    "DEBUG": "LOG_LEVEL_DEBUG",
    "INFO": "LOG_LEVEL_INFO",
    "WARNING": "LOG_LEVEL_WARNING",
    "WARN": "LOG_LEVEL_WARNING",
    "ERROR": "LOG_LEVEL_ERROR",
    "CRITICAL": "LOG_LEVEL_CRITICAL",
    "FATAL": "LOG_LEVEL_CRITICAL",
}


def decode_line(raw: bytes) -> str:
    """Bytes read from the pipe → text without the trailing newline."""
    return raw.decode("utf-8", errors="replace").rstrip("\r\n")


def parse_line(message: str, stdtype: str = "stdout", timestamp: float | None = None) -> LogLine:
    rank: int | None = None
    rest = message
    m = _RANK_RE.match(rest)
    if m:
        rank = int(m.group(1))
        rest = rest[m.end() :]
    level: str | None = None
    lm = _LEVEL_RE.match(rest)
    if lm:
        level = _LEVELS[lm.group(1)]
    return LogLine(
        timestamp=time.time() if timestamp is None else timestamp,
        message=message,
        stdtype=stdtype,
        rank=rank,
        level=level,
    )
