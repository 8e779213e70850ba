"""Every background loop of the master: a failed step is one log line and the loop goes on; a
database outage is logged once and waited out; a wake runs the next step early; stop stops it."""

from __future__ import annotations

import asyncio
import errno
import logging

from controlplane.master.background import BackgroundLoop
from controlplane.master.db.outage import DatabaseHealth


async def until(condition, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def test_a_failing_step_is_logged_each_time_and_the_loop_goes_on(caplog):
    calls = []

    async def step() -> None:
        calls.append(1)
        if len(calls) <= 2:
            raise ValueError("a bug in one pass")

    loop = BackgroundLoop("test pass", step, log=logging.getLogger("test.loop"), interval_s=0.01, run_first=True)
    with caplog.at_level(logging.ERROR, logger="test.loop"):
        loop.start()
        await until(lambda: len(calls) >= 4)
        await loop.stop()
    failures = [r for r in caplog.records if r.name == "test.loop"]
    assert [r.getMessage() for r in failures] == ["test pass failed", "test pass failed"]
    assert all(r.exc_info and "a bug in one pass" in str(r.exc_info[1]) for r in failures)
    assert not loop.running


async def test_an_unreachable_database_is_noted_once_and_the_steps_back_off(caplog):
    health = DatabaseHealth()
    times: list[float] = []
    clock = asyncio.get_running_loop().time

    async def step() -> None:
        times.append(clock())
        if len(times) <= 4:
            raise OSError(errno.ENOSPC, "No space left on device")

    loop = BackgroundLoop("test tick", step, log=logging.getLogger("test.loop"), interval_s=0.02, health=health,
                          backoff_max_s=0.2)
    with caplog.at_level(logging.ERROR):
        loop.start()
        await until(lambda: len(times) >= 5)
        await loop.stop()
    assert [r.name for r in caplog.records if r.levelno >= logging.ERROR] == ["controlplane.master.database"]
    assert health.cause is None and health.failures == 0  # the fifth step succeeded: back
    # each wait was the interval plus a backoff doubling from it: 0.02, 0.04, 0.08, 0.16 (sleeps never end early)
    assert times[4] - times[0] >= 4 * 0.02 + 0.02 + 0.04 + 0.08 + 0.16


async def test_a_wake_runs_the_next_step_before_the_interval():
    ran = asyncio.Event()

    async def step() -> None:
        ran.set()

    loop = BackgroundLoop("test tick", step, log=logging.getLogger("test.loop"), interval_s=3600)
    loop.start()
    loop.wake()
    async with asyncio.timeout(5):
        await ran.wait()
    await loop.stop()
