"""A cancellation anywhere inside the orchestrator's transaction gives back its lock and the
database's write turn: before, a cancel while the transaction waited for its write turn left the
lock held, and every later event, create and scheduling pass waited forever behind it.

The test takes every write turn itself, so the transaction waits there on either database.
"""

from __future__ import annotations

import asyncio
import contextlib

from sqlalchemy import text


def _free_turns(api) -> int:
    return api.rt.sessions._write_turn._value


async def test_a_transaction_cancelled_while_it_waits_for_the_write_turn_releases_the_lock(api):
    orch, turn = api.rt.orchestrator, api.rt.sessions._write_turn
    await orch._loop.stop()  # its ticks take the lock too: only this test's transactions hold it now
    held = _free_turns(api)
    for _ in range(held):  # every write turn taken (one on SQLite, PG_WRITE_SLOTS on PostgreSQL)
        await turn.acquire()

    async def event() -> None:
        async with orch.transaction():
            pass

    waiting = asyncio.create_task(event())
    async with asyncio.timeout(10):
        while not orch.lock.locked():  # it holds the lock and now waits for the write turn
            await asyncio.sleep(0.01)
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    for _ in range(held):
        turn.release()

    assert not orch.lock.locked(), "the cancelled transaction left the orchestrator's lock held"
    async with asyncio.timeout(10):  # the next event goes through
        async with orch.transaction() as session:
            assert (await session.execute(text("select 1"))).scalar() == 1


async def test_cancelling_at_every_await_inside_a_transaction_leaves_nothing_held(api):
    orch, turns = api.rt.orchestrator, _free_turns(api)
    await orch._loop.stop()

    async def event() -> None:
        async with orch.transaction() as session:
            await session.execute(text("select count(*) from experiments"))
            await asyncio.sleep(0)

    finished = False
    for steps in range(400):  # cancel after 0, 1, 2, ... loop steps, until one run is left to finish
        task = asyncio.create_task(event())
        for _ in range(steps):
            await asyncio.sleep(0)
        finished = task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for _ in range(500):  # give the engine's threads a moment to settle
            if not (orch.lock.locked() or _free_turns(api) != turns):
                break
            await asyncio.sleep(0.01)
        assert not orch.lock.locked(), f"lock held after a cancel at step {steps}"
        assert _free_turns(api) == turns, f"write turn held after a cancel at step {steps}"
        if finished:
            break
    assert finished, "the transaction never finished within 400 loop steps"
