"""Turn one printed line into a :class:`LogLine` (rank and level prefixes).

Mirrors Determined's ``ship_logs.py`` (``controlplane/common/log_prefixes.py``): a leading ``[rank=N] ``
(added by wrap_rank) gives the rank, and a following ``LEVEL: `` prefix (det's LOG_FORMAT) gives the
level. The message keeps the line as printed, prefixes included; the master prints each prefix once.
"""

from __future__ import annotations

import time

from controlplane.common.log_prefixes import split_prefixes
from controlplane.wire.agent_protocol import LogLine


def decode_line(raw: bytes) -> str:
    """Bytes read from the pipe → text without the trailing newline."""
    return raw.decode("utf-8", errors="replace").rstrip("\r\n")


def parse_line(message: str, stdtype: str = "stdout", timestamp: float | None = None) -> LogLine:
    rank, level, _ = split_prefixes(message)
    return LogLine(
        timestamp=time.time() if timestamp is None else timestamp,
        message=message,
        stdtype=stdtype,
        rank=rank,
        level=level,
    )
