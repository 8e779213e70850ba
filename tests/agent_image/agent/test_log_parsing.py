"""Rank and level prefixes are parsed into LogLine fields; the message is kept verbatim."""

from __future__ import annotations

import pytest

from agent_image.agent.log_parsing import decode_line, parse_line


@pytest.mark.parametrize(
    ("text", "rank", "level"),
    [
        ("[rank=0] INFO: hi", 0, "LOG_LEVEL_INFO"),
        ("[rank=12] WARNING: careful", 12, "LOG_LEVEL_WARNING"),
        ("ERROR: boom", None, "LOG_LEVEL_ERROR"),
        ("DEBUG: [123] x: y", None, "LOG_LEVEL_DEBUG"),
        ("CRITICAL: dead", None, "LOG_LEVEL_CRITICAL"),
        ("[rank=3] plain", 3, None),
        ("plain INFO: not a prefix", None, None),
        ("[rank=x] INFO: bad rank", None, None),
        ("", None, None),
    ],
)
def test_parse_line(text: str, rank: int | None, level: str | None) -> None:
    line = parse_line(text, "stderr", timestamp=1.5)
    assert line.message == text
    assert line.rank == rank
    assert line.level == level
    assert line.stdtype == "stderr"
    assert line.timestamp == 1.5


def test_decode_line_strips_newline_and_replaces_bad_utf8() -> None:
    assert decode_line(b"abc\r\n") == "abc"
    assert decode_line(b"\xffok\n") == "\ufffdok"
