"""An idle tick's database work does not grow with the agents connected: before, the orphan reaper
read every live allocation once per connected agent at every tick (1,000 agents: 1,000 queries every
half second, under the lock every agent message waits on), so a cluster of 50 agents paid ten times
the statements of one of 5 for doing nothing.
"""

from __future__ import annotations

import asyncio

from sqlalchemy import event

from tests.controlplane.master.conftest import FakeAgent

TICKS = 3


async def statements_in_idle_ticks(api) -> int:
    """SQL statements the orchestrator's own ticks run (not its loop's, nor other loops')."""
    orch = api.rt.orchestrator
    for conn in api.rt.hub.connections.values():
        conn.registered_at -= 3600  # every agent is long past its orphan grace
    ticks: set[asyncio.Task] = set()
    count = 0

    def counted(*_: object) -> None:
        nonlocal count
        count += asyncio.current_task() in ticks

    engine = api.rt.engine.sync_engine
    event.listen(engine, "before_cursor_execute", counted)
    try:
        for _ in range(TICKS):
            task = asyncio.create_task(orch.tick())
            ticks.add(task)
            await task
    finally:
        event.remove(engine, "before_cursor_execute", counted)
    return count


async def test_idle_ticks_run_as_many_statements_with_50_agents_as_with_5(api):
    agents = [FakeAgent(api.rt, f"agent-{i}", slots=8) for i in range(50)]
    for agent in agents[:5]:
        await agent.register()
    with_5 = await statements_in_idle_ticks(api)
    for agent in agents[5:]:
        await agent.register()
    with_50 = await statements_in_idle_ticks(api)
    assert with_5 > 0, "nothing was counted: the listener sees no statement"
    assert with_50 == with_5, f"{TICKS} idle ticks ran {with_5} statements with 5 agents, {with_50} with 50"
