"""An agent that re-registers without an allocation it ran (its process died with it) has that
allocation declared lost once its grace has passed, and its trial runs again without spending a
restart; what it listed keeps running. The check is made once per registration, so a tick that
rolls back (a database blip) or an exit still waiting in the agent's inbox must not let it skip one.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from controlplane.common.timeutil import utcnow
from controlplane.master.db.models import Allocation
from controlplane.master.orchestration.orphans import ORPHAN_GRACE_S
from controlplane.state import allocation as A
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment, one_running_trial


async def state_of(api, alloc_id: str) -> tuple[str, str]:
    async with api.rt.sessions() as session:
        alloc = await session.get(Allocation, alloc_id)
    assert alloc is not None
    return alloc.state, alloc.exit_reason


async def placed_an_hour_ago(api) -> None:
    async with api.rt.sessions.begin() as session:
        await session.execute(update(Allocation).values(assigned_at=utcnow() - timedelta(hours=1)))


async def restarted(agent: FakeAgent, running: list[str]) -> None:
    """The agent comes back listing ``running``, its grace already over."""
    await agent.disconnect()
    await agent.register(running=running)
    assert agent.conn is not None
    agent.conn.registered_at -= ORPHAN_GRACE_S + 1


async def runs_again(agent: FakeAgent, lost: wire.StartTask) -> None:
    """The lost allocation's rank is killed, and its trial is placed again as a new allocation."""
    kill = await agent.next_message()
    assert isinstance(kill, wire.KillTask) and kill.allocation_id == lost.allocation_id, kill
    again = await agent.next_message()
    assert isinstance(again, wire.StartTask) and again.allocation_id != lost.allocation_id, again
    assert again.env["DET_TRIAL_ID"] == lost.env["DET_TRIAL_ID"]


async def test_an_allocation_the_agent_forgot_is_lost_and_its_trial_runs_again_what_it_listed_runs_on(api):
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    await create_experiment(api)  # two trials
    kept, forgot = await agent.next_message(), await agent.next_message()
    assert isinstance(kept, wire.StartTask) and isinstance(forgot, wire.StartTask)
    await agent.start(kept)
    await agent.start(forgot)
    await placed_an_hour_ago(api)

    await restarted(agent, running=[kept.allocation_id])
    await runs_again(agent, forgot)
    assert await state_of(api, forgot.allocation_id) == (A.TERMINATED, "agent agent-1 restarted without it")
    assert (await state_of(api, kept.allocation_id))[0] == A.RUNNING
    trial = (await api.get(f"/api/v1/trials/{forgot.env['DET_TRIAL_ID']}")).json()["trial"]
    assert trial["restarts"] == 0  # a lost agent costs no restart


async def test_a_check_whose_tick_rolled_back_is_made_again(api, monkeypatch):
    agent, start, _ = await one_running_trial(api)
    await placed_an_hour_ago(api)
    orch = api.rt.orchestrator
    blip = True
    checked_preemptions = orch._enforce_preemption_timeouts

    async def after_the_reaper(session) -> None:  # the step after the reaper fails: the tick rolls back
        if blip:
            raise RuntimeError("database blip")
        await checked_preemptions(session)

    monkeypatch.setattr(orch, "_enforce_preemption_timeouts", after_the_reaper)
    await restarted(agent, running=[])
    with pytest.raises(RuntimeError, match="blip"):
        await orch.tick()
    assert (await state_of(api, start.allocation_id))[0] == A.RUNNING  # rolled back with its tick
    assert agent.conn is not None and agent.conn.outbox.empty()  # and nothing was sent for it

    blip = False
    await runs_again(agent, start)


async def test_an_allocation_whose_exit_waits_in_the_inbox_is_not_lost_and_is_checked_again(api, monkeypatch):
    agent, start, _ = await one_running_trial(api)
    await placed_an_hour_ago(api)
    orch = api.rt.orchestrator
    waiting = {start.allocation_id}
    monkeypatch.setattr(api.rt.hub, "pending_exits", lambda: set(waiting))
    await restarted(agent, running=[])
    for _ in range(2):
        await orch.tick()
        assert (await state_of(api, start.allocation_id))[0] == A.RUNNING  # its exit is on its way

    waiting.clear()  # the exit was never applied (say): the allocation is an orphan after all
    await runs_again(agent, start)


async def test_work_placed_after_the_registration_is_not_an_orphan(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    assert agent.conn is not None
    agent.conn.registered_at -= ORPHAN_GRACE_S + 1  # registered long ago, checked with nothing on it
    await api.rt.orchestrator.tick()
    await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    for _ in range(2):
        await api.rt.orchestrator.tick()
    assert (await state_of(api, start.allocation_id))[0] == A.ASSIGNED  # not lost while its start is on its way
