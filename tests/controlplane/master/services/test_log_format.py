"""Log lines print as Determined's master prints them: each of rank and level once, the level read
from the text (a stderr traceback line that names none is an error, not information)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controlplane.common.log_prefixes import default_level, split_prefixes
from controlplane.master.db.models import TaskLog
from controlplane.master.services.logs import format_message

WHEN = datetime(2026, 11, 27, 12, 0, 0, 123456, tzinfo=UTC)


def line(log: str, *, level: str | None, rank: int | None = None, stdtype: str = "stdout") -> str:
    row = TaskLog(task_id="t", allocation_id="trial-1.alloc-0001", timestamp=WHEN, log=log, level=level,
                  rank_id=rank, stdtype=stdtype)
    return format_message(row)


@pytest.mark.parametrize(("log", "level", "rank", "stdtype", "printed"), [
    # Determined's LOG_FORMAT, as the harness prints it under wrap_rank.
    ("[rank=0] INFO: [3] root: msg\n", "LOG_LEVEL_INFO", 0, "stdout", "[rank=0] || INFO: [3] root: msg\n"),
    ("WARNING: [3] root: careful\n", "LOG_LEVEL_WARNING", None, "stderr", "|| WARNING: [3] root: careful\n"),
    # A traceback on stderr names no level: the agent leaves it unset and the master stores ERROR.
    ("Traceback (most recent call last):\n", "LOG_LEVEL_ERROR", None, "stderr",
     "|| ERROR: Traceback (most recent call last):\n"),
    ("plain print\n", None, None, "stdout", "|| INFO: plain print\n"),
    # A line that names another level than the stored one is shown as printed.
    ("ERROR: odd\n", "LOG_LEVEL_INFO", None, "stdout", "|| INFO: ERROR: odd\n"),
])
def test_each_prefix_prints_once(log, level, rank, stdtype, printed):
    out = line(log, level=level, rank=rank, stdtype=stdtype)
    assert out == "[2026-11-27T12:00:00.123456Z] loc-0001 " + printed, out


def test_prefixes_and_default_levels():
    assert split_prefixes("[rank=2] DEBUG: x") == (2, "LOG_LEVEL_DEBUG", "x")
    assert split_prefixes("no prefix: INFO: x") == (None, None, "no prefix: INFO: x")
    assert (default_level("stderr"), default_level("stdout"), default_level(None)) == (
        "LOG_LEVEL_ERROR", "LOG_LEVEL_INFO", "LOG_LEVEL_INFO")
