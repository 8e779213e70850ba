"""A task's disk quota: what it writes to the host's disk, measured while it runs.

A task writes to the host's disk in two places, its work dir and (for ``shared_fs`` storage) its
allocation's checkpoint staging directory; its ``/tmp`` and ``/dev/shm`` are tmpfs mounts the
sandbox sizes to the same quota. The agent sums the blocks the two directories hold every few
seconds and stops a task that holds more than its quota, saying so in the task's log, before one
trial can fill the disk every other task, the agent and its log shipper share. Measured like
Kubernetes' ephemeral-storage limit (a periodic walk, not a filesystem quota): a task can overshoot
by what it writes between two walks.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

CHECK_INTERVAL = 5.0
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"20G"``, ``"512M"``, ``"1.5GiB"`` or a byte count as bytes; raises ValueError naming it."""
    found = _SIZE.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"{text!r} is not a size (e.g. 20G, 512M, or a number of bytes)")
    return int(float(found.group(1)) * _UNITS[found.group(2).upper()])


def format_size(n: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if n >= _UNITS[unit]:
            return f"{n / _UNITS[unit]:.1f} {unit}iB"
    return f"{n} B"


def disk_usage(roots: Iterable[Path]) -> int:
    """Bytes of disk the files under ``roots`` hold (each inode once; links not followed).
    A file that vanishes while it is walked is skipped."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [str(r) for r in roots]
    while stack:
        path = stack.pop()
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


async def enforce(roots: list[Path], quota: int, on_exceeded: Callable[[int], Awaitable[None]],
                  interval: float = CHECK_INTERVAL) -> None:
    """Until cancelled: every ``interval`` seconds measure ``roots`` (in a worker thread) and call
    ``on_exceeded(used)`` once when they hold more than ``quota`` bytes."""
    while True:
        await asyncio.sleep(interval)
        used = await asyncio.to_thread(disk_usage, roots)
        if used > quota:
            await on_exceeded(used)
            return
