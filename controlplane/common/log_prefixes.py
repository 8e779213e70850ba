"""The rank and level a printed line announces, as Determined's ``ship_logs.py`` reads them.

A leading ``[rank=N] `` (what wrap_rank adds) names the worker; a following ``LEVEL: `` (Determined's
``LOG_FORMAT``, ``"%(levelname)s: [%(process)s] %(name)s: %(message)s"``) names the level. The agent
uses this to fill a line's rank and level, the master to print each once: ``[rank=0] || INFO: msg``,
never ``|| INFO: INFO: msg``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_RANK_RE = re.compile(r"^ ?\[rank=(\d+)\] ?")
_LEVEL_RE = re.compile(r"^ ?(TRACE|DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL): ?")
LEVELS = {
    "TRACE": "LOG_LEVEL_TRACE",
    "DEBUG": "LOG_LEVEL_DEBUG",
    "INFO": "LOG_LEVEL_INFO",
    "WARNING": "LOG_LEVEL_WARNING",
    "WARN": "LOG_LEVEL_WARNING",
    "ERROR": "LOG_LEVEL_ERROR",
    "CRITICAL": "LOG_LEVEL_CRITICAL",
    "FATAL": "LOG_LEVEL_CRITICAL",
}


class Prefixes(NamedTuple):
    rank: int | None
    level: str | None  # LOG_LEVEL_*
    rest: str  # the text after the prefixes


def split_prefixes(text: str) -> Prefixes:
    rank: int | None = None
    m = _RANK_RE.match(text)
    if m:
        rank, text = int(m.group(1)), text[m.end():]
    level: str | None = None
    lm = _LEVEL_RE.match(text)
    if lm:
        level, text = LEVELS[lm.group(1)], text[lm.end():]
    return Prefixes(rank, level, text)


def default_level(stdtype: str | None) -> str:
    """A line that names no level: stderr is an error stream (tracebacks), stdout information."""
    return "LOG_LEVEL_ERROR" if stdtype == "stderr" else "LOG_LEVEL_INFO"
