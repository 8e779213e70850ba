"""Agents as the admin API changes and lists them: a page of agents, enabling or disabling an agent
or one of its slots (preempting what runs there unless it may drain). The queries and the
preemptions live here; ``api/agents.py`` answers in Determined's shapes, the cluster page
(``webui/pages/cluster.py``) in HTML.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.autoscaling import consolidation
from controlplane.master.db.models import Agent, Allocation
from controlplane.master.errors import NotFound
from controlplane.master.orchestration import gang
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services.slot_use import slot_use
from controlplane.state import allocation as A

SlotUse = dict[str, dict[int, str]]  # agent id -> slot id -> the allocation holding it


async def page(rt: MasterRuntime, *, show_all: bool, offset: int, size: int) -> tuple[list[Agent], int, SlotUse]:
    """Agents by id: connected and within their reconnect window, or all; how many; slot use."""
    async with rt.sessions() as session:
        # the hub knows who is connected and who may still come back
        among = None if show_all else set(rt.hub.connections) | set(rt.hub.away_since)
        agents, total = await page_of(session, among, offset=offset, limit=size)
        return agents, total, await slot_use(session)


async def page_of(session: AsyncSession, agent_ids: Collection[str] | None, *, offset: int,
                  limit: int) -> tuple[list[Agent], int]:
    """A page by id of the agents among ``agent_ids`` (None: all), and how many of them there are."""
    q = select(Agent) if agent_ids is None else select(Agent).where(Agent.id.in_(agent_ids))
    total = await session.scalar(select(func.count()).select_from(q.subquery())) or 0
    agents = list((await session.scalars(q.order_by(Agent.id).offset(offset).limit(limit))).all())
    return agents, total


async def set_enabled(rt: MasterRuntime, agent_id: str, enable: bool, drain: bool) -> tuple[Agent, SlotUse]:
    """The agent takes new work or not; disabled without drain, its running work is preempted."""
    async with rt.orchestrator.transaction() as session:
        agent = await session.get(Agent, agent_id)
        if agent is None:
            raise NotFound(f"agent {agent_id} not found")
        agent.enabled, agent.draining = enable, (not enable and drain)
        if enable:  # a consolidation drain ends here: a later drain is the admin's
            await consolidation.end_drains(session, agent_id)
        if not enable and not drain:
            for alloc in (await session.scalars(select(Allocation).where(
                    Allocation.state.in_((A.ASSIGNED, A.RUNNING))))).all():
                if agent_id in gang.agents_of(alloc):
                    rt.orchestrator.request_preemption(alloc, f"agent {agent_id} disabled")
        use = await slot_use(session)
    rt.orchestrator.wake()
    return agent, use


async def set_slot(rt: MasterRuntime, agent_id: str, slot_id: int, enable: bool,
                   drain: bool) -> tuple[Agent, SlotUse]:
    """A disabled slot takes no new work (``orchestration/snapshot.py`` leaves it out); without
    drain, work running on it is preempted (it checkpoints and resumes elsewhere)."""
    async with rt.orchestrator.transaction() as session:
        agent = await session.get(Agent, agent_id)
        if agent is None:
            raise NotFound(f"agent {agent_id} not found")
        if slot_id not in {s["id"] for s in agent.slots or []}:
            raise NotFound(f"slot {slot_id} of agent {agent_id} not found")
        off = dict(agent.disabled_slots or {})
        if enable:
            off.pop(str(slot_id), None)
        else:
            off[str(slot_id)] = drain
        agent.disabled_slots = off
        use = await slot_use(session)
        running = use.get(agent_id, {}).get(slot_id)
        if not enable and not drain and running:
            alloc = await session.get(Allocation, running)
            if alloc is not None:
                rt.orchestrator.request_preemption(alloc, f"slot {slot_id} of agent {agent_id} disabled")
    rt.orchestrator.wake()
    return agent, use
