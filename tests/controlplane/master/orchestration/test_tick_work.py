"""An idle tick's database work does not grow with the agents connected: before, the orphan reaper
read every live allocation once per connected agent at every tick (1,000 agents: 1,000 queries every
half second, under the lock every agent message waits on), so a cluster of 50 agents paid ten times
the statements of one of 5 for doing nothing. And a tick reads columns: before, the scheduling pass
built an ORM row of every live allocation and of its experiment (its config decoded once per
allocation) at every tick, the master's largest CPU cost at 100 agents.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from sqlalchemy import event

from controlplane.master.db.models import Base
from controlplane.master.orchestration import pai_jobs
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import FakeAgent, create_experiment

TICKS = 3


@pytest.fixture(autouse=True)
def no_idle_notebook_check(monkeypatch):
    """That check runs every few seconds, not every tick: left out, so each count is of ticks alone."""
    monkeypatch.setattr(pai_jobs, "IDLE_CHECK_S", float("inf"))


async def own_ticks(api, listen) -> None:
    """Runs TICKS of the orchestrator's ticks, ``listen(is_mine)`` wired around them; ``is_mine()`` says
    whether the code running now is one of them (not the orchestrator's loop nor another loop)."""
    ticks: set[asyncio.Task] = set()
    with listen(lambda: asyncio.current_task() in ticks):
        for _ in range(TICKS):
            task = asyncio.create_task(api.rt.orchestrator.tick())
            ticks.add(task)
            await task


async def statements_in_idle_ticks(api) -> int:
    """SQL statements the orchestrator's own ticks run."""
    for conn in api.rt.hub.connections.values():
        conn.registered_at -= 3600  # every agent is long past its orphan grace
    count = 0

    @contextlib.contextmanager
    def listen(is_mine):
        def counted(*_: object) -> None:
            nonlocal count
            count += is_mine()

        engine = api.rt.engine.sync_engine
        event.listen(engine, "before_cursor_execute", counted)
        try:
            yield
        finally:
            event.remove(engine, "before_cursor_execute", counted)

    await own_ticks(api, listen)
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


async def test_idle_ticks_with_running_trials_build_no_orm_rows(api):
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    await create_experiment(api)  # two trials, both running
    for _ in range(2):
        start = await agent.next_message()
        assert isinstance(start, wire.StartTask)
        await agent.start(start)
    loaded: list[str] = []

    @contextlib.contextmanager
    def listen(is_mine):
        def built(target: object, _context: object) -> None:
            if is_mine():
                loaded.append(type(target).__name__)

        event.listen(Base, "load", built, propagate=True)
        try:
            yield
        finally:
            event.remove(Base, "load", built)

    await own_ticks(api, listen)
    assert loaded == [], f"{TICKS} idle ticks built ORM rows: {sorted(set(loaded))} ({len(loaded)})"
