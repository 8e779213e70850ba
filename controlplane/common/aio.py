"""Small asyncio helpers shared by the master's background loops."""

from __future__ import annotations

import asyncio


async def wait_for_wake(wake: asyncio.Event, timeout_s: float) -> None:
    """Sleep until `wake` is set or `timeout_s` passes, then clear it for the next round.

    asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that lands as the
    event fires, and the master would never shut down."""
    try:
        async with asyncio.timeout(max(0.0, timeout_s)):
            await wake.wait()
    except TimeoutError:
        pass
    wake.clear()
