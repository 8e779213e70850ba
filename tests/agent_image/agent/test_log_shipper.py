"""A task's very long line is shipped as its first part and a marker saying what was cut."""

from __future__ import annotations

import asyncio
import sys

from agent_image.agent.log_shipper import READ_LIMIT, LogShipper
from agent_image.agent.outbox import Outbox
from controlplane.common.log_lines import MAX_LINE_BYTES
from controlplane.wire.agent_protocol import TaskLogs

PRINT = r"""
import sys
out = sys.stdout.buffer
out.write(b"before\n")
out.write(b"a" * (50 * 1024 * 1024) + b"z\n")   # 50 MiB + 1 byte, one line
out.write("é".encode() * MAX + b"\n")            # 2 bytes a character: the cut falls inside one
out.write(b"b" * MAX + b"\n")                    # exactly the bound: kept whole
out.write(b"after")                              # the last line, no newline
"""


async def test_a_50_mb_line_keeps_its_first_part_and_says_how_much_was_cut(tmp_path):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PRINT.replace("MAX", str(MAX_LINE_BYTES)), stdout=asyncio.subprocess.PIPE,
        limit=READ_LIMIT)
    outbox = Outbox()
    shipper = LogShipper("alloc-1", outbox, tmp_path / "logs", interval=3600)
    shipper.start()
    assert proc.stdout is not None
    await asyncio.wait_for(shipper.pump(proc.stdout, "stdout"), 60)
    await proc.wait()
    await shipper.close()
    lines = [line.message for batch in list(outbox._items) if isinstance(batch, TaskLogs) for line in batch.lines]
    assert len(lines) == 5, [m[:40] for m in lines]
    before, long, accents, exact, after = lines
    assert (before, after) == ("before", "after")
    big = 50 * 1024 * 1024 + 1
    assert long == "a" * MAX_LINE_BYTES + f" ... [log line truncated: {big} bytes, kept the first {MAX_LINE_BYTES}]"
    assert accents == "é" * (MAX_LINE_BYTES // 2) + (
        f" ... [log line truncated: {2 * MAX_LINE_BYTES} bytes, kept the first {MAX_LINE_BYTES}]")
    assert exact == "b" * MAX_LINE_BYTES
    written = (tmp_path / "logs" / "stdout.log").read_text().splitlines()
    assert written == lines  # the task's log file on the agent holds the same lines


async def test_a_full_disk_stops_the_log_file_but_every_line_still_reaches_the_master(tmp_path, caplog):
    """ENOSPC on the task's log file (the data dir's disk full): said once, the pump goes on; before,
    the pump died ("Task exception was never retrieved") and the task's output was left unread."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "stdout.log").symlink_to("/dev/full")  # every write: OSError 28, No space left on device
    stream = asyncio.StreamReader()
    stream.feed_data(b"".join(b"line %d\n" % i for i in range(300)))
    stream.feed_eof()
    outbox = Outbox()
    shipper = LogShipper("alloc-1", outbox, logs, interval=3600)
    shipper.start()
    await asyncio.wait_for(shipper.pump(stream, "stdout"), 30)
    await shipper.close()
    lines = [line.message for batch in list(outbox._items) if isinstance(batch, TaskLogs) for line in batch.lines]
    assert lines == [f"line {i}" for i in range(300)]
    assert shipper.file_error is not None and shipper.file_error.errno == 28
    said = [r for r in caplog.records if "cannot write the task's log files" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
